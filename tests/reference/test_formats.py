"""lneps.formats against finfo, the IEEE closed forms, the spacing of each format and errors
measured in it, and what storing epsilon does."""

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lneps import formats, oracle

F16, BF16, F32, F64 = np.float16, ml_dtypes.bfloat16, np.float32, np.float64


# --- formats -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", formats.FORMATS)
def test_format_table_equals_finfo(name):
    row = {r["name"]: r for r in formats.format_table()}[name]
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


@pytest.mark.parametrize("dt", [F16, BF16, F32, F64], ids=str)
def test_format_of_agrees_with_finfo_and_with_the_oracles_own_formats(dt):
    # the kernel reads its formats here; the oracle that judges it reads finfo for itself
    fi, f, o = ml_dtypes.finfo(dt), formats.format_of(dt), oracle.exact_format(dt)
    assert (f.p, f.emin, f.emax) == (int(fi.nmant) + 1, int(fi.minexp), int(fi.maxexp) - 1)
    assert (f.p, f.emin, f.emax) == (o.p, o.emin, o.emax)
    with pytest.raises(TypeError, match="no format lneps computes exactly"):
        formats.format_of(np.int32)


def test_format_numbers_match_the_ieee_closed_forms():
    f16, bf16, f32 = (formats.format_info(n) for n in ("float16", "bfloat16", "float32"))
    assert (f16["smallest_subnormal"], f16["smallest_normal"], f16["largest"], f16["machine_eps"]) == (
        2.0**-24, 2.0**-14, 65504.0, 2.0**-10)
    assert (bf16["smallest_subnormal"], bf16["smallest_normal"], bf16["machine_eps"]) == (2.0**-133, 2.0**-126, 2.0**-7)
    assert bf16["largest"] == (2 - 2.0**-7) * 2.0**127
    assert f32["machine_eps"] == 2.0**-23 == float(np.finfo(np.float32).eps)


@pytest.mark.parametrize("name,exp_bits,p", [("float16", 5, 11), ("bfloat16", 8, 8), ("float32", 8, 24),
                                              ("float64", 11, 53)])
def test_exponent_and_significand_bits_fill_the_format(name, exp_bits, p):
    row = formats.format_info(name)
    assert (row["exponent_bits"], row["significand_bits"]) == (exp_bits, p)
    assert 1 + row["exponent_bits"] + row["significand_bits"] - 1 == row["bits"]  # sign, exponent, stored bits


def test_significant_digits_are_p_log10_2_and_bfloat16_has_fewer_than_three():
    digits = lambda dt: formats.format_info(dt)["digits"]
    assert digits(BF16) == pytest.approx(8 * math.log10(2))
    assert round(digits(BF16), 2) == 2.41  # the seed said 3
    assert round(digits(F16), 2) == 3.31
    assert round(digits(F32), 2) == 7.22
    assert round(digits(F64), 2) == 15.95


# --- which eps survive -----------------------------------------------------------------------


def test_eps_fates_in_float16_and_bfloat16():
    for eps in (1e-8, 1e-9, 1e-10, 1e-11, 1e-12, 1e-30):
        assert formats.eps_fate(eps, F16) == "zero"
    for eps in (1e-5, 1e-6, 1e-7):
        assert formats.eps_fate(eps, F16) == "subnormal"
    for eps in (1e-3, 1e-4):
        assert formats.eps_fate(eps, F16) == "normal"
    for eps in (1e-3, 1e-5, 1e-12, 1e-30):
        assert formats.eps_fate(eps, BF16) == "normal"
    assert formats.eps_fate(1e-45, F32) == "subnormal" and formats.eps_fate(1e-46, F32) == "zero"
    assert formats.eps_fate(0.0, F64) == "zero"


def test_stored_values_of_the_sweet_spot_in_float16():
    # 1e-5 and 1e-6 are whole multiples of the smallest subnormal 2**-24.
    assert float(F16(1e-5)) == 168 * 2.0**-24 and round(float(F16(1e-5)), 9) == 1.0014e-05
    assert float(F16(1e-6)) == 17 * 2.0**-24 and round(float(F16(1e-6)), 10) == 1.0133e-06
    rows = {r["eps"]: r for r in formats.eps_survival_table([1e-5, 1e-6])}
    assert rows[1e-5]["float16"] == float(F16(1e-5)) and rows[1e-6]["float16 fate"] == "subnormal"


def test_one_plus_eps():
    assert formats.one_plus_eps_is_one(1e-5, F16) and not formats.one_plus_eps_is_one(1e-3, F16)
    assert formats.one_plus_eps_is_one(1e-3, BF16)
    assert not formats.one_plus_eps_is_one(1e-5, F32) and formats.one_plus_eps_is_one(1e-8, F32)
    assert not formats.one_plus_eps_is_one(1e-12, F64)


@settings(max_examples=100, deadline=None)
@given(st.floats(min_value=0, max_value=1e-2, allow_subnormal=True))
def test_eps_fate_agrees_with_the_stored_value(eps):
    for dt in (F16, BF16, F32):
        stored = float(np.asarray(eps).astype(dt))
        fate = formats.eps_fate(eps, dt)
        assert (fate == "zero") == (stored == 0)
        assert (fate == "normal") == (stored >= float(ml_dtypes.finfo(dt).smallest_normal))


def test_fates_are_the_declared_names_and_the_table_agrees_with_eps_fate():
    eps_values = [1e-3, 1e-5, 1e-8, 1e-30, 0.0]
    rows = formats.eps_survival_table(eps_values)
    assert [r["eps"] for r in rows] == eps_values
    for r in rows:
        for name in formats.FORMATS:
            assert r[name + " fate"] in formats.EPS_FATES and r[name + " fate"] == formats.eps_fate(r["eps"], name)
            assert r[name] == float(np.asarray(r["eps"]).astype(ml_dtypes.finfo(name).dtype))
            assert r[name + " 1+eps==1"] == formats.one_plus_eps_is_one(r["eps"], name)
    assert {formats.eps_fate(e, F16) for e in (1e-3, 1e-6, 1e-9)} == set(formats.EPS_FATES)
    with pytest.raises(ValueError, match="eps"):
        formats.eps_survival_table([1e-5, -1.0])
    with pytest.raises(TypeError, match="dtype"):
        formats.eps_survival_table([1e-5], dtypes=["float16", "int8"])


def test_bad_eps_and_dtype_are_rejected():
    with pytest.raises(ValueError, match="eps"):
        formats.eps_fate(-1e-5, F16)
    with pytest.raises(TypeError, match="dtype"):
        formats.eps_fate(1e-5, "float17")
    with pytest.raises(TypeError, match="dtype"):
        formats.format_info(np.int32)


def test_the_registry_is_ieee_754_s_table():
    # IEEE 754-2019, table 3.5 (binary16, binary32, binary64: p, emax, emin = 1 - emax), and
    # bfloat16's 8 significand bits over binary32's exponent range, typed here, not read back
    from lneps.formats import DTYPES, NARROW, REGISTRY, format_of

    table = {"float16": (11, 15), "bfloat16": (8, 127), "float32": (24, 127), "float64": (53, 1023)}
    assert list(REGISTRY) == list(table)
    for name, (p, emax) in table.items():
        f = format_of(name)
        assert (f.p, f.emin, f.emax) == (p, 1 - emax, emax)
        assert f.u == 2.0**-p and f.tiny == 2.0 ** (2 - emax - p)
        assert f.largest == (2 - 2.0 ** (1 - p)) * 2.0**emax
        assert format_of(f.dtype) is f
    assert DTYPES[:3] == NARROW and len(DTYPES) == 4
    with pytest.raises(TypeError, match="float16, bfloat16, float32 or float64"):
        format_of(np.int32)


# --- ulp ----------------------------------------------------------------------------------------


def test_ulp_closed_forms():
    assert formats.ulp(1.0, F16) == 2.0**-10 and formats.ulp(0.999, F16) == 2.0**-11
    assert formats.ulp(0.0, F16) == 2.0**-24 and formats.ulp(1e-7, F16) == 2.0**-24  # subnormal floor
    assert formats.ulp(65504.0, F16) == 32.0 and formats.ulp(-1.5, F16) == 2.0**-10
    assert formats.ulp(1.0, BF16) == 2.0**-7 and formats.ulp(1.0, F32) == 2.0**-23
    assert formats.ulp(0.0, BF16) == 2.0**-133


@pytest.mark.parametrize("dt", [F16, BF16, F32])
def test_ulp_is_the_gap_to_the_next_number(dt):
    top = float(ml_dtypes.finfo(dt).max) / 2
    x = np.clip(np.random.default_rng(2).lognormal(0, 4, size=2000), 0, top).astype(dt)
    x = x[x.astype(F64) > 0]
    nxt = np.nextafter(x, np.asarray(np.inf, dtype=dt)) if dt is not BF16 else None
    if nxt is None:  # ml_dtypes has no nextafter: step the bit pattern
        nxt = (x.view(np.uint16) + 1).view(dt)
    np.testing.assert_array_equal(nxt.astype(F64) - x.astype(F64), formats.ulp(x.astype(F64), dt))


@settings(max_examples=100, deadline=None)
@given(st.floats(-6e4, 6e4))
def test_rounding_to_nearest_is_within_half_an_ulp(r):
    for dt in (F16, BF16, F32):
        assert formats.ulp_error(np.asarray(r).astype(dt), r, dt) <= 0.5


def test_ulp_error_counts_nan_and_inf_results_as_infinite():
    err = formats.ulp_error(np.array([np.nan, np.inf, 1.0, 1.0 + 2**-10], dtype=F16), [0.5, 1.0, 1.0, 1.0], F16)
    assert err.tolist() == [np.inf, np.inf, 0.0, 1.0]
    assert formats.worst_ulp_error(np.array([1.0], dtype=F16), [1.0], F16) == 0.0
