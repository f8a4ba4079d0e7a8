r"""The backward pass of layer normalization and RMS normalization.

Layer norm (PyTorch's convention, biased variance): per row z of d numbers,
:math:`v = z - \mu\mathbf 1`, :math:`q = v\cdot v/d`, :math:`s = \sqrt{q+\varepsilon}`,
:math:`u = v/s` and :math:`y = \gamma\odot u + \beta`. For an upstream gradient
:math:`g = \partial L/\partial y` and :math:`\hat g = \gamma\odot g`,

.. math::

    \frac{\partial L}{\partial z} = \frac{\hat g - \operatorname{mean}(\hat g)\,\mathbf 1
    - u\,\operatorname{mean}(\hat g\odot u)}{\sqrt{q+\varepsilon}}, \qquad
    \frac{\partial L}{\partial \gamma} = \sum_{\text{rows}} g\odot u, \qquad
    \frac{\partial L}{\partial \beta} = \sum_{\text{rows}} g,

and the sensitivity to ε itself is :math:`\partial u/\partial\varepsilon = -v/(2(q+\varepsilon)^{3/2})`.
RMS norm: :math:`r = (\operatorname{mean}(z^2)+\varepsilon)^{-1/2}`, :math:`n = r z`,
:math:`y = \gamma\odot n`, and :math:`\partial L/\partial z = r(\hat g - n\operatorname{mean}(\hat g\odot n))`,
:math:`\partial L/\partial\gamma = \sum g\odot n`. ``lneps.book.symbolic_backward`` derives all of
them with SymPy.

Precision. By default everything is computed in float64 (at least) and rounded once to the
input's dtype. The formula subtracts terms of size :math:`|\hat g|/\sqrt{q+\varepsilon}`, so
its float64 error is a few units of 2^-53 times that size, not times the result: an entry much
smaller than its row's terms (the radial direction when :math:`q \gg \varepsilon`, as for the
Jacobian's radial eigenvalue) has a correspondingly larger relative error. For float16,
bfloat16 and float32 input that float64 error is far below the output's half ulp, so the
result is the format's nearest value to the float64 one. ``compute_dtype`` rounds every operation to that format
instead, ε included, like a naive low-precision kernel; ``stats_dtype`` additionally rounds
the saved statistics (mean and :math:`1/\sqrt{q+\varepsilon}`) to a format before they are
used, as a framework does that keeps them in the input's dtype between the forward and the
backward.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ._checks import as_float_array, check_affine, check_axis, check_eps, check_float_dtype
from .norms import rms_norm_default_eps
from .rounded import rounded_sum

__all__ = [
    "LayerNormGrads",
    "RMSNormGrads",
    "layer_norm_backward",
    "rms_norm_backward",
    "layer_norm_eps_derivative",
]


class LayerNormGrads(NamedTuple):
    """:math:`\\partial L/\\partial z`, :math:`\\partial L/\\partial\\gamma`, :math:`\\partial L/\\partial\\beta`."""

    x: np.ndarray
    gamma: np.ndarray
    beta: np.ndarray


class RMSNormGrads(NamedTuple):
    """:math:`\\partial L/\\partial z` and :math:`\\partial L/\\partial\\gamma`."""

    x: np.ndarray
    gamma: np.ndarray


def _inputs(x, grad, gamma, eps, axis, compute_dtype, stats_dtype):
    arr, out_dtype = as_float_array(x)
    g, _ = as_float_array(grad, "grad")
    if g.shape != arr.shape:
        raise ValueError(f"grad must have the shape of x, {arr.shape}; got {g.shape}")
    axis = check_axis(arr, axis)
    eps = check_eps(eps)
    gam = check_affine(gamma, "gamma", arr, axis)
    dts = []
    for value, name in ((compute_dtype, "compute_dtype"), (stats_dtype, "stats_dtype")):
        dt = None if value is None else check_float_dtype(value, name)
        if dt is not None and (arr.dtype.kind == "c" or g.dtype.kind == "c"):
            raise TypeError(f"{name} needs real x and grad; got {arr.dtype} and {g.dtype}")
        dts.append(dt)
    return arr, g, gam, eps, axis, out_dtype, *dts


def _ops(dt):
    """mean along an axis (kept) and a cast, exact-ish in float64 or rounded to ``dt``."""
    if dt is None:
        return (lambda a, axis: a.mean(axis=axis, keepdims=True)), (lambda a: a)

    def mean(a, axis):
        s = rounded_sum(a, dt, axis)
        return (s.astype(np.float64) / a.shape[axis]).astype(dt)

    return mean, (lambda a: np.asarray(a).astype(dt))


def _work(arr, dt):
    return arr.astype(np.result_type(arr.dtype, np.float64)) if dt is None else arr.astype(dt)


def _reduce_rows(a, axis, dt):
    """Sum over every axis but the normalized one (the rows), in float64 or rounded to dt."""
    moved = np.moveaxis(a, axis, -1).reshape(-1, a.shape[axis])
    if dt is None:
        return moved.sum(axis=0)
    return rounded_sum(moved, dt, axis=0)[0]


def layer_norm_backward(x, grad, gamma=None, *, eps=1e-5, axis=-1, compute_dtype=None,
                        stats_dtype=None) -> LayerNormGrads:
    r"""Gradients of :math:`L` through :math:`y = \gamma\odot(z-\mu)/\sqrt{\sigma^2+\varepsilon}+\beta`.

    ``x``: the forward input; ``grad``: :math:`\partial L/\partial y`, same shape; ``gamma``:
    a scalar or d gains (default 1). Same checks and conventions as :func:`lneps.layer_norm`
    (integer input gives float64; the outputs have the input's dtype). Returns
    :class:`~lneps.backward.LayerNormGrads` ``(x, gamma, beta)``: :math:`\partial L/\partial z` shaped like x,
    and the two parameter gradients of shape (d,), summed over all rows.

    Precision: module docstring. With ``compute_dtype`` every operation is rounded to it;
    with ``stats_dtype`` the mean and :math:`1/\sqrt{q+\varepsilon}` are rounded to that
    format before use (so :math:`(q+\varepsilon)^{-1/2} > 65504` becomes inf in float16).
    With ``eps = 0`` a constant row gives NaN, in that row and in the parameter gradients.
    """
    arr, g, gam, eps, axis, out_dtype, dt, sdt = _inputs(x, grad, gamma, eps, axis, compute_dtype, stats_dtype)
    mean, cast = _ops(dt)
    z, g = _work(arr, dt), _work(g, dt)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        mu = mean(z, axis)
        v = z - mu
        var = mean(v * v, axis)
        rstd = cast(1) / np.sqrt(var + cast(eps))
        if sdt is not None:  # statistics saved in a (narrower) format between the passes
            mu, rstd = (cast(np.asarray(a).astype(sdt)) for a in (mu, rstd))
            v = z - mu
        u = v * rstd
        gh = g if gam is None else g * cast(gam)
        dx = (gh - mean(gh, axis) - u * mean(gh * u, axis)) * rstd
        dgamma = _reduce_rows(g * u, axis, dt)
        dbeta = _reduce_rows(g, axis, dt)
        return LayerNormGrads(*(a.astype(out_dtype, copy=False) for a in (dx, dgamma, dbeta)))


def rms_norm_backward(x, grad, gamma=None, *, eps=None, axis=-1, compute_dtype=None) -> RMSNormGrads:
    r"""Gradients of :math:`L` through :math:`y = \gamma\odot z/\sqrt{\operatorname{mean}(z^2)+\varepsilon}`.

    ``eps=None`` follows ``torch.nn.RMSNorm``, as :func:`lneps.rms_norm` does
    (:func:`lneps.rms_norm_default_eps` of x's dtype).
    Same checks, dtypes and ``compute_dtype`` as :func:`layer_norm_backward`. Returns
    :class:`~lneps.backward.RMSNormGrads` ``(x, gamma)``.
    """
    eps = rms_norm_default_eps(as_float_array(x)[0].dtype) if eps is None else eps
    arr, g, gam, eps, axis, out_dtype, dt, _ = _inputs(x, grad, gamma, eps, axis, compute_dtype, None)
    mean, cast = _ops(dt)
    z, g = _work(arr, dt), _work(g, dt)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        r = cast(1) / np.sqrt(mean(z * z, axis) + cast(eps))
        n = z * r
        gh = g if gam is None else g * cast(gam)
        dx = (gh - n * mean(gh * n, axis)) * r
        dgamma = _reduce_rows(g * n, axis, dt)
        return RMSNormGrads(dx.astype(out_dtype, copy=False), dgamma.astype(out_dtype, copy=False))


def layer_norm_eps_derivative(x, gamma=None, *, eps=1e-5, axis=-1) -> np.ndarray:
    r""":math:`\partial\operatorname{LN}_\varepsilon(z)/\partial\varepsilon = -\gamma\odot v/(2(q+\varepsilon)^{3/2})`
    per row (float64 at least, returned in x's dtype): how much the output moves per unit
    change of ε. Relative to the output it is :math:`-1/(2(q+\varepsilon))`, whatever γ."""
    arr, out_dtype = as_float_array(x)
    axis = check_axis(arr, axis)
    eps = check_eps(eps)
    gam = check_affine(gamma, "gamma", arr, axis)
    z = _work(arr, None)
    v = z - z.mean(axis=axis, keepdims=True)
    q = (v * v).mean(axis=axis, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        du = -v / (2 * (q + eps) * np.sqrt(q + eps))  # not ** 1.5: SIMD pow differs by CPU
    return (du if gam is None else du * gam).astype(out_dtype, copy=False)
