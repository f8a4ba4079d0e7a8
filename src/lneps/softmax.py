r"""Softmax, naive and with the log-sum-exp shift.

.. math::

    \operatorname{softmax}(x)_i = \frac{e^{x_i}}{\sum_j e^{x_j}}
    = \frac{e^{x_i - m}}{\sum_j e^{x_j - m}}, \qquad m = \max_j x_j .

The two are equal in exact arithmetic; in floating point the first overflows as soon as some
:math:`e^{x_i}` passes the format's largest number (:math:`x > \ln 65504 \approx 11.09` in
float16, :math:`x > 709.78` in float64), and inf/inf is NaN. After the shift every exponent
is :math:`\le 0`, so :math:`e^{x_i - m} \le 1` and the largest term is exactly 1.
"""

from __future__ import annotations

import numpy as np

from ._checks import as_real_float_array, check_axis

__all__ = ["softmax"]


def softmax(x, *, axis: int = -1, stable: bool = True) -> np.ndarray:
    r"""Softmax along ``axis``, computed in ``x``'s own floating format (integers: float64).

    ``stable=True`` (default) subtracts the maximum along ``axis`` first, the log-sum-exp
    shift:

    .. math:: \operatorname{softmax}(x)_i = \frac{e^{x_i - m}}{\sum_j e^{x_j - m}},
              \qquad m = \max_j x_j ;

    ``stable=False`` is the textbook formula, kept to show how it overflows:

    .. math:: \operatorname{softmax}(x)_i = \frac{e^{x_i}}{\sum_j e^{x_j}} .

    Without the shift, any :math:`e^{x_i}` above the format's largest number is inf and the
    slice gives inf/inf = NaN. A slice whose maximum is inf or NaN gives NaN in that slice
    only. Complex, bool and string input are a ``TypeError``.
    """
    arr = as_real_float_array(x, "x")
    if not isinstance(stable, (bool, np.bool_)):
        raise TypeError(f"stable must be True or False; got {stable!r}")
    axis = check_axis(arr, axis)
    with np.errstate(over="ignore", invalid="ignore"):
        shifted = arr - arr.max(axis=axis, keepdims=True) if stable else arr
        e = np.exp(shifted)
        return e / e.sum(axis=axis, keepdims=True)
