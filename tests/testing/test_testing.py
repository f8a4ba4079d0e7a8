"""lneps.testing: compare, assert_close and families, on real values.

The hand-built cases have exact outputs worked out on paper; the families' midpoints are checked
in exact rational arithmetic (fractions), without lneps; the correctly rounded values are checked
against lneps's independent exact oracle.
"""

import re
import subprocess
import sys
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import lneps
from lneps import oracle
from lneps.testing import DEFAULT, OPS, Family, Report, assert_close, compare, families

BF16 = np.dtype(ml_dtypes.bfloat16)
SMALL = (np.float16, BF16, np.float32)


def _p(dtype):
    return int(ml_dtypes.finfo(dtype).nmant) + 1


# --- lneps's own output is correctly rounded; the naive layer is not --------------------------


@pytest.mark.parametrize("dtype", SMALL, ids=str)
def test_lneps_default_passes_half_an_ulp_on_every_family(dtype):
    for name, (x, g, b) in families(dtype, 64).items():
        y = lneps.layer_norm(x, g, b)
        report = assert_close(y, x=x, gamma=g, beta=b, max_ulp=0.5, metric="ulp", eps=1e-5)
        assert report.correctly_rounded == 1.0, name
        assert 0 <= report.max_ulp <= 0.5, name
        assert report.n == x.size and report.dtype == np.dtype(dtype) and report.uncertain == 0


@pytest.mark.parametrize("dtype", SMALL, ids=str)
def test_the_reference_is_the_exact_oracles(dtype):
    for name, (x, g, b) in families(dtype, 32, rows=16).items():
        report = compare(lneps.layer_norm(x, g, b), x=x, gamma=g, beta=b, eps=1e-5)
        r = oracle.layer_norm_rounded(x, g, b, eps=1e-5, dtype=dtype)
        np.testing.assert_array_equal(report.reference, r, err_msg=name)
        value, bound = oracle.layer_norm_value(x, g, b, eps=1e-5)
        assert np.all(np.abs(report.exact - value) <= bound + np.spacing(np.abs(value))), name


def test_float64_errors_are_measured_against_the_correctly_rounded_value():
    x = families(np.float64, 16)["normal"].x
    y = lneps.layer_norm(x)
    report = compare(y, x=x, eps=1e-5)
    assert (report.max_ulp, report.correctly_rounded) == (0.0, 1.0)
    np.testing.assert_array_equal(report.exact, y)
    bad = y.copy()
    bad[2, 3] = np.nextafter(bad[2, 3], np.inf)
    report = compare(bad, x=x, eps=1e-5)
    assert report.worst_ulp_index == (2, 3)
    assert report.max_ulp == 1.0 or report.max_ulp == 0.5  # one spacing (half, just below 2^k)


@pytest.mark.parametrize("name", ["normal", "offset", "near_constant", "cancelling_beta"])
def test_a_naive_float16_layer_fails_and_says_where(name):
    x, g, b = families(np.float16, 64)[name]
    y = lneps.layer_norm(x, g, b, compute_dtype=np.float16)
    report = compare(y, x=x, gamma=g, beta=b, eps=1e-5)
    over = int(report.exceeding(1.0).sum())
    assert over > 0 and report.correctly_rounded < 0.9
    with pytest.raises(AssertionError) as info:
        assert_close(y, x=x, gamma=g, beta=b, eps=1e-5, max_ulp=1.0)
    msg = str(info.value)
    assert f"{over} of {x.size} elements exceed 1.0 ulp" in msg
    assert f"worst at index {report.worst_index}" in msg
    i = report.worst_index[0]
    assert f"input row x[{i}, :]" in msg
    assert repr(float(report.exact[report.worst_index])) in msg
    assert repr(float(y[report.worst_index])) in msg


def test_the_naive_layer_misses_the_ties_of_the_midpoint_family():
    x, g, b = families(np.float16, 64)["midpoint"]
    y = lneps.layer_norm(x, g, b, compute_dtype=np.float16)
    report = compare(y, x=x, gamma=g, beta=b, eps=1e-5)
    assert 0.3 < report.correctly_rounded < 0.7  # it rounds u = ±1: the tie, half the time wrong
    assert 0.5 < report.max_ulp < 0.52
    with pytest.raises(AssertionError, match="exceed 0.5 ulp"):
        assert_close(y, x=x, gamma=g, beta=b, max_ulp=0.5, metric="ulp", eps=1e-5)


# --- the metrics on hand-built rows ---------------------------------------------------------


def test_one_ulp_off_and_half_an_ulp_below_a_power_of_two():
    x = np.array([[1, -1, 1, -1]], dtype=np.float16)  # eps = 0: the output is x itself
    y = lneps.layer_norm(x, eps=0.0)
    np.testing.assert_array_equal(y, x)
    up = y.copy()
    up[0, 2] = np.nextafter(up[0, 2], np.float16(np.inf))  # 1 + 2^-10
    report = compare(up, x=x, eps=0.0)
    assert (report.max_ulp, report.max_ulp_scaled, report.max_abs) == (1.0, 1.0, 2.0**-10)
    assert report.worst_index == report.worst_ulp_index == (0, 2)
    assert report.correctly_rounded == 3 / 4
    # -1 -> -(1 - 2^-11): the spacing below 1 is half the ulp at the exact value 1.
    below = y.copy()
    below[0, 1] = np.nextafter(below[0, 1], np.float16(np.inf))
    report = compare(below, x=x, eps=0.0)
    assert report.max_ulp == 0.5 and report.correctly_rounded == 3 / 4
    with pytest.raises(AssertionError, match=r"1 of 4 elements exceed 0.5 ulp"):
        assert_close(below, x=x, eps=0.0, max_ulp=0.5, metric="ulp")
    assert assert_close(below, x=x, eps=0.0, max_ulp=0.51, metric="ulp").max_ulp == 0.5
    assert assert_close(below, x=x, eps=0.0, max_ulp=1.0).correctly_rounded == 3 / 4


@pytest.mark.parametrize("dtype", SMALL, ids=str)
def test_a_flipped_element_is_the_worst(dtype):
    x = families(dtype, 64)["normal"].x
    y = lneps.layer_norm(x)
    i, j = map(int, np.argwhere(np.abs(y.astype(np.float64)) >= 1)[7])
    bad = y.copy()
    bad[i, j] = (
        np.nextafter(bad[i, j], bad[i, j] * 2)
        if dtype != BF16
        else ((bad[i, j].view(np.uint16) + 1).view(BF16))
    )  # away from 0
    report = compare(bad, x=x, eps=1e-5)
    assert report.worst_index == report.worst_ulp_index == (i, j)
    assert report.correctly_rounded == (x.size - 1) / x.size
    e = report.exact[i, j]
    spacing = float(lneps.formats.ulp(e, dtype))
    assert report.max_ulp == abs(float(bad[i, j]) - e) / spacing
    assert 0.5 < report.max_ulp < 1.5


def test_the_scaled_metric_on_a_cancelled_output():
    # u = ±1 exactly (eps = 0); beta_0 = -(1 - 2^-11) leaves the exact output 2^-11.
    x = np.array([[1.0, -1.0]], dtype=np.float16)
    g = np.array([1.0, 1.0], dtype=np.float16)
    b = np.array([-(1 - 2.0**-11), 0.0], dtype=np.float16)
    actual = np.array([[0.0, -1.0]], dtype=np.float16)  # the kernel lost the 2^-11
    report = compare(actual, x=x, gamma=g, beta=b, eps=0.0)
    assert report.exact[0, 0] == 2.0**-11 and report.reference[0, 0] == 2.0**-11
    # ulp(2^-11) = 2^-21 in float16, ulp(max(2^-11, |gamma| = 1)) = 2^-10
    assert (report.max_ulp, report.max_ulp_scaled, report.max_abs) == (1024.0, 0.5, 2.0**-11)
    assert report.correctly_rounded == 0.5 and report.exact_zero == 0
    assert (
        compare(actual, x=x, gamma=g, beta=b, eps=0.0, scale=4.0).max_ulp_scaled == 0.125
    )  # ulp(4) = 2^-8
    assert compare(actual, x=x, gamma=g, beta=b, eps=0.0, scale=0).max_ulp_scaled == 1024.0
    assert (
        compare(actual, x=x, gamma=g, beta=b, eps=0.0, scale=np.array([[4.0, 0.0]])).max_ulp_scaled
        == 0.125
    )
    assert (
        compare(actual, x=x, gamma=1, beta=b, eps=0.0).max_ulp_scaled == 0.5
    )  # a Python int gamma
    assert_close(actual, x=x, gamma=g, beta=b, eps=0.0, max_ulp=1.0)  # within 1 ulp of |gamma u|
    with pytest.raises(AssertionError, match=r"1 of 2 elements exceed 1.0 ulp \(ulp metric"):
        assert_close(actual, x=x, gamma=g, beta=b, eps=0.0, metric="ulp", max_ulp=1.0)


def test_an_exact_zero_is_measured_in_subnormal_spacings():
    x = np.array([[1.0, -1.0]], dtype=np.float16)
    b = np.array([-1.0, 0.0], dtype=np.float16)  # y_0 = 1 - 1 = 0 exactly
    actual = np.array([[2.0**-24, -1.0]], dtype=np.float16)
    report = compare(actual, x=x, beta=b, eps=0.0)
    assert report.exact_zero == 1 and report.max_ulp == 1.0  # the smallest subnormal
    assert report.max_ulp_scaled == 2.0**-24 / 2.0**-10
    assert (
        compare(np.array([[-0.0, -1.0]], dtype=np.float16), x=x, beta=b, eps=0.0).correctly_rounded
        == 1.0
    )


def test_non_finite_outputs():
    x = np.array([[1.0, 2.0, 4.0], [3.0, 3.0, 3.0]], dtype=np.float32)
    y = lneps.layer_norm(x, eps=0.0)  # the constant row is 0/0 = NaN
    assert np.isnan(y[1]).all()
    report = compare(y, x=x, eps=0.0)
    assert report.correctly_rounded == 1.0 and 0 < report.max_ulp <= 0.5
    assert np.all(report.ulp_error[1] == 0)  # NaN where NaN is the answer: no error
    bad = y.copy()
    bad[0, 1] = np.inf
    bad[1, 0] = 0.0
    report = compare(bad, x=x, eps=0.0)
    assert np.isinf(report.ulp_error[0, 1]) and np.isinf(report.ulp_error[1, 0])
    assert report.max_ulp == report.max_ulp_scaled == report.max_abs == np.inf
    assert report.correctly_rounded == 4 / 6


def test_rms_norm_uses_torchs_default_eps_for_x_dtype():
    # mean(x^2) = 2^-24; eps = 2^-23 (float32's) gives 1/sqrt(3), float64's 2^-52 would give ~1.
    x = np.full((1, 4), 2.0**-12, dtype=np.float16)
    y = lneps.rms_norm(x)
    assert abs(float(y[0, 0]) - 3**-0.5) < 1e-3
    assert (
        assert_close(
            y, x=x, op="rms_norm", max_ulp=0.5, metric="ulp", eps=DEFAULT
        ).correctly_rounded
        == 1.0
    )
    with pytest.raises(AssertionError):
        assert_close(y, x=x, op="rms_norm", eps=2.0**-52, max_ulp=1.0)


def test_group_and_batch_norm_and_a_callable():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 6, 5)).astype(np.float32)
    g = np.linspace(0.5, 2, 6).astype(np.float32)
    y = lneps.group_norm(x, 3, g, g)
    assert (
        compare(
            y, x=x, op="group_norm", num_groups=3, gamma=g, beta=g, eps=DEFAULT
        ).correctly_rounded
        == 1.0
    )
    bad = y.copy()
    bad[1, 4, 2] *= np.float32(1 + 2.0**-20)
    with pytest.raises(
        AssertionError, match=r"index \(1, 4, 2\)[\s\S]*input row x\[1, 4:6, \.\.\.\]"
    ):
        assert_close(
            bad, x=x, op="group_norm", num_groups=3, gamma=g, beta=g, eps=DEFAULT, max_ulp=1.0
        )
    # gamma scales the scaled metric per channel, as group_norm applies it
    report = compare(bad, x=x, op="group_norm", num_groups=3, gamma=g * 0 + 64, beta=g, eps=DEFAULT)
    assert report.max_ulp_scaled < report.max_ulp
    t = rng.normal(size=(8, 3)).astype(np.float16)
    gb = np.array([1, 2, 3], dtype=np.float16)
    yb = lneps.batch_norm(t, gb)  # axis 0, batch_norm's own default
    assert compare(yb, x=t, op="batch_norm", gamma=gb, eps=DEFAULT).correctly_rounded == 1.0
    y0 = lneps.batch_norm(t)
    assert compare(y0, x=t, op="batch_norm", eps=DEFAULT).correctly_rounded == 1.0
    assert (
        compare(y0, x=t, op="batch_norm", axis=-1, eps=DEFAULT).correctly_rounded < 0.5
    )  # normalizing rows instead
    with pytest.raises(AssertionError, match=r"input row x\[:, \d\]"):
        assert_close(
            yb + np.float16(0.01), x=t, op="batch_norm", gamma=gb, eps=DEFAULT, max_ulp=1.0
        )
    rm, rv = np.float32([0.1, -0.2, 0.3]), np.float32([1.0, 0.5, 2.0])
    ye = lneps.batch_norm(t, training=False, running_mean=rm, running_var=rv)
    assert (
        compare(
            ye, x=t, op="batch_norm", training=False, running_mean=rm, running_var=rv, eps=DEFAULT
        ).max_ulp
        <= 0.5
    )

    calls = []

    def mine(z, gamma, beta, axis=-1, **kw):
        calls.append((z.dtype, gamma, beta, axis, kw))
        return lneps.layer_norm(z, gamma, beta, axis=axis, **kw)

    x2 = families(np.float16, 8, rows=4)["offset"].x
    assert compare(lneps.layer_norm(x2, eps=1e-3), x=x2, op=mine, eps=1e-3).correctly_rounded == 1.0
    # called once on float64 x; again in x's format only where a float64 value lies on a midpoint
    assert [c[0] for c in calls] == [np.float64] and calls[0][3:] == (-1, {"eps": 1e-3})
    calls.clear()
    compare(lneps.layer_norm(x2), x=x2, op=mine, eps=DEFAULT)
    assert calls[0][4] == {}  # no eps given, none passed


def test_x_in_another_format_than_actual():
    x32 = families(np.float32, 32, rows=16)["normal"].x
    y16 = oracle.layer_norm_rounded(x32, eps=1e-5, dtype=np.float16).astype(np.float16)
    report = compare(y16, x=x32, eps=1e-5)
    assert report.correctly_rounded == 1.0 and report.max_ulp <= 0.5 and report.uncertain == 0
    # float32 x holding float16 values: lneps on the float16 values is the reference
    x16 = families(np.float16, 32, rows=16)["midpoint"]
    y = lneps.layer_norm(x16.x, x16.gamma, x16.beta, eps=0.0)
    r = compare(y, x=x16.x.astype(np.float32), gamma=x16.gamma, beta=x16.beta, eps=0.0)
    assert r.correctly_rounded == 1.0 and r.uncertain == 0
    # u = ±1 exactly, gamma u = 1 + 2^-11 (a float16 midpoint), beta 2^-60: float64 rounds to the
    # midpoint, so the float16 reference cannot be certified and is flagged.
    x = np.array([[1 + 2.0**-20, -1 - 2.0**-20]], dtype=np.float32)
    g = np.array([1 + 2.0**-11, 1.0], dtype=np.float32)
    b = np.array([2.0**-60, 0.0], dtype=np.float32)
    report = compare(
        np.array([[1 + 2.0**-10, -1.0]], dtype=np.float16), x=x, gamma=g, beta=b, eps=0.0
    )
    assert report.uncertain == 1 and "uncertain" in str(report)
    assert oracle.layer_norm_rounded(x, g, b, eps=0.0, dtype=np.float16)[0, 0] == 1 + 2.0**-10


def test_bfloat16_lists_dlpack_and_array_objects():
    x = families(BF16, 16, rows=4)["offset"].x
    y = lneps.layer_norm(x)
    assert y.dtype == BF16 and compare(y, x=x, eps=1e-5).correctly_rounded == 1.0

    class Pack:  # only DLPack
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kw):
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    class Arr:  # only __array__
        def __init__(self, a):
            self.a = a

        def __array__(self, dtype=None, copy=None):
            return self.a

    x32 = families(np.float32, 8, rows=3)["normal"].x
    y32 = lneps.layer_norm(x32)
    assert compare(Pack(y32), x=Arr(x32), eps=1e-5).correctly_rounded == 1.0
    rows = [[1.0, 2.0, 4.0], [0.5, -3, 7]]
    report = compare(lneps.layer_norm(np.array(rows)).tolist(), x=rows, eps=1e-5)
    assert report.dtype == np.float64 and report.correctly_rounded == 1.0


def test_torch_tensors():
    torch = pytest.importorskip("torch")
    x = families(np.float16, 16, rows=4)["offset"].x
    for tdtype, ndtype in (
        (torch.float16, np.float16),
        (torch.bfloat16, BF16),
        (torch.float32, np.float32),
    ):
        xn = x.astype(ndtype)
        tx = torch.tensor(xn.astype(np.float32)).to(tdtype).requires_grad_(True)
        naive = torch.nn.functional.layer_norm(tx, (16,), eps=1e-5)
        report = compare(naive, x=tx, eps=1e-5)
        assert report.dtype == np.dtype(ndtype) and report.n == x.size
        exact = torch.tensor(lneps.layer_norm(xn).astype(np.float32)).to(tdtype)
        assert compare(exact, x=tx, eps=1e-5).correctly_rounded == 1.0


def test_jax_arrays():
    jnp = pytest.importorskip("jax.numpy")
    x = families(BF16, 16, rows=4)["normal"].x
    assert (
        compare(jnp.asarray(lneps.layer_norm(x)), x=jnp.asarray(x), eps=1e-5).correctly_rounded
        == 1.0
    )


def test_clear_errors():
    x = np.ones((2, 4), dtype=np.float32)
    x[:, 0] = 2
    y = lneps.layer_norm(x)
    with pytest.raises(ValueError, match=r"\(4, 2\).*\(2, 4\)"):
        compare(y.T, x=x, eps=1e-5)
    with pytest.raises(TypeError, match="int64"):
        compare(np.ones((2, 4), dtype=np.int64), x=x, eps=1e-5)
    with pytest.raises(TypeError, match="complex128"):
        compare(y, x=x.astype(np.complex128), eps=1e-5)
    with pytest.raises(TypeError, match="gamma has dtype bool"):
        compare(y, x=x, gamma=np.ones(4, dtype=bool), eps=1e-5)
    with pytest.raises(ValueError, match="layer_norm, rms_norm, group_norm, batch_norm"):
        compare(y, x=x, op="softmax", eps=1e-5)
    with pytest.raises(ValueError, match="rms_norm has no beta"):
        compare(y, x=x, op="rms_norm", beta=np.zeros(4, np.float32), eps=DEFAULT)
    with pytest.raises(ValueError, match="group_norm takes no axis"):
        compare(y, x=x, op="group_norm", num_groups=1, axis=-1, eps=DEFAULT)
    with pytest.raises(ValueError, match="compute_dtype"):
        compare(y, x=x, compute_dtype=np.float16, eps=1e-5)
    with pytest.raises(ValueError, match="metric"):
        assert_close(y, x=x, metric="relative", eps=1e-5)
    with pytest.raises(ValueError, match="max_ulp"):
        assert_close(y, x=x, max_ulp=-1, eps=1e-5)
    with pytest.raises(ValueError, match="scale"):
        compare(y, x=x, scale=-1.0, eps=1e-5)
    with pytest.raises(ValueError, match="scale"):
        compare(y, x=x, scale=np.ones(3), eps=1e-5)


def test_report():
    x = families(np.float16, 8, rows=2)["normal"].x
    y = lneps.layer_norm(x)
    report = compare(y, x=x, eps=1e-5)
    assert isinstance(report, Report) and report == compare(y.copy(), x=x, eps=1e-5)
    with pytest.raises(AttributeError):
        report.n = 3
    text = str(report)
    assert "layer_norm, float16, 16 elements: 100.00% correctly rounded (0 not)" in text
    assert re.search(r"worst 0\.\d+ ulp at \(\d, \d\)", text) and "exact zeros: 0" in text
    assert repr(DEFAULT) == "<op's default>" and OPS == (
        "layer_norm",
        "rms_norm",
        "group_norm",
        "batch_norm",
        "layer_norm_backward",
        "rms_norm_backward",
    )


# --- families -------------------------------------------------------------------------------

NAMES = [
    "normal",
    "offset",
    "near_constant",
    "constant",
    "wide_range",
    "midpoint",
    "cancelling_beta",
]


@pytest.mark.parametrize("dtype", (*SMALL, np.float64), ids=str)
def test_family_shapes_dtypes_and_determinism(dtype):
    fams = families(dtype, 24, rows=10, seed=5)
    assert list(fams) == NAMES
    again, other = families(dtype, 24, rows=10, seed=5), families(dtype, 24, rows=10, seed=6)
    for name, fam in fams.items():
        assert isinstance(fam, Family)
        assert fam.x.shape == (10, 24) and fam.x.dtype == np.dtype(dtype), name
        for p in (fam.gamma, fam.beta):
            assert p is None or (p.shape == (24,) and p.dtype == np.dtype(dtype)), name
        assert (fam.gamma is None) == (name not in ("midpoint", "cancelling_beta"))
        np.testing.assert_array_equal(fam.x, again[name].x)
        assert not np.array_equal(fam.x, other[name].x), name
        assert np.all(np.isfinite(fam.x.astype(np.float64))), name
    x = {k: v.x.astype(np.float64) for k, v in fams.items()}
    assert (
        np.all(x["constant"] == x["constant"][:, :1]) and np.unique(x["constant"][:, 0]).size == 10
    )
    p = _p(dtype)
    off = np.abs(x["offset"].mean(axis=1))
    assert np.all(np.abs(off - 2.0 ** (p - 4)) < 2)
    nc = x["near_constant"]
    steps = (nc - np.median(nc, axis=1, keepdims=True)) / lneps.formats.ulp(
        np.median(nc, axis=1, keepdims=True), dtype
    )
    assert np.all(np.abs(steps) <= 6) and np.all(nc.max(axis=1) > nc.min(axis=1))


@pytest.mark.parametrize("dtype", (*SMALL, np.float64), ids=str)
def test_wide_range_spans_the_exponents_without_overflow(dtype):
    fi = ml_dtypes.finfo(dtype)
    x = families(dtype, 64, rows=64)["wide_range"].x.astype(np.float64)
    exps = np.frexp(np.abs(x))[1] - 1
    span = exps.max() - exps.min()
    assert exps.min() >= int(fi.minexp) and span >= 0.55 * (int(fi.maxexp) - int(fi.minexp))
    assert np.all(64 * x.max() ** 2 <= float(fi.max))  # d max|x|^2: even the sum of squares fits


def _spacing(y: Fraction, p: int, emin: int) -> Fraction:
    a = abs(y)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    return Fraction(2) ** (max(e, emin) - p + 1)


@pytest.mark.parametrize("dtype", (*SMALL, np.float64), ids=str)
def test_midpoint_outputs_are_exact_ties(dtype):
    p, emin = _p(dtype), int(ml_dtypes.finfo(dtype).minexp)
    x, g, b = families(dtype, 10, rows=12, seed=1)["midpoint"]
    eps = Fraction(1e-5)
    for row in x:
        v = [Fraction(float(t)) for t in row]
        mu = sum(v) / len(v)
        var = sum((t - mu) ** 2 for t in v) / len(v)
        c = abs(v[0] - mu)
        assert var == c * c  # u = (x - mu)/c = ±1 exactly when eps = 0
        for t, gj, bj in zip(v, g, b):
            gj, bj = Fraction(float(gj)), Fraction(float(bj))
            u = (t - mu) / c
            assert u in (1, -1)
            y = gj * u + bj
            h = _spacing(y, p, emin) / 2
            assert (y / h).denominator == 1 and (
                y / h
            ).numerator % 2 == 1  # an odd number of halves
            # with eps > 0: |y_eps - y| = |gamma| (1 - |u_eps|) <= |gamma| eps / (c^2 + eps)
            assert abs(gj) * eps / (c * c + eps) < Fraction(2**11) * eps * h


@pytest.mark.parametrize("dtype", SMALL, ids=str)
def test_lneps_rounds_the_midpoint_ties_to_even(dtype):
    x, g, b = families(dtype, 16)["midpoint"]
    y = lneps.layer_norm(x, g, b, eps=0.0)
    report = assert_close(y, x=x, gamma=g, beta=b, eps=0.0, max_ulp=0.5, metric="ulp")
    assert np.all(report.ulp_error == 0.5)  # every element a tie
    last_bit = y.view(np.uint16 if np.dtype(dtype).itemsize == 2 else np.uint32) & 1
    assert np.all(last_bit == 0)
    odd = (2 * report.exact - report.reference).astype(dtype)  # the tie's other neighbour
    assert np.all(compare(odd, x=x, gamma=g, beta=b, eps=0.0).ulp_error == 0.5)
    with pytest.raises(AssertionError, match=f"{x.size} of {x.size} elements exceed 0.5 ulp"):
        assert_close(odd, x=x, gamma=g, beta=b, eps=0.0, max_ulp=0.5, metric="ulp")


def test_cancelling_beta_cancels():
    x, g, b = families(np.float32, 64)["cancelling_beta"]
    y = lneps.layer_norm(x, g, b, eps=0.0).astype(np.float64)
    assert np.all(np.abs(y[0]) <= np.abs(g.astype(np.float64)) * 2.0**-23)  # beta's rounding
    assert np.all(np.abs(y) < 2.0**-12)


def test_odd_d_has_no_midpoint_family_and_bad_arguments():
    assert "midpoint" not in families(np.float16, 7) and "midpoint" in families(np.float16, 8)
    with pytest.raises(TypeError, match="int32"):
        families(np.int32, 8)
    with pytest.raises(ValueError, match="d"):
        families(np.float16, 0)


def test_importing_lneps_testing_imports_no_framework():
    code = (
        "import lneps.testing, sys; assert 'torch' not in sys.modules and 'jax' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    assert lneps.testing is sys.modules["lneps.testing"]
