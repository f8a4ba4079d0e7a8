r"""A plain two-pass float32 layer norm and six defective variants of it, each a few lines of
NumPy: the kernels the chapter "Testing a kernel against the exact answer" grades.

Every kernel takes ``(x, gamma, beta, eps)`` with x of shape (rows, d) in float16, bfloat16 or
float32 (gamma, beta: None or shape (d,) in the same format) and returns x's dtype. The correct
one follows the model of :func:`lneps.testing.two_pass_bound` (float32 throughout, NumPy's
pairwise sums, 1/sqrt of a rounded square root); each defect changes one thing.
:mod:`lneps.book.kernel_zoo` holds the larger zoo (Welford, Chan's merges, one pass in float64,
a 2-ulp rsqrt, RMS norm), which :mod:`lneps.book.zoo_grades` grades with
:func:`lneps.testing.forward_bound` and :func:`lneps.testing.scale_bias`.
"""

from __future__ import annotations

import numpy as np

__all__ = ["F32", "two_pass", "one_pass", "low_precision", "eps_after_rounding", "affine_in_input_format",
           "unbiased", "wrong_eps", "KERNELS"]

F32 = np.float32


def _mean(a):
    return np.sum(a, axis=-1, keepdims=True, dtype=a.dtype) / a.dtype.type(a.shape[-1])


def _affine(n, gamma, beta, dt):
    """gamma * n + beta in dt's arithmetic (each operation rounded to dt)."""
    if gamma is not None:
        n = n * gamma.astype(dt)
    if beta is not None:
        n = n + beta.astype(dt)
    return n


def two_pass(x, gamma=None, beta=None, eps=1e-5):
    """Correct: mean, then the centred sum of squares, all in float32."""
    xf = x.astype(F32)
    t = xf - _mean(xf)
    r = F32(1) / np.sqrt(_mean(t * t) + F32(eps))
    return _affine(t * r, gamma, beta, F32).astype(x.dtype)


def one_pass(x, gamma=None, beta=None, eps=1e-5):
    """Defect: the variance as E[x^2] - mu^2 (one pass over the data), in float32."""
    xf = x.astype(F32)
    mu = _mean(xf)
    var = np.maximum(_mean(xf * xf) - mu * mu, F32(0))
    r = F32(1) / np.sqrt(var + F32(eps))
    return _affine((xf - mu) * r, gamma, beta, F32).astype(x.dtype)


def low_precision(x, gamma=None, beta=None, eps=1e-5):
    """Defect: the two-pass kernel with every operation in x's own format (no float32)."""
    dt = x.dtype
    t = x - _mean(x)
    r = dt.type(1) / np.sqrt(_mean(t * t) + dt.type(eps))
    return _affine(t * r, gamma, beta, dt)


def eps_after_rounding(x, gamma=None, beta=None, eps=1e-5):
    """Defect: the variance rounded to x's format before eps (itself in x's format) is added."""
    dt = x.dtype
    xf = x.astype(F32)
    t = xf - _mean(xf)
    w = (_mean(t * t).astype(dt) + dt.type(eps)).astype(F32)
    return _affine(t * (F32(1) / np.sqrt(w)), gamma, beta, F32).astype(dt)


def affine_in_input_format(x, gamma=None, beta=None, eps=1e-5):
    """Defect: the normalized value rounded to x's format, gamma and beta applied there."""
    dt = x.dtype
    xf = x.astype(F32)
    t = xf - _mean(xf)
    n = (t * (F32(1) / np.sqrt(_mean(t * t) + F32(eps)))).astype(dt)
    return _affine(n, gamma, beta, dt)


def unbiased(x, gamma=None, beta=None, eps=1e-5):
    """Defect: the unbiased variance (divided by d - 1) where layer norm uses the biased one."""
    xf = x.astype(F32)
    t = xf - _mean(xf)
    var = np.sum(t * t, axis=-1, keepdims=True, dtype=F32) / F32(x.shape[-1] - 1)
    return _affine(t * (F32(1) / np.sqrt(var + F32(eps))), gamma, beta, F32).astype(x.dtype)


def wrong_eps(x, gamma=None, beta=None, eps=1e-5):
    """Defect: another library's default, eps / 10 (1e-6 for 1e-5)."""
    return two_pass(x, gamma, beta, eps / 10)


#: Name -> kernel, the correct one first.
KERNELS = {
    "two-pass float32": two_pass,
    "one-pass variance": one_pass,
    "all in the input format": low_precision,
    "eps after rounding": eps_after_rounding,
    "affine in the input format": affine_in_input_format,
    "unbiased variance": unbiased,
    "eps / 10": wrong_eps,
}
