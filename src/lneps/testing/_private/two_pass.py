r"""The older, narrower tolerance of one kernel class: :func:`two_pass_bound`, for a two-pass
float32 kernel whose reciprocal square root is within one ulp, kept because the book quotes it.

The model and the analysis, term by term (``_two_pass_error``, ``_two_pass_cap``,
``_rounded_once``), are in :func:`two_pass_bound`'s docstring and in the section "The derived
tolerance" of the book's appendix "How the reference works" (the chapter "Testing a kernel
against the exact answer" shows ``_two_pass_error``). :func:`lneps.testing.forward_bound`
(:mod:`lneps.testing._private.forward_error`) covers more kernels, and RMS norm.
"""

from __future__ import annotations

import numpy as np

from ... import norms
from ..._checks import check_eps, check_float_dtype
from ...formats import format_of, ulp
from .arguments import FORMATS, as_numpy, reduced_axes
from .kernel_classes import gamma_n

__all__ = ["U32", "two_pass_bound"]

#: Unit roundoff of float32, the accumulation format of :func:`two_pass_bound`'s model.
U32 = 2.0**-24


def _two_pass_error(d, mean_abs, r, core, y, gain, dt):
    """:func:`two_pass_bound`'s analysis, term by term: a bound on |kernel - y| (absolute),
    from d, mean|x|, r = 1/sqrt(var + eps), the core |x - mu| r, |y| and |gamma| (1 without a gain)."""
    u32, eta = U32, 2.0**-150
    D = (
        gamma_n(d + 1, U32) * mean_abs + eta
    ) * r  # |mu^ - mu| r: the mean's error in units of the output
    rho_lo = gamma_n(d + 5, U32) + 2.0**-147 * r * r  # w = (var + eps)(1 + rho)
    rho_hi = rho_lo + (1 + gamma_n(d + 5, U32)) * D * D
    psi = gamma_n(2, U32)  # the reciprocal square root
    R = np.maximum(
        (1 + psi) / np.sqrt(np.where(rho_lo < 1, 1 - rho_lo, np.nan)) - 1,
        1 - (1 - psi) / np.sqrt(1 + rho_hi),
    )
    R = np.where(np.isnan(R), np.inf, R)  # |r^/r - 1| <= R
    En = core * ((1 + R) * (1 + u32) ** 2 - 1) + D * (1 + R) * (1 + u32) ** 2 + eta  # |n^ - core|
    Ec = gain * (En + u32 * (core + En)) + eta * (1 + gain)  # |gamma n^ + beta - y| in float32
    return _rounded_once(Ec, y, dt)


def _two_pass_cap(d, core, gain):
    r"""A bound on |kernel - y| whatever the conditioning: in a two-pass kernel t_i^2 is one of
    the squares it sums, so :math:`|\hat n_i| \le N = \sqrt d\,(1+u)(1+\gamma_2)/\sqrt{1-\gamma_{d+5}}`
    (given eps in float32 above the squares' underflow), and :math:`|\hat c_i - y_i| \le
    |\gamma_i|(N(1+u) + |u_i|)`."""
    N = np.sqrt(d) * (1 + U32) * (1 + gamma_n(2, U32)) / np.sqrt(1 - gamma_n(d + 5, U32))
    return gain * (N * (1 + U32) + core) + 2.0**-150 * (1 + gain)


def _rounded_once(Ec, y, dt):
    """|result - y| given |c - y| <= Ec for the float32 value c the kernel rounds to dt (y's
    own float64 error allowed for)."""
    E = (
        Ec
        + y * 2.0**-52
        + (0.5 * ulp(y * (1 + 2.0**-50) + Ec, np.float32) if dt != np.float32 else 0.0)
    )
    lower, upper = np.fmax(y - E, 0.0), (y + E) * (1 + 2.0**-40)  # the last rounding, to dt
    return E + np.fmax(0.5 * ulp(lower, dt), np.fmin(0.5 * ulp(upper, dt), 2 * E))


def _gain(g, axis, shape):
    """|gamma| as layer_norm applies it, broadcast to ``shape`` (1.0 without a gain)."""
    if g is None:
        return 1.0
    s, nd = np.abs(g.astype(np.float64)), len(shape)
    axes = reduced_axes(axis, nd)
    if s.ndim and s.shape == tuple(shape[a] for a in axes):  # placed as the op applies gamma
        s = s.reshape([shape[a] if a in axes else 1 for a in range(nd)])
    return np.broadcast_to(s, shape)


def two_pass_bound(x, gamma=None, beta=None, *, eps=1e-5, axis=-1, dtype=None) -> np.ndarray:
    r"""Per element of layer norm's output, the largest scaled error (the ``metric="scaled"`` of
    :func:`compare`: ulp of :math:`\max(|y|, s)`, s = :math:`|\gamma_i|` or 1) that a correct
    two-pass float32 kernel can make: an error beyond it is a defect, not conditioning.

    Model: x, gamma and beta as given (exact in float32); every operation in float32 rounded
    to nearest; the mean, then the sum of the squares of :math:`t_j = \mathrm{fl}(x_j -
    \hat\mu)`, each in any order, each divided by d (or times fl(1/d)); eps rounded to float32
    and added; a reciprocal square root within one float32 ulp (:math:`\gamma_2`);
    :math:`\gamma\hat n + \beta` in any order of the products; one last rounding to ``dtype``.

    Result: a forward error analysis (module ``lneps.testing._private.two_pass``; derived in the
    appendix "How the reference works"): the mean's error in units of the output,
    :math:`D = \gamma_{d+1} M r` (the offset term, which grows with d and :math:`|m|/\sigma`),
    the reciprocal square root's relative error :math:`R \approx \gamma_{d+5}/2 + \gamma_2 +
    D^2/2`, so :math:`|\hat n_i - z_i| \lesssim |z_i| R + D`, plus the affine step's and the
    output's roundings; capped, where smaller, by the size of a normalized value
    (:math:`|\hat n_i| \le \sqrt d\,(1+O(u))`, since :math:`t_i^2` is one of the squares
    summed, for eps in float32 above :math:`2^{-140}`). It is divided by
    :math:`\mathrm{ulp}(\max(|y_i|, s_i))` in ``dtype`` and enlarged by :math:`2^{-20}`
    relative for this function's float64 arithmetic.

    Guarantee: no correct kernel of the model exceeds it, whatever the summation order and the
    rounding errors (a worst case: about 0.5 ulp on N(0,1) rows in float16 and bfloat16, of
    order d ulp in float32, where the float32 accumulation is as fine as the output).
    :func:`forward_bound` covers more kernels (Welford, Chan's merges, one pass in float64, a
    2-ulp reciprocal square root) and RMS norm.

    x: float16, bfloat16 or float32, normalized over ``axis`` (an int or a tuple of trailing
    axes); gamma, beta: numbers exact in float32, broadcast like :func:`lneps.layer_norm`'s;
    eps >= 0; dtype: the output format (default x's; float16, bfloat16 or float32). Returns a
    float64 array of x's shape; ``inf`` where the model's float32 arithmetic could overflow or
    where :math:`\rho_- \ge 1`.

    >>> import numpy as np
    >>> from lneps.testing import families, two_pass_bound
    >>> x = families(np.float16, 64, rows=4)["normal"].x
    >>> bool((two_pass_bound(x) < 1).all())
    True
    """
    xa = as_numpy(x, "x")
    small = FORMATS[:3]
    if xa.dtype not in small:
        raise TypeError(
            f"x has dtype {xa.dtype}; two_pass_bound models float16, bfloat16 or float32 input"
        )
    dt = xa.dtype if dtype is None else check_float_dtype(dtype)
    if dt not in small:
        raise TypeError(f"dtype must be float16, bfloat16 or float32; got {dt}")
    e_ = check_eps(eps)
    gb = []
    for v, name in ((gamma, "gamma"), (beta, "beta")):
        if v is None:
            gb.append(None)
            continue
        a = as_numpy(v, name)
        a64 = a.astype(np.float64)
        with np.errstate(over="ignore"):
            if not np.array_equal(a64.astype(np.float32).astype(np.float64), a64):
                raise ValueError(
                    f"{name} has values that float32 cannot hold; the model stores it in the input format"
                )
        gb.append(a)
    g, b = gb
    x64 = xa.astype(np.float64)
    axes = reduced_axes(axis, xa.ndim)
    d = int(np.prod([xa.shape[a] for a in axes]))
    z, _, rstd = norms.layer_norm(x64, eps=e_, axis=axis, return_stats=True)
    y = norms.layer_norm(x64, g, b, eps=e_, axis=axis)
    # |gamma| placed as layer_norm applies it (1 without a gain)
    ag = 1.0 if g is None else np.abs(_gain(g, axis, xa.shape))
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        r = rstd * (1 + 2.0**-40)  # lneps's statistics and outputs, their float64 error allowed for
        mabs = np.mean(np.abs(x64), axis=axes, keepdims=True) * (1 + 2.0**-40)
        ya = np.abs(y)
        core = np.abs(z) * (1 + 2.0**-50)
        err = _two_pass_error(d, mabs, r, core, ya, ag, dt)
        if float(np.float32(e_)) >= 2.0**-140:  # eps in float32 far above the squares' underflow
            err = np.fmin(err, _rounded_once(_two_pass_cap(d, core, ag), ya, dt))
        out = err / ulp(np.fmax(ya, ag), dt) * (1 + 2.0**-20)
        # overflow of the float32 arithmetic: partial sums of x (at most d M), of the t_j^2 (at
        # most their total, d (sigma^2 + |mu^ - m|^2)(1 + gamma_{d+4})), and the output
        f32max = format_of(np.float32).largest * (1 - 2.0**-20)
        var = np.mean(
            np.square(x64 - np.mean(x64, axis=axes, keepdims=True)), axis=axes, keepdims=True
        )
        dmu = gamma_n(d + 1, U32) * mabs
        risky = (
            (d * mabs > f32max)
            | (d * (var * (1 + 2.0**-40) + dmu * dmu) * (1 + gamma_n(d + 5, U32)) > f32max)
            | (ya + err > format_of(dt).largest)
        )
        out = np.where(risky | ~np.isfinite(out), np.inf, out)
    return np.broadcast_to(out, xa.shape).astype(np.float64)
