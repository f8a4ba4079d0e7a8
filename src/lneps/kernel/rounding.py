r"""Rounding a float64 value to float16, bfloat16 or float32 once, and knowing when it is safe.

:func:`to_format` is round to nearest, ties to even, from a float64 value (NumPy's conversion,
with ``ml_dtypes``' double rounding of float64 to bfloat16 repaired); the formats registry owns
it (:func:`lneps.formats.to_format`), and the kernel's tiers import it from there.

:func:`near_boundary` says which estimates :math:`\hat y` with error bound
:math:`\delta` may round differently from the exact value they estimate: those with a
rounding boundary (a midpoint between two neighbouring numbers of the format) within
:math:`\delta`, and those whose interval holds 0, whose sign is then unknown. In the format's
normal range a boundary is a float64 number whose bits below the format's p significand bits
are exactly 1000...0, so the test reads the float64 bits. :func:`decide_float64` is the same
test for float64 results of a double-double estimate.

:func:`round_pair` rounds an exact unevaluated sum ``h + l`` (h the float64 nearest to it) to
any of these formats exactly, ties to even, 0 as +0.
"""

from __future__ import annotations

import numpy as np

from ..formats import NARROW, format_of, to_format
from . import expansions as dd

__all__ = ["FAST_FORMATS", "near_boundary", "decide_float64", "round_pair"]

FAST_FORMATS = NARROW  # the 16- and 32-bit formats of lneps.formats.REGISTRY
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32}


def near_boundary(y: np.ndarray, dtype, *, rel=None, delta=None) -> np.ndarray:
    r"""Boolean mask of the elements whose interval :math:`[\hat y - \delta, \hat y + \delta]`
    may hold a rounding boundary of ``dtype`` (float16, bfloat16 or float32), or 0, so that
    :func:`to_format` of :math:`\hat y` is not proven to equal the rounding of the exact value,
    sign included.

    The bound is ``rel * |y|`` (a scalar or an array broadcasting against y) or ``delta``
    (absolute); either should already hold a safety margin. Non-finite estimates or bounds are
    always flagged. Below the smallest normal number (zero included) the interval's two ends
    are rounded and compared, signs included; rounding is monotone, so equal ends prove the
    whole interval rounds alike. An unflagged estimate of exactly 0 therefore has bound 0: it
    is an exact zero.
    """
    dt = np.dtype(dtype)
    f = format_of(dt)
    shape = np.shape(y)
    yf = np.ascontiguousarray(y, dtype=np.float64).reshape(-1)
    k = 53 - f.p  # float64 fraction bits below the format's
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
    # (In low's buffer where it is one: a fresh array of this size costs page faults too.)
    e = np.bitwise_and(b, np.uint64(0x7FF0000000000000), out=low if low.dtype == b.dtype else None)
    e_tiny = np.float64(2.0**f.emin).view(np.uint64)
    e -= e_tiny
    special = e >= np.uint64(0x7FF0000000000000) - e_tiny
    if special.any():
        many = np.count_nonzero(special) * 4 > special.size  # (whole arrays beat gathering)
        idx = slice(None) if many else np.flatnonzero(special)
        yy = yf[idx]
        src = bound if np.ndim(bound) == 0 else bound[idx]
        dd_ = np.abs(yy) * src if delta is None else np.broadcast_to(src, yy.shape)
        with np.errstate(invalid="ignore", over="ignore"):
            # the ends, pushed a little further out lest y -/+ dd round back toward y
            lo, hi = yy - dd_, yy + dd_
            lo -= np.abs(lo) * 2.0**-51 + np.where(dd_ > 0, 2.0**-1074, 0.0)
            hi += np.abs(hi) * 2.0**-51 + np.where(dd_ > 0, 2.0**-1074, 0.0)
            # Below twice the smallest normal number the format's spacing is its smallest
            # subnormal q, so rounding is rint(v / q) (ties to even, sign kept); beyond, a cast.
            q = f.tiny
            if (np.maximum(np.abs(lo), np.abs(hi)) < 2 * 2.0**f.emin).all():
                lo, hi = np.rint(lo / q), np.rint(hi / q)
            else:
                lo, hi = to_format(lo, dt).astype(np.float64), to_format(hi, dt).astype(np.float64)
            # -0 == +0 numerically: the sign bits are compared too
            new = (lo != hi) | (np.signbit(lo) != np.signbit(hi)) | ~np.isfinite(yy) | ~np.isfinite(dd_)
        if many:
            flag = np.where(special, new, flag)
        else:
            flag[idx] = new
    if delta is not None and np.ndim(bound):
        flag |= ~np.isfinite(bound)
    return flag.reshape(shape)


def decide_float64(yh, yl, delta, fast_sum=False):
    r"""Round the double-double ``yh + yl`` to float64 and flag it unless the exact value it
    estimates (within ``delta``) is proven to round to the same float64 number, sign included.

    Returns ``(y, flags)``. With :math:`h = \mathrm{fl}(y_h + y_l)` and l the exact rest, the
    boundaries next to h are the midpoints :math:`h \pm \mathrm{ulp}(h)/2`; h is final when
    :math:`|l| + \delta < \mathrm{ulp}(h)/2`, ulp read from h's exponent bits. Powers of two
    (whose lower midpoint is nearer), subnormal results, 0 and non-finite values are flagged:
    rare, and settled exactly. ``fast_sum``: :math:`|y_l| \le |y_h|` is known, and Dekker's
    three-operation sum normalizes the pair.
    """
    if fast_sum:
        h = yh + yl
        l = yl - (h - yh)  # exact when |yl| <= |yh| (Fast2Sum)
    else:
        h, l = dd.two_sum(yh, yl)
    bits = h.view(np.uint64)
    top = bits & np.uint64(0x7FF0000000000000)  # 2^e, sign and fraction cleared
    half_ulp = top.view(np.float64) * 2.0**-53
    with np.errstate(invalid="ignore", over="ignore"):
        safe = (half_ulp - np.abs(l)) > delta * 1.01
        # a normal, finite h that is not a power of two
        safe &= (top - np.uint64(0x0010000000000000)) < np.uint64(0x7FE0000000000000)
        safe &= (bits & np.uint64((1 << 52) - 1)) != 0
    return h, ~safe


def _neighbour(r: np.ndarray, toward: np.ndarray, dt) -> np.ndarray:
    """The number of format ``dt`` next to ``r`` (in dt) on the side of ``toward`` (float64), as
    float64, by stepping the bits: +1 away from zero, -1 toward it."""
    dt = np.dtype(dt)
    if dt == np.float64:
        return np.nextafter(r, toward)
    bits = np.ascontiguousarray(r).view(_UINT[dt.itemsize]).astype(np.int64)
    sign = 1 << (8 * dt.itemsize - 1)
    mag = bits & (sign - 1)
    negative = (bits & sign) != 0
    rv = r.astype(np.float64)
    away = np.where(rv == 0, True, (toward > rv) != negative)
    mag = np.where(away, mag + 1, mag - 1)
    neg = np.where(rv == 0, toward < 0, negative)
    out = (mag | np.where(neg, sign, 0)).astype(_UINT[dt.itemsize]).view(dt)
    return out.astype(np.float64)


def round_pair(h: np.ndarray, l: np.ndarray, dtype) -> np.ndarray:
    r"""The number of ``dtype`` nearest to the exact :math:`h + l`, ties to even, returned in
    float64 (float64: in float64 itself), where h is the float64 number nearest to
    :math:`h + l` (as :func:`lneps.kernel.expansions.two_sum` leaves it). An exact 0 is +0; a nonzero sum that
    rounds to 0 keeps its sign.

    Rounding h itself is right unless h lies exactly on a boundary of the format (a midpoint,
    or the overflow threshold) and l is not 0: the exact sum is then off the boundary on l's
    side, and the neighbour on that side is the answer. Between h and :math:`h + l` there is
    no other boundary: boundaries are float64 numbers and :math:`|l|` is at most half a
    float64 spacing of h.
    """
    dt = np.dtype(dtype)
    h = np.asarray(h, dtype=np.float64) + 0.0  # -0 -> +0: h = 0 means h + l = 0 exactly
    if dt == np.float64:
        return h
    l = np.broadcast_to(np.asarray(l, dtype=np.float64), h.shape)
    r = to_format(h, dt)
    rv = r.astype(np.float64)
    fix = np.flatnonzero((l != 0) & (rv != h) & np.isfinite(h))
    if fix.size:
        hh, ll, rr = h.reshape(-1)[fix], l.reshape(-1)[fix], r.reshape(-1)[fix]
        other = _neighbour(rr, hh, dt)  # the format number on h's other side
        on_boundary = (hh - rr.astype(np.float64)) == (other - hh)  # exact: neighbours of h
        f = format_of(dt)
        threshold = f.largest + 2.0 ** (f.emax - f.p)  # the largest number plus half its spacing
        big = np.isinf(rr.astype(np.float64))
        on_boundary = np.where(big, np.abs(hh) == threshold, on_boundary)  # exactly the threshold
        beyond = np.where(big, np.sign(ll) != np.sign(hh), np.sign(ll) == np.sign(other - hh))
        out = rv.reshape(-1).copy()
        out[fix] = np.where(on_boundary & beyond, other, out[fix])
        return out.reshape(rv.shape)
    return rv
