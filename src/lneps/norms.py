r"""Layer normalization, RMS normalization and batch normalization.

Convention (PyTorch's ``torch.nn.LayerNorm``): for the d numbers :math:`z` along the
normalized axis,

.. math::

    \mu = \frac1d \sum_i z_i, \qquad v = z - \mu\mathbf 1, \qquad
    q = \frac1d \sum_i v_i^2 \ \text{(biased variance, divisor } d), \qquad
    \operatorname{LN}_\varepsilon(z) = \gamma \odot \frac{v}{\sqrt{q + \varepsilon}} + \beta .

Each slice along the axis is normalized on its own, so a NaN or infinity in one row never
reaches another row.

Precision. By default the statistics and the normalization are computed two-pass in float64
(at least) and rounded once to the output dtype, so a float16, bfloat16 or float32 result is
within one unit in the last place of the exact answer. ``compute_dtype=np.float16`` (or
``ml_dtypes.bfloat16``, ``np.float32``) instead rounds every operation to that format,
epsilon included: the naive low-precision layer that chapter 5 takes apart
(:mod:`lneps.precision`).
"""

from __future__ import annotations

import numpy as np

from ._checks import as_float_array, check_affine, check_axis, check_eps, check_float_dtype
from .rounded import layer_norm_rounded, rms_norm_rounded

__all__ = ["layer_norm", "rms_norm", "batch_norm"]


def _working_dtype(dtype: np.dtype) -> np.dtype:
    # float64 (complex128 for complex input) at least: the statistics of float16, bfloat16
    # and float32 input are then exact to far below their output ulp.
    return np.result_type(dtype, np.float64)


def _normalized_core(x: np.ndarray, eps: float, axis: int) -> np.ndarray:
    """:math:`u_\\varepsilon = v / \\sqrt{q + \\varepsilon}` along ``axis`` (two-pass moments)."""
    mu = x.mean(axis=axis, keepdims=True)
    v = x - mu
    # v * v rather than |v|**2 keeps the core analytic in x, which complex-step
    # differentiation relies on; for real x the two are the same.
    q = (v * v).mean(axis=axis, keepdims=True)
    # eps = 0 on a constant row is 0/0 = NaN by design (Ba et al.'s unstabilized formula).
    with np.errstate(invalid="ignore", divide="ignore"):
        return v / np.sqrt(q + eps)


def _compute_dtype(compute_dtype, arr: np.ndarray):
    """``None`` or the checked real floating dtype the caller asked every operation to use."""
    if compute_dtype is None:
        return None
    dt = check_float_dtype(compute_dtype, "compute_dtype")
    if arr.dtype.kind == "c":
        raise TypeError(f"compute_dtype needs real input; x has dtype {arr.dtype}")
    return dt


def layer_norm(x, gamma=None, beta=None, *, eps=1e-5, axis=-1, compute_dtype=None):
    r"""Layer normalization :math:`\gamma \odot (z - \mu)/\sqrt{\sigma^2 + \varepsilon} + \beta`.

    Parameters
    ----------
    x : array_like
        Any shape. Integer input is computed and returned in float64; floating and complex
        input keep their dtype (complex input uses the analytic continuation
        :math:`\sigma^2 = \operatorname{mean}(v^2)`, not :math:`|v|^2`).
    gamma, beta : array_like, optional
        Gain and bias, a scalar or shape ``(d,)`` for the d numbers along ``axis``.
        Default :math:`\gamma = 1`, :math:`\beta = 0`.
    eps : float
        :math:`\varepsilon \ge 0`, added to the biased variance inside the square root.
        ``eps=0`` is allowed: a constant slice then gives NaN (that slice only).
    axis : int
        The axis whose d numbers form one token.
    compute_dtype : dtype, optional
        ``None`` (default): two-pass statistics in float64 (at least), one rounding to the
        output dtype at the end, within 1 ulp of the exact result. A real floating dtype
        (``np.float16``, ``ml_dtypes.bfloat16``, ``np.float32``, ...): every operation rounded
        to it, epsilon, gamma and beta included (:func:`lneps.precision.layer_norm_rounded`).
        Either way the output has the input's dtype.
    """
    arr, out_dtype = as_float_array(x)
    axis = check_axis(arr, axis)
    eps = check_eps(eps)
    g = check_affine(gamma, "gamma", arr, axis)
    b = check_affine(beta, "beta", arr, axis)
    dt = _compute_dtype(compute_dtype, arr)
    if dt is None:
        y = _normalized_core(arr.astype(_working_dtype(arr.dtype)), eps, axis)
    else:
        y = layer_norm_rounded(arr, eps=eps, dtype=dt, axis=axis)
        g = None if g is None else g.astype(dt)
        b = None if b is None else b.astype(dt)
    if g is not None:
        y = y * g
    if b is not None:
        y = y + b
    return y.astype(out_dtype, copy=False)


def rms_norm(x, gamma=None, *, eps=1e-6, axis=-1, compute_dtype=None):
    r"""RMS normalization :math:`\gamma \odot z / \sqrt{\operatorname{mean}(z^2) + \varepsilon}`.

    No mean is subtracted and there is no bias. Same dtype rules, checks and
    ``compute_dtype`` as :func:`layer_norm`; the default ``eps=1e-6`` is that of Hugging
    Face's ``LlamaConfig``.
    """
    arr, out_dtype = as_float_array(x)
    axis = check_axis(arr, axis)
    eps = check_eps(eps)
    g = check_affine(gamma, "gamma", arr, axis)
    dt = _compute_dtype(compute_dtype, arr)
    if dt is None:
        xw = arr.astype(_working_dtype(arr.dtype))
        ms = (xw * xw).mean(axis=axis, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            y = xw / np.sqrt(ms + eps)
    else:
        y = rms_norm_rounded(arr, eps=eps, dtype=dt, axis=axis)
        g = None if g is None else g.astype(dt)
    if g is not None:
        y = y * g
    return y.astype(out_dtype, copy=False)


def batch_norm(x, *, eps=1e-5, axis=0):
    r"""Batch normalization statistics: each feature normalized across the tokens on ``axis``.

    For a ``(tokens, features)`` table this normalizes columns, where :func:`layer_norm`
    normalizes rows: :math:`(x_{tj} - \mu_j)/\sqrt{\sigma_j^2 + \varepsilon}` with
    :math:`\mu_j, \sigma_j^2` the biased mean and variance of column j. So one token's output
    depends on every other token in the batch. (Training-mode statistics; no running
    averages, gain or bias.)
    """
    arr, out_dtype = as_float_array(x)
    axis = check_axis(arr, axis)
    eps = check_eps(eps)
    y = _normalized_core(arr.astype(_working_dtype(arr.dtype)), eps, axis)
    return y.astype(out_dtype, copy=False)
