r"""Rounding a float64 value to float16, bfloat16 or float32 once, and knowing when it is safe.

:func:`to_format` is round to nearest, ties to even, from a float64 value: NumPy's float64 to
float16 and float32 conversions already are; ``ml_dtypes`` converts float64 to bfloat16
through float32, rounding twice, which :func:`to_format` repairs: the only double-rounding
cases are those where the float32 value lands exactly on a bfloat16 midpoint, and there one
float32 step toward the float64 value decides the side.

:func:`near_boundary` says which estimates :math:`\hat y` with error bound
:math:`\delta` may round differently from the exact value they estimate: those with a
rounding boundary (a midpoint between two neighbouring numbers of the format) within
:math:`\delta`. In the format's normal range a boundary is a float64 number whose bits below
the format's p significand bits are exactly 1000...0, so the test reads the float64 bits.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

__all__ = ["FAST_FORMATS", "to_format", "near_boundary"]

FAST_FORMATS = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32))
_BF16 = np.dtype(ml_dtypes.bfloat16)


def to_format(y: np.ndarray, dtype) -> np.ndarray:
    """float64 ``y`` rounded once to ``dtype`` (float16, bfloat16 or float32), ties to even."""
    dt = np.dtype(dtype)
    if dt != _BF16:
        with np.errstate(over="ignore"):
            return y.astype(dt)
    with np.errstate(over="ignore"):
        r32 = y.astype(np.float32)
    tie = (r32.view(np.uint32) & 0xFFFF) == 0x8000  # exactly between two bfloat16 numbers
    if tie.any():
        idx = np.nonzero(tie)
        exact, rounded = y[idx], r32[idx]
        toward = np.where(exact > rounded, np.float32(np.inf), np.float32(-np.inf))
        r32[idx] = np.where(exact == rounded, rounded, np.nextafter(rounded, toward))
    return r32.astype(_BF16)


def near_boundary(y: np.ndarray, dtype, *, rel=None, delta=None) -> np.ndarray:
    r"""Boolean mask of the elements whose interval :math:`[\hat y - \delta, \hat y + \delta]`
    may hold a rounding boundary of ``dtype`` (float16, bfloat16 or float32), so that
    :func:`to_format` of :math:`\hat y` is not proven to equal the rounding of the exact value.

    The bound is ``rel * |y|`` (a scalar or an array broadcasting against y) or ``delta``
    (absolute); either should already hold a safety margin. Non-finite estimates or bounds are
    always flagged. Below the smallest normal number (zero included) the interval's two ends
    are rounded and compared; rounding is monotone, so equal ends prove the whole interval
    rounds alike.
    """
    dt = np.dtype(dtype)
    fi = ml_dtypes.finfo(dt)
    shape = np.shape(y)
    yf = np.ascontiguousarray(y, dtype=np.float64).reshape(-1)
    k = 52 - int(fi.nmant)  # float64 fraction bits below the format's
    half = 1 << (k - 1)
    b = yf.view(np.uint64)
    bound = rel if delta is None else delta
    bound = bound if np.ndim(bound) == 0 else np.broadcast_to(bound, shape).reshape(-1)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        # the bound in float64 ulps of y (|y| < 2^53 ulp(y)), plus 2 for the roundings here
        ulps = (bound if delta is None else bound / np.abs(yf)) * 2.0**53
        ulps = np.minimum(ulps, 2.0**61) + 2
    # A boundary of the binade below a power of two is only half as far away: a window wider
    # than a quarter of the spacing is flagged whatever the bits say.
    if np.ndim(ulps) == 0:
        if ulps >= half // 4:
            return np.ones(shape, dtype=bool)
        K = int(ulps)
        # |low - half| <= K, as one unsigned comparison: low - (half - K) <= 2K
        low = b & np.uint64((1 << k) - 1)
        low -= np.uint64(half - K)
        flag = low <= np.uint64(2 * K)
    else:
        low = (b & np.uint64((1 << k) - 1)).astype(np.int64)
        flag = (np.abs(low - half) <= ulps) | (ulps >= half // 4)
    # Exponent fields below the format's normal range (zero included), or inf/NaN: checked apart.
    e = b & np.uint64(0x7FF0000000000000)
    e_tiny = np.float64(fi.smallest_normal).view(np.uint64)
    e -= e_tiny
    special = np.flatnonzero(e >= np.uint64(0x7FF0000000000000) - e_tiny)
    if special.size:
        yy = yf[special]
        src = bound if np.ndim(bound) == 0 else bound[special]
        dd = np.abs(yy) * src if delta is None else np.broadcast_to(src, yy.shape)
        with np.errstate(invalid="ignore", over="ignore"):
            # one float64 step further out, lest y -/+ dd round back onto y
            lo = to_format(np.where(dd > 0, np.nextafter(yy - dd, -np.inf), yy), dt).astype(np.float64)
            hi = to_format(np.where(dd > 0, np.nextafter(yy + dd, np.inf), yy), dt).astype(np.float64)
        flag[special] = (lo != hi) | ~np.isfinite(yy) | ~np.isfinite(dd)
    if delta is not None and np.ndim(bound):
        flag |= ~np.isfinite(bound)
    return flag.reshape(shape)
