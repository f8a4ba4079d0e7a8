"""lneps.kernel.gradients: the correctly rounded backward pass, bit for bit against a judge
written here from the textbook formula in rational arithmetic (Fractions) and mpmath, sharing
no code with the kernel (no t/s integers, no integer square roots, its own rounding)."""

import math
from fractions import Fraction
from math import isqrt

import ml_dtypes
import numpy as np
import pytest

mpmath = pytest.importorskip("mpmath")
from mpmath import mp, mpf  # noqa: E402

from lneps.formats import format_of  # noqa: E402
from lneps.kernel import gradients as K  # noqa: E402
from lneps.kernel.surd import round_surd  # noqa: E402

BF16 = np.dtype(ml_dtypes.bfloat16)
FORMATS = [np.dtype(np.float16), BF16, np.dtype(np.float32), np.dtype(np.float64)]
RNG = np.random.default_rng(20240607)


# --- the judge --------------------------------------------------------------------------------


def _fmt(dt):
    fi = ml_dtypes.finfo(dt)
    return int(fi.nmant) + 1, int(fi.minexp), int(fi.maxexp) - 1


def judge_round(v: Fraction, dt) -> float:
    """Nearest number of dt to the rational v, ties to even (by division with remainder)."""
    if v == 0:
        return 0.0
    p, emin, emax = _fmt(dt)
    a = abs(v)
    e = (math.frexp(float(a))[1] - 1 if 2.0**-1000 < a < 2.0**1000
         else a.numerator.bit_length() - a.denominator.bit_length())
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    q = max(e, emin) - p + 1
    n, rem = divmod(a / Fraction(2) ** q, 1)
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and n % 2):
        n += 1
    largest = (2**p - 1) * Fraction(2) ** (emax - p + 1)
    out = float(n * Fraction(2) ** q) if n * Fraction(2) ** q <= largest else math.inf
    return -out if v < 0 else out


def _frac(x) -> Fraction:
    sign, man, exp, _ = x._mpf_
    f = Fraction(man) * Fraction(2) ** exp
    return -f if sign else f


def _mp(f: Fraction):
    return mpf(f.numerator) / mpf(f.denominator)


def _square(f: Fraction) -> bool:
    return isqrt(f.numerator) ** 2 == f.numerator and isqrt(f.denominator) ** 2 == f.denominator


def _sqrt_rational(f: Fraction) -> Fraction:
    return Fraction(isqrt(f.numerator), isqrt(f.denominator))


_ROOTS = {}


def _root(w: Fraction, prec: int):
    """mp.sqrt(w) at the working precision prec, remembered (a row's w serves all its elements)."""
    key = (w, prec)
    if key not in _ROOTS:
        if len(_ROOTS) > 10000:
            _ROOTS.clear()
        _ROOTS[key] = mp.sqrt(_mp(w))
    return _ROOTS[key]


def _decide(terms, rational, dt):
    """Round rational + sum(A / sqrt(w) for A, w in terms) (irrational unless terms is empty)
    by mpmath at rising precision with a generous error bound."""
    terms = [(A, w) for A, w in terms if A != 0]
    if not terms:
        return judge_round(rational, dt)
    for prec in (256, 1024, 4096, 16384):
        with mp.workprec(prec):
            parts = [_mp(A) / _root(w, prec) for A, w in terms]
            v = _mp(rational) + mp.fsum(parts)
            err = (abs(_mp(rational)) + mp.fsum(abs(t) for t in parts)) * (len(parts) + 8) * mpf(2) ** (8 - prec)
            lo, hi = judge_round(_frac(v - err), dt), judge_round(_frac(v + err), dt)
        if lo == hi and math.copysign(1, lo) == math.copysign(1, hi):
            return lo
    raise AssertionError("the judge could not decide")


def judge(kind, x, g, gamma, eps, dt):
    """(dx, dgamma, dbeta) from the textbook formula: mu, v = x - mu, q = mean(v^2), w = q + eps,
    u = v / sqrt(w); dx = (gh - mean(gh) - u mean(gh u)) / sqrt(w); dgamma = sum g u; dbeta =
    sum g (RMS: v = x, no mean subtracted). Returns float64 arrays of dt's numbers."""
    n, d = x.shape
    e = Fraction(float(eps))
    gam = [Fraction(1)] * d if gamma is None else [Fraction(float(c)) for c in np.broadcast_to(gamma, (d,))]
    dx = np.empty((n, d))
    V, W, Gs = [], [], []
    for i in range(n):
        X = [Fraction(float(a)) for a in x[i]]
        G = [Fraction(float(a)) for a in g[i]]
        gh = [a * b for a, b in zip(G, gam)]
        if kind == "layer":
            mu = sum(X) / d
            v = [a - mu for a in X]
        else:
            v = X
        w = sum(a * a for a in v) / d + e
        V.append(v)
        W.append(w)
        Gs.append(G)
        if w == 0:
            dx[i] = np.nan
            continue
        m1 = sum(gh) / d if kind == "layer" else 0
        m2 = sum(a * b for a, b in zip(gh, v)) / d
        for j in range(d):
            c = (gh[j] - m1) * w - v[j] * m2  # dx_j = c / w^(3/2)
            if _square(w):
                dx[i, j] = judge_round(c / _sqrt_rational(w) ** 3, dt)
            else:
                dx[i, j] = _decide([(c / w, w)], Fraction(0), dt)
    dgamma = np.empty(d)
    # rows grouped by w modulo rational squares (the judge's own grouping, by ratios)
    reps = []
    cls = []
    for i in range(n):
        for r in reps:
            if W[i] != 0 and W[r] != 0 and _square(W[i] / W[r]):
                cls.append(r)
                break
        else:
            reps.append(i)
            cls.append(i)
    for j in range(d):
        if any(w == 0 for w in W):
            dgamma[j] = np.nan
            continue
        coef = {}
        for i in range(n):
            term = Gs[i][j] * V[i][j]  # / sqrt(W[i]) = * sqrt(W[r] / W[i]) / sqrt(W[r])
            coef[cls[i]] = coef.get(cls[i], 0) + term * _sqrt_rational(W[cls[i]] / W[i])
        rational = sum((A / _sqrt_rational(W[r]) for r, A in coef.items() if _square(W[r])), Fraction(0))
        dgamma[j] = _decide([(A, W[r]) for r, A in coef.items() if not _square(W[r])], rational, dt)
    dbeta = np.array([judge_round(sum((Fraction(float(g[i, j])) for i in range(n)), Fraction(0)), dt)
                      for j in range(d)]) if kind == "layer" else None
    return dx, dgamma, dbeta


def _bits(a, dt):
    a = np.asarray(a).astype(dt)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[dt.itemsize])


def assert_bits(got, want, dt, what):
    g, w = _bits(got, dt), _bits(want, dt)
    nan = np.isnan(np.asarray(got).astype(np.float64)) & np.isnan(np.asarray(want).astype(np.float64))
    bad = (g != w) & ~nan
    if bad.any():
        idx = tuple(np.argwhere(bad)[0])
        raise AssertionError(f"{what} ({dt}): {int(bad.sum())} of {bad.size} differ; first at {idx}: "
                             f"kernel {float(np.asarray(got)[idx])!r}, judge {float(np.asarray(want)[idx])!r}")


def check(kind, x, g, gamma=None, eps=1e-5, dt=None, counts=None):
    dt = np.dtype(x.dtype if dt is None else dt)
    counts = {} if counts is None else counts
    f = K.layer_norm_gradients if kind == "layer" else K.rms_norm_gradients
    got = f(x, g, gamma, eps=eps, dtype=dt, counts=counts)
    want = judge(kind, x, g, gamma, eps, dt)
    for name, a, b in zip(("dx", "dgamma", "dbeta"), got, want):
        assert a.dtype == dt and a.shape == b.shape
        assert_bits(a, b, dt, f"{kind} {name}")
    return got, counts


# --- the judge's rounding and the kernel's, on exact ties -----------------------------------------------


@pytest.mark.parametrize("dt", FORMATS, ids=str)
def test_the_kernels_exact_rounding_against_the_judges(dt):
    # the gradients round a/sqrt(w) (dx) and rationals (dγ, dβ) with lneps.kernel.surd.round_surd
    fmt = format_of(dt)
    p, emin, emax = _fmt(dt)
    for _ in range(300):
        e = int(RNG.integers(emin - p - 2, emax + 2))
        n = int(RNG.integers(1, 2 ** (p + 1)))
        v = Fraction(n, 1) * Fraction(2) ** (e - p) * (-1 if RNG.random() < 0.5 else 1)  # often a tie
        k = int(RNG.integers(1, 50))
        assert round_surd(v * k, k * k, 0, fmt) == judge_round(v, dt)  # a / sqrt(w) rational
        assert round_surd(0, 1, v, fmt) == judge_round(v, dt)  # a rational
        assert math.copysign(1, round_surd(v, 1, 0, fmt)) == math.copysign(1, judge_round(v, dt))
    assert round_surd(0, 5, 0, fmt) == 0.0 and math.copysign(1, round_surd(0, 5, 0, fmt)) == 1
    tiny = -Fraction(2) ** (emin - p - 5)
    assert math.copysign(1, round_surd(tiny, 1, 0, fmt)) == -1  # a negative value rounding to 0
    assert math.copysign(1, round_surd(0, 1, tiny, fmt)) == -1


# --- random rows --------------------------------------------------------------------------------


@pytest.mark.parametrize("dt", FORMATS, ids=str)
@pytest.mark.parametrize("kind", ["layer", "rms"])
def test_random_rows(kind, dt):
    for d, eps, affine in ((1, 1e-5, False), (2, 0.0, True), (3, 1e-5, True), (8, 1e-12, False),
                           (37, 1.0, True), (64, 1e-5, True)):
        x = RNG.normal(size=(3, d)).astype(dt)
        g = RNG.normal(size=(3, d)).astype(dt)
        gamma = RNG.normal(size=d).astype(dt) if affine else None
        check(kind, x, g, gamma, eps)


@pytest.mark.parametrize("dt", FORMATS, ids=str)
def test_long_rows(dt):
    d = 1000
    x = (RNG.normal(size=(2, d)) * [[1.0], [30.0]] + [[0.0], [4.0]]).astype(dt)
    g = RNG.normal(size=(2, d)).astype(dt)
    check("layer", x, g, RNG.normal(size=d).astype(dt), 1e-5)
    check("rms", x[:1], g[:1], None, 1e-6)


@pytest.mark.parametrize("dt", FORMATS, ids=str)
def test_near_constant_offset_and_wide_range_rows(dt):
    eps_ = float(ml_dtypes.finfo(dt).eps)
    spread = 10 if dt == np.float16 else 20
    d = 24
    base = RNG.normal(size=(1, d))
    rows = np.concatenate([
        1.0 + eps_ * np.round(base * 2),  # a few ulps around 1: q far below eps
        1000.0 + base,  # offset: |mean| >> std
        base * np.exp2(RNG.integers(-spread, spread, size=(1, d))),  # magnitudes spread widely
        np.where(np.arange(d) % 2, 3.0, 3.0 + 4 * eps_)[None, :],  # two values
    ])
    x = rows.astype(dt)
    g = RNG.normal(size=x.shape).astype(dt)
    for eps in (1e-5, 1e-9, 0.0):
        check("layer", x, g, RNG.normal(size=d).astype(dt), eps)
        check("rms", x, g, None, eps)


@pytest.mark.parametrize("dt", FORMATS, ids=str)
def test_tiny_and_huge_magnitudes(dt):
    fi = ml_dtypes.finfo(dt)
    top, low = int(fi.maxexp) - 4, int(fi.minexp) + 4
    d = 16
    for sx, sg, eps in ((low, 0, 0.0), (top - 8, 0, 1e-5), (0, low, 1e-5), (0, top - 6, 1e-3),
                        (-6, top - 10, 1e-9), (4, low - 3, 0.0)):
        x = (RNG.normal(size=(2, d)) * 2.0**sx).astype(dt)
        g = (RNG.normal(size=(2, d)) * 2.0**sg).astype(dt)
        with np.errstate(over="ignore"):
            check("layer", x, g, None, eps)
            check("rms", x, g, RNG.normal(size=d).astype(dt), eps)


def test_float64_rows_spanning_the_whole_exponent_range():
    """Integers of thousands of bits (numerators beyond 2^1024) and a dγ column whose terms
    span 2^±1000: the slow conversions and the refinement of a sum of square roots."""
    x = np.array([[1e300, 1e-300, -3e299, 5.0], [1e-200, 2e-200, 1e150, -1e150]])
    g = np.array([[1e-300, 1e300, 2.0, -1e-100], [3.0, 1e250, -1e-250, 7.0]])
    for dt in FORMATS:
        with np.errstate(over="ignore"):
            check("layer", x, g, None, 1e-5, dt=dt)
            check("rms", x, g, np.array([1e-300, 1.0, 3.0, 1e300]), 1e-5, dt=dt)


def test_overflow_and_subnormal_outputs():
    # float16: |dx| ~ |g| / sqrt(eps) beyond 65504; tiny g gives subnormal and zero outputs
    x = np.full((1, 8), 0.5, dtype=np.float16)
    g = np.zeros((1, 8))
    g[0, :2] = [1.0, -1.0]
    for scale in (0.999, 1.001, 2.0**-30, 2.0**-40):
        lim = 65520 * math.sqrt(1e-5) * scale
        check("layer", x, (g * lim).astype(np.float64), None, 1e-5, dt=np.float16)
    x = RNG.normal(size=(2, 8))  # subnormal dx in float64
    check("layer", x, RNG.normal(size=(2, 8)) * 2.0**-1060, None, 0.0)


# --- exact values: rational square roots, ties on purpose ----------------------------------------


def _exact_row(d, rng):
    """Integer rows of mean 0 with x_1 = 0 (so u_1 = 0), and eps = 4^m - q: q + eps = 4^m,
    so sqrt(q + eps) = 2^m is exact and every dx and dγ a dyadic rational."""
    x = rng.integers(-3, 4, size=d).astype(np.float64)
    x[1] = 0.0
    x[-1] = -(x.sum() - x[-1])
    q = Fraction(int((x * x).sum()), d)
    m = 0
    while Fraction(4) ** m <= q:
        m += 1
    return x, float(Fraction(4) ** m - q), 2.0**-m


@pytest.mark.parametrize("dt", FORMATS, ids=str)
def test_rational_values_and_ties(dt):
    """Rows with sqrt(q + eps) a power of two make every dx and dγ a dyadic rational; g_1 is
    then moved so that dx_0 is exactly a midpoint of the output format (dx_0 moves by -r/d
    per unit of g_1, since u_1 = 0), which must go to even."""
    p = _fmt(dt)[0]
    ties = 0
    for trial in range(12):
        d = [4, 8, 16][trial % 3]
        x, eps, r = _exact_row(d, RNG)
        x = x[None, :]
        g = np.round(RNG.normal(size=(1, d)) * 64) / 64
        check("layer", x, g, None, eps, dt=dt)  # the rational values themselves
        want = judge("layer", x, g, None, eps, np.float64)[0][0, 0]
        near = want if want else 1.0
        spacing = 2.0 ** (math.frexp(near)[1] - p)
        # a midpoint of dt, on the far side of |near| from 0 (below a power of two the spacing halves)
        mid = math.copysign((math.floor(abs(near) / spacing) + 0.5) * spacing, near)
        g[0, 1] -= (mid - want) * d / r
        counts = {}
        got, counts = check("layer", x, g, None, eps, dt=dt, counts=counts)
        if dt != np.float64:
            assert judge("layer", x, g, None, eps, np.float64)[0][0, 0] == mid
            ties += 1
            assert counts["exact_dx"] >= 1
            assert int(_bits(got[0][0, 0], dt)) % 2 == 0  # to even
    assert ties == (0 if dt == np.float64 else 12)


def test_float64_ties():
    """u = ±1 rows (eps = 0, two values): dx_0 = (g_0 - g_2) / 2 for d = 4, a float64 midpoint
    when g_0 - g_2 needs 54 bits."""
    x = np.array([[1.0, -1.0, 1.0, -1.0], [3.0, 5.0, 3.0, 5.0]])
    for g0, g2 in ((1.0, -2.0**-53), (1.0, -3 * 2.0**-53), (-1.5, 2.0**-52 + 2.0**-53), (2.0**-1070, 0.0)):
        g = np.array([[g0, 0.25, g2, 0.5], [g0, -1.0, g2, 0.0]])
        counts = {}
        got, counts = check("layer", x, g, None, 0.0, counts=counts)
        assert counts["exact_dx"] > 0


def test_dgamma_cancels_exactly_across_rows_of_one_class():
    """Rows x, 2x and 3x (eps = 0) have the same u, s in ratios 4 and 9: with g, -g/2, -g/2 ...
    the columns of dγ cancel exactly (a rational 0, not an estimate near 0); and rows with
    ratios that are not squares keep an irrational, nonzero sum."""
    d = 6
    x0 = RNG.integers(-50, 50, size=d).astype(np.float64)
    g0 = RNG.normal(size=d)
    x = np.stack([x0, 2 * x0, 3 * x0, x0 + 7.0])
    g = np.stack([g0, -0.5 * g0, -0.25 * g0, -0.25 * g0])
    for dt in FORMATS:
        counts = {}
        got, counts = check("layer", x, g, None, 0.0, dt=dt, counts=counts)
        assert counts["dgamma_columns_exact"] == d
        assert np.all(got[1].astype(np.float64) == 0) and not np.signbit(got[1].astype(np.float64)).any()
    got, counts = check("rms", x[:3], np.stack([g0, -0.5 * g0, -0.5 * g0]), None, 0.0, counts={})
    assert counts["dgamma_columns_exact"] == d


def test_dgamma_nearly_cancelling_square_roots_are_refined():
    """RMS rows (1, 0, ...) and (1, 2^-60, ...): s differs by 2^-120 / d, so g/sqrt(s_A) -
    g/sqrt(s_B) is 2^-121 of its terms, beyond the double-double estimate: settled by integer
    square roots of rising precision."""
    d = 4
    x = np.zeros((2, d))
    x[:, 0] = 1.0
    x[1, 1] = 2.0**-60
    g = np.zeros((2, d))
    g[0, 0], g[1, 0] = 0.75, -0.75
    for dt in FORMATS:
        counts = {}
        check("rms", x, g, None, 0.0, dt=dt, counts=counts)
        assert counts["dgamma_refinements"] >= 2


def test_dgamma_midpoint():
    """A dγ column that is exactly a float16 midpoint (rows with sqrt(q + eps) = 4)."""
    x, eps = np.array([[1.0, -1.0, 1.0, -1.0]]), 15.0  # q = 1, q + eps = 16
    u = np.array([0.25, -0.25, 0.25, -0.25])
    g = np.zeros((1, 4))
    mid = 0.25 + 2.0**-13  # between 0.25 and 0.25 + 2^-12 (float16 spacing at 0.25)
    g[0, 0] = mid / u[0]
    got, counts = check("layer", x, g, None, eps, dt=np.float16, counts={})
    assert float(got[1][0]) == 0.25  # to even
    assert counts["dgamma_columns_exact"] >= 1


# --- conventions --------------------------------------------------------------------------------


def test_nan_inf_constant_rows_and_zero_sizes():
    d = 5
    x = RNG.normal(size=(4, d))
    g = RNG.normal(size=(4, d))
    x[1] = 2.5  # constant: with eps = 0, s = 0
    x[2, 3] = np.inf
    g[3, 1] = np.nan
    dx, dgamma, dbeta = K.layer_norm_gradients(x, g, None, eps=0.0, dtype=np.float64)
    assert np.isfinite(dx[0]).all() and np.isnan(dx[1]).all() and np.isnan(dx[2]).all() and np.isnan(dx[3]).all()
    assert np.isnan(dgamma).all()
    assert np.isnan(dbeta[1]) and np.isfinite(np.delete(dbeta, 1)).all()
    want = judge("layer", x[:1], g[:1], None, 0.0, np.float64)
    assert_bits(dx[:1], want[0], np.dtype(np.float64), "dx of the finite row")
    # with eps > 0 the constant row is exact (+0 wherever g sums to its mean) and finite
    dx, dgamma, dbeta = K.layer_norm_gradients(x[:2], g[:2], None, eps=1e-5, dtype=np.float32)
    assert np.isfinite(dx).all() and np.isfinite(dgamma).all()
    # gamma with inf: every row's dx is the plain formula's
    dx, _, _ = K.layer_norm_gradients(x[:1], g[:1], np.array([1, np.inf, 1, 1, 1.0]), eps=1e-5)
    assert not np.isfinite(dx).all()
    # zero rows
    dx, dgamma, dbeta = K.layer_norm_gradients(np.zeros((0, 3)), np.zeros((0, 3)), None, eps=1e-5)
    assert dx.shape == (0, 3) and np.array_equal(dgamma, np.zeros(3)) and not np.signbit(dgamma).any()
    dx, dgamma = K.rms_norm_gradients(np.zeros((0, 3), np.float16), np.zeros((0, 3), np.float16), eps=1e-5)
    assert dx.dtype == dgamma.dtype == np.float16 and dgamma.shape == (3,)
    # RMS: a zero row with eps = 0 is 0/0
    dx, dgamma = K.rms_norm_gradients(np.zeros((1, 3)), np.ones((1, 3)), eps=0.0)
    assert np.isnan(dx).all() and np.isnan(dgamma).all()


@pytest.mark.parametrize("kind", ["layer", "rms"])
def test_a_nan_in_g_or_gamma_leaves_the_rest_exact(kind):
    """A NaN in g[1, 2] makes row 1's dx and column 2 of dγ and dβ the plain formula's; every
    other element is still exact, row 1's terms in the other columns of dγ included. An inf
    in γ reaches every dx but not dγ or dβ, which do not depend on γ."""
    d = 6
    x = RNG.normal(size=(3, d)).astype(np.float32)
    g = RNG.normal(size=(3, d)).astype(np.float32)
    bad = g.copy()
    bad[1, 2] = np.nan
    f = K.layer_norm_gradients if kind == "layer" else K.rms_norm_gradients
    got = f(x, bad, None, eps=1e-5)
    clean = judge(kind, x, np.where(np.isnan(bad), 0, bad), None, 1e-5, np.dtype(np.float32))
    keep = np.arange(d) != 2
    assert np.isnan(got[0][1]).all() and np.isnan(got[1][2])
    assert_bits(got[0][[0, 2]], clean[0][[0, 2]], np.dtype(np.float32), "dx of the other rows")
    assert_bits(got[1][keep], clean[1][keep], np.dtype(np.float32), "dγ of the other columns")
    if kind == "layer":
        assert np.isnan(got[2][2])
        assert_bits(got[2][keep], clean[2][keep], np.dtype(np.float32), "dβ of the other columns")
    gamma = np.ones(d, dtype=np.float32)
    gamma[4] = np.inf
    got = f(x, g, gamma, eps=1e-5)
    clean = judge(kind, x, g, None, 1e-5, np.dtype(np.float32))
    assert not np.isfinite(got[0]).all(axis=1).any()
    assert_bits(got[1], clean[1], np.dtype(np.float32), "dγ")


def test_exact_zeros_are_positive():
    x = np.array([[1.0, 2.0, 3.0, 4.0]])
    g = np.full((1, 4), -0.0)
    for f in (K.layer_norm_gradients, K.rms_norm_gradients):
        for a in f(x, g, None, eps=1e-5, dtype=np.float32):
            assert np.all(a == 0) and not np.signbit(a).any()


def test_dbeta_beyond_float64_partial_sums():
    g = np.array([[1e308], [1e308], [-1e308], [-0.5e308]])
    x = RNG.normal(size=(4, 1))
    counts = {}
    check("layer", x, g, None, 1e-5, counts=counts)
    assert counts["dbeta_fraction"] == 1
    check("layer", x, g, None, 1e-5, dt=np.float16)


def test_many_blocks(monkeypatch):
    """Rows in blocks of 2 (dγ's column sums merged block by block), with magnitudes that
    differ from block to block, and cancelling rows in different blocks."""
    monkeypatch.setattr(K, "BLOCK_ELEMENTS", 16)
    d = 8
    x = RNG.normal(size=(12, d)) * np.exp2(RNG.integers(-30, 30, size=(12, 1)))
    g = RNG.normal(size=(12, d)) * np.exp2(RNG.integers(-30, 30, size=(12, 1)))
    x[11], g[11] = 4 * x[0], -g[0]  # cancels row 0's dγ terms exactly (eps = 0)
    for dt in FORMATS:
        check("layer", x, g, None, 0.0, dt=dt)
        check("rms", x, g, RNG.normal(size=d), 1e-5, dt=dt)
