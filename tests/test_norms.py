"""lneps.norms against closed forms, a NumPy reference and the error contract."""

import numpy as np
import pytest

import lneps


def reference_layer_norm(x, eps, axis=-1):
    # Independent reference: NumPy's own biased variance (ddof=0), eps inside the root.
    x = np.asarray(x, dtype=np.float64)
    mu = x.mean(axis=axis, keepdims=True)
    return (x - mu) / np.sqrt(x.var(axis=axis, ddof=0, keepdims=True) + eps)


def test_closed_form_of_the_worked_example():
    # [2, 4, 6, 8]: v = [-3, -1, 1, 3], q = 5, so u = v / sqrt(5 + eps) exactly.
    v = np.array([-3.0, -1.0, 1.0, 3.0])
    for eps in (0.0, 1e-5, 0.5):
        np.testing.assert_allclose(lneps.layer_norm([2, 4, 6, 8], eps=eps), v / np.sqrt(5 + eps), rtol=1e-15)


@pytest.mark.parametrize("shape,axis", [((7,), -1), ((3, 5), -1), ((3, 5), 0), ((2, 3, 4), 1)])
def test_matches_numpy_reference_on_any_shape_and_axis(shape, axis):
    x = np.random.default_rng(0).normal(2.0, 3.0, size=shape)
    np.testing.assert_allclose(lneps.layer_norm(x, axis=axis), reference_layer_norm(x, 1e-5, axis), rtol=1e-13, atol=1e-14)


def test_gamma_and_beta_apply_per_feature_along_the_axis():
    x = np.random.default_rng(1).normal(size=(4, 3))
    gamma, beta = np.array([1.0, -2.0, 0.5, 3.0]), np.array([0.0, 1.0, 2.0, -1.0])
    got = lneps.layer_norm(x, gamma, beta, axis=0)
    want = reference_layer_norm(x, 1e-5, axis=0) * gamma[:, None] + beta[:, None]
    np.testing.assert_allclose(got, want, rtol=1e-14)


def test_scalar_gain_and_bias_give_the_seed_answer():
    # Seed 003, check yourself 4: gamma = 2, beta = 1.
    np.testing.assert_allclose(np.round(lneps.layer_norm([2, 4, 6, 8], 2.0, 1.0), 3), [-1.683, 0.106, 1.894, 3.683])


def test_dtypes():
    assert lneps.layer_norm([1, 2, 3]).dtype == np.float64  # integers compute in float64
    assert lneps.layer_norm(np.arange(4, dtype=np.int8)).dtype == np.float64
    assert lneps.layer_norm(np.arange(4, dtype=np.float32)).dtype == np.float32
    assert lneps.rms_norm(np.arange(4, dtype=np.float16)).dtype == np.float16
    assert lneps.layer_norm(np.arange(4, dtype=complex)).dtype == np.complex128


def test_complex_input_is_the_analytic_continuation():
    # Complex-step differentiation needs u(z + ih) analytic: variance mean(v**2), not |v|**2.
    z, h = np.array([0.3, -1.2, 2.0]), 1e-30
    direction = np.array([1.0, 0.0, 0.0])
    u = lneps.layer_norm(z + 1j * h * direction)
    np.testing.assert_allclose(u.real, lneps.layer_norm(z), rtol=1e-15)
    assert np.all(np.abs(u.imag) > 0)


def test_rms_norm_formula():
    x = np.array([[2.0, 4.0, 6.0, 8.0], [-1.0, 0.0, 0.0, 1.0]])
    gamma = np.array([1.0, 2.0, 3.0, 4.0])
    want = x / np.sqrt((x**2).mean(axis=-1, keepdims=True) + 1e-6) * gamma
    np.testing.assert_allclose(lneps.rms_norm(x, gamma), want, rtol=1e-15)
    # No centering: RMSNorm is not shift invariant.
    assert not np.allclose(lneps.rms_norm(x[0] + 100), lneps.rms_norm(x[0]), atol=0.1)


def test_batch_norm_normalizes_columns():
    x = np.random.default_rng(2).normal(size=(6, 4))
    np.testing.assert_allclose(lneps.batch_norm(x), lneps.layer_norm(x.T).T, rtol=1e-15)
    np.testing.assert_allclose(lneps.batch_norm(x).mean(axis=0), 0, atol=1e-15)


def test_layer_norm_of_a_token_ignores_the_others_and_batch_norm_does_not():
    batch = np.array([[2.0, 4.0, 6.0, 8.0], [1.0, 0.0, 3.0, 1.0]])
    changed = batch.copy()
    changed[1] = [9.0, -4.0, 0.0, 7.0]
    assert np.array_equal(lneps.layer_norm(changed)[0], lneps.layer_norm(batch)[0])
    assert np.max(np.abs(lneps.batch_norm(changed)[0] - lneps.batch_norm(batch)[0])) > 0.1


@pytest.mark.parametrize("eps", [-1e-5, float("nan"), float("inf"), -float("inf")])
def test_bad_eps_is_a_value_error_naming_eps(eps):
    for fn in (lneps.layer_norm, lneps.rms_norm, lneps.batch_norm):
        with pytest.raises(ValueError, match="eps"):
            fn([[1.0, 2.0]], eps=eps)


@pytest.mark.parametrize("eps", ["1e-5", 1j, None, True])
def test_non_real_eps_is_a_type_error(eps):
    with pytest.raises(TypeError, match="eps"):
        lneps.layer_norm([1.0, 2.0], eps=eps)


@pytest.mark.parametrize("name", ["gamma", "beta"])
def test_affine_of_the_wrong_length_names_itself_and_both_shapes(name):
    with pytest.raises(ValueError, match=rf"{name}.*\(4,\).*\(3,\)"):
        lneps.layer_norm(np.ones((2, 4)), **{name: np.ones(3)})
    with pytest.raises(ValueError, match=name):
        lneps.rms_norm(np.ones(4), np.ones((4, 1))) if name == "gamma" else lneps.layer_norm(np.ones(4), beta=np.ones((2, 2)))


def test_empty_axis_is_a_value_error():
    with pytest.raises(ValueError, match="empty"):
        lneps.layer_norm(np.ones((3, 0)))
    # An empty batch of tokens is fine: nothing to normalize, nothing wrong.
    assert lneps.layer_norm(np.ones((0, 4))).shape == (0, 4)


@pytest.mark.parametrize("bad", [["a", "b"], np.array([True, False]), [object(), object()], None])
def test_non_numeric_input_is_a_type_error(bad):
    with pytest.raises(TypeError, match="numeric"):
        lneps.layer_norm(bad)


def test_axis_out_of_range_is_numpys_axis_error():
    with pytest.raises(np.exceptions.AxisError):
        lneps.layer_norm(np.ones((2, 3)), axis=2)
    with pytest.raises(np.exceptions.AxisError):
        lneps.batch_norm(np.ones(3), axis=1)
    with pytest.raises(TypeError, match="axis"):
        lneps.layer_norm(np.ones((2, 3)), axis=(0, 1))


def test_eps_zero_gives_nan_for_a_constant_row_only():
    x = np.array([[5.0, 5.0, 5.0, 5.0], [2.0, 4.0, 6.0, 8.0]])
    y = lneps.layer_norm(x, eps=0)
    assert np.all(np.isnan(y[0]))
    np.testing.assert_allclose(y[1], np.array([-3, -1, 1, 3]) / np.sqrt(5), rtol=1e-15)
    assert np.all(np.isnan(lneps.rms_norm(np.zeros(3), eps=0)))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf - inf and overflow, in that row
@pytest.mark.parametrize("bad_value", [np.nan, np.inf, -np.inf, 1e308])
@pytest.mark.parametrize("fn", [lneps.layer_norm, lneps.rms_norm])
def test_a_bad_row_never_changes_another_row(fn, bad_value):
    x = np.random.default_rng(3).normal(size=(5, 6))
    clean = fn(x)
    x[2, 3] = bad_value
    y = fn(x)
    np.testing.assert_array_equal(np.delete(y, 2, axis=0), np.delete(clean, 2, axis=0))
    if not np.isfinite(bad_value):
        assert not np.all(np.isfinite(y[2]))
