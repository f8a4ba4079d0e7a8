"""lneps.book.survey: the stress families and worst-error surveys, and the tables that print them."""

import ml_dtypes
import numpy as np
import pytest

import lneps
from lneps.book import printing, survey

F16, BF16, F32, F64 = np.float16, ml_dtypes.bfloat16, np.float32, np.float64


# --- families and layout ------------------------------------------------------------------------


def test_family_rows():
    rng = np.random.default_rng(3)
    x = survey.family_rows("mean_1000", rng, 200, 64, F32)
    assert x.shape == (200, 64) and x.dtype == F32
    assert abs(float(x.mean()) - 1000) < 0.1 and abs(float(x.std()) - 1) < 0.05
    c = survey.family_rows("constant", rng, 5, 16, BF16)
    assert (c == c[:, :1]).all()
    with pytest.raises(ValueError, match="name"):
        survey.family_rows("uniform", rng, 1, 1, F16)


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
    args = dict(name="normal", rng=np.random.default_rng(0), n=2, d=4, dtype=F16) | kwargs
    with pytest.raises(exc, match=rf"\b{word}\b"):
        survey.family_rows(**args)


@pytest.mark.parametrize("kwargs,exc,word", [
    (dict(ds=(8, 0)), ValueError, "ds"),  # d = 0 used to be a ZeroDivisionError
    (dict(ds=(8.0,)), TypeError, "ds"),
    (dict(rng=None), TypeError, "rng"),
    (dict(elements=0), ValueError, "elements"),
    (dict(methods={}), TypeError, "methods"),
    (dict(dtype=None), TypeError, "dtype"),
])
def test_oracle_survey_checks_its_arguments(kwargs, exc, word):
    args = dict(methods={"id": lambda x: x}, eps=1e-5, dtype=F16, ds=(8,), rng=np.random.default_rng(0),
                elements=64) | kwargs
    with pytest.raises(exc, match=word):
        survey.oracle_survey(args.pop("methods"), **args)


def test_combine_over_d_and_families():
    methods = {"default": lambda x: lneps.layer_norm(x)}
    s = survey.oracle_survey(methods, eps=1e-5, dtype=F16, ds=(4, 16), rng=np.random.default_rng(5),
                             families=("normal", "sd_300"), elements=64)
    one = survey.combine(s, "default", "normal")
    assert one.elements == 128 and one.worst_ulp == max(s["default", "normal", d].worst_ulp for d in (4, 16))
    assert survey.combine(s, "default").elements == 256
    with pytest.raises(KeyError, match="constant"):
        survey.combine(s, "default", "constant")


@pytest.mark.parametrize("v,text", [(0.0, "0"), (0.4999, "0.50"), (9.994, "9.99"), (123.4, "123"),
                                    (9999.4, "9999"), (1.234e5, "1.2e+05"), (np.inf, "inf"),
                                    (np.float64(np.nan), "nan")])
def test_fmt_ulp(v, text):
    assert printing.fmt_ulp(v) == text


def test_text_table_layout():
    assert printing.text_table(["a", "bb"], [["x", 1], ["yyy", 22]]) == "a    bb\n---  --\nx     1\nyyy  22"


def test_oracle_survey_judges_by_the_exact_answer_and_counts_exact_zeros_apart():
    methods = {"default": lambda x: lneps.layer_norm(x), "naive": lambda x: lneps.layer_norm(x, compute_dtype=F16)}
    res = survey.oracle_survey(methods, eps=1e-5, dtype=F16, ds=(8, 1000), rng=np.random.default_rng(15),
                               families=("normal", "mean_6e4", "constant"), elements=8000)
    assert len(res) == 2 * 3 * 2
    for (name, fam, d), a in res.items():
        assert a.elements == (8000 // d) * d
        if name == "default":
            assert a.correct == 1.0 and a.worst_ulp <= 0.5 and a.zeros_missed == 0
    assert res["default", "constant", 8].zeros == 8000 and res["default", "constant", 8].worst_ulp == 0
    assert res["default", "mean_6e4", 8].zeros > 0  # elements equal to their row's mean
    assert res["naive", "mean_6e4", 8].nonfinite > 0
    assert res["naive", "normal", 1000].correct < 0.9
    with pytest.raises(ValueError, match="kind"):
        survey.oracle_survey(methods, eps=1e-5, dtype=F16, ds=(8,), rng=np.random.default_rng(0), kind="batch")


def test_accuracy_of_a_known_answer():
    value = np.array([1.0, 0.0, 2.0])
    a = survey.accuracy(np.array([1.0 + 2**-10, 0.5, np.nan]), value, np.zeros(3), value, F16)
    assert a.worst_ulp == np.inf and a.zeros == 1 and a.zeros_missed == 1 and a.nonfinite == 1
    a = survey.accuracy(np.array([1.0 + 2**-10, 0.0, 2.0]), value, np.zeros(3), value, F16)
    assert a.worst_ulp == 1.0 and a.correct == pytest.approx(2 / 3) and a.zeros_missed == 0
