"""Rows at the edges of the range, through every tier of the kernel, judged exactly.

float64: entries near ±1.7e308 with several magnitudes, sums and sums of squares that overflow
while the result is finite, nearly constant and constant rows at the top, rows near and below
the smallest normal number 2.2e-308 (subnormals, squares that underflow), huge and tiny in one
row; eps 0, 1e-12 and 1e-5; no gain and bias, ordinary ones, and gains and biases of every
magnitude. float16, bfloat16 and float32 near their own overflow and underflow likewise, with
gains that carry results past the overflow threshold. Judged by the oracle (``lneps.oracle``),
on a sample by ``tests/judge.py`` too; the forced tiers must agree with the judged results.

A RuntimeWarning is an error here: an overflow inside the kernel is a bug (one in the triple
tier's level sums, and a float64 row sum that overflowed, once made rows of 5e307 NaN).
"""

import warnings
import zlib
from fractions import Fraction
from math import isqrt

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lneps
from lneps import oracle
from kernel_tiers import _force, same

F16, BF16, F32, F64 = np.float16, ml_dtypes.bfloat16, np.float32, np.float64
MAX, TINY, SUB = float(np.finfo(F64).max), float(np.finfo(F64).tiny), 5e-324
EPS = (0.0, 1e-12, 1e-5)


def kernel_result(x, g, b, eps, kind):
    """lneps's result, every warning an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return lneps.layer_norm(x, g, b, eps=eps) if kind == "layer" else lneps.rms_norm(x, g, eps=eps)


def oracle_result(x, g, b, eps, kind):
    return oracle.layer_norm_rounded(x, g, b, eps=eps) if kind == "layer" else oracle.rms_norm_rounded(x, g, eps=eps)


def rng_for(*key):
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def rows64(name, rng, n, d):
    sign = rng.choice([-1.0, 1.0], (n, d))
    if name == "top, three decades":
        return sign * MAX * 10.0 ** -rng.uniform(0, 3, (n, d))
    if name == "top, powers of two apart":
        return sign * MAX * 2.0 ** -rng.integers(0, 60, (n, d)).astype(F64)
    if name == "top, offset":  # the sum overflows, the mean does not
        return MAX * (0.9 + 1e-3 * rng.uniform(-1, 1, (n, d)))
    if name == "top, nearly constant":
        return -MAX * (1 - rng.integers(0, 4, (n, d)) * 2.0**-52)
    if name == "top, two values":
        return np.where(rng.random((n, d)) < 0.5, MAX, -MAX / 3)
    if name == "squares overflow":  # sum of squares beyond float64, result finite
        return rng.normal(size=(n, d)) * 10.0 ** rng.integers(155, 300, (n, 1))
    if name == "near the smallest normal":
        return sign * TINY * rng.uniform(0.25, 4, (n, d))
    if name == "subnormal":
        return rng.integers(-40, 41, (n, d)) * SUB
    if name == "squares underflow":
        return rng.normal(size=(n, d)) * 10.0 ** -rng.integers(155, 300, (n, 1))
    if name == "huge and tiny":
        return sign * 10.0 ** rng.uniform(-323, 308.2, (n, d))
    if name == "constant":
        return np.repeat(rng.choice([MAX, -MAX, 1e308, TINY, SUB, -3 * SUB], (n, 1)), d, axis=1)
    raise KeyError(name)


FAMILIES64 = ["top, three decades", "top, powers of two apart", "top, offset", "top, nearly constant",
              "top, two values", "squares overflow", "near the smallest normal", "subnormal",
              "squares underflow", "huge and tiny", "constant"]


def params(rng, d, wide=False):
    """No gain and bias; ordinary ones; (wide) gains of any magnitude and biases near 1e300."""
    out = [(None, None), (rng.normal(1, 0.5, d), rng.normal(0, 0.5, d))]
    if wide:
        out.append((rng.choice([-1.0, 1.0], d) * 10.0 ** rng.uniform(-300, 300, d), rng.normal(0, 0.5, d) * 1e300))
    return out


def judged_cases(name):
    """(x, gamma, beta, eps, kind, want) for a float64 family, want from the oracle."""
    rng = rng_for("float64", name)
    for d in (2, 3, 16, 64):
        x = rows64(name, rng, max(1, 32 // d), d)
        for eps in EPS:
            for kind in ("layer", "rms"):
                for g, b in params(rng, d, wide=(d == 3)):
                    b = b if kind == "layer" else None
                    yield x, g, b, eps, kind, oracle_result(x, g, b, eps, kind)


@pytest.mark.parametrize("name", FAMILIES64)
def test_float64_rows_at_the_edges_of_the_range(name, monkeypatch):
    checked = 0
    cases = list(judged_cases(name))
    for x, g, b, eps, kind, want in cases:
        got = kernel_result(x, g, b, eps, kind)
        bad = ~same(got, want)
        assert not bad.any(), (name, eps, kind, x[bad.any(axis=1)][:2], got[bad][:3], want[bad][:3])
        # NaN only for 0/0: a constant row with eps 0 (the report's rows were NaN throughout)
        undefined = (x == x[:, :1]).all(axis=1, keepdims=True) & (eps == 0) & (kind == "layer")
        assert not (np.isnan(got) & ~undefined).any()
        checked += got.size
    assert checked >= 2000
    # every tier on its own gives the same (judged) results: the float64 results double-double
    # could decide, sent on to the exact tier's rational arithmetic, to triple precision, and
    # all the way to rational arithmetic
    for tier in ("no-vectorized-exact", "triple", "fractions"):
        with monkeypatch.context() as m:
            _force(m, tier)
            for x, g, b, eps, kind, want in cases[::3]:
                assert same(kernel_result(x, g, b, eps, kind), want).all(), (tier, eps, kind)


@pytest.mark.parametrize("name", FAMILIES64[::2])
def test_float64_edges_against_the_independent_judge(name):
    from judge import judge

    rng = rng_for("judge", name)
    x = rows64(name, rng, 2, 5)
    g, b = rng.normal(1, 0.5, 5), rng.normal(0, 0.5, 5)
    for eps in EPS:
        assert same(kernel_result(x, g, b, eps, "layer"), judge(x, g, b, eps=eps)).all()
        assert same(kernel_result(x, g, None, eps, "rms"), judge(x, g, eps=eps, kind="rms")).all()


def test_the_reported_rows_near_the_top_are_not_nan():
    # [1, 1.2, 1.4] * 5e307 came out [nan nan nan]: its float64 sum overflows, and the triple
    # tier's level sums formed 4 d max|x| (inf); 3e307 was right
    for scale in (3e307, 5e307, 1e308, 1.28e308):  # 1.4 * 1.28e308 is just short of the largest
        x = np.array([[1.0, 1.2, 1.4]]) * scale
        for eps in EPS:
            got = kernel_result(x, None, None, eps, "layer")
            assert same(got, oracle.layer_norm_exact(x, eps=eps)).all()
            assert np.allclose(got, [[-1.224744871391589, 0.0, 1.224744871391589]], atol=1e-15)
            got = kernel_result(x, None, None, eps, "rms")
            assert same(got, oracle.rms_norm_exact(x, eps=eps)).all()
            assert np.allclose(got, [[0.8257228238447705, 0.9908673886137246, 1.1560119533826787]])


def _ulps(got, exact: Fraction) -> float:
    """|got - exact| in float64 ulps of exact; 0 for inf where exact is beyond the range."""
    if abs(exact) > Fraction(MAX):
        return 0.0 if np.isinf(got) else np.inf
    if exact == 0:
        return 0.0 if got == 0 else np.inf
    if not np.isfinite(got):
        return np.inf
    ulp = Fraction(np.ldexp(1.0, max(int(np.frexp(abs(float(exact)))[1]) - 53, -1074)))
    return float(abs(Fraction(float(got)) - exact) / ulp)


def test_float64_statistics_at_the_edges_of_the_range():
    # mean within 1 ulp, rstd within (d + 3)/2 + 2 ulps (the kernel's promise), or inf where
    # 1/sqrt(var + eps) itself is beyond float64 (a subnormal row with eps 0)
    for name in FAMILIES64:
        rng = rng_for("stats", name)
        for d in (2, 3, 64):
            x = rows64(name, rng, 3, d)
            for eps in EPS + (1e308,):
                with warnings.catch_warnings():
                    warnings.simplefilter("error")
                    _, mean, rstd = lneps.layer_norm(x, eps=eps, return_stats=True)
                    _, rstd_rms = lneps.rms_norm(x, eps=eps, return_stats=True)
                for i in range(x.shape[0]):
                    xs = [Fraction(float(v)) for v in x[i]]
                    mu = sum(xs) / d
                    assert _ulps(mean[i, 0], mu) <= 1, (name, d, eps, i)
                    for r, m in ((rstd[i, 0], mu), (rstd_rms[i, 0], 0)):
                        q = sum((v - m) ** 2 for v in xs) / d + Fraction(eps)
                        if q == 0:
                            assert not np.isfinite(r)
                            continue
                        k = 200 + max(0, (q.numerator.bit_length() - q.denominator.bit_length()) // 2)
                        exact = Fraction(isqrt((q.denominator << (2 * k)) // q.numerator), 1 << k)  # 2^-200 relative
                        assert _ulps(r, exact) <= (d + 3) / 2 + 2, (name, d, eps, i, r, float(exact))


# --- float16, bfloat16 and float32 near their own limits ------------------------------------


def rows_low(name, rng, n, d, dt):
    fi = ml_dtypes.finfo(dt)
    big, tiny, sub = float(fi.max), float(fi.smallest_normal), float(fi.smallest_subnormal)
    sign = rng.choice([-1.0, 1.0], (n, d))
    if name == "top":
        x = sign * big * 10.0 ** -rng.uniform(0, 2, (n, d))
    elif name == "top, offset":
        x = big * (0.9 + 1e-2 * rng.uniform(-1, 1, (n, d)))
    elif name == "near the smallest normal":
        x = sign * tiny * rng.uniform(0.25, 4, (n, d))
    elif name == "subnormal":
        x = rng.integers(-40, 41, (n, d)) * sub
    elif name == "huge and tiny":
        x = sign * 2.0 ** rng.uniform(np.log2(sub), np.log2(big), (n, d))
    elif name == "constant":
        x = np.repeat(rng.choice([big, -big, tiny, sub, -3 * sub], (n, 1)), d, axis=1)
    else:
        raise KeyError(name)
    return x.astype(dt)


FAMILIES_LOW = ["top", "top, offset", "near the smallest normal", "subnormal", "huge and tiny", "constant"]


@pytest.mark.parametrize("name", FAMILIES_LOW)
@pytest.mark.parametrize("dt", [F16, BF16, F32], ids=lambda d: np.dtype(d).name)
def test_16_and_32_bit_rows_at_the_edges_of_their_range(dt, name, monkeypatch):
    fi = ml_dtypes.finfo(dt)
    rng = rng_for("low", np.dtype(dt).name, name)
    checked = 0
    cases = []
    for d in (2, 3, 16, 1000):
        x = rows_low(name, rng, max(2, 1000 // d), d, dt)
        for eps in EPS:
            for kind in ("layer", "rms"):
                # gains near the format's largest number carry results past its overflow
                # threshold (to inf) or just short of it; biases as large
                for g, b in ((None, None), (rng.normal(1, 0.5, d), rng.normal(0, 0.5, d)),
                             (rng.uniform(0.3, 1, d) * float(fi.max), rng.uniform(-1, 1, d) * float(fi.max))):
                    g = None if g is None else g.astype(dt).astype(F64)
                    b = None if b is None or kind == "rms" else b.astype(dt).astype(F64)
                    want = oracle_result(x, g, b, eps, kind)
                    got = kernel_result(x, g, b, eps, kind)
                    assert same(got, want).all(), (d, eps, kind)
                    checked += got.size
                    if d <= 16:
                        cases.append((x[:8], g, b, eps, kind, want[:8]))
    assert checked > 80_000
    # the same through the tiers on their own: double-double for every row (no float64 tier),
    # then triple precision, then rational arithmetic, for every element (a few rows)
    for tier in ("double-double", "triple", "fractions"):
        with monkeypatch.context() as m:
            _force(m, tier)
            for x, g, b, eps, kind, want in cases[:: 3 if tier == "fractions" else 1]:
                assert same(kernel_result(x, g, b, eps, kind), want).all(), (tier, eps, kind)


# --- anything finite ---------------------------------------------------------------------

FINITE = st.floats(allow_nan=False, allow_infinity=False, allow_subnormal=True)


@settings(max_examples=60, deadline=None)
@given(st.lists(FINITE, min_size=1, max_size=8), st.one_of(st.sampled_from(EPS), st.floats(0, MAX)),
       st.one_of(st.none(), FINITE), st.one_of(st.none(), FINITE))
def test_hypothesis_any_finite_float64_row(values, eps, gamma, beta):
    x = np.array([values])
    g = None if gamma is None else np.full(x.shape[1], gamma)
    b = None if beta is None else np.full(x.shape[1], beta)
    with np.errstate(over="ignore"):  # (the exact result itself may round to inf)
        want = oracle.layer_norm_exact(x, g, b, eps=eps)
        want_rms = oracle.rms_norm_exact(x, g, eps=eps)
    assert same(kernel_result(x, g, b, eps, "layer"), want).all()
    assert same(kernel_result(x, g, None, eps, "rms"), want_rms).all()
