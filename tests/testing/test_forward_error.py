"""lneps.testing.forward_bound (forward_error.py, its terms in kernel_classes.py, two_pass_bound in
two_pass.py): the derived per-element tolerance, for every correct kernel
class (two passes, Welford and Chan's merges, one pass in float64, a 2-ulp rsqrt), layer norm
and RMS norm, in the four formats. Properties: it holds on constructed worst cases, it grows
with d, the offset and u, its caps, and it costs what the bound must cost."""

import doctest

import ml_dtypes
import numpy as np
import pytest

import lneps
import lneps.testing._private.deferred_bound
import lneps.testing._private.forward_error
import lneps.testing._private.kernel_classes
import lneps.testing._private.two_pass
from lneps.book import kernel_zoo as kz
from lneps.book import zoo_grades as zg
from lneps.testing import families, two_pass_bound
from lneps.testing._private.forward_error import forward_bound
from lneps.testing._private.kernel_classes import KERNEL_CLASSES

BF16 = np.dtype(ml_dtypes.bfloat16)
F32, F64 = np.float32, np.float64


def _scaled(a, x, eps, gamma=None, beta=None, op="layer_norm"):
    x64 = x.astype(F64)
    y = (
        lneps.layer_norm(x64, gamma, beta, eps=eps)
        if op == "layer_norm"
        else lneps.rms_norm(x64, gamma, eps=eps)
    )
    return zg.scaled_error(a, y, gamma, a.dtype)


@pytest.mark.parametrize(
    "module",
    [
        lneps.testing._private.forward_error,
        lneps.testing._private.kernel_classes,
        lneps.testing._private.two_pass,
        lneps.testing._private.deferred_bound,
    ],
    ids=lambda m: m.__name__,
)
def test_the_docstrings_run(module):
    assert doctest.testmod(module, raise_on_error=True).failed == 0


def test_exact_and_stats_passed_in_give_the_same_bound_in_any_block_size():
    x, g, b = families(np.float16, 100, rows=7)["cancelling_beta"]
    y, mean, rstd = lneps.layer_norm(x.astype(F64), g, b, eps=1e-5, return_stats=True)
    ref = forward_bound("layer_norm", x=x, gamma=g, beta=b, eps=1e-5)
    assert ref.shape == x.shape and ref.dtype == F64
    same = forward_bound(
        "layer_norm", x=x, gamma=g, beta=b, eps=1e-5, exact=y, stats=(mean, rstd), block=150
    )
    assert np.array_equal(ref, same)
    xr = families(np.float32, 64, rows=5)["normal"].x
    yr, rr = lneps.rms_norm(xr.astype(F64), eps=1e-6, return_stats=True)
    assert np.array_equal(
        forward_bound("rms_norm", x=xr, eps=1e-6),
        forward_bound("rms_norm", x=xr, eps=1e-6, exact=yr, stats=rr, block=64),
    )


def test_axis_other_than_the_last_and_trailing_tuples():
    x = families(F32, 48, rows=6)["offset"].x
    ref = forward_bound("layer_norm", x=x, eps=1e-5)
    assert np.array_equal(
        forward_bound("layer_norm", x=np.ascontiguousarray(x.T), eps=1e-5, axis=0), ref.T
    )
    x3 = x.reshape(6, 6, 8)
    assert np.array_equal(
        forward_bound("layer_norm", x=x3, eps=1e-5, axis=(1, 2)), ref.reshape(6, 6, 8)
    )


def test_two_pass_bound_keeps_its_meaning_and_the_new_bound_is_larger_where_it_must_be():
    # the book quotes two_pass_bound: 3.7e3 scaled ulp on float32 N(0,1) rows at d = 4096
    x = families(F32, 4096, rows=8)["normal"].x
    old = two_pass_bound(x, eps=1e-5)
    assert 3600 < old.max() < 3800
    new = forward_bound("layer_norm", x=x, eps=1e-5)
    # Welford's sum of squares may be off twice as much (2 u d): about twice the old bound
    assert 1.5 * old.max() < new.max() < 3 * old.max()
    # two passes alone, with a 2-ulp rsqrt: a little above the old bound, far below the new
    tp = forward_bound("layer_norm", x=x, eps=1e-5, kernels="two_pass")
    assert np.all(tp >= old) and tp.max() < 1.01 * old.max()
    with pytest.raises(ValueError, match="kernels"):
        forward_bound("layer_norm", x=x, eps=1e-5, kernels=("blocked",))


@pytest.mark.parametrize("dtype", (np.float16, BF16), ids=str)
def test_the_bound_is_near_half_an_ulp_on_normal_16_bit_rows(dtype):
    for d in (8, 64, 768):
        x = families(dtype, d, rows=8)["normal"].x
        for op in ("layer_norm", "rms_norm"):
            bound = forward_bound(op, x=x, eps=1e-5)
            assert 0.5 < bound.max() < 1.0, (op, d)


def test_the_bound_grows_with_d_the_offset_and_u():
    x = families(F32, 4096, rows=4)["normal"].x
    tops = [forward_bound("layer_norm", x=x[:, :d], eps=1e-5).max() for d in (8, 64, 768, 4096)]
    assert tops == sorted(tops)
    z = np.random.default_rng(3).normal(size=(1, 64))
    offs = [
        forward_bound("layer_norm", x=(z + o).astype(F32), eps=1e-5).max() for o in (0, 2**6, 2**12)
    ]
    assert offs == sorted(offs)
    x64 = x.astype(F64)
    assert forward_bound("layer_norm", x=x64, eps=1e-5).max() == pytest.approx(
        forward_bound("layer_norm", x=x, eps=1e-5).max(), rel=0.2
    )  # in ulp of its own format, u alike
    rms = [forward_bound("rms_norm", x=x[:, :d], eps=1e-5).max() for d in (8, 64, 768, 4096)]
    assert rms == sorted(rms)


def test_rms_norm_on_a_constant_row_allows_what_a_correct_kernel_needs():
    # a constant float32 row: every square alike, the sequential sum's roundings all one way
    d = 4096
    x = np.full((4, d), [[1.1], [3.3], [-7.7], [0.3]], dtype=F32)
    bound = forward_bound("rms_norm", x=x, eps=1e-6)
    seen = 0.0
    for fn in (kz.rms_sequential, kz.rms_warp_tree, kz.rms_rsqrt_2ulp):
        err = _scaled(fn(x, None, None, 1e-6), x, 1e-6, op="rms_norm")
        assert np.all(err <= bound), fn.__name__
        seen = max(seen, float(err.max()))
    assert seen > 100  # what users had to guess: a correct kernel is this far off
    assert bound.max() < 20 * seen  # and the bound is not vacuous


def test_a_constructed_worst_case_for_two_passes():
    # sixteen equal float32 numbers whose sum rounds: the mean is off by a few ulp, the
    # kernel returns a multiple of it where the exact answer is 0; with eps tiny, the cap
    d, eps = 16, 1e-30
    x = np.full((3, d), [[60000.3], [1.1], [-7.7]], dtype=F32)
    bound = forward_bound("layer_norm", x=x, eps=eps, kernels="two_pass")
    for fn in (
        kz.two_pass_sequential,
        kz.two_pass_warp_tree,
        kz.two_pass_pairwise,
        kz.rsqrt_high_2ulp,
    ):
        err = _scaled(fn(x, None, None, eps), x, eps)
        assert np.all(err <= bound), fn.__name__
    cap = np.sqrt(d) * (1 + 2.0**-18) / 2.0**-23 + 1
    assert np.all(bound <= cap)


def test_welford_is_not_capped_by_sqrt_d_and_the_bound_knows_it():
    # [c, c + ulp, c + ulp, ...]: at the second step the running mean (c + ulp/2, a tie)
    # rounds to c + ulp, the second element's M2 term is 0 and so is M2: the first element
    # comes out as -ulp / sqrt(eps), however large, while the exact answer is -sqrt(d - 1).
    # A two-pass kernel's sqrt(d) cap does not hold for Welford; the eps cap does.
    c = F32(1) + F32(2.0**-23)  # odd last bit
    d, eps = 8, 1e-24
    x = np.full((1, d), np.nextafter(c, F32(2)), dtype=F32)
    x[0, 0] = c
    y = kz.welford_sequential(x, None, None, eps)
    err = _scaled(y, x, eps)
    assert abs(float(y[0, 0])) > 100 * np.sqrt(d)
    assert err[0, 0] > two_pass_bound(x, eps=eps)[0, 0]  # beyond a two-pass kernel's reach
    assert np.all(err <= forward_bound("layer_norm", x=x, eps=eps))  # within a correct kernel's


@pytest.mark.parametrize("rsqrt", ("low", "high"))
def test_a_two_ulp_rsqrt_stays_within_the_bound_and_a_wrong_one_leaves_it(rsqrt):
    x = families(F32, 8, rows=64)["normal"].x
    bound = forward_bound("layer_norm", x=x, eps=1e-5)
    fn = kz.rsqrt_low_2ulp if rsqrt == "low" else kz.rsqrt_high_2ulp
    assert np.all(_scaled(fn(x, None, None, 1e-5), x, 1e-5) <= bound)
    # a kernel whose rsqrt is 128 ulp off (1.5e-5 relative) goes beyond it on short rows
    t, var = kz._two_pass_stats(x.astype(F32), kz.pairwise_sum)
    r = kz._rsqrt(var + F32(1e-5))
    for _ in range(128):
        r = np.nextafter(r, F32(np.inf) if rsqrt == "high" else F32(0))
    assert np.any(_scaled((t * r).astype(F32), x, 1e-5) > bound)


def test_float64_kernels_are_graded_in_float64():
    x = np.random.default_rng(5).normal(size=(16, 1024))
    bound = forward_bound("layer_norm", x=x, eps=1e-5)
    mu = x.mean(axis=1, keepdims=True)
    t = x - mu
    y = t / np.sqrt((t * t).mean(axis=1, keepdims=True) + 1e-5)
    assert np.all(_scaled(y, x, 1e-5) <= bound)
    assert 0.5 < bound.max() < 4 * 1024  # of order d ulp, as in float32
    unbiased = t / np.sqrt((t * t).sum(axis=1, keepdims=True) / 1023 + 1e-5)
    assert np.any(_scaled(unbiased, x, 1e-5) > bound)


def test_the_caps_on_constant_float32_rows():
    d = 64
    x = np.full((3, d), [[60000.3], [1.1], [-7.7]], dtype=F32)
    for eps in (1e-12, 1e-5):
        bound = forward_bound("layer_norm", x=x, eps=eps)
        # Welford's cap: 3.97 sqrt(d) (1 + O(u)) + (3.2 + 3 levels) u max|x| / sqrt(eps)
        levels = min(int(np.ceil(np.log2(d))), 10)
        cap = (
            3.968 * np.sqrt(d)
            + (3.212 + 3.01 * levels)
            * 2.0**-24
            * np.abs(x[:, :1].astype(F64))
            / np.sqrt(float(F32(eps)))
        ) * (1 + 2.0**-18)
        assert np.all(bound <= (cap + 1) / 2.0**-23 + 1), eps
    # eps = 0: a constant row's exact answer is NaN, and no kernel can be bounded
    assert np.all(np.isinf(forward_bound("layer_norm", x=x, eps=0.0)))


def test_every_correct_zoo_kernel_within_every_class_bound_it_belongs_to():
    x = families(np.float16, 768, rows=8)["near_constant"].x
    classes = {
        "two_pass": (kz.two_pass_sequential, kz.two_pass_warp_tree, kz.rsqrt_low_2ulp),
        "welford": (kz.welford_sequential, kz.welford_chan_pytorch, kz.welford_chan_apex),
        "one_pass_float64": (kz.one_pass_float64,),
    }
    for name, fns in classes.items():
        bound = forward_bound("layer_norm", x=x, eps=1e-12, kernels=name)
        for fn in fns:
            assert np.all(_scaled(fn(x, None, None, 1e-12), x, 1e-12) <= bound), (name, fn.__name__)
    assert set(classes) == set(KERNEL_CLASSES)


def test_refusals():
    x = families(np.float16, 8)["normal"].x
    with pytest.raises(ValueError, match="op"):
        forward_bound("group_norm", x=x, eps=1e-5)
    with pytest.raises(ValueError, match="float32 cannot hold"):
        forward_bound("layer_norm", x=x, gamma=np.full(8, 0.1), eps=1e-5)
    with pytest.raises(ValueError, match="eps"):
        forward_bound("layer_norm", x=x, eps=-1.0)
    with pytest.raises(ValueError, match="beta"):
        forward_bound("rms_norm", x=x, beta=np.zeros(8, np.float16), eps=1e-5)
    with pytest.raises(ValueError, match="shape"):
        forward_bound("layer_norm", x=x, eps=1e-5, exact=np.zeros((2, 2)))
    # float64 gains are fine with float64 input; the rms default eps is the op's
    forward_bound("layer_norm", x=x.astype(F64), gamma=np.full(8, 0.1), eps=1e-5)
    assert np.array_equal(
        forward_bound("rms_norm", x=x, eps=None),
        forward_bound("rms_norm", x=x, eps=lneps.rms_norm_default_eps(np.float16)),
    )
    big = np.full((1, 8), 3e38, F32)
    big[0, 0] = -3e38
    assert np.all(np.isinf(forward_bound("layer_norm", x=big, eps=1e-5)))
