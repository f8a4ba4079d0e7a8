"""lneps.kernel.surd, the kernel's own exact rounding of a/sqrt(s) + b, against the oracle's
round_quotient (and, on a sample, tests/judge.py's round_exact): random rationals, and values
put on purpose on or within a hair of midpoints, at exact ties, in the subnormals, next to the
overflow threshold, across powers of two, and in deep cancellation."""

import ast
import math
import random
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from lneps import oracle
from lneps.formats import Format, format_of
from lneps.kernel.surd import round_surd

DTYPES = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64]
IDS = ["float16", "bfloat16", "float32", "float64"]


def same(got, want):
    """Equal, zeros of the same sign, or both NaN."""
    if math.isnan(want):
        return math.isnan(got)
    return got == want and math.copysign(1, got) == math.copysign(1, want)


def agree(cases, dt):
    """round_surd against oracle.round_quotient on (a, s, b) triples; returns how many."""
    ours, theirs = format_of(dt), oracle.exact_format(dt)
    for a, s, b in cases:
        got, want = round_surd(a, s, b, ours), oracle.round_quotient(a, s, b, theirs)
        assert same(got, want), (a, s, b, got, want)
    return len(cases)


def neighbours(fmt: Format, rng: random.Random, top: int):
    """A random positive format number r below 2^top and the one above it, as Fractions."""
    e = rng.randint(fmt.emin - fmt.p, top)  # subnormals too
    E = max(e, fmt.emin) - fmt.p + 1
    n = rng.randint(1 << (fmt.p - 1), (1 << fmt.p) - 1) if e >= fmt.emin else rng.randint(0, (1 << (fmt.p - 1)) - 1)
    q = Fraction(2) ** E
    return n * q, (n + 1) * q


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_random_rationals(dt):
    rng = random.Random(20240611)
    f = format_of(dt)
    span = f.emax + 10  # past the overflow threshold and below the subnormals
    cases = []
    for _ in range(1500):
        a = Fraction(rng.uniform(-1, 1)) * Fraction(2) ** rng.randint(-span, span)
        s = Fraction(rng.randint(1, 10**9), rng.randint(1, 10**9)) * Fraction(2) ** rng.randint(-2 * span, 2 * span)
        b = rng.choice([0, Fraction(rng.uniform(-1, 1)) * Fraction(2) ** rng.randint(-span, span)])
        cases.append((a, s, b))
    assert agree(cases, dt) == 1500


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_exact_ties_and_values_a_hair_from_a_midpoint(dt):
    # s = sigma^2 with rational sigma: a/sqrt(s) = a/sigma is rational and b puts y exactly on
    # the midpoint of two neighbours (a tie: to the even one), or 2^-200 of it off either side.
    rng = random.Random(7)
    f = format_of(dt)
    cases = []
    for _ in range(300):
        lo, hi = neighbours(f, rng, f.emax - 1)
        mid = (lo + hi) / 2
        sigma = Fraction(rng.randint(1, 10**6), rng.randint(1, 10**6))
        a = Fraction(rng.randint(-10**6, 10**6), rng.randint(1, 1000))
        sign = rng.choice([-1, 1])
        for off in (0, Fraction(1, 2**200) * mid, -Fraction(1, 2**200) * mid):
            cases.append((a, sigma * sigma, sign * (mid + off) - a / sigma))
            cases.append((sign * (mid + off) * sigma, sigma * sigma, 0))  # b = 0: y = a / sigma
    assert agree(cases, dt) == 1800
    # ties go to even: 2 + 2^-7 lies between bfloat16's 2 and 2.015625 (odd), so it goes to 2
    bf = format_of(ml_dtypes.bfloat16)
    assert round_surd(3, Fraction(9, 4), Fraction(1, 128), bf) == 2.0
    assert round_surd(3, Fraction(9, 4), Fraction(3, 128), bf) == 2.03125  # 2.0234375: up to even
    assert round_surd(-3, Fraction(9, 4), -Fraction(1, 128) - Fraction(1, 2**70), bf) == -2.015625


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_irrational_values_next_to_a_midpoint(dt):
    # b = m - (a/sqrt(s) to 300 bits): y = m + (a rounding error below 2^-300), never a tie, far
    # beyond what a float estimate decides.
    rng = random.Random(8)
    f = format_of(dt)
    cases = []
    for _ in range(300):
        lo, hi = neighbours(f, rng, f.emax - 1)
        mid = rng.choice([-1, 1]) * (lo + hi) / 2
        s = Fraction(rng.choice([2, 3, 5, 7, 10, 1000003])) * Fraction(2) ** rng.randint(-40, 40)
        a = Fraction(rng.randint(1, 10**9)) * Fraction(2) ** rng.randint(-40, 40) * rng.choice([-1, 1])
        N, D = s.numerator, s.denominator
        root = Fraction(math.isqrt((D << 600) // N), 1 << 300)  # 1/sqrt(s) to 300 bits, below
        cases.append((a, s, mid - a * root))
        cases.append((a, s, mid - a * (root + Fraction(1, 1 << 300))))
    assert agree(cases, dt) == 600


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_subnormals_zeros_and_signs(dt):
    f = format_of(dt)
    q = Fraction(2) ** (f.emin - f.p + 1)  # the smallest subnormal
    cases = []
    for k in range(0, 9):
        for frac in (Fraction(1, 2), Fraction(1, 3), Fraction(2, 3), Fraction(1, 2**80)):
            v = (k + frac) * q
            for sign in (-1, 1):
                cases.append((sign * v * 5, Fraction(25), 0))  # y = v exactly
                cases.append((sign * v, Fraction(2), 0))  # irrational, near v / sqrt 2
                cases.append((Fraction(1), Fraction(1), sign * v - 1))  # deep cancellation
    assert agree(cases, dt) == 9 * 4 * 2 * 3
    fmt = format_of(dt)
    assert math.copysign(1, round_surd(-q / 3, 1, 0, fmt)) == -1  # rounds to -0
    assert math.copysign(1, round_surd(q / 3, 1, 0, fmt)) == 1
    z = round_surd(3, Fraction(9, 4), -2, fmt)  # 3 / (3/2) - 2 = 0 exactly: +0
    assert z == 0 and math.copysign(1, z) == 1
    assert round_surd(0, 5, Fraction(-0.0), fmt) == 0 and math.copysign(1, round_surd(0, 5, 0, fmt)) == 1
    assert math.isnan(round_surd(0, 0, 1, fmt)) and round_surd(-1, 0, 1, fmt) == -math.inf
    with pytest.raises(ValueError):
        round_surd(1, -1, 0, fmt)


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_next_to_the_overflow_threshold_and_powers_of_two(dt):
    f = format_of(dt)
    largest = (2**f.p - 1) * Fraction(2) ** (f.emax - f.p + 1)
    threshold = largest + Fraction(2) ** (f.emax - f.p)  # IEEE 754: at or beyond it, inf
    cases = []
    for v in (largest, threshold, Fraction(2) ** (f.emax + 1), Fraction(2) ** f.emax, Fraction(2) ** f.emin):
        for off in (0, Fraction(1, 2**300), -Fraction(1, 2**300), Fraction(1, 2**(f.p + 1)),
                    -Fraction(1, 2**(f.p + 1))):
            w = v * (1 + off)
            for sign in (-1, 1):
                cases.append((sign * w * 7, Fraction(49), 0))  # exactly sign w
                cases.append((sign * w, Fraction(1), 0))
                cases.append((sign * w, Fraction(3), sign * (w - w / Fraction(1732050807568877, 10**15))))  # ~ w
                cases.append((Fraction(1), Fraction(1), sign * w - 1))
    assert agree(cases, dt) == 5 * 5 * 2 * 4
    fmt = format_of(dt)
    assert round_surd(threshold, 1, 0, fmt) == math.inf  # the threshold itself: inf
    assert round_surd(-threshold * (1 - Fraction(1, 2**200)), 1, 0, fmt) == -float(largest)


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_deep_cancellation(dt):
    # y = a/sqrt(s) - c with c the 1000-bit truncation of a/sqrt(s): |y| about 2^-1000 |c|,
    # rounded (a float64 result keeps its bits; the others round to 0 with y's sign)
    rng = random.Random(9)
    cases = []
    for _ in range(60):
        s = Fraction(rng.choice([2, 3, 6, 11])) * Fraction(2) ** rng.randint(-10, 10)
        a = Fraction(rng.randint(1, 10**6) * rng.choice([-1, 1]))
        N, D = s.numerator, s.denominator
        c = a * Fraction(math.isqrt((D << 2000) // N), 1 << 1000)
        cases += [(a, s, -c), (a, s, -c - Fraction(1, 1 << 1030)), (a, s, -c + Fraction(1, 1 << 1090))]
    assert agree(cases, dt) == 180


def test_a_sample_against_the_independent_judge():
    # tests/judge.py shares no code with either: its IEEE rounding decides a third time
    import judge

    rng = random.Random(10)
    for dt, name in zip(DTYPES, IDS):
        f = format_of(dt)
        for _ in range(60):
            lo, hi = neighbours(f, rng, f.emax - 1)
            y = rng.choice([1, -1]) * ((lo + hi) / 2 + rng.choice([0, Fraction(1, 2**90) * hi]))
            sigma = Fraction(rng.randint(1, 999), rng.randint(1, 999))
            a = y * sigma * Fraction(rng.randint(1, 99), 64)  # b = y - a/sigma: no deep cancellation
            s = sigma * sigma * rng.choice([1, 2])  # rational and irrational roots
            b = y - a / sigma
            want = judge.round_exact(judge._Value(a, s, b), name)
            assert same(round_surd(a, s, b, f), want)


def test_the_kernel_never_imports_the_oracle_that_judges_it():
    kernel_dir = Path(__file__).resolve().parents[2] / "src" / "lneps" / "kernel"
    files = sorted(kernel_dir.glob("*.py"))
    assert len(files) >= 8
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                target = "." * node.level + (node.module or "")
                names = {a.name for a in node.names}
                assert "oracle" not in target.split(".") and "oracle" not in names, (path.name, target)
            elif isinstance(node, ast.Import):
                assert not any("oracle" in a.name.split(".") for a in node.names), path.name
