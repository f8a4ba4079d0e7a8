"""lneps.precision against finfo, IEEE closed forms, exact sums and an mpmath reference."""

import math

import ml_dtypes
import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lneps
from lneps import precision as P

F16, BF16, F32, F64 = np.float16, ml_dtypes.bfloat16, np.float32, np.float64


# --- formats -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", P.FORMATS)
def test_format_table_equals_finfo(name):
    row = {r["name"]: r for r in P.format_table()}[name]
    fi = ml_dtypes.finfo(name)
    assert row["smallest_subnormal"] == float(fi.smallest_subnormal)
    assert row["smallest_normal"] == float(fi.smallest_normal)
    assert row["largest"] == float(fi.max)
    assert row["machine_eps"] == float(fi.eps)
    assert row["significand_bits"] == fi.nmant + 1
    if name != "bfloat16":  # NumPy's own finfo agrees for its formats
        nfi = np.finfo(name)
        assert (row["smallest_subnormal"], row["smallest_normal"], row["largest"], row["machine_eps"]) == (
            float(nfi.smallest_subnormal), float(nfi.tiny), float(nfi.max), float(nfi.eps))


def test_format_numbers_match_the_ieee_closed_forms():
    f16, bf16, f32 = (P.format_info(n) for n in ("float16", "bfloat16", "float32"))
    assert (f16["smallest_subnormal"], f16["smallest_normal"], f16["largest"], f16["machine_eps"]) == (
        2.0**-24, 2.0**-14, 65504.0, 2.0**-10)
    assert (bf16["smallest_subnormal"], bf16["smallest_normal"], bf16["machine_eps"]) == (2.0**-133, 2.0**-126, 2.0**-7)
    assert bf16["largest"] == (2 - 2.0**-7) * 2.0**127
    assert f32["machine_eps"] == 2.0**-23 == float(np.finfo(np.float32).eps)


@pytest.mark.parametrize("name,exp_bits,p", [("float16", 5, 11), ("bfloat16", 8, 8), ("float32", 8, 24),
                                              ("float64", 11, 53)])
def test_exponent_and_significand_bits_fill_the_format(name, exp_bits, p):
    row = P.format_info(name)
    assert (row["exponent_bits"], row["significand_bits"]) == (exp_bits, p)
    assert 1 + row["exponent_bits"] + row["significand_bits"] - 1 == row["bits"]  # sign, exponent, stored bits


def test_significant_digits_is_p_log10_2_and_bfloat16_has_fewer_than_three():
    assert P.significant_digits(BF16) == pytest.approx(8 * math.log10(2))
    assert round(P.significant_digits(BF16), 2) == 2.41  # the seed said 3
    assert round(P.significant_digits(F16), 2) == 3.31
    assert round(P.significant_digits(F32), 2) == 7.22
    assert round(P.significant_digits(F64), 2) == 15.95


# --- which eps survive -----------------------------------------------------------------------


def test_eps_fates_in_float16_and_bfloat16():
    for eps in (1e-8, 1e-9, 1e-10, 1e-11, 1e-12, 1e-30):
        assert P.eps_fate(eps, F16) == "zero"
    for eps in (1e-5, 1e-6, 1e-7):
        assert P.eps_fate(eps, F16) == "subnormal"
    for eps in (1e-3, 1e-4):
        assert P.eps_fate(eps, F16) == "normal"
    for eps in (1e-3, 1e-5, 1e-12, 1e-30):
        assert P.eps_fate(eps, BF16) == "normal"
    assert P.eps_fate(1e-45, F32) == "subnormal" and P.eps_fate(1e-46, F32) == "zero"
    assert P.eps_fate(0.0, F64) == "zero"


def test_stored_values_of_the_sweet_spot_in_float16():
    # 1e-5 and 1e-6 are whole multiples of the smallest subnormal 2**-24.
    assert float(F16(1e-5)) == 168 * 2.0**-24 and round(float(F16(1e-5)), 9) == 1.0014e-05
    assert float(F16(1e-6)) == 17 * 2.0**-24 and round(float(F16(1e-6)), 10) == 1.0133e-06
    rows = {r["eps"]: r for r in P.eps_survival_table([1e-5, 1e-6])}
    assert rows[1e-5]["float16"] == float(F16(1e-5)) and rows[1e-6]["float16 fate"] == "subnormal"


def test_one_plus_eps():
    assert P.one_plus_eps_is_one(1e-5, F16) and not P.one_plus_eps_is_one(1e-3, F16)
    assert P.one_plus_eps_is_one(1e-3, BF16)
    assert not P.one_plus_eps_is_one(1e-5, F32) and P.one_plus_eps_is_one(1e-8, F32)
    assert not P.one_plus_eps_is_one(1e-12, F64)


@settings(max_examples=100, deadline=None)
@given(st.floats(min_value=0, max_value=1e-2, allow_subnormal=True))
def test_eps_fate_agrees_with_the_stored_value(eps):
    for dt in (F16, BF16, F32):
        stored = float(np.asarray(eps).astype(dt))
        fate = P.eps_fate(eps, dt)
        assert (fate == "zero") == (stored == 0)
        assert (fate == "normal") == (stored >= float(ml_dtypes.finfo(dt).smallest_normal))


def test_fates_are_the_declared_names_and_the_table_agrees_with_eps_fate():
    eps_values = [1e-3, 1e-5, 1e-8, 1e-30, 0.0]
    rows = P.eps_survival_table(eps_values)
    assert [r["eps"] for r in rows] == eps_values
    for r in rows:
        for name in P.FORMATS:
            assert r[name + " fate"] in P.EPS_FATES and r[name + " fate"] == P.eps_fate(r["eps"], name)
            assert r[name] == float(np.asarray(r["eps"]).astype(ml_dtypes.finfo(name).dtype))
            assert r[name + " 1+eps==1"] == P.one_plus_eps_is_one(r["eps"], name)
    assert {P.eps_fate(e, F16) for e in (1e-3, 1e-6, 1e-9)} == set(P.EPS_FATES)
    with pytest.raises(ValueError, match="eps"):
        P.eps_survival_table([1e-5, -1.0])
    with pytest.raises(TypeError, match="dtype"):
        P.eps_survival_table([1e-5], dtypes=["float16", "int8"])


def test_bad_eps_and_dtype_are_rejected():
    with pytest.raises(ValueError, match="eps"):
        P.eps_fate(-1e-5, F16)
    with pytest.raises(TypeError, match="dtype"):
        P.eps_fate(1e-5, "float17")
    with pytest.raises(TypeError, match="dtype"):
        P.format_info(np.int32)


# --- rounded arithmetic -----------------------------------------------------------------------


def test_rounded_sum_rounds_every_partial_sum():
    # Tree: (2048 + 1) rounds to 2048 (a tie, to even), 1 + 1 = 2, 2048 + 2 = 2050.
    # The exact sum 2051 would round to 2052: float32 accumulation (np.sum) gives that.
    x = np.array([2048, 1, 1, 1], dtype=F16)
    assert float(P.rounded_sum(x, F16)[0]) == 2050.0
    assert float(x.sum(dtype=F16)) == 2052.0


def test_rounded_sum_overflows_in_float16_and_not_in_float32():
    x = np.full(128, 1000.0, dtype=F16)
    assert np.isinf(P.rounded_sum(x, F16)[0])
    assert P.rounded_sum(x, F32)[0] == 128000.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=70))
def test_rounded_sum_in_float64_is_close_to_the_exact_sum(values):
    x = np.array(values)
    got = float(P.rounded_sum(x, F64)[0])
    bound = 8 * len(values) * np.finfo(F64).eps * float(np.abs(x).sum())
    assert abs(got - math.fsum(values)) <= bound


ROUNDED = {
    "rounded_sum": lambda x: P.rounded_sum(x, F32),
    "mean_and_variance": lambda x: P.mean_and_variance(x, dtype=F32),
    "layer_norm_rounded": lambda x: P.layer_norm_rounded(x, eps=1e-5, dtype=F32),
    "rms_norm_rounded": lambda x: P.rms_norm_rounded(x, eps=1e-6, dtype=F32),
}


@pytest.mark.parametrize("fn", ROUNDED)
@pytest.mark.parametrize("bad,word", [
    (np.array([1 + 2j, 3 - 1j]), "real"),  # the imaginary part must not be dropped silently
    (np.array([True, False, True]), "numeric"),
    (["1.5", "2"], "numeric"),
])
def test_rounded_arithmetic_rejects_complex_bool_and_strings(fn, bad, word):
    with pytest.raises(TypeError, match=word) as info:
        ROUNDED[fn](bad)
    assert "x" in str(info.value)


def test_rounded_arithmetic_takes_integers_and_lists():
    assert float(P.rounded_sum([1, 2, 3], F16)[0]) == 6.0
    mu, var = P.mean_and_variance([1, 2, 3, 6], dtype=F32)
    assert (float(mu[0]), float(var[0])) == (3.0, 3.5)
    np.testing.assert_allclose(P.rms_norm_rounded([3, 4], eps=0.0, dtype=F64), [3 / 12.5**0.5, 4 / 12.5**0.5])


def test_rounded_sum_keeps_the_axis():
    x = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(P.rounded_sum(x, F64, axis=0), x.sum(axis=0, keepdims=True))
    np.testing.assert_array_equal(P.rounded_sum(x, F64, axis=1), x.sum(axis=1, keepdims=True))


@pytest.mark.parametrize("method", P.VARIANCE_METHODS)
def test_every_variance_method_is_right_in_float64(method):
    x = np.random.default_rng(0).normal(3.0, 2.0, size=(5, 37))
    mu, var = P.mean_and_variance(x, dtype=F64, method=method)
    np.testing.assert_allclose(mu, x.mean(axis=-1, keepdims=True), rtol=1e-13)
    np.testing.assert_allclose(var, x.var(axis=-1, keepdims=True), rtol=1e-11)
    mu0, var0 = P.mean_and_variance(x, dtype=F64, method=method, axis=0)
    np.testing.assert_allclose(var0, x.var(axis=0, keepdims=True), rtol=1e-11)


def test_one_pass_float32_variance_goes_negative_at_a_large_mean():
    rows = P.family_rows("mean 6e4, sd 8", np.random.default_rng(7), 512, 512, F16)
    _, one = P.mean_and_variance(rows, dtype=F32, method="one-pass")
    _, two = P.mean_and_variance(rows, dtype=F32, method="two-pass")
    _, exact = P.mean_and_variance(rows, dtype=F64)
    assert one.dtype == two.dtype == F32
    assert (one < 0).any() and (exact > 0).all()
    # Two-pass: float16 values near 6e4 are multiples of 32, the sums are exact in float32.
    np.testing.assert_allclose(two, exact, rtol=1e-6)


def test_variance_method_and_dtype_are_checked():
    with pytest.raises(ValueError, match="method"):
        P.mean_and_variance(np.ones(3), dtype=F32, method="three-pass")
    with pytest.raises(TypeError, match="dtype"):
        P.mean_and_variance(np.ones(3), dtype="int8")


def test_layer_norm_rounded_in_float64_is_the_package_layer_norm():
    x = np.random.default_rng(1).normal(size=(4, 50))
    np.testing.assert_allclose(P.layer_norm_rounded(x, eps=1e-5, dtype=F64), lneps.layer_norm(x), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(P.rms_norm_rounded(x, eps=1e-6, dtype=F64), lneps.rms_norm(x), rtol=1e-13)
    assert P.layer_norm_rounded(x, eps=1e-5, dtype=BF16).dtype == BF16


# --- ulp ----------------------------------------------------------------------------------------


def test_ulp_closed_forms():
    assert P.ulp(1.0, F16) == 2.0**-10 and P.ulp(0.999, F16) == 2.0**-11
    assert P.ulp(0.0, F16) == 2.0**-24 and P.ulp(1e-7, F16) == 2.0**-24  # subnormal floor
    assert P.ulp(65504.0, F16) == 32.0 and P.ulp(-1.5, F16) == 2.0**-10
    assert P.ulp(1.0, BF16) == 2.0**-7 and P.ulp(1.0, F32) == 2.0**-23
    assert P.ulp(0.0, BF16) == 2.0**-133


@pytest.mark.parametrize("dt", [F16, BF16, F32])
def test_ulp_is_the_gap_to_the_next_number(dt):
    top = float(ml_dtypes.finfo(dt).max) / 2
    x = np.clip(np.random.default_rng(2).lognormal(0, 4, size=2000), 0, top).astype(dt)
    x = x[x.astype(F64) > 0]
    nxt = np.nextafter(x, np.asarray(np.inf, dtype=dt)) if dt is not BF16 else None
    if nxt is None:  # ml_dtypes has no nextafter: step the bit pattern
        nxt = (x.view(np.uint16) + 1).view(dt)
    np.testing.assert_array_equal(nxt.astype(F64) - x.astype(F64), P.ulp(x.astype(F64), dt))


@settings(max_examples=100, deadline=None)
@given(st.floats(-6e4, 6e4))
def test_rounding_to_nearest_is_within_half_an_ulp(r):
    for dt in (F16, BF16, F32):
        assert P.ulp_error(np.asarray(r).astype(dt), r, dt) <= 0.5


def test_ulp_error_counts_nan_and_inf_results_as_infinite():
    err = P.ulp_error(np.array([np.nan, np.inf, 1.0, 1.0 + 2**-10], dtype=F16), [0.5, 1.0, 1.0, 1.0], F16)
    assert err.tolist() == [np.inf, np.inf, 0.0, 1.0]
    assert P.worst_ulp_error(np.array([1.0], dtype=F16), [1.0], F16) == 0.0


# --- the default path is within 1 ulp ---------------------------------------------------------


def numpy_reference(x, eps):
    # Independent of lneps: NumPy's mean and biased var in float64.
    x = np.asarray(x).astype(F64)
    return (x - x.mean(axis=-1, keepdims=True)) / np.sqrt(x.var(axis=-1, keepdims=True) + eps)


@pytest.mark.parametrize("dt", [F16, BF16, F32])
def test_default_layer_norm_is_within_one_ulp_on_every_family(dt):
    methods = {"default": lambda x: lneps.layer_norm(x, eps=1e-5)}
    worst = P.worst_ulp_survey(methods, lambda x: numpy_reference(x, 1e-5), dtype=dt, ds=(8, 64, 512, 4096),
                               rng=np.random.default_rng(11), elements=8192)
    assert len(worst) == 4 * len(P.FAMILIES)
    assert max(worst.values()) <= 0.5 + 1e-3  # correctly rounded up to float64 noise


@pytest.mark.parametrize("dt", [F16, BF16, F32])
def test_default_rms_norm_is_within_one_ulp_on_every_family(dt):
    methods = {"default": lambda x: lneps.rms_norm(x, eps=1e-6)}
    ref = lambda x: x.astype(F64) / np.sqrt(np.mean(x.astype(F64) ** 2, axis=-1, keepdims=True) + 1e-6)
    worst = P.worst_ulp_survey(methods, ref, dtype=dt, ds=(8, 512, 4096), rng=np.random.default_rng(12), elements=8192)
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
    for family in P.FAMILIES:
        x = P.family_rows(family, rng, 3, 48, dt)
        exact = np.array([mp_layer_norm(row, 1e-5) for row in x])
        assert P.worst_ulp_error(lneps.layer_norm(x), exact, dt) <= 0.5 + 1e-3, family


# --- families and layout ------------------------------------------------------------------------


def test_family_rows():
    rng = np.random.default_rng(3)
    x = P.family_rows("mean 1000, sd 1", rng, 200, 64, F32)
    assert x.shape == (200, 64) and x.dtype == F32
    assert abs(float(x.mean()) - 1000) < 0.1 and abs(float(x.std()) - 1) < 0.05
    c = P.family_rows("constant", rng, 5, 16, BF16)
    assert (c == c[:, :1]).all()
    with pytest.raises(ValueError, match="name"):
        P.family_rows("uniform", rng, 1, 1, F16)


@pytest.mark.parametrize("kwargs,exc,word", [
    (dict(rng=np.random.RandomState(0)), TypeError, "rng"),
    (dict(rng=3), TypeError, "rng"),
    (dict(n=0), ValueError, "n"),
    (dict(n=2.0), TypeError, "n"),
    (dict(d=0), ValueError, "d"),
    (dict(d=True), TypeError, "d"),
    (dict(dtype="int16"), TypeError, "dtype"),
])
def test_family_rows_checks_its_arguments(kwargs, exc, word):
    args = dict(name="N(0,1)", rng=np.random.default_rng(0), n=2, d=4, dtype=F16) | kwargs
    with pytest.raises(exc, match=rf"\b{word}\b"):
        P.family_rows(**args)


@pytest.mark.parametrize("kwargs,exc,word", [
    (dict(ds=(8, 0)), ValueError, "ds"),  # d = 0 used to be a ZeroDivisionError
    (dict(ds=()), ValueError, "ds"),
    (dict(ds=8), TypeError, "ds"),
    (dict(ds=(8.0,)), TypeError, "ds"),
    (dict(rng=None), TypeError, "rng"),
    (dict(elements=0), ValueError, "elements"),
    (dict(methods={}), TypeError, "methods"),
    (dict(dtype=None), TypeError, "dtype"),
])
def test_worst_ulp_survey_checks_its_arguments(kwargs, exc, word):
    args = dict(methods={"id": lambda x: x}, reference=lambda x: x.astype(F64), dtype=F16, ds=(8,),
                rng=np.random.default_rng(0), elements=64) | kwargs
    methods, reference = args.pop("methods"), args.pop("reference")
    with pytest.raises(exc, match=word):
        P.worst_ulp_survey(methods, reference, **args)


def test_worst_over_d_and_ulp_table():
    # Rounding to float16 is within half an ulp; doubling a value is exact (0 ulp).
    methods = {"round": lambda x: x, "double/2": lambda x: (x.astype(F64) * 2 / 2).astype(F16)}
    ref = lambda x: x.astype(F64) + 0.25 * P.ulp(x.astype(F64), F16)  # a quarter ulp off every value
    s = P.worst_ulp_survey(methods, ref, dtype=F16, ds=(4, 16), rng=np.random.default_rng(5),
                           families=("N(0,1)", "sd 300"), elements=64)
    assert P.worst_over_d(s, "round", "N(0,1)") == max(s["round", "N(0,1)", 4], s["round", "N(0,1)", 16])
    assert P.worst_over_d(s, "round", "sd 300") == pytest.approx(0.25, abs=1e-12)
    with pytest.raises(KeyError, match="constant"):
        P.worst_over_d(s, "round", "constant")
    assert P.ulp_table(s, methods) == ("family  round  double/2\n------  -----  --------\n"
                                       "N(0,1)   0.25      0.25\nsd 300   0.25      0.25")
    assert P.ulp_table(s, ["round"], families=["sd 300"]) == "family  round\n------  -----\nsd 300   0.25"


@pytest.mark.parametrize("v,text", [(0.0, "0"), (0.4999, "0.50"), (9.994, "9.99"), (123.4, "123"),
                                    (9999.4, "9999"), (1.234e5, "1.2e+05"), (np.inf, "inf"),
                                    (np.float64(np.nan), "nan")])
def test_fmt_ulp(v, text):
    assert P.fmt_ulp(v) == text


def test_text_table_layout():
    assert P.text_table(["a", "bb"], [["x", 1], ["yyy", 22]]) == "a    bb\n---  --\nx     1\nyyy  22"
