"""lneps.testing.two_pass_bound (module lneps.testing._private.two_pass): the older, narrower
bound of one kernel class, two-pass float32. Correct two-pass kernels, written here in several
summation orders and reciprocal square roots, stay within it on every family, and the bound is
not vacuous. The default tolerance's one home for "correct kernels pass" is
tests/book/test_zoo_grades.py; this file checks the two-pass bound alone."""

import re
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import lneps
from lneps.testing import assert_close, compare, families, two_pass_bound

BF16 = np.dtype(ml_dtypes.bfloat16)
SMALL = (np.float16, BF16, np.float32)

# --- two_pass_bound: what a correct two-pass float32 kernel can reach ----------------------
#
# The kernel below is written here, independently of lneps.book.kernel_zoo: float32 throughout,
# the mean and then the centred sum of squares, with a choice of summation order (NumPy's
# pairwise sum, or left to right), of the mean's division (by d, or times fl(1/d)) and of the
# reciprocal square root (1/sqrt: two roundings; correctly rounded; one float32 ulp above or
# below the correctly rounded value). It is judged by compare, i.e. by the exact reference.

F32 = np.float32


def _sequential(a):
    acc = np.zeros(a.shape[:-1], F32)
    for j in range(a.shape[-1]):
        acc = acc + a[..., j]
    return acc[..., None]


def _pairwise(a):
    return np.sum(a, axis=-1, keepdims=True, dtype=F32)


def _rsqrt(w, how):
    if how == "div":
        return F32(1) / np.sqrt(w)
    cr = (1.0 / np.sqrt(w.astype(np.float64))).astype(F32)  # float64 then once to float32
    return cr if how == "cr" else np.nextafter(cr, F32(np.inf) if how == "up" else F32(0))


def _two_pass(x, g, b, eps, total=_pairwise, rsqrt="div", reciprocal=False):
    xf = x.astype(F32)
    d = F32(x.shape[-1])
    mu = total(xf) * (F32(1) / d) if reciprocal else total(xf) / d
    t = xf - mu
    var = total(t * t) * (F32(1) / d) if reciprocal else total(t * t) / d
    n = t * _rsqrt(var + F32(eps), rsqrt)
    if g is not None:
        n = n * g.astype(F32)
    if b is not None:
        n = n + b.astype(F32)
    return n.astype(x.dtype)


VARIANTS = [
    (_pairwise, "div", False),
    (_sequential, "cr", True),
    (_sequential, "up", False),
    (_pairwise, "down", True),
    (_sequential, "div", False),
]


@pytest.mark.parametrize("dtype", SMALL, ids=str)
@pytest.mark.parametrize("d,rows", [(8, 64), (64, 32), (768, 8), (4096, 2)])
def test_a_correct_two_pass_kernel_stays_within_the_bound(dtype, d, rows):
    for eps in (1e-5, 1e-12):
        for name, (x, g, b) in families(dtype, d, rows=rows).items():
            bound = two_pass_bound(x, g, b, eps=eps)
            assert bound.shape == x.shape and bound.dtype == np.float64
            assert np.all(bound > 0), name
            for total, rsqrt, reciprocal in VARIANTS:
                y = _two_pass(x, g, b, eps, total, rsqrt, reciprocal)
                report = compare(y, x=x, gamma=g, beta=b, eps=eps)
                over = report.exceeding(bound)
                assert not over.any(), (
                    name,
                    eps,
                    total.__name__,
                    rsqrt,
                    reciprocal,
                    float(np.max(report.scaled_error / bound)),
                )


@pytest.mark.parametrize("dtype", (np.float16, BF16), ids=str)
def test_the_bound_is_not_vacuous_on_well_conditioned_rows(dtype):
    for d in (8, 64, 768, 4096):
        x = families(dtype, d, rows=8)["normal"].x
        bound = two_pass_bound(x)
        # near 0.5: the final rounding, where |y| >= 1; less where the output is smaller
        assert 0.5 < bound.max() < 1.0, d
        assert np.all(bound[np.abs(x.astype(np.float64)) > 2.5] > 0.5)


def test_the_bound_grows_with_the_offset_d_and_u():
    rng = np.random.default_rng(3)
    z = rng.normal(size=(1, 64))
    tops = [two_pass_bound((z + offset).astype(np.float32)).max() for offset in (0, 2**6, 2**12)]
    assert tops[0] < tops[1] < tops[2]
    assert tops[2] / tops[1] > 30  # D = gamma_{d+1} mean|x| r: in proportion to |mu|/sigma
    x = families(np.float16, 4096, rows=4)["normal"].x
    b = [two_pass_bound(x[:, :d]).max() for d in (8, 64, 768, 4096)]
    assert b == sorted(b)
    row = two_pass_bound(x)[0]
    u = np.abs(lneps.layer_norm(x.astype(np.float64))[0])
    big, small = u > 2, u < 0.5
    assert row[big].min() > row[small].max()


def test_the_bound_by_hand_on_a_constant_row():
    # A constant row c: z = 0 and y = beta exactly, so the bound is the offset term alone:
    # |c_i - y_i| <= |gamma| (D (1 + R)(1 + u)^2 (1 + u) + ...) with D = gamma_{d+1} |c| / sqrt(eps).
    d, c, eps = 16, 3.0, 2.0**-10
    x = np.full((1, d), c, np.float32)
    u = 2.0**-24
    g = d + 1
    D = g * u / (1 - g * u) * c / np.sqrt(eps)
    bound = two_pass_bound(x, eps=eps)[0, 0]
    # y = 0, scale 1: ulp(1) = 2^-23; R is at most a few u beyond D^2/2
    assert bound == pytest.approx(D / 2.0**-23, rel=1e-5)


def test_the_bound_is_capped_by_the_size_of_a_normalized_value():
    # On a constant float32 row whose float32 mean rounds, t_i = x_i - mu^ is one float32 ulp
    # and, with a tiny eps, a correct kernel returns about +-1 where the exact answer is 0: the
    # offset term alone allows millions of ulp of that. But t_i^2 is one of the squares summed,
    # so |n^_i| <= sqrt(d)(1 + O(u)): the bound is capped there, and still holds.
    d, eps = 8, 1e-12
    x = np.full((3, d), [[60000.3], [1.1], [-7.7]], dtype=np.float32)
    bound = two_pass_bound(x, eps=eps)
    cap = (
        np.sqrt(d) * (1 + 2.0**-18) / 2.0**-23 + 1
    )  # in ulp of 1 (y = 0, no gain), the roundings allowed
    assert np.all(bound <= cap) and np.all(bound[0] > np.sqrt(d) / 2.0**-23)  # row 0: the cap binds
    seen = 0.0
    for total, rsqrt, reciprocal in VARIANTS:
        y = _two_pass(x, None, None, eps, total, rsqrt, reciprocal)
        seen = max(seen, float(np.abs(y.astype(np.float64)).max()))
        assert not compare(y, x=x, eps=eps).exceeding(bound).any()
    assert seen > 0.5  # the rounded mean does show, amplified to the size of a normalized value
    # Far beyond the size of a normalized value: what a running-mean kernel returned for eight
    # float16 numbers 60000 with eps = 1e-12 (chapter "What the frameworks compute").
    x16 = np.full((1, d), 60000, np.float16)
    y16 = np.full((1, d), -2048, np.float16)
    assert compare(y16, x=x16, eps=eps).exceeding(two_pass_bound(x16, eps=eps)).all()


def test_known_defects_exceed_the_bound():
    # a one-pass E[x^2] - mu^2 float32 kernel on offset rows
    x = families(np.float32, 64)["offset"].x
    xf = x.astype(F32)
    mu = xf.mean(axis=-1, keepdims=True, dtype=F32)
    var = np.maximum((xf * xf).mean(axis=-1, keepdims=True, dtype=F32) - mu * mu, F32(0))
    y = (xf - mu) / np.sqrt(var + F32(1e-5))
    assert compare(y, x=x, eps=1e-5).exceeding(two_pass_bound(x)).mean() > 0.5
    # everything in float16
    for name in ("normal", "offset", "near_constant"):
        x = families(np.float16, 768, rows=8)[name].x
        y = lneps.layer_norm(x, compute_dtype=np.float16)
        assert compare(y, x=x, eps=1e-5).exceeding(two_pass_bound(x)).mean() > 0.1, name
    # eps added in float16 after the float32 variance is rounded to float16
    x = families(np.float16, 768, rows=8)["normal"].x
    xf = x.astype(F32)
    t = xf - xf.mean(axis=-1, keepdims=True, dtype=F32)
    w = (
        (t * t).mean(axis=-1, keepdims=True, dtype=F32).astype(np.float16) + np.float16(1e-5)
    ).astype(F32)
    y = (t / np.sqrt(w)).astype(np.float16)
    assert compare(y, x=x, eps=1e-5).exceeding(two_pass_bound(x)).any()
    # the unbiased variance, wherever d is small enough for 1/(2d) to show
    x = families(BF16, 64, rows=8)["normal"].x
    y = (_two_pass(x.astype(F32), None, None, 1e-5) * F32(np.sqrt(63 / 64))).astype(BF16)
    assert compare(y, x=x, eps=1e-5).exceeding(two_pass_bound(x)).mean() > 0.5


def test_assert_close_takes_the_bound_and_names_it():
    x, g, b = families(np.float16, 64, rows=8)["cancelling_beta"]
    bound = two_pass_bound(x, g, b)
    assert_close(_two_pass(x, g, b, 1e-5), x=x, gamma=g, beta=b, max_ulp=bound, eps=1e-5)
    naive = lneps.layer_norm(x, g, b, compute_dtype=np.float16)
    report = compare(naive, x=x, gamma=g, beta=b, eps=1e-5)
    over = report.exceeding(bound)
    with pytest.raises(AssertionError) as info:
        assert_close(naive, x=x, gamma=g, beta=b, max_ulp=bound, eps=1e-5)
    msg = str(info.value)
    assert f"{int(over.sum())} of {x.size} elements exceed their bound (here " in msg
    ratio = np.where(over, report.scaled_error / bound, -1)
    worst = tuple(int(i) for i in np.unravel_index(np.argmax(ratio), ratio.shape))
    assert f"worst at index {worst}" in msg
    # a bound per column broadcasts; a wrong shape, a negative or NaN bound are refused
    assert_close(naive, x=x, gamma=g, beta=b, max_ulp=np.full(x.shape[-1], 1e9), eps=1e-5)
    with pytest.raises(ValueError, match="broadcast"):
        assert_close(naive, x=x, gamma=g, beta=b, max_ulp=np.ones(3), eps=1e-5)
    with pytest.raises(ValueError, match=">= 0"):
        assert_close(naive, x=x, gamma=g, beta=b, max_ulp=np.full(x.shape, np.nan), eps=1e-5)


def test_two_pass_bound_refuses_what_its_model_does_not_cover():
    x = families(np.float16, 8)["normal"].x
    with pytest.raises(TypeError, match="float64"):
        two_pass_bound(x.astype(np.float64))
    with pytest.raises(TypeError, match="dtype"):
        two_pass_bound(x, dtype=np.float64)
    with pytest.raises(ValueError, match="float32 cannot hold"):
        two_pass_bound(x, gamma=np.full(8, 0.1))
    with pytest.raises(ValueError, match="eps"):
        two_pass_bound(x, eps=-1.0)
    big = np.full((1, 8), 3e38, np.float32)
    big[0, 0] = -3e38
    assert np.all(np.isinf(two_pass_bound(big)))


def test_the_readme_kernel_test_runs(tmp_path):
    """The README's "Testing your kernel" block, run as it is written, passes under pytest."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    match = re.search(r"<!-- readme-test: kernel -->\n```python\n(.*?)```", readme, re.S)
    assert match, "README.md has no block marked readme-test: kernel"
    (tmp_path / "test_my_layer_norm.py").write_text(match.group(1), encoding="utf-8")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:nbval",
            str(tmp_path / "test_my_layer_norm.py"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "21 passed" in run.stdout
