"""lneps.testing._private.systematic.scale_bias: the test across rows for a scale error common to every
row. Correct kernels pass (also biased-rsqrt ones, also on many rows), the float32 defects a
per-element bound cannot see fail with their name, too few rows give no verdict."""

import doctest

import numpy as np
import pytest

import lneps
import lneps.testing._private.systematic as S
from lneps.book import kernel_zoo as kz
from lneps.testing import families
from lneps.testing._private.systematic import FALSE_ALARM, LAMBDA, MIN_ROWS, scale_bias

F32, F64 = np.float32, np.float64


def _run(fn, x, eps=1e-5, gamma=None, beta=None, op="layer_norm"):
    y = fn(x, gamma, beta, eps)
    x64 = x.astype(F64)
    if op == "layer_norm":
        e, m, r = lneps.layer_norm(x64, gamma, beta, eps=eps, return_stats=True)
        stats = (m, r)
    else:
        e, r = lneps.rms_norm(x64, gamma, eps=eps, return_stats=True)
        stats = r
    return scale_bias(op, actual=y, exact=e, x=x, gamma=gamma, eps=eps, stats=stats)


def test_the_docstrings_run():
    assert doctest.testmod(S, raise_on_error=True).failed == 0


def test_the_false_alarm_probability_is_hoeffdings():
    assert LAMBDA == 6 and FALSE_ALARM == pytest.approx(2 * np.exp(-18)) and FALSE_ALARM < 1e-7


def test_the_two_float32_defects_at_d_4096_fail_with_their_names():
    x = families(F32, 4096, rows=64)["normal"].x
    r = _run(kz.unbiased_variance, x)
    assert r.verdict == "fail" and r.suspect == "the d - 1 (unbiased) variance"
    assert r.statistic == pytest.approx(-1 / (2 * 4096), rel=0.02)
    r = _run(kz.eps_after_sqrt, x)
    assert r.verdict == "fail" and r.suspect == "eps added after the square root"
    assert r.statistic < r.low and r.rows == 64
    for fn in (kz.two_pass_sequential, kz.welford_chan_apex, kz.rsqrt_low_2ulp, kz.rsqrt_high_2ulp):
        r = _run(fn, x)
        assert r.verdict == "pass", fn.__name__
        assert r.low < -2e-6 and r.high < 4e-6  # the test is sharp: eps after the sqrt is -5e-6
        assert abs(r.statistic) < r.threshold / 3


def test_eps_ignored_or_too_small_is_named():
    x = families(F32, 1024, rows=64)["normal"].x
    r = _run(kz.eps_ignored, x)
    assert r.verdict == "fail" and r.suspect == "eps ignored"
    r = _run(kz.eps_tenth, x)
    assert (
        r.verdict == "fail"
        and r.suspect.startswith("eps of about ")
        and r.suspect.endswith("used for 1e-05")
    )
    assert 0.8e-6 < float(r.suspect.split()[3]) < 1.2e-6


def test_a_biased_rsqrt_passes_on_many_rows_and_a_worse_one_fails():
    x = families(F32, 256, rows=512)["normal"].x
    for fn in (kz.rsqrt_low_2ulp, kz.rsqrt_high_2ulp, kz.rsqrt_random_2ulp):
        assert _run(fn, x).verdict == "pass", fn.__name__
    t, var = kz._two_pass_stats(x.astype(F32), kz.pairwise_sum)
    r = kz._rsqrt(var + F32(1e-5))
    for _ in range(10):  # 10 ulp low: beyond what any correct rsqrt does
        r = np.nextafter(r, F32(0))
    result = _run(lambda x, g, b, e: (t * r).astype(F32), x)
    assert result.verdict == "fail" and result.statistic < 0


def test_correct_kernels_never_come_near_the_threshold_over_many_draws():
    worst = 0.0
    for seed in range(6):
        for dt, d in ((F32, 768), (np.float16, 64)):
            fams = families(dt, d, rows=32, seed=seed)
            for name in ("normal", "cancelling_beta", "wide_range"):
                x, g, b = fams[name]
                for fn in (
                    kz.two_pass_sequential,
                    kz.welford_sequential,
                    kz.welford_chan_pytorch,
                    kz.one_pass_float64,
                    kz.affine_fma,
                ):
                    r = _run(fn, x, gamma=g, beta=b)
                    assert r.verdict != "fail", (seed, name, fn.__name__)
                    if r.verdict == "pass":
                        worst = max(worst, abs(r.statistic) / r.threshold)
    assert worst < 0.8  # the widest: sequential sums on wide-range rows, 0.62


def test_rms_norm():
    x = families(F32, 2048, rows=32)["normal"].x
    for fn in (kz.rms_sequential, kz.rms_warp_tree, kz.rms_rsqrt_2ulp):
        assert _run(fn, x, op="rms_norm").verdict == "pass"
    r = _run(kz.rms_eps_after_sqrt, x, op="rms_norm")
    assert r.verdict == "fail" and r.suspect == "eps added after the square root"
    # constant rows: every square alike, the rounding systematic: not eligible
    c = np.full((16, 512), 3.3, F32)
    assert _run(kz.rms_sequential, c, op="rms_norm").verdict == "not applicable"


def test_too_few_rows_identical_rows_and_structured_rows_give_no_verdict():
    x = families(F32, 256, rows=MIN_ROWS - 1)["normal"].x
    r = _run(kz.unbiased_variance, x)
    assert r.verdict == "not applicable" and r.rows == MIN_ROWS - 1 and r.passed
    same = np.repeat(families(F32, 256, rows=1)["normal"].x, 40, axis=0)
    r = _run(kz.unbiased_variance, same)
    assert r.rows == 1 and r.rows_total == 40 and r.verdict == "not applicable"
    for name in ("constant", "near_constant", "offset", "midpoint"):
        x, g, b = families(F32, 256, rows=32)[name]
        assert _run(kz.two_pass_sequential, x, gamma=g, beta=b).verdict == "not applicable", name
    assert "not applicable" in str(r)


def test_blocks_axis_and_stats_do_not_change_the_result():
    x = families(np.float16, 100, rows=40)["normal"].x
    y = kz.unbiased_variance(x)
    e, m, rs = lneps.layer_norm(x.astype(F64), eps=1e-5, return_stats=True)
    a = scale_bias("layer_norm", actual=y, exact=e, x=x, eps=1e-5)
    b = scale_bias("layer_norm", actual=y, exact=e, x=x, eps=1e-5, stats=(m, rs), block=300)
    c = scale_bias("layer_norm", actual=y.T, exact=e.T, x=x.T, eps=1e-5, axis=0)
    d = scale_bias("layer_norm", actual=y, x=x, eps=1e-5)
    for other in (b, c, d):
        assert other.statistic == a.statistic and other.low == a.low and other.verdict == a.verdict
    assert np.array_equal(a.per_row, b.per_row, equal_nan=True)
    assert a.verdict == "fail" and "d - 1" in str(a)


def test_16_bit_outputs_catch_the_d_minus_1_variance_at_d_4096():
    # the output's rounding to float16 is random (to nearest, one error per significand), not a
    # bias of a whole ulp: before, the allowance of u_out left -1/(2d) unseen on any number of rows
    x = families(np.float16, 4096, rows=16)["normal"].x
    sb = _run(kz.unbiased_variance, x)
    assert sb.verdict == "fail" and sb.suspect == "the d - 1 (unbiased) variance"
    assert sb.low > -1 / (2 * 4096) / 2  # with room to spare
    assert _run(kz.two_pass_pairwise, x).verdict == "pass"


def test_the_result_says_what_it_could_have_caught():
    xb = families(np.dtype("bfloat16"), 4096, rows=16)["normal"].x
    sb = _run(kz.two_pass_pairwise, xb)  # bfloat16's rounding is coarse: 16 rows do not see 1/(2d)
    need = sb.rows_for(-1 / (2 * 4096))
    assert sb.verdict == "pass" and need > 16
    assert f"about {need} rows like these would catch it" in sb.coverage()
    few = _run(kz.two_pass_pairwise, families(np.float32, 4096, rows=4)["normal"].x)
    assert few.verdict == "not applicable" and few.rows_for(-1e-3) is None
    assert "not applied: 4 eligible distinct rows of 4, at least 8 needed" in few.coverage()
    # with enough rows the float32 test reaches it, and says nothing more
    sb32 = _run(kz.two_pass_pairwise, families(np.float32, 4096, rows=64)["normal"].x)
    assert sb32.low > -1 / (2 * 4096) and "could not" not in sb32.coverage()


def test_an_eps_is_named_only_when_the_rows_imply_another():
    # "eps of about 1e-05 used for 1e-05" named a rounded rstd or a 16-bit sum as a wrong eps
    assert S._eps_pattern(1.0e-5, 1e-5) is None and S._eps_pattern(9.9e-6, 1e-5) is None
    assert S._eps_pattern(None, 1e-5) is None
    assert S._eps_pattern(1e-6, 1e-5) == "eps of about 1e-06 used for 1e-05"
    assert S._eps_pattern(1e-9, 1e-5) == "eps ignored"
    # and eps / 10 is still named, on the rows that show it
    x = families(np.float32, 768, rows=64)["normal"].x
    sb = _run(kz.eps_tenth, x)
    assert (
        sb.verdict == "fail"
        and sb.suspect.startswith("eps of about")
        and "used for 1e-05" in sb.suspect
    )
