r"""The kernel's exact tier: exact ties and exact cancellation settled in vectorized float64
arithmetic, and the rare rest in rational arithmetic (:mod:`lneps.kernel.undecided` takes the
elements the float64 and double-double tiers leave undecided through it).

An element the float64 and double-double tiers cannot decide has its exact value within a
hair of a rounding boundary (or of 0). Almost always that is because it lies exactly *on*
one: the row's :math:`\sqrt s` is rational and the normalized value :math:`u = t/\sqrt s` a
float64 number. Such rows are recognized, and settled with error-free float64 operations only
(:mod:`lneps.kernel.expansions`), vectorized:

1. *Rows of two values* (:meth:`ExactRows._two_values`). With ε = 0, a row of two values a < b,
   k of them b, has :math:`u = \sqrt{(d-k)/k}` where x = b and :math:`-\sqrt{k/(d-k)}` where
   x = a, whatever their bits: :math:`\pm 1` for equal numbers, dyadic when the counts' ratio
   is the square of one. (RMS norm: one magnitude, u = sign(x).) A constant row has t = 0.
2. *Exact statistics* (:class:`ExactRows`). With :math:`M = \max|x|` and Q the power of two
   with :math:`2dM < 2^{53}Q \le 4dM`, a row whose elements are all multiples of Q has an
   exact float64 sum S and exact :math:`t_i = d x_i - S` (multiples of Q below
   :math:`2^{53}Q`). If moreover every :math:`t_i` has at most 26 significant bits (so
   :math:`t_i^2` is exact) and every :math:`t_i^2` is a multiple of the quantum that keeps
   their sum below :math:`2^{53}` quanta, :math:`T = \sum t_i^2` is exact too. (RMS norm:
   :math:`t_i = x_i`, all multiples of :math:`2^{-106}\max|x|` so that no square underflows.)
3. *An exact square root*. :math:`s = T/d + d^2\varepsilon` (RMS: :math:`T/d + \varepsilon`) is
   tried as the square of a float64 σ: the candidates next to :math:`\sqrt{\hat s}` are checked
   by the exact sign of :math:`d\sigma^2 - T - d^3\varepsilon` (:func:`lneps.kernel.expansions.expansion_sign`).
4. *Exact quotients and rounding* (:func:`round_where_exact`, :func:`exact_affine`). For an element,
   :math:`q = \mathrm{fl}(t/\sigma)` is u exactly when :math:`q\sigma = t` exactly
   (:func:`lneps.kernel.expansions.two_prod`); then :math:`y = \gamma q + \beta` is an exact sum of at most
   three floats, rounded exactly by :func:`lneps.kernel.rounding.round_pair` (a tie goes to even, an
   exact 0 is +0) in :func:`round_affine`. :math:`t = 0` needs no σ: y is β.

Magnitudes are kept where no product underflows or overflows: a row beyond
:math:`2^{-300} \le M \le 2^{300}` is scaled by a power of two :math:`2^{-k}` (ε by
:math:`2^{-2k}`), which leaves its results unchanged, where that is exact; ε (so scaled) 0 or
within :math:`2^{\pm 600}`, gains within :math:`2^{\pm 900}`. Every element left over
(an irrational :math:`\sqrt s` within :math:`2^{-100}` of a boundary by chance, or a float64
bias cancelling :math:`\gamma u` to its last bits) is rounded by :func:`round_by_fractions`: exact
integer row statistics and :func:`lneps.kernel.surd.round_surd`, element by element, slow
(tens of microseconds an element) and rare.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from ..formats import format_of
from . import expansions as dd
from .rounding import round_pair
from .surd import round_surd

__all__ = ["ExactRows", "round_where_exact", "exact_affine", "round_affine", "exact_root", "round_by_fractions"]

_LOW, _HIGH = 2.0**-300, 2.0**300


def _chunks_of(xr, chunks):
    if xr.dtype == np.float64 and len(chunks) == 1:
        yield xr  # (the callers only read it)
        return
    for c0, c1 in chunks:
        yield xr[:, c0:c1].astype(np.float64)


class ExactRows:
    """Exact float64 statistics of some rows, where they exist (see the module docstring).

    ``ok``: the row's S and every t and T are exact; ``S`` (layer norm; 0 for RMS norm);
    ``sigma``: the float64 σ with :math:`\\sigma^2 = s` exactly, or NaN where s is not such a
    square; ``zero_s``: s is exactly 0 (a constant row with ε = 0: every u is 0/0).
    ``unit``: rows of two values (one magnitude for RMS norm) with ε = 0, whose u are known
    exactly whatever their bits; ``units`` those u (NaN where not dyadic), ``top`` the larger
    value (:meth:`_two_values`).
    ``xr`` holds the rows (any real dtype), read in column ``chunks``.
    """

    def __init__(self, xr: np.ndarray, chunks, kind: str, eps: float):
        n, d = xr.shape
        self.kind, self.d = kind, d
        if len(chunks) == 1:
            xr = xr.astype(np.float64)  # once, not per pass
        M = np.zeros(n)
        top, bottom = np.full(n, -np.inf), np.full(n, np.inf)
        for x in _chunks_of(xr, chunks):
            np.maximum(M, np.abs(x).max(axis=1), out=M)
            np.maximum(top, x.max(axis=1), out=top)
            np.minimum(bottom, x.min(axis=1), out=bottom)
        self.unit, self.units, self.top = self._two_values(xr, chunks, kind, eps, M, top, bottom)
        # A row beyond [2^-300, 2^300] is taken as x 2^-k (2^(k-1) <= M < 2^k; k >= -1000, so
        # that 2^-k is a float64 number) and eps as eps 2^-2k: its results do not change, and
        # the squares and products below stay clear of overflow and underflow. Exact unless an
        # element underflows, or eps 2^-2k leaves [2^-600, 2^600]: such rows are not ok.
        ok = np.isfinite(M)
        _, k = np.frexp(np.where(ok, M, 0.0))
        far = ok & (M > 0) & ((M < _LOW) | (M > _HIGH))
        self.scale = None
        eps_s = np.full(n, float(eps))
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):
            if far.any():
                shift = np.where(far, np.maximum(k.astype(np.int64), -1000), 0)
                self.scale = np.ldexp(1.0, -shift)
                eps_s = np.ldexp(eps_s, -2 * shift)
                M = M * self.scale
                for x in _chunks_of(xr, chunks):
                    ok &= ((x * self.scale[:, None]) / self.scale[:, None] == x).all(axis=1)
        ok &= (eps == 0) | ((eps_s >= 2.0**-600) & (eps_s <= 2.0**600))
        self.eps, self.eps_scaled = eps, eps_s
        with np.errstate(over="ignore", invalid="ignore"):
            S = np.zeros(n)
            if kind == "layer":
                _, e = np.frexp(2.0 * d * M)
                Qc = np.maximum(np.ldexp(1.0, e - 53), 2.0**-1074)[:, None]
                C = 1.5 * 2.0**52 * Qc
                for x in self._chunks(xr, chunks):
                    ok &= (((x + C) - C) == x).all(axis=1)
                    S += x.sum(axis=1)  # exact where ok: multiples of Qc below 2^53 Qc
            else:
                # t = x: no element may be so small that its square underflows (nonzero
                # multiples of 2^(e - 106), 2^e > M >= 2^-300, are above 2^-406)
                _, e = np.frexp(M)
                inv = np.ldexp(1.0, 106 - e)[:, None]
                for x in self._chunks(xr, chunks):
                    scaled = x * inv  # exact: a power of two, below 2^106
                    ok &= (np.rint(scaled) == scaled).all(axis=1)
            if not ok.any():  # (no row can pass: skip the passes below)
                self._finish(ok, S, np.zeros(n), top, bottom)
                return
            # t and its square, exact where t has at most 26 significant bits; then the
            # quantum that keeps the sum of the squares below 2^53 of it, from their maximum
            kept = []
            Mp = np.zeros(n)
            for x in self._chunks(xr, chunks):
                t = x * d - S[:, None] if kind == "layer" else x
                _, low = dd.split(t)
                ok &= (low == 0).all(axis=1)
                if not ok.any():
                    break
                p = t * t
                np.maximum(Mp, p.max(axis=1), out=Mp)
                if len(chunks) == 1:
                    kept.append(p)
            T = np.zeros(n)
            if ok.any():
                _, e = np.frexp(4.0 * d * Mp)
                Qp = np.maximum(np.ldexp(1.0, e - 53), 2.0**-1074)[:, None]
                Cp = 1.5 * 2.0**52 * Qp
                for x in (kept or self._chunks(xr, chunks)):
                    p = x if kept else (x * d - S[:, None] if kind == "layer" else x) ** 2
                    ok &= (((p + Cp) - Cp) == p).all(axis=1)
                    T += p.sum(axis=1)  # exact where ok: multiples of Qp below 2^53 Qp
        self._finish(ok, S, T, top, bottom)

    def _chunks(self, xr, chunks):
        """The rows' chunks as float64, scaled (see __init__) where they must be."""
        for x in _chunks_of(xr, chunks):
            yield x if self.scale is None else x * self.scale[:, None]

    def scaled(self, x, k):
        """Elements x (float64) of the rows k as this class sees them: x 2^-k where scaled."""
        return x if self.scale is None else x * self.scale[k]

    def _finish(self, ok, S, T, top, bottom):
        self.ok, self.S, self.T = ok, S, T
        # a constant row has t = 0 exactly, whatever its bits: u = 0, or 0/0 with eps = 0
        self.const = (top == bottom) & np.isfinite(top) & (self.kind == "layer")
        self.zero_s = ((ok & (T == 0)) | self.const) & (self.eps == 0)  # (eps itself: a scaled one may underflow)
        self.sigma = self._sqrt(T, self.d, self.kind, self.eps_scaled, ok & ~self.zero_s)

    @staticmethod
    def _two_values(xr, chunks, kind, eps, M, top, bottom):
        r"""Rows whose normalized values are known exactly with no arithmetic on their bits.

        With ε = 0, a row of two values a < b, k of them b and d - k a, has
        :math:`u = \sqrt{(d-k)/k}` where x = b and :math:`-\sqrt{k/(d-k)}` where x = a, whatever
        a and b are: :math:`\pm 1` for equal numbers, dyadic whenever the ratio of the counts
        is the square of one (checked exactly; NaN otherwise). RMS norm: a row of one magnitude
        has u = sign(x). Returns ``(rows, (u where x = b, u where x = a), b)``; rows of layer
        norm need at least one of the two u."""
        n, d = xr.shape
        none = np.zeros(n, dtype=bool)
        if eps != 0:
            return none, (np.full(n, np.nan), np.full(n, np.nan)), top
        if kind == "layer":
            hi, lo = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
            for x in _chunks_of(xr, chunks):
                hi += (x == top[:, None]).sum(axis=1)
                lo += (x == bottom[:, None]).sum(axis=1)
            two = (top > bottom) & (hi + lo == d) & np.isfinite(top) & np.isfinite(bottom)
            with np.errstate(divide="ignore", invalid="ignore"):
                u_top, u_bottom = np.sqrt(lo / hi), -np.sqrt(hi / lo)
                for u, num, den in ((u_top, lo, hi), (u_bottom, hi, lo)):
                    p, e = dd.two_prod(u * u, den.astype(np.float64))  # u^2 den == num exactly?
                    u[~((p == num) & (e == 0) & (dd.split(u)[1] == 0))] = np.nan  # u*u exact too
            return two & (np.isfinite(u_top) | np.isfinite(u_bottom)), (u_top, u_bottom), top
        same = np.zeros(n, dtype=np.int64)
        for x in _chunks_of(xr, chunks):
            same += (np.abs(x) == M[:, None]).sum(axis=1)
        ones = np.ones(n)
        return (M > 0) & (same == d) & np.isfinite(M), (ones, -ones), top

    @staticmethod
    def _sqrt(T, d, kind, eps, todo):
        """The float64 σ with dσ² = T + cε exactly (c = d³ or d; ε per row, each 0 or within
        2^±600), NaN where there is none."""
        sigma = np.full(T.shape, np.nan)
        if not todo.any():
            return sigma
        c = [float(d * d), float(d)] if kind == "layer" else [float(d)]
        ce = [*dd.two_prod(np.float64(c[0]), np.float64(c[1]))] if len(c) == 2 else [np.float64(c[0]), np.float64(0.0)]
        eps_terms = []
        for part in ce:  # c eps as four exact terms
            eps_terms += list(dd.two_prod(part, eps[todo]))
        eps_terms = [t for t in eps_terms if t.any()]  # (eps = 0: none)
        Tt = T[todo]
        base = np.sqrt((Tt + (eps_terms[0] if eps_terms else 0.0)) / d)  # within a few ulps of sigma, if any
        found = np.full(Tt.shape, np.nan)
        left = np.arange(Tt.size)
        for step in (0, 1, -1, 2, -2):
            cand = base[left]
            for _ in range(abs(step)):
                cand = np.nextafter(cand, np.inf if step > 0 else -np.inf)
            p1, p2 = dd.two_prod(cand, cand)
            q1, q2 = dd.two_prod(p1, np.float64(d))
            q3, q4 = dd.two_prod(p2, np.float64(d))
            sign = dd.expansion_sign([q1, q2, q3, q4, -Tt[left]] + [-t[left] for t in eps_terms])
            hit = (sign == 0) & (cand > 0)
            found[left[hit]] = cand[hit]
            left = left[~hit]
            if not left.size:
                break
        sigma[todo] = found
        return sigma


def exact_root(v, eps):
    """The float64 σ with σ² = v + eps exactly, NaN where there is none (or v + eps = 0)."""
    s_hi, s_lo = dd.two_sum(v, np.full(v.shape, eps))
    base = np.sqrt(s_hi)
    found = np.full(v.shape, np.nan)
    for step in (0, 1, -1):
        cand = base if step == 0 else np.nextafter(base, np.inf if step > 0 else -np.inf)
        p1, p2 = dd.two_prod(cand, cand)
        hit = (dd.expansion_sign([p1, p2, -v, np.full(v.shape, -eps)]) == 0) & np.isnan(found) & (cand > 0)
        hit &= (np.abs(cand) >= 2.0**-400) & (np.abs(cand) <= 2.0**400)
        found[hit] = cand[hit]
    return found


def round_where_exact(rows: ExactRows, k, x, g, b, dt):
    r"""Round elements exactly where the row's statistics allow it.

    ``k``: each element's row in ``rows``; ``x``: its input value (float64); ``g``, ``b``: its
    gain and bias (float64 arrays of the same length, or None); ``dt``: the output format.
    Returns ``(values, done)``: the correctly rounded results (float64 holding the
    format's numbers, NaN for 0/0) and which elements they are valid for.
    """
    const = rows.const[k]
    ok = rows.ok[k] | const
    xs = rows.scaled(x, k)  # (the scaling cancels in t/sigma)
    t = xs * rows.d - rows.S[k] if rows.kind == "layer" else xs
    t = np.where(const, 0.0, t)
    zero_s = rows.zero_s[k] & ok
    values, exact = exact_affine(t, 0.0, rows.sigma[k], g, b, dt)
    values = np.where(zero_s, np.nan, values)
    done = (exact & ok) | zero_s
    unit = rows.unit[k] & ~done
    if unit.any():  # two values: u known exactly (where dyadic) from the counts alone
        kk, xx = k[unit], x[unit]
        if rows.kind == "layer":
            q = np.where(xx == rows.top[kk], rows.units[0][kk], rows.units[1][kk])
        else:
            q = np.sign(xx)
        v, e = round_affine(np.where(np.isnan(q), 0.0, q), None if g is None else g[unit],
                            None if b is None else b[unit], dt)
        e &= ~np.isnan(q)
        values[unit] = np.where(e, v, values[unit])
        done[unit] = e
    return values, done


def exact_affine(th, tl, sigma, g, b, dt):
    r""":math:`\gamma t/\sigma + \beta` rounded exactly to ``dt``, where :math:`t = t_h + t_l`
    (a pair as :func:`lneps.kernel.expansions.two_sum` leaves it) and σ are exact, wherever the quotient
    :math:`q = \mathrm{fl}(t/\sigma)` is exact (:math:`q\sigma = t`, checked with
    :func:`lneps.kernel.expansions.two_prod`) or t = 0. Returns ``(values, exact)``; ``values`` holds the
    format's numbers in float64 (+0 for an exact 0) where ``exact``."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore", under="ignore"):
        zero = (th == 0) & (tl == 0)
        q = np.where(zero, 0.0, th / sigma)
        exact = zero.copy()
        try_ = np.flatnonzero(~zero & np.isfinite(q))  # rows with an exact sigma only
        if try_.size:
            qq, ss = q[try_], sigma[try_]
            p, pe = dd.two_prod(qq, ss)
            tl_ = np.broadcast_to(tl, q.shape)[try_]
            exact[try_] = (p == th[try_]) & (pe == tl_) & (np.abs(qq) >= 2.0**-900)
    values = np.full(q.shape, np.nan)
    pick = np.flatnonzero(exact)
    if pick.size:
        v, rounded = round_affine(q[pick], None if g is None else g[pick], None if b is None else b[pick], dt)
        values[pick] = v
        exact[pick] = rounded
    return values, exact


def round_affine(q, g, b, dt):
    r""":math:`\gamma q + \beta` rounded exactly to ``dt`` for float64 q, γ, β: the product
    is two floats (:func:`lneps.kernel.expansions.two_prod`), the sum with β two or three, rounded by
    :func:`lneps.kernel.rounding.round_pair`. Returns ``(values, exact)``: ``exact`` is False only where
    a product could underflow or a three-float sum is too close to call without more work."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore", under="ignore"):
        exact = np.ones(np.shape(q), dtype=bool)
        if g is not None:
            m, _ = np.frexp(g)
            if np.all(np.abs(m) == 0.5):  # powers of two (gamma = 1): the product is exact
                g1, g2 = g * q, np.zeros_like(q)
            else:
                g1, g2 = dd.two_prod(g, q)
            # products must stay clear of underflow for two_prod to be exact
            exact &= (np.abs(g) <= 2.0**900) & ((g1 == 0) | (np.abs(g1) >= 2.0**-900))
        else:
            g1, g2 = q, np.zeros_like(q)
        if b is None:
            h, l = g1, g2
        else:
            h, l = dd.two_sum(g1, b)
            three = g2 != 0  # y = h + l + g2: renormalize, and leave the doubtful to fractions
            if three.any():
                u1, u2 = dd.two_sum(l, g2)
                h2, w = dd.two_sum(h, u1)
                w2, u3 = dd.two_sum(w, u2)
                h3, w3 = dd.two_sum(h2, w2)
                doubtful = (u3 != 0) & (np.abs(w3) >= np.spacing(np.abs(h3)) / 4)
                exact &= ~(three & doubtful)
                h = np.where(three, h3, h)
                l = np.where(three, w3 + u3, l)  # the sign of a two-float sum is exact
        exact &= np.isfinite(h)
        values = round_pair(np.where(exact, h, 0.0), np.where(exact, l, 0.0), dt)
    return values, exact


# --- the last resort: rationals, element by element ----------------------------------------


def _row_integers(xr, chunks):
    """Exact integer statistics of rows: ``x = X 2^E0``; returns (E0, sum X, sum X^2) per row
    as Python ints, reading the rows in chunks."""
    n = xr.shape[0]
    E0 = np.full(n, np.iinfo(np.int64).max)
    for x in _chunks_of(xr, chunks):
        m, e = np.frexp(x)
        E = np.where(m == 0, np.iinfo(np.int64).max, e.astype(np.int64) - 53)
        E0 = np.minimum(E0, E.min(axis=1))
    E0 = np.where(E0 == np.iinfo(np.int64).max, 0, E0)
    S = [0] * n
    Q = [0] * n
    for x in _chunks_of(xr, chunks):
        X = _ints(x, E0)
        for i in range(n):
            S[i] += int(X[i].sum())
            Q[i] += int((X[i] * X[i]).sum())
    return E0, S, Q


def _ints(x, E0):
    """x / 2^E0 as an object array of Python ints (exact: E0 is at most each lowest bit)."""
    m, e = np.frexp(x)
    M = np.ldexp(m, 53).astype(np.int64)
    shift = np.where(M == 0, 0, e.astype(np.int64) - 53 - E0[:, None])
    return np.left_shift(M.astype(object), shift.astype(object))


def round_by_fractions(xr, chunks, kind, eps, k, j, g, b, dt):
    r"""Elements (row ``k`` of ``xr``, column ``j``) rounded exactly by rational arithmetic:
    integer row statistics and :func:`lneps.kernel.surd.round_surd` per element. ``g``, ``b``:
    per-element gains and biases (float64) or None. Returns float64 values."""
    fmt = format_of(dt)
    rows = np.unique(k)
    sub = xr[rows]
    E0, S, Q = _row_integers(sub, chunks)
    d = xr.shape[1]
    where = {int(r): i for i, r in enumerate(rows)}
    e = Fraction(eps)
    out = np.empty(len(k))
    for n, (r, c) in enumerate(zip(k, j)):
        i = where[int(r)]
        X = int(_ints(np.array([[float(xr[r, c])]]), E0[i:i + 1])[0, 0])
        scale = Fraction(2) ** (-2 * int(E0[i]))
        if kind == "layer":
            num = d * X - S[i]
            s = Fraction(d * (d * Q[i] - S[i] * S[i]), d) + d * d * e * scale
        else:
            num = X
            s = Fraction(Q[i], d) + e * scale
        a = Fraction(num) * (1 if g is None else Fraction(float(g[n])))
        out[n] = round_surd(a, s, 0 if b is None else Fraction(float(b[n])), fmt)
    return out
