"""lneps.dd: the error-free transformations are exact (checked in rationals), and the pairwise
double-double sum stays within the bound it reports."""

from fractions import Fraction

import numpy as np

from lneps import dd


def fr(a):
    return [Fraction(float(v)) for v in np.ravel(a)]


def samples(rng, n):
    return rng.normal(size=n) * 10.0 ** rng.integers(-150, 150, n)


def test_two_sum_is_exact():
    rng = np.random.default_rng(1)
    a, b = samples(rng, 5000), samples(rng, 5000)
    b[:100] = -a[:100] * (1 + 2.0**-40)  # near cancellation
    s, e = dd.two_sum(a, b)
    assert np.array_equal(s, a + b)
    assert all(x + y == p + q for x, y, p, q in zip(fr(a), fr(b), fr(s), fr(e)))


def test_two_prod_is_exact():
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=5000) * 10.0 ** rng.integers(-100, 100, 5000), rng.normal(size=5000) * 1e3
    p, e = dd.two_prod(a, b)
    assert np.array_equal(p, a * b)
    assert all(x * y == u + v for x, y, u, v in zip(fr(a), fr(b), fr(p), fr(e)))


def test_pairwise_sum_is_within_its_bound():
    rng = np.random.default_rng(3)
    for n in (1, 2, 3, 7, 100, 1000, 4095):
        hi = rng.normal(size=(5, n)) * 10.0 ** rng.integers(-20, 20, (5, n))
        lo = hi * 2.0**-60 * rng.normal(size=(5, n))
        s, e, bound = dd.pairwise_sum(hi, lo)
        for k in range(5):
            exact = sum(fr(hi[k])) + sum(fr(lo[k]))
            assert abs(Fraction(float(s[k])) + Fraction(float(e[k])) - exact) <= Fraction(float(bound[k]))


def test_pairwise_sum_of_exact_partial_sums_has_no_error_and_a_zero_bound():
    x = np.arange(1.0, 1001.0)[None, :]
    s, e, bound = dd.pairwise_sum(x)
    assert s[0] == 500500.0 and e[0] == 0.0 and bound[0] == 0.0
