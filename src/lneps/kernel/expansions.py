r"""Error-free transformations and double-double arithmetic on float64 arrays.

A double-double is an unevaluated sum ``hi + lo`` of two float64 numbers. The transformations
are exact in IEEE binary64 with round-to-nearest, barring overflow and (for products)
underflow:

* :func:`two_sum` (Knuth): ``s + e == a + b`` exactly, ``s = fl(a + b)``;
* :func:`two_prod` (Dekker, with Veltkamp's :func:`split`): ``p + e == a * b`` exactly,
  ``p = fl(a * b)``, for :math:`|a|, |b| < 2^{996}` and products above :math:`2^{-969}`;
* :func:`dd_mul`: a double-double product (not error-free: within about :math:`2^{-102}`
  relative);
* :func:`quantum_sum`: a row sum split into an exact part and a small rounded part with a
  proven bound (the rounding-to-a-quantum trick);
* :func:`expansion_sign`: the exact sign of a sum of a few floats.

Every function takes and returns NumPy arrays elementwise; none loops in Python over elements.
"""

from __future__ import annotations

import numpy as np

__all__ = ["U", "two_sum", "split", "two_prod", "two_prod_split", "two_square", "dd_mul", "pairwise_sum",
           "blocked_sum", "quantum_sum", "expansion_sign"]

U = 2.0**-53  # unit roundoff of float64: |fl(x) - x| <= U |x| for normal results
_SPLITTER = 134217729.0  # 2**27 + 1


def two_sum(a, b):
    """``(s, e)`` with ``s = fl(a + b)`` and ``s + e = a + b`` exactly (6 operations)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def split(a):
    """Veltkamp's split ``(hi, lo)``: ``hi + lo == a`` exactly, hi holding the top 26 bits and lo
    the rest (signed), so that products of halves are exact. ``lo == 0`` exactly when a has at
    most 26 significant bits, so that ``a * a`` is exact."""
    c = _SPLITTER * a
    hi = c - (c - a)
    return hi, a - hi


def two_prod(a, b):
    """``(p, e)`` with ``p = fl(a * b)`` and ``p + e = a * b`` exactly (17 operations)."""
    p = a * b
    ah, al = split(a)
    bh, bl = split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def two_prod_split(a, ah, al, b, bh, bl):
    """:func:`two_prod` with both factors already split (8 operations): for a factor reused
    across many products (a row's reciprocal square root, a column's gain)."""
    p = a * b
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def two_square(a, ah, al):
    """``(p, e)`` with ``p = fl(a * a)`` and ``p + e = a * a`` exactly, a already split (6
    operations): :func:`two_prod_split` of a with itself, its two cross products one doubled
    product (doubling is exact)."""
    p = a * a
    e = ah * ah
    e -= p
    t = ah * al
    t *= 2.0
    e += t
    np.multiply(al, al, out=t)
    e += t
    return p, e


def dd_mul(ah, al, bh, bl):
    """Double-double product ``(p, e)``, within about :math:`2^{-102}` relative of the exact
    :math:`(a_h + a_l)(b_h + b_l)` for normalized pairs (:math:`|a_l| \\le` ulp(:math:`a_h`)) with
    products far from underflow: one :func:`two_prod` of the high parts, the cross terms added
    once."""
    p, pe = two_prod(ah, bh)
    return two_sum(p, pe + (ah * bl + al * bh))


def pairwise_sum(hi, lo=None, axis: int = -1):
    r"""Double-double sum of ``hi + lo`` along ``axis`` by a pairwise tree of :func:`two_sum`.

    Returns ``(s, e, bound)`` with :math:`|s + e - \sum_i (hi_i + lo_i)| \le` ``bound``. The
    tree's :func:`two_sum` errors are exact and carried in ``e``; ``e`` is itself summed in
    float64 along the same tree of :math:`L = \lceil\log_2 n\rceil` levels, so its rounding
    error is at most :math:`\gamma_L` times the sum of the magnitudes it carried: the
    ``lo_i`` and every :func:`two_sum` error. ``bound`` is that, times 1.01; it is 0 when
    every partial sum was exact and ``lo`` is 0.
    """
    h = np.moveaxis(np.asarray(hi, dtype=np.float64), axis, -1)
    low = np.zeros_like(h) if lo is None else np.moveaxis(np.asarray(lo, dtype=np.float64), axis, -1)
    levels = max(h.shape[-1] - 1, 0).bit_length()
    carried = np.abs(low).sum(axis=-1)
    while h.shape[-1] > 1:
        if h.shape[-1] % 2:
            pad = [(0, 0)] * (h.ndim - 1) + [(0, 1)]
            h, low = np.pad(h, pad), np.pad(low, pad)
        s, e = two_sum(h[..., 0::2], h[..., 1::2])
        carried = carried + np.abs(e).sum(axis=-1)
        low = (low[..., 0::2] + low[..., 1::2]) + e
        h = s
    gamma = levels * U / (1 - levels * U)
    return h[..., 0], low[..., 0], 1.01 * gamma * carried


def blocked_sum(a):
    r"""Row sums of a 2-D array in two stages, ``(sums, n)``: sums of k consecutive pieces of
    about :math:`\sqrt m` columns, then the sum of those. Whatever order NumPy adds in, each
    result is within :math:`\gamma_n \sum_j |a_j|` with :math:`n = m/k + k - 2` roundings on
    any path (instead of m - 1)."""
    r, m = a.shape
    k = 1 << max(0, (m.bit_length() - 1) // 2)  # a power of two near sqrt(m)
    if m < 64 or m % k:
        return a.sum(axis=1), max(m - 1, 0)
    return a.reshape(r, k, m // k).sum(axis=2).sum(axis=1), m // k + k - 2


def quantum_sum(a, amax=None):
    r"""Sums along the last axis of a 2-D array as ``(H, L, bound)``: H exact, L rounded, H + L
    a double-double (:math:`|L| \le u|H|` unless H is 0), and
    :math:`|H + L - \sum_j a_j| \le` ``bound``.

    Each :math:`a_j` is rounded to a multiple :math:`h_j` of the row's quantum
    :math:`Q = 2^{e + c - 53}` (:math:`2^e > \max_j|a_j|`, :math:`2^c \ge 4m` for m columns)
    by adding and subtracting :math:`1.5 \cdot 2^{52} Q`; every partial sum of the
    :math:`h_j` is a multiple of Q below :math:`2^{52} Q`, so their sum is exact, and the rest
    :math:`l_j = a_j - h_j` is exact with :math:`|l_j| \le Q/2`. The rests are split once more
    the same way (quantum :math:`Q_2 = 2^{c-53} Q`, exact sum again), and the last rests, at
    most :math:`Q_2/2`, are summed in float64 (:func:`blocked_sum`), within
    :math:`1.01\,n u\, m Q_2/2`: about :math:`m^{3.5} 2^{-155} \max|a|`. The two exact sums
    are added by :func:`two_sum`, exactly. ``amax`` (per row, optional) is an upper bound of
    :math:`\max_j |a_j|` already known.
    """
    n, m = a.shape
    if amax is None:
        amax = np.abs(a).max(axis=1) if m else np.zeros(n)
    _, e = np.frexp(amax)
    c = int(4 * m - 1).bit_length()
    Q = np.maximum(np.ldexp(1.0, e + (c - 53)), 2.0**-1074)[:, None]
    Q2 = np.maximum(Q * 2.0 ** (c - 53), 2.0**-1074)
    h = a + 1.5 * 2.0**52 * Q
    h -= 1.5 * 2.0**52 * Q
    low = a - h
    h2 = low + 1.5 * 2.0**52 * Q2
    h2 -= 1.5 * 2.0**52 * Q2
    low -= h2
    H, H2 = two_sum(h.sum(axis=1), h2.sum(axis=1))
    L, roundings = blocked_sum(low)
    # H2 + L rounds once (u |H2 + L|), and L carries its sum's error
    low_sum = H2 + L
    return H, low_sum, 1.01 * roundings * U * m * 0.5 * Q2[:, 0] + U * np.abs(low_sum)


def expansion_sign(terms, passes: int = 8):
    r"""The exact sign (-1, 0, 1) of :math:`\sum_k` ``terms[k]`` elementwise, or 2 where
    ``passes`` rounds did not decide it.

    Each round is Ogita, Rump and Oishi's VecSum: a chain of :func:`two_sum` that leaves the
    float64 sum on top and every rounding error, exactly, below it, so the exact sum never
    changes. The sign is the top's once the rest is exactly zero or, summed with a margin for
    its own rounding, smaller than the top.
    """
    x = np.array(np.broadcast_arrays(*terms), dtype=np.float64)
    n = x.shape[0]
    sign = np.full(x.shape[1:], 2, dtype=np.int8)
    todo = np.ones(x.shape[1:], dtype=bool)
    for _ in range(passes):
        for i in range(1, n):
            x[i], x[i - 1] = two_sum(x[i], x[i - 1])
        top = x[-1]
        rest = np.abs(x[:-1]).sum(axis=0) * (1 + 2 * n * U)
        done = todo & ((rest == 0) | (np.abs(top) > rest))
        sign[done] = np.sign(top[done])
        todo &= ~done
        if not todo.any():
            break
    return sign
