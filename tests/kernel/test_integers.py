"""lneps.kernel.integers, the exact integers under the correctly rounded gradients, against
rational arithmetic: rows become integers times a power of two exactly, and big integers and
square roots come back as float64 pairs within the bounds the docstrings state."""

import math
import random
from fractions import Fraction

import numpy as np

from lneps.kernel.integers import float_parts, product_parts, root_parts, scaled_integers

RNG = np.random.default_rng(20261202)


def rows_of_every_size(n=40, d=9):
    """Rows spanning the float64 range: normal, subnormal, huge, zeros, and a row of zeros."""
    a = RNG.normal(size=(n, d)) * 2.0 ** RNG.integers(-1060, 960,
                                                      size=(n, 1)) * 2.0 ** RNG.integers(-20, 20, size=(n, d))
    a[RNG.random((n, d)) < 0.2] = 0.0
    a[0] = 0.0
    a[1, :3] = [5e-324, -1e-320, 2.0**-1022]
    a[2, :2] = [1.7e308, -2.0**-1074]  # the largest magnitudes beside the smallest in one row
    assert np.isfinite(a).all()
    return a


def test_scaled_integers_are_the_rows_exactly():
    a = rows_of_every_size()
    X, e = scaled_integers(a)
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            assert Fraction(float(a[i, j])) == int(X[i, j]) * Fraction(2) ** int(e[i])
        ints = [int(v) for v in X[i]]
        # e is the row's lowest set bit: some integer of a nonzero row is odd
        assert any(v & 1 for v in ints) or not any(ints)
    assert int(e[0]) == 0 and all(int(v) == 0 for v in X[0])


def big_integers():
    r = random.Random(20261202)
    vals = [0, 1, -1, 2**53 + 1, -(2**64) + 3, 3**200]
    vals += [r.choice([-1, 1]) * r.getrandbits(r.randint(1, 1000)) for _ in range(300)]
    vals += [r.choice([-1, 1]) * r.getrandbits(r.randint(1025, 3000)) for _ in range(20)]  # beyond float64
    return vals


def test_float_parts_are_within_their_bounds():
    for chunk in (big_integers()[:-20], big_integers()):  # without and with values beyond 2^1024
        N = np.array(chunk, dtype=object)
        for with_low, bound in ((False, Fraction(1, 2**53)), (True, Fraction(1, 2**105))):
            mh, ml, e = float_parts(N, with_low)
            for k, v in enumerate(chunk):
                if v == 0:
                    assert mh[k] == 0
                    continue
                assert 0.5 <= abs(mh[k]) < 1
                got = (Fraction(float(mh[k])) + (Fraction(float(ml[k])) if with_low else 0)) * Fraction(2) ** int(e[k])
                assert abs(got - v) <= bound * abs(v), (v, with_low)


def test_product_parts_are_within_2_to_the_minus_105():
    g = RNG.normal(size=(6, 7)) * 2.0 ** RNG.integers(-60, 60, size=(6, 1))
    G, eg = scaled_integers(g)
    for tau in (np.array([[int(v) for v in row] for row in RNG.integers(-2**52, 2**52, size=(6, 7))], dtype=object),
                np.array([[random.Random(i * 7 + j).getrandbits(400) - 2**399 for j in range(7)] for i in range(6)],
                         dtype=object)):  # fits two_prod; does not
        mh, ml, e = product_parts(G, eg, g, tau)
        for i in range(6):
            for j in range(7):
                exact = int(G[i, j]) * int(tau[i, j])
                got = (Fraction(float(mh[i, j])) + Fraction(float(ml[i, j]))) * Fraction(2) ** int(e[i, j])
                assert abs(got - exact) <= abs(exact) * Fraction(1, 2**105)


def test_root_parts_are_within_2_to_the_minus_104():
    r = random.Random(7)
    cases = [(1, 1), (2, 1), (1, 3), (10**40, 7), (5, 10**60)]
    cases += [(r.getrandbits(r.randint(1, 700)) | 1, r.getrandbits(r.randint(1, 700)) | 1) for _ in range(200)]
    for num, den in cases:
        h, lo, e = root_parts(num, den)
        assert 0.5 <= h < 1
        v = (Fraction(h) + Fraction(lo)) * Fraction(2) ** e
        # |v - sqrt(q)| <= delta sqrt(q) gives |v^2/q - 1| <= 2 delta + delta^2
        delta = Fraction(1, 2**104)
        assert abs(v * v / Fraction(num, den) - 1) <= 2 * delta + delta * delta, (num, den)
        assert math.isfinite(lo)
