"""lneps.jacobian: the closed form against complex-step and central differences, the
eigenvalue predictions, the mean-square formula, shift invariance and the Lipschitz bound."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import lneps

U = np.finfo(float).eps / 2
SETTINGS = settings(max_examples=60, deadline=None)

eps_st = st.floats(min_value=1e-8, max_value=10.0)
dims = st.integers(min_value=2, max_value=9)
values = st.floats(min_value=-100, max_value=100, allow_nan=False, allow_infinity=False)


@st.composite
def tokens(draw, d=None):
    d = draw(dims) if d is None else d
    return draw(arrays(np.float64, d, elements=values))


def _ln(eps):
    return lambda x: lneps.layer_norm(x, eps=eps)


@SETTINGS
@given(tokens(), eps_st)
def test_closed_form_matches_complex_step(z, eps):
    J = lneps.jacobian(z, eps=eps)
    C = lneps.numerical_jacobian(_ln(eps), z, method="complex-step")
    # Relative to 1/s, the size of the closed form's terms (not to |J|: for d = 2 the only
    # nonzero eigenvalue is the radial one, which the closed form gets by cancellation).
    scale = 1 / np.sqrt(np.var(z) + eps)
    assert np.max(np.abs(C - J)) <= 1e-13 * scale


@SETTINGS
@given(tokens(), st.floats(min_value=1e-3, max_value=10.0))
def test_closed_form_matches_central_differences(z, eps):
    # The default step is h ~ 6e-6 max(1, |z|); the core bends on the scale sqrt(q + eps).
    # Truncation error ~ (h/s)^2 / s with s = sqrt(q + eps); rounding ~ u/h < 1e-10.
    J = lneps.jacobian(z, eps=eps)
    N = lneps.numerical_jacobian(_ln(eps), z, method="central")
    h = np.finfo(float).eps ** (1 / 3) * max(1.0, np.abs(z).max())
    s = np.sqrt(np.var(z) + eps)
    assert np.max(np.abs(N - J)) <= 10 * (h / s) ** 2 / s + 1e-9


@SETTINGS
@given(tokens(), eps_st)
def test_jacobian_is_symmetric_and_kills_the_offset_direction(z, eps):
    J = lneps.jacobian(z, eps=eps)
    assert np.array_equal(J, J.T)
    assert np.max(np.abs(J @ np.ones(z.size))) <= 1e-12 / np.sqrt(np.var(z) + eps)


@SETTINGS
@given(tokens(), st.floats(min_value=1e-5, max_value=10.0))
def test_eigenvalues_match_the_predictions(z, eps):
    J = lneps.jacobian(z, eps=eps)
    predicted = lneps.predicted_eigenvalues(z, eps=eps)
    computed = np.linalg.eigvalsh(J)
    # Absolute error relative to 1/s = (q + eps)^(-1/2), the size of the closed form's terms:
    # the radial eigenvalue may be tiny, and the closed form produces it by the cancellation
    # chapter 3 describes.
    assert np.max(np.abs(computed - predicted)) <= 1e-12 / np.sqrt(np.var(z) + eps)
    assert predicted.max() <= eps**-0.5 * (1 + 1e-12)


def test_eigenvalues_at_a_constant_input_are_those_of_P_over_sqrt_eps():
    eps = 1e-4
    ev = lneps.predicted_eigenvalues(np.full(5, 2.5), eps=eps)
    assert ev.tolist() == [0.0] + [eps**-0.5] * 4
    assert np.allclose(lneps.jacobian(np.full(5, 2.5), eps=eps), (np.eye(5) - 0.2) / np.sqrt(eps))


def test_radial_eigenvalue_d2():
    z, eps = np.array([-3.0, 3.0]), 0.5
    assert np.allclose(lneps.predicted_eigenvalues(z, eps=eps), [0.0, eps / (9.0 + eps) ** 1.5])


@SETTINGS
@given(tokens(), eps_st)
def test_mean_square_formula(z, eps):
    v = z - z.mean()
    q = v @ v / z.size
    got = lneps.normalized_variance(z, eps=eps)
    assert got == pytest.approx(q / (q + eps), rel=1e-12, abs=1e-300)
    assert np.mean(lneps.layer_norm(z, eps=eps) ** 2) == pytest.approx(got, rel=1e-12, abs=1e-15)


def test_normalized_variance_axis_and_values():
    x = np.array([[1.0, 2.0, 3.0], [5.0, 5.0, 5.0]])
    assert lneps.normalized_variance(x, eps=1 / 3).tolist() == [2 / 3 / (2 / 3 + 1 / 3), 0.0]
    assert lneps.normalized_variance(x.T, eps=1 / 3, axis=0).tolist() == [2 / 3, 0.0]
    assert np.isnan(lneps.normalized_variance([5.0, 5.0], eps=0.0))


@SETTINGS
@given(tokens(), st.floats(min_value=-1e3, max_value=1e3), eps_st)
def test_shift_invariance_to_rounding(z, c, eps):
    v = z - z.mean()
    s = np.sqrt(v @ v / z.size + eps)
    # Rounding z + c perturbs each coordinate by at most u (|z| + |c|); divided by s.
    tol = 8 * z.size * U * (np.abs(z).max() + abs(c)) / s
    assert np.max(np.abs(lneps.layer_norm(z + c, eps=eps) - lneps.layer_norm(z, eps=eps))) <= tol


@SETTINGS
@given(st.data(), eps_st)
def test_lipschitz_bound_on_random_pairs(data, eps):
    d = data.draw(dims)
    x = data.draw(tokens(d))
    y = data.draw(tokens(d))
    scale = data.draw(st.sampled_from([1e-6, 1e-3, 1.0]))  # near-constant tokens as well
    x, y = x * scale, y * scale
    gap = np.linalg.norm(x - y)
    # Below this gap the ratio measures rounding of u, not the function.
    if gap < 1e-7 * max(1.0, np.linalg.norm(x)):
        return
    assert lneps.lipschitz_ratios(x, y, eps=eps) <= eps**-0.5 * (1 + 1e-9)


def test_lipschitz_bound_is_approached_near_a_constant_input():
    eps = 1e-5
    h = np.array([1.0, -2.0, 0.5, 0.5])
    r = lneps.lipschitz_ratios(3.0 + 1e-9 * h, 3.0 - 1e-9 * h, eps=eps)
    assert 0.999999 < r * np.sqrt(eps) <= 1 + 1e-9


def test_full_output_bound_scales_with_max_abs_gamma():
    rng = np.random.default_rng(7)
    eps, gamma = 1e-4, np.array([0.5, -3.0, 2.0])
    x = 1e-3 * rng.normal(size=(2000, 3))
    y = x + 1e-4 * rng.normal(size=(2000, 3))
    du = lneps.layer_norm(x, gamma, eps=eps) - lneps.layer_norm(y, gamma, eps=eps)
    ratio = np.linalg.norm(du, axis=1) / np.linalg.norm(x - y, axis=1)
    assert ratio.max() <= 3.0 * eps**-0.5 * (1 + 1e-9)
    assert ratio.max() > 1.0 * eps**-0.5  # gamma amplifies beyond the core's bound


def test_complex_step_uses_layer_norm_directly():
    z = np.array([0.3, -1.2, 2.5, 0.0])
    J = lneps.numerical_jacobian(lneps.layer_norm, z, method="complex-step")
    assert np.allclose(J, lneps.jacobian(z), rtol=0, atol=1e-15)


# --- bad input --------------------------------------------------------------------------------

@pytest.mark.parametrize("z", [np.ones((2, 3)), 3.0, np.array([])])
def test_jacobian_needs_a_nonempty_1d_token(z):
    with pytest.raises(ValueError, match="z must"):
        lneps.jacobian(z)


def test_negative_eps_is_rejected():
    with pytest.raises(ValueError, match="eps must be >= 0"):
        lneps.jacobian([1.0, 2.0], eps=-1e-5)
    with pytest.raises(ValueError, match="eps must be >= 0"):
        lneps.normalized_variance([1.0, 2.0], eps=-1.0)
    with pytest.raises(ValueError, match="eps must be >= 0"):
        lneps.predicted_eigenvalues([1.0, 2.0], eps=-1.0)


def test_non_numeric_token_is_rejected():
    with pytest.raises(TypeError, match="z must be numeric"):
        lneps.jacobian(["a", "b"])


def test_unknown_method_and_bad_step():
    with pytest.raises(ValueError, match="method must be one of"):
        lneps.numerical_jacobian(lneps.layer_norm, [1.0, 2.0], method="forward")
    with pytest.raises(ValueError, match="step must be a positive"):
        lneps.numerical_jacobian(lneps.layer_norm, [1.0, 2.0], step=-1e-6)
    with pytest.raises(ValueError, match="z must be 1-D"):
        lneps.numerical_jacobian(lneps.layer_norm, np.ones((2, 2)))


@pytest.mark.parametrize("step", ["x", True, np.bool_(False), 1e-6j, [1e-6]])
def test_step_of_the_wrong_type_is_a_type_error(step):
    with pytest.raises(TypeError, match="step must be a real number"):
        lneps.numerical_jacobian(lneps.layer_norm, [1.0, 2.0], step=step)


def test_numpy_and_integer_steps_are_accepted():
    z = np.array([0.3, -1.2, 2.5])
    a = lneps.numerical_jacobian(lneps.layer_norm, z, step=np.float64(1e-5))
    b = lneps.numerical_jacobian(lneps.layer_norm, z, step=1e-5)
    assert np.array_equal(a, b)
    assert lneps.numerical_jacobian(lneps.layer_norm, z, step=1).shape == (3, 3)


def test_identical_rows_are_rejected_by_name():
    x = np.array([[1.0, 2.0, 3.0], [0.0, 1.0, 0.0]])
    y = np.array([[1.0, 2.0, 4.0], [0.0, 1.0, 0.0]])
    with pytest.raises(ValueError, match="identical in row 1"):
        lneps.lipschitz_ratios(x, y)
    with pytest.raises(ValueError, match="identical in row 0"):
        lneps.lipschitz_ratios(x[1], y[1])


def test_lipschitz_ratios_with_gamma():
    rng = np.random.default_rng(11)
    x, y = rng.normal(size=(50, 4)), rng.normal(size=(50, 4))
    gamma, eps = np.array([0.5, -3.0, 2.0, 1.0]), 1e-3
    # Reference: the core by hand, v / sqrt(q + eps), times gamma.
    def core(a):
        v = a - a.mean(axis=1, keepdims=True)
        return v / np.sqrt((v * v).mean(axis=1, keepdims=True) + eps)
    want = np.linalg.norm(gamma * (core(x) - core(y)), axis=1) / np.linalg.norm(x - y, axis=1)
    got = lneps.lipschitz_ratios(x, y, eps=eps, gamma=gamma)
    assert np.allclose(got, want, rtol=1e-12)
    assert np.allclose(lneps.lipschitz_ratios(x, y, eps=eps, gamma=-2.0),
                       2 * lneps.lipschitz_ratios(x, y, eps=eps), rtol=1e-12)
    assert not np.allclose(got, lneps.lipschitz_ratios(x, y, eps=eps))


def test_eps_zero_at_a_constant_input_is_nan_in_both_functions():
    z = np.full(4, 1.5)
    assert np.isnan(lneps.jacobian(z, eps=0.0)).all()
    assert np.isnan(lneps.predicted_eigenvalues(z, eps=0.0)).all()
    # eps = 0 away from a constant input is fine in both.
    z = np.array([1.0, -1.0, 0.0, 0.0])
    assert np.allclose(np.linalg.eigvalsh(lneps.jacobian(z, eps=0.0)),
                       lneps.predicted_eigenvalues(z, eps=0.0), atol=1e-14)


def test_lipschitz_ratios_shape_mismatch():
    with pytest.raises(ValueError, match="same shape"):
        lneps.lipschitz_ratios(np.ones(3), np.ones(4))
