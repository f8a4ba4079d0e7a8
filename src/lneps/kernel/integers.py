r"""Rows of floats as exact integers, and big integers back to float64 pairs: the arithmetic
under the correctly rounded gradients (:mod:`lneps.kernel.gradients`).

A row of finite float64 numbers is a row of integers times one power of two
(:func:`scaled_integers`), so sums and products of its entries are exact Python integers
(held in NumPy object arrays). Going back, a big integer N becomes a float64 pair
:math:`(m_h + m_l)\,2^e` within :math:`2^{-105}` relative (:func:`float_parts`,
:func:`product_parts`), and :math:`\sqrt{num/den}` one within :math:`2^{-104}`
(:func:`root_parts`), ready for the double-double products of
:mod:`lneps.kernel.expansions`.
"""

from __future__ import annotations

import math
from math import isqrt

import numpy as np

from . import expansions as dd

__all__ = ["scaled_integers", "float_parts", "product_parts", "root_parts"]


def scaled_integers(a: np.ndarray):
    """Rows of finite float64 ``a`` as integers with a common exponent per row: ``(X, e)``,
    X an object array of Python ints and e an int64 array, ``a[i] == X[i] * 2**e[i]`` exactly
    (e the lowest set bit's exponent of the row; 0 for a row of zeros)."""
    m, ex = np.frexp(a)
    M = np.ldexp(m, 53).astype(np.int64)  # a = M 2^(ex - 53), |M| < 2^53
    zero = M == 0
    low = M & -M  # the lowest set bit of |M|
    tz = np.frexp(low.astype(np.float64))[1].astype(np.int64) - 1
    tz[zero] = 0
    lsb = ex.astype(np.int64) - 53 + tz
    big = np.iinfo(np.int64).max
    e = np.where(zero, big, lsb).min(axis=1) if a.shape[1] else np.zeros(a.shape[0], np.int64)
    e = np.where(e == big, 0, e)
    odd = M >> tz  # exact: the bits shifted out are zero
    sh = np.where(zero, 0, lsb - e[:, None])
    small = sh <= 62 - 53  # |odd| < 2^53: the shifted value fits an int64
    X = np.where(small, odd << np.where(small, sh, 0), 0).astype(object)
    if not small.all():
        i = np.nonzero(~small)
        X[i] = odd[i].astype(object) << sh[i].astype(object)
    return X, e


def float_parts(N: np.ndarray, with_low: bool):
    """Python ints N (object array) as ``(mh, ml, e)``: N ~ (mh + ml) 2^e elementwise, mh the
    float64 rounding of N scaled into [0.5, 1) (0 for N = 0). Without ``with_low`` ml is None
    and :math:`|N - m_h 2^e| \\le 2^{-53}|N|`; with it :math:`|N - (m_h+m_l)2^e| \\le 2^{-105}|N|`."""
    try:
        h = N.astype(np.float64)  # correctly rounded (int.__float__)
    except OverflowError:  # beyond 2^1024: element by element
        return _float_parts_slow(N, with_low)
    m, e = np.frexp(h)
    e = e.astype(np.int64)
    if not with_low:
        return m, None, e
    M = np.ldexp(m, 53).astype(np.int64)  # h = M 2^(e - 53), an integer
    sh = e - 53
    neg = sh < 0
    hint = np.where(neg, M >> np.where(neg, np.minimum(-sh, 63), 0), M).astype(object)
    if (~neg).any():
        hint = hint << np.where(neg, 0, sh).astype(object)
    rest = (N - hint).astype(np.float64)  # |rest| <= 2^-53 |N|, rounded once more
    return m, np.ldexp(rest, -e), e


def _float_parts_slow(N, with_low):
    mh, ml, e = (np.zeros(N.shape), np.zeros(N.shape), np.zeros(N.shape, dtype=np.int64))
    for idx, v in np.ndenumerate(N):
        v = int(v)
        if v == 0:
            continue
        sign, A = (1 if v > 0 else -1), abs(v)
        sh = max(A.bit_length() - 200, 0)
        A >>= sh  # truncation: relative error below 2^-199
        h = float(A)
        low = float(A - int(h))
        m, k = math.frexp(h)
        mh[idx], ml[idx], e[idx] = sign * m, sign * math.ldexp(low, -k), k + sh
    return mh, (ml if with_low else None), e


def product_parts(G, eg, g, tau):
    """G tau (Python ints) as :func:`float_parts` with the low part: by one exact
    :func:`lneps.kernel.expansions.two_prod` when every tau fits 53 bits (G = g 2^-eg always does), else
    in integers."""
    try:
        tf = tau.astype(np.float64)
    except OverflowError:  # beyond 2^1024
        return float_parts(G * tau, True)
    Gf = np.ldexp(g, -eg[:, None])  # exact: G has at most 53 significant bits
    if np.abs(tf).max(initial=0.0) < 2.0**53 and np.abs(Gf).max(initial=0.0) < 2.0**900:
        p, pe = dd.two_prod(Gf, tf)  # exact: integers, no overflow
        m, e = np.frexp(p)
        return m, np.ldexp(pe, -e), e.astype(np.int64)
    return float_parts(G * tau, True)


def root_parts(num: int, den: int):
    r""":math:`\sqrt{num/den}` (positive integers) as ``(h, l, e)``: :math:`(h + l) 2^e` within
    :math:`2^{-104}` relative, h in [0.5, 1): an integer square root to 130 bits, then split."""
    k = max(0, (262 - (num.bit_length() - den.bit_length())) // 2 + 1)
    f = isqrt((num << (2 * k)) // den)  # sqrt(num 4^k / den) in [f, f + 1]: 2^-129 relative
    h = float(f)
    low = float(f - int(h))
    m, j = math.frexp(h)
    return m, math.ldexp(low, -j), j - k
