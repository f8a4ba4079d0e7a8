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
    :math:`2^e \le |r| < 2^{e+1}`, floored at the smallest subnormal.

    >>> ulp([1.0, 1.5, 2.0, 0.0], np.float16)
    array([9.76562500e-04, 9.76562500e-04, 1.95312500e-03, 5.96046448e-08])
    """
    fi = _finfo(dtype)
    out = np.array(r, dtype=np.float64)  # a copy, worked on in place
    np.abs(out, out=out)
    bits = out.view(np.uint64)
    finite = bits < _INF_BITS
    # 2^floor(log2 |r|) is |r| with its fraction bits cleared (0 below float64's normal range)
    np.bitwise_and(bits, _EXPONENT, out=bits)
    out *= 2.0 ** -int(fi.nmant)
    np.maximum(out, 2.0 ** (int(fi.minexp) - int(fi.nmant)), out=out)
    if not np.all(finite):  # inf and NaN: as np.frexp reads them, exponent 0
        out = np.where(finite, out, 2.0 ** (max(-1, int(fi.minexp)) - int(fi.nmant)))
    return out


_EXPONENT = np.uint64(0x7FF0000000000000)
_INF_BITS = np.uint64(0x7FF0000000000000)


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
