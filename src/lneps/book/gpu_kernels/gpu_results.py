"""The stored grades of the GPU kernels (``src/lneps/book/data/gpu_kernels/grades.json``, made by
``tools/grade_gpu_kernels.py``), the grid they cover, and the tables the chapter shows. Reads
the file only: no torch, Triton or JAX needed.

A record is one output of one case: ``kernel``, ``op``, ``dtype``, ``family``, ``d``, ``rows``,
``eps``, ``direction`` (forward or backward), ``output`` (y, or the gradient: x, gamma, beta),
and its grade: ``passed`` (lneps.testing.assert_close with the derived bound), ``max_scaled``
and ``max_ulp`` (exact), ``correct`` of ``n`` elements correctly rounded, ``beyond`` elements
past the bound in ``rows_beyond`` rows, ``nan``, ``inf``, and ``sha256`` of the output's bytes.
JSON has no infinity: it is stored as the string ``"inf"``.

>>> GRID_FORWARD["d"]
(64, 768, 1000, 4096, 8192)
>>> len(grid()) > 100
True
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["SCHEMA", "DATA_FILE", "GRID_FORWARD", "GRID_BACKWARD", "NONE_D", "FORMAT_OF",
           "ROBUSTNESS", "ROBUSTNESS_FILE", "grid", "robustness_grid", "encode", "load",
           "load_robustness", "worst_by_kernel"]

SCHEMA = 1
DATA_FILE = Path(__file__).resolve().parents[1] / "data" / "gpu_kernels" / "grades.json"

#: the forward grid: every kernel in each of its formats, on these families and lengths
GRID_FORWARD = {"families": ("normal", "mean_1000", "near_constant"),
                "d": (64, 768, 1000, 4096, 8192), "rows": 64}
#: the backward grid: (d, rows) pairs, on these families
GRID_BACKWARD = {"families": ("normal", "mean_1000"), "shapes": ((768, 256), (4096, 64))}
#: the robustness re-run: the Triton kernels, re-graded under each unmodelled effect
ROBUSTNESS = {"kernels": ("liger_layer_norm", "liger_rms_norm_llama", "liger_rms_norm_gemma",
                          "liger_rms_norm_none", "two_pass"),
              "dtypes": ("float16", "float32"), "forward_d": (768, 4096), "backward_d": (768,),
              "rows": 64}
ROBUSTNESS_FILE = DATA_FILE.with_name("robustness.json")
#: the row lengths none mode's overflow threshold is searched at
NONE_D = (1, 64, 768, 4096, 8192)

#: the formats each kernel is graded in (kept here so the grid is known without the extra)
FORMAT_OF = {
    "liger_layer_norm": ("float16", "float32"),
    "liger_rms_norm_llama": ("float16", "float32"),
    "liger_rms_norm_gemma": ("float16", "float32"),
    "liger_rms_norm_none": ("float16", "float32"),
    "pallas_layer_norm": ("float16", "bfloat16", "float32"),
    "two_pass": ("float16", "float32"),
    "two_pass_16bit_partials": ("float16",),
    "torch_layer_norm": ("float16", "bfloat16", "float32"),
    "torch_rms_norm": ("float16", "bfloat16", "float32"),
}


def grid():
    """The cases, in the order they are graded: keyword dicts for ``gpu_runs.grade``. The forward
    pass of ``two_pass_16bit_partials`` is ``two_pass``'s, so it is graded backward only."""
    cases = []
    for kernel, formats in FORMAT_OF.items():
        for dtype in formats:
            if kernel != "two_pass_16bit_partials":
                for d in GRID_FORWARD["d"]:
                    for fam in GRID_FORWARD["families"]:
                        cases.append({"kernel": kernel, "dtype": dtype, "family": fam, "d": d,
                                      "rows": GRID_FORWARD["rows"], "direction": "forward"})
            for d, rows in GRID_BACKWARD["shapes"]:
                for fam in GRID_BACKWARD["families"]:
                    cases.append({"kernel": kernel, "dtype": dtype, "family": fam, "d": d,
                                  "rows": rows, "direction": "backward"})
    return cases


def robustness_grid():
    """The cases of the robustness re-run, each with its effect: keyword dicts for
    ``gpu_runs.regrade``."""
    R = ROBUSTNESS
    cases = []
    for kernel in R["kernels"]:
        for dtype in R["dtypes"]:
            for direction, ds, fams in (("forward", R["forward_d"], GRID_FORWARD["families"]),
                                        ("backward", R["backward_d"], ("normal",))):
                for d in ds:
                    for fam in fams:
                        for effect in ("warp_order_sum", "rsqrt_off_by_2"):
                            cases.append({"kernel": kernel, "dtype": dtype, "family": fam, "d": d,
                                          "rows": R["rows"], "direction": direction,
                                          "effect": effect})
    return cases


def encode(obj):
    """``obj`` with non-finite floats as strings, for JSON (the frameworks' stored files' rule)."""
    from lneps.book.frameworks import encode_nonfinite

    return encode_nonfinite(obj)


_FLOAT_KEYS = ("max_scaled", "max_ulp")


def load(path=DATA_FILE):
    """The stored file as a dict; ``max_scaled`` and ``max_ulp`` read back as floats."""
    data = json.loads(Path(path).read_text())
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: schema {data.get('schema')!r}, expected {SCHEMA}")
    for r in data["records"]:
        for k in _FLOAT_KEYS:
            r[k] = float(r[k])
    return data


def load_robustness(path=ROBUSTNESS_FILE):
    """The stored robustness re-run: ``{"provenance": ..., "records": [...]}``."""
    data = json.loads(Path(path).read_text())
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: schema {data.get('schema')!r}, expected {SCHEMA}")
    return data


def worst_by_kernel(records, direction="forward", output=None):
    """``{(kernel, dtype): (max_scaled, all passed, cases)}`` over the records of one direction
    (and one output, if given)."""
    out = {}
    for r in records:
        if r["direction"] != direction or (output is not None and r["output"] != output):
            continue
        key = (r["kernel"], r["dtype"])
        m, ok, n = out.get(key, (0.0, True, 0))
        out[key] = (max(m, r["max_scaled"]), ok and r["passed"], n + 1)
    return out
