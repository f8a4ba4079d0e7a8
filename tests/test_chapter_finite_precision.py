"""Chapter 5 (seed 004): every glued number recomputed here, and the chapter's claims asserted.

The formats come from finfo and IEEE closed forms, the failures from direct float16 arithmetic,
and the accuracy survey is rerun with the notebook's seeds and compared value for value.
"""

import math

import ml_dtypes
import numpy as np
import pytest

import lneps
from lneps import precision as P
from lneps.report import fmt_vec
from notebooks import glued, stream_text

NB = "finite_precision.ipynb"
F16, BF16, F32, F64 = np.float16, ml_dtypes.bfloat16, np.float32, np.float64
EPS, RMS_EPS, DS = 1e-5, 1e-6, (8, 64, 512, 4096)
POSITIVE_F16 = np.arange(1, 0x7C00, dtype=np.uint16).view(F16)  # every positive finite float16


@pytest.fixture(scope="module")
def g():
    return glued(NB)


def ln_methods(low):
    in_f32 = lambda method: (lambda x: P.layer_norm_rounded(x, eps=EPS, dtype=F32, method=method).astype(low))
    return {
        f"naive {np.dtype(low).name}": lambda x: lneps.layer_norm(x, eps=EPS, compute_dtype=low),
        "float32 one-pass": in_f32("one-pass"),
        "float32 two-pass": in_f32("two-pass"),
        "float32 Welford": in_f32("welford"),
        "lneps default": lambda x: lneps.layer_norm(x, eps=EPS),
    }


def ln_reference(x):
    # NumPy's own float64 mean and variance: independent of the notebook's reference.
    x = x.astype(F64)
    return (x - x.mean(axis=-1, keepdims=True)) / np.sqrt(x.var(axis=-1, keepdims=True) + EPS)


@pytest.fixture(scope="module")
def survey():
    return {low: P.worst_ulp_survey(ln_methods(low), ln_reference, dtype=low, ds=DS,
                                    rng=np.random.default_rng(2026), elements=32768) for low in (F16, BF16)}


worst = P.worst_over_d  # the notebook's helper, tested in test_precision.py

EPS_VALUES = [1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9, 1e-10, 1e-11, 1e-12, 1e-30]  # the notebook's sweep


def mp_layer_norm(row, eps):
    # Independent 50-digit reference (mpmath), not lneps.precision.layer_norm_exact.
    import mpmath

    with mpmath.workdps(50):
        xs = [mpmath.mpf(float(v)) for v in row]
        mu = mpmath.fsum(xs) / len(xs)
        var = mpmath.fsum((v - mu) ** 2 for v in xs) / len(xs)
        return [float((v - mu) / mpmath.sqrt(var + mpmath.mpf(eps))) for v in xs]


def test_formats(g):
    for name in P.FORMATS:
        assert g[f"digits_{name}"] == pytest.approx((ml_dtypes.finfo(name).nmant + 1) * math.log10(2))
    assert round(g["digits_bfloat16"], 2) == 2.41 < 3  # the seed's "3 significant digits" is wrong
    assert (g["f16_max"], g["f16_tiny"], g["f16_sub"], g["f16_eps"]) == (65504.0, 2.0**-14, 2.0**-24, 2.0**-10)
    assert g["bf16_eps"] == 2.0**-7 and g["bf16_max"] == float(ml_dtypes.finfo(BF16).max)
    # IEEE binary16: 1 sign, 5 exponent, 10 stored significand bits; bfloat16: 1, 8, 7.
    assert (g["f16_p"], g["f16_exp_bits"]) == (11, 5) == (np.finfo(F16).nmant + 1, np.finfo(F16).nexp)
    assert g["bf16_p"] == 8 == ml_dtypes.finfo(BF16).nmant + 1
    assert g["f32_exp_bits"] == 8 == np.finfo(F32).nexp == ml_dtypes.finfo(BF16).nexp  # "keeps float32's"


def test_which_eps_survive(g):
    assert g["f16_1e5"] == float(F16(1e-5)) == 168 * 2.0**-24
    assert g["f16_1e6"] == float(F16(1e-6)) == 17 * 2.0**-24
    assert g["f16_1e5_relerr"] == pytest.approx(abs(168 * 2.0**-24 / 1e-5 - 1))
    assert g["f16_1e6_relerr"] == pytest.approx(abs(17 * 2.0**-24 / 1e-6 - 1))
    assert g["f16_first_zero"] == "1e-08" and float(F16(1e-8)) == 0 and float(F16(1e-7)) > 0
    # The prose: bfloat16 rounds none of the sweep to 0; 1 + 1e-5 == 1 in float16; 1 + 1e-3 == 1 in bfloat16.
    assert all(float(BF16(e)) != 0 for e in EPS_VALUES) and float(F16(1e-8)) == 0
    assert F16(1) + F16(1e-5) == F16(1) and F16(1) + F16(1e-3) != F16(1)
    assert BF16(1) + BF16(1e-3) == BF16(1)
    table = next(t for t in stream_text(NB) if "bfloat16 stores" in t).splitlines()
    cols = [[c.strip() for c in line.split("  ") if c.strip()] for line in table[2:]]
    assert [c[0] for c in cols] == [f"{e:.0e}" for e in EPS_VALUES]
    assert not any("(zero)" in c[2] for c in cols) and "(zero)" in cols[5][1]  # bfloat16 / float16 at 1e-8
    assert cols[2][5] == "True" and cols[0][6] == "True"  # 1+eps==1: float16 at 1e-5, bfloat16 at 1e-3
    # Exhaustively: v + eps rounds back to v exactly for every float16 v >= 2**-5, not below.
    absorbed = POSITIVE_F16 + F16(EPS) == POSITIVE_F16
    assert g["absorb_var"] == 2.0**-5
    assert absorbed[POSITIVE_F16 >= F16(2.0**-5)].all() and not absorbed[POSITIVE_F16 < F16(2.0**-5)].any()


def test_failure_gallery(g):
    row = np.full(8, 0.5, dtype=F16)
    assert np.isnan(lneps.layer_norm(row, eps=1e-12, compute_dtype=F16)).all()
    assert (lneps.layer_norm(row, eps=1e-12) == 0).all()
    assert g["sq_last_x"] == 256 - 2.0**-3
    with np.errstate(over="ignore"):
        assert np.isfinite(F16(255.875) ** 2) and np.isinf(F16(256) ** 2)
    assert (lneps.layer_norm(np.array([-300.0, 300.0, -100.0, 100.0], F16), compute_dtype=F16) == 0).all()
    # Sum of d numbers near 1000 in float16: 64 of them fit under 65504, 128 do not.
    x = lambda d: np.full(d, 1000.0, F16) + np.tile(np.array([-1, 1], F16), d // 2)
    assert np.isfinite(lneps.layer_norm(x(64), compute_dtype=F16)).all()
    assert np.isnan(lneps.layer_norm(x(128), compute_dtype=F16)).all()


def test_softmax_gallery(g):
    e = np.exp([0.0, 1.0, 2.0])
    assert g["softmax_stable"] == fmt_vec(e / e.sum(), 4) == "[0.0900, 0.2447, 0.6652]"
    with np.errstate(over="ignore", invalid="ignore"):  # the naive formula in plain NumPy
        naive = np.exp([1000.0, 1001.0, 1002.0]) / np.exp([1000.0, 1001.0, 1002.0]).sum()
    assert np.isnan(naive).all()
    assert any(line == "naive:  [nan nan nan]" for t in stream_text(NB) for line in t.splitlines())
    assert g["ln_max16"] == pytest.approx(math.log(65504)) and round(g["ln_max16"], 2) == 11.09
    assert g["ln_max64"] == pytest.approx(709.78, abs=0.01)
    assert (g["exp_last_x"], g["exp_first_inf_x"]) == (11.0859375, 11.09375)  # float16 neighbours
    assert g["exp_last_x"] < math.log(65504) < g["exp_first_inf_x"]


def test_accuracy_survey_values(g, survey):
    s16, sbf = survey[F16], survey[BF16]
    both = s16 | sbf
    assert g["default_worst"] == pytest.approx(max(v for (m, _, _), v in both.items() if m == "lneps default"), rel=1e-9)
    assert g["twopass_worst"] == pytest.approx(max(v for (m, _, _), v in both.items() if m == "float32 two-pass"), rel=1e-9)
    for key, s, method, family in [
        ("naive16_normal", s16, "naive float16", "N(0,1)"),
        ("naivebf_normal", sbf, "naive bfloat16", "N(0,1)"),
        ("onepass_1000", s16, "float32 one-pass", "mean 1000, sd 1"),
        ("onepass_6e4_bf", sbf, "float32 one-pass", "mean 6e4, sd 8"),
        ("welford_1000", s16, "float32 Welford", "mean 1000, sd 1"),
        ("welford_6e4", s16, "float32 Welford", "mean 6e4, sd 8"),
        ("welford_normal", s16, "float32 Welford", "N(0,1)"),
    ]:
        assert g[key] == pytest.approx(worst(s, method, family), rel=1e-9), key
    # "produces NaN for float16 rows", "the float16 sum overflows (NaN)", constant rows "(NaN)"
    assert math.isinf(worst(s16, "float32 one-pass", "mean 6e4, sd 8"))
    assert math.isinf(worst(s16, "naive float16", "mean 1000, sd 1"))
    assert math.isinf(worst(s16, "naive float16", "constant"))
    assert not math.isinf(worst(sbf, "naive bfloat16", "mean 1000, sd 1"))  # bfloat16's range is float32's


def test_reference_error_against_50_digits(g):
    # The notebook's float64 reference against an independent 50-digit layer norm.
    worst_err = 0.0
    for low in (F16, BF16):
        rng = np.random.default_rng(5)
        for family in P.FAMILIES:
            for d in DS:
                x = P.family_rows(family, rng, max(512 // d, 1), d, low)
                ref = ln_reference(x)
                exact = np.array([mp_layer_norm(r, EPS) for r in x])
                worst_err = max(worst_err, float(np.max(np.abs(ref - exact) / P.ulp(exact, low))))
    assert g["ref_err_ulp"] == pytest.approx(worst_err, rel=0.5, abs=1e-13)
    assert 0 < g["ref_err_ulp"] < 1e-11  # far below the 0.5 ulp that any stored result can reach


def test_accuracy_claims(g, survey):
    # The package default: within 1 ulp (in fact correctly rounded up to float64 noise).
    assert 0.49 < g["default_worst"] <= 0.5 + 1e-3
    assert g["twopass_worst"] < 1
    assert g["naive16_normal"] > 100 and g["naivebf_normal"] > 100
    assert g["onepass_1000"] > 1000 and g["onepass_6e4_bf"] > 1000
    assert g["welford_normal"] > 1 and g["welford_1000"] > 100
    for low in (F16, BF16):
        for family in P.FAMILIES:
            assert worst(survey[low], "lneps default", family) <= 0.5 + 1e-3


def test_printed_tables_show_the_default_within_half_an_ulp():
    tables = [t for t in stream_text(NB) if "lneps default" in t]
    assert len(tables) >= 3
    for text in tables:
        for line in text.splitlines():
            if line.split("  ")[0].strip() in P.FAMILIES:
                assert float(line.split()[-1]) <= 0.5


def test_negative_one_pass_variance(g):
    rows = P.family_rows("mean 6e4, sd 8", np.random.default_rng(7), 1024, 512, F16)
    _, one = P.mean_and_variance(rows, dtype=F32, method="one-pass")
    var_ref = rows.astype(F64).var(axis=-1)
    assert g["n_rows"] == 1024
    assert g["neg_rows"] == int((one < 0).sum()) > 0 and g["zero_rows"] == int((one == 0).sum()) > 0
    assert g["most_negative"] == float(one.min()) < 0
    assert g["median_var"] == pytest.approx(float(np.median(var_ref)))
    assert g["msq_6e4"] == pytest.approx(float(np.mean(rows.astype(F64) ** 2)))
    assert g["ulp32_at_msq"] == 256.0  # 2**31 <= 3.6e9 < 2**32: spacing 2**(31 - 23)


def test_float32_output_needs_float64_statistics(g):
    methods = {"float32 two-pass": lambda x: P.layer_norm_rounded(x, eps=EPS, dtype=F32),
               "lneps default": lambda x: lneps.layer_norm(x, eps=EPS)}
    s32 = P.worst_ulp_survey(methods, ln_reference, dtype=F32, ds=DS, rng=np.random.default_rng(32), elements=32768)
    assert g["f32_twopass_normal"] == pytest.approx(worst(s32, "float32 two-pass", "N(0,1)"), rel=1e-6)
    assert g["f32_twopass_normal"] > 100
    assert g["f32_default_worst"] <= 0.5 + 1e-3


def test_pytorch_section(g):
    x = P.family_rows("N(0,1)", np.random.default_rng(66707), 64, 512, F16)
    gamma = np.random.default_rng(1).normal(1.0, 0.2, 512)
    beta = np.random.default_rng(2).normal(0.0, 0.2, 512)
    fused = lneps.layer_norm(x, gamma, beta, compute_dtype=F32)
    recipe = lneps.layer_norm(x, compute_dtype=F32) * gamma.astype(F16) + beta.astype(F16)
    exact = ln_reference(x) * gamma + beta
    assert g["recipe_differ"] == float(np.mean(fused != recipe)) > 0.3
    assert g["fused_ulp"] == pytest.approx(P.worst_ulp_error(fused, exact, F16), rel=1e-9)
    assert g["recipe_ulp"] == pytest.approx(P.worst_ulp_error(recipe, exact, F16), rel=1e-9)
    assert g["fused_ulp"] < 1 < 10 < g["recipe_ulp"]
    # Quoted from pytorch/pytorch#66707 ("Mismatched elements: 290 / 640", "Greatest absolute
    # difference: 0.0009765625"); the prose calls the difference one float16 ulp at 1.
    assert (g["issue_mismatched"], g["issue_elements"]) == (290, 640)
    assert g["issue_mismatch"] == 290 / 640
    assert g["issue_maxdiff"] == 0.0009765625 == float(np.finfo(F16).eps) == float(P.ulp(1.0, F16))
    assert g["f32_machine_eps"] == float(np.finfo(np.float32).eps) == 2.0**-23
    assert g["f32_machine_eps_fate16"] == "subnormal"
    assert g["f32_eps_log2"] == -23 == np.finfo(F32).nmant * -1


def test_rmsnorm_section(g):
    def methods(low):
        return {f"naive {np.dtype(low).name}": lambda x: lneps.rms_norm(x, eps=RMS_EPS, compute_dtype=low),
                "float32": lambda x: lneps.rms_norm(x, eps=RMS_EPS, compute_dtype=F32),
                "lneps default": lambda x: lneps.rms_norm(x, eps=RMS_EPS)}
    ref = lambda x: x.astype(F64) / np.sqrt(np.mean(x.astype(F64) ** 2, axis=-1, keepdims=True) + RMS_EPS)
    s = {low: P.worst_ulp_survey(methods(low), ref, dtype=low, ds=DS, rng=np.random.default_rng(6), elements=32768)
         for low in (F16, BF16)}
    both = s[F16] | s[BF16]
    assert g["rms_naive16_1000"] == pytest.approx(worst(s[F16], "naive float16", "mean 1000, sd 1"), rel=1e-9)
    assert g["rms_naive16_normal"] == pytest.approx(worst(s[F16], "naive float16", "N(0,1)"), rel=1e-9)
    assert g["rms_naivebf_worst"] == pytest.approx(max(v for (m, _, _), v in s[BF16].items() if m == "naive bfloat16"), rel=1e-9)
    assert g["rms_default_worst"] == pytest.approx(max(v for (m, _, _), v in both.items() if m == "lneps default"), rel=1e-9)
    assert g["rms_default_worst"] <= 0.5 + 1e-3 and g["rms_f32_worst"] < 1
    with np.errstate(over="ignore"):
        assert (lneps.rms_norm(np.full(4096, 4.0, F16), compute_dtype=F16) == 0).all()  # 16 * 4096 > 65504


def test_float16_grid_near_6e4(g):
    x = np.float16(6e4)
    assert g["f16_grid_6e4"] == float(np.nextafter(x, np.float16(np.inf))) - float(x) == 32.0
    # A zero variance divides a grid step by sqrt(eps): 32 / sqrt(1e-5), about 1e4.
    assert g["zero_var_out"] == pytest.approx(32 / math.sqrt(1e-5)) and round(g["zero_var_out"]) == 10119
