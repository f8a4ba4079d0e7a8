r"""Tier A of the kernel, in float64 arithmetic: which 16- and 32-bit rows it can prove, and
their :math:`t_i = d\,x_i - \sum_j x_j` computed exactly (or rounded once).

A float16, bfloat16 or float32 row is a set of multiples of its smallest spacing Q; when
:math:`2d\max|x| < 2^{53}Q` the float64 sum and every :math:`t_i` are exact, and rows with a
few tiny elements are split into a high and a low part whose sums are exact
(:func:`row_kinds`). The driver (:mod:`lneps.kernel.driver`) does the rest of the tier.
"""

from __future__ import annotations

import numpy as np

from ..formats import format_of


def _row_kinds(xin: np.ndarray, chunks=None):
    """``(exact, split, finite)`` of :func:`row_kinds`."""
    return row_kinds(xin, chunks)[:3]


def row_kinds(xin: np.ndarray, chunks=None):
    r"""Which rows tier A can prove, and how: ``(exact, split, finite)`` boolean masks.

    Every element and every partial sum of a row is a multiple of Q, the spacing at its
    smallest nonzero magnitude. *exact*: :math:`2d\max|x| < 2^{53}Q`, so the float64 sum
    and every :math:`t_i = d x_i - S` are exact. *split*: each :math:`x_i = h_i + l_i`, with
    :math:`h_i` rounded to a multiple of :math:`Q_h = 2^{k-c}` (:math:`2^k > \max|x|`,
    :math:`2^c = 2^{52}/(2d)` rounded down to a power of two) and :math:`|l_i| \le Q_h/2`;
    the sums of the h and of the l, and :math:`d h_i - S_h`, :math:`d l_i - S_l`, are exact when
    :math:`d\,Q_h < 2^{53}Q`: rows whose tiny elements make the first test fail (a float32
    row of N(0,1) numbers holding a 1e-6). *finite*: no inf or NaN.
    """
    n, d = xin.shape
    dt = xin.dtype
    chunks = [(0, d)] if chunks is None else chunks
    width = dt.itemsize * 8
    uint = np.dtype(f"u{dt.itemsize}").type  # the format's bits as an unsigned integer
    inf_bits = int(np.array(np.inf, dtype=dt).view(uint))
    # float16 rows up to 4096 long need no smallest magnitude: 2 d 65504 < 2^53 2^-24 always
    every_exact = dt == np.float16 and d <= 4096
    smallest = np.full(n, np.iinfo(uint).max, dtype=uint)
    largest = np.zeros(n, dtype=uint)
    for c0, c1 in chunks:
        mag = xin[:, c0:c1].view(uint) & uint((1 << (width - 1)) - 1)
        np.maximum(largest, mag.max(axis=1), out=largest)
        if not every_exact:
            mag[mag == 0] = np.iinfo(uint).max
            np.minimum(smallest, mag.min(axis=1), out=smallest)
    finite = largest < inf_bits
    top = np.where(finite, largest, 0).astype(uint).view(dt).astype(np.float64)  # max |x|
    if every_exact:
        return finite, np.zeros(n, dtype=bool), finite, top
    nmant = format_of(dt).p - 1  # stored significand bits
    bias = (1 << (width - 2 - nmant)) - 1
    exp_field = np.maximum((smallest >> nmant).astype(np.int64), 1)
    spacing = np.ldexp(1.0, exp_field - bias - nmant)
    with np.errstate(invalid="ignore", over="ignore"):
        exact = (2.0 * d * top < 2.0**53 * spacing) | (top == 0)
        split = ~exact & (d * split_quantum(top, d) < 2.0**53 * spacing)
    return exact & finite, split & finite, finite, top


def split_quantum(largest, d):
    r""":math:`Q_h = 2^{k-c}`: with :math:`2^k > \max|x|`, :math:`2d \cdot 2^k \le 2^{53} Q_h`."""
    _, k = np.frexp(largest)  # largest < 2**k
    c = 52 - int(2 * d - 1).bit_length()  # 2^c <= 2^52 / (2d)
    return np.ldexp(1.0, k - c)


def halves(x, Qh):
    """x = h + low exactly, h a multiple of Qh (adding and subtracting C rounds to ulp(C) = Qh)."""
    C = 1.5 * 2.0**52 * Qh[:, None]
    h = (x + C) - C
    return h, x - h


def t_of(x, kind, d, S, split, Sp, Qh):
    r""":math:`t = d x - S` in place of the float64 chunk x (exact rows), or rounded once from
    its exact value in split rows: :math:`(d h - S_h) + (d l - S_l)`, each part exact."""
    if kind == "rms":
        return x
    parts = None if split is None else halves(x[split], Qh)
    x *= d
    x -= S[:, None]  # exact (_row_kinds)
    if parts is not None:
        h, low = parts
        x[split] = (h * d - Sp[0][:, None]) + (low * d - Sp[1][:, None])
    return x
