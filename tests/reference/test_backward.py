"""lneps.backward: the gradients against numerical derivatives, an exact 50-digit computation,
PyTorch's autograd (when installed), and the failure modes the book reports."""

import math

import ml_dtypes
import numpy as np
import pytest

import lneps
from lneps import rms_norm_default_eps

RNG = np.random.default_rng(4242)
RNG2 = np.random.default_rng(2424)  # for the tests added later, leaving RNG's sequence as it was


def complex_step_grad(forward, x, g, h=1e-20):
    """dL/dx of L = sum(g * forward(x)) for every entry of x, by the complex step."""
    out = np.empty(x.shape)
    for idx in np.ndindex(x.shape):
        z = x.astype(complex)
        z[idx] += 1j * h
        out[idx] = np.sum(g * forward(z)).imag / h
    return out


@pytest.mark.parametrize("eps", [1e-5, 1e-1, 1e-12])
@pytest.mark.parametrize("d", [2, 3, 8, 33])
def test_layer_norm_backward_matches_the_complex_step(d, eps):
    x = RNG.normal(size=(3, d)) * RNG.choice([1e-3, 1.0, 50.0], size=(3, 1))
    g, gamma, beta = RNG.normal(size=(3, d)), RNG.normal(size=d), RNG.normal(size=d)
    got = lneps.layer_norm_backward(x, g, gamma, eps=eps)
    want = complex_step_grad(lambda z: lneps.layer_norm(z, gamma, beta, eps=eps), x, g)
    # the formula subtracts terms of size |gamma g| / sqrt(q + eps): its rounding error is
    # relative to that, not to the (possibly far smaller) result, as for chapter 3's radial term
    scale = np.abs(g * gamma).max(axis=1, keepdims=True) / np.sqrt(x.var(axis=1, keepdims=True) + eps)
    assert np.all(np.abs(got.x - want) <= 1e-14 * scale)
    u = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + eps)
    np.testing.assert_allclose(got.gamma, (g * u).sum(0), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(got.beta, [math.fsum(c) for c in g.T])  # correctly rounded sums


def test_central_differences_agree_too():
    x, g = RNG.normal(size=(2, 6)), RNG.normal(size=(2, 6))
    got = lneps.layer_norm_backward(x, g, eps=1e-5).x
    h = 1e-6
    num = np.empty_like(x)
    for idx in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[idx] = h
        up, down = np.sum(g * lneps.layer_norm(x + e, eps=1e-5)), np.sum(g * lneps.layer_norm(x - e, eps=1e-5))
        num[idx] = (up - down) / (2 * h)
    assert np.max(np.abs(got - num)) < 1e-8


def _mp_layer_norm_grads(x, g, gamma, eps, digits=50):
    """dx, dgamma, dbeta of one row from the textbook formula in mpmath at 50 digits."""
    mpmath = pytest.importorskip("mpmath")
    with mpmath.workdps(digits):
        z = [mpmath.mpf(float(v)) for v in x]
        gg = [mpmath.mpf(float(v)) for v in g]
        gh = [a * mpmath.mpf(float(b)) for a, b in zip(gg, gamma)]
        n = len(z)
        mu = mpmath.fsum(z) / n
        v = [zi - mu for zi in z]
        s = mpmath.sqrt(mpmath.fsum(vi * vi for vi in v) / n + mpmath.mpf(eps))
        u = [vi / s for vi in v]
        mg = mpmath.fsum(gh) / n
        mgu = mpmath.fsum(a * b for a, b in zip(gh, u)) / n
        return [(gh[j] - mg - u[j] * mgu) / s for j in range(n)], [a * b for a, b in zip(gg, u)], gg


def test_against_an_exact_50_digit_computation():
    x = RNG.normal(size=5) * 3 + 1
    g, gamma = RNG.normal(size=5), RNG.normal(size=5)
    eps = 1e-3
    dx, dgamma, dbeta = _mp_layer_norm_grads(x, g, gamma, eps)
    got = lneps.layer_norm_backward(x[None, :], g[None, :], gamma, eps=eps)
    # correctly rounded: the float64 nearest to the 50-digit value (no tie within 1e-50)
    np.testing.assert_array_equal(got.x[0], [float(v) for v in dx])
    np.testing.assert_array_equal(got.gamma, [float(v) for v in dgamma])
    np.testing.assert_array_equal(got.beta, [float(v) for v in dbeta])


@pytest.mark.parametrize("dt", [np.float16, ml_dtypes.bfloat16, np.float32], ids=lambda t: np.dtype(t).name)
def test_default_is_correctly_rounded_in_every_format(dt):
    """Each element is the format's nearest number to the 50-digit value: rounding the
    float64 nearest once more is exact unless that float64 is a midpoint of the format
    (skipped: it does not happen on these random numbers)."""
    from lneps.formats import to_format

    x = (RNG2.normal(size=(2, 7)) * [[1.0], [0.01]] + [[0.0], [5.0]]).astype(dt)
    g = RNG2.normal(size=(2, 7)).astype(dt)
    gamma = RNG2.normal(size=7).astype(dt)
    got = lneps.layer_norm_backward(x, g, gamma, eps=1e-5)
    rows = [_mp_layer_norm_grads(x[i], g[i], gamma, 1e-5) for i in range(2)]
    want_dx = np.array([[float(v) for v in r[0]] for r in rows])
    want_dgamma = np.array([float(sum(r[1][j] for r in rows)) for j in range(7)])
    for a, w in ((got.x, want_dx), (got.gamma, want_dgamma)):
        assert a.dtype == np.dtype(dt)
        np.testing.assert_array_equal(a.astype(np.float64), to_format(w, dt).astype(np.float64))


def test_default_matches_the_kernel_on_any_axis_and_gain_shape():
    from lneps.kernel import gradients

    x = RNG2.normal(size=(3, 6, 2)).astype(np.float32)
    g = RNG2.normal(size=(3, 6, 2)).astype(np.float16)  # mixed: taken exactly, output in x's dtype
    gamma = RNG2.normal(size=(1, 6, 1)).astype(np.float32)
    got = lneps.layer_norm_backward(x, g, gamma, eps=1e-5, axis=1)
    rows = lambda a: np.moveaxis(a, 1, -1).reshape(-1, 6)  # noqa: E731
    want = gradients.layer_norm_gradients(rows(x), rows(g), gamma.reshape(-1), eps=1e-5, dtype=np.float32)
    np.testing.assert_array_equal(rows(got.x), want[0])
    np.testing.assert_array_equal(got.gamma, want[1])
    np.testing.assert_array_equal(got.beta, want[2])
    assert got.x.dtype == np.float32 and got.x.shape == x.shape
    r = lneps.rms_norm_backward(x, g, 2.0, eps=1e-6, axis=1)
    want = gradients.rms_norm_gradients(rows(x), rows(g), 2.0, eps=1e-6, dtype=np.float32)
    np.testing.assert_array_equal(rows(r.x), want[0])
    np.testing.assert_array_equal(r.gamma, want[1])


def test_complex_input_and_stats_dtype_keep_the_float64_formula():
    x, g = RNG2.normal(size=(2, 5)), RNG2.normal(size=(2, 5))
    out = lneps.layer_norm_backward(x.astype(complex), g, eps=1e-5)
    assert out.x.dtype == np.complex128
    np.testing.assert_allclose(out.x.real, lneps.layer_norm_backward(x, g, eps=1e-5).x, rtol=1e-12, atol=1e-14)
    kept = lneps.layer_norm_backward(x, g, eps=1e-5, stats_dtype=np.float64)  # statistics kept in float64
    np.testing.assert_allclose(kept.x, lneps.layer_norm_backward(x, g, eps=1e-5).x, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("eps", [1e-6, 1e-2])
def test_rms_norm_backward_matches_the_complex_step(eps):
    x, g, gamma = RNG.normal(size=(4, 9)), RNG.normal(size=(4, 9)), RNG.normal(size=9)
    got = lneps.rms_norm_backward(x, g, gamma, eps=eps)
    want = complex_step_grad(lambda z: lneps.rms_norm(z, gamma, eps=eps), x, g)
    assert np.max(np.abs(got.x - want)) <= 1e-13 * np.abs(want).max()
    n = x / np.sqrt((x * x).mean(1, keepdims=True) + eps)
    np.testing.assert_allclose(got.gamma, (g * n).sum(0), rtol=1e-12)


def test_rms_default_eps_is_torchs_rule():
    assert rms_norm_default_eps(np.float16) == rms_norm_default_eps(np.float32) == 2.0**-23
    assert rms_norm_default_eps(np.float64) == 2.0**-52
    x, g = RNG.normal(size=(2, 4)), RNG.normal(size=(2, 4))
    np.testing.assert_array_equal(lneps.rms_norm_backward(x, g).x, lneps.rms_norm_backward(x, g, eps=2.0**-52).x)


def test_eps_derivative_is_minus_u_over_twice_q_plus_eps():
    x, gamma = RNG.normal(size=(3, 7)), RNG.normal(size=7)
    eps, h = 1e-3, 1e-7
    num = (lneps.layer_norm(x, gamma, eps=eps + h) - lneps.layer_norm(x, gamma, eps=eps - h)) / (2 * h)
    got = lneps.layer_norm_eps_derivative(x, gamma, eps=eps)
    np.testing.assert_allclose(got, num, rtol=1e-6, atol=1e-9)
    q = x.var(1, keepdims=True)
    np.testing.assert_allclose(got, -gamma * lneps.layer_norm(x, eps=eps) / (2 * (q + eps)), rtol=1e-12)


def test_constant_row_gain_is_eps_to_the_minus_half():
    g = RNG.normal(size=(1, 10))
    g -= g.mean()
    for eps in (1e-5, 1e-12):
        dx = lneps.layer_norm_backward(np.full((1, 10), 3.0), g, eps=eps).x
        assert np.linalg.norm(dx) / np.linalg.norm(g) == pytest.approx(eps**-0.5, rel=1e-12)


def test_float16_rstd_overflow_and_eps_rounding():
    const, g = np.full((1, 8), 0.5, dtype=np.float16), RNG.normal(size=(1, 8)).astype(np.float16)
    # eps rounded to float16 is 0 below ~3e-8: 0/0
    assert np.isnan(lneps.layer_norm_backward(const, g, eps=1e-8, compute_dtype=np.float16).x.astype(float)).all()
    assert np.isfinite(lneps.layer_norm_backward(const, g, eps=1e-6, compute_dtype=np.float16).x.astype(float)).all()
    # eps kept in float32, 1/sqrt(q + eps) stored in float16: overflows below 1/65504**2
    kw = dict(compute_dtype=np.float32, stats_dtype=np.float16)
    assert np.isnan(lneps.layer_norm_backward(const, g, eps=1e-10, **kw).x.astype(float)).all()
    assert np.isfinite(lneps.layer_norm_backward(const, g, eps=1e-9, **kw).x.astype(float)).all()
    assert 1e-10 < 1 / 65504.0**2 < 1e-9
    bf = const.astype(ml_dtypes.bfloat16)
    out = lneps.layer_norm_backward(bf, g.astype(ml_dtypes.bfloat16), eps=1e-12, compute_dtype=ml_dtypes.bfloat16)
    assert np.isfinite(out.x.astype(float)).all()


def test_float16_overflow_threshold_of_the_upstream_gradient():
    const = np.full((1, 8), 0.5)
    g = np.zeros((1, 8))
    g[0, 0], g[0, 1] = 1.0, -1.0
    for eps in (1e-5, 1e-3):
        limit = 65520 * math.sqrt(eps)  # 65504 + half an ulp, times sqrt(eps)
        below = lneps.layer_norm_backward(const, 0.999 * limit * g, eps=eps, compute_dtype=np.float32).x
        above = lneps.layer_norm_backward(const, 1.001 * limit * g, eps=eps, compute_dtype=np.float32).x
        with np.errstate(over="ignore"):
            assert np.isfinite(below.astype(np.float16).astype(float)).all()
            assert np.isinf(above.astype(np.float16).astype(float)).any()


def test_nan_stays_in_its_row_but_reaches_every_parameter_gradient():
    x = RNG.normal(size=(5, 6))
    x[2] = 1.5
    g = RNG.normal(size=(5, 6))
    r = lneps.layer_norm_backward(x, g, eps=0.0)
    bad = np.isnan(r.x).any(axis=1)
    assert bad.tolist() == [False, False, True, False, False]
    assert np.isnan(r.gamma).all() and np.isfinite(r.beta).all()
    assert all(np.isfinite(a).all() for a in lneps.layer_norm_backward(x, g, eps=1e-5))


def test_compute_dtype_rounds_and_default_is_correctly_rounded():
    from lneps.formats import to_format

    x = RNG.normal(size=(4, 16)).astype(np.float16)
    g = RNG.normal(size=(4, 16)).astype(np.float16)
    default = lneps.layer_norm_backward(x, g)
    assert default.x.dtype == np.float16
    # the float64 correctly rounded values, rounded once more: the same (no float16 midpoints here)
    exact = lneps.layer_norm_backward(x.astype(np.float64), g.astype(np.float64))
    np.testing.assert_array_equal(default.x, to_format(exact.x, np.float16))
    naive = lneps.layer_norm_backward(x, g, compute_dtype=np.float16)
    assert naive.x.dtype == np.float16 and not np.array_equal(naive.x, default.x)
    assert lneps.layer_norm_backward(np.arange(6).reshape(2, 3), np.ones((2, 3))).x.dtype == np.float64


def test_axis_and_batch_shapes():
    x, g = RNG.normal(size=(2, 5, 3)), RNG.normal(size=(2, 5, 3))
    r = lneps.layer_norm_backward(x, g, eps=1e-5, axis=1)
    moved = lneps.layer_norm_backward(np.moveaxis(x, 1, -1), np.moveaxis(g, 1, -1), eps=1e-5)
    np.testing.assert_allclose(np.moveaxis(r.x, 1, -1), moved.x, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(r.gamma, moved.gamma, rtol=1e-13)
    assert r.gamma.shape == (5,)


@pytest.mark.parametrize("call, exc, words", [
    (lambda: lneps.layer_norm_backward(np.ones((2, 3)), np.ones((3, 2))), ValueError, "shape"),
    (lambda: lneps.layer_norm_backward(np.ones(3), np.ones(3), eps=-1), ValueError, "eps"),
    (lambda: lneps.layer_norm_backward(np.ones(3), np.ones(3), np.ones(4)), ValueError, "gamma"),
    (lambda: lneps.layer_norm_backward(np.array(["a"]), np.ones(1)), TypeError, "numeric"),
    (lambda: lneps.layer_norm_backward(np.ones(3), np.ones(3), compute_dtype="int8"), TypeError, "floating"),
    (lambda: lneps.layer_norm_backward(np.ones(3), np.ones(3), stats_dtype=np.complex64), TypeError, "floating"),
    (lambda: lneps.layer_norm_backward(np.ones((2, 0)), np.ones((2, 0))), ValueError, "empty"),
    (lambda: lneps.rms_norm_backward(np.ones(3), np.ones(2)), ValueError, "shape"),
    (lambda: lneps.rms_norm_backward(np.ones(3), np.ones(3), eps=float("nan")), ValueError, "finite"),
])
def test_bad_input_gets_a_clear_error(call, exc, words):
    with pytest.raises(exc, match=words):
        call()


def test_torch_autograd_agrees():
    torch = pytest.importorskip("torch")
    x, g, gamma, beta = (RNG.normal(size=s) for s in ((4, 12), (4, 12), 12, 12))
    tx = torch.tensor(x, requires_grad=True)
    tg = torch.tensor(gamma, requires_grad=True)
    tb = torch.tensor(beta, requires_grad=True)
    torch.nn.functional.layer_norm(tx, (12,), tg, tb, eps=1e-5).backward(torch.tensor(g))
    ours = lneps.layer_norm_backward(x, g, gamma, eps=1e-5)
    np.testing.assert_allclose(ours.x, tx.grad.numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(ours.gamma, tg.grad.numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(ours.beta, tb.grad.numpy(), rtol=1e-12, atol=1e-13)
    tx = torch.tensor(x, requires_grad=True)
    tg = torch.tensor(gamma, requires_grad=True)
    torch.nn.functional.rms_norm(tx, (12,), tg, eps=1e-6).backward(torch.tensor(g))
    ours = lneps.rms_norm_backward(x, g, gamma, eps=1e-6)
    np.testing.assert_allclose(ours.x, tx.grad.numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(ours.gamma, tg.grad.numpy(), rtol=1e-12, atol=1e-13)
