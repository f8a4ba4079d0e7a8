r"""The correctly rounded kernel behind :func:`lneps.layer_norm` and :func:`lneps.rms_norm`.

For a row of d numbers the exact result is :math:`y_i = \gamma_i\,t_i/\sqrt{s} + \beta_i` with

* layer norm: :math:`t_i = d\,x_i - \sum_j x_j` and :math:`s = \frac1d\sum_j t_j^2 + d^2\varepsilon`
  (that is :math:`(x_i-\mu)/\sqrt{q+\varepsilon}` with no rounded division by d before it);
* RMS norm: :math:`t_i = x_i` and :math:`s = \frac1d\sum_j x_j^2 + \varepsilon`.

It is evaluated in three tiers, each with a proven error bound (Ziv's strategy):

A. float64 (16- and 32-bit input). A float16, bfloat16 or float32 row is a set of multiples
   of its smallest spacing Q; when :math:`2d\max|x| < 2^{53}Q` the float64 sum and every
   :math:`t_i` are exact (one rounding-free subtraction each), and rows with a few tiny
   elements are split into a high and a low part whose sums are exact, giving each
   :math:`t_i` rounded once. Then
   :math:`\sum t_j^2` has relative error at most :math:`\gamma_d`, and the estimate
   :math:`\hat y` is within :math:`E|\gamma_i t_i/\sqrt s|` (plus the rounding of the sum with
   beta) with :math:`E = ((d+5)/2 + 6)\,u`. An element is final when no rounding boundary of
   the output format lies within that bound (:func:`lneps.rounding.near_boundary`).
B. double-double (rows tier A cannot prove: float64 input, wide-range rows, rows holding an
   undecided element). Error-free sums and products (:mod:`lneps.dd`) give every quantity to
   about :math:`2^{-100}` relative, with a bound carried along; the same boundary test decides.
C. exact. What is still undecided (exact ties, exact cancellation with beta) is settled by
   exact rational arithmetic (:func:`lneps.oracle.round_quotient`).

So the result is the output format's nearest number to the exact value, ties to even, for
every finite input: float16, bfloat16, float32 and float64 alike. Rows holding NaN or inf
follow the plain float64 formula (NaN or 0 in that row only), and a constant row with
ε = 0 is 0/0 = NaN.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from . import dd
from .oracle import _Rows, format_of, round_quotient
from .rounding import FAST_FORMATS, near_boundary, to_format

__all__ = ["normalize", "normalize_with", "BLOCK_ELEMENTS"]

U = dd.U
#: Rows are processed in blocks of about this many elements, so that every temporary is a
#: few megabytes whatever the input's size.
BLOCK_ELEMENTS = 1 << 17


def normalize(x2d: np.ndarray, *, kind: str, eps: float, gamma=None, beta=None, counts=None):
    """Normalize the rows of ``x2d`` (float16, bfloat16, float32 or float64), correctly rounded.

    ``kind`` is ``"layer"`` or ``"rms"``. ``gamma`` and ``beta`` are float64 arrays that
    broadcast to ``x2d``'s shape (or None). Returns ``(y, mean, rstd)``: y in x2d's dtype, and
    the float64 row statistics (``mean`` is None for RMS norm): mean within 1 ulp of float64,
    rstd within :math:`((d+3)/2+2)` ulp. ``counts`` (a dict) accumulates ``rows``,
    ``elements``, ``double_double_rows`` and ``exact_elements``.
    """
    rows, d = x2d.shape
    dt = x2d.dtype
    y = np.empty(x2d.shape, dtype=dt)
    mean = np.empty(rows) if kind == "layer" else None
    rstd = np.empty(rows)
    counts = {} if counts is None else counts
    for key in ("rows", "elements", "double_double_rows", "exact_elements"):
        counts.setdefault(key, 0)
    counts["rows"] += rows
    counts["elements"] += rows * d
    step = max(1, BLOCK_ELEMENTS // max(d, 1))
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        g, b = _rows_of(gamma, r0, r1, rows), _rows_of(beta, r0, r1, rows)
        _block(x2d[r0:r1], y[r0:r1], None if mean is None else mean[r0:r1], rstd[r0:r1],
               kind, eps, g, b, counts)
    return y, mean, rstd


def _rows_of(p, r0, r1, rows):
    if p is None:
        return None
    return p[r0:r1] if p.ndim == 2 and p.shape[0] == rows and rows > 1 else p


def _block(xin, yout, mean, rstd, kind, eps, g, b, counts):
    x = xin.astype(np.float64)
    n, d = x.shape
    dt = xin.dtype
    fast = dt in FAST_FORMATS
    if fast:
        # Tier A on the whole block (it overwrites x); rows it cannot prove are redone below.
        if kind == "layer":
            exact, split = _row_kinds(xin)
            yhat, undecided, mu, r, finite = _tier_a(x, kind, eps, g, b, dt, split)
            proven = finite & (exact | split)
        else:
            yhat, undecided, mu, r, finite = _tier_a(x, kind, eps, g, b, dt)
            proven = finite
        if dt == np.float16 or dt == np.float32:
            with np.errstate(over="ignore"):  # past the largest number: inf, as it should be
                yout[...] = yhat  # NumPy's float64 -> float16/float32 assignment rounds once
        else:
            yout[...] = to_format(yhat, dt)
        rstd[...] = r
        if mean is not None:
            mean[...] = mu
        need_b = finite & ~proven
        need_b |= finite & undecided.any(axis=1)
    else:
        finite = np.isfinite(x).all(axis=1)
        undecided = np.zeros(x.shape, dtype=bool)
        need_b = finite
    B = np.nonzero(need_b)[0]
    if B.size:
        counts["double_double_rows"] += B.size
        yb, flags, mu, r = _tier_b(xin[B].astype(np.float64), kind, eps, _take(g, B, n), _take(b, B, n), dt)
        yout[B] = to_format(yb, dt) if fast else yb
        undecided[B] = flags
        rstd[B] = r
        if mean is not None:
            mean[B] = mu
    undecided &= finite[:, None]
    for p in (g, b):  # a NaN or infinite gain or bias: the arithmetic's NaN or inf stands
        if p is not None and not np.all(np.isfinite(p)):
            undecided &= np.broadcast_to(np.isfinite(p), undecided.shape)
    if undecided.any():
        C = np.argwhere(undecided)
        counts["exact_elements"] += len(C)
        _tier_c(xin.astype(np.float64), C, kind, eps, g, b, yout, dt)
    P = np.nonzero(~finite)[0]
    if P.size:
        yp, mu, r = _plain(xin[P].astype(np.float64), kind, eps, _take(g, P, n), _take(b, P, n))
        yout[P] = yp.astype(dt)
        rstd[P] = r
        if mean is not None:
            mean[P] = mu


def _take(p, idx, n):
    if p is None:
        return None
    return p[idx] if p.ndim == 2 and p.shape[0] == n and n > 1 else p


# --- tier A ----------------------------------------------------------------------------------


def _row_kinds(xin: np.ndarray):
    r"""Which rows tier A can prove, and how: ``(exact, split)`` boolean masks.

    Every element and every partial sum of a row is a multiple of Q, the spacing at its
    smallest nonzero magnitude. *exact*: :math:`2d\max|x| < 2^{53}Q`, so the float64 sum
    and every :math:`t_i = d x_i - S` are exact. *split*: each :math:`x_i = h_i + l_i`, with
    :math:`h_i` rounded to a multiple of :math:`Q_h = 2^{k-c}` (:math:`2^k > \max|x|`,
    :math:`2^c = 2^{52}/(2d)` rounded down to a power of two) and :math:`|l_i| \le Q_h/2`;
    the sums of the h and of the l, and :math:`d h_i - S_h`, :math:`d l_i - S_l`, are exact when
    :math:`d\,Q_h < 2^{53}Q`: rows whose tiny elements make the first test fail (a float32
    row of N(0,1) numbers holding a 1e-6).
    """
    n, d = xin.shape
    dt = xin.dtype
    if dt == np.float16 and d <= 4096:
        ones = np.ones(n, dtype=bool)  # 2 d 65504 < 2^53 2^-24 for every row
        return ones, ~ones
    width = dt.itemsize * 8
    uint = np.uint16 if width == 16 else np.uint32
    mag = xin.view(uint) & uint((1 << (width - 1)) - 1)
    nmant = {np.dtype(np.float16): 10, np.dtype(np.float32): 23}.get(dt, 7)  # bfloat16: 7
    bias = (1 << (width - 2 - nmant)) - 1
    smallest = np.where(mag == 0, np.iinfo(uint).max, mag).min(axis=1)
    exp_field = np.maximum((smallest >> nmant).astype(np.int64), 1)
    spacing = np.ldexp(1.0, exp_field - bias - nmant)
    largest = mag.max(axis=1).astype(uint).view(dt).astype(np.float64)
    exact = (2.0 * d * largest < 2.0**53 * spacing) | (largest == 0)
    split = ~exact & (d * _split_quantum(largest, d) < 2.0**53 * spacing)
    return exact, split


def _split_quantum(largest, d):
    r""":math:`Q_h = 2^{k-c}`: with :math:`2^k > \max|x|`, :math:`2d \cdot 2^k \le 2^{53} Q_h`."""
    _, k = np.frexp(largest)  # largest < 2**k
    c = 52 - int(2 * d - 1).bit_length()  # 2^c <= 2^52 / (2d)
    return np.ldexp(1.0, k - c)


def _split_t(x, d):
    r""":math:`t_i = d x_i - \sum_j x_j` for split rows, rounded once from its exact value, and
    the row sums :math:`S = S_h + S_l` (see :func:`_row_kinds`)."""
    Qh = _split_quantum(np.abs(x).max(axis=1), d)[:, None]
    C = 1.5 * 2.0**52 * Qh  # adding and subtracting C rounds to a multiple of ulp(C) = Qh
    h = (x + C) - C
    low = x - h  # exact
    Sh, Sl = h.sum(axis=1), low.sum(axis=1)  # both exact
    th = h * d - Sh[:, None]  # exact: |d h_i - S_h| <= 2 d 2^k <= 2^53 Qh
    tl = low * d - Sl[:, None]  # exact: a multiple of Q below 2^53 Q
    return th + tl, Sh + Sl  # t rounded once (relative error u); S to float64


def _tier_a(x, kind, eps, g, b, dt, split=None):
    """float64 evaluation with t exact (the rows :func:`_row_kinds` calls exact) or rounded
    once from its exact value (``split`` rows); returns the estimate, the undecided elements,
    the row statistics and which rows are finite."""
    # Rows holding inf or NaN make inf - inf here; they are redone by the plain formula.
    with np.errstate(invalid="ignore", over="ignore"):
        return _tier_a_unguarded(x, kind, eps, g, b, dt, split)


def _tier_a_unguarded(x, kind, eps, g, b, dt, split):
    n, d = x.shape
    if kind == "layer":
        parts = _split_t(x[split], d) if split is not None and split.any() else None
        S = x.sum(axis=1)
        t = x
        t *= d
        t -= S[:, None]  # exact (_row_kinds)
        if parts is not None:
            t[split], S[split] = parts
        s = np.einsum("ij,ij->i", t, t) / d + float(d) * d * eps
        mu = S / d
        finite = np.isfinite(S)
    else:
        t = x
        s = np.einsum("ij,ij->i", t, t) / d + eps  # squares exact: 2p <= 48 bits
        mu = None
        finite = np.isfinite(s)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = 1.0 / np.sqrt(s)
        t *= r[:, None]
    y = t  # t is not needed again: y takes its place
    # sum of squares: gamma_d (gamma_{d+2} for split rows, whose t carries one rounding);
    # /d, + d^2 eps, sqrt, 1/: four more roundings; * r: one; split rows' t: one more.
    E = ((d + 5) / 2 + 6) * U * 1.01
    if g is not None:
        y *= g
        E += U
    if b is None:
        flags = near_boundary(y, dt, rel=2.0 * E)
    else:
        a = y
        y = a + b
        flags = near_boundary(y, dt, delta=2.0 * E * np.abs(a) + 2.0 * U * np.abs(y))
    zero_s = s == 0
    if zero_s.any():  # eps = 0 on a constant row: 0/0, NaN by definition (not undecided)
        undefined = zero_s[:, None] & np.isnan(y)  # 0 * inf
        y[undefined] = np.nan
        flags &= ~undefined
    rstd = r * d if kind == "layer" else r  # 1/sqrt(q + eps) = d/sqrt(s) for layer norm
    return y, flags, mu, rstd, finite


# --- tier B ----------------------------------------------------------------------------------


def _tier_b(x, kind, eps, g, b, dt):
    """Double-double evaluation; float64 rows are first scaled by a power of two."""
    # Overflow can occur only in rows whose c eps is out of range; they are flagged.
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        return _tier_b_unguarded(x, kind, eps, g, b, dt)


def _tier_b_unguarded(x, kind, eps, g, b, dt):
    n, d = x.shape
    fast = dt in FAST_FORMATS
    k = np.zeros(n, dtype=np.int64)
    et_abs = 0.0  # absolute error of each scaled input (underflow in the scaling)
    if not fast:
        _, k = np.frexp(np.abs(x).max(axis=1))
        k = k.astype(np.int64)
        x = np.ldexp(x, -k[:, None])
        et_abs = 2.0**-1074
    # eps in the scaled units; where it underflows it is negligible, and bounded as such
    eps_s = np.ldexp(eps, -2 * k)
    eps_err = np.where((eps_s < 2.0**-1021) & (eps > 0), 2.0**-1074, 0.0)
    if kind == "layer":
        S_hi, S_lo, eS = dd.pairwise_sum(x)
        eS = eS + d * et_abs
        if fast:
            p, pe = x * d, 0.0  # exact: p + log2(d) <= 53 bits
        else:
            p, pe = dd.two_prod(x, float(d))
        h, e1 = dd.two_sum(p, -S_hi[:, None])
        tl = (e1 + pe) - S_lo[:, None]
        et = eS[:, None] + d * et_abs + 2.02 * U * (np.abs(e1) + np.abs(pe) + np.abs(S_lo)[:, None])
        th, tl = dd.two_sum(h, tl)
        if not fast:  # a constant float64 row: t = 0 exactly, whatever the sum's bound says
            const = (x.max(axis=1) == x.min(axis=1))[:, None]
            th, tl, et = np.where(const, 0.0, th), np.where(const, 0.0, tl), np.where(const, 0.0, et)
        mu = np.ldexp((S_hi + S_lo) / d, k)
    else:
        th, tl, et = x, np.zeros_like(x), np.full(x.shape, et_abs)
        mu = None
    # sum of squares
    q, qe = dd.two_prod(th, th)
    cross = 2.0 * th * tl + tl * tl
    eq = 4 * U * (np.abs(qe) + np.abs(cross)) + 2 * (np.abs(th) + np.abs(tl)) * et + et * et + 2.0**-1070
    T_hi, T_lo, eT = dd.pairwise_sum(q, qe + cross)
    eT = eT + eq.sum(axis=1)
    # s = T/d + c eps, c = d^2 (layer) or 1 (rms)
    s_hi = T_hi / d
    pp, ppe = dd.two_prod(s_hi, float(d))
    s_lo = (((T_hi - pp) - ppe) + T_lo) / d
    es = eT / d + 4 * U * np.abs(s_lo)
    c = float(d) * d if kind == "layer" else 1.0
    E_hi, E_lo = dd.two_prod(np.full(n, c), eps_s)
    a1, a2 = dd.two_sum(s_hi, E_hi)
    a2 = a2 + (s_lo + E_lo)
    s_hi, s_lo = dd.two_sum(a1, a2)
    es = es + 4 * U * (np.abs(a2) + np.abs(E_lo)) + c * eps_err
    # s is truly 0 only for a zero sum of squares with eps = 0 (a scaled eps may underflow).
    s_zero = (T_hi == 0) & (eps == 0)
    y, flags, r = _dd_finish(th, tl, et, s_hi, s_lo, es, g, b, dt, s_zero)
    # A tiny float64 row scaled up so far that c eps overflows: settled exactly.
    flags |= ~(c * eps_s < 2.0**1000)[:, None]
    with np.errstate(over="ignore", divide="ignore"):
        rstd = np.ldexp(r * (d if kind == "layer" else 1), -k)
        rstd = np.where(T_hi == 0, 1 / np.sqrt(eps), rstd)  # a zero row: 1/sqrt(eps) unscaled
    return y, flags, mu, rstd


def _dd_finish(th, tl, et, s_hi, s_lo, es, g, b, dt, s_zero):
    r"""From :math:`t` (``th + tl``, error ``et``) and :math:`s` (``s_hi + s_lo``, error
    ``es``): :math:`y = \gamma t/\sqrt s + \beta` in double-double, rounded to ``dt``, with the
    undecided elements flagged. ``s_zero`` marks the rows whose exact s is 0 (0/0 where t = 0).
    Returns ``(y, flags, 1/sqrt(s))``."""
    # 1/sqrt(s): one Newton step from r0, r = r0 (1 - rho)^(-1/2) with rho = 1 - s r0^2
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r0 = 1.0 / np.sqrt(s_hi)
        w, we = dd.two_prod(r0, r0)
        z, ze = dd.two_prod(s_hi, w)
        tail = s_hi * we + s_lo * w
        rho = ((1.0 - z) - ze) - tail
        e_rho = 4 * U * (np.abs(ze) + np.abs(tail) + np.abs(rho)) + 2.0**-104
        r_lo = r0 * rho * 0.5
        # relative error of r0 + r_lo: the series' next term, rho's error, s's error
        er = 0.4 * rho * rho + 0.5 * e_rho + 2 * U * np.abs(rho) + 0.51 * es / s_hi + 2.0**-104
        m, me = dd.two_prod(th, r0[:, None])
        rest = th * r_lo[:, None] + tl * r0[:, None] + tl * r_lo[:, None]
        me = me + rest
        rr = r0[:, None] * (1 + 2 * U)
        err = (np.abs(th) + np.abs(tl)) * rr * er[:, None] + et * rr + 4 * U * (np.abs(rest) + np.abs(me))
    if g is not None:
        m2, m2e = dd.two_prod(m, g)
        tail = me * g
        m, me = m2, m2e + tail
        err = err * np.abs(g) + 4 * U * (np.abs(tail) + np.abs(m2e))
    if b is not None:
        yh, e = dd.two_sum(m, b)
        yl = e + me
        err = err + 4 * U * np.abs(yl)
    else:
        yh, yl = m, me
    zero = (th == 0) & (tl == 0) & (et == 0)  # t is exactly 0: y is exactly 0 gamma + beta
    exact = (0.0 if g is None else 0.0 * g) + (0.0 if b is None else b)  # NaN for a NaN gamma
    yh, yl = np.where(zero, exact, yh), np.where(zero, 0.0, yl)
    err = np.where(zero, 0.0, err)
    undefined = s_zero[:, None] & zero
    yl = np.where(np.isfinite(yh), yl, 0.0)  # beside an infinite beta the tail is inf - inf
    if dt in FAST_FORMATS:  # (non-finite estimates are flagged)
        y = yh + yl
        flags = near_boundary(y, dt, delta=2.0 * err + 2 * U * np.abs(y))
    else:
        y, flags = _decide_float64(yh, yl, 2.0 * err)
    y = np.where(undefined, np.nan, y)
    return y, flags & ~undefined, r0 + r_lo


def normalize_with(x2d: np.ndarray, mean, var, *, eps: float, gamma=None, beta=None, counts=None):
    r"""Rows normalized with given statistics, correctly rounded:
    :math:`\gamma (x - m)/\sqrt{v + \varepsilon} + \beta` (batch normalization at inference).

    ``mean`` and ``var`` are float64 arrays of shape ``(rows, 1)`` (one statistic per row);
    ``gamma``, ``beta`` broadcast to ``x2d``. Returns ``(y, rstd)``, rstd correctly rounded up
    to one float64 ulp.
    """
    dt = x2d.dtype
    counts = {} if counts is None else counts
    counts.setdefault("exact_elements", 0)
    x = x2d.astype(np.float64)
    m = np.broadcast_to(np.asarray(mean, dtype=np.float64), (x.shape[0], 1))
    v = np.asarray(var, dtype=np.float64).reshape(-1)
    th, tl = dd.two_sum(x, -m)  # exact
    s_hi, s_lo = dd.two_sum(v, np.full(v.shape, eps))  # exact
    zeros = np.zeros_like(th)
    y, flags, r = _dd_finish(th, tl, zeros, s_hi, s_lo, np.zeros_like(s_hi), gamma, beta, dt, s_hi == 0)
    finite = np.isfinite(x) & np.isfinite(m) & np.isfinite(v)[:, None]
    for p in (gamma, beta):
        if p is not None:
            finite = finite & np.isfinite(p)
    flags = (flags | ~np.isfinite(th)) & finite  # NaN or inf in: the arithmetic's NaN or inf out
    out = to_format(y, dt) if dt in FAST_FORMATS else y
    if flags.any():
        fmt = format_of(dt)
        gg = None if gamma is None else np.broadcast_to(gamma, x.shape)
        bb = None if beta is None else np.broadcast_to(beta, x.shape)
        idx = np.argwhere(flags)
        counts["exact_elements"] += len(idx)
        for i, j in idx:
            a = Fraction(float(x[i, j])) - Fraction(float(m[i, 0]))
            a *= 1 if gg is None else Fraction(float(gg[i, j]))
            s = Fraction(float(v[i])) + Fraction(eps)
            out[i, j] = round_quotient(a, s, 0 if bb is None else Fraction(float(bb[i, j])), fmt)
    return out, r


def _decide_float64(yh, yl, delta):
    """Round ``yh + yl`` to float64 and flag it unless no float64 midpoint is within delta."""
    h, l = dd.two_sum(yh, yl)
    a = np.abs(h)
    with np.errstate(invalid="ignore", over="ignore"):
        up = np.spacing(a)  # to the next number away from 0
        # toward 0 the spacing halves below a power of two (a normal number, not 0)
        power_of_two = (a.view(np.uint64) & np.uint64((1 << 52) - 1)) == 0
        down = np.where(power_of_two & (a >= 2.0**-1021), up / 2, up)
        away = np.where(h < 0, -l, l)  # the tail, measured away from 0
        margin = delta * 1.01
        # (twice the distances: half the smallest subnormal is not a float64 number)
        safe = (up - 2 * away > 2 * margin) & (down + 2 * away > 2 * margin) & np.isfinite(h)
    return h, ~safe


# --- tier C and the plain path ----------------------------------------------------------------


def _tier_c(x, idx, kind, eps, g, b, out, dt):
    fmt = format_of(dt)
    rows = np.unique(idx[:, 0])
    exact = _Rows(x[rows], Fraction(eps), "layer_norm" if kind == "layer" else "rms_norm")
    where = {int(r): k for k, r in enumerate(rows)}
    gg = None if g is None else np.broadcast_to(g, x.shape)
    bb = None if b is None else np.broadcast_to(b, x.shape)
    for i, j in idx:
        k = where[int(i)]
        a = Fraction(int(exact.num[k, j])) * (1 if gg is None else Fraction(float(gg[i, j])))
        value = round_quotient(a, exact.s[k], 0 if bb is None else Fraction(float(bb[i, j])), fmt)
        out[i, j] = value


def _plain(x, kind, eps, g, b):
    """The textbook two-pass formula in float64, for rows holding NaN or inf."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        if kind == "layer":
            mu = x.mean(axis=1)
            v = x - mu[:, None]
            r = 1.0 / np.sqrt((v * v).mean(axis=1) + eps)
        else:
            mu, v = None, x
            r = 1.0 / np.sqrt((x * x).mean(axis=1) + eps)
        y = v * r[:, None]
        if g is not None:
            y = y * g
        if b is not None:
            y = y + b
    return y, mu, r
