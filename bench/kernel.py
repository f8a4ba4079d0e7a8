"""The correctly rounded default of lneps.layer_norm: its cost against plain float64 NumPy, on
typical and on worst-case input, and its memory.

* Typical: N(0, 1) rows of 4096 x 4096 in float16, bfloat16, float32 and float64, and float64
  rows of ROWS_SHAPE (8192 x 1024: shorter rows, the shape the float64 target was set on). The plain
  two-pass computation the issue names (``x.astype(float64)``, mean, ``v = x - mu``,
  ``v / sqrt(mean(v*v) + eps)``, cast back) and ``lneps.layer_norm(x)`` run alternately,
  RUNS times each; the figure is the median of the per-pair ratios (load on a shared machine
  hits both members of a pair alike). Also the fallback rates (rows whose statistics needed
  double-double, elements settled by the exact tier and, of those, by rational arithmetic)
  and the peak memory the call allocates beyond its input and output, in float64 copies of
  the input (tracemalloc sees NumPy's allocations).
* Worst cases: per format, families that leave the float64 tier (FAMILY_SHAPE rows): exact
  ties (half 1, half 3, eps = 0, beta half an ulp of 1), exact cancellation (the same rows,
  gamma 1.25, beta -1.25: half the results exactly 0), nearly constant rows (1 + N(0,1)
  spreads of 1e-3, or 1e-6 for 32- and 64-bit), offset rows (1e4 .. 1e7 + N(0, 1), below
  65504 for float16) and a cancelling bias (copies of one N(0, 1) row, beta minus its float64
  normalized values: each y is a rounding error of u). The figure is the median, over RUNS
  alternating pairs, of the per-element time of the family over that of N(0, 1) rows of the
  same format and shape, with the same gamma and beta; the target is 10.
* One row of 2**22 float32 numbers: time per element over the typical float32 one, and extra
  memory beyond input and output (the target: 128 MB).
* group_norm (8 groups, a gain and a bias per channel) and batch_norm (training, and at
  inference with stored statistics) on a float32 tensor of shape 64 x 64 x 64 x 64 (64 MB):
  time per element over the typical float32 layer_norm's, and extra memory (the same target).
* The correctly rounded backward pass (``lneps.kernel.gradients.layer_norm_gradients``: dx, dγ
  and dβ) on GRADIENT_SHAPE float32 rows with a gain: time per element over the typical
  float32 layer_norm's, against GRADIENT_TARGET (its exact integer arithmetic is budgeted two
  orders of magnitude above the forward pass), and extra memory (the same target).

Every entry has the keys bench/run.py renders (for the worst cases and the long row its
"plain" is lneps on N(0, 1) rows), and ``ratio_of_minima``, the fastest run of each: the
plain formula's 128 MB temporaries make its time jump when other work shares the machine.

Run by ``make bench``; alone: ``python bench/kernel.py`` prints JSON (``--quick`` for fewer runs,
and a smaller typical shape; ``--float64-rows`` for the 8192 x 1024 float64 figure alone).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import tracemalloc

import ml_dtypes
import numpy as np

from lneps import batch_norm, group_norm, kernel, layer_norm
from lneps.kernel.gradients import layer_norm_gradients

SHAPE = (4096, 4096)
ROWS_SHAPE = (8192, 1024)
FAMILY_SHAPE = (256, 4096)
LONG = 1 << 22
RUNS = 5
TARGETS = {"float16": 3.0, "bfloat16": 3.0, "float32": 5.0, "float64": 8.0}
FAMILY_TARGET = 10.0
LONG_MEMORY_TARGET = 128 * 2**20
NCHW = (64, 64, 64, 64)
GRADIENT_SHAPE = (64, 4096)
GRADIENT_TARGET = 100.0
FORMATS = (np.float16, ml_dtypes.bfloat16, np.float32, np.float64)


def plain(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    mu = x64.mean(axis=-1, keepdims=True)
    v = x64 - mu
    return (v / np.sqrt((v * v).mean(axis=-1, keepdims=True) + 1e-5)).astype(x.dtype)


def _timed(f) -> float:
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def _extra_memory(f, *, known: int) -> int:
    """Peak bytes allocated by f beyond ``known`` (its output), as tracemalloc sees them."""
    tracemalloc.start()
    f()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak - known


def typical(dtype, shape, runs) -> dict:
    """The typical entry: N(0, 1) rows of ``shape`` in ``dtype``, against plain float64."""
    x = np.random.default_rng(4096).normal(size=shape).astype(dtype)
    layer_norm(x)  # warm up (imports, page faults)
    pairs = [(_timed(lambda: plain(x)), _timed(lambda: layer_norm(x))) for _ in range(runs)]
    counts: dict = {}
    kernel.normalize(x.reshape(shape), kind="layer", eps=1e-5, counts=counts)
    extra = _extra_memory(lambda: layer_norm(x), known=x.nbytes)
    return _entry(statistics.median(p for p, _ in pairs), statistics.median(k for _, k in pairs),
                  [k / p for p, k in pairs], counts, extra, x.size, TARGETS[np.dtype(dtype).name],
                  ratio_of_minima=min(k for _, k in pairs) / min(p for p, _ in pairs),
                  shape=" x ".join(map(str, shape)))


def families(dtype, shape):
    """(name, x, gamma, beta, eps) for each worst-case family in ``dtype``."""
    n, d = shape
    half = float(ml_dtypes.finfo(dtype).eps) / 2  # half an ulp of 1
    rng = np.random.default_rng(7)
    ties = np.where(np.arange(d) < d // 2, 1.0, 3.0)[None, :].repeat(n, 0)
    spread = 1e-3 if np.dtype(dtype).itemsize == 2 else 1e-6
    top = min(7.0, np.log10(float(ml_dtypes.finfo(dtype).max) / 2))  # float16: below 65504
    offsets = 10.0 ** rng.uniform(4, top, (n, 1))
    # copies of one row, and beta = minus its float64 normalized values: y is u minus u rounded
    row = rng.normal(size=(1, d)).astype(dtype)
    r64 = row.astype(np.float64)
    v = r64 - r64.mean()
    cancel = -(v / np.sqrt((v * v).mean() + 1e-5))[0]
    return [
        ("exact ties", ties.astype(dtype), 1.0, half, 0.0),
        ("exact cancellation", ties.astype(dtype), 1.25, -1.25, 0.0),
        ("near-constant", (1 + spread * rng.normal(size=shape)).astype(dtype), None, None, 1e-5),
        ("offset", (offsets + rng.normal(size=shape)).astype(dtype), None, None, 1e-5),
        ("cancelling bias", row.repeat(n, 0), None, cancel, 1e-5),
    ]


def _entry(reference_s, measured_s, ratios, counts, extra_bytes, elements, target, **more) -> dict:
    """One result in the form bench/run.py renders: ``plain_s`` is the reference's time
    (medians), ``ratio`` the median of the pairs' ratios; ``more`` may add ``ratio_of_minima``
    (the fastest run of each, steadier when other work comes in bursts)."""
    return {"plain_s": reference_s, "lneps_s": measured_s, "ratio": statistics.median(ratios),
            "ratios": [round(r, 3) for r in ratios],
            "double_double_rows": counts["double_double_rows"] / counts["rows"],
            "exact_elements": counts["exact_elements"], "fraction_elements": counts["fraction_elements"],
            "triple_elements": counts["triple_elements"],
            "elements": counts["elements"], "extra_memory_float64_copies": extra_bytes / (elements * 8),
            "target": target, **more}


def worst_cases(dtype, shape, runs) -> dict:
    """Each family's per-element time over N(0, 1) rows' (same format, shape, gamma, beta)."""
    normal = np.random.default_rng(1).normal(size=shape).astype(dtype)
    out = {}
    for name, x, g, b, eps in families(dtype, shape):
        layer_norm(x, g, b, eps=eps)
        layer_norm(normal, g, b, eps=eps)
        pairs = [(_timed(lambda: layer_norm(normal, g, b, eps=eps)), _timed(lambda: layer_norm(x, g, b, eps=eps)))
                 for _ in range(runs)]
        counts: dict = {}
        kernel.normalize(x, kind="layer", eps=eps, gamma=None if g is None else np.float64(g),
                         beta=None if b is None else np.asarray(b, dtype=np.float64).reshape(1, -1), counts=counts)
        extra = _extra_memory(lambda: layer_norm(x, g, b, eps=eps), known=x.nbytes)
        label = f"{np.dtype(dtype).name} {name} rows {shape[0]} x {shape[1]}, per element over N(0,1) rows (not plain)"
        out[label] = _entry(statistics.median(p for p, _ in pairs), statistics.median(f for _, f in pairs),
                            [f / p for p, f in pairs], counts, extra, x.size, FAMILY_TARGET, family=name,
                            ratio_of_minima=min(f for _, f in pairs) / min(p for p, _ in pairs))
    return out


def long_row(reference_per_element: float) -> dict:
    """One float32 row of 2**22: time per element over N(0, 1) rows', and extra memory."""
    x = np.random.default_rng(22).normal(size=(1, LONG)).astype(np.float32)
    layer_norm(x[:, :4096])
    times = [_timed(lambda: layer_norm(x)) for _ in range(2)]
    counts: dict = {}
    kernel.normalize(x, kind="layer", eps=1e-5, counts=counts)
    extra = _extra_memory(lambda: layer_norm(x), known=x.nbytes)
    ratios = [t / (reference_per_element * LONG) for t in times]
    return {f"float32 one row of 2**22, per element over N(0,1) rows (not plain); extra memory {extra / 2**20:.1f} MB":
            _entry(reference_per_element * LONG, min(times), ratios, counts, extra, LONG, FAMILY_TARGET,
                   seconds=min(times), extra_memory_mb=extra / 2**20, memory_target_mb=LONG_MEMORY_TARGET / 2**20)}


def other_ops(reference_per_element: float) -> dict:
    """group_norm and batch_norm on NCHW float32: time per element over layer_norm's on N(0, 1)
    rows, and extra memory beyond input and output."""
    rng = np.random.default_rng(33)
    x = rng.normal(size=NCHW).astype(np.float32)
    C = NCHW[1]
    g, b = rng.normal(size=C).astype(np.float32), rng.normal(size=C).astype(np.float32)
    m, v = rng.normal(size=C), rng.uniform(0.5, 2.0, size=C)
    ops = {
        "group_norm, 8 groups, per-channel gain and bias": lambda: group_norm(x, 8, g, b),
        "batch_norm, training, over (N, H, W)": lambda: batch_norm(x, g, b, axis=(0, 2, 3)),
        "batch_norm, inference, over (N, H, W)": lambda: batch_norm(
            x, g, b, axis=(0, 2, 3), training=False, running_mean=m, running_var=v),
    }
    out = {}
    for name, f in ops.items():
        f()
        times = [_timed(f) for _ in range(2)]
        extra = _extra_memory(f, known=x.nbytes)
        reference = reference_per_element * x.size
        out[f"float32 {name}, {'x'.join(map(str, NCHW))}"] = {
            "op": name.split(",")[0], "plain_s": reference, "lneps_s": min(times),
            "ratio": statistics.median(t / reference for t in times), "ratios": [round(t / reference,
                                                                                       3) for t in times],
            "elements": x.size, "extra_memory_float64_copies": extra / (x.size * 8), "target": FAMILY_TARGET,
            "seconds": min(times), "extra_memory_mb": extra / 2**20, "memory_target_mb": LONG_MEMORY_TARGET / 2**20}
    return out


def backward(reference_per_element: float) -> dict:
    """layer_norm_gradients on float32 rows with a gain: time per element over layer_norm's on
    N(0, 1) rows, and extra memory beyond its inputs and outputs."""
    rng = np.random.default_rng(44)
    x, g = (rng.normal(size=GRADIENT_SHAPE).astype(np.float32) for _ in range(2))
    gamma = rng.normal(size=GRADIENT_SHAPE[1]).astype(np.float32)

    def f():
        return layer_norm_gradients(x, g, gamma, eps=1e-5)

    f()
    times = [_timed(f) for _ in range(2)]
    extra = _extra_memory(f, known=2 * x.nbytes + 2 * gamma.nbytes)
    reference = reference_per_element * x.size
    return {f"float32 layer_norm_gradients with a gain, {'x'.join(map(str, GRADIENT_SHAPE))} (dx, dgamma and dbeta)": {
        "op": "layer_norm_gradients", "plain_s": reference, "lneps_s": min(times),
        "ratio": statistics.median(t / reference for t in times), "ratios": [round(t / reference, 3) for t in times],
        "elements": x.size, "extra_memory_float64_copies": extra / (x.size * 8), "target": GRADIENT_TARGET,
        "seconds": min(times), "extra_memory_mb": extra / 2**20, "memory_target_mb": LONG_MEMORY_TARGET / 2**20}}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    quick = "--quick" in argv
    shape, runs = ((1024, 4096), 3) if quick else (SHAPE, RUNS)
    rows_entry = f"float64, {ROWS_SHAPE[0]} x {ROWS_SHAPE[1]}"
    if "--float64-rows" in argv:  # this one figure alone (about 10 s)
        json.dump({rows_entry: typical(np.float64, ROWS_SHAPE, max(runs, 7))}, sys.stdout)
        print()
        return 0
    # Every entry has the keys bench/run.py renders; for the worst cases and the long row the
    # reference (its "plain") is lneps itself on N(0, 1) rows, and the target 10.
    results = {np.dtype(dt).name: typical(dt, shape, runs) for dt in FORMATS}
    results[rows_entry] = typical(np.float64, ROWS_SHAPE, runs)
    for dt in FORMATS:
        results.update(worst_cases(dt, FAMILY_SHAPE, runs))
    f32 = results["float32"]
    results.update(long_row(f32["lneps_s"] / (shape[0] * shape[1])))
    results.update(other_ops(f32["lneps_s"] / (shape[0] * shape[1])))
    results.update(backward(f32["lneps_s"] / (shape[0] * shape[1])))
    json.dump(results, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
