r"""What the frameworks are measured on, and how each output is scored.

The grid: every framework of :data:`FRAMEWORKS` runs each operation in every format of
:data:`DTYPES`, at every row length of :data:`DS` and epsilon of :data:`EPS_VALUES`, on
:func:`measurement_rows` (each family named as in :mod:`lneps.families`).
``tools/measure_frameworks.py`` runs them and records, per (operation, dtype, family, d, eps),
the :func:`output_digest` of the output and its :func:`error_summary` against the package's
default path (:func:`lneps.layer_norm` / :func:`lneps.rms_norm`, the format's value nearest to
the exact result).

Error summary
    ``correct``: outputs equal to the reference (correctly rounded). Elements whose reference is
    exactly 0 (an element equal to its row's mean, a constant row) are counted apart
    (``zero_ref``, ``zero_ref_wrong``, ``worst_abs_at_zero``): at 0 an ulp is the smallest
    subnormal and any nonzero answer would be "1e37 ulp" off. ``worst_ulp`` is the largest
    :func:`lneps.book.finite_precision.ulp_error` over the other elements, ``inf`` when an output is NaN or
    infinite there. ``worst_abs`` is the largest absolute error over finite outputs.
    ``worst_scaled`` is :func:`lneps.testing.compare`'s ``max_ulp_scaled`` for the same output:
    the error against the exact value in ulp of :math:`\max(|y_{\mathrm{exact}}|, 1)` (the rows
    have no gain, so s = 1), over every element, exact zeros included (there it is the error in
    ulp of 1), ``inf`` for a NaN or infinite output where the answer is finite.
    ``beyond_bound`` (layer norm in float16, bfloat16 and float32): how many outputs are
    further from the exact value than any correct two-pass float32 kernel can be
    (:func:`lneps.testing.two_pass_bound`): defects, not conditioning.
"""

from __future__ import annotations

import hashlib
import math

import ml_dtypes
import numpy as np

from ... import families as registry
from ..._checks import check_float_dtype
from ...formats import ulp as lneps_ulp
from ..finite_precision import family_rows, ulp_error

__all__ = [
    "FRAMEWORKS",
    "DTYPES",
    "DS",
    "EPS_VALUES",
    "ELEMENTS",
    "SEED",
    "HAND_ROWS",
    "measurement_rows",
    "hand_row",
    "error_summary",
    "output_digest",
]

FRAMEWORKS = ("torch", "flax", "onnxruntime", "onnx_reference")
DTYPES = ("float16", "bfloat16", "float32")
DS = (8, 100, 768, 4096)
EPS_VALUES = (1e-5, 1e-6, 1e-12)
ELEMENTS = 32768  # per family and d: ELEMENTS // d rows
SEED = 20261201

# The hand-made rows of lneps.families, one of each per d: name -> how to fill a row of d numbers.
HAND_ROWS = {name: registry.FAMILIES[name].description for name in registry.names("hand")}


def _dtype(name: str) -> np.dtype:
    return check_float_dtype(ml_dtypes.bfloat16 if name == "bfloat16" else name)


def hand_row(name: str, d: int) -> np.ndarray:
    """One hand-made row of ``d`` float64 numbers (:data:`HAND_ROWS`; :mod:`lneps.families`)."""
    if name not in HAND_ROWS:
        raise ValueError(f"name must be one of {list(HAND_ROWS)}; got {name!r}")
    return registry.draw(name, 0, d).x[0]


def measurement_rows(dtype: str, d: int) -> dict[str, np.ndarray]:
    """The inputs of one (dtype, d): ``{family: rows}``, stored in ``dtype``, every family named
    as in :mod:`lneps.families`.

    Each stress family of :data:`lneps.families.SURVEYED` gets ``ELEMENTS // d`` rows (at
    least 1), drawn from a generator seeded by (SEED, k, d), k its position there, so every
    dtype sees the same draws rounded to its format; each hand-made row (:data:`HAND_ROWS`)
    gets one row.
    """
    dt = _dtype(dtype)
    out = {}
    for k, family in enumerate(registry.SURVEYED):
        rng = np.random.default_rng([SEED, k, d])
        out[family] = family_rows(family, rng, max(ELEMENTS // d, 1), d, np.float64).astype(dt)
    for name in HAND_ROWS:
        out[name] = hand_row(name, d)[None, :].astype(dt)
    return out


def output_digest(y) -> str:
    """SHA-256 of the output's bytes (its own dtype, C order): equal digests, identical bits."""
    return hashlib.sha256(np.ascontiguousarray(y).tobytes()).hexdigest()


def error_summary(y, reference, dtype, *, x=None, op="layer_norm", eps=1e-5) -> dict:
    """Compare a framework's output ``y`` with the correctly rounded ``reference`` (same shape).

    Returns the counts and worst cases described in the module docstring, as Python numbers.
    With the input rows ``x`` (and the ``op``, ``"layer_norm"`` or ``"rms_norm"``, and ``eps``
    that made ``y``), ``worst_scaled`` is ``lneps.testing.compare(y, x, op=op,
    eps=eps).max_ulp_scaled``; without them it is measured against ``reference``.
    """
    dt = _dtype(dtype) if isinstance(dtype, str) else check_float_dtype(dtype)
    y64 = np.asarray(y).astype(np.float64)
    r64 = np.asarray(reference).astype(np.float64)
    if y64.shape != r64.shape:
        raise ValueError(f"y has shape {y64.shape}, the reference {r64.shape}")
    finite = np.isfinite(y64)
    zero = r64 == 0
    with np.errstate(invalid="ignore"):
        err = ulp_error(y64, r64, dt)
        absdiff = np.abs(y64 - r64)
    nonzero = ~zero
    beyond = None
    if x is not None:
        from ... import testing  # lneps.testing: the metric the chapter leads with

        report = testing.compare(np.asarray(y), x=np.asarray(x), op=op, eps=eps)
        scaled = report.max_ulp_scaled
        if op == "layer_norm" and dt != np.float64 and np.asarray(x).dtype == dt:
            # beyond what any correct two-pass float32 kernel can reach: a defect, not conditioning
            beyond = int(report.exceeding(testing.two_pass_bound(np.asarray(x), eps=eps)).sum())
    else:
        with np.errstate(invalid="ignore"):
            same = (y64 == r64) | (np.isnan(y64) & np.isnan(r64))
            fin = finite & np.isfinite(r64)
            s_err = np.where(fin, absdiff / lneps_ulp(np.fmax(np.abs(r64), 1.0), dt), np.where(same, 0.0, np.inf))
        scaled = float(s_err.max()) if s_err.size else 0.0
    return {
        "n": int(y64.size),
        "correct": int(np.sum(y64 == r64)),
        "within_1ulp": int(np.sum((err <= 1) & nonzero) + np.sum((y64 == 0) & zero)),
        "worst_ulp": float(err[nonzero].max()) if nonzero.any() else 0.0,
        "worst_abs": float(absdiff[finite].max()) if finite.any() else math.inf,
        "nan": int(np.isnan(y64).sum()),
        "inf": int(np.isinf(y64).sum()),
        "zero_ref": int(zero.sum()),
        "zero_ref_wrong": int(np.sum(zero & (y64 != 0))),
        "worst_abs_at_zero": float(absdiff[zero & finite].max()) if (zero & finite).any() else 0.0,
        "worst_scaled": float(scaled),
        **({} if beyond is None else {"beyond_bound": beyond}),
    }
