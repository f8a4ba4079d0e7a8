"""The contract around a call of lneps.testing.compare and assert_close (module
lneps.testing._private.arguments): real signatures, the output format checked, a float64 x of
16-bit numbers read as the kernel's input, the call's names checked before any array is read,
and messages that name the fix. Each test below failed on the tool before this contract."""

import inspect
import warnings

import ml_dtypes
import numpy as np
import pytest

import lneps
import lneps.testing as lt

BF16 = np.dtype(ml_dtypes.bfloat16)


def _rows(dtype=np.float16, d=64, rows=8, seed=0):
    return np.random.default_rng(seed).normal(size=(rows, d)).astype(dtype)


def _two_pass(x, eps=1e-5):
    """A correct kernel: two-pass statistics in float32, the result in float32."""
    xf = x.astype(np.float32)
    t = xf - xf.mean(axis=-1, keepdims=True, dtype=np.float32)
    var = np.mean(t * t, axis=-1, keepdims=True, dtype=np.float32)
    return t * (np.float32(1) / np.sqrt(var + np.float32(eps)))


@pytest.mark.parametrize(
    "fn, names",
    [
        (lt.compare, ("x", "eps", "op", "gamma", "beta", "axis", "scale", "dy", "wrt", "dtype")),
        (
            lt.assert_close,
            (
                "x",
                "eps",
                "op",
                "gamma",
                "beta",
                "max_ulp",
                "kernels",
                "metric",
                "err_msg",
                "axis",
                "scale",
                "dy",
                "wrt",
                "dtype",
                "strict_dtype",
                "probabilistic",
            ),
        ),
    ],
)
def test_the_signature_lists_the_keywords(fn, names):
    params = inspect.signature(fn).parameters
    assert (
        list(params)[0] == "actual" and params["actual"].kind is inspect.Parameter.POSITIONAL_ONLY
    )
    assert tuple(n for n, p in params.items() if p.kind is p.KEYWORD_ONLY) == names
    assert (
        params["x"].default is inspect.Parameter.empty
        and params["eps"].default is inspect.Parameter.empty
    )
    assert list(params)[-1] == "op_kwargs"


def test_the_output_format_is_checked_against_dtype():
    x = _rows(np.float32, d=256)
    stored16 = _two_pass(x).astype(np.float16)  # a float32 kernel that stores float16
    with pytest.raises(AssertionError, match=r"output is float16, and dtype=float32 was asked for"):
        lt.assert_close(stored16, x=x, eps=1e-5, dtype=np.float32)
    with pytest.raises(AssertionError, match="bfloat16, and dtype=float32"):
        lt.assert_close(_two_pass(x).astype(BF16), x=x, eps=1e-5, dtype="float32")
    x16 = _rows(np.float16, d=256)
    no_cast = _two_pass(x16)  # a float16 kernel that forgets its final cast
    with pytest.raises(AssertionError, match="output is float32, and dtype=float16"):
        lt.assert_close(no_cast, x=x16, eps=1e-5, dtype=np.float16)
    with pytest.raises(ValueError, match="dtype=float16 was asked for"):
        lt.compare(no_cast, x=x16, eps=1e-5, dtype=np.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lt.assert_close(no_cast.astype(np.float16), x=x16, eps=1e-5, dtype=np.float16)
        lt.assert_close(stored16, x=x, eps=1e-5, dtype=np.float16)  # stated: no warning


def test_an_output_in_another_format_than_x_warns_or_fails_under_strict():
    x = _rows(np.float32, d=256)
    stored16 = _two_pass(x).astype(np.float16)
    with pytest.warns(
        UserWarning, match="output is float16 and its input x is float32.*dtype=float16"
    ):
        lt.assert_close(stored16, x=x, eps=1e-5)
    with pytest.raises(AssertionError, match="output is float16 and its input x is float32"):
        lt.assert_close(stored16, x=x, eps=1e-5, strict_dtype=True)


@pytest.mark.parametrize("d", [768, 4096])
def test_float64_x_holding_float16_numbers_is_the_kernels_float16_input(d):
    # x.double(), a common habit: before, the bound and the test across rows took the kernel
    # for a float64 one, and a correct float16 kernel failed at d = 4096
    x = np.random.default_rng(1).normal(size=(64, d)).astype(np.float16)
    y = _two_pass(x).astype(np.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = lt.assert_close(y, x=x.astype(np.float64), eps=1e-5)
    assert report.dtype == np.float16
    wide = x.astype(np.float64) * (1 + 2.0**-30)  # not float16 numbers: a float64 input, said so
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert lt.compare(y, x=wide, eps=1e-5).n == y.size  # compare measures: no warning
    with pytest.warns(UserWarning, match="graded as a float64 input"):
        try:
            lt.assert_close(y, x=wide, eps=1e-5)
        except AssertionError:
            pass


@pytest.mark.parametrize(
    "kw, error, match",
    [
        ({"kernels": ("twopass",)}, ValueError, "kernels must name some of two_pass"),
        ({"kernels": "two-pass"}, ValueError, "kernels must name"),
        ({"op": "layernorm"}, ValueError, "op must be one of"),
        ({"metric": "ulps"}, ValueError, "metric must be"),
        ({"op": "layer_norm_backward", "wrt": "w", "dy": 1.0}, ValueError, "wrt must be one of"),
        ({"op": "layer_norm_backward", "wrt": "x"}, TypeError, "needs dy="),
        ({"wrt": "x"}, TypeError, "wrt= is for the backward ops"),
    ],
)
def test_the_calls_names_are_checked_before_any_array_is_read(kw, error, match):
    not_an_array = object()  # reading it would raise a TypeError of its own
    with pytest.raises(error, match=match):
        lt.assert_close(not_an_array, x=not_an_array, eps=1e-5, **kw)


def test_a_misspelt_kernel_class_fails_even_on_a_correctly_rounded_output():
    x = _rows()
    with pytest.raises(ValueError, match="kernels must name"):
        lt.assert_close(lneps.layer_norm(x), x=x, eps=1e-5, kernels=("twopass",))


def test_a_python_list_as_output_names_the_fix():
    x = _rows()
    y = lneps.layer_norm(x, eps=1e-5)
    with pytest.raises(TypeError, match=r"actual is a Python list, not an array.*dtype="):
        lt.assert_close(y.tolist(), x=x, eps=1e-5)
    with pytest.raises(TypeError, match="Python float"):
        lt.compare(1.0, x=x[:1, :1], eps=1e-5)
    assert lt.assert_close(y.tolist(), x=x, eps=1e-5, dtype=np.float16).correctly_rounded == 1.0
    assert lt.compare(y.tolist(), x=x, eps=1e-5, dtype="float16").dtype == np.float16


def test_an_nd_input_without_axis_is_told_about_axis():
    x = np.random.default_rng(2).normal(size=(2, 4, 8, 8)).astype(np.float32)
    y = lneps.layer_norm(x, axis=(1, 2, 3), eps=1e-5)  # torch's normalized_shape=(4, 8, 8)
    with pytest.raises(AssertionError, match=r"x is 4-D and axis= was not given.*axis=\(1, 2, 3\)"):
        lt.assert_close(y, x=x, eps=1e-5)
    lt.assert_close(y, x=x, eps=1e-5, axis=(1, 2, 3))
    with pytest.raises(AssertionError) as info:  # a 2-D input, or an axis given: no such note
        lt.assert_close(lneps.layer_norm(x, axis=(1, 2, 3), eps=1e-5), x=x, eps=1e-5, axis=(2, 3))
    assert "axis= was not given" not in str(info.value)


def test_a_constant_row_with_eps_0_is_not_blamed_on_merged_statistics():
    # the exact answer is 0/0; a kernel that returns 0 there hides the division by zero. Before,
    # the message named "statistics merged inexactly", the suspect of a Welford merge
    x = np.full((2, 8), 3.0, np.float32)
    x[1] = np.arange(8, dtype=np.float32)
    xf = x.astype(np.float32)
    t = xf - xf.mean(axis=-1, keepdims=True)
    var = np.mean(t * t, axis=-1, keepdims=True)
    y = np.where(var > 0, t / np.sqrt(np.where(var > 0, var, 1)), 0).astype(np.float32)
    with pytest.raises(AssertionError) as info:
        lt.assert_close(y, x=x, eps=0.0)
    text = str(info.value)
    assert "merged inexactly" not in text and "a constant row with eps = 0 is 0/0" in text
    # (a merged mean that misses the constant is still named: test_testing_api.py)
