"""lneps.kernel.rounding: to_format is round to nearest, ties to even, from float64 (checked against
the oracle's first-principles rounding), and near_boundary never clears an interval that holds
a rounding boundary."""

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from lneps import oracle
from lneps.kernel import expansions as dd
from lneps.formats import to_format
from lneps.kernel.rounding import decide_float64, near_boundary, round_pair

F16, BF16, F32, F64 = np.float16, ml_dtypes.bfloat16, np.float32, np.float64
LOW = [F16, BF16, F32]


def midpoints(dt, rng, n):
    """Random midpoints between neighbouring numbers of dt, as float64 (exact): half a spacing
    away from 0 beyond a number (so always inside its binade)."""
    fmt = oracle.exact_format(dt)
    r = oracle.round_float64(rng.normal(size=n) * 10.0 ** rng.integers(-6, 5, n), dt)
    _, ex = np.frexp(np.abs(r))
    ex = np.where(r == 0, fmt.emin + 1, ex)  # frexp(0) says 0: zero's neighbours are subnormal
    spacing = np.ldexp(1.0, np.maximum(ex - 1, fmt.emin) - fmt.p + 1)
    return np.copysign(np.abs(r) + 0.5 * spacing, r)


@pytest.mark.parametrize("dt", LOW, ids=lambda d: np.dtype(d).name)
def test_to_format_is_round_to_nearest_even(dt):
    rng = np.random.default_rng(11)
    fi = ml_dtypes.finfo(dt)
    m = midpoints(dt, rng, 20000)
    y = np.concatenate([
        rng.normal(size=20000) * 10.0 ** rng.integers(-40, 39, 20000),
        m, np.nextafter(m, np.inf), np.nextafter(m, -np.inf),
        m * (1 + 2.0**-30), m * (1 - 2.0**-30),  # what float32 rounds onto a bfloat16 midpoint
        [float(fi.max) * (1 + 2.0**-(int(fi.nmant) + 2)), float(fi.smallest_subnormal) / 2, 0.0, -0.0],
    ])
    with np.errstate(over="ignore"):
        got = to_format(y, dt).astype(F64)
    assert np.array_equal(got, oracle.round_float64(y, dt))


def test_ml_dtypes_alone_double_rounds_and_to_format_does_not():
    m = midpoints(BF16, np.random.default_rng(12), 5000)
    above = m * (1 + 2.0**-30)
    wrong = above.astype(BF16).astype(F64) != oracle.round_float64(above, BF16)
    assert wrong.mean() > 0.3  # about half of them: the ties that go down
    assert np.array_equal(to_format(above, BF16).astype(F64), oracle.round_float64(above, BF16))


@pytest.mark.parametrize("dt", LOW, ids=lambda d: np.dtype(d).name)
def test_near_boundary_never_clears_an_interval_holding_a_boundary(dt):
    rng = np.random.default_rng(13)
    fmt = oracle.exact_format(dt)
    m = midpoints(dt, rng, 3000)
    # Values at, near and far from midpoints, powers of two, subnormals and zero.
    y = np.concatenate([m, m * (1 + 2.0**-45), m * (1 - 2.0**-40), rng.normal(size=3000),
                        2.0 ** rng.integers(-30, 10, 300).astype(F64),
                        rng.normal(size=300) * float(ml_dtypes.finfo(dt).smallest_normal), [0.0]])
    for rel in (2.0**-60, 2.0**-50, 2.0**-44, 2.0**-30):
        flag = near_boundary(y, dt, rel=rel)
        for v, f in zip(y, flag):
            if f:
                continue
            half = abs(Fraction(float(v))) * Fraction(rel)
            lo = oracle.round_rational(Fraction(float(v)) - half, fmt)
            hi = oracle.round_rational(Fraction(float(v)) + half, fmt)
            assert lo == hi, (v, rel)
    assert near_boundary(m, dt, rel=2.0**-60).all()  # a midpoint with any bound is flagged


def test_near_boundary_with_absolute_bounds_and_non_finite_values():
    y = np.array([1.0, 1.0 + 2.0**-11, np.nan, np.inf, 0.0, 0.0, 0.0, -2.0**-30, 2.0**-30])
    delta = np.array([2.0**-40, 2.0**-40, 0.0, 0.0, 2.0**-30, 2.0**-24, 0.0, 2.0**-31, 2.0**-29])
    flag = near_boundary(y, F16, delta=delta)
    # 1 + 2^-11 is float16's midpoint above 1; 0 with any bound may be a tiny negative or
    # positive value (-0 or +0): flagged; 0 with bound 0 is an exact zero; -2^-30 within 2^-31
    # is surely negative (-0); 2^-30 within 2^-29 may be either.
    assert list(flag) == [False, True, True, True, True, True, False, False, True]


@pytest.mark.parametrize("dt", LOW + [F64], ids=lambda d: np.dtype(d).name)
def test_round_pair_rounds_an_exact_sum_of_two_floats(dt):
    rng = np.random.default_rng(14)
    m = midpoints(dt, rng, 2000) if dt != F64 else 1 + rng.integers(1, 2**20, 2000) * 2.0**-52
    tails = np.array([0.0, 2.0**-80, -(2.0**-80)])
    for tail in tails:
        h, l = dd.two_sum(m, np.full(m.shape, tail) * np.abs(m))
        got = round_pair(h, l, dt)
        want = [oracle.round_rational(Fraction(float(a)) + Fraction(float(b)), oracle.exact_format(dt)) for a,
                b in zip(h, l)]
        assert np.array_equal(got, np.array(want)), tail
    fi = ml_dtypes.finfo(dt)
    if dt != F64:
        top = float(fi.max) + 2.0 ** (int(fi.maxexp) - 2 - int(fi.nmant))  # the overflow threshold
        got = round_pair(np.array([top, top, top, -top]), np.array([0.0, -(2.0**-200), 2.0**-200, 2.0**-200]), dt)
        assert list(got) == [np.inf, float(fi.max), np.inf, -float(fi.max)]
    q = float(fi.smallest_subnormal)
    got = round_pair(np.array([q / 2, q / 2, -q / 2, -q / 2, 0.0, -0.0]), np.array([0.0, 2.0**-1074 * (dt != F64), 0.0,
                                                                                    0.0, 0.0, 0.0]), dt)
    if dt != F64:
        assert list(got) == [0.0, q, 0.0, 0.0, 0.0, 0.0]
        assert list(np.signbit(got)) == [False, False, True, True, False, False]  # exact 0: +0


def test_decide_float64_flags_midpoints_zero_and_what_it_cannot_see():
    h = np.array([1.5, 1.5, 1.5, 1.0, 0.0, 0.0, np.inf, 2.0**-1070, 3.0])
    l = np.array([0.0, 2.0**-53 - 2.0**-80, 2.0**-60, 0.0, 0.0, 0.0, 0.0, 0.0, 2.0**-60])
    delta = np.array([2.0**-70, 2.0**-70, 2.0**-70, 0.0, 0.0, 2.0**-90, 0.0, 0.0, 2.0**-52])
    with np.errstate(invalid="ignore"):
        y, flags = decide_float64(h, l, delta)
    # 1.5 + (ulp/2 - tiny) is within 2^-70 of the midpoint above 1.5; powers of two, zeros,
    # infinities and subnormals are left to the exact tier, and so is a bound past the midpoint
    assert list(flags) == [False, True, False, True, True, True, True, True, True]
    assert y[0] == 1.5 and y[2] == 1.5
