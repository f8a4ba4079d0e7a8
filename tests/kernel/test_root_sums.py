"""lneps.kernel.root_sums: the square classes its exact dγ columns rely on. Two sigmas whose
product is a perfect square must share a bucket key (else a rational column would not be
recognized as one); the columns themselves are judged bit for bit in test_gradients.py."""

import random
from math import isqrt

from lneps.kernel.root_sums import _class_key


def test_sigmas_of_one_square_class_share_a_key():
    r = random.Random(20261202)
    for _ in range(300):
        core = r.getrandbits(r.randint(1, 120)) | 1
        a, b = (core * r.randint(1, 10**12) ** 2 * r.choice([1, 4, 9, 49, 199**2]) for _ in range(2))
        assert isqrt(a * b) ** 2 == a * b
        assert _class_key(a)[0] == _class_key(b)[0], (a, b)


def test_the_key_separates_small_prime_parities():
    # 2 and 8 (= 2 * 4) share a class; 2 and 4 do not (4 is a square, 2 is not)
    assert _class_key(2)[0] == _class_key(8)[0]
    assert _class_key(2)[0] != _class_key(4)[0]
    assert _class_key(3 * 5)[0] != _class_key(3 * 7)[0]
