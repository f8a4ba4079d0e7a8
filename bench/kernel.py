"""The correctly rounded default of lneps.layer_norm against plain float64 NumPy, on 4096 x 4096.

For each input format (float16, bfloat16, float32) and N(0, 1) rows: the plain two-pass
computation the issue names (``x.astype(float64)``, mean, variance, divide, cast back) and
``lneps.layer_norm(x)`` run alternately, RUNS times each; the figure is the median of the
per-pair ratios (load on a shared machine hits both members of a pair alike). Also reported:
the fallback rate (rows that needed the double-double tier, elements settled exactly) and the
peak memory the call allocates beyond its input and output, in float64 copies of the input
(tracemalloc sees NumPy's allocations).

Run by ``make bench``; alone: ``python bench/kernel.py`` prints JSON.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import tracemalloc

import ml_dtypes
import numpy as np

from lneps import kernel, layer_norm

SHAPE = (4096, 4096)
RUNS = 5
TARGETS = {"float16": 3.0, "bfloat16": 3.0, "float32": 5.0}


def plain(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    mu = x64.mean(axis=-1, keepdims=True)
    var = x64.var(axis=-1, keepdims=True)
    return ((x64 - mu) / np.sqrt(var + 1e-5)).astype(x.dtype)


def measure(dtype) -> dict:
    x = np.random.default_rng(4096).normal(size=SHAPE).astype(dtype)
    layer_norm(x)  # warm up (imports, page faults)
    pairs = []
    for _ in range(RUNS):
        t = time.perf_counter()
        plain(x)
        t_plain = time.perf_counter() - t
        t = time.perf_counter()
        layer_norm(x)
        pairs.append((t_plain, time.perf_counter() - t))
    counts: dict = {}
    tracemalloc.start()
    kernel.normalize(x.reshape(SHAPE), kind="layer", eps=1e-5, counts=counts)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    out_bytes = x.nbytes  # the result, which any implementation allocates
    return {
        "plain_s": statistics.median(p for p, _ in pairs),
        "lneps_s": statistics.median(k for _, k in pairs),
        "ratio": statistics.median(k / p for p, k in pairs),
        "ratios": [round(k / p, 3) for p, k in pairs],
        "double_double_rows": counts["double_double_rows"] / counts["rows"],
        "exact_elements": counts["exact_elements"],
        "elements": counts["elements"],
        "extra_memory_float64_copies": (peak - out_bytes) / (x.size * 8),
        "target": TARGETS[np.dtype(dtype).name],
    }


def main() -> int:
    results = {np.dtype(dt).name: measure(dt) for dt in (np.float16, ml_dtypes.bfloat16, np.float32)}
    json.dump(results, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
