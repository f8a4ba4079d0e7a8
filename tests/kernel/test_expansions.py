"""lneps.kernel.expansions: the error-free transformations are exact (checked in rationals), and the pairwise
double-double sum stays within the bound it reports."""

from fractions import Fraction

import numpy as np

from lneps.kernel import expansions as dd


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


def test_dd_mul_is_within_2_to_the_minus_102():
    rng = np.random.default_rng(3)
    n = 5000
    ah = rng.choice([-1.0, 1.0], n) * rng.uniform(0.5, 1, n) * 2.0 ** rng.integers(-300, 300, n)
    bh = rng.uniform(0.5, 1, n) * 2.0 ** rng.integers(-300, 300, n)
    al = ah * rng.uniform(-1, 1, n) * 2.0**-53  # normalized pairs: |al| within half an ulp of ah
    bl = bh * rng.uniform(-1, 1, n) * 2.0**-53
    p, e = dd.dd_mul(ah, al, bh, bl)
    for a1, a2, b1, b2, q, r in zip(fr(ah), fr(al), fr(bh), fr(bl), fr(p), fr(e)):
        exact = (a1 + a2) * (b1 + b2)
        assert abs(q + r - exact) <= abs(exact) * Fraction(1, 2**102)


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


def test_split_and_two_prod_split_are_exact():
    rng = np.random.default_rng(4)
    a, b = rng.normal(size=3000) * 10.0 ** rng.integers(-50, 50, 3000), rng.normal(size=3000)
    ah, al = dd.split(a)
    assert all(Fraction(float(h)) + Fraction(float(l)) == x for h, l, x in zip(ah, al, fr(a)))
    p, e = dd.two_prod_split(a, ah, al, b, *dd.split(b))
    assert np.array_equal(p, a * b)
    assert all(x * y == u + v for x, y, u, v in zip(fr(a), fr(b), fr(p), fr(e)))
    # lo == 0 exactly for numbers of at most 26 significant bits: their squares are exact
    short = np.array([3.0, 2.0**40 + 1, (2**26 - 1) * 2.0**-30, 2.0**26 + 1])
    assert list(dd.split(short)[1] == 0) == [True, False, True, False]


def test_quantum_sum_is_exact_in_its_high_part_and_within_its_bound():
    rng = np.random.default_rng(5)
    for m in (1, 7, 64, 1000, 4096):
        a = rng.normal(size=(6, m)) * 10.0 ** rng.integers(-30, 30, (6, 1)) + 10.0 ** rng.integers(-5, 5, (6, 1))
        a[0] = 1 + np.arange(m) * 2.0**-52  # long exact runs
        H, L, bound = dd.quantum_sum(a)
        for k in range(6):
            exact = sum(fr(a[k]))
            assert abs(Fraction(float(H[k])) + Fraction(float(L[k])) - exact) <= Fraction(float(bound[k]))
        assert bound[0] < 2.0**-60 * m  # about m^2.5 2^-105 max|a|


def test_blocked_sum_reports_its_rounding_depth():
    a = np.ones((2, 4096))
    s, n = dd.blocked_sum(a)
    assert list(s) == [4096.0, 4096.0] and n == 64 + 64 - 2
    s, n = dd.blocked_sum(np.ones((1, 10)))
    assert s[0] == 10.0 and n == 9


def test_expansion_sign_is_exact():
    rng = np.random.default_rng(6)
    a = rng.normal(size=2000) * 10.0 ** rng.integers(-20, 20, 2000)
    b = rng.normal(size=2000)
    p, e = dd.two_prod(a, b)
    # a b - p - e = 0 exactly; nudging by the smallest amounts flips the sign
    assert (dd.expansion_sign([p, e, -p, -e, a * 0]) == 0).all()
    tiny = np.ldexp(1.0, -1000) * np.sign(rng.normal(size=2000))
    got = dd.expansion_sign([p, e, -p - 0.0, -e, tiny, 1e300 * (tiny * 0)])
    assert (got == np.sign(tiny)).all()
    big = dd.expansion_sign([np.full(3, 1e300), np.full(3, 1.0), np.full(3, -1e300), np.array([-1.0, -2.0, 0.0])])
    assert list(big) == [0, -1, 1]
