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

Precision. By default (``compute_dtype`` and ``stats_dtype`` None) the gradients are
correctly rounded: for real input of float16, bfloat16, float32 or float64 (integers are taken
as float64), every element of :math:`\partial L/\partial z`, :math:`\partial L/\partial\gamma`
and :math:`\partial L/\partial\beta` is the nearest number of the output format (x's dtype),
ties to even, to the exact value of the formulas above (biased variance, ε inside the square
root) on x, the upstream gradient, γ and ε as the binary numbers they store. An exact zero is
+0; a nonzero value that rounds to zero keeps its sign. :mod:`lneps.kernel.gradients` computes
them: exact integer numerators, a float64 or double-double estimate of the one irrational factor
with a proven error bound, and exact integer arithmetic where the estimate cannot decide. Where
the exact value is undefined or the input is not finite the float64 formula's result stands: a
row holding NaN or inf (in x or the upstream gradient; every row if γ holds one) gets the NaN
or inf of that arithmetic in :math:`\partial L/\partial z`; a NaN or inf in x makes every
entry of :math:`\partial L/\partial\gamma` the float64 formula's, and one in the upstream
gradient the entries of its column in :math:`\partial L/\partial\gamma` and
:math:`\partial L/\partial\beta`. With ε = 0 a constant row (layer norm) or a row of zeros
(RMS norm) has :math:`u = 0/0`, so its :math:`\partial L/\partial z` and every entry of
:math:`\partial L/\partial\gamma` are NaN, while :math:`\partial L/\partial\beta` is unaffected.

Complex input (and ``np.longdouble``) is computed by the float64 (complex128) formula and
rounded once. That formula subtracts terms of size :math:`|\hat g|/\sqrt{q+\varepsilon}`, so
its error is a few units of 2^-53 times that size, not times the result: an entry much smaller
than its row's terms (the radial direction when :math:`q \gg \varepsilon`) has a
correspondingly larger relative error. ``stats_dtype`` alone keeps that float64 formula and
rounds the saved statistics (mean and :math:`1/\sqrt{q+\varepsilon}`) to a format before they
are used, as a framework does that keeps them in the input's dtype between the forward and the
backward. ``compute_dtype`` rounds every operation to that format instead, ε included, like a
naive low-precision kernel.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ._checks import as_float_array, check_affine, check_axis, check_eps, check_float_dtype
from .kernel.gradients import layer_norm_gradients, rms_norm_gradients
from .norms import rms_norm_default_eps
from .formats import DTYPES
from .naive import rounded_sum

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


#: The formats the correctly rounded kernel takes exactly (integers arrive as float64).
_EXACT = DTYPES  # lneps.formats.REGISTRY


def _exact_ok(arr, g, gam):
    """Whether the correctly rounded kernel takes these arrays (real, at most float64)."""
    return arr.dtype in _EXACT and g.dtype in _EXACT and (gam is None or gam.dtype in _EXACT)


def _correctly_rounded(kind, arr, g, gam, eps, axis, out_dtype):
    """The kernel on rows (the normalized axis last), reshaped back: (dx, dgamma[, dbeta])."""
    rows = np.moveaxis(arr, axis, -1)
    shape = rows.shape
    d = shape[-1]
    x2 = rows.reshape(-1, d)
    g2 = np.moveaxis(g, axis, -1).reshape(-1, d)
    gv = None if gam is None else (gam if gam.ndim == 0 else gam.reshape(-1))
    f = layer_norm_gradients if kind == "layer" else rms_norm_gradients
    out = f(x2, g2, gv, eps=eps, dtype=out_dtype)
    return (np.moveaxis(out[0].reshape(shape), -1, axis), *out[1:])


def layer_norm_backward(x, grad, gamma=None, *, eps=1e-5, axis=-1, compute_dtype=None,
                        stats_dtype=None) -> LayerNormGrads:
    r"""Gradients of :math:`L` through :math:`y = \gamma\odot(z-\mu)/\sqrt{\sigma^2+\varepsilon}+\beta`.

    ``x``: the forward input; ``grad``: :math:`\partial L/\partial y`, same shape; ``gamma``:
    a scalar or d gains (default 1). Same checks and conventions as :func:`lneps.layer_norm`
    (integer input gives float64; the outputs have the input's dtype). Returns
    :class:`~lneps.backward.LayerNormGrads` ``(x, gamma, beta)``: :math:`\partial L/\partial z` shaped like x,
    and the two parameter gradients of shape (d,), summed over all rows.

    Precision (module docstring): by default each element is correctly rounded, the output
    format's nearest number (ties to even) to the exact gradient of
    :math:`\gamma\odot(z-\mu)/\sqrt{\sigma^2+\varepsilon}+\beta` (biased variance) on the
    binary inputs; an exact zero is +0. With ``eps = 0`` a constant row has :math:`u = 0/0`:
    NaN in that row of :math:`\partial L/\partial z` and in every entry of
    :math:`\partial L/\partial\gamma`; rows with NaN or inf follow the float64 formula. With
    ``compute_dtype`` every operation is rounded to it; with ``stats_dtype`` (and no
    ``compute_dtype``) the float64 formula is used with the mean and
    :math:`1/\sqrt{q+\varepsilon}` rounded to that format before use (so
    :math:`(q+\varepsilon)^{-1/2} > 65504` becomes inf in float16).

    >>> import numpy as np, lneps
    >>> x = np.array([[1.0, 2.0, 4.0, 7.0]], dtype=np.float32)
    >>> g = np.array([[0.5, -1.0, 0.25, 2.0]], dtype=np.float32)
    >>> grads = lneps.layer_norm_backward(x, g, eps=1e-5)
    >>> print(grads.x)
    [[ 0.41045633 -0.39746836 -0.15846746  0.14547947]]
    >>> print(grads.gamma, grads.beta)
    [-0.5455442   0.6546531   0.05455442  3.0550475 ] [ 0.5  -1.    0.25  2.  ]
    """
    arr, g, gam, eps, axis, out_dtype, dt, sdt = _inputs(x, grad, gamma, eps, axis, compute_dtype, stats_dtype)
    if dt is None and sdt is None and _exact_ok(arr, g, gam):
        return LayerNormGrads(*_correctly_rounded("layer", arr, g, gam, eps, axis, out_dtype))
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
    Same checks, dtypes, ``compute_dtype`` and accuracy as :func:`layer_norm_backward`: by
    default each element is the output format's nearest number (ties to even) to the exact
    gradient on the binary inputs; with ``eps = 0`` a row of zeros has :math:`n = 0/0`, NaN in
    that row and in every entry of :math:`\partial L/\partial\gamma`. Returns
    :class:`~lneps.backward.RMSNormGrads` ``(x, gamma)``.

    >>> import numpy as np, lneps
    >>> x = np.array([[1.0, -2.0, 0.5]], dtype=np.float16)
    >>> g = np.array([[1.0, 1.0, -3.0]], dtype=np.float16)
    >>> grads = lneps.rms_norm_backward(x, g, np.float16(2.0))
    >>> print(grads.x, grads.x.dtype)
    [[ 2.232  0.072 -4.176]] float16
    >>> print(grads.gamma)
    [ 0.756 -1.512 -1.134]
    """
    eps = rms_norm_default_eps(as_float_array(x)[0].dtype) if eps is None else eps
    arr, g, gam, eps, axis, out_dtype, dt, _ = _inputs(x, grad, gamma, eps, axis, compute_dtype, None)
    if dt is None and _exact_ok(arr, g, gam):
        return RMSNormGrads(*_correctly_rounded("rms", arr, g, gam, eps, axis, out_dtype))
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
