"""lneps.layer_norm and lneps.rms_norm judged by tests/judge.py, which shares no code with the
kernel or lneps.oracle: exact rationals, mpmath, and its own IEEE rounding. Hard rows in
float16, bfloat16, float32 and float64: large offsets, exact midpoints, midpoints moved by
2**-70, cancelling biases, RMS ties, the overflow threshold, subnormal results, signed zeros;
0 misrounded elements (values, signs of zero, NaN). And the judge is not vacuous: it finds
the misrounded elements of plain float64 arithmetic cast once."""

from fractions import Fraction

import ml_dtypes
import mpmath
import numpy as np
import pytest

import lneps
from judge import FORMATS, _Value, judge, misrounded, round_exact

F16, BF16, F32, F64 = np.float16, ml_dtypes.bfloat16, np.float32, np.float64
ALL = [F16, BF16, F32, F64]
NAME = {F16: "float16", BF16: "bfloat16", F32: "float32", F64: "float64"}


def fmt_constants(dt):
    p, emin, emax = FORMATS[NAME[dt]]
    half = 2.0**-p  # half an ulp of 1
    largest = (2 - 2.0 ** (1 - p)) * 2.0**emax
    threshold = (2 - 2.0**-p) * 2.0**emax if dt != F64 else None  # beyond float64 itself
    tiny = 2.0 ** (emin - p + 1)  # smallest subnormal
    return p, emin, half, largest, threshold, tiny


def ties_rows(n, d):
    """Rows of two values in equal numbers: with eps = 0 they normalize to exactly -1 and +1."""
    base = np.where(np.arange(d) < d // 2, 1.0, 3.0)
    return np.stack([base * 2.0**k + c for k, c in zip(range(n), [0, 5, -7, 0.5, 100, -3][:n])])


def hard_cases(dt):
    """(label, x, gamma, beta, eps, kind) for one format."""
    p, emin, half, largest, threshold, tiny = fmt_constants(dt)
    rng = np.random.default_rng(hash(NAME[dt]) % 2**32)
    d = 16
    cases = []
    # large offsets: the float64 two-pass formula loses the digits that decide the rounding
    offsets = [1e4, 3e4] if dt == F16 else [1e4, 1e5, 1e6, 1e7]
    x = np.concatenate([o + rng.normal(0, 1 + o * 1e-4 * (dt != F32 and dt != F64), (2, 48)) for o in offsets])
    g, b = rng.normal(1, 0.3, 48), rng.normal(0, 0.3, 48)
    cases += [("offset", x, None, None, 1e-5, "layer"), ("offset, gamma, beta", x, g, b, 1e-5, "layer"),
              ("offset rms", x, g, None, 1e-6, "rms")]
    # exact midpoints: u = -1 or +1 exactly, beta on a midpoint of the format (an exact tie)
    x = ties_rows(4, d)
    k = np.arange(d) % 4
    beta = np.array([half, 3 * half, -half, -3 * half])[k] * np.where(np.arange(d) % 8 < 4, 1, 2)
    cases += [("exact ties", x, None, beta, 0.0, "layer")]
    # the same midpoints moved by 2**-70 either way
    cases += [("ties moved by 2**-70", x, None, beta + 2.0**-70, 0.0, "layer"),
              ("ties moved by -2**-70", x, None, beta - 2.0**-70, 0.0, "layer")]
    # midpoints of irrational values: beta puts the exact value within float64 rounding of one
    x = rng.standard_t(3, (8, d))
    with mpmath.workprec(200):
        u = []
        for row in x.astype(dt).astype(F64):
            mu = mpmath.fsum(row) / d
            var = mpmath.fsum((mpmath.mpf(v) - mu) ** 2 for v in row) / d
            u.append([float((mpmath.mpf(v) - mu) / mpmath.sqrt(var + mpmath.mpf(1e-5))) for v in row])
    u = np.array(u)
    mid = np.array([[_midpoint_near(v, p, emin) for v in r] for r in u])
    for r in range(x.shape[0]):  # beta is per feature: one row at a time
        cases += [(f"near midpoints, row {r}", x[r:r + 1], None, (mid - u)[r], 1e-5, "layer")]
    # cancelling beta: gamma u - (gamma u rounded to float64), tiny and hard
    g = rng.normal(1, 0.5, d)
    for r in range(x.shape[0]):
        cases += [(f"cancelling beta, row {r}", x[r:r + 1], g, -(g * u[r]), 1e-5, "layer")]
    cases += [("exact cancellation", ties_rows(3, d), 1.25, -1.25, 0.0, "layer")]
    # RMS ties: rows of -1 and 1 have s = 1 (eps = 0), and gamma puts +-u on a midpoint
    x = np.tile(np.array([1.0, -1.0]), (3, d // 2)) * np.array([[1.0], [2.0], [0.5]])
    gam = np.array([1 + half, 1 + 3 * half, 2 - half, 1 + half + 2.0**-70 * (dt != F64)])[np.arange(d) % 4]
    cases += [("rms ties", x, gam, None, 0.0, "rms"), ("rms irrational", rng.normal(size=(3, d)), gam, None, 1e-6,
                                                       "rms")]
    # the overflow threshold: u = +-1, gamma at and next to it
    x = ties_rows(2, 4)
    if threshold is not None:
        for gamma in (threshold, np.nextafter(threshold, 0), largest, -threshold):
            cases.append((f"overflow threshold gamma={gamma!r}", x, gamma, None, 0.0, "layer"))
    else:  # float64: u = sqrt(2), -1/sqrt(2), -1/sqrt(2) from [1, 0, 0]
        cases.append(("overflow", np.array([[1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]]),
                      np.array([largest * 0.75, largest, 1.0]), None, 0.0, "layer"))
    # subnormal results, and signed zeros: exact 0 is +0, a tiny negative rounds to -0
    x = ties_rows(2, d)
    for gamma in (tiny * 3.5, tiny * 0.5, -tiny * 0.5, tiny * 0.25, 2.0**emin * 1.5):
        cases.append((f"subnormal gamma={gamma!r}", x, gamma, None, 0.0, "layer"))
    x = np.array([[1.0] + [0.0] * 8, [-2.0] + [0.0] * 8])  # u = +-2 sqrt 2 and -+1/(2 sqrt 2)
    cases += [("underflow to -0 and +0", x, tiny, None, 0.0, "layer")]
    cases += [("signed zero eps=0", np.array([[1, 1, 1, 3, 3, 3]], dtype=float), 1.25, -1.25, 0.0, "layer"),
              ("signed zero eps=2**-60", np.array([[1, 1, 1, 3, 3, 3]], dtype=float), 1.25, -1.25, 2.0**-60, "layer"),
              ("constant rows", np.array([[2.0] * 5, [0.0] * 5]), -1.0, None, 0.0, "layer"),
              ("constant rows eps", np.array([[2.0] * 5, [-0.0] * 5]), -1.0, -0.0, 1e-5, "layer")]
    return cases


def _midpoint_near(v, p, emin):
    """The midpoint between the two format numbers around v (v float64, nonzero)."""
    _, e = np.frexp(abs(v))
    q = 2.0 ** (max(e - 1, emin) - p + 1)
    return float(np.copysign((np.floor(abs(v) / q) + 0.5) * q, v))


def run(dt, label, x, gamma, beta, eps, kind):
    xd = np.asarray(x, dtype=F64).astype(dt)
    gd = None if gamma is None else np.asarray(gamma, dtype=F64)
    bd = None if beta is None else np.asarray(beta, dtype=F64)
    with np.errstate(over="ignore"):
        if kind == "layer":
            got = lneps.layer_norm(xd, gd, bd, eps=eps)
        else:
            got = lneps.rms_norm(xd, gd, eps=eps)
    want = judge(xd, gd, bd, eps=eps, kind=kind)
    return got, want


@pytest.mark.parametrize("dt", ALL, ids=lambda d: NAME[d])
def test_hard_rows_have_no_misrounded_element(dt):
    checked = 0
    for label, x, gamma, beta, eps, kind in hard_cases(dt):
        got, want = run(dt, label, x, gamma, beta, eps, kind)
        bad = misrounded(got, want)
        assert not bad.any(), (f"{NAME[dt]} {label}: {bad.sum()} misrounded, e.g. got "
                               f"{got.astype(F64)[bad][:3]} want {want[bad][:3]}")
        checked += got.size
    assert checked > 900


@pytest.mark.parametrize("dt", ALL, ids=lambda d: NAME[d])
def test_the_cases_really_are_hard(dt):
    # The exact values include ties, zeros, subnormals and infinities, as the cases promise.
    results = np.concatenate([run(dt, *case)[1].ravel() for case in hard_cases(dt)])
    p, emin, *_ = fmt_constants(dt)
    assert np.isinf(results).any() and np.isnan(results).any()
    assert ((results == 0) & np.signbit(results)).any() and ((results == 0) & ~np.signbit(results)).any()
    assert ((results != 0) & (np.abs(results) < 2.0**emin)).any()


def plain_float64(x, gamma, beta, eps, kind):
    """The textbook two-pass formula in float64, cast once to x's format."""
    x64 = x.astype(F64)
    if kind == "layer":
        v = x64 - x64.mean(-1, keepdims=True)
    else:
        v = x64
    y = v / np.sqrt((v * v).mean(-1, keepdims=True) + eps)
    y = y if gamma is None else y * gamma
    y = y if beta is None else y + beta
    with np.errstate(over="ignore"):
        return y.astype(x.dtype)


@pytest.mark.parametrize("dt", ALL, ids=lambda d: NAME[d])
def test_the_judge_catches_plain_float64_cast_once(dt):
    wrong = 0
    for label, x, gamma, beta, eps, kind in hard_cases(dt):
        xd = np.asarray(x, dtype=F64).astype(dt)
        gd = None if gamma is None else np.asarray(gamma, dtype=F64)
        bd = None if beta is None else np.asarray(beta, dtype=F64)
        with np.errstate(all="ignore"):
            got = plain_float64(xd, gd, bd, eps, kind)
        wrong += misrounded(got, judge(xd, gd, bd, eps=eps, kind=kind)).sum()
    assert wrong >= 5


def test_the_judge_rounds_by_the_ieee_rules():
    def r(value, fmt):
        return round_exact(_Value(Fraction(value), Fraction(1), Fraction(0)), fmt)

    assert r(1 + Fraction(1, 2**24), "float32") == 1.0  # a tie goes to the even neighbour
    assert r(1 + Fraction(3, 2**24), "float32") == 1 + 2.0**-22
    assert r(1 + Fraction(1, 2**24) + Fraction(1, 2**70), "float32") == 1 + 2.0**-23
    assert r(65519, "float16") == 65504.0 and r(65520, "float16") == np.inf  # the threshold ties up
    assert r(-65520, "float16") == -np.inf
    assert r(Fraction(1, 2**25), "float16") == 0.0 and not np.signbit(r(Fraction(1, 2**25), "float16"))
    assert r(Fraction(-1, 2**25), "float16") == 0.0 and np.signbit(r(Fraction(-1, 2**25), "float16"))
    assert r(Fraction(3, 2**26), "float16") == 2.0**-24  # the smallest subnormal
    assert r(Fraction(3, 2**1076), "float64") == 2.0**-1074
    assert r(Fraction(1), "bfloat16") == 1.0 and r(1 + Fraction(1, 2**8), "bfloat16") == 1.0
    assert r(1 + Fraction(3, 2**8), "bfloat16") == 1 + 2.0**-6
    # an irrational value: 1/sqrt(3) in float64, and an exact zero from a cancelling bias
    with mpmath.workprec(300):
        want = float(1 / mpmath.sqrt(3))
    assert round_exact(_Value(Fraction(1), Fraction(3), Fraction(0)), "float64") == want
    zero = round_exact(_Value(Fraction(2), Fraction(4), Fraction(-1)), "float32")
    assert zero == 0 and not np.signbit(zero)
