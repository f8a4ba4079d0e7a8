"""lneps.ulp: the spacing of each format and errors measured in it."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lneps
from lneps import ulp

F16, BF16, F32, F64 = np.float16, ml_dtypes.bfloat16, np.float32, np.float64


# --- ulp ----------------------------------------------------------------------------------------


def test_ulp_closed_forms():
    assert ulp.ulp(1.0, F16) == 2.0**-10 and ulp.ulp(0.999, F16) == 2.0**-11
    assert ulp.ulp(0.0, F16) == 2.0**-24 and ulp.ulp(1e-7, F16) == 2.0**-24  # subnormal floor
    assert ulp.ulp(65504.0, F16) == 32.0 and ulp.ulp(-1.5, F16) == 2.0**-10
    assert ulp.ulp(1.0, BF16) == 2.0**-7 and ulp.ulp(1.0, F32) == 2.0**-23
    assert ulp.ulp(0.0, BF16) == 2.0**-133


@pytest.mark.parametrize("dt", [F16, BF16, F32])
def test_ulp_is_the_gap_to_the_next_number(dt):
    top = float(ml_dtypes.finfo(dt).max) / 2
    x = np.clip(np.random.default_rng(2).lognormal(0, 4, size=2000), 0, top).astype(dt)
    x = x[x.astype(F64) > 0]
    nxt = np.nextafter(x, np.asarray(np.inf, dtype=dt)) if dt is not BF16 else None
    if nxt is None:  # ml_dtypes has no nextafter: step the bit pattern
        nxt = (x.view(np.uint16) + 1).view(dt)
    np.testing.assert_array_equal(nxt.astype(F64) - x.astype(F64), ulp.ulp(x.astype(F64), dt))


@settings(max_examples=100, deadline=None)
@given(st.floats(-6e4, 6e4))
def test_rounding_to_nearest_is_within_half_an_ulp(r):
    for dt in (F16, BF16, F32):
        assert ulp.ulp_error(np.asarray(r).astype(dt), r, dt) <= 0.5


def test_ulp_error_counts_nan_and_inf_results_as_infinite():
    err = ulp.ulp_error(np.array([np.nan, np.inf, 1.0, 1.0 + 2**-10], dtype=F16), [0.5, 1.0, 1.0, 1.0], F16)
    assert err.tolist() == [np.inf, np.inf, 0.0, 1.0]
    assert ulp.worst_ulp_error(np.array([1.0], dtype=F16), [1.0], F16) == 0.0
