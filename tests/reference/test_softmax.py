"""lneps.softmax: the log-sum-exp shift against closed forms, and the naive formula's overflow."""

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lneps


def test_seed_example_overflows_naively_and_not_with_the_shift():
    logits = [1000.0, 1001.0, 1002.0]
    assert np.isnan(lneps.softmax(logits, stable=False)).all()  # inf / inf
    want = np.exp([0.0, 1.0, 2.0]) / np.exp([0.0, 1.0, 2.0]).sum()
    np.testing.assert_allclose(lneps.softmax(logits), want, rtol=1e-15)
    assert np.round(lneps.softmax(logits), 4).tolist() == [0.09, 0.2447, 0.6652]


def test_naive_float16_softmax_breaks_exactly_past_log_65504():
    # 11.0859375 and 11.09375 are neighbouring float16 numbers on either side of ln 65504.
    last, first_bad = np.float16(11.0859375), np.float16(11.09375)
    assert np.nextafter(last, np.float16(np.inf)) == first_bad and float(last) < math.log(65504) < float(first_bad)
    ok = lneps.softmax(np.array([last, 0.0], np.float16), stable=False)
    # e^x / (e^x + 1) rounds to 1; 1 / (e^x + 1) = 1.53e-5 is a float16 subnormal
    assert ok.dtype == np.float16 and ok[0] == 1 and ok[1] == pytest.approx(1 / (math.exp(11.0859375) + 1), rel=2e-2)
    np.testing.assert_array_equal(ok, lneps.softmax(np.array([last, 0.0], np.float16)))
    bad = lneps.softmax(np.array([first_bad, 0.0], np.float16), stable=False)
    assert np.isnan(bad[0]) and bad[1] == 0  # inf / inf and 1 / inf
    stable = lneps.softmax(np.array([first_bad, 0.0], np.float16))
    assert stable.dtype == np.float16 and stable[0] == 1
    assert stable[1] == pytest.approx(1 / (math.exp(11.09375) + 1), rel=2e-2)
    x = np.array([10.0, 11.0, 12.0], dtype=np.float16)
    naive = lneps.softmax(x, stable=False)
    assert naive.dtype == np.float16 and np.isnan(naive[2]) and (naive[:2] == 0).all()
    np.testing.assert_allclose(lneps.softmax(x).astype(float), lneps.softmax([0.0, 1.0, 2.0]), atol=1e-3)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.floats(-50, 50), min_size=1, max_size=20), st.floats(-500, 500))
def test_stable_equals_naive_where_naive_survives_and_is_shift_invariant(values, shift):
    x = np.array(values)
    s = lneps.softmax(x)
    np.testing.assert_allclose(s, lneps.softmax(x, stable=False), rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(lneps.softmax(x + shift), s, rtol=1e-9, atol=1e-15)
    assert s.sum() == pytest.approx(1.0, rel=1e-14)
    assert s.max() == pytest.approx(s[np.argmax(x)])


def test_axis_and_dtypes():
    x = np.random.default_rng(0).normal(size=(3, 4))
    np.testing.assert_allclose(lneps.softmax(x, axis=0), lneps.softmax(x.T).T, rtol=1e-15)
    np.testing.assert_allclose(lneps.softmax(x, axis=0).sum(axis=0), 1.0, rtol=1e-15)
    assert lneps.softmax([1, 2, 3]).dtype == np.float64
    assert lneps.softmax(np.ones(3, ml_dtypes.bfloat16)).dtype == ml_dtypes.bfloat16


def test_a_row_with_inf_gives_nan_in_that_row_only():
    x = np.array([[0.0, 1.0], [np.inf, 1.0]])
    y = lneps.softmax(x)
    assert np.isnan(y[1]).any() and np.isfinite(y[0]).all()


@pytest.mark.parametrize("bad,exc,word", [
    (np.ones(2, complex), TypeError, "real"),
    (["a", "b"], TypeError, "numeric"),
])
def test_bad_input(bad, exc, word):
    with pytest.raises(exc, match=word):
        lneps.softmax(bad)


def test_bad_stable_and_axis():
    with pytest.raises(TypeError, match="stable"):
        lneps.softmax([1.0, 2.0], stable="yes")
    with pytest.raises(np.exceptions.AxisError):
        lneps.softmax([1.0, 2.0], axis=1)
    with pytest.raises(ValueError, match="empty"):
        lneps.softmax(np.ones((2, 0)))
