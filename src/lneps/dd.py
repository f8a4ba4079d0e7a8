r"""Error-free transformations and double-double arithmetic on float64 arrays.

A double-double is an unevaluated sum ``hi + lo`` of two float64 numbers. The transformations
are exact in IEEE binary64 with round-to-nearest, barring overflow and (for products)
underflow:

* :func:`two_sum` (Knuth): ``s + e == a + b`` exactly, ``s = fl(a + b)``;
* :func:`two_prod` (Dekker, with Veltkamp's split): ``p + e == a * b`` exactly,
  ``p = fl(a * b)``, for :math:`|a|, |b| < 2^{996}` and products above :math:`2^{-969}`.

Every function takes and returns NumPy arrays elementwise; none loops in Python.
"""

from __future__ import annotations

import numpy as np

__all__ = ["U", "two_sum", "two_prod", "pairwise_sum"]

U = 2.0**-53  # unit roundoff of float64: |fl(x) - x| <= U |x| for normal results
_SPLITTER = 134217729.0  # 2**27 + 1


def two_sum(a, b):
    """``(s, e)`` with ``s = fl(a + b)`` and ``s + e = a + b`` exactly (6 operations)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _split(a):
    # Veltkamp: hi holds the top 26 bits of a, lo = a - hi the rest, both exact.
    c = _SPLITTER * a
    hi = c - (c - a)
    return hi, a - hi


def two_prod(a, b):
    """``(p, e)`` with ``p = fl(a * b)`` and ``p + e = a * b`` exactly (17 operations)."""
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


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
