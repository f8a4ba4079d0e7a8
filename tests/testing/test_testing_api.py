"""lneps.testing's call has no traps: the kernel's input by keyword, unknown keywords named, eps
required, NaN and overflow never passing, and a message that shows the worst element and names
the known defects."""

import ml_dtypes
import numpy as np
import pytest

import lneps
import lneps.testing as lt

BF16 = np.dtype(ml_dtypes.bfloat16)


def _rows(dtype=np.float16, d=64, rows=8, seed=0):
    return np.random.default_rng(seed).normal(size=(rows, d)).astype(dtype)


@pytest.mark.parametrize("fn", [lt.compare, lt.assert_close])
def test_a_second_positional_argument_asks_for_x(fn):
    x = _rows()
    y = lneps.layer_norm(x)
    # written the numpy.testing / torch.testing way: the expected output as the second argument
    with pytest.raises(TypeError, match=r"only positional argument.*x=x"):
        fn(y, y, eps=1e-5)


@pytest.mark.parametrize("fn", [lt.compare, lt.assert_close])
@pytest.mark.parametrize(
    "kw, named, hint",
    [
        ("max_ulps", "max_ulps", "max_ulp="),
        ("rtol", "rtol", "in ulp"),
        ("expected", "expected", "x="),
        ("num_group", "num_group", None),
        ("epsilon", "epsilon", "eps="),
    ],
)
def test_an_unknown_keyword_is_named(fn, kw, named, hint):
    x = _rows()
    y = lneps.layer_norm(x)
    if fn is lt.compare and kw == "max_ulps":
        hint = None  # compare has no max_ulp
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{named}'") as info:
        fn(y, x=x, eps=1e-5, **{kw: 1})
    if hint:
        assert hint in str(info.value)
    assert "layer_norm() got" not in str(info.value)  # never the reference's own complaint


def test_the_op_keywords_are_known_and_suggested():
    x = _rows(d=8).reshape(2, 4, 8)
    y = lneps.group_norm(x, 2)
    assert lt.compare(y, x=x, op="group_norm", num_groups=2, eps=1e-5).correctly_rounded == 1.0
    with pytest.raises(TypeError, match=r"'num_group'.*did you mean num_groups="):
        lt.compare(y, x=x, op="group_norm", num_group=2, eps=1e-5)


def test_eps_and_x_are_required():
    x = _rows()
    y = lneps.layer_norm(x)
    with pytest.raises(TypeError, match="needs eps="):
        lt.assert_close(y, x=x)
    with pytest.raises(TypeError, match="needs the kernel's input"):
        lt.assert_close(y, eps=1e-5)
    assert (
        lt.compare(y, x=x, eps=lt.DEFAULT).correctly_rounded == 1.0
    )  # the op's own default, asked for


def test_the_output_format_is_read_from_actual():
    x = _rows(np.float32, d=256)
    for dt in (np.float16, BF16, np.float32):
        report = lt.compare(lneps.layer_norm(x).astype(dt), x=x, eps=1e-5)
        assert report.dtype == dt
    # a correct float32 kernel whose output is stored in float16 passes the default tolerance
    two_pass = _two_pass(x, 1e-5).astype(np.float16)
    lt.assert_close(two_pass, x=x, eps=1e-5, dtype=np.float16)


def _two_pass(x, eps):
    xf = x.astype(np.float32)
    t = xf - xf.mean(axis=-1, keepdims=True, dtype=np.float32)
    var = np.mean(t * t, axis=-1, keepdims=True, dtype=np.float32)
    return t * (np.float32(1) / np.sqrt(var + np.float32(eps)))


def test_nan_where_the_exact_value_is_finite_never_passes():
    x = _rows(np.float16)
    y = lneps.layer_norm(x).copy()
    y[3, 5] = np.nan
    for bound in (np.inf, 1e30):
        with pytest.raises(AssertionError, match="1 of 512 elements"):
            lt.assert_close(y, x=x, eps=1e-5, max_ulp=bound)
    y[3, 5] = np.inf
    with pytest.raises(AssertionError):
        lt.assert_close(y, x=x, eps=1e-5, max_ulp=np.inf)


def test_a_number_where_the_exact_value_is_nan_fails():
    x = np.full((2, 8), 3.0, dtype=np.float32)  # constant rows, eps = 0: 0/0
    nan = lneps.layer_norm(x, eps=0.0)
    assert np.isnan(nan).all()
    lt.assert_close(nan, x=x, eps=0.0, max_ulp=1.0)
    with pytest.raises(AssertionError, match="16 of 16"):
        lt.assert_close(np.zeros_like(x), x=x, eps=0.0, max_ulp=np.inf)


def test_checks_do_not_switch_themselves_off_on_huge_rows():
    # float32 rows with |x| near 3e19: a float32 sum of squares overflows, so the worst-case
    # bound is infinite there; an all-NaN output must still fail
    x = (_rows(np.float32, d=64) * np.float32(3e19)).astype(np.float32)
    assert np.isfinite(lneps.layer_norm(x)).all()
    with pytest.raises(AssertionError, match="512 of 512"):
        lt.assert_close(np.full_like(x, np.nan), x=x, eps=1e-5)
    with pytest.raises(AssertionError, match="512 of 512"):
        lt.assert_close(np.full_like(x, np.nan), x=x, eps=1e-5, max_ulp=np.inf)


def test_err_msg_is_appended_and_the_traceback_hidden():
    x = _rows()
    y = (lneps.layer_norm(x) * np.float16(1.5)).astype(np.float16)
    with pytest.raises(AssertionError) as info:
        lt.assert_close(y, x=x, eps=1e-5, err_msg="kernel v2, d=64")
    assert str(info.value).rstrip().endswith("kernel v2, d=64")
    # pytest hides frames whose locals set __tracebackhide__, as numpy.testing's do
    assert (
        lt.assert_close.__code__.co_varnames[:0] == ()
        and "__tracebackhide__" in lt.assert_close.__code__.co_varnames
    )


def test_the_message_shows_the_row_statistics_gamma_beta_and_the_ratio():
    x = _rows(np.float16, d=64, rows=4)
    g = np.linspace(0.5, 2, 64).astype(np.float16)
    b = np.linspace(-1, 1, 64).astype(np.float16)
    y = lneps.layer_norm(x, g, b).copy()
    y[2, 10] = np.float16(float(y[2, 10]) + 0.25)
    with pytest.raises(AssertionError) as info:
        lt.assert_close(y, x=x, gamma=g, beta=b, eps=1e-5, max_ulp=1.0)
    text = str(info.value)
    assert "worst at index (2, 10)" in text
    assert "row's mean" in text and "rstd" in text
    assert f"gamma here {float(g[10])!r}" in text and f"beta here {float(b[10])!r}" in text
    assert "times the bound" in text


def test_the_message_names_epsilon_missing_on_a_constant_row():
    x = _rows(np.float16, d=64, rows=4)
    x[1] = np.float16(2.5)
    with np.errstate(all="ignore"):
        xf = x.astype(np.float32)
        t = xf - xf.mean(axis=-1, keepdims=True)
        y = (t / np.sqrt((t * t).mean(axis=-1, keepdims=True))).astype(np.float16)  # no eps
    with pytest.raises(AssertionError, match="suspect: NaN on a constant row: epsilon missing"):
        lt.assert_close(y, x=x, eps=1e-5, max_ulp=1.0)


def test_the_message_names_inexact_statistics_on_a_constant_row():
    x = np.full((1, 8), 60000, dtype=np.float16)
    y = np.full((1, 8), -2048, dtype=np.float16)  # what torch 2.13 returned on this row
    with pytest.raises(AssertionError, match="suspect: a constant row's output far from beta"):
        lt.assert_close(y, x=x, eps=1e-12, max_ulp=1.0)


def test_grading_in_blocks_changes_nothing(monkeypatch):
    import lneps.testing._private.assertions as A

    x = _rows(np.float16, d=24, rows=50)
    g = np.linspace(0.5, 2, 24).astype(np.float16)
    y = lneps.layer_norm(
        x, g, eps=1e-5, compute_dtype=np.float16
    )  # the naive layer: some elements off
    whole = lt.compare(y, x=x, gamma=g, eps=1e-5)
    messages = []
    for elements in (1 << 18, 37, 1):
        monkeypatch.setattr(A, "_BLOCK_ELEMENTS", elements)
        report = lt.assert_close(y, x=x, gamma=g, eps=1e-5, max_ulp=100.0)
        assert report == whole and np.array_equal(report.scaled_error, whole.scaled_error)
        with pytest.raises(AssertionError) as info:
            lt.assert_close(y, x=x, gamma=g, eps=1e-5, max_ulp=0.5)
        messages.append(str(info.value))
    assert messages[0] == messages[1] == messages[2]
    assert f"worst at index {whole.worst_index}" in messages[0] or "worst at index" in messages[0]


@pytest.mark.parametrize(
    "op, wrts",
    [("layer_norm_backward", ("x", "gamma", "beta")), ("rms_norm_backward", ("x", "gamma"))],
)
def test_the_backward_pass_is_graded_against_its_exact_gradients(op, wrts):
    rng = np.random.default_rng(5)
    x = rng.normal(size=(16, 64)).astype(np.float32)
    dy = rng.normal(size=(16, 64)).astype(np.float32)
    g = rng.uniform(0.5, 2, size=64).astype(np.float32)
    fn = lneps.layer_norm_backward if op == "layer_norm_backward" else lneps.rms_norm_backward
    exact = fn(x, dy, g, eps=1e-5)
    # a correct float32 kernel (two passes, the textbook formula) passes the derived tolerance
    xf, gh = x.astype(np.float32), (dy * g).astype(np.float32)
    if op == "layer_norm_backward":
        t = xf - xf.mean(axis=-1, keepdims=True)
    else:
        t = xf
    r = np.float32(1) / np.sqrt((t * t).mean(axis=-1, keepdims=True) + np.float32(1e-5))
    u = t * r
    if op == "layer_norm_backward":
        dx = (gh - gh.mean(axis=-1, keepdims=True) - u * (gh * u).mean(axis=-1, keepdims=True)) * r
    else:
        dx = (gh - u * (gh * u).mean(axis=-1, keepdims=True)) * r
    mine = {"x": dx, "gamma": (dy * u).sum(axis=0), "beta": dy.sum(axis=0)}
    for wrt in wrts:
        report = lt.assert_close(
            mine[wrt].astype(np.float32), x=x, dy=dy, gamma=g, eps=1e-5, op=op, wrt=wrt
        )
        assert report.n == getattr(exact, wrt).size
        lt.assert_close(
            getattr(exact, wrt),
            x=x,
            dy=dy,
            gamma=g,
            eps=1e-5,
            op=op,
            wrt=wrt,
            max_ulp=0.5,
            metric="ulp",
        )
    # eps forgotten in the backward pass: caught on a near-constant row (for RMS norm, a tiny one)
    base = 1.0 if op == "layer_norm_backward" else 0.0
    x[3] = np.float32(base) + np.float32(2.0**-20) * rng.integers(-3, 4, size=64)
    t = x - x.mean(axis=-1, keepdims=True) if op == "layer_norm_backward" else x
    with np.errstate(all="ignore"):
        r0 = np.float32(1) / np.sqrt((t * t).mean(axis=-1, keepdims=True))
        u0 = t * r0
        centred = gh - gh.mean(axis=-1, keepdims=True) if op == "layer_norm_backward" else gh
        bad = (centred - u0 * (gh * u0).mean(axis=-1, keepdims=True)) * r0
    assert np.isfinite(bad[:3]).all()
    with pytest.raises(AssertionError, match=f"{op} \\(wrt=x\\)"):
        lt.assert_close(bad.astype(np.float32), x=x, dy=dy, gamma=g, eps=1e-5, op=op, wrt="x")
    with pytest.raises(TypeError, match="needs dy="):
        lt.assert_close(dx, x=x, gamma=g, eps=1e-5, op=op, wrt="x")
    with pytest.raises(ValueError, match="wrt must be one of"):
        lt.assert_close(dx, x=x, dy=dy, gamma=g, eps=1e-5, op=op, wrt="bias")


def test_kernels_narrows_the_derived_tolerance_to_a_class():
    # torch 2.13's float16 output on a constant row of 60000, eps = 1e-12: within what a Welford
    # kernel with merged means may produce (its mean's error times 1/sqrt(eps)), beyond the
    # two-pass class's bound, which caps a normalized value at sqrt(d)
    x = np.full((1, 8), 60000, dtype=np.float16)
    y = np.full((1, 8), -2048, dtype=np.float16)
    lt.assert_close(y, x=x, eps=1e-12)
    with pytest.raises(AssertionError, match="suspect: a constant row's output far from beta"):
        lt.assert_close(y, x=x, eps=1e-12, kernels=("two_pass",))
    with pytest.raises(TypeError, match="no meaning with max_ulp"):
        lt.assert_close(y, x=x, eps=1e-12, kernels=("two_pass",), max_ulp=1.0)
    with pytest.raises(ValueError, match="kernels must name"):
        lt.assert_close(y, x=x, eps=1e-12, kernels=("fast",))


def test_the_default_call_grades_large_outputs_in_blocks():
    # more than one block (2**18 elements) with the default tolerance and the test across rows
    x = lt.families(np.float32, 1024, rows=300)["normal"].x
    xf = x.astype(np.float32)
    t = xf - xf.mean(axis=-1, keepdims=True, dtype=np.float32)
    var = np.mean(t * t, axis=-1, keepdims=True, dtype=np.float32)
    good = t * (np.float32(1) / np.sqrt(var + np.float32(1e-5)))
    report = lt.assert_close(good, x=x, eps=1e-5)
    assert report.n == x.size
    d = x.shape[-1]
    unbiased = t * (np.float32(1) / np.sqrt(var * np.float32(d / (d - 1)) + np.float32(1e-5)))
    with pytest.raises(AssertionError, match="suspect: the d - 1 \\(unbiased\\) variance"):
        lt.assert_close(unbiased, x=x, eps=1e-5)
    lt.assert_close(lneps.layer_norm(x.astype(np.float16)), x=x.astype(np.float16), eps=1e-5)


# --- probabilistic=True: Higham and Mary's bound, opt in --------------------------------------


def test_probabilistic_is_a_real_keyword_checked_before_any_data_is_read():
    import inspect

    p = inspect.signature(lt.assert_close).parameters["probabilistic"]
    assert p.kind is p.KEYWORD_ONLY and p.default is False
    assert "probabilistic" not in inspect.signature(lt.compare).parameters  # it checks nothing
    bad = object()  # no array: these fail before it is read
    with pytest.raises(TypeError, match="probabilistic must be True or False"):
        lt.assert_close(bad, x=bad, eps=1e-5, probabilistic="yes")
    with pytest.raises(TypeError, match="no meaning with max_ulp"):
        lt.assert_close(bad, x=bad, eps=1e-5, probabilistic=True, max_ulp=1.0)
    for op in ("group_norm", "layer_norm_backward"):
        with pytest.raises(ValueError, match="probabilistic=True is a bound for layer_norm"):
            lt.assert_close(bad, x=bad, eps=1e-5, op=op, wrt="x", probabilistic=True)


def _unbiased(x, gamma, beta):
    """The d - 1 variance: a two-pass float32 kernel that divides the squares by d - 1."""
    xf, d = x.astype(np.float32), x.shape[-1]
    t = xf - xf.mean(axis=-1, keepdims=True, dtype=np.float32)
    var = np.sum(t * t, axis=-1, keepdims=True, dtype=np.float32) / np.float32(d - 1)
    n = t * (np.float32(1) / np.sqrt(var + np.float32(1e-5)))
    return (n * gamma.astype(np.float32) + beta.astype(np.float32)).astype(x.dtype)


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=str)
@pytest.mark.parametrize("family", ["normal", "cancelling_beta"])
@pytest.mark.parametrize("rows", [16, 64])
def test_probabilistic_catches_the_d_minus_1_variance_per_element_at_d_4096(dtype, family, rows):
    x, g, b = lt.families(dtype, 4096, rows=rows)[family]
    g = np.ones(4096, dtype) if g is None else g
    b = np.zeros(4096, dtype) if b is None else b
    a = _unbiased(x, g, b)
    with pytest.raises(AssertionError, match="elements exceed their bound"):
        lt.assert_close(a, x=x, gamma=g, beta=b, eps=1e-5, probabilistic=True)
    if (dtype, family, rows) == (BF16, "normal", 64):  # what the worst case cannot see
        assert lt.assert_close(a, x=x, gamma=g, beta=b, eps=1e-5).correctly_rounded < 0.99


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32], ids=str)
def test_probabilistic_passes_correct_kernels_on_every_hard_family(dtype):
    from lneps.book import kernel_zoo as kz

    names = (
        "two-pass, pairwise sums",
        "Welford + Chan merges (PyTorch)",
        "rsqrt always 2 ulp high",
    )
    for family, (x, g, b) in lt.families(dtype, 4096, rows=8).items():
        for name in names:
            y = kz.by_name(name).fn(x, g, b, 1e-5)
            report = lt.assert_close(y, x=x, gamma=g, beta=b, eps=1e-5, probabilistic=True)
            assert "probabilistic" in report.summary()
        y = kz.by_name("RMS, sequential sum").fn(x, g, None, 1e-5)
        lt.assert_close(y, x=x, gamma=g, eps=1e-5, op="rms_norm", probabilistic=True)
