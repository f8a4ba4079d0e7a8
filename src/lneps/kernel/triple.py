r"""Triple precision for results that double-double cannot decide.

Double-double evaluates :math:`y = \gamma u + \beta` to about :math:`2^{-100}|\gamma u|`. That
decides a float64 result unless y is much smaller than :math:`\gamma u`: a bias cancelling
:math:`\gamma u` to its last bits (:math:`\beta = -\mathrm{fl}(\gamma u)`, where y is about
:math:`2^{-53}|\gamma u|`), or an element within :math:`2^{-50}` of its row's mean. For those
rows (:class:`TripleRows`), with integer arithmetic nowhere but once per row:

1. The row sum S is exact as a few floats: each level rounds what is left to a multiple of a
   quantum that keeps every partial sum exact (:func:`level_sums`), until nothing is left.
2. Every :math:`t_i = d x_i - S` is exact as a float pair :math:`t_h + t_l` (the exact
   expansion :math:`d x_i - \sum S_k`, renormalized by :func:`lneps.kernel.expansions.two_sum` passes).
3. :math:`T = \sum t_i^2` is a few floats plus a part rounded within :math:`2^{-150} T`:
   :func:`lneps.kernel.expansions.two_prod` of :math:`t_h^2` and :math:`t_h t_l`, each part summed by levels.
4. :math:`r = 1/\sqrt{s}`, :math:`s = T/d + d^2\varepsilon` (RMS norm: :math:`t = x`,
   :math:`s = T/d + \varepsilon`), from the exact rational s by an integer square root to 170
   bits, as three floats.
5. Per element, :math:`\gamma t r + \beta` as an exact sum of ten floats (products by
   :func:`lneps.kernel.expansions.two_prod`) with an error below :math:`2^{-140}|\gamma t r|`, compressed by
   :func:`lneps.kernel.expansions.two_sum` passes, and rounded by :func:`lneps.kernel.rounding.decide_float64` (or
   :func:`lneps.kernel.rounding.near_boundary` for 16- and 32-bit results) with the rest of the
   expansion in its bound.

What this cannot decide lies within :math:`2^{-140}` of a float64 midpoint or of 0, and is left
to rational arithmetic.
"""

from __future__ import annotations

from fractions import Fraction
from math import isqrt

import numpy as np

from . import expansions as dd
from ..formats import to_format
from .rounding import decide_float64, near_boundary

__all__ = ["TripleRows", "level_sums"]

U = dd.U


def level_sums(blocks, n, d, k=1, levels=4):
    r"""Exact row sums of k arrays as ``(parts, ok)``: ``sum(parts[j])`` is the exact sum of
    array j in each row where ``ok[j]``. ``blocks()`` yields ``(rows, [a_0, ..., a_{k-1}])``
    pieces covering the rows (2-D float64 arrays); it is read levels + 1 times. Each level
    finds the largest magnitude left, Q with :math:`4d \max < 2^{53} Q`, rounds what is left
    to multiples of Q (their sum exact) and keeps the rest for the next level. Q is formed
    from the exponents, never from :math:`4d \max` itself (which overflows near the top of
    the range); rows whose Q would make :math:`1.5 \cdot 2^{52} Q` overflow (magnitudes
    within a factor of about 8d of the largest float64) are not ``ok``."""
    Qs = [[] for _ in range(k)]
    parts = [[] for _ in range(k)]
    c = int(4 * d - 1).bit_length()  # 2^c >= 4d
    unfit = [np.zeros(n, dtype=bool) for _ in range(k)]

    def left(v, j):
        for Q in Qs[j]:  # what the previous levels left (each rounding is exact)
            C = 1.5 * 2.0**52 * Q
            v = v - ((v + C) - C)
        return v

    M = [np.zeros(n) for _ in range(k)]
    for rows, vs in blocks():
        for j in range(k):
            np.maximum(M[j][rows], np.abs(vs[j]).max(axis=1), out=M[j][rows])
    for _ in range(levels):
        active = [j for j in range(k) if M[j].any()]
        if not active:
            break
        Q = {}
        for j in active:
            _, e = np.frexp(M[j])  # M < 2^e, so 4 d M < 2^(e + c) = 2^53 Q
            qe = e.astype(np.int64) + (c - 53)
            unfit[j] |= qe > 969  # 1.5 2^52 Q would overflow: not this row
            M[j] = np.where(qe > 969, 0.0, M[j])
            Q[j] = np.ldexp(1.0, np.clip(qe, -1074, 969))[:, None]
        totals = {j: np.zeros(n) for j in active}
        rest = {j: np.zeros(n) for j in active}
        for rows, vs in blocks():
            for j in active:
                C = 1.5 * 2.0**52 * Q[j][rows]
                with np.errstate(over="ignore", invalid="ignore"):  # (only in rows not ok)
                    r = left(vs[j], j)
                    h = (r + C) - C
                    totals[j][rows] += h.sum(axis=1)
                    np.maximum(rest[j][rows], np.abs(r - h).max(axis=1), out=rest[j][rows])
        for j in active:
            Qs[j].append(Q[j])
            parts[j].append(totals[j])
            M[j] = rest[j]
    return parts, [(M[j] == 0) & ~unfit[j] for j in range(k)]


def _pair(terms, passes=3):
    """An exact sum of a few floats as a float pair ``(h, l)`` (h nearest), and where that
    was reached: after ``passes`` two_sum chains all but the top two terms are 0."""
    x = list(np.broadcast_arrays(*terms))
    for _ in range(passes):
        for i in range(1, len(x)):
            x[i], x[i - 1] = dd.two_sum(x[i], x[i - 1])
    ok = np.ones(x[0].shape, dtype=bool)
    for v in x[:-2]:
        ok &= v == 0
    h, l = dd.two_sum(x[-1], x[-2])
    return h, l, ok


class TripleRows:
    r"""Row statistics to about :math:`2^{-150}` (see the module docstring) of the rows ``xr``
    (float64 values), read in column ``chunks``; ``ok`` where they could be formed.

    A row whose largest magnitude lies beyond :math:`[2^{-300}, 2^{300}]` is taken as
    :math:`x\,2^{-k}` with :math:`2^{k-1} \le \max|x| < 2^k` (k at least -1000, so that
    :math:`2^{-k}` is a float64 number), exact unless an element underflows (such a row is not
    ``ok``): the result :math:`\gamma t/\sqrt s + \beta` does not change when x is scaled and
    ε with it by :math:`2^{-2k}` (exactly, in the rational s), and every product and square
    stays far from overflow and underflow whatever the row's magnitude. (The sums of
    :func:`level_sums` formed :math:`4d\max|x|`, which overflowed near the top of the range.)
    """

    def __init__(self, xr, chunks, kind: str, eps: float):
        n, d = xr.shape
        self.kind, self.d = kind, d
        self.xr, self.chunks = xr, chunks
        M = np.zeros(n)
        for c0, c1 in chunks:
            v = np.asarray(xr[:, c0:c1], dtype=np.float64)
            np.maximum(M, np.maximum(v.max(axis=1), -v.min(axis=1)), out=M)
        ok = np.isfinite(M)
        _, k = np.frexp(np.where(ok, M, 0.0))
        far = ok & (M > 0) & ((M < 2.0**-300) | (M > 2.0**300))
        self.shift = np.where(far, np.maximum(k.astype(np.int64), -1000), 0)
        self.scale = np.ldexp(1.0, -self.shift) if far.any() else None  # 2^-1024 .. 2^1000

        with np.errstate(invalid="ignore", over="ignore", under="ignore"):
            if self.scale is not None:
                for c0, c1 in chunks:  # scaling down is exact unless an element underflows
                    v = np.asarray(xr[:, c0:c1], dtype=np.float64)
                    ok &= ((v * self.scale[:, None]) / self.scale[:, None] == v).all(axis=1)

            def blocks():
                for c0, c1 in chunks:
                    v = np.asarray(xr[:, c0:c1], dtype=np.float64)
                    yield slice(None), (v if self.scale is None else v * self.scale[:, None])

            self.S = []
            if kind == "layer":
                parts, good = level_sums(lambda: ((r, [v]) for r, v in blocks()), n, d)
                self.S = parts[0]
                ok &= good[0]
            kept = []  # one chunk: its pieces are kept; a long row's are computed on each pass

            def pieces():
                """The parts of t^2 to sum exactly: t_h^2 (two floats) and 2 t_h t_l (one)."""
                if kept:
                    yield from kept
                    return
                for rows, v in blocks():
                    th, tl, _ = self.t_of(v, slice(None))
                    p1, p2 = dd.two_prod(th, th)
                    q1, _ = dd.two_prod(th, tl)
                    if len(chunks) == 1:
                        kept.append((rows, [p1, p2, 2 * q1]))
                    yield rows, [p1, p2, 2 * q1]

            rest = np.zeros(n)
            for _, v in blocks():
                th, tl, good = self.t_of(v, slice(None))
                ok &= good.all(axis=1)
                _, q2 = dd.two_prod(th, tl)
                rest += (2 * q2 + tl * tl).sum(axis=1)  # within 2^-150 T: tiny terms
            parts, good = level_sums(pieces, n, d, k=3)
            T = [rest]
            for j in range(3):
                ok &= good[j]
                T += parts[j]
        self.ok = ok & np.isfinite(rest)
        self.r = np.full((n, 3), np.nan)
        e = Fraction(eps)
        for i in np.flatnonzero(self.ok):
            # eps scaled with the row, exactly: 2^-2k as a rational
            self.r[i] = _reciprocal_root(sum(Fraction(float(p[i])) for p in T), d, kind,
                                         e * _power_of_two(-2 * int(self.shift[i])))
        self.ok &= np.isfinite(self.r).all(axis=1)

    def t_of(self, x, rows):
        """``(t_h, t_l, exact)``: :math:`t = d x - S` as an exact pair (RMS norm: x itself);
        rows: a slice of the rows (x 2-D) or each element's row (x 1-D)."""
        if self.kind == "rms":
            return x, np.zeros_like(x), np.ones(x.shape, dtype=bool)
        p, pe = dd.two_prod(x, np.float64(self.d))
        col = (lambda v: v[rows, None]) if isinstance(rows, slice) else (lambda v: v[rows])
        return _pair([p, pe] + [-col(s) for s in self.S])

    def values(self, k, x, g, b, dt=np.dtype(np.float64)):
        """Results for elements (row ``k``, input x, gain, bias) rounded to ``dt`` (in
        float64), and flags where they are not proven correctly rounded."""
        with np.errstate(under="ignore"):
            th, tl, good = self.t_of(x if self.scale is None else x * self.scale[k], k)  # (exact where ok)
        r1, r2, r3 = self.r[k, 0], self.r[k, 1], self.r[k, 2]
        with np.errstate(invalid="ignore", over="ignore", under="ignore"):
            a1, a2 = dd.two_prod(th, r1)
            # u = t r within 2^-800 of 0 (an element a hair from its row's mean) would take the
            # products below into underflow: left to rational arithmetic (rare)
            tiny = (np.abs(a1) < 2.0**-800) & (th != 0)
            b1, b2 = dd.two_prod(th, r2)
            c1, c2 = dd.two_prod(tl, r1)
            small = (b2 + c2) + (th * r3 + tl * r2)  # below 2^-100 |u|: its roundings are tiny
            terms = [a1, a2, b1, c1, small]
            scale = np.abs(a1)
            if g is not None:
                out = []
                for t in terms[:4]:
                    out += list(dd.two_prod(t, g))
                terms = out + [small * g]
                scale = scale * np.abs(g)
            if b is not None:
                terms.append(b)
            x_ = list(np.broadcast_arrays(*terms))
            for _ in range(3):  # (two passes can leave the rest beside a cancelled top)
                for i in range(1, len(x_)):
                    x_[i], x_[i - 1] = dd.two_sum(x_[i], x_[i - 1])
            lower = np.zeros_like(scale)
            for v in x_[:-2]:
                lower += np.abs(v)
            # r to 2^-160, the small terms' roundings, the lower terms' sum: within 2^-140;
            # products by g that underflow: a few 2^-1074 each (2^-1060 covers them all)
            delta = scale * 2.0**-140 + lower * (1 + 2.0**-40) + 2.0**-1060
            if np.dtype(dt) == np.float64:
                y, flags = decide_float64(x_[-1], x_[-2], delta)
            else:
                h = x_[-1] + x_[-2]
                flags = near_boundary(h, dt, delta=2 * delta + 2 * U * np.abs(h))
                y = to_format(h + 0.0, dt).astype(np.float64)
        return y, flags | ~good | ~np.isfinite(scale) | tiny


def _power_of_two(e: int) -> Fraction:
    return Fraction(1 << e) if e >= 0 else Fraction(1, 1 << -e)


def _reciprocal_root(T: Fraction, d: int, kind: str, eps: Fraction):
    """1/sqrt(s) for s = T/d + c eps (c = d^2 or 1; T and eps rationals) as three floats,
    within 2^-160; NaN where s is 0 or r lies beyond 2^400 or below 2^-400 (its products
    could then overflow or underflow: the row is left to rational arithmetic)."""
    s = T / d + (d * d if kind == "layer" else 1) * Fraction(eps)
    if s <= 0:
        return np.nan, np.nan, np.nan
    # r 2^k = sqrt(D 4^k / N), to 170 bits
    N, D = s.numerator, s.denominator
    if not -800 < D.bit_length() - N.bit_length() < 800:  # r^2 = D/N within 2^(+-800): r within 2^(+-400.5)
        return np.nan, np.nan, np.nan
    k = 170 + max(0, (N.bit_length() - D.bit_length()) // 2 + 2)
    R = isqrt((D << (2 * k)) // N)
    exact = Fraction(R, 1 << k)
    r1 = float(exact)
    r2 = float(exact - Fraction(r1))
    r3 = float(exact - Fraction(r1) - Fraction(r2))
    return r1, r2, r3
