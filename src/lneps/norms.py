r"""Layer, RMS, group and batch normalization: a correctly rounded reference.

Convention (PyTorch's ``torch.nn.LayerNorm``, ONNX ``LayerNormalization``): for the d numbers
:math:`z` being normalized together,

.. math::

    \mu = \frac1d \sum_i z_i, \qquad v = z - \mu\mathbf 1, \qquad
    q = \frac1d \sum_i v_i^2 \ \text{(biased variance, divisor } d), \qquad
    \operatorname{LN}_\varepsilon(z) = \gamma \odot \frac{v}{\sqrt{q + \varepsilon}} + \beta .

Accuracy. By default (``compute_dtype=None``) every element of the result is the output
format's nearest number, ties to even, to the exact real value of the formula applied to the
given inputs: x, gamma and beta as the binary numbers they store, epsilon as the exact binary
value of the Python float passed in, gamma and beta applied before the single rounding. This
holds for float16, bfloat16, float32 and float64 input, every d and every finite input
(exact cancellation and ties included), without spurious overflow or underflow
(:mod:`lneps.kernel` says how, and :mod:`lneps.oracle` checks it). Signed zeros follow IEEE
754's round to nearest: an exact zero result is +0 (as an exact zero sum is), whatever the
signs of the inputs; a nonzero exact value that rounds to zero keeps its sign (-0 for a
negative one). Integer input is computed and returned in float64 (beyond :math:`2^{53}` it is
refused, Python integers too large for NumPy included); ``np.longdouble`` input (wider than
float64) is refused; other floating formats (narrower than float64) are computed as float64
and cast once; complex input (for complex-step derivatives) uses the plain two-pass formula in
complex128, with :math:`\sigma^2 = \operatorname{mean}(v^2)`.

Gains and biases are a scalar, an array of the normalized axes' shape, or any shape that
broadcasts to x's the NumPy way with length 1 on the other axes (``(1, d)`` for ``(n, d)``);
one that varies along another axis, a complex one with real x, or an ``np.longdouble`` one is
refused with a message naming the problem.

``compute_dtype=np.float16`` (``ml_dtypes.bfloat16``, ``np.float32``, ...) instead rounds
every operation to that format, epsilon, gamma and beta included: the naive low-precision
layer (:mod:`lneps.naive`).

Each slice is normalized on its own: a NaN or infinity in one row never reaches another row
(a row holding one follows the plain float64 formula: NaN, or 0 where the variance is inf).
"""

from __future__ import annotations

import numpy as np

from . import kernel
from ._checks import (
    as_float_array,
    check_affine,
    check_axes,
    check_axis,
    check_eps,
    check_float_dtype,
    check_param_shape,
    check_positive_int,
    check_supported,
)
from .formats import DTYPES
from .naive import layer_norm_naive, mean_and_variance, mean_square, rms_norm_naive

__all__ = ["layer_norm", "rms_norm", "group_norm", "batch_norm", "rms_norm_default_eps"]

_EXACT = DTYPES  # the formats computed exactly (lneps.formats.REGISTRY)


def rms_norm_default_eps(dtype) -> float:
    """The epsilon ``torch.nn.RMSNorm(eps=None)`` uses for input of ``dtype``: the machine
    epsilon of the computation type, float32's (:math:`2^{-23}`) for float16, bfloat16 and
    float32 input, float64's (:math:`2^{-52}`) for float64 (and for integers, which lneps
    computes in float64)."""
    dt = np.dtype(dtype)
    wide = dt.kind in "iu" or dt in (np.dtype(np.float64), np.dtype(np.complex128))
    return float(np.finfo(np.float64 if wide else np.float32).eps)


def _compute_dtype(compute_dtype, arr: np.ndarray):
    """``None`` or the checked real floating dtype the caller asked every operation to use."""
    if compute_dtype is None:
        return None
    dt = check_float_dtype(compute_dtype, "compute_dtype")
    if arr.dtype.kind == "c":
        raise TypeError(f"compute_dtype needs real input; x has dtype {arr.dtype}")
    return dt


def _input(x):
    """``(array, output dtype)`` for x, a format lneps computes exactly (or complex)."""
    arr, out_dtype = as_float_array(x)
    return check_supported(arr), out_dtype


def _real_param(p: np.ndarray, name: str, arr: np.ndarray) -> np.ndarray:
    """A gain, bias or statistic: no wider-than-float64 format, and real when x is."""
    check_supported(p, name)
    if p.dtype.kind == "c" and arr.dtype.kind != "c":
        raise TypeError(f"{name} is complex (dtype {p.dtype}) but x is real (dtype {arr.dtype}): "
                        "the result would be complex; pass real parameters, or complex x")
    return p


def _affine(param, name, arr, axes):
    """check_affine, then the dtype rules of :func:`_real_param`."""
    p = check_affine(param, name, arr, axes)
    return None if p is None else _real_param(p, name, arr)


def _check_flag(value, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False; got {value!r}")
    return bool(value)


def _to_rows(arr: np.ndarray, axes: tuple[int, ...]):
    """Move ``axes`` to the end and flatten: ``(rows, d)``, and how to undo it."""
    moved = np.moveaxis(arr, axes, tuple(range(arr.ndim - len(axes), arr.ndim)))
    d = int(np.prod([arr.shape[a] for a in axes]))
    rows = moved.reshape(-1, d)

    def back(y2, keep=False):
        kept = (1,) * len(axes) if keep else moved.shape[arr.ndim - len(axes):]
        y = y2.reshape(moved.shape[: arr.ndim - len(axes)] + kept)
        return np.moveaxis(y, tuple(range(arr.ndim - len(axes), arr.ndim)), axes)

    return rows, back


def _row_param(p, arr, axes):
    """gamma/beta (shaped by check_affine) as float64 broadcasting against (rows, d)."""
    if p is None:
        return None
    if p.ndim == 0:
        return np.asarray(p, dtype=np.float64)
    return np.moveaxis(p, axes, tuple(range(arr.ndim - len(axes), arr.ndim))).reshape(1, -1).astype(np.float64)


def _plain_core(x, eps, axes, centre=True):
    """Two-pass float64/complex128 formula: (v, 1/sqrt(q + eps), mean) along ``axes``."""
    mu = x.mean(axis=axes, keepdims=True) if centre else None
    v = x - mu if centre else x
    # v * v rather than |v|**2 keeps the core analytic in x (complex-step differentiation).
    q = (v * v).mean(axis=axes, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = 1 / np.sqrt(q + eps)
    return v, r, mu


def layer_norm(x, gamma=None, beta=None, *, eps=1e-5, axis=-1, compute_dtype=None, return_stats=False):
    r"""Layer normalization :math:`\gamma \odot (z - \mu)/\sqrt{\sigma^2 + \varepsilon} + \beta`.

    Parameters
    ----------
    x : array_like
        Any shape. Floating input keeps its dtype; integer input is computed and returned in
        float64 (magnitudes beyond :math:`2^{53}` are refused, naming the integer);
        ``np.longdouble`` is refused (``TypeError``); complex input keeps its dtype and uses
        the analytic continuation :math:`\sigma^2 = \operatorname{mean}(v^2)`.
    gamma, beta : array_like, optional
        Gain and bias: a scalar, the shape of the normalized axes (``(d,)`` for one axis), or
        any shape that broadcasts to x's with length 1 on the other axes (``(1, d)``). Real
        when x is real. Default :math:`\gamma = 1`, :math:`\beta = 0`.
    eps : float
        :math:`\varepsilon \ge 0`, added to the biased variance inside the square root.
        ``eps=0`` is allowed: a constant slice then gives NaN (that slice only).
    axis : int or tuple of int
        The axis whose numbers form one token, or a tuple of trailing axes normalized together
        (torch's multi-dimensional ``normalized_shape``; ONNX ``axis=a`` is
        ``tuple(range(a, x.ndim))``).
    compute_dtype : dtype, optional
        ``None`` (default): correctly rounded (see the module docstring): each element is the
        nearest number of x's format to the exact result. A real floating dtype: every
        operation rounded to it, epsilon, gamma and beta included
        (:func:`lneps.naive.layer_norm_naive`). Either way the output has x's dtype.
    return_stats : bool
        Also return ``mean`` and ``rstd`` :math:`= 1/\sqrt{\sigma^2+\varepsilon}`, shaped like x
        with the normalized axes kept as length 1 (as ONNX's ``Mean`` and ``InvStdDev``). With
        the default path they are float64: the mean within one float64 ulp of the exact mean,
        rstd within :math:`(d+3)/2 + 2` float64 ulp; with a ``compute_dtype``, that dtype's
        own rounded values.

    Returns
    -------
    y, or ``(y, mean, rstd)`` with ``return_stats=True``. On the default path an exact zero
    element is +0, whatever the signs of x, gamma and beta (IEEE 754's rule for an exact zero
    sum); a nonzero exact value that rounds to zero is -0 when it is negative.

    Examples
    --------
    >>> import numpy as np, lneps
    >>> lneps.layer_norm(np.array([[1.0, 2.0, 4.0]], dtype=np.float16), eps=1e-5)
    array([[-1.069 , -0.2673,  1.336 ]], dtype=float16)
    >>> lneps.layer_norm(np.full((1, 4), 2.5, dtype=np.float16), eps=1e-12)  # a constant row
    array([[0., 0., 0., 0.]], dtype=float16)
    >>> y, mean, rstd = lneps.layer_norm(np.array([[1.0, 2.0, 3.0, 4.0]]), eps=0.0, return_stats=True)
    >>> mean, rstd
    (array([[2.5]]), array([[0.89442719]]))
    """
    arr, out_dtype = _input(x)
    axes = check_axes(arr, axis)
    eps = check_eps(eps)
    g = _affine(gamma, "gamma", arr, axes)
    b = _affine(beta, "beta", arr, axes)
    dt = _compute_dtype(compute_dtype, arr)
    stats = _check_flag(return_stats, "return_stats")
    if dt is not None:
        rows, back = _to_rows(arr.astype(dt), axes)
        y2 = layer_norm_naive(rows, eps=eps, dtype=dt, axis=-1)
        y = back(y2)
        if g is not None:
            y = y * g.astype(dt)
        if b is not None:
            y = y + b.astype(dt)
        out = y.astype(out_dtype, copy=False)
        if not stats:
            return out
        mu, var = mean_and_variance(rows, dtype=dt, axis=-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            rstd = 1 / np.sqrt(var + np.asarray(eps).astype(dt))
        return out, back(mu, keep=True), back(rstd.astype(dt), keep=True)
    if arr.dtype.kind == "c":
        work = arr.astype(np.result_type(arr.dtype, np.complex128))
        v, r, mu = _plain_core(work, eps, axes)
        y = v * r
        y = y if g is None else y * g
        y = y if b is None else y + b
        return (y.astype(out_dtype, copy=False), mu, r) if stats else y.astype(out_dtype, copy=False)
    exact = arr.dtype in _EXACT
    rows, back = _to_rows(arr if exact else arr.astype(np.float64), axes)
    y2, mean, rstd = kernel.normalize(rows, kind="layer", eps=eps, gamma=_row_param(g, arr, axes),
                                      beta=_row_param(b, arr, axes))
    y = back(y2).astype(out_dtype, copy=False)
    if not stats:
        return y
    return y, back(mean[:, None], keep=True), back(rstd[:, None], keep=True)


def rms_norm(x, gamma=None, *, eps=None, axis=-1, compute_dtype=None, return_stats=False):
    r"""RMS normalization :math:`\gamma \odot z / \sqrt{\operatorname{mean}(z^2) + \varepsilon}`.

    No mean is subtracted and there is no bias. ``eps=None`` (the default) follows
    ``torch.nn.RMSNorm``: the machine epsilon of the computation type
    (:func:`rms_norm_default_eps`: float32's for float16, bfloat16 and float32 input,
    float64's for float64). Same dtypes, accuracy guarantee (signed zeros included), ``gamma``
    shapes, ``axis`` and ``compute_dtype`` as :func:`layer_norm`; ``return_stats=True`` also
    returns ``rstd``
    :math:`= 1/\sqrt{\operatorname{mean}(z^2)+\varepsilon}` (float64 on the default path).

    >>> import numpy as np, lneps
    >>> lneps.rms_norm(np.array([3.0, 4.0], dtype=np.float32))  # eps=None: float32's machine epsilon
    array([0.84852815, 1.1313709 ], dtype=float32)
    """
    arr, out_dtype = _input(x)
    axes = check_axes(arr, axis)
    eps = rms_norm_default_eps(arr.dtype) if eps is None else check_eps(eps)
    g = _affine(gamma, "gamma", arr, axes)
    dt = _compute_dtype(compute_dtype, arr)
    stats = _check_flag(return_stats, "return_stats")
    if dt is not None:
        rows, back = _to_rows(arr.astype(dt), axes)
        y = back(rms_norm_naive(rows, eps=eps, dtype=dt, axis=-1))
        if g is not None:
            y = y * g.astype(dt)
        out = y.astype(out_dtype, copy=False)
        if not stats:
            return out
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            rstd = 1 / np.sqrt(mean_square(rows, dtype=dt) + np.asarray(eps).astype(dt))
        return out, back(rstd, keep=True)
    if arr.dtype.kind == "c":
        work = arr.astype(np.result_type(arr.dtype, np.complex128))
        v, r, _ = _plain_core(work, eps, axes, centre=False)
        y = v * r if g is None else v * r * g
        return (y.astype(out_dtype, copy=False), r) if stats else y.astype(out_dtype, copy=False)
    exact = arr.dtype in _EXACT
    rows, back = _to_rows(arr if exact else arr.astype(np.float64), axes)
    y2, _, rstd = kernel.normalize(rows, kind="rms", eps=eps, gamma=_row_param(g, arr, axes))
    y = back(y2).astype(out_dtype, copy=False)
    return (y, back(rstd[:, None], keep=True)) if stats else y


def normalize_with_estimate(kind, x, gamma=None, beta=None, *, eps, axis=-1):
    r""":func:`layer_norm` (``kind="layer"``) or :func:`rms_norm` (``"rms"``) of x in its own
    format (float16, bfloat16 or float32), with what :mod:`lneps.testing` grades against:
    ``(y, estimate, mean, rstd, E)``. y is the correctly rounded result; ``estimate`` the float64
    estimate of each exact value before rounding, within
    :math:`E\,|\gamma\,(x-\mu)/\sqrt{q+\varepsilon}| + u|\hat y|` of it where finite (NaN
    where a gain beyond :math:`2^{\pm 600}` leaves it without a bound, or in a row holding inf or
    NaN: :func:`lneps.kernel.normalize`); mean (None for RMS norm) and rstd as ``return_stats``."""
    arr, _ = _input(x)
    if arr.dtype not in _EXACT[:3]:
        raise TypeError(f"x must be float16, bfloat16 or float32 for an estimate; got {arr.dtype}")
    axes = check_axes(arr, axis)
    eps = check_eps(eps)
    g = _affine(gamma, "gamma", arr, axes)
    b = _affine(beta, "beta", arr, axes) if kind == "layer" else None
    rows, back = _to_rows(arr, axes)
    est = np.empty(rows.shape)
    y2, mean, rstd = kernel.normalize(rows, kind=kind, eps=eps, gamma=_row_param(g, arr, axes),
                                      beta=_row_param(b, arr, axes), estimate=est)
    mean = None if mean is None else back(mean[:, None], keep=True)
    return back(y2), back(est), mean, back(rstd[:, None], keep=True), kernel.estimate_error(rows.shape[1])


def group_norm(x, num_groups, gamma=None, beta=None, *, eps=1e-5, return_stats=False):
    r"""Group normalization (``torch.nn.functional.group_norm``, ONNX ``GroupNormalization``).

    ``x`` has shape ``(N, C, *)``; its C channels split into ``num_groups`` groups of
    consecutive channels, and each (sample, group) slice, its channels and every spatial
    position, is normalized as one row: :math:`(z-\mu)/\sqrt{\sigma^2+\varepsilon}` with the
    biased variance. ``gamma`` and ``beta`` are per channel: a scalar, shape ``(C,)``, or a
    shape broadcasting to x's with length 1 on every axis but the channels' (``(1, C, 1)``).
    ``num_groups = C`` is instance normalization; ``num_groups = 1`` is layer norm over
    ``(C, *)``. Correctly rounded as :func:`layer_norm`, signed zeros included. The groups are
    normalized one at a time, in place in the output, so the working memory is about that of
    :func:`layer_norm` on one group's rows, whatever N.
    ``return_stats=True`` also returns
    float64 ``mean`` and ``rstd`` of shape ``(N, num_groups)``.

    >>> import numpy as np, lneps
    >>> lneps.group_norm(np.arange(8.0).reshape(1, 4, 2), 2)[0, :2]  # channels 0 and 1: one group
    array([[-1.34163542, -0.44721181],
           [ 0.44721181,  1.34163542]])
    """
    arr, out_dtype = _input(x)
    if arr.dtype.kind == "c":
        raise TypeError(f"x must be real; got complex dtype {arr.dtype}")
    if arr.ndim < 2:
        raise ValueError(f"x must have shape (N, C, ...) with at least 2 axes; got shape {arr.shape}")
    G = check_positive_int(num_groups, "num_groups")
    N, C = arr.shape[:2]
    if C % G:
        raise ValueError(f"num_groups must divide the number of channels C = {C}; got {G}")
    eps = check_eps(eps)
    stats = _check_flag(return_stats, "return_stats")
    if arr.size == 0:
        raise ValueError(f"x must hold numbers in every group; got shape {arr.shape}")
    params = []
    for p, name in ((gamma, "gamma"), (beta, "beta")):
        if p is None:
            params.append(None)
            continue
        q = _real_param(as_float_array(p, name)[0], name, arr)
        if q.ndim:
            q = check_param_shape(q, name, arr, (1,), "channel").reshape(C)  # (C,), or (1, C, 1, ...)
        params.append(q.astype(np.float64))
    rows = (arr if arr.dtype in _EXACT else arr.astype(np.float64)).reshape(N, G, -1)
    if all(p is None or p.ndim == 0 for p in params):
        y2, mean, rstd = kernel.normalize(rows.reshape(N * G, -1), kind="layer", eps=eps,
                                          gamma=params[0], beta=params[1])
    else:
        # One call per group, its N rows at once: the group's gains and biases, each channel's
        # repeated over the spatial positions, are one row of d numbers broadcast over the N
        # rows, rather than float64 copies the size of x.
        y2 = np.empty(rows.shape, dtype=rows.dtype)
        mean, rstd = np.empty((N, G)), np.empty((N, G))
        spatial = rows.shape[2] * G // C
        for k in range(G):
            per = [None if p is None else (p if p.ndim == 0 else
                   np.repeat(p[k * (C // G):(k + 1) * (C // G)], spatial)) for p in params]
            _, mean[:, k], rstd[:, k] = kernel.normalize(rows[:, k], kind="layer", eps=eps, gamma=per[0],
                                                         beta=per[1], out=y2[:, k])
    y = y2.reshape(arr.shape).astype(out_dtype, copy=False)
    return (y, mean.reshape(N, G), rstd.reshape(N, G)) if stats else y


def _feature_blocks(fshape, d):
    """Blocks of about kernel.BLOCK_ELEMENTS elements of a features-first array: for each
    index of the leading feature axes, runs of the last one. Yields ``(sel, f0, f1)``: the
    index into the features-first array and the block's range of flat feature numbers."""
    if not fshape:
        yield (), 0, 1
        return
    last = fshape[-1]
    step = max(1, kernel.BLOCK_ELEMENTS // max(d, 1))
    for k, idx in enumerate(np.ndindex(*fshape[:-1])):
        for a in range(0, last, step):
            b = min(last, a + step)
            yield idx + (slice(a, b),), k * last + a, k * last + b


def batch_norm(x, gamma=None, beta=None, *, eps=1e-5, axis=0, training=True,
               running_mean=None, running_var=None, return_stats=False):
    r"""Batch normalization: each feature normalized across the examples on ``axis``.

    ``axis`` (an int or a tuple) names the axes reduced over: ``0`` for a ``(tokens,
    features)`` table, ``(0, 2)`` for torch's ``(N, C, L)``. The remaining axes are the
    features; ``gamma``, ``beta``, ``running_mean`` and ``running_var`` are a scalar, have
    the features' shape, or broadcast to x's shape with length 1 on the reduced axes.

    * ``training=True``: the batch's own biased mean and variance per feature, so one token's
      output depends on every other token in the batch:
      :math:`\gamma_j (x_{tj} - \mu_j)/\sqrt{\sigma_j^2 + \varepsilon} + \beta_j`. As in
      torch, a feature needs more than one value (``ValueError`` otherwise: its variance
      would be 0 whatever the data).
    * ``training=False``: the stored statistics (``running_mean`` and ``running_var``,
      both required), as a network uses them after training:
      :math:`\gamma_j (x_{tj} - m_j)/\sqrt{v_j + \varepsilon} + \beta_j`; here ε meets a
      stored, possibly tiny variance. No statistic of the batch is used.

    Correctly rounded as :func:`layer_norm`, both ways (real input), signed zeros included.
    Features are gathered into rows a block at a time, so the working memory is a few
    megabytes plus one feature's values, not a copy of x.
    ``return_stats=True``
    also returns float64 ``mean`` and ``rstd``, shaped like x with the reduced axes kept.

    >>> import numpy as np, lneps
    >>> lneps.batch_norm(np.array([[1.0, 10.0], [3.0, 30.0]]))  # each column over the batch
    array([[-0.999995  , -0.99999995],
           [ 0.999995  ,  0.99999995]])
    """
    arr, out_dtype = _input(x)
    if arr.dtype.kind == "c":
        raise TypeError(f"x must be real; got complex dtype {arr.dtype}")
    if isinstance(axis, (tuple, list)):
        if not axis:
            raise ValueError("axis must name at least one axis; got an empty tuple")
        axes = tuple(sorted({check_axis(arr, a) for a in axis}))
    else:
        axes = check_axes(arr, axis)
    eps = check_eps(eps)
    training = _check_flag(training, "training")
    stats = _check_flag(return_stats, "return_stats")
    features = tuple(a for a in range(arr.ndim) if a not in axes)
    fshape = tuple(arr.shape[a] for a in features)
    # Put the features first and the reduced axes last: one row per feature.
    order = features + axes
    moved = np.transpose(arr if arr.dtype in _EXACT else arr.astype(np.float64), order)
    nrows = int(np.prod(fshape)) if fshape else 1
    d = int(np.prod([arr.shape[a] for a in axes]))

    def per_row(p, name):
        if p is None:
            return None
        q = _real_param(as_float_array(p, name)[0], name, arr)
        if q.ndim and q.shape != fshape:
            try:  # the features' shape, or broadcasting to x with length 1 on the reduced axes
                q = check_param_shape(q, name, arr, features, "feature")
            except ValueError:
                raise ValueError(f"{name} must be a scalar or have the features' shape {fshape} "
                                 f"(or broadcast to x's shape {arr.shape} with length 1 on the "
                                 f"reduced axes {axes}); got shape {q.shape}") from None
        return np.broadcast_to(q.astype(np.float64), fshape).reshape(nrows, 1)

    g, b = per_row(gamma, "gamma"), per_row(beta, "beta")
    if training:
        if running_mean is not None or running_var is not None:
            raise ValueError("running_mean and running_var are used only with training=False")
        if d == 1 and arr.size:  # torch's rule: a variance of one value is 0, always
            raise ValueError(f"Expected more than 1 value per channel when training, got input of "
                             f"shape {arr.shape} (1 value per feature over the axes {axes})")
        m = v = None
    else:
        if running_mean is None or running_var is None:
            raise ValueError("training=False needs running_mean and running_var")
        m, v = per_row(running_mean, "running_mean"), per_row(running_var, "running_var")
        if np.any(v < 0):
            raise ValueError("running_var must be >= 0: a variance cannot be negative")
    y_moved = np.empty(moved.shape, dtype=moved.dtype)
    mean, rstd = np.empty(nrows), np.empty(nrows)
    for sel, f0, f1 in _feature_blocks(fshape, d):
        # A block of features gathered into rows: a copy of that block only, not of x.
        rows = moved[sel].reshape(f1 - f0, d)
        part = (lambda p: None if p is None else p[f0:f1])
        if training:
            y2, mean[f0:f1], rstd[f0:f1] = kernel.normalize(rows, kind="layer", eps=eps,
                                                            gamma=part(g), beta=part(b))
        else:
            y2, rstd[f0:f1] = kernel.normalize_with(rows, m[f0:f1], v[f0:f1], eps=eps,
                                                    gamma=part(g), beta=part(b))
            mean[f0:f1] = m[f0:f1, 0]
        y_moved[sel] = y2.reshape(y_moved[sel].shape)
    inverse = np.argsort(order)
    y = np.transpose(y_moved, inverse).astype(out_dtype, copy=False)
    if not stats:
        return y
    kept = tuple(1 if a in axes else arr.shape[a] for a in range(arr.ndim))
    return y, np.asarray(mean, dtype=np.float64).reshape(kept), np.asarray(rstd, dtype=np.float64).reshape(kept)
