"""lneps.book.eps_swap: what swapping epsilon does to a row, measured against its closed form.

The measured change comes from two runs of the package's layer_norm / rms_norm; the closed form
|sqrt((q + a) / (q + b)) - 1| is written out here independently, and q is NumPy's own variance
or mean square.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lneps.book import defaults, eps_swap


def test_each_function_has_one_home():
    # lneps.book.defaults holds the facts; what a swap does lives here only (no re-export)
    for name in eps_swap.__all__:
        if name != "KINDS":  # the kinds of layer, which the facts use too
            assert not hasattr(defaults, name), name


def test_closed_form_is_written_out_independently():
    q = np.array([0.0, 1e-8, 1e-3, 1.0, 50.0])
    for a, b in ((1e-12, 1e-5), (1e-5, 1e-6), (0.0, 1e-3)):
        want = np.abs(np.sqrt((q + a) / (q + b)) - 1)
        np.testing.assert_allclose(eps_swap.predicted_relative_change(q, a, b), want, rtol=1e-9)


@settings(max_examples=60, deadline=None)
@given(
    scale=st.floats(1e-3, 10.0),
    kind=st.sampled_from(eps_swap.KINDS),
    pair=st.sampled_from([(1e-12, 1e-5), (1e-5, 1e-12), (1e-6, 1e-5), (1e-5, 1e-6), (0.0, 1e-3)]),
    seed=st.integers(0, 2**16),
)
def test_measured_relative_change_matches_the_closed_form(scale, kind, pair, seed):
    x = np.random.default_rng(seed).standard_t(4, size=(3, 64)) * scale + 0.5
    q = eps_swap.row_statistic(x, kind=kind)
    got = eps_swap.relative_change(x, *pair, kind=kind)
    want = eps_swap.predicted_relative_change(q, *pair)
    # The measured value is a difference of two outputs: its absolute error is ~1e-16.
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-14)


def test_closed_form_limits():
    # Large q: |eps_b - eps_a| / (2 q); q = 0: |sqrt(eps_a / eps_b) - 1|.
    assert eps_swap.predicted_relative_change(1.0, 1e-12, 1e-5) == pytest.approx(5e-6, rel=1e-5)
    assert eps_swap.predicted_relative_change(0.0, 1e-6, 1e-5) == pytest.approx(1 - np.sqrt(0.1), rel=1e-14)
    x = np.array([[1.0, -1.0, 1.0, -1.0]])  # variance 1 and mean square 1
    assert eps_swap.row_statistic(x).tolist() == [1.0]
    assert eps_swap.row_statistic(x + 3).tolist() == [1.0]
    assert eps_swap.row_statistic(x + 3, kind="RMSNorm").tolist() == [10.0]
    with pytest.raises(ValueError, match="kind"):
        eps_swap.row_statistic(x, kind="GroupNorm")
    with pytest.raises(ValueError, match="q"):
        eps_swap.predicted_relative_change(-1.0, 1e-6, 1e-5)


@settings(max_examples=60, deadline=None)
@given(change=st.floats(1e-6, 0.5), pair=st.sampled_from([(1e-12, 1e-5), (1e-5, 1e-6), (1e-6, 1e-5)]))
def test_statistic_for_relative_change_inverts_the_closed_form(change, pair):
    q = eps_swap.statistic_for_relative_change(change, *pair)
    assert q > 0
    assert eps_swap.predicted_relative_change(q, *pair) == pytest.approx(change, rel=1e-8)


def test_statistic_for_relative_change_rejects_the_impossible():
    with pytest.raises(ValueError, match="below"):
        eps_swap.statistic_for_relative_change(0.9, 1e-6, 1e-5)  # most a row can change: 0.68
    with pytest.raises(ValueError, match="differ"):
        eps_swap.statistic_for_relative_change(0.1, 1e-5, 1e-5)
    with pytest.raises(ValueError, match="change"):
        eps_swap.statistic_for_relative_change(-0.1, 1e-6, 1e-5)


@pytest.mark.parametrize("bad", ["0.1", True, np.True_, None, 1j, [0.1]])
def test_statistic_for_relative_change_rejects_a_change_that_is_not_a_real_number(bad):
    with pytest.raises(TypeError, match="change"):
        eps_swap.statistic_for_relative_change(bad, 1e-6, 1e-5)


@pytest.mark.parametrize("bad", [0, 0.0, -0.1, float("nan"), float("inf"), 0.9, 1])
def test_statistic_for_relative_change_rejects_a_change_out_of_range(bad):
    with pytest.raises(ValueError, match="change"):
        eps_swap.statistic_for_relative_change(bad, 1e-6, 1e-5)


def test_statistic_for_relative_change_accepts_any_real_number_type():
    want = eps_swap.statistic_for_relative_change(float(np.float32(0.01)), 1e-6, 1e-5)
    assert eps_swap.statistic_for_relative_change(np.float32(0.01), 1e-6, 1e-5) == want
    with pytest.raises(TypeError, match="eps"):
        eps_swap.statistic_for_relative_change(0.01, True, 1e-5)


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**16), axis=st.sampled_from([0, 1, -1]), shift=st.floats(-100, 100))
def test_row_statistic_is_numpys_biased_variance_or_mean_square(seed, axis, shift):
    x = np.random.default_rng(seed).standard_normal((3, 5, 8)) + shift
    np.testing.assert_allclose(eps_swap.row_statistic(x, axis=axis), x.var(axis=axis),
                               rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(eps_swap.row_statistic(x, kind="RMSNorm", axis=axis),
                               np.mean(x**2, axis=axis), rtol=1e-12)
    assert eps_swap.row_statistic(x.astype(np.float32), axis=axis).dtype == np.float64
