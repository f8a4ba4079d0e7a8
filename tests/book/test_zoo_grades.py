"""The kernel zoo graded by the two checks of lneps.testing (lneps.book.zoo_grades): every correct
kernel passes both, on every input family, d from 8 to 8192, float16, bfloat16 and float32,
eps 1e-5 and 1e-12 (and 0); every defect is caught where it shows.

The grid, about 30 s of one core: rows = 16, every family, the three formats and both eps for
d in 8, 9, 64, 100, 768 and 1024; eps = 0 at d = 9 and 64 (the families with no constant row);
8 rows at d = 4096 and 8192, where the sequential loops cost most; RMS norm on the wide-range
family only up to d = 100 (lneps.rms_norm's exact answer on those rows takes seconds).
The d - 1 variance and eps after the square root, which no per-element bound can see in
float32 at d = 4096, are checked on 64 rows there. Every correct kernel passes the probabilistic
bound (probabilistic=True) on the same grid."""

import ml_dtypes
import numpy as np
import pytest

from lneps.book import kernel_zoo as kz
from lneps.book import zoo_grades as zg

BF16 = np.dtype(ml_dtypes.bfloat16)
FORMATS = (np.float16, BF16, np.float32)
FAMILIES = (
    "normal",
    "offset",
    "near_constant",
    "constant",
    "wide_range",
    "midpoint",
    "cancelling_beta",
)
GRID = (
    [(d, eps, 16) for d in (8, 9, 64, 100, 768, 1024) for eps in (1e-5, 1e-12)]
    + [(d, 0.0, 16) for d in (9, 64)]
    + [(d, eps, 8) for d in (4096, 8192) for eps in (1e-5, 1e-12)]
)


def _cases(op, dtype, d, eps, rows):
    for fam in FAMILIES:
        if eps == 0.0 and fam == "constant":
            continue  # 0/0: no exact answer
        if op == "rms_norm" and fam == "wide_range" and d > 100:
            continue  # lneps.rms_norm's exact answer takes ~2 s per 8 such rows per 1000 elements
        case = zg.make_case(op, dtype, d, eps, fam, rows=rows, probabilistic=True)
        if case is not None:
            yield case


def test_the_scaled_error_is_compares():
    import inspect

    import lneps.testing as lt

    case = zg.make_case("layer_norm", np.float16, 64, 1e-5, "cancelling_beta")
    y = kz.welford_chan_apex(case.x, case.gamma, case.beta, case.eps)
    mine = zg.scaled_error(y, case.exact, case.gamma, case.dtype)
    params = inspect.signature(lt.compare).parameters
    if "x" in params and params["x"].kind == inspect.Parameter.POSITIONAL_OR_KEYWORD:
        report = lt.compare(y, case.x, gamma=case.gamma, beta=case.beta, eps=1e-5)
    else:
        report = lt.compare(y, x=case.x, gamma=case.gamma, beta=case.beta, eps=1e-5)
    assert np.array_equal(mine, report.scaled_error)


@pytest.mark.parametrize("dtype", FORMATS, ids=str)
@pytest.mark.parametrize("d,eps,rows", GRID)
def test_every_correct_kernel_passes(dtype, d, eps, rows):
    for op in ("layer_norm", "rms_norm"):
        for case in _cases(op, dtype, d, eps, rows):
            for k in kz.kernels("correct", op):
                g = zg.grade_case(k, case)
                assert not g["bound"], (k.name, case.family, g["ratio"])
                assert not g["systematic"], (k.name, case.family, str(g["scale"]))
                # and the probabilistic bound (assert_close's probabilistic=True): no false alarm
                assert not g["bound_p"], (k.name, case.family, g["ratio_p"])


def _caught(kernel, op, dtype, d, eps, family, rows=16, check=None):
    case = zg.make_case(op, dtype, d, eps, family, rows=rows)
    g = zg.grade_case(kernel, case)
    return g[check] if check else (g["bound"] or g["systematic"]), g


def _k(fn):
    return next(k for k in kz.ZOO if k.fn is fn)


def test_the_two_float32_defects_no_bound_can_see_are_caught_at_d_4096():
    for fn, name in (
        (kz.unbiased_variance, "the d - 1 (unbiased) variance"),
        (kz.eps_after_sqrt, "eps added after the square root"),
    ):
        caught, g = _caught(_k(fn), "layer_norm", np.float32, 4096, 1e-5, "normal", rows=64)
        assert not g["bound"] and g["ratio"] < 0.5  # far inside the per-element bound
        assert g["systematic"] and g["scale"].suspect == name


def test_the_unbiased_variance_wherever_1_over_2d_shows():
    for dt in FORMATS:
        for d in (8, 9, 64):
            assert _caught(_k(kz.unbiased_variance), "layer_norm", dt, d, 1e-5, "normal")[0], (
                dt,
                d,
            )
    for d in (100, 768, 1024):
        assert _caught(
            _k(kz.unbiased_variance),
            "layer_norm",
            np.float32,
            d,
            1e-12,
            "normal",
            check="systematic",
        )[0]


def test_eps_after_the_square_root_in_float32():
    for d in (8, 64, 768):
        assert _caught(_k(kz.eps_after_sqrt), "layer_norm", np.float32, d, 1e-5, "normal")[0], d
    assert _caught(
        _k(kz.rms_eps_after_sqrt),
        "rms_norm",
        np.float32,
        1024,
        1e-5,
        "normal",
        rows=64,
        check="systematic",
    )[0]


def test_eps_ignored_on_constant_and_near_constant_rows():
    for dt in FORMATS:
        for d in (8, 64, 768):
            assert _caught(
                _k(kz.eps_ignored), "layer_norm", dt, d, 1e-5, "constant", check="bound"
            )[0], (dt, d)
    for d in (8, 64, 768):
        assert _caught(_k(kz.eps_ignored), "layer_norm", np.float16, d, 1e-5, "near_constant")[0], d
    caught, g = _caught(_k(kz.eps_ignored), "layer_norm", np.float32, 1024, 1e-5, "normal", rows=64)
    assert caught and g["scale"].suspect == "eps ignored"


def test_sixteen_bit_accumulation():
    for dt in FORMATS:
        for d in (768, 1024):
            assert _caught(_k(kz.accumulate_16bit), "layer_norm", dt, d, 1e-5, "normal")[0], (dt, d)
            if dt != np.float32:  # float32 offset rows defeat every float32 kernel alike
                assert _caught(_k(kz.accumulate_16bit), "layer_norm", dt, d, 1e-5, "offset")[0], (
                    dt,
                    d,
                )


def test_a_float32_one_pass_variance_on_offset_rows():
    for d in (8, 64, 768, 1024):
        assert _caught(
            _k(kz.one_pass_float32), "layer_norm", np.float32, d, 1e-5, "offset", check="bound"
        )[0], d


def test_statistics_stored_in_16_bits():
    for d in (8, 64, 768, 1024):
        assert _caught(
            _k(kz.rstd_bfloat16), "layer_norm", np.float32, d, 1e-5, "normal", check="bound"
        )[0], d
    for d in (8, 64, 768):  # eps = 1e-12 is 0 in float16: constant float16 rows give NaN
        assert _caught(
            _k(kz.eps_float16), "layer_norm", np.float16, d, 1e-12, "constant", check="bound"
        )[0], d


def test_grade_returns_the_table():
    rows = zg.grade(
        dtypes=(np.float32,), ds=(64,), eps_values=(1e-5,), families=("normal", "offset"), rows=16
    )
    assert [r["name"] for r in rows] == [k.name for k in kz.ZOO]
    by = {r["name"]: r for r in rows}
    assert all(r["passed"] for r in rows if r["kind"] == "correct")
    assert not by["unbiased (d - 1) variance"]["passed"]
    assert by["one pass in float32"]["caught_by"].startswith("bound")
    text = zg.table_text(rows)
    assert "unbiased (d - 1) variance" in text and "worst err/bound" in text


def test_grades_read_back_from_the_cache_are_the_grades(tmp_path, monkeypatch):
    monkeypatch.delenv("LNEPS_CACHE_DIR", raising=False)
    fresh = zg.grade(dtypes=(np.float16,), ds=(8,), eps_values=(1e-5,))
    monkeypatch.setenv("LNEPS_CACHE_DIR", str(tmp_path))
    kept = zg.grade(dtypes=(np.float16,), ds=(8,), eps_values=(1e-5,))
    again = zg.grade(dtypes=(np.float16,), ds=(8,), eps_values=(1e-5,))
    assert fresh == kept == again and len(list(tmp_path.iterdir())) == 1
    assert zg.grade(dtypes=(BF16,), ds=(8,), eps_values=(1e-5,)) != fresh  # another key


@pytest.mark.parametrize("dtype", (np.float16, BF16), ids=str)
@pytest.mark.parametrize("family", ("normal", "cancelling_beta"))
def test_the_probabilistic_bound_at_d_4096_on_64_rows(dtype, family):
    # assert_close as a kernel engineer calls it, on another input than the appendix's first:
    # no false alarm on a correct layer-norm kernel or a design (its own class), with the default
    # tolerance or probabilistic=True; the d - 1 variance caught per element with it
    import lneps.testing as lt

    x, g, b = lt.families(dtype, 4096, rows=64, seed=11)[family]
    for k in kz.ZOO:
        if k.op == "layer_norm" and k.kind in ("correct", "design"):
            a = k.fn(x, g, b, 1e-5)
            lt.assert_close(a, x=x, gamma=g, beta=b, eps=1e-5, kernels=k.classes)
            lt.assert_close(a, x=x, gamma=g, beta=b, eps=1e-5, kernels=k.classes, probabilistic=True)
    a = kz.unbiased_variance(x, g, b, 1e-5)
    with pytest.raises(AssertionError, match="exceed their bound"):
        lt.assert_close(a, x=x, gamma=g, beta=b, eps=1e-5, probabilistic=True)
