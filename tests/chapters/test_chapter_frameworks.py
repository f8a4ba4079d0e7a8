"""Chapter 7, 'What the frameworks compute': its budget on the rendered page, and the numbers its
prose states, recomputed from the stored measurements and the inputs."""


import numpy as np

import lneps.testing
from lneps.book import frameworks as FW
from notebooks import glued
from rendered import built_article, code_share

F16 = np.float16
DATA = FW.load_all()
G = glued("frameworks.ipynb")
PROSE_LIMIT, CODE_LIMIT = 3000, 1500


def test_the_chapter_is_within_its_budget(built_book):
    code, output = built_book
    assert code == 0, output[-3000:]
    share = code_share(built_article("book/frameworks.html"))
    assert share["prose"] <= PROSE_LIMIT, share
    assert share["code"] <= CODE_LIMIT, share


def test_onnx_reference_nan_at_mean_1000_is_the_overflowing_sum():
    """The NaN share is the mean-1000 rows' own, every row at d >= 100 and none at d = 8, because
    the float16 sum of 66 entries near 1000 passes 65504 while the centred entries are about 1."""
    ref = DATA["onnx_reference"]
    fam = FW.aggregate(ref, op="layer_norm", dtype="float16", family="mean_1000")
    assert G["ref16_nan_1000"] == fam["nan"] / fam["n"]
    pooled = FW.aggregate(ref, op="layer_norm", dtype="float16")
    assert abs(G["ref16_nan_1000"] - pooled["nan"] / pooled["n"]) > 0.3   # not the pooled share
    for d in FW.DS:
        a = FW.aggregate(ref, op="layer_norm", dtype="float16", family="mean_1000", d=d)
        assert a["nan"] == (0 if d < G["n_overflow"] else a["n"]), d
    assert G["n_overflow"] == 66 and G["f16_max"] == float(np.finfo(F16).max)
    rows = FW.measurement_rows("float16", 100)["mean_1000"]
    with np.errstate(over="ignore"):
        sums = np.cumsum(rows, axis=1, dtype=F16)
    assert np.isfinite(sums[:, 64]).all() and np.isinf(sums[:, 65]).all()
    centred = rows.astype(np.float64) - rows.astype(np.float64).mean(axis=1, keepdims=True)
    assert np.abs(centred).max() < 16   # no square near 65504


def test_constant_row_shares_are_given_per_row_length():
    for d in (8, 100, 768):
        r = FW.measurement_rows("float16", d)["mean_6e4"]
        assert G[f"t16_const_{d}"] == float(np.mean(np.all(r == r[:, :1], axis=1)))
    assert G["t16_const_8"] > 0.6 and G["t16_const_100"] < 0.02


def test_figure_table_and_text_agree_on_torch_float16():
    """The figure's cells and the table are the same summary rows: the hand-made constant row's
    -2048 is the 2**21 scaled ulp shown, the constant family's worst is 2048 (2.0 off)."""
    rows = {(r["framework"], r["op"], r["dtype"], r["family"]): r for r in FW.summary_rows(DATA)}
    hand = rows["torch", "layer_norm", "float16", "hand"]
    assert hand["worst_scaled"] == G["c60k_scaled"] == 2048 / 2.0**-10
    const = rows["torch", "layer_norm", "float16", "constant"]
    assert const["worst_scaled"] == 2.0 / 2.0**-10 and 0.2 < const["share_correct"] < 0.21
    assert rows["torch", "group_norm", "float16", "constant"]["worst_scaled"] == 0


def test_the_scaled_error_demonstration():
    assert G["demo_ulp"] > 100 * G["demo_scaled"] and G["demo_scaled"] < 4
    assert G["t32n_ulp"] > 1e4 * G["t32n_scaled"]


def test_eps_rule_as_stated():
    eh = DATA["torch"]["eps_handling"]
    e = eh["torch.nn.RMSNorm(eps=None) | float32"]
    assert G["rms_none_f32_rows"] == e["matches"]["finfo(float32).eps"]["rows_equal"] < e["rows"]
    assert G["rms_none_f32_others"] == 0
    assert G["rms_none_float64"] == "finfo(float64).eps" and G["rms_none_float32"] == "finfo(float32).eps"
    assert G["kept_fws"] == "PyTorch, Flax and ONNX Runtime"


def test_numbers_typed_into_the_prose_and_exercises():
    from lneps.book import finite_precision as P

    assert float(P.ulp(6e10, np.float32)) == 4096                  # "float32 numbers are 4096 apart"
    assert float(P.ulp(1e9, np.float32)) == 64                     # exercise 1: 1000 * 10**6
    # exercise 2: the careful float32 kernel on rows shifted by 1000
    F32 = np.float32
    x = FW.measurement_rows("float32", 768)["normal"][:8] + F32(1000)
    mu = np.mean(x, axis=1, keepdims=True)
    var = np.mean((x - mu) ** 2, axis=1, keepdims=True)
    y = (x - mu) / np.sqrt(var + F32(1e-5))
    r = lneps.testing.compare(y, x=x, eps=float(F32(1e-5)))
    assert 200 < r.max_ulp_scaled < 1000 and r.max_ulp > 1e5
    assert float(P.ulp(1000.0, np.float32)) / 2 == 2.0**-15 and 2.0**-15 / 2.0**-23 == 256
