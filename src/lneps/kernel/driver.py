r"""The kernel's driver: :func:`normalize` takes rows through the tiers (the package docstring,
:mod:`lneps.kernel`, says what each proves), block by block, and writes the result, its row
statistics and, on request, the float64 estimates behind it."""

from __future__ import annotations

import numpy as np

from . import expansions as dd, float64
from .double_double import DDRows, extreme, finish_rows
from .plain import plain_rows
from ..formats import to_format
from .rounding import FAST_FORMATS, near_boundary
from .undecided import UndecidedElements

__all__ = ["normalize", "estimate_error", "BLOCK_ELEMENTS"]

U = dd.U
#: Rows are processed in blocks of about this many elements, and longer rows in chunks of
#: this many columns, so that every temporary is a few megabytes whatever the input's size.
BLOCK_ELEMENTS = 1 << 16
COUNT_KEYS = ("rows", "elements", "double_double_rows", "double_double_elements", "triple_elements",
         "exact_elements", "fraction_elements")


def normalize(x2d: np.ndarray, *, kind: str, eps: float, gamma=None, beta=None, counts=None, out=None,
              estimate=None):
    r"""Normalize the rows of ``x2d`` (float16, bfloat16, float32 or float64), correctly rounded.

    ``kind`` is ``"layer"`` or ``"rms"``. ``gamma`` and ``beta`` are float64 arrays of shape
    ``()``, ``(1, d)``, ``(rows, d)`` or ``(rows, 1)`` (or None). Returns ``(y, mean, rstd)``:
    y in x2d's dtype, and the float64 row statistics (``mean`` is None for RMS norm): mean
    within 1 ulp of float64, rstd within :math:`((d+3)/2+2)` ulp. ``counts`` (a dict)
    accumulates ``rows``, ``elements``, ``double_double_rows`` (rows whose statistics were
    computed in double-double), ``double_double_elements``, ``triple_elements`` (float64
    results double-double could not decide, tried in triple precision), ``exact_elements``
    (settled by the exact tier) and ``fraction_elements`` (of those, by rational arithmetic).
    ``out``: an array (or view) of x2d's shape and dtype to write y into, rather than a new one.
    ``estimate``: a float64 array of x2d's shape to also write each element's float64 estimate
    :math:`\hat y` into, before it is rounded to the output format: within
    :math:`E\,|\gamma t/\sqrt s| + u|\hat y|` of the exact value, E of :func:`estimate_error`,
    wherever it is finite, the elements the exact tier settles included (their estimate is as
    close; only its rounding was undecided). Elements with a gain beyond :math:`2^{\pm 600}`,
    and rows holding inf or NaN, get NaN there (their y is right; their estimate carries no
    bound). This is what
    :mod:`lneps.testing` measures errors against, without paying for a correctly rounded
    float64 value it does not need.
    """
    rows, d = x2d.shape
    y = np.empty(x2d.shape, dtype=x2d.dtype) if out is None else out
    mean = np.empty(rows) if kind == "layer" else None
    rstd = np.empty(rows)
    counts = {} if counts is None else counts
    for key in COUNT_KEYS:
        counts.setdefault(key, 0)
    counts["rows"] += rows
    counts["elements"] += rows * d
    g, b = _Param(gamma), _Param(beta)
    if d <= BLOCK_ELEMENTS:
        step, chunks = max(1, BLOCK_ELEMENTS // max(d, 1)), [(0, d)]
    else:
        step, chunks = 1, [(c, min(d, c + BLOCK_ELEMENTS)) for c in range(0, d, BLOCK_ELEMENTS)]
    exact_sum = (lambda xr: float64.row_kinds(xr, chunks)[0]) if x2d.dtype in FAST_FORMATS else None
    undecided = UndecidedElements(x2d, y, chunks, kind, eps, g, b, counts, BLOCK_ELEMENTS, exact_sum)
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        block = _Block(x2d[r0:r1], r0, chunks, kind, eps, g.rows(r0, r1), b.rows(r0, r1), counts, undecided)
        block.est = None if estimate is None else estimate[r0:r1]
        block.run(y[r0:r1], None if mean is None else mean[r0:r1], rstd[r0:r1])
    undecided.flush()
    return y, mean, rstd


class _Param:
    """A gain or bias as a 2-D float64 array broadcasting against the rows: ``(1, 1)``,
    ``(1, d)``, ``(rows, d)`` or ``(rows, 1)``; ``None`` for none."""

    def __init__(self, p):
        if p is None:
            self.p = None
            self.finite, self.extreme = True, False
            return
        p = np.asarray(p, dtype=np.float64)
        self.p = p.reshape(1, 1) if p.ndim == 0 else (p.reshape(1, -1) if p.ndim == 1 else p)
        # A gain beyond 2^600 (or a nonzero one below 2^-600) could overflow or underflow the
        # error-free products: its elements are settled by the exact tier.
        a = np.abs(self.p)
        self.extreme = bool(np.any((a > 2.0**600) & np.isfinite(a)) or np.any((a < 2.0**-600) & (a > 0)))
        self.finite = bool(np.all(np.isfinite(self.p)))

    def rows(self, r0, r1):
        q = _Param(None)
        if self.p is not None:
            q.p = self.p if self.p.shape[0] == 1 else self.p[r0:r1]
            q.extreme, q.finite = self.extreme, self.finite
        return q

    def part(self, c0, c1, sub=None):
        """The parameter for columns c0:c1 (of the rows ``sub``, an index array, or all)."""
        if self.p is None:
            return None
        p = self.p if sub is None or self.p.shape[0] == 1 else self.p[sub]
        return p if p.shape[1] == 1 else p[:, c0:c1]

    def at(self, i, j):
        """Per-element values (1-D) at rows i and columns j."""
        if self.p is None:
            return None
        p = self.p
        return np.broadcast_to(p[i if p.shape[0] > 1 else 0, j if p.shape[1] > 1 else 0], np.shape(i)).copy()


class _Block:
    """Rows ``xin`` (at most BLOCK_ELEMENTS elements, or one long row) through the tiers."""

    def __init__(self, xin, r0, chunks, kind, eps, g, b, counts, undecided):
        self.xin, self.r0, self.chunks, self.kind, self.eps = xin, r0, chunks, kind, eps
        self.g, self.b, self.counts, self.undecided = g, b, counts, undecided
        self.dt = xin.dtype
        self.fast = self.dt in FAST_FORMATS
        self.single = len(chunks) == 1
        self.est = None  # normalize's estimate= for these rows, or None

    def run(self, yout, mean, rstd):
        n, d = self.xin.shape
        self.yout = yout
        if self.fast:
            exact, split, finite, self.top = float64.row_kinds(self.xin, self.chunks)
            proven = finite & (exact | split) if self.kind == "layer" else finite
        else:  # float64: tier B on every row; it finds the rows holding inf or NaN
            exact = split = None
            finite = self._tier_b(None, mean, rstd)
            proven = np.ones(n, dtype=bool)
        if proven.any() and self.fast:
            A = None if proven.all() else np.flatnonzero(proven)
            mu, r = self._tier_a(A, exact if A is None else exact[A], split if A is None else split[A])
            _store(mean, rstd, A, mu, r)
        B = np.flatnonzero(finite & ~proven)
        if B.size:
            self._tier_b(B, mean, rstd)
        P = np.flatnonzero(~finite)
        if P.size:
            mu, r = plain_rows(self.xin, P, self.chunks, self.kind, self.eps, self.g, self.b, yout)
            _store(mean, rstd, P, mu, r)
            if self.est is not None:
                self.est[P] = np.nan

    # --- tier A -------------------------------------------------------------------------------

    def _tier_a(self, A, exact, split):
        """float64 with t exact (or rounded once in split rows); writes y, queues the undecided."""
        xin = self.xin if A is None else self.xin[A]
        n, d = xin.shape
        kind, g, b = self.kind, self.g, self.b
        split = split if split is not None and split.any() else None
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            x = None
            if self.single and A is None and self.est is not None and not self.g.extreme:
                # every row here: y is computed in the estimate's own rows (_write then skips
                # the copy)
                x = self.est
                x[...] = xin
            elif self.single:
                x = xin.astype(np.float64)
            if kind == "layer":
                S = np.zeros(n)
                Sp = None if split is None else [np.zeros(int(split.sum())), np.zeros(int(split.sum()))]
                top = self.top if A is None else self.top[A]
                Qh = None if split is None else float64.split_quantum(top[split], d)
                for c0, c1 in self.chunks:
                    xc = x if self.single else xin[:, c0:c1].astype(np.float64)
                    S += xc.sum(axis=1)  # exact in exact rows
                    if split is not None:
                        h, low = float64.halves(xc[split], Qh)
                        Sp[0] += h.sum(axis=1)
                        Sp[1] += low.sum(axis=1)
                if split is not None:
                    S[split] = Sp[0] + Sp[1]
            else:
                S = Sp = Qh = None
            T = [np.zeros(n), np.zeros(n)]
            for c0, c1 in self.chunks:
                xc = x if self.single else xin[:, c0:c1].astype(np.float64)
                t = float64.t_of(xc, kind, d, S, split, Sp, Qh)
                hi, e = dd.two_sum(T[0], np.einsum("ij,ij->i", t, t))
                T[0], T[1] = hi, T[1] + e
            s = (T[0] + T[1]) / d + (float(d) * d * self.eps if kind == "layer" else self.eps)
            r = 1.0 / np.sqrt(s)
            if kind == "layer" and self.eps > 2.0**1000 / (float(d) * d):
                # d^2 eps overflowed (eps near the top of float64's range): r = 1/(d sqrt(T/d^3 + eps)),
                # one rounding more (the 6 of E holds it); every such y rounds to a signed 0 anyway
                big = ~np.isfinite(s)
                r[big] = 1.0 / (d * np.sqrt((T[0][big] + T[1][big]) / d / (float(d) * d) + self.eps))
            # sum of squares: gamma_n (gamma_{n+2} for split rows, whose t carries one
            # rounding); /d, + c eps, sqrt, 1/: four more roundings; * r: one; split rows' t:
            # one more. n: the chunk's length, plus 2 for the chunks' double-double sum.
            n_eff = d if self.single else BLOCK_ELEMENTS + 2
            E = ((n_eff + 5) / 2 + 6) * U * 1.01
            for c0, c1 in self.chunks:
                t = x if self.single else float64.t_of(xin[:, c0:c1].astype(np.float64), kind, d, S, split, Sp, Qh)
                gc, bc = g.part(c0, c1, A), b.part(c0, c1, A)
                y = t
                y *= r[:, None]
                Ec = E
                if gc is not None:
                    y *= gc
                    Ec += U
                if bc is None:
                    flags = near_boundary(y, self.dt, rel=2.0 * Ec)
                else:
                    a = y
                    y = a + bc
                    flags = near_boundary(y, self.dt, delta=2.0 * Ec * np.abs(a) + 2.0 * U * np.abs(y))
                y += 0.0  # an unflagged zero is exact (near_boundary): +0
                if (s == 0).any():  # eps = 0 on a constant row: 0/0, NaN by definition
                    undefined = (s == 0)[:, None] & np.isnan(y)
                    flags &= ~undefined
                if gc is not None and g.extreme:
                    flags |= extreme(gc)
                self._write(A, c0, c1, y, flags)
        mu = None if kind == "rms" else S / d
        return mu, (r * d if kind == "layer" else r)  # 1/sqrt(q + eps) = d/sqrt(s)

    def _write(self, A, c0, c1, y, flags, stage="A"):
        """Write a chunk's estimates (float64) in the output format and queue the flagged."""
        out = to_format(y, self.dt) if self.fast else y
        if A is None:
            self.yout[:, c0:c1] = out
        else:
            self.yout[A, c0:c1] = out
        if self.est is not None and not (A is None and y is self.est):  # else written already
            # an element left to the exact tier keeps its estimate, and its bound, except where a
            # gain beyond 2^+-600 may have overflowed or underflowed the products
            if self.g.extreme:
                y = np.where(extreme(np.broadcast_to(self.g.part(c0, c1, A), y.shape)), np.nan, y)
            if A is None:
                self.est[:, c0:c1] = y
            else:
                self.est[A, c0:c1] = y
        flags &= self._defined(A, c0, c1, flags.shape)
        if flags.any():
            i, j = np.nonzero(flags)
            if isinstance(A, slice):
                i = i + A.start
            elif A is not None:
                i = A[i]
            self.undecided.add(i + self.r0, j + c0, stage)

    def _defined(self, A, c0, c1, shape):
        """Where gain and bias are finite: elsewhere the arithmetic's NaN or inf stands."""
        if self.g.finite and self.b.finite:
            return True
        ok = np.ones(shape, dtype=bool)
        for p in (self.g, self.b):
            if p.p is not None and not p.finite:
                ok &= np.broadcast_to(np.isfinite(p.part(c0, c1, A)), shape)
        return ok

    # --- tier B -------------------------------------------------------------------------------

    def _tier_b(self, B, mean, rstd):
        """Double-double for whole rows (B: block indices, or None for all): float64 input,
        rows tier A cannot prove. Stores the statistics; returns which rows were finite."""
        xin = self.xin if B is None else self.xin[B]
        with np.errstate(invalid="ignore", over="ignore", divide="ignore", under="ignore"):
            st = DDRows(xin, self.chunks, self.kind, self.eps, self.fast)
            gpart = lambda rows, c0, c1: _rows_part(self.g.part(c0, c1, B), rows)  # noqa: E731
            bpart = lambda rows, c0, c1: _rows_part(self.b.part(c0, c1, B), rows)  # noqa: E731
            for rows, c0, c1, y, flags in finish_rows(st, xin, gpart, bpart, self.dt, self.fast):
                self._write(rows if B is None else B[rows], c0, c1, y, flags, stage="B")
        finite_rows = int(np.count_nonzero(st.finite))
        self.counts["double_double_rows"] += finite_rows
        self.counts["double_double_elements"] += finite_rows * self.xin.shape[1]
        _store(mean, rstd, B, st.mean, st.rstd)
        return st.finite


def estimate_error(d: int) -> float:
    r"""E of :func:`normalize`'s ``estimate``: a finite estimate :math:`\hat y` of a row of d
    numbers is within :math:`E\,|\gamma t/\sqrt s| + u|\hat y|` of the exact value
    (:math:`\gamma t/\sqrt s` is the value before beta is added). Tier A's
    :math:`((n+5)/2 + 6)\,u` with its 1 % margin, n the length of a chunk (plus 2 for the chunks'
    sum), and u more for the gain; tier B's double-double estimates are far within it."""
    n_eff = d if d <= BLOCK_ELEMENTS else BLOCK_ELEMENTS + 2
    return ((n_eff + 5) / 2 + 6) * U * 1.01 + U


def _rows_part(p, rows):
    """A chunk's parameter (see _Param.part) for a slice of its rows."""
    return p if p is None or p.shape[0] == 1 else p[rows]


def _store(mean, rstd, idx, mu, r):
    sel = slice(None) if idx is None else idx
    rstd[sel] = r
    if mean is not None:
        mean[sel] = mu
