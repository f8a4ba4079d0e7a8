"""lneps.oracle judged from first principles: exhaustive search over a format's numbers,
mpmath at 300 digits, exact ties built by hand, and the two ways into the oracle agreeing."""

from fractions import Fraction
from functools import cache

import ml_dtypes
import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lneps import oracle

F16, BF16, F32, F64 = np.float16, ml_dtypes.bfloat16, np.float32, np.float64
FMT = {name: oracle.exact_format(dt) for name, dt in [("f16", F16), ("bf16", BF16), ("f32", F32), ("f64", F64)]}


@cache
def every_number(dtype):
    """All finite numbers of a 16-bit format, sorted, as Fractions."""
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    with np.errstate(invalid="ignore"):  # the NaN patterns
        values = bits.view(dtype).astype(np.float64)
    return sorted({Fraction(float(v)) for v in values if np.isfinite(v)})


def nearest_by_search(v: Fraction, grid, largest: Fraction, top_spacing: Fraction):
    """The nearest grid number by bisection, ties to the even significand, overflow to inf."""
    if abs(v) >= largest + top_spacing / 2:
        return float("inf") if v > 0 else float("-inf")
    lo, hi = 0, len(grid) - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if grid[mid] <= v else (lo, mid)
    a, b = grid[lo], grid[hi]
    if abs(v - a) != abs(v - b):
        return float(a if abs(v - a) < abs(v - b) else b)
    return None  # an exact tie: checked separately


@pytest.mark.parametrize("name,dtype", [("f16", F16), ("bf16", BF16)])
def test_round_rational_is_the_nearest_of_every_number_in_the_format(name, dtype):
    grid = every_number(dtype)
    fmt = FMT[name]
    top = Fraction(2) ** (fmt.emax - fmt.p + 1)
    rng = np.random.default_rng(90)
    # Random rationals at every scale, and the midpoints between neighbours nudged both ways.
    values = [Fraction(int(n), int(dd)) * Fraction(2) ** int(e)
              for n, dd, e in zip(rng.integers(-10**9, 10**9, 3000), rng.integers(1, 10**9, 3000),
                                  rng.integers(fmt.emin - fmt.p - 3, fmt.emax + 2, 3000))]
    picks = rng.integers(0, len(grid) - 1, 3000)
    nudge = Fraction(1, 2**80)
    for k in picks:
        mid = (grid[k] + grid[k + 1]) / 2
        values += [mid + nudge * abs(mid), mid - nudge * abs(mid)]
    for v in values:
        want = nearest_by_search(v, grid, fmt.largest, top)
        assert want is not None
        assert oracle.round_rational(v, fmt) == want, v


@pytest.mark.parametrize("name,dtype", [("f16", F16), ("bf16", BF16)])
def test_exact_ties_go_to_the_even_neighbour(name, dtype):
    grid = every_number(dtype)
    fmt = FMT[name]
    for k in np.random.default_rng(91).integers(0, len(grid) - 1, 2000):
        a, b = grid[k], grid[k + 1]
        got = oracle.round_rational((a + b) / 2, fmt)
        even = [c for c in (a, b) if oracle._is_even(float(c), fmt)]
        assert len(even) == 1 and got == float(even[0])
    # The midpoint above the largest number rounds to inf (the largest is odd).
    top = Fraction(2) ** (fmt.emax - fmt.p + 1)
    assert oracle.round_rational(fmt.largest + top / 2, fmt) == np.inf
    assert oracle.round_rational(-(fmt.largest + top / 2), fmt) == -np.inf
    assert oracle.round_rational(fmt.largest + top / 2 - Fraction(1, 2**200), fmt) == float(fmt.largest)


def test_round_rational_agrees_with_numpys_own_float64_to_float32_and_float16():
    # NumPy's conversions are independent implementations of round to nearest, ties to even.
    rng = np.random.default_rng(92)
    x = np.concatenate([rng.normal(size=20000) * 10.0 ** rng.integers(-45, 39, 20000),
                        rng.normal(size=5000) * 1e-6])
    for dt, fmt in ((F32, FMT["f32"]), (F16, FMT["f16"])):
        with np.errstate(over="ignore"):
            want = x.astype(dt).astype(F64)
        got = np.array([oracle.round_rational(Fraction(float(v)), fmt) for v in x])
        assert np.array_equal(got, want)
        assert np.array_equal(oracle.round_float64(x, dt), want)


def test_round_float64_repairs_what_ml_dtypes_double_rounds():
    # 1 + 2^-8 + 2^-30 is above bfloat16's midpoint 1 + 2^-8; through float32 it lands on it.
    v = 1 + 2.0**-8 + 2.0**-30
    assert float(np.float64(v).astype(BF16)) == 1.0  # ml_dtypes: rounded twice
    assert oracle.round_float64(np.array([v]), BF16)[0] == 1.0078125
    assert oracle.round_rational(Fraction(v), FMT["bf16"]) == 1.0078125


def mp_quotient(a: Fraction, s: Fraction, b: Fraction):
    with mpmath.workdps(300):
        return mpmath.mpf(a.numerator) / a.denominator / mpmath.sqrt(mpmath.mpf(s.numerator) / s.denominator) \
            + mpmath.mpf(b.numerator) / b.denominator


@pytest.mark.parametrize("name", ["f16", "bf16", "f32", "f64"])
def test_round_quotient_agrees_with_300_digits(name):
    fmt = FMT[name]
    rng = np.random.default_rng(93)
    for _ in range(400):
        a = Fraction(int(rng.integers(-10**12, 10**12)), int(rng.integers(1, 10**6)))
        s = Fraction(int(rng.integers(1, 10**12)), int(rng.integers(1, 10**12)))
        b = Fraction(int(rng.integers(-10**6, 10**6)),
                     int(rng.integers(1, 10**6))) if rng.random() < 0.5 else Fraction(0)
        exact = mp_quotient(a, s, b)
        with mpmath.workdps(300):
            want = oracle.round_rational(Fraction(int(mpmath.floor(exact * 2**900)), 2**900), fmt)
        assert oracle.round_quotient(a, s, b, fmt) == want


def test_round_quotient_decides_exact_ties_by_squares():
    bf = FMT["bf16"]
    # sqrt(9/4) = 3/2 exactly: 3 / (3/2) + b = 2 + b. bfloat16 is 1/64 apart in [2, 4), so
    # b = 1/128 puts the value on the midpoint between 2 (even) and 2.015625 (odd).
    assert oracle.round_quotient(3, Fraction(9, 4), Fraction(1, 128), bf) == 2.0  # tie -> even
    assert oracle.round_quotient(3, Fraction(9, 4), Fraction(1, 128) + Fraction(1, 2**60), bf) == 2.015625
    assert oracle.round_quotient(3, Fraction(9, 4), Fraction(1, 128) - Fraction(1, 2**60), bf) == 2.0
    # The next midpoint has the odd neighbour below: 2 + 3/128 goes up to 2.03125.
    assert oracle.round_quotient(3, Fraction(9, 4), Fraction(3, 128), bf) == 2.03125
    # Not a tie, but within 2^-200 of one: only the exact comparison can tell.
    near = Fraction(1, 128) + Fraction(1, 2**200)
    assert oracle.round_quotient(-3, Fraction(9, 4), -near, bf) == -2.015625
    assert np.isnan(oracle.round_quotient(0, 0, 0, bf))
    assert oracle.round_quotient(1, 0, 0, bf) == np.inf


def test_the_issues_reproducers():
    x = np.array([-0.041259765625, 2.171875, 1.765625], dtype=BF16)
    assert oracle.layer_norm_exact(x, eps=1e-5)[2] == 0.486328125
    assert oracle.layer_norm_exact(np.array([-1, 1], dtype=BF16), beta=2**-8 + 2**-30, eps=0.0)[1] == 1.0078125
    y = oracle.layer_norm_exact(np.float32([59988.21484375, 60000.0, 60011.7890625]), eps=1e-5)
    assert np.float32(y[1]) == np.float32(-1.3529354e-4)
    x = np.float32([1e20, 1, -1e20, 3, 5, 7, 2, 4])
    with mpmath.workdps(60):
        xs = [mpmath.mpf(float(v)) for v in x]
        mu = mpmath.fsum(xs) / 8
        sd = mpmath.sqrt(mpmath.fsum((v - mu) ** 2 for v in xs) / 8 + mpmath.mpf(1e-5))
        want = [float(np.float32(float((v - mu) / sd))) for v in xs]
    assert list(oracle.layer_norm_exact(x, eps=1e-5)) == want


@pytest.mark.parametrize("dt", [F16, BF16, F32, F64])
def test_the_vectorized_oracle_equals_the_elementwise_one(dt):
    rng = np.random.default_rng(94)
    x = np.concatenate([rng.normal(6e4 if dt != F16 else 6e3, 8, size=(3, 13)),
                        rng.normal(0, 1e-3, size=(3, 13)), np.full((1, 13), 7.0)]).astype(dt)
    g, b = rng.normal(1, 0.3, 13), rng.normal(0, 0.3, 13)
    for kw in ({}, {"gamma": g}, {"gamma": g, "beta": b}):
        np.testing.assert_array_equal(oracle.layer_norm_rounded(x, eps=1e-5, **kw),
                                      oracle.layer_norm_exact(x, eps=1e-5, **kw))
    np.testing.assert_array_equal(oracle.rms_norm_rounded(x, g, eps=1e-6), oracle.rms_norm_exact(x, g, eps=1e-6))


def test_value_bounds_hold_against_100_digits():
    rng = np.random.default_rng(95)
    x = np.concatenate([rng.normal(1000, 1, size=(4, 50)), rng.normal(0, 300, size=(4, 50))]).astype(F32)
    g, b = rng.normal(1, 0.3, 50), rng.normal(0, 0.3, 50)
    value, bound = oracle.layer_norm_value(x, g, b, eps=1e-5)
    with mpmath.workdps(100):
        for i, row in enumerate(x):
            xs = [mpmath.mpf(float(v)) for v in row]
            mu = mpmath.fsum(xs) / len(xs)
            sd = mpmath.sqrt(mpmath.fsum((v - mu) ** 2 for v in xs) / len(xs) + mpmath.mpf(1e-5))
            for j, v in enumerate(xs):
                exact = mpmath.mpf(float(g[j])) * (v - mu) / sd + mpmath.mpf(float(b[j]))
                assert abs(mpmath.mpf(float(value[i, j])) - exact) <= bound[i, j]
    assert np.all(bound <= 16 * 2.0**-53 * (np.abs(value) + 1))


def test_constant_rows_and_eps_zero():
    x = np.full((2, 5), 3.0, dtype=F16)
    assert np.all(oracle.layer_norm_rounded(x, eps=1e-5) == 0)
    assert np.all(np.isnan(oracle.layer_norm_rounded(x, eps=0.0)))
    assert np.all(oracle.layer_norm_rounded(x, beta=0.25, eps=1e-5) == 0.25)


def test_bad_input():
    with pytest.raises(ValueError, match="finite"):
        oracle.layer_norm_rounded(np.array([1.0, np.nan]), eps=1e-5)
    with pytest.raises(ValueError, match="broadcast"):
        oracle.layer_norm_rounded(np.ones((2, 3)), gamma=np.ones(4), eps=1e-5)
    with pytest.raises(ValueError, match="s must be"):
        oracle.round_quotient(1, -1, 0, FMT["f16"])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-1e4, 1e4, width=16), min_size=2, max_size=9),
       st.floats(0, 1, allow_subnormal=False))
def test_hypothesis_both_ways_in_agree(values, eps):
    x = np.array(values, dtype=F16)
    np.testing.assert_array_equal(oracle.layer_norm_rounded(x, eps=eps), oracle.layer_norm_exact(x, eps=eps))


def test_round_quotient_gives_an_exact_zero_plus_and_a_rounded_one_its_sign():
    f32 = FMT["f32"]
    # 2/sqrt(4) - 1 = 0 exactly: +0, whichever sign the parts have
    for a, b in ((2, -1), (-2, 1)):
        z = oracle.round_quotient(Fraction(a), Fraction(4), Fraction(b), f32)
        assert z == 0 and not np.signbit(z)
    # 1/sqrt(1 + 2^-60) - 1 is a tiny negative number: -0 in float16, itself in float32
    s = 1 + Fraction(1, 2**60)
    z = oracle.round_quotient(Fraction(1), s, Fraction(-1), FMT["f16"])
    assert z == 0 and np.signbit(z)
    assert -(2.0**-61) * 1.01 < oracle.round_quotient(Fraction(1), s, Fraction(-1), f32) < 0
    assert oracle.round_quotient(Fraction(0), Fraction(3), Fraction(-0.0), f32) == 0
    row = oracle.layer_norm_exact(np.array([1.0, 1, 1, 3, 3, 3]), np.full(6, 1.25), np.full(6, -1.25), eps=0.0)
    assert list(row) == [-2.5] * 3 + [0.0] * 3 and not np.signbit(row[3:]).any()
