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
    np.testing.assert_allclose(lneps.layer_norm(x, axis=axis), reference_layer_norm(x, 1e-5, axis), rtol=1e-13,
                               atol=1e-14)


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
    np.testing.assert_allclose(lneps.rms_norm(x, gamma, eps=1e-6), want, rtol=1e-15)
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
        lneps.rms_norm(np.ones(4), np.ones((4, 1))) if name == "gamma" else lneps.layer_norm(np.ones(4),
                                                                                             beta=np.ones((2, 2)))


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
        lneps.layer_norm(np.ones((2, 3)), axis=1.0)
    with pytest.raises(ValueError, match="trailing axes"):
        lneps.layer_norm(np.ones((2, 3, 4)), axis=(0, 1))


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


# --- compute_dtype: the accurate default and the faithful low-precision path -----------------

import ml_dtypes  # noqa: E402

BF16 = ml_dtypes.bfloat16


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32])
@pytest.mark.parametrize("fn", [lneps.layer_norm, lneps.rms_norm])
def test_low_precision_input_keeps_its_dtype_on_every_path(fn, dtype):
    x = np.random.default_rng(4).normal(size=(3, 8)).astype(dtype)
    for compute_dtype in (None, np.float16, BF16, np.float32, np.float64):
        assert fn(x, compute_dtype=compute_dtype).dtype == np.dtype(dtype)


def test_compute_dtype_float64_agrees_with_the_default():
    # Same two-pass formula, explicit pairwise sums instead of np.mean: equal to rounding.
    x = np.random.default_rng(5).normal(3.0, 2.0, size=(6, 33))
    np.testing.assert_allclose(lneps.layer_norm(x, compute_dtype=np.float64), lneps.layer_norm(x), rtol=1e-13,
                               atol=1e-14)
    np.testing.assert_allclose(lneps.rms_norm(x, compute_dtype=np.float64), lneps.rms_norm(x), rtol=1e-13)


def test_float16_compute_rounds_eps_too_so_a_constant_row_gives_nan():
    row = np.full(16, 3.0, dtype=np.float16)
    assert np.all(np.isnan(lneps.layer_norm(row, eps=1e-12, compute_dtype=np.float16)))
    # eps kept in float (the default, and float32 compute): 0 / sqrt(1e-12) = 0.
    assert np.all(lneps.layer_norm(row, eps=1e-12) == 0)
    assert np.all(lneps.layer_norm(row, eps=1e-12, compute_dtype=np.float32) == 0)
    # bfloat16 keeps 1e-12 (its range is float32's): no NaN.
    assert np.all(lneps.layer_norm(row.astype(BF16), eps=1e-12, compute_dtype=BF16) == 0)
    assert np.all(np.isnan(lneps.rms_norm(np.zeros(8, np.float16), eps=1e-12, compute_dtype=np.float16)))


def test_float16_compute_squares_past_65504_to_inf_and_the_row_collapses_to_zero():
    # |x - mu| = 300 > 256: 300**2 = 90000 > 65504 is inf in float16; v / sqrt(inf) = 0.
    x = np.array([-300.0, 300.0, -300.0, 300.0], dtype=np.float16)
    y = lneps.layer_norm(x, compute_dtype=np.float16)
    assert np.all(y == 0)
    np.testing.assert_allclose(lneps.layer_norm(x).astype(np.float64), [-1, 1, -1, 1], rtol=1e-3)


def test_float16_compute_accumulates_in_float16():
    # 100 copies of 1000: the float16 sum passes 65504 and overflows; np.mean would not.
    x = np.full(100, 1000.0, dtype=np.float16)
    assert np.all(np.isnan(lneps.layer_norm(x, compute_dtype=np.float16)))
    assert np.all(lneps.layer_norm(x) == 0)


def test_gamma_and_beta_are_applied_in_the_compute_dtype():
    x = np.random.default_rng(6).normal(size=(5, 12)).astype(np.float16)
    gamma = np.random.default_rng(7).normal(size=12)
    beta = np.random.default_rng(8).normal(size=12)
    u16 = lneps.layer_norm(x, compute_dtype=np.float16)
    want = u16 * gamma.astype(np.float16) + beta.astype(np.float16)
    np.testing.assert_array_equal(lneps.layer_norm(x, gamma, beta, compute_dtype=np.float16), want)


@pytest.mark.parametrize("bad", ["float17", "int32", np.int64, complex, bool, "V8"])
def test_a_compute_dtype_that_is_not_a_real_float_is_a_type_error(bad):
    for fn in (lneps.layer_norm, lneps.rms_norm):
        with pytest.raises(TypeError, match="compute_dtype"):
            fn(np.ones(4, np.float16), compute_dtype=bad)


def test_complex_input_with_a_compute_dtype_is_a_type_error():
    with pytest.raises(TypeError, match="compute_dtype"):
        lneps.layer_norm(np.ones(3, complex), compute_dtype=np.float32)


@pytest.mark.parametrize("compute_dtype", ["float16", "bfloat16", np.dtype(np.float32)])
def test_compute_dtype_accepts_names_and_dtype_objects(compute_dtype):
    x = np.array([2.0, 4.0, 6.0, 8.0], dtype=np.float32)
    y = lneps.layer_norm(x, compute_dtype=compute_dtype)
    np.testing.assert_allclose(y, [-1.342, -0.447, 0.447, 1.342], atol=0.01)


# --- the API a reference needs: PyTorch's and ONNX's definitions, written out ---------------

from lneps import oracle  # noqa: E402

F64 = np.float64


def onnx_layer_normalization(X, Scale, B, axis, epsilon):
    """ONNX LayerNormalization (opset 17), its function body step by step, in float64:
    Mean = ReduceMean(X, axes=[axis..r-1]), D = X - Mean, Var = ReduceMean(D * D),
    StdDev = Sqrt(Var + epsilon), InvStdDev = Reciprocal(StdDev),
    Y = D * InvStdDev * Scale + B; outputs Y, Mean, InvStdDev."""
    axes = tuple(range(axis % X.ndim, X.ndim))
    mean = X.mean(axis=axes, keepdims=True)
    D = X - mean
    inv = 1 / np.sqrt((D * D).mean(axis=axes, keepdims=True) + epsilon)
    return D * inv * Scale + B, mean, inv


def torch_group_norm(x, G, w, b, eps):
    """torch.nn.functional.group_norm as its documentation defines it (float64)."""
    N, C = x.shape[:2]
    g = x.reshape(N, G, -1)
    y = (g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + eps)
    shape = (1, C) + (1,) * (x.ndim - 2)
    return y.reshape(x.shape) * w.reshape(shape) + b.reshape(shape)


def test_axis_tuple_is_onnx_layer_normalization_with_its_mean_and_inv_std():
    rng = np.random.default_rng(20)
    X = rng.normal(2, 3, (2, 3, 4, 5))
    for axis in (1, 2, 3, -1):
        shape = X.shape[axis % 4:]
        Scale, B = rng.normal(size=shape), rng.normal(size=shape)
        want, mean, inv = onnx_layer_normalization(X, Scale, B, axis, 1e-5)
        got, gm, gi = lneps.layer_norm(X, Scale, B, axis=tuple(range(axis % 4, 4)), return_stats=True)
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(gm, mean, rtol=1e-15)
        np.testing.assert_allclose(gi, inv, rtol=1e-14)
        assert gm.shape == mean.shape and gi.shape == inv.shape


def test_axis_tuple_is_a_reshape_and_stays_correctly_rounded():
    x = np.random.default_rng(21).normal(size=(6, 4, 25)).astype(np.float32)
    g = np.random.default_rng(22).normal(1, 0.3, (4, 25)).astype(np.float32)
    got = lneps.layer_norm(x, g, axis=(-2, -1))
    want = oracle.layer_norm_rounded(x.reshape(6, 100), g.reshape(100), eps=1e-5).reshape(x.shape)
    np.testing.assert_array_equal(got.astype(F64), want)


def test_group_norm_is_torchs_and_is_correctly_rounded():
    rng = np.random.default_rng(23)
    x = rng.normal(1, 2, (3, 6, 5, 2))
    w, b = rng.normal(size=6), rng.normal(size=6)
    for G in (1, 2, 3, 6):  # 6: instance normalization
        np.testing.assert_allclose(lneps.group_norm(x, G, w, b), torch_group_norm(x, G, w, b, 1e-5), rtol=1e-13,
                                   atol=1e-13)
    x32 = x.astype(np.float32)
    rows = x32.reshape(3 * 2, -1)
    gamma = np.broadcast_to(w.reshape(1, 6, 1, 1), x.shape).reshape(6, -1)
    beta = np.broadcast_to(b.reshape(1, 6, 1, 1), x.shape).reshape(6, -1)
    got = lneps.group_norm(x32, 2, w, b).reshape(6, -1).astype(F64)
    np.testing.assert_array_equal(got, oracle.layer_norm_rounded(rows, gamma, beta, eps=1e-5))
    y, mean, rstd = lneps.group_norm(x, 3, return_stats=True)
    assert mean.shape == rstd.shape == (3, 3)
    np.testing.assert_allclose(mean, x.reshape(3, 3, -1).mean(-1), rtol=1e-15)


def test_group_norm_checks_its_arguments():
    x = np.ones((2, 6, 3))
    with pytest.raises(ValueError, match="divide"):
        lneps.group_norm(x, 4)
    with pytest.raises(ValueError, match=">= 1"):
        lneps.group_norm(x, 0)
    with pytest.raises(TypeError, match="num_groups"):
        lneps.group_norm(x, 2.0)
    with pytest.raises(ValueError, match="at least 2 axes"):
        lneps.group_norm(np.ones(6), 2)
    with pytest.raises(ValueError, match=r"gamma.*\(6,\)"):
        lneps.group_norm(x, 2, gamma=np.ones(3))
    with pytest.raises(ValueError, match="eps"):
        lneps.group_norm(x, 2, eps=-1.0)


def test_batch_norm_training_uses_the_batch_and_inference_uses_the_stored_statistics():
    rng = np.random.default_rng(24)
    x = rng.normal(3, 2, (8, 4, 5))  # torch's (N, C, L)
    w, b = rng.normal(size=4), rng.normal(size=4)
    mu, var = x.mean(axis=(0, 2)), x.var(axis=(0, 2))
    train = lneps.batch_norm(x, w, b, axis=(0, 2))
    want = (x - mu[None, :, None]) / np.sqrt(var[None, :, None] + 1e-5) * w[None, :, None] + b[None, :, None]
    np.testing.assert_allclose(train, want, rtol=1e-13, atol=1e-13)
    rm, rv = rng.normal(size=4), rng.uniform(0, 2, 4)
    infer = lneps.batch_norm(x, w, b, axis=(0, 2), training=False, running_mean=rm, running_var=rv)
    want = (x - rm[None, :, None]) / np.sqrt(rv[None, :, None] + 1e-5) * w[None, :, None] + b[None, :, None]
    np.testing.assert_allclose(infer, want, rtol=1e-13, atol=1e-13)
    # In use, one example's output does not depend on the others; in training it does.
    other = x.copy()
    other[1:] += 5
    assert np.array_equal(lneps.batch_norm(other, axis=(0, 2), training=False, running_mean=rm, running_var=rv)[0],
                          lneps.batch_norm(x, axis=(0, 2), training=False, running_mean=rm, running_var=rv)[0])
    assert not np.allclose(lneps.batch_norm(other, axis=(0, 2))[0], lneps.batch_norm(x, axis=(0, 2))[0])


def test_batch_norm_inference_is_correctly_rounded_where_eps_meets_a_tiny_variance():
    from fractions import Fraction

    x = np.array([[0.1, -0.2, 0.3], [1e-4, 2e-4, -1e-4]], dtype=np.float32).T  # (tokens, features)
    rm, rv = np.array([0.05, 1e-4]), np.array([1e-12, 0.0])
    got = lneps.batch_norm(x, training=False, running_mean=rm, running_var=rv)
    fmt = oracle.exact_format(np.float32)
    for i in range(3):
        for j in range(2):
            a = Fraction(float(x[i, j])) - Fraction(float(rm[j]))
            want = oracle.round_quotient(a, Fraction(float(rv[j])) + Fraction(1e-5), 0, fmt)
            assert float(got[i, j]) == want


def test_batch_norm_checks_its_arguments():
    x = np.ones((4, 3))
    with pytest.raises(ValueError, match="training=False"):
        lneps.batch_norm(x, running_mean=np.zeros(3), running_var=np.ones(3))
    with pytest.raises(ValueError, match="needs running_mean"):
        lneps.batch_norm(x, training=False, running_mean=np.zeros(3))
    with pytest.raises(ValueError, match="negative"):
        lneps.batch_norm(x, training=False, running_mean=np.zeros(3), running_var=-np.ones(3))
    with pytest.raises(ValueError, match=r"running_mean.*\(3,\)"):
        lneps.batch_norm(x, training=False, running_mean=np.zeros(4), running_var=np.ones(3))
    with pytest.raises(TypeError, match="training"):
        lneps.batch_norm(x, training="no")


def test_rms_norm_default_eps_is_torchs_rule():
    assert lneps.rms_norm_default_eps(np.float16) == lneps.rms_norm_default_eps(BF16) == 2.0**-23
    assert lneps.rms_norm_default_eps(np.float32) == 2.0**-23
    assert lneps.rms_norm_default_eps(np.float64) == 2.0**-52
    x = np.random.default_rng(25).normal(0, 1e-3, (4, 16))
    for dt, eps in ((np.float16, 2.0**-23), (BF16, 2.0**-23), (np.float32, 2.0**-23), (np.float64, 2.0**-52)):
        xd = x.astype(dt)
        np.testing.assert_array_equal(lneps.rms_norm(xd), lneps.rms_norm(xd, eps=eps))


def test_return_stats_are_the_exact_statistics_to_float64():
    from fractions import Fraction

    x = np.random.default_rng(26).normal(6e4, 8, (5, 300)).astype(np.float32)
    y, mean, rstd = lneps.layer_norm(x, return_stats=True)
    assert mean.shape == rstd.shape == (5, 1) and mean.dtype == rstd.dtype == F64
    for k, row in enumerate(x):
        S = sum(Fraction(float(v)) for v in row)
        mu = S / 300
        var = sum((Fraction(float(v)) - mu) ** 2 for v in row) / 300
        assert abs(Fraction(float(mean[k, 0])) - mu) <= abs(mu) * Fraction(2) ** -53
        exact = 1 / np.sqrt(float(var + Fraction(1e-5)))
        assert abs(rstd[k, 0] / exact - 1) < 200 * 2.0**-53
    _, rs = lneps.rms_norm(x, eps=1e-6, return_stats=True)
    np.testing.assert_allclose(rs[:, 0], 1 / np.sqrt((x.astype(F64) ** 2).mean(1) + 1e-6), rtol=1e-13)
    with pytest.raises(TypeError, match="return_stats"):
        lneps.layer_norm(x, return_stats=1)


def test_against_pytorch_in_float64_when_it_is_installed():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(27)
    x = rng.normal(1, 3, (4, 6, 8))
    w, b = rng.normal(size=(6, 8)), rng.normal(size=(6, 8))
    t = torch.from_numpy
    np.testing.assert_allclose(lneps.layer_norm(x, w, b, axis=(-2, -1)),
                               F.layer_norm(t(x), (6, 8), t(w), t(b), 1e-5).numpy(), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(lneps.rms_norm(x, w, axis=(-2, -1)),
                               F.rms_norm(t(x), (6, 8), t(w)).numpy(), rtol=1e-13)
    c = rng.normal(size=6)
    np.testing.assert_allclose(lneps.group_norm(x, 3, c, c), F.group_norm(t(x), 3, t(c), t(c), 1e-5).numpy(),
                               rtol=1e-13, atol=1e-13)
    rm, rv = rng.normal(size=6), rng.uniform(0.1, 2, 6)
    got = lneps.batch_norm(x, c, c, axis=(0, 2), training=False, running_mean=rm, running_var=rv)
    want = F.batch_norm(t(x), t(rm), t(rv), t(c), t(c), training=False, eps=1e-5).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


# --- rough edges: accepted correctly, or refused with a message naming the problem ----------


def test_a_gain_of_shape_1_d_broadcasts_like_numpy():
    x = np.random.default_rng(30).normal(size=(3, 5)).astype(np.float32)
    g, b = np.linspace(0.5, 2, 5), np.linspace(-1, 1, 5)
    want = lneps.layer_norm(x, g, b)
    np.testing.assert_array_equal(lneps.layer_norm(x, g[None, :], b[None, :]), want)
    np.testing.assert_array_equal(lneps.layer_norm(x, g, np.float64(0.25) * np.ones((1, 1))),
                                  lneps.layer_norm(x, g, 0.25))
    np.testing.assert_array_equal(lneps.rms_norm(x, g[None, :]), lneps.rms_norm(x, g))
    x3 = x.reshape(3, 1, 5).repeat(2, axis=1)  # (3, 2, 5): a (1, 1, 5) gain and a (5,) one agree
    np.testing.assert_array_equal(lneps.layer_norm(x3, g.reshape(1, 1, 5)), lneps.layer_norm(x3, g))
    # group and batch normalization: (1, C, 1) per channel, as convolutional code writes it
    z = np.random.default_rng(31).normal(size=(2, 4, 3))
    c = np.array([1.0, 2.0, -1.0, 0.5])
    np.testing.assert_array_equal(lneps.group_norm(z, 2, c.reshape(1, 4, 1), c), lneps.group_norm(z, 2, c, c))
    np.testing.assert_array_equal(lneps.batch_norm(z, c.reshape(1, 4, 1), axis=(0, 2)),
                                  lneps.batch_norm(z, c, axis=(0, 2)))


def test_a_gain_varying_along_another_axis_is_refused_by_name():
    x = np.ones((2, 4))
    with pytest.raises(ValueError, match=r"gamma of shape \(2, 4\) varies along axis 0"):
        lneps.layer_norm(x, np.ones((2, 4)))
    with pytest.raises(ValueError, match=r"beta.*\(4,\).*\(2, 3\)"):
        lneps.layer_norm(x, beta=np.ones((2, 3)))
    with pytest.raises(ValueError, match="gamma"):
        lneps.group_norm(np.ones((2, 4, 3)), 2, np.ones((2, 4, 1)))


def test_python_integers_too_large_for_numpy_are_named():
    with pytest.raises(ValueError, match=str(2**70)):
        lneps.layer_norm([[1, 2**70]])
    with pytest.raises(ValueError, match=str(-(2**64))):
        lneps.rms_norm([3, -(2**64), 5])
    with pytest.raises(ValueError, match=r"gamma holds the integer " + str(2**65)):
        lneps.layer_norm([1.0, 2.0], gamma=[1, 2**65])


def test_longdouble_is_refused_not_silently_rounded():
    if np.finfo(np.longdouble).nmant <= 52:
        pytest.skip("np.longdouble is float64 on this platform")
    x = np.array([1, 2, 3], dtype=np.longdouble) + np.longdouble(2) ** -60  # bits float64 lacks
    for call in (lambda: lneps.layer_norm(x), lambda: lneps.rms_norm(x), lambda: lneps.batch_norm(x[:, None]),
                 lambda: lneps.group_norm(x.reshape(1, 3, 1), 3), lambda: lneps.layer_norm([1.0, 2.0, 3.0], gamma=x)):
        with pytest.raises(TypeError, match="longdouble.*not supported"):
            call()


def test_batch_norm_training_needs_more_than_one_value_per_feature():
    with pytest.raises(ValueError, match="Expected more than 1 value per channel when training"):
        lneps.batch_norm(np.ones((1, 3)))
    with pytest.raises(ValueError, match="Expected more than 1 value per channel when training"):
        lneps.batch_norm(np.ones((1, 3, 1)), axis=(0, 2))
    # at inference one example is fine, and two examples in training are
    y = lneps.batch_norm(np.ones((1, 3)), training=False, running_mean=np.zeros(3), running_var=np.ones(3))
    assert y.shape == (1, 3)
    np.testing.assert_allclose(lneps.batch_norm(np.array([[0.0, 2.0], [2.0, 6.0]]), eps=0.0), [[-1, -1], [1, 1]])


def test_a_complex_gain_or_bias_with_real_x_is_a_type_error():
    x = np.ones((2, 4))
    for call in (lambda: lneps.layer_norm(x, np.ones(4) * 1j), lambda: lneps.layer_norm(x, beta=1j),
                 lambda: lneps.rms_norm(x, np.ones(4, complex)), lambda: lneps.group_norm(x.reshape(1, 4, 2), 2, 1j),
                 lambda: lneps.batch_norm(x, beta=np.ones(4) * 1j),
                 lambda: lneps.batch_norm(x, training=False, running_mean=np.ones(4) * 1j, running_var=np.ones(4))):
        with pytest.raises(TypeError, match="complex.*real"):
            call()
    # complex x with a complex gain stays the analytic formula
    z = np.array([0.3, -1.2, 2.0]) + 1e-30j
    np.testing.assert_allclose(lneps.layer_norm(z, 2j).imag, 2 * lneps.layer_norm(z.real), rtol=1e-15)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64])
def test_group_and_batch_norm_in_blocks_give_the_same_bits(monkeypatch, dtype):
    # group_norm and batch_norm work a block of rows (or of features) at a time, so their
    # memory does not grow with x; the result is correctly rounded, so the block size cannot
    # change a bit. Blocks of 37 elements cut groups, features and rows at odd places.
    rng = np.random.default_rng(11)
    x = (rng.normal(size=(5, 6, 7, 3)) * 3 + 2).astype(dtype)
    g, b = rng.normal(size=6).astype(dtype), rng.normal(size=6).astype(dtype)
    gb = rng.normal(size=(6, 7)).astype(dtype)
    calls = {
        "group": lambda: lneps.group_norm(x, 3, g, b, return_stats=True),
        "group, scalar gain": lambda: lneps.group_norm(x, 2, dtype(1.5), dtype(-0.25)),
        "batch over (0, 2, 3)": lambda: lneps.batch_norm(x, g, b, axis=(0, 2, 3), return_stats=True),
        "batch over 0, two feature axes": lambda: lneps.batch_norm(x[..., 0], gb, -gb, axis=0, return_stats=True),
        "batch at inference": lambda: lneps.batch_norm(
            x, gb, gb, axis=(0, 3), training=False, running_mean=gb * 0.5, running_var=np.abs(gb) + 0.5,
            return_stats=True),
    }
    def parts(r):
        return r if isinstance(r, tuple) else (r,)

    whole = {k: parts(f()) for k, f in calls.items()}
    monkeypatch.setattr(lneps.kernel, "BLOCK_ELEMENTS", 37)
    for name, f in calls.items():
        (y, *stats), (y0, *stats0) = parts(f()), whole[name]
        assert y.tobytes() == y0.tobytes(), name
        for s, s0 in zip(stats, stats0):  # float64 statistics: within their stated bound, not bitwise
            np.testing.assert_allclose(s, s0, rtol=1e-13, err_msg=name)
