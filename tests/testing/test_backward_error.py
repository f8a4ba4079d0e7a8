"""lneps.testing._private.backward_error (backward_bound): correct float32 backward kernels
(written here in NumPy) never exceed the derived tolerance, and defective ones do where their defect shows.

Run with ``-s`` to see the measured ratios (worst error / bound) per kernel, family and d."""

import doctest

import ml_dtypes
import numpy as np
import pytest

import lneps
import lneps.testing as lt

from lneps.testing._private import backward_error as bb
from lneps.testing._private.backward_error import backward_bound, backward_scale
from lneps.formats import ulp

F32 = np.float32
BF16 = np.dtype(ml_dtypes.bfloat16)
RNG = np.random.default_rng(77)
DS = (8, 64, 768, 4096)


# --- kernels ----------------------------------------------------------------------------------


def _sum(a, axis, order, acc):
    a = a.astype(acc)
    if order == "sequential":
        return np.take(np.cumsum(a, axis=axis, dtype=acc), -1, axis=axis).astype(F32)
    return np.sum(a, axis=axis, dtype=acc).astype(F32)  # pairwise along a contiguous last axis


def _rsqrt(w, ulps):
    """1/sqrt(w) in float32, moved |ulps| steps from the nearest but kept within 2 ulp of it."""
    exact = 1.0 / np.sqrt(w.astype(np.float64))
    r = exact.astype(F32)
    for _ in range(abs(ulps)):
        r = np.nextafter(r, F32(np.inf) if ulps > 0 else F32(0))
    too_far = np.abs(r.astype(np.float64) - exact) > 2 * ulp(exact, F32)
    return np.where(too_far, np.nextafter(r, F32(0) if ulps > 0 else F32(np.inf)), r)


def kernel(op, x, g, gamma, eps, out, *, order="pairwise", ulps=0, form="mean", defect=None):
    """A float32 backward kernel: (dx, dgamma, dbeta) rounded to ``out``. ``form``: "mean"
    (r (g - mean g - u mean(g u))) or "torch" ((r/d)(d g - sum g - u sum(g u))). ``defect``:
    None, "no_eps", "unbiased", "eps_after_sqrt", "acc16" (sums in float16) or "mean16" (the
    stored mean rounded to float16)."""
    X, G = x.astype(F32), g.astype(F32)
    gam = None if gamma is None else gamma.astype(F32)
    n, d = X.shape
    acc = np.float16 if defect == "acc16" else F32
    S = lambda a, axis=-1: _sum(a, axis, order, acc)  # noqa: E731
    with np.errstate(all="ignore"):
        if op == "layer_norm":
            mu = S(X) / F32(d) if form == "mean" else S(X) * (F32(1) / F32(d))
            if defect == "mean16":
                mu = mu.astype(np.float16).astype(F32)
            v = X - mu[:, None]
        else:
            v = X
        var = S(v * v) / F32(d - 1 if defect == "unbiased" else d)
        if defect == "eps_after_sqrt":
            r = F32(1) / (np.sqrt(var) + F32(eps))
        else:
            r = _rsqrt(var if defect == "no_eps" else var + F32(eps), ulps)
        u = v * r[:, None]
        gh = G if gam is None else G * gam
        if form == "mean":
            b = S(gh * u) / F32(d)
            c = gh - u * b[:, None]
            if op == "layer_norm":
                c = (gh - (S(gh) / F32(d))[:, None]) - u * b[:, None]
            dx = c * r[:, None]
        else:
            b = S(gh * u)
            c = F32(d) * gh - u * b[:, None]
            if op == "layer_norm":
                c = (F32(d) * gh - S(gh)[:, None]) - u * b[:, None]
            dx = c * (r / F32(d))[:, None]
        dgamma = S(G * u, axis=0)
        dbeta = S(G, axis=0)
        return tuple(a.astype(out) for a in (dx, dgamma, dbeta))


CORRECT = {
    "pairwise": dict(),
    "sequential": dict(order="sequential"),
    "rsqrt+2ulp": dict(ulps=2),
    "rsqrt-2ulp,seq": dict(ulps=-2, order="sequential"),
    "torch,rsqrt+1ulp": dict(form="torch", ulps=1),
    "torch,seq,rsqrt-1ulp": dict(form="torch", order="sequential", ulps=-1),
}


# --- inputs -----------------------------------------------------------------------------------


def family(name, n, d, dt):
    z = RNG.normal(size=(n, d))
    if name == "normal":
        x = z
    elif name == "offset":
        x = 100.0 + z if dt == np.float16 else 1000.0 + z
    elif name == "near-constant":  # a few ulps around 1: q far below eps
        x = 1.0 + 2 * float(ml_dtypes.finfo(dt).eps) * np.round(z)
    elif name == "small":  # q far below eps, for RMS norm
        x = 1e-3 * z
    elif name == "wide-range":
        x = z * np.exp2(RNG.integers(-8, 8, size=(n, d)))
    else:
        raise ValueError(name)
    return x.astype(dt)


def reference(op, x, g, gamma, eps, out, wrt):
    """(exact values, s, bound) of one gradient."""
    want = (lneps.layer_norm_backward if op == "layer_norm" else lneps.rms_norm_backward)(
        x.astype(np.float64),
        g.astype(np.float64),
        None if gamma is None else gamma.astype(np.float64),
        eps=eps,
    )
    want = np.asarray(getattr(want, wrt), dtype=np.float64)
    s = backward_scale(op, wrt, x=x, dy=g, gamma=gamma, eps=eps)
    return want, s, backward_bound(op, wrt, x=x, dy=g, gamma=gamma, eps=eps, dtype=out)


def ratio(got, ref, out):
    """worst (error / bound) over the elements of one gradient: the error in ulp of
    max(|exact|, s), NaN or inf where a number is exact counting as infinite."""
    want, s, b = ref
    g64 = got.astype(np.float64)
    with np.errstate(invalid="ignore"):
        err = np.abs(g64 - want) / ulp(np.fmax(np.abs(want), s), out)
    err = np.where(np.isfinite(g64) | ~np.isfinite(want), err, np.inf)
    return float(np.max(err / b))


WRT = {"layer_norm": ("x", "gamma", "beta"), "rms_norm": ("x", "gamma")}


def rows_for(d):
    return max(4, min(32, 32768 // d // 4))


@pytest.mark.parametrize("out", [np.dtype(np.float32), np.dtype(np.float16), BF16], ids=str)
@pytest.mark.parametrize("d", DS)
@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_correct_kernels_stay_within_the_bound(op, d, out):
    eps = 1e-5
    for fam in ("normal", "offset", "near-constant", "wide-range"):
        x = family(fam, rows_for(d), d, out)
        g = RNG.normal(size=x.shape).astype(out)
        gamma = RNG.normal(size=d).astype(out) if fam != "offset" else None
        refs = {wrt: reference(op, x, g, gamma, eps, out, wrt) for wrt in WRT[op]}
        for name, kw in CORRECT.items():
            got = kernel(op, x, g, gamma, eps, out, **kw)
            for wrt, a in zip(WRT[op], got):
                r = ratio(a, refs[wrt], out)
                assert r <= 1.0, (name, fam, wrt, r)


DEFECTS = {
    # defect: (family, d values, formats) where it must show
    # (RMS norm: "small" rows, 1e-3 N(0, 1), in place of near-constant ones)
    "no_eps": ("near-constant", DS, ("float32", "float16", "bfloat16")),
    "eps_after_sqrt": ("near-constant", DS, ("float32", "float16", "bfloat16")),
    "unbiased": ("normal", (8, 64), ("float32", "float16", "bfloat16")),
    "acc16": ("normal", (64, 768), ("float32",)),
    "mean16": ("offset", (8, 64), ("float32", "float16")),
}


@pytest.mark.parametrize("defect", list(DEFECTS))
def test_defects_exceed_the_bound_where_they_show(defect):
    fam, ds, formats = DEFECTS[defect]
    for out in (np.dtype(np.float32), np.dtype(np.float16), BF16):
        for d in DS:
            for op in ("layer_norm",) if defect == "mean16" else ("layer_norm", "rms_norm"):
                x = family(
                    "small" if op == "rms_norm" and fam == "near-constant" else fam,
                    rows_for(d),
                    d,
                    out,
                )
                g = RNG.normal(size=x.shape).astype(out)
                got = kernel(op, x, g, None, 1e-5, out, defect=defect)
                r = ratio(got[0], reference(op, x, g, None, 1e-5, out, "x"), out)
                if d in ds and str(out) in formats:
                    assert r > 1.0, (defect, op, d, str(out), r)


def test_float64_output_with_float64_accumulation():
    """The float64 model: a float64 kernel (the lneps float64 formula, sequential and pairwise
    sums) stays within the bound; its error is measured against the correctly rounded value."""
    for d in (8, 768):
        x = RNG.normal(size=(6, d)) + 3.0
        g = RNG.normal(size=(6, d))
        gamma = RNG.normal(size=d)
        ref = reference("layer_norm", x, g, gamma, 1e-5, np.dtype(np.float64), "x")
        plain = lneps.layer_norm_backward(x, g, gamma, eps=1e-5, compute_dtype=np.float64)
        r = ratio(plain.x, ref, np.dtype(np.float64))
        assert r <= 1.0
        assert (
            np.all(ref[2] >= 0.5)
            and ratio(lneps.layer_norm_backward(x, g, gamma, eps=1e-5).x, ref, np.dtype(np.float64))
            <= 1
        )


def test_bound_is_tight_enough_to_matter():
    """On N(0,1) rows the float32 dx bound grows like d ulp of s (the worst summation order:
    gamma_{d+1}), and in float16 and bfloat16 it stays near the final rounding's half ulp."""
    for d in (8, 4096):
        x = RNG.normal(size=(4, d)).astype(F32)
        g = RNG.normal(size=(4, d)).astype(F32)
        b = backward_bound("layer_norm", "x", x=x, dy=g, eps=1e-5)
        assert 0.5 * d < np.median(b) < 2 * d + 40
        for dt in (np.float16, BF16):
            assert (
                np.max(backward_bound("layer_norm", "x", x=x.astype(dt), dy=g.astype(dt), eps=1e-5))
                < 1.5
            )
        assert np.max(backward_bound("layer_norm", "beta", x=x, dy=g, eps=1e-5)) < 4


def test_scale_and_shapes():
    x = RNG.normal(size=(3, 5, 2)).astype(F32)
    g = RNG.normal(size=x.shape).astype(F32)
    s = backward_scale("layer_norm", "x", x=x, dy=g, eps=1e-5, axis=1)
    assert s.shape == x.shape
    xm, gm = np.moveaxis(x, 1, -1).astype(np.float64), np.moveaxis(g, 1, -1).astype(np.float64)
    v = xm - xm.mean(-1, keepdims=True)
    r = 1 / np.sqrt((v * v).mean(-1, keepdims=True) + 1e-5)
    u = v * r
    want = r * (
        np.abs(gm)
        + np.abs(gm).mean(-1, keepdims=True)
        + np.abs(u) * np.abs(gm * u).mean(-1, keepdims=True)
    )
    np.testing.assert_allclose(np.moveaxis(s, 1, -1), want, rtol=1e-12)
    assert backward_bound("layer_norm", "x", x=x, dy=g, eps=1e-5, axis=1).shape == x.shape
    for wrt in ("gamma", "beta"):
        assert backward_bound("layer_norm", wrt, x=x, dy=g, eps=1e-5, axis=1).shape == (5,)
    np.testing.assert_allclose(
        backward_scale("layer_norm", "beta", x=x, dy=g, eps=1e-5, axis=1),
        np.abs(gm).reshape(-1, 5).sum(0),
        rtol=1e-12,
    )
    bad = x.copy()
    bad[0, 0, 0] = np.nan
    assert np.isinf(backward_bound("layer_norm", "x", x=bad, dy=g, eps=1e-5, axis=1)[0, :, 0]).all()
    with pytest.raises(ValueError, match="wrt"):
        backward_bound("rms_norm", "beta", x=x, dy=g, eps=1e-5)
    with pytest.raises(ValueError, match="op"):
        backward_bound("group_norm", "x", x=x, dy=g, eps=1e-5)
    with pytest.raises(ValueError, match="float32 cannot hold"):
        backward_bound("layer_norm", "x", x=x.astype(np.float64) + 1e-12, dy=g, eps=1e-5, dtype=F32)


def test_docstring_example():
    assert doctest.testmod(bb, raise_on_error=False).failed == 0


# --- the backward failure message: dy, the row's statistics, and the suspects -------------------


def _dx_parts(x, dy, g):
    xf, gh = x.astype(np.float32), (dy * g).astype(np.float32)
    t = xf - xf.mean(axis=-1, keepdims=True)
    r = np.float32(1) / np.sqrt((t * t).mean(axis=-1, keepdims=True) + np.float32(1e-5))
    u = t * r
    return gh, u, r


def _rows(seed=7, dtype=np.float32):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(16, 64)).astype(dtype)
    dy = rng.normal(size=(16, 64)).astype(dtype)
    g = rng.uniform(0.5, 2, size=64).astype(dtype)
    return x, dy, g


def _message(actual, x, dy, g, wrt="x"):
    with pytest.raises(AssertionError) as info:
        lt.assert_close(actual, x=x, dy=dy, gamma=g, eps=1e-5, op="layer_norm_backward", wrt=wrt)
    return str(info.value)


def test_a_dx_message_shows_dy_the_mean_and_rstd_and_names_rstd_in_16_bits():
    x, dy, g = _rows()
    gh, u, r = _dx_parts(x, dy, g)
    inner = gh - gh.mean(axis=-1, keepdims=True) - u * (gh * u).mean(axis=-1, keepdims=True)
    stored = r.astype(ml_dtypes.bfloat16).astype(np.float32)  # the statistics buffer in bfloat16
    text = _message((inner * stored).astype(np.float32), x, dy, g)
    assert "  dy row = [" in text and "row's mean " in text and "rstd " in text
    assert "suspect: rstd stored in bfloat16" in text
    assert "wrong sign" not in text


def test_a_dx_message_names_the_wrong_sign_term_and_only_it():
    x, dy, g = _rows()
    gh, u, r = _dx_parts(x, dy, g)
    wrong = (gh - gh.mean(axis=-1, keepdims=True) + u * (gh * u).mean(axis=-1, keepdims=True)) * r
    text = _message(wrong.astype(np.float32), x, dy, g)
    assert "suspect: the term u * mean(dy * gamma * u) with the wrong sign" in text
    assert "rstd stored in" not in text
    # eps forgotten looks like neither: no suspect named
    xf = x.astype(np.float32)
    t = xf - xf.mean(axis=-1, keepdims=True)
    r0 = np.float32(1) / np.sqrt((t * t).mean(axis=-1, keepdims=True) + np.float32(0.5))
    u0 = t * r0
    big_eps = (
        gh - gh.mean(axis=-1, keepdims=True) - u0 * (gh * u0).mean(axis=-1, keepdims=True)
    ) * r0
    text = _message(big_eps.astype(np.float32), x, dy, g)
    assert "suspect: rstd stored" not in text and "wrong sign" not in text


def test_a_dbeta_message_names_16_bit_accumulation_and_shows_no_gamma():
    x, dy, g = _rows(dtype=np.float16)
    dy = (dy * 30).astype(np.float16)
    acc = np.zeros(64, np.float16)
    for row in dy:
        acc = (acc + row).astype(np.float16)
    text = _message(acc, x, dy, g, wrt="beta")
    assert "suspect: dβ accumulated in float16" in text and "gamma here" not in text
