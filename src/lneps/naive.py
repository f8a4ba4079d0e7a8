r"""The naive low-precision arithmetic: every operation rounded to a format, as a layer that
never upcasts computes it (behind ``compute_dtype=`` of :func:`lneps.layer_norm` and friends).

Every function here rounds **every** operation to ``dtype``: the input, each partial sum, each
product, the division by d, epsilon itself, the square root. NumPy float16 and
``ml_dtypes.bfloat16`` do each elementwise operation through float32 and round once; float32
has more than twice their significand bits plus two, so each of ``+ - * / sqrt`` comes out
correctly rounded. Sums are pairwise (a tree, as GPU reductions and NumPy do), every partial
sum stored in ``dtype``. (``np.mean`` and ``np.sum`` on float16 accumulate in float32 behind
your back, and ml_dtypes' bfloat16 ``sum`` is sequential, so neither is used.)
"""

from __future__ import annotations

import numpy as np

from ._checks import as_real_float_array, check_axis, check_eps, check_float_dtype
from .formats import format_of

__all__ = [
    "VARIANCE_METHODS",
    "rounded_sum",
    "mean_and_variance",
    "layer_norm_naive",
    "rms_norm_naive",
    "mean_square",
    "condition_number",
]


VARIANCE_METHODS = ("two-pass", "one-pass", "welford")

def rounded_sum(x, dtype, axis: int = -1) -> np.ndarray:
    """Pairwise sum along ``axis`` (kept, length 1), every partial sum rounded to ``dtype``.

    ``x`` must be real (integer or floating; bool, strings and complex are a ``TypeError``)
    and is first rounded to ``dtype``. The axis is padded with zeros to a power of two;
    adding 0 is exact, so the padding changes no rounding.
    """
    dt = check_float_dtype(dtype)
    arr = as_real_float_array(x, "x")
    a = np.moveaxis(arr.astype(dt), axis, -1)
    n = a.shape[-1]
    width = 1 << max(n - 1, 0).bit_length()
    a = np.concatenate([a, np.zeros(a.shape[:-1] + (width - n,), dtype=dt)], axis=-1)
    with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN are results here
        while a.shape[-1] > 1:
            half = a.shape[-1] // 2
            a = a[..., :half] + a[..., half:]
    return np.moveaxis(a, -1, axis)

def _divide_by_count(s: np.ndarray, n: int) -> np.ndarray:
    # s / n rounded once to s's format (n itself is not rounded: 3000 is not a bfloat16).
    # Up to float32, going through float64 (more than 2p + 2 bits) rounds the same as one
    # correctly rounded division; float64 and wider hold n exactly and divide directly.
    if format_of(s.dtype).p >= 53:
        return s / np.asarray(n, dtype=s.dtype)
    return (s.astype(np.float64) / n).astype(s.dtype)

def _two_pass(x, axis):
    d = x.shape[axis]
    mu = _divide_by_count(rounded_sum(x, x.dtype, axis), d)
    v = x - mu
    return mu, _divide_by_count(rounded_sum(v * v, x.dtype, axis), d)

def _one_pass(x, axis):
    # E[x^2] - E[x]^2: two large numbers subtracted, the textbook catastrophic cancellation.
    d = x.shape[axis]
    mu = _divide_by_count(rounded_sum(x, x.dtype, axis), d)
    mean_sq = _divide_by_count(rounded_sum(x * x, x.dtype, axis), d)
    return mu, mean_sq - mu * mu

def _welford(x, axis):
    # One sweep over the d numbers, all rows at once; the count k is rounded to the format too.
    xs = np.moveaxis(x, axis, -1)
    mu = np.zeros(xs.shape[:-1], dtype=x.dtype)
    m2 = np.zeros_like(mu)
    for k in range(xs.shape[-1]):
        xk = xs[..., k]
        delta = xk - mu
        mu = mu + delta / np.asarray(k + 1).astype(x.dtype)
        m2 = m2 + delta * (xk - mu)
    d = xs.shape[-1]
    return np.expand_dims(mu, axis), np.expand_dims(_divide_by_count(m2, d), axis)

_MOMENTS = {"two-pass": _two_pass, "one-pass": _one_pass, "welford": _welford}

def mean_and_variance(x, *, dtype, method: str = "two-pass", axis: int = -1):
    r"""Mean and biased variance (divisor d) along ``axis`` (kept), every operation in ``dtype``.

    ``x`` must be real (integer or floating; bool, strings and complex are a ``TypeError``)
    and is first rounded to ``dtype``. ``method``:

    * ``"two-pass"``: :math:`\mu = \frac1d\sum x_i`, then :math:`\sigma^2 = \frac1d\sum (x_i-\mu)^2`;
    * ``"one-pass"``: :math:`\sigma^2 = \frac1d\sum x_i^2 - \mu^2` (can cancel catastrophically
      and even come out negative);
    * ``"welford"``: from :math:`\mu = M_2 = 0`, for :math:`k = 1, \dots, d` the update
      :math:`\delta = x_k - \mu`, :math:`\mu \mathrel{+}= \delta/k`,
      :math:`M_2 \mathrel{+}= \delta (x_k - \mu)`; then :math:`\sigma^2 = M_2/d`.
    """
    dt = check_float_dtype(dtype)
    if method not in _MOMENTS:
        raise ValueError(f"method must be one of {VARIANCE_METHODS}; got {method!r}")
    arr = as_real_float_array(x, "x")
    axis = check_axis(arr, axis)
    with np.errstate(over="ignore", invalid="ignore"):
        return _MOMENTS[method](arr.astype(dt), axis)

def layer_norm_naive(x, *, eps, dtype, method: str = "two-pass", axis: int = -1) -> np.ndarray:
    r"""Layer norm :math:`(x-\mu)/\sqrt{\sigma^2+\varepsilon}` with every operation in ``dtype``.

    :math:`\mu` and the biased variance :math:`\sigma^2` (divisor d, the row length) come
    from ``mean_and_variance`` with ``method`` (default ``"two-pass"``). No gain or bias:
    :math:`\gamma` and :math:`\beta` are applied by the caller (:func:`lneps.layer_norm`).
    ``x`` must be real. Epsilon is stored in ``dtype`` first, as a naive low-precision
    implementation does: in float16, 1e-12 becomes 0 and a constant row gives 0/0 = NaN.
    Returns ``dtype``.
    """
    dt = check_float_dtype(dtype)
    eps_d = np.asarray(check_eps(eps)).astype(dt)
    xd = as_real_float_array(x, "x").astype(dt)
    mu, var = mean_and_variance(xd, dtype=dt, method=method, axis=axis)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        return (xd - mu) / np.sqrt(var + eps_d)

def mean_square(x, *, dtype, axis: int = -1) -> np.ndarray:
    r""":math:`\frac1d\sum_i x_i^2` along ``axis`` (kept), every operation rounded to ``dtype``:
    the squares, the pairwise sum (:func:`rounded_sum`) and the division by d."""
    dt = check_float_dtype(dtype)
    xd = as_real_float_array(x, "x").astype(dt)
    axis = check_axis(xd, axis)
    with np.errstate(over="ignore", invalid="ignore"):
        return _divide_by_count(rounded_sum(xd * xd, dt, axis), xd.shape[axis])


def rms_norm_naive(x, *, eps, dtype, axis: int = -1) -> np.ndarray:
    r"""RMS norm :math:`x/\sqrt{\frac1d\sum x_i^2+\varepsilon}` with every operation in ``dtype``.

    ``x`` must be real; no gain (applied by :func:`lneps.rms_norm`). Epsilon is stored in
    ``dtype`` first. Returns ``dtype``."""
    dt = check_float_dtype(dtype)
    eps_d = np.asarray(check_eps(eps)).astype(dt)
    xd = as_real_float_array(x, "x").astype(dt)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        return xd / np.sqrt(mean_square(xd, dtype=dt, axis=axis) + eps_d)


def condition_number(x, axis: int = -1) -> np.ndarray:
    r"""Chan, Golub and LeVeque's condition number of the variance along ``axis``:
    :math:`\kappa = \sqrt{1 + \mu^2/\sigma^2}` (about :math:`|\mu|/\sigma` for rows far from 0).

    Their analysis: in a format with unit roundoff :math:`u_{\mathrm{fmt}}`, the one-pass
    :math:`\frac1d\sum x_i^2 - \mu^2` has relative error of order :math:`u_{\mathrm{fmt}}\kappa^2`
    (both terms are about :math:`\kappa^2\sigma^2`, and their difference is
    :math:`\sigma^2`), while the two-pass formula's is of order
    :math:`u_{\mathrm{fmt}} + (u_{\mathrm{fmt}}\kappa)^2` times
    small multiples of d. Computed in float64 from the stored values; NaN where
    :math:`\sigma = 0`.
    """
    arr = as_real_float_array(x, "x").astype(np.float64)
    axis = check_axis(arr, axis)
    mu = arr.mean(axis=axis)
    var = arr.var(axis=axis)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(var > 0, np.sqrt(1 + mu * mu / var), np.nan)

