"""The kernel classes (module lneps.testing._private.kernel_classes): the design classes a test
opts into with kernels=, each with its derived bound. A kernel of the design passes its own
class on every family where the default tolerance fails it, and the class still catches the
defects (the d - 1 variance, eps ignored) in that design."""

import ml_dtypes
import numpy as np
import pytest

import lneps.testing as lt

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.float32


def stats_in_input_format(x, g, b, eps, divisor=0):
    """Two-pass statistics in float32, mean and rstd stored in the input format (torch's CPU
    kernels keep them so), the rest in float32. ``divisor=-1``: the d - 1 variance."""
    dt, xf, d = x.dtype, x.astype(F32), x.shape[-1]
    mu = np.sum(xf, -1, keepdims=True, dtype=F32) / F32(d)
    t = xf - mu
    var = np.sum(t * t, -1, keepdims=True, dtype=F32) / F32(d + divisor)
    r = F32(1) / np.sqrt(var + F32(eps))
    n = (xf - mu.astype(dt).astype(F32)) * r.astype(dt).astype(F32)
    n = n if g is None else n * g.astype(F32)
    return (n if b is None else n + b.astype(F32)).astype(dt)


def cast_then_weighted(x, g, b, eps):
    """Hugging Face's Llama RMSNorm: x * rsqrt(mean(x^2) + eps) in float32, cast to the input
    format, then multiplied by the gain in the input format."""
    dt, xf = x.dtype, x.astype(F32)
    with np.errstate(divide="ignore", invalid="ignore"):
        n = (
            xf * (F32(1) / np.sqrt(np.mean(xf * xf, -1, keepdims=True, dtype=F32) + F32(eps)))
        ).astype(dt)
    return n if g is None else (g * n).astype(dt)


DESIGNS = {
    "stats_in_input_format": (stats_in_input_format, "layer_norm"),
    "cast_then_weighted": (cast_then_weighted, "rms_norm"),
}


def _fails(y, x, g, b, op, eps=1e-5, **kw):
    try:
        lt.assert_close(y, x=x, gamma=g, beta=b, eps=eps, op=op, **kw)
    except AssertionError:
        return True
    return False


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=str)
@pytest.mark.parametrize("name", list(DESIGNS))
def test_a_design_passes_its_own_class_where_the_default_fails_it(name, dtype):
    fn, op = DESIGNS[name]
    default_fails = 0
    for d in (64, 768):
        for fam, (x, g, b) in lt.families(dtype, d, rows=16).items():
            b = None if op == "rms_norm" else b
            if op == "rms_norm" and fam == "wide_range" and d > 100:
                continue  # lneps.rms_norm's exact answer on those rows takes seconds
            with np.errstate(all="ignore"):
                y = fn(x, g, b, 1e-5)
            assert not _fails(y, x, g, b, op, kernels=(name,)), (d, fam)
            default_fails += _fails(y, x, g, b, op)
    assert default_fails >= 2  # the default tolerance is a correct kernel's, not this design's


def test_the_classes_are_opt_in_and_validated():
    assert set(lt.DESIGN_CLASSES) == {"stats_in_input_format", "cast_then_weighted"}
    assert not set(lt.DESIGN_CLASSES) & set(lt.KERNEL_CLASSES)  # never in the default
    x = lt.families(np.float16, 64, rows=4)["normal"].x
    own = lt.forward_bound("layer_norm", x=x, eps=1e-5, kernels="stats_in_input_format")
    default = lt.forward_bound("layer_norm", x=x, eps=1e-5)
    assert np.all(own >= lt.forward_bound("layer_norm", x=x, eps=1e-5, kernels="two_pass"))
    assert own.max() > default.max()  # looser: a correct kernel's bound stays the default
    with pytest.raises(ValueError, match="stats_in_input_format, cast_then_weighted"):
        lt.forward_bound("layer_norm", x=x, eps=1e-5, kernels="stats_in_input")


def test_the_design_classes_still_catch_defects():
    x, g, b = lt.families(np.float16, 64, rows=16)["normal"]
    unbiased = stats_in_input_format(x, g, b, 1e-5, divisor=-1)
    assert _fails(unbiased, x, g, b, "layer_norm", kernels=("stats_in_input_format",))
    xc = lt.families(np.float16, 64, rows=16)["near_constant"].x
    no_eps = stats_in_input_format(xc, None, None, 0.0)
    assert _fails(no_eps, xc, None, None, "layer_norm", kernels=("stats_in_input_format",))
    xr, gr, _ = lt.families(np.float16, 64, rows=16)["normal"]
    wrong_eps = cast_then_weighted(xr * np.float16(0.01), gr, None, 1e-2)  # eps 1000 times off
    assert _fails(
        wrong_eps,
        xr * np.float16(0.01),
        gr,
        None,
        "rms_norm",
        eps=1e-5,
        kernels=("cast_then_weighted",),
    )


def _torch_cpu_backward(x, dy, g, eps=1e-5, sign=-1):
    """dx as torch's CPU kernel computes it in 16 bits: the statistics of the forward pass in
    float32, saved in the input format (mean and rstd), the rest in float32. ``sign=+1``: the
    term u * mean(g u) with the wrong sign."""
    dt, xf = x.dtype, x.astype(F32)
    mu = xf.mean(axis=-1, keepdims=True, dtype=F32)
    t = xf - mu
    r = F32(1) / np.sqrt((t * t).mean(axis=-1, keepdims=True, dtype=F32) + F32(eps))
    mu16, r16 = mu.astype(dt).astype(F32), r.astype(dt).astype(F32)
    u = (xf - mu16) * r16
    gh = dy.astype(F32) * g.astype(F32)
    inner = gh - gh.mean(axis=-1, keepdims=True) + sign * u * (gh * u).mean(axis=-1, keepdims=True)
    return (inner * r16).astype(dt)


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=str)
def test_torch_s_cpu_backward_passes_its_own_class_and_the_wrong_sign_fails_it(dtype):
    rng = np.random.default_rng(3)
    own = dict(op="layer_norm_backward", wrt="x", eps=1e-5, kernels=("stats_in_input_format",))
    default_fails = 0
    for offset in (0.0, 3.0, 20.0):
        x = (rng.normal(size=(16, 256)) + offset).astype(dtype)
        dy = rng.normal(size=(16, 256)).astype(dtype)
        g = rng.uniform(0.5, 2, size=256).astype(dtype)
        dx = _torch_cpu_backward(x, dy, g)
        lt.assert_close(dx, x=x, dy=dy, gamma=g, **own)
        try:
            lt.assert_close(dx, x=x, dy=dy, gamma=g, op="layer_norm_backward", wrt="x", eps=1e-5)
        except AssertionError:
            default_fails += 1
        with pytest.raises(AssertionError, match="wrong sign"):
            lt.assert_close(_torch_cpu_backward(x, dy, g, sign=1), x=x, dy=dy, gamma=g, **own)
    assert default_fails >= 1


# --- the probabilistic bound (probabilistic=True) ---------------------------------------------


def test_gamma_tilde_is_higham_and_mary_s_bound_at_2_to_the_minus_40_per_sum():
    import math

    from lneps.testing._private.kernel_classes import SUM_FAILURE, gamma_n, gamma_tilde

    u = 2.0**-24
    for n in (100, 4096, 8192, 1 << 20):
        lam = math.sqrt(2 * math.log(2 * n / SUM_FAILURE)) / (1 - u)
        # the failure probability of Higham and Mary's Theorem: 2 n exp(-lambda^2 (1-u)^2 / 2)
        assert math.isclose(2 * n * math.exp(-((lam * (1 - u)) ** 2) / 2), 2.0**-40, rel_tol=1e-9)
        assert gamma_tilde(n, u) == min(
            math.expm1(lam * math.sqrt(n) * u + n * u * u / (1 - u)), gamma_n(n, u)
        )
    # at d = 4096 it is about lambda sqrt(d) u, a quarter of the d - 1 variance's 1/(2d)
    assert 8.5 < gamma_tilde(4096, u) / (64 * u) < 8.7
    assert gamma_tilde(4096, u) < 0.3 / (2 * 4096)
    assert gamma_tilde(8, u) == gamma_n(8, u)  # short sums: the worst case is smaller


def test_the_model_is_taken_to_hold_only_on_rows_whose_addends_vary():
    from lneps.testing._private.kernel_classes import random_rows

    fams = lt.families(np.float16, 4096, rows=8)
    for name, holds in (
        ("normal", True),
        ("cancelling_beta", True),
        ("constant", False),
        ("near_constant", False),
        ("midpoint", False),
    ):
        x = fams[name].x.astype(np.float64)
        mean = x.mean(axis=1, keepdims=True)
        var = x.var(axis=1, keepdims=True)
        rstd = 1 / np.sqrt(var + 1e-5)
        z = (x - mean) * rstd
        q = (z * z).mean(axis=1, keepdims=True)
        q4 = (z**4).mean(axis=1, keepdims=True)
        M = np.abs(x).mean(axis=1, keepdims=True)
        ok = random_rows("layer_norm", 4096, 32, M, rstd, q, q4)
        assert ok.shape == (8, 1) and bool(ok.all() if holds else not ok.any()), name


def test_the_probabilistic_bound_lies_between_the_model_and_the_worst_case():
    x = lt.families(np.float16, 4096, rows=8)["normal"].x
    worst = lt.forward_bound("layer_norm", x=x, eps=1e-5)
    sharp = lt.forward_bound("layer_norm", x=x, eps=1e-5, probabilistic=True)
    assert np.all(sharp <= worst) and np.all(sharp >= 0.5 * 2.0**-10)  # the output's rounding
    y = lt.forward_bound("layer_norm", x=x, eps=1e-5, dtype=np.float32, probabilistic=True)
    w = lt.forward_bound("layer_norm", x=x, eps=1e-5, dtype=np.float32)
    # in float32 the sums' share dominates: about 1.5 lambda sqrt(d) u against d u / 2 + ...
    assert 3 < float(np.median(w / y)) < 12
    c = lt.families(np.float16, 4096, rows=8)["near_constant"].x  # the model fails: worst case
    assert np.array_equal(
        lt.forward_bound("layer_norm", x=c, eps=1e-5, probabilistic=True),
        lt.forward_bound("layer_norm", x=c, eps=1e-5),
    )


@pytest.mark.parametrize("name", list(DESIGNS))
def test_a_design_passes_its_own_class_on_rows_that_round_its_statistics_to_subnormals(name):
    # float16 rows of variance at or below eps (sd 1e-4 and 1e-3: a mean near 0 stored as a
    # float16 subnormal), and Llama's product gamma * cast value underflowing to a subnormal
    # (cancelling_beta's gains at d = 8192): the design's own rounding, which its class allows
    fn, op = DESIGNS[name]
    fams = lt.families(np.float16, 1024, rows=8, kinds="all")
    cases = [fams[f] for f in ("sd_1e-3", "sd_1e-4")]
    cases.append(lt.families(np.float16, 8192, rows=8)["cancelling_beta"])
    for x, g, b in cases:
        b = None if op == "rms_norm" else b
        with np.errstate(all="ignore"):
            y = fn(x, g, b, 1e-5)
        for probabilistic in (False, True):
            assert not _fails(y, x, g, b, op, kernels=(name,), probabilistic=probabilistic)
