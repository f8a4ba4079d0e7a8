r"""The error of a result in units in the last place (ulp) of a format.

For a format with p significand bits, :math:`\operatorname{ulp}(r) = 2^{e-p+1}` where
:math:`2^e \le |r| < 2^{e+1}`, and never less than the smallest subnormal. Rounding to
nearest is then within 0.5 ulp of the value it rounds.
"""

from __future__ import annotations

import numpy as np

from .formats import _finfo

__all__ = [
    "ulp",
    "ulp_error",
    "worst_ulp_error",
]


def ulp(r, dtype) -> np.ndarray:
    r"""Spacing of ``dtype``'s numbers at :math:`|r|` (float64 array): :math:`2^{e-p+1}`,
    :math:`2^e \le |r| < 2^{e+1}`, floored at the smallest subnormal."""
    fi = _finfo(dtype)
    mag = np.abs(np.asarray(r, dtype=np.float64))
    _, exp = np.frexp(mag)  # |r| = m 2**exp with m in [0.5, 1); frexp(0) gives exp 0
    e = np.where(mag == 0, fi.minexp, np.maximum(exp - 1, fi.minexp))
    return np.ldexp(1.0, e - fi.nmant)

def ulp_error(result, reference, dtype) -> np.ndarray:
    """``|result - reference|`` in ulps of ``dtype`` at the (finite, float64) reference.

    A NaN or infinite result where the reference is finite counts as an infinite error.
    """
    res = np.asarray(result).astype(np.float64)
    ref = np.asarray(reference, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        err = np.abs(res - ref) / ulp(ref, dtype)
    return np.where(np.isfinite(res) | ~np.isfinite(ref), err, np.inf)

def worst_ulp_error(result, reference, dtype) -> float:
    """The largest :func:`ulp_error` (a Python float; ``inf`` if any output is NaN or inf)."""
    return float(np.max(ulp_error(result, reference, dtype)))
