r"""The exact reference: layer normalization in exact arithmetic, rounded once to a format.

"""

from __future__ import annotations

import numpy as np

from ._checks import as_real_float_array, check_axis, check_eps, check_positive_int

__all__ = ["layer_norm_exact"]


def layer_norm_exact(x, *, eps, digits: int = 50) -> np.ndarray:
    r"""Layer norm of the rows of ``x`` (last axis) computed with ``digits`` significant decimal
    digits (mpmath), then rounded once to float64: a reference for judging float64 itself.

    :math:`\mu = \frac1d\sum x_i`, :math:`\sigma^2 = \frac1d\sum (x_i-\mu)^2` (divisor d),
    output :math:`(x_i-\mu)/\sqrt{\sigma^2+\varepsilon}`; the input values and eps are taken
    exactly as stored. Slow (pure Python): meant for a few thousand elements.
    """
    import mpmath  # only this reference needs it

    arr = as_real_float_array(x, "x")
    check_axis(arr, -1)
    eps = mpmath.mpf(check_eps(eps))
    rows = arr.astype(np.float64).reshape(-1, arr.shape[-1])
    out = np.empty(rows.shape)
    with mpmath.workdps(check_positive_int(digits, "digits")):
        for k, row in enumerate(rows):
            xs = [mpmath.mpf(float(v)) for v in row]
            mu = mpmath.fsum(xs) / len(xs)
            scale = mpmath.sqrt(mpmath.fsum((v - mu) ** 2 for v in xs) / len(xs) + eps)
            out[k] = [float((v - mu) / scale) for v in xs]
    return out.reshape(arr.shape)
