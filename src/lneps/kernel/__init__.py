r"""The correctly rounded kernel behind :func:`lneps.layer_norm` and :func:`lneps.rms_norm`.

For a row of d numbers the exact result is :math:`y_i = \gamma_i\,t_i/\sqrt{s} + \beta_i` with

* layer norm: :math:`t_i = d\,x_i - \sum_j x_j` and :math:`s = \frac1d\sum_j t_j^2 + d^2\varepsilon`
  (that is :math:`(x_i-\mu)/\sqrt{q+\varepsilon}` with no rounded division by d before it);
* RMS norm: :math:`t_i = x_i` and :math:`s = \frac1d\sum_j x_j^2 + \varepsilon`.

It is evaluated in tiers, each with a proven error bound (Ziv's strategy):

A. float64 (16- and 32-bit input). A float16, bfloat16 or float32 row is a set of multiples
   of its smallest spacing Q; when :math:`2d\max|x| < 2^{53}Q` the float64 sum and every
   :math:`t_i` are exact (one rounding-free subtraction each), and rows with a few tiny
   elements are split into a high and a low part whose sums are exact, giving each
   :math:`t_i` rounded once. Then :math:`\sum t_j^2` (over a chunk of at most
   :data:`BLOCK_ELEMENTS` columns, chunks added in double-double) has relative error at most
   :math:`\gamma_n` (n the chunk's length), and the estimate :math:`\hat y` is within
   :math:`E|\gamma_i t_i/\sqrt s|` (plus the rounding of the sum with beta) with
   :math:`E = ((n+5)/2 + 6)\,u`. An element is final when no rounding boundary of the output
   format, and not 0, lies within that bound (:func:`lneps.kernel.rounding.near_boundary`).
B. double-double (float64 input, rows tier A cannot prove, and the elements tier A leaves
   undecided): :mod:`lneps.kernel.double_double`, every quantity to about :math:`2^{-100}` relative with
   a bound carried along; the same boundary test decides. A float64 result it cannot decide
   (a bias cancelling :math:`\gamma u` to its last bits, an element at its row's mean) is
   tried in triple precision (:mod:`lneps.kernel.triple`).
C. exact (:mod:`lneps.kernel.exact`). An element still undecided lies on or within a hair of
   a boundary: exact ties and exact cancellation, recognized and rounded exactly with
   error-free float64 operations, vectorized; what remains (rare) by rational arithmetic,
   rounded exactly by the kernel's own :func:`lneps.kernel.surd.round_surd` (the kernel
   never imports :mod:`lneps.oracle`, which judges it).
   :mod:`lneps.kernel.settle` gathers the undecided elements of all blocks and takes them
   through these tiers.

So the result is the output format's nearest number to the exact value, ties to even, for
every finite input: float16, bfloat16, float32 and float64 alike. An exact zero is +0; a
nonzero value that rounds to zero keeps its sign. Rows holding NaN or inf follow the plain
float64 formula (NaN or 0 in that row only), and a constant row with ε = 0 is 0/0 = NaN.

Rows are processed in blocks of about :data:`BLOCK_ELEMENTS` elements, and a longer row in
chunks of that many columns (each pass over a row reads it chunk by chunk), so the working
memory is a few megabytes beyond the output, whatever the shape.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from . import dd
from .double_double import DDRows, extreme, finish_rows, inference
from .exact import exact_affine, exact_root
from .settle import Settler
from .surd import binary_format, round_surd
from .rounding import FAST_FORMATS, near_boundary, to_format

__all__ = ["normalize", "normalize_with", "estimate_error", "BLOCK_ELEMENTS"]

U = dd.U
#: Rows are processed in blocks of about this many elements, and longer rows in chunks of
#: this many columns, so that every temporary is a few megabytes whatever the input's size.
BLOCK_ELEMENTS = 1 << 16
_KEYS = ("rows", "elements", "double_double_rows", "double_double_elements", "triple_elements",
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
    for key in _KEYS:
        counts.setdefault(key, 0)
    counts["rows"] += rows
    counts["elements"] += rows * d
    g, b = _Param(gamma), _Param(beta)
    if d <= BLOCK_ELEMENTS:
        step, chunks = max(1, BLOCK_ELEMENTS // max(d, 1)), [(0, d)]
    else:
        step, chunks = 1, [(c, min(d, c + BLOCK_ELEMENTS)) for c in range(0, d, BLOCK_ELEMENTS)]
    exact_sum = (lambda xr: _kinds(xr, chunks)[0]) if x2d.dtype in FAST_FORMATS else None
    settler = Settler(x2d, y, chunks, kind, eps, g, b, counts, BLOCK_ELEMENTS, exact_sum)
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        block = _Block(x2d[r0:r1], r0, chunks, kind, eps, g.rows(r0, r1), b.rows(r0, r1), counts, settler)
        block.est = None if estimate is None else estimate[r0:r1]
        block.run(y[r0:r1], None if mean is None else mean[r0:r1], rstd[r0:r1])
    settler.flush()
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

    def __init__(self, xin, r0, chunks, kind, eps, g, b, counts, settler):
        self.xin, self.r0, self.chunks, self.kind, self.eps = xin, r0, chunks, kind, eps
        self.g, self.b, self.counts, self.settler = g, b, counts, settler
        self.dt = xin.dtype
        self.fast = self.dt in FAST_FORMATS
        self.single = len(chunks) == 1
        self.est = None  # normalize's estimate= for these rows, or None

    def run(self, yout, mean, rstd):
        n, d = self.xin.shape
        self.yout = yout
        if self.fast:
            exact, split, finite, self.top = _kinds(self.xin, self.chunks)
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
            mu, r = _plain(self.xin, P, self.chunks, self.kind, self.eps, self.g, self.b, yout)
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
            x = xin.astype(np.float64) if self.single else None
            if kind == "layer":
                S = np.zeros(n)
                Sp = None if split is None else [np.zeros(int(split.sum())), np.zeros(int(split.sum()))]
                top = self.top if A is None else self.top[A]
                Qh = None if split is None else _split_quantum(top[split], d)
                for c0, c1 in self.chunks:
                    xc = x if self.single else xin[:, c0:c1].astype(np.float64)
                    S += xc.sum(axis=1)  # exact in exact rows
                    if split is not None:
                        h, low = _halves(xc[split], Qh)
                        Sp[0] += h.sum(axis=1)
                        Sp[1] += low.sum(axis=1)
                if split is not None:
                    S[split] = Sp[0] + Sp[1]
            else:
                S = Sp = Qh = None
            T = [np.zeros(n), np.zeros(n)]
            for c0, c1 in self.chunks:
                xc = x if self.single else xin[:, c0:c1].astype(np.float64)
                t = _t_of(xc, kind, d, S, split, Sp, Qh)
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
                t = x if self.single else _t_of(xin[:, c0:c1].astype(np.float64), kind, d, S, split, Sp, Qh)
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
        if self.est is not None:
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
            self.settler.add(i + self.r0, j + c0, stage)

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


# --- tier A helpers ---------------------------------------------------------------------------


def _row_kinds(xin: np.ndarray, chunks=None):
    """``(exact, split, finite)`` of :func:`_kinds`."""
    return _kinds(xin, chunks)[:3]


def _kinds(xin: np.ndarray, chunks=None):
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
    uint = np.uint16 if width == 16 else np.uint32
    inf_bits = int(np.array(np.inf, dtype=dt).view(uint))
    smallest = np.full(n, np.iinfo(uint).max, dtype=uint)
    largest = np.zeros(n, dtype=uint)
    for c0, c1 in chunks:
        mag = xin[:, c0:c1].view(uint) & uint((1 << (width - 1)) - 1)
        np.maximum(largest, mag.max(axis=1), out=largest)
        mag[mag == 0] = np.iinfo(uint).max
        np.minimum(smallest, mag.min(axis=1), out=smallest)
    finite = largest < inf_bits
    top = np.where(finite, largest, 0).astype(uint).view(dt).astype(np.float64)  # max |x|
    if dt == np.float16 and d <= 4096:
        return finite, np.zeros(n, dtype=bool), finite, top  # 2 d 65504 < 2^53 2^-24 for every row
    nmant = {np.dtype(np.float16): 10, np.dtype(np.float32): 23}.get(dt, 7)  # bfloat16: 7
    bias = (1 << (width - 2 - nmant)) - 1
    exp_field = np.maximum((smallest >> nmant).astype(np.int64), 1)
    spacing = np.ldexp(1.0, exp_field - bias - nmant)
    with np.errstate(invalid="ignore", over="ignore"):
        exact = (2.0 * d * top < 2.0**53 * spacing) | (top == 0)
        split = ~exact & (d * _split_quantum(top, d) < 2.0**53 * spacing)
    return exact & finite, split & finite, finite, top


def _split_quantum(largest, d):
    r""":math:`Q_h = 2^{k-c}`: with :math:`2^k > \max|x|`, :math:`2d \cdot 2^k \le 2^{53} Q_h`."""
    _, k = np.frexp(largest)  # largest < 2**k
    c = 52 - int(2 * d - 1).bit_length()  # 2^c <= 2^52 / (2d)
    return np.ldexp(1.0, k - c)


def _halves(x, Qh):
    """x = h + low exactly, h a multiple of Qh (adding and subtracting C rounds to ulp(C) = Qh)."""
    C = 1.5 * 2.0**52 * Qh[:, None]
    h = (x + C) - C
    return h, x - h


def _t_of(x, kind, d, S, split, Sp, Qh):
    r""":math:`t = d x - S` in place of the float64 chunk x (exact rows), or rounded once from
    its exact value in split rows: :math:`(d h - S_h) + (d l - S_l)`, each part exact."""
    if kind == "rms":
        return x
    parts = None if split is None else _halves(x[split], Qh)
    x *= d
    x -= S[:, None]  # exact (_row_kinds)
    if parts is not None:
        h, low = parts
        x[split] = (h * d - Sp[0][:, None]) + (low * d - Sp[1][:, None])
    return x


# --- batch normalization at inference ------------------------------------------------------


def normalize_with(x2d: np.ndarray, mean, var, *, eps: float, gamma=None, beta=None, counts=None):
    r"""Rows normalized with given statistics, correctly rounded:
    :math:`\gamma (x - m)/\sqrt{v + \varepsilon} + \beta` (batch normalization at inference).

    ``mean`` and ``var`` are float64 arrays of shape ``(rows, 1)`` (one statistic per row);
    ``gamma``, ``beta`` broadcast to ``x2d``. Returns ``(y, rstd)``, rstd correctly rounded up
    to one float64 ulp. :math:`x - m` and :math:`v + \varepsilon` are exact double-doubles; the
    quotient is decided as in tier B (:func:`lneps.kernel.double_double.inference`), exact ties and
    cancellation as in the exact tier, the rest by rational arithmetic. Signed zeros as in
    :func:`normalize`.
    """
    counts = {} if counts is None else counts
    for key in _KEYS:
        counts.setdefault(key, 0)
    n, d = x2d.shape
    m = np.broadcast_to(np.asarray(mean, dtype=np.float64), (n, 1))
    v = np.broadcast_to(np.asarray(var, dtype=np.float64).reshape(-1), (n,))
    gg = None if gamma is None else np.broadcast_to(np.asarray(gamma, dtype=np.float64), x2d.shape)
    bb = None if beta is None else np.broadcast_to(np.asarray(beta, dtype=np.float64), x2d.shape)
    # Every element is decided on its own (the statistics are given), so blocks of about
    # BLOCK_ELEMENTS elements bound the float64 temporaries whatever the input's size.
    y = np.empty(x2d.shape, dtype=x2d.dtype)
    rstd = np.empty(n)
    step, width = max(1, BLOCK_ELEMENTS // max(d, 1)), min(max(d, 1), BLOCK_ELEMENTS)
    for r0 in range(0, n, step):
        r1 = min(n, r0 + step)
        for c0 in range(0, max(d, 1), width):
            c1 = min(d, c0 + width)
            part = (lambda p: None if p is None else p[r0:r1, c0:c1])
            y[r0:r1, c0:c1], rstd[r0:r1] = _with_block(x2d[r0:r1, c0:c1], m[r0:r1], v[r0:r1], eps,
                                                       part(gg), part(bb), counts)
    return y, rstd


def _with_block(x2d, m, v, eps, gg, bb, counts):
    """:func:`normalize_with` on one block: gg and bb (or None) have x2d's shape."""
    dt = x2d.dtype
    fast = dt in FAST_FORMATS
    x = x2d.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore", under="ignore"):
        y, flags, a, bp, s_hi, rstd = inference(x, m, v, eps, gg, bb, dt, fast)
    finite = np.isfinite(x) & np.isfinite(m) & np.isfinite(v)[:, None]
    for p in (gg, bb):
        if p is not None:
            finite = finite & np.isfinite(p)
    flags &= finite  # NaN or inf in: the arithmetic's NaN or inf out
    out = to_format(y, dt) if fast else y
    if flags.any():
        I, J = np.nonzero(flags)
        gi = None if gg is None else gg[I, J]
        bi = None if bb is None else bb[I, J]
        with np.errstate(invalid="ignore", over="ignore", divide="ignore", under="ignore"):
            values, done = exact_affine(a[I, J], bp[I, J], exact_root(v, eps)[I], gi, bi, dt)
        done &= s_hi[I] != 0  # 0/0 and a/0: left to the rational arithmetic
        counts["exact_elements"] += int(flags.sum())
        out[I[done], J[done]] = to_format(values[done], dt) if fast else values[done]
        fmt = binary_format(dt)
        for i, j in zip(I[~done], J[~done]):
            counts["fraction_elements"] += 1
            q = Fraction(float(x[i, j])) - Fraction(float(m[i, 0]))
            q *= 1 if gg is None else Fraction(float(gg[i, j]))
            s = Fraction(float(v[i])) + Fraction(eps)
            out[i, j] = round_surd(q, s, 0 if bb is None else Fraction(float(bb[i, j])), fmt)
    return out, rstd


# --- the plain path ---------------------------------------------------------------------------


def _plain(xin, P, chunks, kind, eps, g, b, yout):
    """The textbook two-pass formula in float64, for rows holding NaN or inf, chunk by chunk."""
    xr = xin[P]
    n, d = xr.shape
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        mu = np.zeros(n)
        if kind == "layer":
            for c0, c1 in chunks:
                mu += xr[:, c0:c1].astype(np.float64).sum(axis=1)
            mu /= d
        q = np.zeros(n)
        for c0, c1 in chunks:
            v = xr[:, c0:c1].astype(np.float64) - mu[:, None]
            q += (v * v).sum(axis=1)
        r = 1.0 / np.sqrt(q / d + eps)
        for c0, c1 in chunks:
            y = (xr[:, c0:c1].astype(np.float64) - mu[:, None]) * r[:, None]
            gc, bc = g.part(c0, c1, P), b.part(c0, c1, P)
            if gc is not None:
                y = y * gc
            if bc is not None:
                y = y + bc
            yout[P, c0:c1] = y.astype(yout.dtype)
    return (mu if kind == "layer" else None), r
