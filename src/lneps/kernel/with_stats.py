r"""Batch normalization at inference, correctly rounded: rows normalized with given statistics
(:func:`normalize_with`), decided as in tier B, exact ties and cancellation as in the exact tier,
the rest by rational arithmetic."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from .double_double import inference
from .exact import exact_affine, exact_root
from ..formats import format_of, to_format
from .rounding import FAST_FORMATS
from .surd import round_surd
from .driver import BLOCK_ELEMENTS, COUNT_KEYS

__all__ = ["normalize_with"]


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
    for key in COUNT_KEYS:
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
        fmt = format_of(dt)
        for i, j in zip(I[~done], J[~done]):
            counts["fraction_elements"] += 1
            q = Fraction(float(x[i, j])) - Fraction(float(m[i, 0]))
            q *= 1 if gg is None else Fraction(float(gg[i, j]))
            s = Fraction(float(v[i])) + Fraction(eps)
            out[i, j] = round_surd(q, s, 0 if bb is None else Fraction(float(bb[i, j])), fmt)
    return out, rstd
