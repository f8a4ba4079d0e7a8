"""lneps.book.exact_ops against exact arithmetic: Fractions for the products and sums, mpmath
at 300 bits for exp and GELU, and a rounding to the format written out here from the formats'
definitions (not lneps.oracle's)."""

import math
from fractions import Fraction

import ml_dtypes
import mpmath
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from lneps.book import exact_ops as cr

FORMATS = (np.float16, ml_dtypes.bfloat16, np.float32)
# significand bits p, smallest normal exponent, largest finite value
SPEC = {np.float16: (11, -14, 65504.0), ml_dtypes.bfloat16: (8, -126, 3.3895313892515355e38),
        np.float32: (24, -126, 3.4028234663852886e38)}


def round_to(value: Fraction, fmt) -> float:
    """Nearest number of the format to an exact rational, ties to even (IEEE 754 definitions)."""
    p, emin, largest = SPEC[fmt]
    if value == 0:
        return 0.0
    a = abs(value)
    e = math.floor(math.log2(a.numerator) - math.log2(a.denominator))
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    quantum = Fraction(2) ** (max(e, emin) - p + 1)
    n = a / quantum
    k = math.floor(n)
    if n - k > Fraction(1, 2) or (n - k == Fraction(1, 2) and k % 2 == 1):
        k += 1
    r = k * quantum
    if r > largest:
        return math.copysign(math.inf, value)
    return float(r) if value > 0 else -float(r)


def exact_matmul(a, b, bias, fmt):
    out = np.empty((a.shape[0], b.shape[1]))
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            s = sum(Fraction(float(a[i, k])) * Fraction(float(b[k, j])) for k in range(a.shape[1]))
            out[i, j] = round_to(s + (Fraction(float(bias[j])) if bias is not None else 0), fmt)
    return out


@pytest.mark.parametrize("fmt", FORMATS)
def test_matmul_is_the_exact_product_rounded_once(fmt):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((12, 300)).astype(fmt)
    b = rng.standard_normal((300, 9)).astype(fmt)
    bias = rng.standard_normal(9).astype(fmt)
    got = cr.matmul(a, b, fmt, bias=bias)
    assert got.dtype == np.dtype(fmt)
    np.testing.assert_array_equal(got.astype(np.float64), exact_matmul(a, b, bias, fmt))


def test_matmul_settles_sums_on_and_next_to_a_midpoint():
    one = np.float32(1)
    half_ulp = np.float32(2.0 ** -24)  # 1 + 2**-24 is the midpoint between 1 and its successor
    b = np.ones((3, 1), np.float32)
    cases = {  # (terms, expected): the float64 product alone cannot tell these apart
        (one, half_ulp, np.float32(0)): one,  # an exact tie: to even
        (one, half_ulp, np.float32(2.0 ** -70)): np.nextafter(one, np.float32(2)),  # just above
        (one, half_ulp, -np.float32(2.0 ** -70)): one,  # just below
        (np.nextafter(one, np.float32(2)), half_ulp, np.float32(0)):  # a tie to the even side
            np.float32(1 + 2.0 ** -22),
    }
    for terms, expected in cases.items():
        got = cr.matmul(np.array([terms], np.float32), b, np.float32)[0, 0]
        assert got == expected, terms


def test_matmul_batches_broadcast_like_numpy():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((2, 3, 4, 16)).astype(np.float32)
    b = rng.standard_normal((2, 3, 16, 5)).astype(np.float32)
    got = cr.matmul(a, b, np.float32)
    for i in range(2):
        for j in range(3):
            np.testing.assert_array_equal(got[i, j], exact_matmul(a[i, j], b[i, j], None, np.float32))


def test_exact_zero_is_positive_and_a_tiny_negative_keeps_its_sign():
    b = np.ones((2, 1), np.float32)
    zero = cr.matmul(np.float32([[-1.5, 1.5]]), b, np.float32)[0, 0]
    assert zero == 0 and math.copysign(1, zero) == 1
    tiny = cr.matmul(np.float32([[-2.0 ** -100, 0]]), np.float32([[2.0 ** -100], [1]]), np.float16)[0, 0]
    assert tiny == 0 and math.copysign(1, tiny) == -1


def test_matmul_does_not_depend_on_blas_threads():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((256, 384)).astype(np.float32)
    b = rng.standard_normal((384, 384)).astype(np.float32)
    with threadpool_limits(1, user_api="blas"):
        one = cr.matmul(a, b, np.float32)
    with threadpool_limits(2, user_api="blas"):
        two = cr.matmul(a, b, np.float32)
    np.testing.assert_array_equal(one, two)


@pytest.mark.parametrize("fmt", FORMATS)
def test_exp_and_gelu_against_mpmath(fmt):
    rng = np.random.default_rng(4)
    x = np.concatenate([rng.standard_normal(400) * 4, rng.uniform(-40, 12, 100)]).astype(fmt)
    e, g = cr.exp(x, fmt), cr.gelu(x, fmt)
    with mpmath.workprec(300):
        for xi, ei, gi in zip(x.astype(np.float64), e.astype(np.float64), g.astype(np.float64)):
            m = mpmath.mpf(float(xi))
            want_e = round_to(Fraction(*_ratio(mpmath.exp(m))), fmt)
            want_g = round_to(Fraction(*_ratio(m * mpmath.erfc(-m / mpmath.sqrt(2)) / 2)), fmt)
            assert ei == want_e and gi == want_g, xi
            assert math.copysign(1, gi) == math.copysign(1, xi) or xi == 0


def _ratio(v):
    sign, man, exp, _ = v._mpf_
    n = -man if sign else man
    return (n * 2**exp, 1) if exp >= 0 else (n, 2**-exp)


def test_every_float16_value_gelu_and_exp_limits():
    every = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    g = cr.gelu(every, np.float16)
    finite = np.isfinite(every)
    assert np.all(g[finite & (every > 0)] > 0) and np.all(g[every == 0] == 0)
    assert np.all(np.signbit(g[finite & (every < 0)]))  # negative, or -0 where it underflows
    np.testing.assert_array_equal(cr.gelu(np.float16([np.inf, -np.inf]), np.float16), [np.inf, -0.0])
    assert np.isnan(cr.gelu(np.float16([np.nan]), np.float16)).all()
    np.testing.assert_array_equal(cr.exp(np.float32([-np.inf, -200, 0, 89]), np.float32),
                                  [0, 0, 1, np.inf])


def test_fsum_dot_and_norm_are_the_exact_values_rounded_once():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((4, 500)) * np.exp2(rng.integers(-30, 30, (4, 500)))
    b = rng.standard_normal((4, 500))
    dots = cr.dot(a, b)
    for i in range(4):
        exact = sum(Fraction(float(p)) * Fraction(float(q)) for p, q in zip(a[i], b[i]))
        assert dots[i] == float(exact)  # Fraction -> float rounds to nearest, ties to even
        assert cr.fsum(a[i]) == float(sum(Fraction(float(p)) for p in a[i]))
    assert cr.norm(np.array([3.0, 4.0])) == 5.0


def test_bad_input_is_named():
    with pytest.raises(TypeError, match="float16, bfloat16 or float32"):
        cr.matmul(np.ones((2, 2)), np.ones((2, 2), np.float32), np.float32)
    with pytest.raises(ValueError, match="dtype must be"):
        cr.matmul(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32), np.float64)
    with pytest.raises(ValueError, match=r"\(\.\.\., n, k\)"):
        cr.matmul(np.ones((2, 3), np.float32), np.ones((2, 2), np.float32), np.float32)
    with pytest.raises(ValueError, match="bias must have shape"):
        cr.matmul(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32), np.float32,
                  bias=np.ones(3, np.float32))
    with pytest.raises(ValueError, match="2\\*\\*995"):
        cr.dot(np.array([1e300]), np.array([1.0]))


def test_results_below_float32s_range_are_rounded_from_the_exact_sum():
    # products that underflow in float32 (not in float64): 2**-75 * 2**-75 = 2**-150 is half the
    # smallest float32 subnormal, 2**-105 * 2**-105 = 2**-210 is lost in a float64 sum with it,
    # so the float64 product sits on the midpoint and only the exact sum decides: 2**-149
    b = np.full((2, 1), np.float32(2.0 ** -75))
    b[1, 0] = np.float32(2.0 ** -105)
    up = cr.matmul(np.array([[2.0 ** -75, 2.0 ** -105]], np.float32), b, np.float32)[0, 0]
    assert up == round_to(Fraction(2) ** -150 + Fraction(2) ** -210, np.float32) == np.float32(2.0 ** -149)
    down = cr.matmul(np.array([[2.0 ** -75, -(2.0 ** -105)]], np.float32), b, np.float32)[0, 0]
    assert down == 0 and math.copysign(1, down) == 1  # just below the midpoint: +0
