r"""The Jacobian of the layer-normalization core, in closed form and numerically.

For one token :math:`z \in \mathbb R^d` (PyTorch's convention, biased variance),
:math:`v = Pz` with the centering matrix :math:`P = I - \mathbf 1\mathbf 1^{\mathsf T}/d`,
:math:`q = v\cdot v/d`, and the core :math:`u_\varepsilon(z) = v/\sqrt{q+\varepsilon}` has

.. math::

    Du_\varepsilon(z) = \frac{P}{\sqrt{q+\varepsilon}} - \frac{vv^{\mathsf T}}{d(q+\varepsilon)^{3/2}},

a symmetric matrix with eigenvalues 0 (along :math:`\mathbf 1`),
:math:`\varepsilon/(q+\varepsilon)^{3/2}` (along v) and :math:`(q+\varepsilon)^{-1/2}` (the
rest). ``lneps.book.symbolic.check_jacobian`` proves the formula; this module evaluates it.
"""

from __future__ import annotations


import numpy as np

from ._checks import as_float_array, check_axis, check_eps, check_real
from .norms import layer_norm

__all__ = [
    "jacobian",
    "numerical_jacobian",
    "normalized_variance",
    "predicted_eigenvalues",
    "lipschitz_ratios",
]

_METHODS = ("central", "complex-step")


def _token(z) -> np.ndarray:
    arr, _ = as_float_array(z, "z")
    if arr.ndim != 1:
        raise ValueError(f"z must be 1-D (one token of d numbers); got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError("z must have at least one number; got an empty array")
    return arr.astype(np.float64)


def jacobian(z, *, eps=1e-5) -> np.ndarray:
    r"""The Jacobian :math:`Du_\varepsilon(z)_{ij} = \partial u_{\varepsilon,i}/\partial z_j` of the
    core :math:`u_\varepsilon(z) = v/\sqrt{q+\varepsilon}` at a 1-D token ``z`` of d numbers,
    as a float64 array of shape (d, d), from the closed form

    .. math::

        Du_\varepsilon(z) = \frac{P}{\sqrt{q+\varepsilon}} - \frac{vv^{\mathsf T}}{d\,(q+\varepsilon)^{3/2}},

    where :math:`P = I - \mathbf 1\mathbf 1^{\mathsf T}/d` is the centering matrix,
    :math:`v = Pz = z - \operatorname{mean}(z)\mathbf 1` and :math:`q = v\cdot v/d` is the
    biased variance (divisor d, PyTorch's convention). With ``eps = 0`` at a constant ``z``
    (q = 0) the core is 0/0 and every entry is NaN."""
    z = _token(z)
    eps = check_eps(eps)
    d = z.size
    v = z - z.mean()
    s2 = np.sum(v * v) / d + eps  # NumPy's own sum: no BLAS, the same bits on every machine
    P = np.eye(d) - 1.0 / d
    with np.errstate(invalid="ignore", divide="ignore"):  # eps = 0 at a constant z: NaN
        return P / np.sqrt(s2) - np.outer(v, v) / (d * s2 * np.sqrt(s2))


def numerical_jacobian(f, z, *, method="central", step=None) -> np.ndarray:
    r"""Jacobian of ``f`` at the 1-D point ``z`` by finite differences, column by column.

    ``method="central"``: :math:`(f(z+he_j) - f(z-he_j))/(2h)`, truncation error
    :math:`O(h^2)`; default :math:`h = \epsilon_{\text{mach}}^{1/3}\max(1, \|z\|_\infty)`,
    which balances it against rounding: error about
    :math:`\epsilon_{\text{mach}}^{2/3}` (4e-11) relative at best.

    ``method="complex-step"``: :math:`\operatorname{Im} f(z + ihe_j)/h`, default
    :math:`h = 10^{-20}`. No difference is taken, so nothing cancels: for an ``f`` analytic
    in z (``lneps.layer_norm`` is, for complex input) it is exact to rounding.
    """
    z = _token(z)
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}; got {method!r}")
    if step is not None:
        step = check_real(step, "step")
        if not (np.isfinite(step) and step > 0):
            raise ValueError(f"step must be a positive finite number; got {step!r}")
    d = z.size
    eye = np.eye(d)
    if method == "central":
        h = step if step is not None else np.finfo(float).eps ** (1 / 3) * max(1.0, np.abs(z).max())
        cols = [(np.asarray(f(z + h * e)) - np.asarray(f(z - h * e))) / (2 * h) for e in eye]
    else:
        h = step if step is not None else 1e-20
        cols = [np.imag(np.asarray(f(z + 1j * h * e))) / h for e in eye]
    return np.stack(cols, axis=1).real.astype(np.float64)


def normalized_variance(x, *, eps=1e-5, axis=-1) -> np.ndarray:
    r""":math:`\frac1d\sum_i u_{\varepsilon,i}^2 = q/(q+\varepsilon)` along ``axis``: the
    variance of the normalized core, 1 only when :math:`\varepsilon = 0`. With eps = 0 a
    constant slice gives NaN (0/0)."""
    arr, _ = as_float_array(x)
    axis = check_axis(arr, axis)
    eps = check_eps(eps)
    arr = arr.astype(np.float64)
    v = arr - arr.mean(axis=axis, keepdims=True)
    q = (v * v).mean(axis=axis)
    with np.errstate(invalid="ignore"):
        return q / (q + eps)


def predicted_eigenvalues(z, *, eps=1e-5) -> np.ndarray:
    r"""The eigenvalues of :math:`Du_\varepsilon(z)` in ascending order, from the formulas:
    0 along :math:`\mathbf 1`; for v ≠ 0, :math:`\varepsilon/(q+\varepsilon)^{3/2}` along v and
    :math:`(q+\varepsilon)^{-1/2}` d - 2 times; for v = 0, :math:`\varepsilon^{-1/2}` d - 1 times.
    With ``eps = 0`` at a constant ``z`` the Jacobian is undefined (0/0; :func:`jacobian`
    gives NaN entries), so all d values are NaN.
    """
    z = _token(z)
    eps = check_eps(eps)
    d = z.size
    v = z - z.mean()
    q = np.sum(v * v) / d
    s = np.sqrt(q + eps)
    if not np.any(v):
        if eps == 0.0:
            return np.full(d, np.nan)
        return np.concatenate([[0.0], np.full(d - 1, 1 / s)])
    values = np.concatenate([[0.0], [eps / (s * s * s)] if d > 1 else [], np.full(max(d - 2, 0), 1 / s)])
    return np.sort(values)


def lipschitz_ratios(x, y, *, eps=1e-5, gamma=None) -> np.ndarray:
    r""":math:`\|f(x) - f(y)\|_2 / \|x - y\|_2` for each row pair of ``x`` and ``y`` (shape
    (n, d) or (d,)), with :math:`f = u_\varepsilon` (``gamma=None``) or
    :math:`f = \gamma\odot u_\varepsilon` (gamma: a scalar or d gains; a bias would cancel).

    Never above :math:`\varepsilon^{-1/2}`, or :math:`\max_i|\gamma_i|\,\varepsilon^{-1/2}`
    with gamma. A pair of identical rows has no ratio (0/0): ValueError naming its index.
    """
    x, _ = as_float_array(x, "x")
    y, _ = as_float_array(y, "y")
    if x.shape != y.shape:
        raise ValueError(f"x and y must have the same shape; got {x.shape} and {y.shape}")
    gap = _row_norms(x - y)
    same = np.flatnonzero(np.atleast_1d(gap) == 0)
    if same.size:
        raise ValueError(f"x and y are identical in row {int(same[0])}: the ratio is 0/0")
    du = layer_norm(x, gamma, eps=eps) - layer_norm(y, gamma, eps=eps)
    return _row_norms(du) / gap


def _row_norms(a):
    # NumPy's own sum rather than np.linalg.norm, whose 1-D case is a BLAS dot: the same bits
    # on every machine
    return np.sqrt(np.sum(a * a, axis=-1))
