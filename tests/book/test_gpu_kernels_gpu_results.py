"""lneps.book.gpu_kernels.gpu_results and the stored grades: the file is complete for the grid,
carries its provenance, and every finding the chapter states holds on it, checked against an
independent computation where there is one (float16's overflow threshold from its bit layout;
llama mode's output from its format plan emulated in NumPy; the verdicts' pattern across modes).
Runs without the gpu extra."""

import doctest
import math

import numpy as np
import pytest

from lneps.book.gpu_kernels import gpu_results as GR
from lneps.testing import assert_close

DATA = GR.load()
RECORDS = DATA["records"]
FINDINGS = DATA["findings"]
F16_MAX = (2 - 2.0**-10) * 2.0**15      # float16's largest number, from its layout
F16_OVERFLOW = F16_MAX + 2.0**4         # the midpoint to the next binade's first number: 65520


def _records(**kw):
    return [r for r in RECORDS if all(r[k] == v for k, v in kw.items())]


def test_the_file_covers_the_grid_with_provenance():
    fields = ("kernel", "dtype", "family", "d", "rows", "direction")
    keys = {tuple(r[k] for k in fields) for r in RECORDS}
    grid = {tuple(c[k] for k in fields) for c in GR.grid()}
    assert keys == grid
    prov = DATA["provenance"]
    assert prov["versions"]["triton"] == "3.9.0" and prov["versions"]["liger_kernel"] == "0.8.5"
    assert prov["versions"]["torch"].startswith("2.13.0")
    assert prov["env"]["TRITON_INTERPRET"] == "1"
    assert "no GPU" in prov["device"]
    for r in RECORDS:
        assert 0 <= r["correct"] <= r["n"] and 0 <= r["beyond"] <= r["n"]
        assert r["passed"] or r["message"]


def test_correct_plans_pass_everywhere():
    for kernel in ("liger_layer_norm", "liger_rms_norm_gemma", "two_pass", "torch_rms_norm"):
        rs = _records(kernel=kernel, direction="forward")
        assert rs and all(r["passed"] for r in rs), kernel
    # float32 output: every kernel passes forward, llama and none included (no 16-bit step)
    assert all(r["passed"] for r in _records(dtype="float32", direction="forward"))


def test_llama_fails_in_float16_by_rounding_before_gamma():
    rs = _records(kernel="liger_rms_norm_llama", dtype="float16", direction="forward")
    assert all(not r["passed"] for r in rs)
    worst = max(r["max_scaled"] for r in rs)
    # two roundings of a product: beyond one half ulp, within one and a half (no defect's size)
    assert 0.5 < worst < 1.5
    f = FINDINGS["llama"]
    assert f["llama"]["max_scaled"] > f["bound_at_worst"]
    assert f["liger_rms_norm_gemma"]["passed"] and f["torch_rms_norm"]["passed"]
    # llama's plan in NumPy reproduces the stored output, bit for bit
    x = np.array([f["x"]], np.float16)
    g = np.array(f["gamma"], np.float16)
    x32 = x.astype(np.float32)
    rstd = np.float32(1) / np.sqrt(np.mean(x32 * x32, axis=1, keepdims=True) + np.float32(1e-6))
    y = (x32 * rstd).astype(np.float16) * g
    assert float(y[tuple(f["llama"]["at"])]) == f["llama"]["actual"]
    with pytest.raises(AssertionError):
        assert_close(y, op="rms_norm", x=x, gamma=g, eps=1e-6)
    # the smallest: no shorter row fails (the search went by d, shortest first)
    assert f["d"] >= 1 and (f["d"] & (f["d"] - 1)) == 0


def test_none_overflows_where_float16_squares_pass_its_largest_number():
    for f in FINDINGS["none"]:
        d, c, below = f["d"], f["c"], f["largest_passing"]
        assert np.float16(c) == c
        assert np.nextafter(np.float16(below), np.float16(np.inf)) == np.float16(c)
        assert d * c * c >= F16_OVERFLOW > d * below * below, f   # the sum rounds to infinity
        assert f["output"] == 0.0 and f["torch_passes"] and f["torch_output"] == 1.0
    rs = _records(kernel="liger_rms_norm_none", dtype="float16", direction="forward",
                  family="mean_1000")
    assert all(not r["passed"] and r["rows_beyond"] == r["rows"] for r in rs)
    # an output of 0 for about gamma = 1: 2^11 ulp of 1 in float16
    assert max(r["max_scaled"] for r in rs) == pytest.approx(2048, abs=0.01)


def test_16bit_partials_fail_and_float32_partials_pass():
    f = FINDINGS["partials"]
    assert not math.isnan(f["partials_16bit"]["max_scaled"])
    assert f["float32_partials"]["passed"]
    assert f["partials_16bit"]["max_scaled"] > f["float32_partials"]["max_scaled"]
    bad = _records(kernel="two_pass_16bit_partials", direction="backward", output="gamma")
    good = _records(kernel="two_pass", dtype="float16", direction="backward", output="gamma")
    assert any(not r["passed"] for r in bad) and all(r["passed"] for r in good)
    # dx does not depend on the partials: the two variants' dx are the same bytes
    dx = {(r["kernel"], r["family"], r["d"]): r["sha256"] for r in RECORDS
          if r["output"] == "x" and r["dtype"] == "float16" and r["kernel"].startswith("two_pass")}
    for (k, fam, d), h in dx.items():
        if k == "two_pass":
            assert dx["two_pass_16bit_partials", fam, d] == h


def test_statistics_saved_in_16_bits_cost_the_backward_pass():
    saved = FINDINGS["saved_statistics"]
    assert saved["pallas_layer_norm"] == ["float16", "float16"]
    assert saved["torch_layer_norm"] == ["float16", "float16"]
    for kernel in ("pallas_layer_norm", "torch_layer_norm"):
        rs = _records(kernel=kernel, dtype="float16", direction="backward", output="x")
        assert any(not r["passed"] for r in rs), kernel
    liger = _records(kernel="liger_layer_norm", direction="backward", output="x")
    assert liger and all(r["passed"] for r in liger)


def test_worst_by_kernel():
    w = GR.worst_by_kernel(RECORDS, "forward")
    assert w["liger_rms_norm_gemma", "float16"][1] and not w["liger_rms_norm_llama", "float16"][1]
    cases = len(GR.GRID_FORWARD["d"]) * len(GR.GRID_FORWARD["families"])
    assert w["pallas_layer_norm", "bfloat16"][2] == cases


def test_a_file_of_another_schema_is_refused(tmp_path):
    p = tmp_path / "grades.json"
    p.write_text('{"schema": 0, "records": []}')
    with pytest.raises(ValueError, match="schema"):
        GR.load(p)


def test_docstring_examples_run():
    assert doctest.testmod(GR).failed == 0


def test_the_robustness_rerun_covers_its_grid_and_moves_no_verdict_of_a_correct_kernel():
    rob = GR.load_robustness()
    fields = ("kernel", "dtype", "family", "d", "rows", "direction", "effect")
    assert {tuple(r[k] for k in fields) for r in rob["records"]} == {
        tuple(c[k] for k in fields) for c in GR.robustness_grid()}
    assert rob["provenance"]["versions"] == DATA["provenance"]["versions"]
    for r in rob["records"]:
        assert 0 <= r["changed"] <= 1
        if r["kernel"] in ("liger_layer_norm", "liger_rms_norm_gemma", "two_pass"):
            assert r["passed"] and r["passed_moved"], r
    # the effects are real: some outputs move under each
    for effect in ("warp_order_sum", "rsqrt_off_by_2"):
        assert max(r["changed"] for r in rob["records"] if r["effect"] == effect) > 0.01
    # this book's kernel calls no rsqrt: the perturbed rsqrt leaves it alone
    assert all(r["changed"] == 0 for r in rob["records"]
               if r["kernel"] == "two_pass" and r["effect"] == "rsqrt_off_by_2")
