r"""The kernel's double-double tier: row statistics and results to about :math:`2^{-100}`,
with a proven error bound, for any float64 row (and the 16- and 32-bit rows, or elements, the
float64 tier cannot prove).

Per row (:class:`DDRows`, read in tiles of at most :data:`TILE` elements of the column chunks,
so that the temporaries stay in a core's cache and a long row needs no row-sized one):

1. *Scale.* A float64 row whose largest magnitude M lies outside :math:`[2^{-400}, 2^{400}]` is
   multiplied by a power of two (exact but for elements that underflow, whose error is
   bounded), so that no square overflows or underflows; ε is scaled with it (a tiny row is
   scaled up only so far that ε stays below :math:`2^{900}`, and never down). Whether a row
   is finite is read from M, not from its float64 sum, which overflows near the top of the
   range (that sum is then formed scaled, for the pivot alone); :func:`reciprocal_sqrt` takes
   any s.
2. *Pivot and mean.* :math:`w_i + w'_i = x_i - c` exactly (:func:`lneps.kernel.expansions.two_sum`) with
   :math:`c = \mathrm{fl}(\mathrm{mean}(x))` when it is at least M/4 (offset and nearly
   constant rows), else c = 0. :math:`\sum w_i` is a :func:`lneps.kernel.expansions.quantum_sum` per tile
   (exact parts and a part rounded within about :math:`m^{3.5} 2^{-155}\max|w|`), and the
   mean of w a double-double :math:`m_h + m_l` within a bound :math:`e_m`. Rows the caller
   knows to have exact float64 sums (the float64 tier's exact rows) get no pivot and no bound.
3. *Deviations.* :math:`v_i = x_i - \mu = a_i + b_i + \delta_i` with
   :math:`(a_i, \cdot) = \mathrm{two\_sum}(w_i, -m_h)`, :math:`b_i` the rounded rest and
   :math:`|\delta_i| \le e_v` (a per-row bound: :math:`e_m`, the rounding of :math:`b_i`, and
   any scaling underflow). RMS norm: :math:`v_i = x_i`.
4. *Sum of squares.* :math:`a_i^2` exactly as :math:`p_i + p'_i`, :math:`\sum p_i` a
   :func:`lneps.kernel.expansions.quantum_sum`, the small rest :math:`p'_i + 2a_ib_i` summed in float64
   (:func:`lneps.kernel.expansions.blocked_sum`); every rounding and every neglected term
   (:math:`2a_i\delta_i`, :math:`(b_i+\delta_i)^2`) is in the bound :math:`e_T`.
5. :math:`s = T/d + \varepsilon` and :math:`r = 1/\sqrt s` in double-double (one Newton step),
   with relative error :math:`e_r`.

Per element (:func:`finish_values`): :math:`\gamma (a + b) r + \beta` with
:func:`lneps.kernel.expansions.two_prod` and :func:`lneps.kernel.expansions.two_sum`, within
:math:`k_1|\hat y| + k_0|\gamma|`
(+ the last sum's rounding); the output format's rounding is final unless a rounding boundary
or 0 lies within twice that bound (:func:`lneps.kernel.rounding.near_boundary`,
:func:`lneps.kernel.rounding.decide_float64`). Gains beyond :math:`2^{\pm 600}` are left to the exact
tier (:func:`extreme`). :func:`inference` is the same for given statistics (batch norm).
"""

from __future__ import annotations

import numpy as np

from . import expansions as dd
from .rounding import decide_float64, near_boundary

__all__ = ["DDRows", "finish_values", "finish_rows", "extreme", "inference", "tiles", "TILE"]

U = dd.U


def _accumulate(acc, rows, H, *rounded):
    """Add an exact part H and rounded parts to the running double-double ``acc``
    ``[hi, lo, bound]`` (at ``rows``); the bound grows by each rounding of the low part (u of
    its result, twice for safety)."""
    hi, e = dd.two_sum(acc[0][rows], H)
    lo = acc[1][rows] + e
    grow = np.abs(lo)
    for L in rounded:
        lo = lo + L
        grow = grow + np.abs(lo)
    acc[0][rows], acc[1][rows] = hi, lo
    acc[2][rows] += 2 * U * grow


def _quotient_dd(N_hi, N_lo, eN, d):
    """``N / d`` as a double-double and its error bound, from ``N_hi + N_lo`` within ``eN``."""
    q = N_hi / d
    p, pe = dd.two_prod(q, np.float64(d))
    q_lo = (((N_hi - p) - pe) + N_lo) / d  # N_hi - p is exact (Sterbenz)
    # (2^-1060: two_prod's error term may underflow for a quotient near 2^-969)
    return q, q_lo, 1.01 * (eN + 12 * U * U * np.abs(N_hi) + 2 * U * np.abs(N_lo)) / d + 2.0**-1060


def reciprocal_sqrt(s_hi, s_lo, es):
    r""":math:`1/\sqrt{s_h + s_l}` as ``(r0, r_lo, er)``: one Newton step from
    :math:`r_0 = \mathrm{fl}(1/\sqrt{s_h})`, :math:`r = r_0(1-\rho)^{-1/2}` with
    :math:`\rho = 1 - s r_0^2`; er bounds the relative error of :math:`r_0 + r_{lo}` (the
    series' next term, ρ's rounding, and s's own error ``es``). An s beyond :math:`2^{\pm 900}`
    (eps near the top of the range, a constant row's tiny eps) is taken as :math:`4^j s'`,
    exactly, and :math:`r = 2^{-j} r'`: :math:`r_0^2` and :math:`s r_0^2` must neither overflow
    nor underflow, nor s reach Veltkamp's split limit :math:`2^{996}`."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        far = ((s_hi > 2.0**900) | (s_hi < 2.0**-900)) & (s_hi > 0) & np.isfinite(s_hi)
        j = None
        if np.any(far):
            _, e = np.frexp(s_hi)
            j = np.where(far, e // 2, 0)
            # (s_lo 4^-j may underflow: within 2^-1074 s', far below the 2^-104 in er)
            s_hi, s_lo, es = np.ldexp(s_hi, -2 * j), np.ldexp(s_lo, -2 * j), np.ldexp(es, -2 * j)
        r0 = 1.0 / np.sqrt(s_hi)
        w, we = dd.two_prod(r0, r0)
        z, ze = dd.two_prod(s_hi, w)
        tail = s_hi * we + s_lo * w
        rho = ((1.0 - z) - ze) - tail
        e_rho = 4 * U * (np.abs(ze) + np.abs(tail) + np.abs(rho)) + 2.0**-104
        r_lo = r0 * rho * 0.5
        er = 0.4 * rho * rho + 0.5 * e_rho + 2 * U * np.abs(rho) + 0.51 * es / s_hi + 2.0**-104
        if j is not None:
            r0, r_lo = np.ldexp(r0, -j), np.ldexp(r_lo, -j)  # exact: 2^-j r' is far from under/overflow
    return r0, r_lo, er


#: Elementwise passes work on tiles of at most this many elements, so that the dozen
#: temporaries of the error-free transformations stay in a core's cache.
TILE = 1 << 13


def tiles(n, chunks):
    """``(r0, r1, c0, c1)`` covering n rows by the column ``chunks``, each tile at most TILE
    elements (or one row of at most TILE columns)."""
    for c0, c1 in chunks:
        for cc0 in range(c0, c1, TILE):
            cc1 = min(c1, cc0 + TILE)
            step = max(1, TILE // (cc1 - cc0))
            for r0 in range(0, n, step):
                yield r0, min(n, r0 + step), cc0, cc1


def _col(v, rows):
    """Per-row values shaped for elements: all rows or a slice of them (2-D), or per element."""
    if rows is None:
        return v[:, None]
    return v[rows, None] if isinstance(rows, slice) else v[rows]


class DDRows:
    """Double-double statistics of the rows ``xr`` (see the module docstring), read in tiles
    of the column ``chunks`` (:func:`tiles`).

    Per row: ``mean`` and ``rstd`` (float64, unscaled), ``finite`` (no inf or NaN), and what
    :meth:`parts_of` and :func:`finish_values` need. ``sum_exact`` (optional, per row): rows
    known to have an exact float64 sum (the float64 tier's exact rows), whose sum then carries
    no error bound.
    """

    def __init__(self, xr, chunks, kind: str, eps: float, fast: bool, sum_exact=None):
        n, d = xr.shape
        self.kind, self.d = kind, d
        self.tiles = list(tiles(n, chunks))
        M = np.zeros(n)
        total = np.zeros(n)
        tile_max = []
        top, bottom = np.full(n, -np.inf), np.full(n, np.inf)  # constant rows: top == bottom
        with np.errstate(over="ignore", invalid="ignore"):
            for r0, r1, c0, c1 in self.tiles:
                x = np.asarray(xr[r0:r1, c0:c1], dtype=np.float64)
                hi, lo = x.max(axis=1), x.min(axis=1)
                np.maximum(top[r0:r1], hi, out=top[r0:r1])
                np.minimum(bottom[r0:r1], lo, out=bottom[r0:r1])
                tile_max.append(np.maximum(hi, -lo))  # no |x| temporary
                np.maximum(M[r0:r1], tile_max[-1], out=M[r0:r1])
                if kind == "layer":
                    total[r0:r1] += x.sum(axis=1)
        #: rows holding inf or NaN: their results here are meaningless (the caller redoes them).
        #: (The maximum says it: NaN and inf both make it non-finite. The sum does not: the
        #: float64 sum of finite numbers near the top of the range overflows.)
        self.finite = np.isfinite(M)
        M = np.where(self.finite, M, 0.0)
        mean_over = self._mean_if_overflowed(xr, M, total) if kind == "layer" else None
        k = np.zeros(n, dtype=np.int64)
        if not fast and not np.all(((M <= 2.0**400) & (M >= 2.0**-400)) | (M == 0)):
            _, kk = np.frexp(M)
            need = (M > 2.0**400) | ((M < 2.0**-400) & (M > 0))
            # Scaled up by at most 2^1000 (2^1073 would overflow; M 2^1000 >= 2^-74 is enough),
            # and not so far that eps overflows: eps 2^-2k <= 2^900
            kk = np.maximum(kk, -1000)
            if eps > 0:
                kk = np.maximum(kk, int(np.ceil((np.log2(eps) - 900) / 2)))
            # ... but a tiny row is never scaled down (eps near the top of the range would ask
            # for it: its elements would underflow, and eps dwarfs the squares anyway)
            kk = np.where(M < 1, np.minimum(kk, 0), kk)
            k = np.where(need, kk, 0).astype(np.int64)
        self.k = k
        self.scale = np.ldexp(1.0, -k) if np.any(k) else None
        et = np.where(k > 0, 2.0**-1074, 0.0) if self.scale is not None else np.zeros(n)
        Ms = M if self.scale is None else M * self.scale
        if kind == "layer":
            with np.errstate(over="ignore", invalid="ignore"):
                c = total / d if mean_over is None else np.where(np.isfinite(total), total / d, mean_over)
                c = np.where(np.isfinite(c) & (np.abs(c) >= M / 4), c, 0.0)
                if sum_exact is not None:  # no pivot: its rounding would spoil an exact sum
                    c = np.where(sum_exact, 0.0, c)
            self.pivot = bool(np.any(c))
            self.c = (c if self.scale is None else c * self.scale) if self.pivot else None
            S = [np.zeros(n), np.zeros(n), np.zeros(n)]
            Mw = np.zeros(n)
            all_exact = sum_exact is not None and bool(np.all(sum_exact))
            for i, (r0, r1, c0, c1) in enumerate(self.tiles):
                rows = slice(r0, r1)
                w, wl = self._pivoted(np.asarray(xr[rows, c0:c1], dtype=np.float64), rows)
                m = c1 - c0
                plain = wl is None and self.scale is None  # w is x: its maximum is known
                mw = tile_max[i] if plain else np.abs(w).max(axis=1)
                np.maximum(Mw[rows], mw, out=Mw[rows])
                if all_exact:  # float64 sums of these rows are exact (below): no quantum needed
                    _accumulate(S, rows, w.sum(axis=1))
                    continue
                H, L, eq = dd.quantum_sum(w, mw)
                if wl is not None:  # |w'| <= u |w|: its sum within n u m u max|w|
                    WL, nr = dd.blocked_sum(wl)
                    _accumulate(S, rows, H, L, WL)
                    eq = eq + 1.01 * nr * m * U * U * mw
                else:
                    _accumulate(S, rows, H, L)
                S[2][rows] += eq
            if sum_exact is not None:
                # Rows whose elements are multiples of a quantum q with 2 d max|x| < 2^53 q
                # (tier A's exact rows): every part summed above is such a multiple, well below
                # 2^53 q, so the double-double S is exact.
                S[2] = np.where(sum_exact, 0.0, S[2])
            m_hi, m_lo, em = _quotient_dd(S[0], S[1], S[2], d)
            em = em + et
            self.m_hi, self.m_lo = m_hi, m_lo
            A = (Mw + np.abs(m_hi)) * (1 + 2 * U)
            Bp = 1.01 * (U * (2 * Mw + np.abs(m_hi)) + np.abs(m_lo))
            ev = 1.01 * (em + 2 * et + 2.01 * U * U * (2 * Mw + np.abs(m_hi)) + 1.01 * U * np.abs(m_lo))
            mean_s = m_hi + m_lo if self.c is None else (self.c + m_hi) + m_lo
        else:
            self.c, self.pivot = None, False
            A, Bp, ev = Ms * (1 + 2 * U), np.zeros(n), et
            mean_s = None
        self.Bp, self.ev, self.amax = Bp, ev, A
        # sum of squares
        T = [np.zeros(n), np.zeros(n), np.zeros(n)]
        roundings = 0
        rr_abs = np.zeros(n)  # sum of |p'_i + 2 a_i b_i|
        for r0, r1, c0, c1 in self.tiles:
            rows = slice(r0, r1)
            a, bp, ah, al = self.parts_of(np.asarray(xr[rows, c0:c1], dtype=np.float64), rows)
            p, pe = dd.two_square(a, ah, al)
            if bp is not None:
                k2 = a * bp
                k2 *= 2
                pe += k2
            H, L, eq = dd.quantum_sum(p, p.max(axis=1, initial=0.0))  # p = fl(a^2) >= 0: its maximum is max |p|
            R, nr = dd.blocked_sum(pe)
            rr_abs[rows] += np.abs(pe).sum(axis=1)
            roundings = max(roundings, nr)
            _accumulate(T, rows, H, L, R)
            T[2][rows] += eq
        # The rest's sum and its terms' roundings (u |rr| each, and u |2 a b| <= u (|rr| + u p)),
        # and the neglected sum of 2 a delta + (b + delta)^2, with sum |a| <= sqrt(d sum a^2).
        rr_abs *= 1.01  # (its own float64 sum's rounding)
        eT = (T[2] + 1.01 * (roundings + 2) * U * rr_abs + 1.01 * U * U * np.abs(T[0])
              + 2.02 * ev * np.sqrt(d * np.abs(T[0]) * 1.01) + 1.01 * d * (Bp + ev) ** 2 + d * 2.0**-1070)
        s_hi, s_lo, es = _quotient_dd(T[0], T[1], eT, d)
        eps_s = eps if self.scale is None else eps * self.scale * self.scale
        a1, a2 = dd.two_sum(s_hi, eps_s)
        a2 = a2 + s_lo
        s_hi, s_lo = dd.two_sum(a1, a2)
        es = es + 4 * U * np.abs(a2)
        if self.scale is not None:  # a scaled eps may underflow
            es = es + np.where((eps_s < 2.0**-1021) & (eps > 0), 2.0**-1074, 0.0)
        r0, r_lo, er = reciprocal_sqrt(s_hi, s_lo, es)
        self.r0, self.r_lo = r0, r_lo
        self.rh, self.rl = dd.split(r0)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            rho = np.abs(r_lo) / r0
            self.k1 = 1.02 * (er + 3 * U * rho + 2 * U * U)
            self.k0 = 1.02 * r0 * (ev + er * (Bp + ev) + Bp * (rho + 3 * U)) + 2.0**-1060
            r = r0 + r_lo
            self.rstd = r if self.scale is None else r * self.scale
            if kind == "layer" and eps > 0:
                # A constant row has variance 0 exactly, so rstd = 1/sqrt(eps) (two roundings).
                # Its s above is eps (scaled: rounded, or underflowed to 0, and r0^2 may
                # overflow) plus the roundings of the mean (which the bounds hold): no rstd.
                self.rstd = np.where(top == bottom, 1.0 / np.sqrt(eps), self.rstd)
        self.mean = None if mean_s is None else (mean_s if self.scale is None else np.ldexp(mean_s, k))

    def _mean_if_overflowed(self, xr, M, total):
        """Where the float64 sum of a finite row overflowed (or met inf - inf), the row's mean
        from its sum scaled by :math:`2^{-k}` (:math:`M < 2^k`), within a few ulps (inf if
        that rounds past the largest number); None if no sum overflowed. Only the pivot c
        uses it, and any pivot is exact (its rounding error is in the bounds)."""
        over = self.finite & ~np.isfinite(total)
        if not over.any():
            return None
        _, kt = np.frexp(M)
        kt = np.where(over, kt, 0)
        scaled = np.zeros(M.shape)
        for r0, r1, c0, c1 in self.tiles:
            x = np.asarray(xr[r0:r1, c0:c1], dtype=np.float64)
            scaled[r0:r1] += np.ldexp(x, -kt[r0:r1, None]).sum(axis=1)  # |x 2^-k| < 1: no overflow
        with np.errstate(over="ignore"):
            return np.ldexp(scaled / self.d, kt)

    def _pivoted(self, x, rows=None):
        """``(w, w')``: the scaled x minus the pivot, exactly (w' is None without a pivot)."""
        if self.scale is not None:
            x = x * _col(self.scale, rows)
        if not self.pivot:
            return x, None
        return dd.two_sum(x, -_col(self.c, rows))

    def parts_of(self, x, rows=None):
        r"""``(a, b, ah, al)`` for float64 inputs x: :math:`v = a + b` (b None for RMS norm) and
        Veltkamp's halves of a. ``rows``: None (x holds all rows), a slice (x holds those
        rows), or each element's row (x then 1-D)."""
        w, wl = self._pivoted(x, rows)
        if self.kind == "layer":
            a, bb = dd.two_sum(w, -_col(self.m_hi, rows))
            if wl is not None:
                bb += wl
            bb -= _col(self.m_lo, rows)
            bp = bb
        else:
            a, bp = w, None
        ah, al = dd.split(a)
        return a, bp, ah, al

    def per_row(self, rows=None):
        """The per-row constants for :func:`finish_values`, shaped to broadcast."""
        return {name: _col(getattr(self, name), rows) for name in ("r0", "r_lo", "rh", "rl", "k1", "k0", "amax")}


def finish_rows(st, xr, gpart, bpart, dt, fast):
    """Tier B over whole rows ``xr`` with their statistics ``st``: yields
    ``(rows, c0, c1, y, flags)`` per tile (rows a slice). ``gpart(rows, c0, c1)`` and
    ``bpart`` give the tile's gain and bias (or None)."""
    for r0, r1, c0, c1 in st.tiles:
        rows = slice(r0, r1)
        parts = st.parts_of(np.asarray(xr[rows, c0:c1], dtype=np.float64), rows)
        gc, bc = gpart(rows, c0, c1), bpart(rows, c0, c1)
        y, flags = finish_values(parts, st.per_row(rows), gc, None if gc is None else dd.split(gc), bc, dt, fast)
        if gc is not None:
            flags |= extreme(gc)
        flags &= st.finite[rows, None]  # rows with inf or NaN are redone by the plain path
        yield rows, c0, c1, y, flags


def extreme(p):
    """Where a gain is beyond 2^600 or a nonzero one below 2^-600: its products could
    overflow or underflow the error-free transformations, so its elements go to the exact
    tier. A mask broadcasting with p."""
    a = np.abs(p)
    return ((a > 2.0**600) & np.isfinite(a)) | ((a < 2.0**-600) & (a > 0))


def finish_values(parts, row, g, gs, b, dt, fast):
    r""":math:`\gamma (a + b) r + \beta` from ``parts = (a, b, ah, al)`` and a row's constants
    ``row`` (:meth:`DDRows.per_row`), rounded to ``dt``: returns ``(y, flags)``, y float64
    (the format's nearest number to the estimate; final for float64) and flags where the
    rounding of the exact value is not proven equal. ``gs``: Veltkamp's halves of g."""
    a, bp, ah, al = parts
    r0, r_lo = row["r0"], row["r_lo"]
    P, Pe = dd.two_prod_split(a, ah, al, r0, row["rh"], row["rl"])
    rest = a * r_lo
    if bp is not None:
        rest += bp * r0
    me = Pe + rest
    k1, k0 = row["k1"], row["k0"]
    if g is None and b is None and not fast:
        # |P| <= A r0 (1 + u): one bound per row (A = max |a|), no per-element arithmetic
        return decide_float64(P, me, 2.0 * (row["amax"] * r0 * (1 + 2 * U) * k1 + k0), fast_sum=True)
    if g is not None:
        Ph, Pl = dd.split(P)
        G, Ge = dd.two_prod_split(P, Ph, Pl, g, gs[0], gs[1])
        me = Ge + me * g
        # (2^-1070: the product's error term may underflow when |G| is below 2^-969)
        err = np.abs(G) * (k1 * (1 + 2 * U) + 8 * U * U) + k0 * np.abs(g) + 2.0**-1070
        P = G
    else:
        err = np.abs(P) * k1 + k0
    if b is not None:
        yh, e = dd.two_sum(P, b)
        yl = e + me
        err = err + 1.01 * U * np.abs(yl)
    else:
        yh, yl = P, me
    if fast:
        y = yh + yl
        flags = near_boundary(y, dt, delta=2.0 * err + 2.0 * U * np.abs(y))
        return y + 0.0, flags  # + 0.0: an unflagged 0 is exact, and +0
    return decide_float64(yh, yl, 2.0 * err)


def inference(x, m, v, eps, g, b, dt, fast):
    r""":math:`\gamma (x - m)/\sqrt{v + \varepsilon} + \beta` for given per-row statistics
    (batch normalization at inference): :math:`x - m = a + b'` and :math:`v + \varepsilon` are
    exact double-doubles, so only :math:`1/\sqrt{\cdot}` and the products carry error. Returns
    ``(y, flags, a, b', s_hi, rstd)`` as :func:`finish_values` and the exact parts."""
    a, bp = dd.two_sum(x, -m)  # exact
    s_hi, s_lo = dd.two_sum(v, np.full(v.shape, eps))  # exact
    r0, r_lo, er = reciprocal_sqrt(s_hi, s_lo, np.zeros_like(s_hi))
    rh, rl = dd.split(r0)
    rho = np.abs(r_lo) / r0
    k1 = (1.02 * (er + 3 * U * rho + 2 * U * U))[:, None]
    k0 = 1.02 * r0[:, None] * np.abs(bp) * (er[:, None] + rho[:, None] + 3 * U) + 2.0**-1060
    row = {"r0": r0[:, None], "r_lo": r_lo[:, None], "rh": rh[:, None], "rl": rl[:, None], "k1": k1, "k0": k0,
           "amax": np.abs(a).max(axis=1, initial=0.0)[:, None]}
    y, flags = finish_values((a, bp, *dd.split(a)), row, g, None if g is None else dd.split(g), b, dt, fast)
    flags |= (s_hi == 0)[:, None] | ~np.isfinite(a)
    if g is not None:
        flags |= extreme(g)
    return y, flags, a, bp, s_hi, r0 + r_lo
