r"""The correctly rounded backward pass of layer normalization and RMS normalization.

For one row of d numbers x, upstream gradient g (:math:`\partial L/\partial y`) and gain γ
(:math:`\hat g = \gamma\odot g`), with every input taken as the binary number it stores, write

* layer norm: :math:`t_i = d\,x_i - \sum_j x_j` and :math:`s = \frac1d\sum_j t_j^2 + d^2\varepsilon`
  (so :math:`\sqrt s = d\sqrt{q+\varepsilon}`, q the biased variance, and :math:`u_i = t_i/\sqrt s`);
* RMS norm: :math:`t_i = x_i` and :math:`s = \frac1d\sum_j x_j^2 + \varepsilon` (:math:`u_i = t_i/\sqrt s`).

With :math:`G = \sum_j \hat g_j` and :math:`H = \sum_j \hat g_j t_j`, the gradients are

.. math::

    \partial L/\partial x_i = \frac{d\hat g_i - G - t_i H/s}{\sqrt s}\ \text{(layer)},\quad
    \frac{\hat g_i - t_i H/(d s)}{\sqrt s}\ \text{(RMS)},\qquad
    \partial L/\partial\gamma_j = \sum_{\text{rows}} \frac{g_j t_j}{\sqrt s},\qquad
    \partial L/\partial\beta_j = \sum_{\text{rows}} g_j,

the formulas of :mod:`lneps.backward` rewritten without a rounded division. Each row is turned
into integers: :math:`x_j = X_j 2^{e_x}`, :math:`g_j = G_j 2^{e_g}`, :math:`\gamma_j = \Gamma_j
2^{e_\gamma}`, :math:`\varepsilon = E\,2^{e_\varepsilon}` (a common exponent per row), so that
:math:`t_j = \tau_j 2^{e_x}` and :math:`s = \sigma 2^{e_s}/d` with integers :math:`\tau_j` and
:math:`\sigma` (:math:`e_s` even), and

.. math::

    \partial L/\partial x_i = N_i\,2^{e_g+e_\gamma-e_s/2}\sqrt{d/\sigma^3},\qquad
    N_i = (c\Psi_i - [\textstyle\sum_j\Psi_j])\,\sigma - c\,\kappa\,\tau_i \textstyle\sum_j \Psi_j\tau_j,

with :math:`\Psi_j = \Gamma_j G_j`, :math:`\kappa = 2^{2e_x - e_s}`, c = d for layer norm (the
bracketed sum only there) and c = 1 for RMS norm. :math:`N_i` is an exact integer (Python
integers, vectorized in NumPy object arrays); only the square root is irrational. So

* **dx** (Ziv's strategy). :math:`\sqrt{d/\sigma^3}` is bracketed by an integer square root to
  130 bits. For float16, bfloat16 and float32 output the estimate
  :math:`\mathrm{fl}(\mathrm{fl}(N_i)\,\mathrm{fl}(\sqrt{d/\sigma^3}))` is within
  :math:`3.01\cdot 2^{-53}` relative (bound used: :math:`4\cdot 2^{-53}`) and final unless a
  rounding boundary of the format lies that close (:func:`lneps.kernel.rounding.near_boundary`);
  for float64 output a double-double product, within :math:`2^{-100}` relative, is final unless
  :func:`lneps.kernel.rounding.decide_float64` flags it. A flagged element, whose value is
  :math:`a/\sqrt w` with rationals a and w > 0, is rounded exactly in integers by the
  kernel's one exact rounding, :func:`lneps.kernel.surd.round_surd` (ties, possible when
  :math:`\sigma d` is a square, to even). :math:`N_i = 0` is an exact +0. The integers and
  their float64 pairs come from :mod:`lneps.kernel.integers`.
* **dγ** is a sum of square roots of different rationals. Each term is a double-double product
  (relative error below :math:`2^{-100}`), the column summed in double-double with a proven
  bound (:func:`lneps.kernel.expansions.pairwise_sum`), and decided as dx is. An undecided column
  (cancellation, or a value on a boundary) is rounded exactly by
  :class:`lneps.kernel.root_sums.ExactColumnGradient`: the rows grouped by the class of
  :math:`\sigma` modulo rational squares, each group summed as one rational times one square
  root, which decides whether the column is rational.
* **dβ** is a sum of floats: :func:`math.fsum` is the float64 number nearest to it, and a
  second :func:`math.fsum` of the rest gives the exact sign of what it left out, which is all
  :func:`lneps.kernel.rounding.round_pair` needs to round it once to a narrower format (an
  intermediate overflow falls back to rational arithmetic).

Conventions. An exact zero is +0; a nonzero value that rounds to zero keeps its sign. A row of
x or g holding NaN or inf, and every row when γ does, gets dx from the plain float64 formula
(NaN or inf as that arithmetic gives them), as does a row with s = 0 (a constant row, for
layer norm, or a zero row, for RMS norm, with ε = 0: :math:`u = 0/0`, so its dx is NaN). If
any row has a non-finite x or s = 0, every column of dγ is the plain float64 sum of
:math:`g\odot u` (NaN where a u is 0/0 or NaN); otherwise a column of dγ or dβ with a
non-finite g is the float64 sum. Everything else is the output format's nearest number to the
exact value, ties to even, whatever the magnitudes (subnormal and overflowing results included).

Cost: a few microseconds an element (Python integers in object arrays, rows in blocks of
:data:`BLOCK_ELEMENTS` elements); ``make bench`` measures it against the forward pass.

This module does not use :mod:`lneps.oracle` (which judges the package); the tests judge it with
rational and mpmath arithmetic of their own.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ..formats import format_of, to_format
from . import expansions as dd
from .integers import float_parts, product_parts, root_parts, scaled_integers
from .root_sums import ExactColumnGradient
from .rounding import decide_float64, near_boundary, round_pair
from .surd import round_surd

__all__ = ["layer_norm_gradients", "rms_norm_gradients", "BLOCK_ELEMENTS"]

#: Rows are processed in blocks of about this many elements (Python integers in object
#: arrays: a few megabytes each).
BLOCK_ELEMENTS = 1 << 15

_SMALL = (4.0 * dd.U) * 1.01  # the 16- and 32-bit estimate's relative bound (3.01 u proven)
_DD = 2.0**-100  # the double-double products' relative bound (about 2^-102 proven)
_KEYS = ("rows", "plain_rows", "exact_dx", "dgamma_columns_exact", "dgamma_columns_plain",
         "dgamma_refinements", "dbeta_fraction")


# --- the plain float64 formula ----------------------------------------------------------------


def _plain(kind, x, g, gam, eps):
    """The float64 formula of :mod:`lneps.backward` for rows x, g: ``(dx, u)``."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore", under="ignore"):
        if kind == "layer":
            v = x - x.mean(axis=1, keepdims=True)
            r = 1.0 / np.sqrt((v * v).mean(axis=1, keepdims=True) + eps)
            u = v * r
            gh = g if gam is None else g * gam
            dx = (gh - gh.mean(axis=1, keepdims=True) - u * (gh * u).mean(axis=1, keepdims=True)) * r
        else:
            r = 1.0 / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps)
            u = x * r
            gh = g if gam is None else g * gam
            dx = (gh - u * (gh * u).mean(axis=1, keepdims=True)) * r
    return dx, u


# --- the rows ---------------------------------------------------------------------------------


class _Rows:
    """Exact integer statistics of the rows (kept for settling dγ columns exactly)."""

    def __init__(self, n):
        self.sigma = [0] * n  # s = sigma 2^es / d
        self.es = [0] * n
        self.ex = [0] * n
        self.eg = [0] * n
        self.S = [0] * n  # sum of X (layer norm)


def _gradients(kind, x, dy, gamma, eps, dtype, counts, want_beta):
    x = np.asarray(x)
    dy = np.asarray(dy)
    if x.ndim != 2 or dy.shape != x.shape:
        raise ValueError(f"x and dy must be 2-D of one shape; got {x.shape} and {dy.shape}")
    n, d = x.shape
    dt = np.dtype(x.dtype if dtype is None else dtype)
    fmt = format_of(dt)
    counts = {} if counts is None else counts
    for key in _KEYS:
        counts.setdefault(key, 0)
    x64 = x.astype(np.float64)
    g64 = dy.astype(np.float64)
    gam = None
    if gamma is not None:
        gam = np.asarray(gamma).astype(np.float64).reshape(-1)
        gam = np.full(d, gam[0]) if gam.size == 1 else gam
        if gam.shape != (d,):
            raise ValueError(f"gamma must be a scalar or hold d = {d} gains; got {np.shape(gamma)}")
    eps = float(eps)
    layer = kind == "layer"
    c_dx = d if layer else 1
    c_eps = d**3 if layer else d
    em, ee = math.frexp(eps)
    E_eps, e_eps = int(math.ldexp(em, 53)), ee - 53

    dx = np.empty((n, d), dtype=dt)
    x_fin = np.isfinite(x64).all(axis=1)
    g_ok = np.isfinite(g64)
    gam_fin = gam is None or bool(np.isfinite(gam).all())
    # rows with finite x are processed (their s and u feed dγ); their dx is exact where g and
    # γ are finite too: elsewhere the plain formula's NaN or inf replaces it
    exact_rows = np.flatnonzero(x_fin)
    dx_rows = x_fin & g_ok.all(axis=1) & gam_fin
    gs = np.where(g_ok, g64, 0.0)  # (the integers need finite numbers)
    zero_s = np.zeros(n, dtype=bool)
    if gam is not None:
        Gam, e_gam = scaled_integers(np.where(np.isfinite(gam), gam, 0.0)[None, :])
        Gam, e_gam = Gam[0], int(e_gam[0])
    else:
        Gam, e_gam = None, 0
    rows = _Rows(n)
    # dgamma partial sums per block: (Emax, s, e, bound) in units of 2^Emax, and zero columns
    acc = None  # the running column sums of dγ: (Emax, s, e, bound), in units of 2^Emax
    nonzero_col = np.zeros(d, dtype=bool)
    counts["rows"] += n
    step = max(1, BLOCK_ELEMENTS // max(d, 1))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore", under="ignore"):
        for b0 in range(0, exact_rows.size, step):
            R = exact_rows[b0:b0 + step]
            X, ex = scaled_integers(x64[R])
            G, eg = scaled_integers(gs[R])
            if layer:
                S = X.sum(axis=1)
                tau = X * d - S[:, None]
            else:
                S = [0] * R.size
                tau = X
            T = (tau * tau).sum(axis=1)
            Psi = G if Gam is None else G * Gam[None, :]
            SP = Psi.sum(axis=1) if layer else None
            Eta = (Psi * tau).sum(axis=1)
            A = np.empty(R.size, dtype=object)
            B = np.empty(R.size, dtype=object)
            C = np.empty(R.size, dtype=object)
            Fh, Fl, Fe = np.zeros(R.size), np.zeros(R.size), np.zeros(R.size, dtype=np.int64)
            Ph, Pl, Pe = np.zeros(R.size), np.zeros(R.size), np.zeros(R.size, dtype=np.int64)
            ok = np.ones(R.size, dtype=bool)
            for k in range(R.size):
                exk, Tk = int(ex[k]), int(T[k])
                es = 2 * exk if E_eps == 0 else min(2 * exk, e_eps)
                es -= es & 1
                sigma = (Tk << (2 * exk - es)) + ((c_eps * E_eps) << (e_eps - es) if E_eps else 0)
                i = int(R[k])
                rows.sigma[i], rows.es[i], rows.ex[i], rows.eg[i] = sigma, es, exk, int(eg[k])
                rows.S[i] = int(S[k])
                if sigma == 0:
                    ok[k] = False
                    A[k] = B[k] = C[k] = 0
                    continue
                kappa = 1 << (2 * exk - es)
                A[k] = c_dx * sigma
                B[k] = int(SP[k]) * sigma if layer else 0
                C[k] = c_dx * kappa * int(Eta[k])
                h, l_, e = root_parts(d, sigma**3)
                Fh[k], Fl[k], Fe[k] = h, l_, e + int(eg[k]) + e_gam - es // 2
                h, l_, e = root_parts(d, sigma)
                Ph[k], Pl[k], Pe[k] = h, l_, e + int(eg[k]) + exk - es // 2
            zero_s[R[~ok]] = True
            # dx = N 2^Fe (Fh + Fl), N exact
            N = Psi * A[:, None]
            if layer:
                N -= B[:, None]
            N -= tau * C[:, None]
            dx[R] = _decide_dx(N, Fh, Fl, Fe, ok & dx_rows[R], fmt, rows, R, e_gam, counts)
            # dgamma terms: g t / sqrt(s) = (G tau) 2^Pe (Ph + Pl)
            mh, ml, me = product_parts(G, eg, gs[R], tau)
            ph, pl = dd.dd_mul(mh, ml, Ph[:, None], Pl[:, None])
            Ee = me + Pe[:, None]
            live = (mh != 0) & ok[:, None]
            nonzero_col |= live.any(axis=0)
            Emax = np.where(live, Ee, -(1 << 40)).max(axis=0) if R.size else np.full(d, -(1 << 40))
            sc = np.where(live, Ee - Emax[None, :], -2000)
            th, tl = np.ldexp(np.where(live, ph, 0.0), sc), np.ldexp(np.where(live, pl, 0.0), sc)
            s, e, bound = dd.pairwise_sum(th, tl, axis=0)
            bound = bound + np.abs(th).sum(axis=0) * _DD * 1.01 + R.size * 2.0**-1072
            acc = (Emax, s, e, bound) if acc is None else _merge(acc, (Emax, s, e, bound))
    plain = ~dx_rows | zero_s
    counts["plain_rows"] += int(plain.sum())
    P = np.flatnonzero(plain)
    if P.size:
        pdx, _ = _plain(kind, x64[P], g64[P], None if gam is None else gam[None, :], eps)
        dx[P] = _cast(pdx, dt)
    # dgamma: exact where every term is finite and defined
    col_exact = g_ok.all(axis=0)
    if not x_fin.all() or zero_s.any():
        col_exact[:] = False
    dgamma = np.empty(d, dtype=dt)
    if (~col_exact).any():
        _, u_all = _plain(kind, x64, g64, None, eps)
        with np.errstate(invalid="ignore", over="ignore"):
            pg = (g64 * u_all).sum(axis=0)
        dgamma[~col_exact] = _cast(pg[~col_exact], dt)
        counts["dgamma_columns_plain"] += int((~col_exact).sum())
    J = np.flatnonzero(col_exact)
    if J.size:
        dgamma[J] = _decide_dgamma(acc, J, nonzero_col, fmt, kind, x64, g64, rows, counts)
    if not want_beta:
        return dx, dgamma
    return dx, dgamma, _dbeta(g64, fmt, counts)


def _decide_dx(N, Fh, Fl, Fe, ok, fmt, rows, R, e_gam, counts):
    """dx of a block from exact numerators N and the rows' factors; flagged elements exactly."""
    dt = fmt.dtype
    wide = dt == np.float64
    mh, ml, me = float_parts(N, wide)
    E = me + Fe[:, None]
    if wide:
        yh, yl = dd.dd_mul(mh, ml, Fh[:, None], Fl[:, None])
        inside = (E > -960) & (E < 1000)
        Ec = np.where(inside, E, 0)
        yh, yl = np.ldexp(yh, Ec), np.ldexp(yl, Ec)
        y, flags = decide_float64(yh, yl, np.abs(yh) * _DD)
        flags |= ~inside
        out = y
    else:
        y = np.ldexp(mh * Fh[:, None], np.clip(E, -1100, 1100))
        flags = near_boundary(y, dt, rel=_SMALL)
        out = to_format(y, dt).astype(np.float64)
    zero = mh == 0  # N = 0: an exact +0
    flags &= ~zero & ok[:, None]
    out[zero] = 0.0
    if flags.any():
        d = N.shape[1]
        for k, j in zip(*np.nonzero(flags)):
            i = int(R[k])
            sigma, es = rows.sigma[i], rows.es[i]
            a = Fraction(int(N[k, j])) * Fraction(2) ** (rows.eg[i] + e_gam)
            w = Fraction(sigma**3, d) * Fraction(2) ** es
            out[k, j] = round_surd(a, w, 0, fmt)
        counts["exact_dx"] += int(flags.sum())
    return out.astype(dt)  # format numbers held in float64: exact


def _merge(a, b):
    """Two blocks' column sums ``(Emax, s, e, bound)`` (double-doubles s + e in units of 2^Emax
    with error bounds) as one, in units of the larger 2^Emax."""
    Em = np.maximum(a[0], b[0])
    parts = []
    for E, s, e, bound in (a, b):
        sh = np.maximum(E - Em, -2000)  # exact unless it underflows: 2^-1075 each
        parts.append((np.ldexp(s, sh), np.ldexp(e, sh), np.ldexp(bound, sh) + 3 * 2.0**-1074))
    (s1, e1, b1), (s2, e2, b2) = parts
    s, t = dd.two_sum(s1, s2)
    low = (e1 + e2) + t  # two roundings
    bound = (b1 + b2 + 2.02 * dd.U * (np.abs(e1) + np.abs(e2) + np.abs(t))) * (1 + 2.0**-50)
    s, e = dd.two_sum(s, low)
    return Em, s, e, bound


def _decide_dgamma(acc, J, nonzero_col, fmt, kind, x64, g64, rows, counts):
    """dγ for columns J from the running double-double sums; undecided columns exactly."""
    dt = fmt.dtype
    d = x64.shape[1]
    if acc is not None:
        Em, s, e, bound = acc
    else:
        Em, s, e, bound = np.zeros(d, dtype=np.int64), np.zeros(d), np.zeros(d), np.zeros(d)
    s, e, bound, Em = s[J], e[J], bound[J], Em[J]
    zero = ~nonzero_col[J]
    certain = np.abs(s) > 2 * bound  # the sign is known
    if dt == np.float64:
        Ec = np.clip(Em, -1100, 1100)
        yh = np.ldexp(s, Ec)
        inside = (np.abs(yh) > 2.0**-900) & (np.abs(yh) < 2.0**1000) & certain  # the pair stays normal
        y, flags = decide_float64(yh, np.ldexp(e, Ec), np.ldexp(bound, Ec) + 2.0**-1070)
        flags |= ~inside
        out = y
    else:
        Ec = np.clip(Em, -1100, 1100)
        y = np.ldexp(s + e, Ec)
        delta = np.ldexp(bound + dd.U * np.abs(s + e) * 2, Ec)
        flags = near_boundary(y, dt, delta=delta) | ~certain
        out = to_format(y, dt).astype(np.float64)
    out = np.where(zero, 0.0, out)
    flags &= ~zero
    if flags.any():
        exact_column = ExactColumnGradient(fmt, kind, x64, g64, rows)
        for k in np.flatnonzero(flags):
            out[k] = exact_column(int(J[k]))
        counts["dgamma_columns_exact"] += int(flags.sum())
        counts["dgamma_refinements"] += exact_column.refinements
    return out.astype(dt)


def _dbeta(g64, fmt, counts):
    """Column sums of g, each rounded once to the format (NaN and inf: the float64 sum)."""
    n, d = g64.shape
    dt = fmt.dtype
    with np.errstate(invalid="ignore", over="ignore"):
        plain = g64.sum(axis=0)
    fin = np.isfinite(g64).all(axis=0) if n else np.ones(d, dtype=bool)
    h, rest = np.zeros(d), np.zeros(d)
    exact = {}
    cols = g64.T.tolist()
    for j in np.flatnonzero(fin):
        try:
            hj = math.fsum(cols[j])  # the float64 number nearest to the exact sum
            if not math.isfinite(hj):
                raise OverflowError
            # the exact sign of what hj left out (nonzero sums of floats are not below 2^-1074)
            rj = math.fsum(cols[j] + [-hj]) if dt != np.float64 and hj != 0 else 0.0
        except OverflowError:  # a partial or the final sum beyond float64: rationals
            counts["dbeta_fraction"] += 1
            exact[j] = round_surd(0, 1, sum(Fraction(v) for v in cols[j]), fmt)
            continue
        h[j], rest[j] = hj, rj
    out = h + 0.0 if dt == np.float64 else round_pair(h, rest, dt)
    for j, v in exact.items():
        out[j] = v
    res = out.astype(dt)
    res[~fin] = _cast(plain[~fin], dt)
    return res


def _cast(a, dt):
    """float64 values rounded once to dt."""
    with np.errstate(over="ignore", invalid="ignore"):
        return a.astype(dt) if dt == np.float64 else to_format(np.asarray(a, dtype=np.float64), dt)


# --- public -----------------------------------------------------------------------------------


def layer_norm_gradients(x, dy, gamma=None, *, eps: float, dtype=None, counts=None):
    r"""``(dx, dgamma, dbeta)`` of layer norm over the rows of the 2-D arrays ``x`` and ``dy``
    (float16, bfloat16, float32 or float64; one shape), each element correctly rounded to
    ``dtype`` (default x's): see the module docstring. ``gamma``: None, a scalar or d gains
    (float64-exact); ``eps >= 0``. ``counts`` (a dict) receives how many elements took which
    path.

    >>> import numpy as np
    >>> x = np.array([[1.0, 2.0, 4.0]], dtype=np.float16)
    >>> g = np.array([[1.0, 0.0, -1.0]], dtype=np.float16)
    >>> dx, dgamma, dbeta = layer_norm_gradients(x, g, eps=0.0)
    >>> print(dx, dgamma, dbeta)
    [[ 0.11456 -0.1718   0.05728]] [-1.069  0.    -1.336] [ 1.  0. -1.]
    """
    return _gradients("layer", x, dy, gamma, eps, dtype, counts, True)


def rms_norm_gradients(x, dy, gamma=None, *, eps: float, dtype=None, counts=None):
    r"""``(dx, dgamma)`` of RMS norm, as :func:`layer_norm_gradients`."""
    return _gradients("rms", x, dy, gamma, eps, dtype, counts, False)
