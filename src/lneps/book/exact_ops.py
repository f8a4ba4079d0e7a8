r"""Operations whose result is the exact value rounded once: the same bits on every machine.

A BLAS matrix product, ``np.linalg.norm`` or a SIMD ``np.exp`` gives results whose last bits
depend on the CPU, the BLAS kernel and its thread count, because they add in different orders
or approximate differently. The functions here return instead the exact result rounded once,
to nearest with ties to even, in a format (float16, bfloat16 or float32): a function of the
inputs alone. They are the arithmetic of the book's trained-network model (:mod:`lneps.book.minilm`).

How. Each result is first computed in float64 with a proven error bound :math:`\delta`, by
whatever fast path the machine has. If both ends of :math:`[\hat y-\delta, \hat y+\delta]`
round to the same number of the format, so does the exact value, because rounding is monotonic.
The few elements where they do not are settled exactly:

* :func:`matmul` (with an optional bias): the operands have at most 24 significand bits, so
  every product is exact in float64 and ``math.fsum`` gives the float64 nearest to their exact
  sum. If that float64 lies exactly on a rounding boundary of the format, the sign of the
  remainder (another ``fsum``) decides the side. The bound is
  :math:`2\gamma_{k+1}(\sum_i|a_ib_i| + |\beta|)`, which holds for any summation order, FMA or
  not, with :math:`\gamma_n = nu/(1-nu)` and :math:`u = 2^{-53}`; the factor 2 covers the
  rounding of the bound itself, a float32 product of the absolute values (non-negative terms,
  so within a relative :math:`k\,2^{-24} \le 1/256` of the exact one for the
  :math:`k \le 2^{16}` accepted, plus :math:`k\,2^{-148}` added for float32's underflow).
* :func:`exp` and :func:`gelu`: mpmath at increasing precision (Ziv's strategy) until the
  interval it returns rounds to one number. Their float64 bounds assume an ``exp`` within
  32 ulp and an ``erfc`` within a relative :math:`2^{-40}`, far looser than any libm or SIMD
  implementation.

An exact zero comes out as +0.0 (IEEE 754's sign for an exact zero sum); a nonzero value that
rounds to zero keeps its sign.

:func:`norm` and :func:`dot` are for float64 statistics of such results, for example the
cosine between two embeddings: products split exactly (Veltkamp/Dekker), summed exactly
(``math.fsum``), rounded once, so the same on every machine as well.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from .._checks import check_float_dtype
from ..error_free import split
from ..oracle import exact_format, round_rational
from ..formats import NARROW, round_to

__all__ = ["FORMATS", "matmul", "exp", "gelu", "gelu_float64", "fsum", "dot", "norm"]

U = 2.0 ** -53
TINY = 2.0 ** -1000  # absolute slack: above float64's underflow, far below any format's subnormals
EXP_REL = 2.0 ** -48  # 32 ulp of float64
GELU_REL = 2.0 ** -40
#: The formats whose products are exact in float64 (lneps.formats.NARROW), by name.
FORMATS = tuple(np.dtype(dt).name for dt in NARROW)
_NAMES = ", ".join(FORMATS[:-1]) + " or " + FORMATS[-1]


def _format(dtype) -> np.dtype:
    dt = check_float_dtype(dtype)
    if dt.name not in FORMATS:
        raise ValueError(f"dtype must be {_NAMES}; got {dt.name}")
    return dt


def _narrow(a, name: str) -> np.ndarray:
    """``a`` as float64, refused unless its values have at most 24 significand bits."""
    arr = np.asarray(a)
    if arr.dtype.name not in FORMATS:
        raise TypeError(f"{name} must be a {_NAMES} array (products of such "
                        f"numbers are exact in float64); got dtype {arr.dtype}")
    with np.errstate(invalid="ignore"):  # a bfloat16 NaN converts quietly
        return arr.astype(np.float64)


def _round_interval(lo: np.ndarray, hi: np.ndarray, dt: np.dtype):
    """The rounding to ``dt`` of every value in ``[lo, hi]`` where both ends round to the same
    number (rounding is monotonic), and where they do not: ``undecided``, bit for bit, so that
    signed zeros count as different. ``out`` holds ``lo``'s rounding there."""
    with np.errstate(over="ignore", invalid="ignore"):
        out = round_to(lo, dt)
        hi_r = round_to(hi, dt)
    bits = np.dtype(f"u{dt.itemsize}")
    undecided = (out.view(bits) != hi_r.view(bits)) | np.isnan(lo) | np.isnan(hi)
    return out, undecided


def _side(r: float, remainder: float) -> float:
    """The float64 to round in place of ``r`` = fl64(s) when ``remainder`` = s - r: ``r``
    itself if exact, else its neighbour toward s. Boundaries of a format of at most 24 bits are
    float64 numbers far apart, so only ``r`` itself can be one; the neighbour is on s's side."""
    if remainder == 0:
        return r
    return float(np.nextafter(r, math.inf if remainder > 0 else -math.inf))


def _exact_dot_rounded(a_row: np.ndarray, b_col: np.ndarray, bias: float, dt: np.dtype):
    terms = (a_row * b_col).tolist()  # exact: 24 + 24 significand bits
    terms.append(bias)
    r = math.fsum(terms)
    if r == 0.0:
        # every term is a multiple of 2**-298, so a nonzero exact sum is far above float64's
        # underflow: r == 0 means the exact sum is 0, whose IEEE sign is +0
        return 0.0
    return round_to(np.array([_side(r, math.fsum(terms + [-r]))]), dt)[0]


def matmul(a, b, dtype, bias=None) -> np.ndarray:
    r""":math:`a\,b + \beta` (``bias`` broadcast over the last axis), each element the exact value
    rounded once to ``dtype`` (float16, bfloat16 or float32), as an array of ``dtype``.

    ``a`` (..., n, k) and ``b`` (..., k, m) broadcast like ``np.matmul``; ``a``, ``b`` and
    ``bias`` must be float16, bfloat16 or float32 arrays. The result is the same on every
    machine, whatever its BLAS (module docstring).
    """
    dt = _format(dtype)
    a64, b64 = _narrow(a, "a"), _narrow(b, "b")
    if a64.ndim < 2 or b64.ndim < 2 or a64.shape[-1] != b64.shape[-2]:
        raise ValueError(f"matmul needs (..., n, k) and (..., k, m) arrays; got {a64.shape} and {b64.shape}")
    k = a64.shape[-1]
    if k > 1 << 16:
        raise ValueError(f"matmul sums at most 2**16 products per element; got {k}")
    c64 = np.zeros(b64.shape[-1]) if bias is None else _narrow(bias, "bias")
    if c64.shape != (b64.shape[-1],):
        raise ValueError(f"bias must have shape ({b64.shape[-1]},); got {c64.shape}")
    approx = np.matmul(a64, b64)
    approx += c64
    gamma = (k + 1) * U / (1 - (k + 1) * U)
    # sum |a_i b_i| in float32, half the cost of float64 (module docstring); each of its 2k
    # roundings may also lose up to 2**-150 where float32 underflows
    with np.errstate(under="ignore", over="ignore"):
        absolute = np.matmul(np.abs(np.asarray(a, np.float32)), np.abs(np.asarray(b, np.float32)))
    err = 2 * gamma * (absolute + k * 2.0 ** -148 + np.abs(c64)) + TINY
    out, undecided = _round_interval(approx - err, approx + err, dt)
    if undecided.any():
        a_b, b_b = np.broadcast_arrays(a64[..., :, None, :], np.swapaxes(b64, -1, -2)[..., None, :, :])
        for idx in zip(*np.nonzero(undecided)):
            out[idx] = _exact_dot_rounded(a_b[idx], b_b[idx], float(c64[idx[-1]]), dt)
    return out


def _fraction(v) -> Fraction:
    """An mpmath number (a binary float of any precision) as the exact rational it is."""
    sign, man, e, _ = v._mpf_
    return Fraction(-man if sign else man) * Fraction(2) ** e


def _round_by_mpmath(value_at, x: float, dt: np.dtype) -> float:
    """``value_at(x)`` (an mpmath function) correctly rounded to ``dt``: evaluated at 64, 128,
    ... bits, each time as an interval of a relative width of 2^-(bits - 8), until both ends
    round to the same number. mpmath's functions are accurate to a few ulp at their working
    precision; a transcendental value is never exactly a boundary, so this ends."""
    import mpmath

    fmt = exact_format(dt)
    for bits in (64, 128, 256, 512, 1024, 2048):
        with mpmath.workprec(bits):
            v = value_at(mpmath.mpf(x))
            slack = abs(v) * mpmath.mpf(2) ** (8 - bits)
            ends = (_fraction(v - slack), _fraction(v + slack))
        lo, hi = (round_rational(e, fmt) for e in ends)
        if math.copysign(1, lo) == math.copysign(1, hi) and lo == hi:
            return lo
    raise ArithmeticError(f"could not round {value_at} at {x!r} to {dt.name} at 2048 bits")


def _elementwise(x, dt, approx_fn, rel, exact_fn, *, positive: bool, limits):
    """``exact_fn`` at every element of ``x``, correctly rounded to ``dt``, for a function whose
    sign is known (positive everywhere, or x's sign) and whose limits at -inf, +inf are given."""
    x64 = _narrow(x, "x")
    finite = np.isfinite(x64)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        approx = np.where(finite, approx_fn(np.where(finite, x64, 0.0)), 0.0)
    # float64 overflows only far beyond every format's largest number: the result is then inf
    huge = np.isinf(approx)
    approx[huge] = np.copysign(np.finfo(np.float64).max, approx[huge])
    err = rel * np.abs(approx) + TINY
    with np.errstate(over="ignore"):
        lo, hi = approx - err, approx + err
    # The interval stays on the result's side of 0: where float64 underflows, both ends then
    # round to the same signed zero, with no evaluation at thousands of bits.
    sign = np.ones_like(x64) if positive else np.sign(np.where(x64 == 0, 1.0, x64))
    lo = np.where(sign > 0, np.maximum(lo, 0.0), lo)
    hi = np.where(sign < 0, np.minimum(hi, -0.0), hi)
    out, undecided = _round_interval(lo, hi, dt)
    out[undecided] = round_to(approx[undecided], dt)
    undecided &= finite
    for idx in zip(*np.nonzero(undecided)):
        out[idx] = _round_by_mpmath(exact_fn, float(x64[idx]), dt)
    below, above = limits
    out[x64 == -np.inf] = below
    out[x64 == np.inf] = above
    out[np.isnan(x64)] = np.nan
    return out


def exp(x, dtype) -> np.ndarray:
    """:math:`e^x` for a float16, bfloat16 or float32 array ``x``, correctly rounded to ``dtype``."""
    import mpmath

    return _elementwise(x, _format(dtype), np.exp, EXP_REL, mpmath.exp, positive=True,
                        limits=(0.0, np.inf))


_erfc = np.frompyfunc(math.erfc, 1, 1)


def gelu_float64(x64):
    """GELU of a float64 array in float64 (``math.erfc``), within a relative 2^-40."""
    return x64 * _erfc(x64 * -math.sqrt(0.5)).astype(np.float64) * 0.5


def _gelu_exact(x):
    import mpmath

    return x * mpmath.erfc(-x / mpmath.sqrt(2)) / 2


def gelu(x, dtype) -> np.ndarray:
    r"""GELU, :math:`x\,\Phi(x) = \tfrac x2 \operatorname{erfc}(-x/\sqrt2)` (the exact one,
    BERT's ``"gelu"``), for a float16, bfloat16 or float32 array ``x``, correctly rounded to
    ``dtype``. GELU(0) is +0; GELU(-inf) is -0, its limit."""
    out = _elementwise(x, _format(dtype), gelu_float64, GELU_REL, _gelu_exact, positive=False,
                       limits=(-0.0, np.inf))
    with np.errstate(invalid="ignore"):
        out[_narrow(x, "x") == 0] = 0  # exact zeros: +0 whatever x's sign
    return out


def fsum(x, axis: int = -1) -> np.ndarray:
    """The sum along ``axis`` of a float64 array, the exact value rounded once to float64
    (``math.fsum``, row by row): the same on every machine."""
    x64 = np.moveaxis(np.asarray(x, dtype=np.float64), axis, -1)
    flat = x64.reshape(-1, x64.shape[-1])
    return np.array([math.fsum(row) for row in flat.tolist()]).reshape(x64.shape[:-1])


def dot(a, b, axis: int = -1) -> np.ndarray:
    r""":math:`\sum_i a_i b_i` along ``axis`` for float64 arrays, the exact value rounded once to
    float64 (Dekker's exact products, ``math.fsum``): the same on every machine."""
    a64, b64 = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64))
    a64, b64 = np.moveaxis(a64, axis, -1), np.moveaxis(b64, axis, -1)
    if np.abs(a64).max(initial=0) >= 2.0 ** 995 or np.abs(b64).max(initial=0) >= 2.0 ** 995:
        raise ValueError("dot: entries of 2**995 or more would overflow the exact products")
    ah, al = split(a64)  # Veltkamp: halves of at most 26 bits, so their products are exact
    bh, bl = split(b64)
    return fsum(np.concatenate([ah * bh, ah * bl, al * bh, al * bl], axis=-1))


def norm(x, axis: int = -1) -> np.ndarray:
    r""":math:`\lVert x\rVert_2` along ``axis`` (float64): the square root of :func:`dot` of ``x``
    with itself, so within one ulp of the exact norm and the same on every machine."""
    return np.sqrt(dot(x, x, axis))
