r"""What swapping one epsilon for another does to a normalized row, in closed form and measured.

For a row with statistic :math:`q` (the biased variance for layer norm, the mean square for
RMS norm) the normalized output is :math:`v/\sqrt{q+\varepsilon}` with :math:`v` independent
of :math:`\varepsilon`, so changing :math:`\varepsilon_a \to \varepsilon_b` multiplies the
whole row by one number, :math:`\sqrt{(q+\varepsilon_a)/(q+\varepsilon_b)}`.
"""

from __future__ import annotations

import math

import numpy as np

from .._checks import as_float_array, check_axis, check_eps, check_real
from ..norms import layer_norm, rms_norm
from ..naive import mean_and_variance

__all__ = [
    "KINDS",
    "row_statistic",
    "predicted_relative_change",
    "relative_change",
    "statistic_for_relative_change",
]

#: The two normalizations: layer norm (mean removed, q the biased variance) and RMS norm
#: (no mean, q the mean square).
KINDS = ("LayerNorm", "RMSNorm")


def row_statistic(x, *, kind: str = "LayerNorm", axis: int = -1) -> np.ndarray:
    r"""The per-row :math:`q` the epsilon is added to: the biased variance (``"LayerNorm"``)
    or the mean square (``"RMSNorm"``), in float64, one number per row (``axis`` removed).

    The variance is :func:`lneps.book.finite_precision.mean_and_variance` in float64 (two-pass, divisor
    d); the mean square :math:`\frac1d\sum_i x_i^2` has no other home in the package.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}; got {kind!r}")
    arr, _ = as_float_array(x)
    axis = check_axis(arr, axis)
    xw = arr.astype(np.float64)
    if kind == "LayerNorm":
        _, q = mean_and_variance(xw, dtype=np.float64, axis=axis)
        return np.squeeze(q, axis=axis)
    return (xw * xw).mean(axis=axis)


def predicted_relative_change(q, eps_from: float, eps_to: float) -> np.ndarray:
    r"""Closed form of the relative change of a normalized row when :math:`\varepsilon_a`
    (``eps_from``) is replaced by :math:`\varepsilon_b` (``eps_to``):

    .. math:: \left|\sqrt{\frac{q+\varepsilon_a}{q+\varepsilon_b}} - 1\right|
              \approx \frac{|\varepsilon_b-\varepsilon_a|}{2q} \quad (q \gg \varepsilon).
    """
    eps_from, eps_to = check_eps(eps_from), check_eps(eps_to)
    q = np.asarray(q, dtype=np.float64)
    if np.any(q < 0):
        raise ValueError("q must be >= 0 (a variance or a mean square)")
    # (a - b) / (sqrt(a) (sqrt(a) + sqrt(b))) is sqrt(a/b) - 1 without cancellation near 1.
    a, b = q + eps_from, q + eps_to
    return np.abs((a - b) / (np.sqrt(b) * (np.sqrt(a) + np.sqrt(b))))


def relative_change(x, eps_from: float, eps_to: float, *, kind: str = "LayerNorm",
                    axis: int = -1) -> np.ndarray:
    r"""Measured relative change per row, :math:`\|N_b(x) - N_a(x)\|_2 / \|N_a(x)\|_2`, with
    :math:`N` the package's ``layer_norm`` or ``rms_norm`` (float64) at the two epsilons.

    A row whose :math:`N_a` is all zero (a constant row under layer norm) gives NaN.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}; got {kind!r}")
    arr, _ = as_float_array(x)
    axis = check_axis(arr, axis)
    norm = layer_norm if kind == "LayerNorm" else rms_norm
    xw = arr.astype(np.float64)
    a = norm(xw, eps=eps_from, axis=axis)
    b = norm(xw, eps=eps_to, axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.linalg.norm(b - a, axis=axis) / np.linalg.norm(a, axis=axis)


def statistic_for_relative_change(change: float, eps_from: float, eps_to: float) -> float:
    r"""The row statistic :math:`q` at which swapping ``eps_from`` for ``eps_to`` changes the
    output by exactly the relative amount ``change``: the inverse of
    :func:`predicted_relative_change`. Rows with a smaller :math:`q` change by more.

    With :math:`s = 1 - c` when :math:`\varepsilon_b > \varepsilon_a` (the output shrinks) and
    :math:`s = 1 + c` otherwise, :math:`(q+\varepsilon_a)/(q+\varepsilon_b) = s^2` gives
    :math:`q = (\varepsilon_b s^2 - \varepsilon_a)/(1 - s^2)`.
    """
    eps_from, eps_to = check_eps(eps_from), check_eps(eps_to)
    if eps_from == eps_to:
        raise ValueError("eps_from and eps_to must differ: equal epsilons change nothing")
    change = check_real(change, "change")
    if not 0 < change < math.inf:  # also rejects NaN
        raise ValueError(f"change must be a positive finite number; got {change!r}")
    largest = float(predicted_relative_change(0.0, eps_from, eps_to))  # reached at q = 0
    if change >= largest:
        raise ValueError(
            f"change must be below {largest:.6g}, the change of a constant row (q = 0); "
            f"got {change!r}"
        )
    s = 1.0 - change if eps_to > eps_from else 1.0 + change
    return (eps_to * s * s - eps_from) / (1.0 - s * s)
