"""lneps.rounding: to_format is round to nearest, ties to even, from float64 (checked against
the oracle's first-principles rounding), and near_boundary never clears an interval that holds
a rounding boundary."""

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from lneps import oracle
from lneps.rounding import near_boundary, to_format

F16, BF16, F32, F64 = np.float16, ml_dtypes.bfloat16, np.float32, np.float64
LOW = [F16, BF16, F32]


def midpoints(dt, rng, n):
    """Random midpoints between neighbouring numbers of dt, as float64 (exact): half a spacing
    away from 0 beyond a number (so always inside its binade)."""
    fmt = oracle.format_of(dt)
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
    fmt = oracle.format_of(dt)
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
    y = np.array([1.0, 1.0 + 2.0**-11, np.nan, np.inf, 0.0, 0.0])
    delta = np.array([2.0**-40, 2.0**-40, 0.0, 0.0, 2.0**-30, 2.0**-24])
    flag = near_boundary(y, F16, delta=delta)
    # 1 + 2^-11 is float16's midpoint above 1; 0 with a bound above half the smallest
    # subnormal (2^-25) straddles the boundary to 2^-24.
    assert list(flag) == [False, True, True, True, False, True]
