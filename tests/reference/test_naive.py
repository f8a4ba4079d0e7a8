"""lneps.naive: every operation rounded to the format, against exact sums and float64."""

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lneps
from lneps import naive as rounded
from lneps.book import survey

F16, BF16, F32, F64 = np.float16, ml_dtypes.bfloat16, np.float32, np.float64


# --- rounded arithmetic -----------------------------------------------------------------------


def test_rounded_sum_rounds_every_partial_sum():
    # Tree: (2048 + 1) rounds to 2048 (a tie, to even), 1 + 1 = 2, 2048 + 2 = 2050.
    # The exact sum 2051 would round to 2052: float32 accumulation (np.sum) gives that.
    x = np.array([2048, 1, 1, 1], dtype=F16)
    assert float(rounded.rounded_sum(x, F16)[0]) == 2050.0
    assert float(x.sum(dtype=F16)) == 2052.0


def test_rounded_sum_overflows_in_float16_and_not_in_float32():
    x = np.full(128, 1000.0, dtype=F16)
    assert np.isinf(rounded.rounded_sum(x, F16)[0])
    assert rounded.rounded_sum(x, F32)[0] == 128000.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=70))
def test_rounded_sum_in_float64_is_close_to_the_exact_sum(values):
    x = np.array(values)
    got = float(rounded.rounded_sum(x, F64)[0])
    bound = 8 * len(values) * np.finfo(F64).eps * float(np.abs(x).sum())
    assert abs(got - math.fsum(values)) <= bound


ROUNDED = {
    "rounded_sum": lambda x: rounded.rounded_sum(x, F32),
    "mean_and_variance": lambda x: rounded.mean_and_variance(x, dtype=F32),
    "layer_norm_naive": lambda x: rounded.layer_norm_naive(x, eps=1e-5, dtype=F32),
    "rms_norm_naive": lambda x: rounded.rms_norm_naive(x, eps=1e-6, dtype=F32),
}


@pytest.mark.parametrize("fn", ROUNDED)
@pytest.mark.parametrize("bad,word", [
    (np.array([1 + 2j, 3 - 1j]), "real"),  # the imaginary part must not be dropped silently
    (np.array([True, False, True]), "numeric"),
    (["1.5", "2"], "numeric"),
])
def test_rounded_arithmetic_rejects_complex_bool_and_strings(fn, bad, word):
    with pytest.raises(TypeError, match=word) as info:
        ROUNDED[fn](bad)
    assert "x" in str(info.value)


def test_rounded_arithmetic_takes_integers_and_lists():
    assert float(rounded.rounded_sum([1, 2, 3], F16)[0]) == 6.0
    mu, var = rounded.mean_and_variance([1, 2, 3, 6], dtype=F32)
    assert (float(mu[0]), float(var[0])) == (3.0, 3.5)
    np.testing.assert_allclose(rounded.rms_norm_naive([3, 4], eps=0.0, dtype=F64), [3 / 12.5**0.5, 4 / 12.5**0.5])


def test_rounded_sum_keeps_the_axis():
    x = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(rounded.rounded_sum(x, F64, axis=0), x.sum(axis=0, keepdims=True))
    np.testing.assert_array_equal(rounded.rounded_sum(x, F64, axis=1), x.sum(axis=1, keepdims=True))


@pytest.mark.parametrize("method", rounded.VARIANCE_METHODS)
def test_every_variance_method_is_right_in_float64(method):
    x = np.random.default_rng(0).normal(3.0, 2.0, size=(5, 37))
    mu, var = rounded.mean_and_variance(x, dtype=F64, method=method)
    np.testing.assert_allclose(mu, x.mean(axis=-1, keepdims=True), rtol=1e-13)
    np.testing.assert_allclose(var, x.var(axis=-1, keepdims=True), rtol=1e-11)
    mu0, var0 = rounded.mean_and_variance(x, dtype=F64, method=method, axis=0)
    np.testing.assert_allclose(var0, x.var(axis=0, keepdims=True), rtol=1e-11)


def test_one_pass_float32_variance_goes_negative_at_a_large_mean():
    rows = survey.family_rows("mean_6e4", np.random.default_rng(7), 512, 512, F16)
    _, one = rounded.mean_and_variance(rows, dtype=F32, method="one-pass")
    _, two = rounded.mean_and_variance(rows, dtype=F32, method="two-pass")
    _, exact = rounded.mean_and_variance(rows, dtype=F64)
    assert one.dtype == two.dtype == F32
    assert (one < 0).any() and (exact > 0).all()
    # Two-pass: float16 values near 6e4 are multiples of 32, the sums are exact in float32.
    np.testing.assert_allclose(two, exact, rtol=1e-6)


def test_variance_method_and_dtype_are_checked():
    with pytest.raises(ValueError, match="method"):
        rounded.mean_and_variance(np.ones(3), dtype=F32, method="three-pass")
    with pytest.raises(TypeError, match="dtype"):
        rounded.mean_and_variance(np.ones(3), dtype="int8")


def test_layer_norm_rounded_in_float64_is_the_package_layer_norm():
    x = np.random.default_rng(1).normal(size=(4, 50))
    np.testing.assert_allclose(rounded.layer_norm_naive(x, eps=1e-5, dtype=F64), lneps.layer_norm(x), rtol=1e-12,
                               atol=1e-14)
    np.testing.assert_allclose(rounded.rms_norm_naive(x, eps=1e-6, dtype=F64), lneps.rms_norm(x, eps=1e-6), rtol=1e-13)
    assert rounded.layer_norm_naive(x, eps=1e-5, dtype=BF16).dtype == BF16


def test_condition_number_is_chan_golub_leveque_s_kappa():
    k = rounded.condition_number(np.array([[999.0, 1001.0], [-1.0, 1.0], [5.0, 5.0]]))
    np.testing.assert_allclose(k[:2], [np.sqrt(1 + 1000.0**2), 1.0], rtol=1e-15)
    assert np.isnan(k[2])
    # The one-pass float32 variance's relative error tracks u kappa^2 (within a few decades).
    rng = np.random.default_rng(14)
    for mean in (10.0, 100.0, 1000.0):
        x = (mean + rng.normal(0, 1, (64, 256))).astype(F32)
        _, v1 = rounded.mean_and_variance(x, dtype=F32, method="one-pass")
        exact = x.astype(F64).var(axis=1)
        rel = np.abs(v1[:, 0].astype(F64) - exact) / exact
        predicted = 2.0**-24 * rounded.condition_number(x) ** 2
        assert np.median(rel / predicted) < 10 and np.max(rel / predicted) < 300
        assert np.median(rel / predicted) > 1e-3
