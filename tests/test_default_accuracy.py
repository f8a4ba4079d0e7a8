"""The default path of layer_norm and rms_norm against independent references."""

import ml_dtypes
import mpmath
import numpy as np
import pytest

import lneps
from lneps import survey, ulp

F16, BF16, F32, F64 = np.float16, ml_dtypes.bfloat16, np.float32, np.float64


# --- the default path is within 1 ulp ---------------------------------------------------------


def numpy_reference(x, eps):
    # Independent of lneps: NumPy's mean and biased var in float64.
    x = np.asarray(x).astype(F64)
    return (x - x.mean(axis=-1, keepdims=True)) / np.sqrt(x.var(axis=-1, keepdims=True) + eps)


@pytest.mark.parametrize("dt", [F16, BF16, F32])
def test_default_layer_norm_is_within_one_ulp_on_every_family(dt):
    methods = {"default": lambda x: lneps.layer_norm(x, eps=1e-5)}
    worst = survey.worst_ulp_survey(methods, lambda x: numpy_reference(x, 1e-5), dtype=dt, ds=(8, 64, 512, 4096),
                               rng=np.random.default_rng(11), elements=8192)
    assert len(worst) == 4 * len(survey.FAMILIES)
    assert max(worst.values()) <= 0.5 + 1e-3  # correctly rounded up to float64 noise


@pytest.mark.parametrize("dt", [F16, BF16, F32])
def test_default_rms_norm_is_within_one_ulp_on_every_family(dt):
    methods = {"default": lambda x: lneps.rms_norm(x, eps=1e-6)}
    ref = lambda x: x.astype(F64) / np.sqrt(np.mean(x.astype(F64) ** 2, axis=-1, keepdims=True) + 1e-6)
    worst = survey.worst_ulp_survey(methods, ref, dtype=dt, ds=(8, 512, 4096), rng=np.random.default_rng(12), elements=8192)
    assert max(worst.values()) <= 0.5 + 1e-3


def mp_layer_norm(row, eps):
    with mpmath.workdps(50):
        xs = [mpmath.mpf(float(v)) for v in row]
        mu = mpmath.fsum(xs) / len(xs)
        var = mpmath.fsum((v - mu) ** 2 for v in xs) / len(xs)
        return np.array([float((v - mu) / mpmath.sqrt(var + mpmath.mpf(eps))) for v in xs])


@pytest.mark.parametrize("dt", [F16, BF16, F32])
def test_default_layer_norm_is_within_one_ulp_of_a_50_digit_reference(dt):
    rng = np.random.default_rng(13)
    for family in survey.FAMILIES:
        x = survey.family_rows(family, rng, 3, 48, dt)
        exact = np.array([mp_layer_norm(row, 1e-5) for row in x])
        assert ulp.worst_ulp_error(lneps.layer_norm(x), exact, dt) <= 0.5 + 1e-3, family
