"""The stored framework measurements (src/lneps/book/data/frameworks/*.json, incidents.toml), the
summaries lneps.book.frameworks computes from them, and the chapter's numbers. Always runs: needs
no framework."""

import copy
import math
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import lneps
from lneps.book import frameworks as FW
from lneps.book import incidents as INC
from notebooks import glued

F16, BF16, F32 = np.float16, ml_dtypes.bfloat16, np.float32
ROOT = Path(__file__).resolve().parents[2]
# The measuring tool's modules (tools/): where it writes, and spread.json's reader.
sys.path.insert(0, str(ROOT / "tools"))
import framework_runs  # noqa: E402
import framework_spread  # noqa: E402
DATA = FW.load_all()


def test_import_lneps_loads_no_framework():
    code = ("import sys, lneps, lneps.book.frameworks, lneps.book.incidents; "
            "bad = [m for m in ('torch', 'jax', 'flax', 'onnx', 'onnxruntime') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("fw", FW.FRAMEWORKS)
def test_every_file_has_the_full_grid_and_its_provenance(fw):
    d = DATA[fw]
    assert d["framework"] == fw and d["date"].startswith("20")
    assert d["platform"]["cpu"] and d["cpu_flags"] and d["versions"]["numpy"] == np.__version__
    assert d["inputs"]["ds"] == list(FW.DS) and d["inputs"]["eps"] == list(FW.EPS_VALUES)
    families = len(lneps.families.SURVEYED) + len(FW.HAND_ROWS)
    ops = {r["op"] for r in d["results"]}
    pairs = {(r["op"], r["dtype"]) for r in d["results"]}
    assert len(pairs) + len(d["unsupported"]) == len(ops) * len(FW.DTYPES)
    assert len(d["results"]) == len(pairs) * families * len(FW.DS) * len(FW.EPS_VALUES)
    for r in d["results"]:
        rows = 1 if lneps.families.get(r["family"]).kind == "hand" else max(FW.ELEMENTS // r["d"], 1)
        assert r["n"] == rows * r["d"]


def test_versions_are_the_pinned_ones():
    pins = dict(line.split("==") for line in open(ROOT / "requirements-frameworks.txt")
                if "==" in line and not line.startswith("#"))
    assert DATA["torch"]["versions"]["torch"] == pins["torch"].strip() + "+cpu"
    assert DATA["flax"]["versions"]["flax"] == pins["flax"].strip()
    assert DATA["flax"]["versions"]["jax"] == pins["jax"].strip()
    assert DATA["onnxruntime"]["versions"]["onnxruntime"] == pins["onnxruntime"].strip()
    assert DATA["onnx_reference"]["versions"]["onnx"] == pins["onnx"].strip()


def test_validate_names_the_broken_field():
    bad = copy.deepcopy(DATA["torch"])
    bad["results"][3]["correct"] = bad["results"][3]["n"] + 1
    with pytest.raises(ValueError, match="results\\[3\\]"):
        FW.validate(bad)
    bad = copy.deepcopy(DATA["torch"])
    del bad["cpu_flags"]
    with pytest.raises(ValueError, match="cpu_flags"):
        FW.validate(bad)
    bad = copy.deepcopy(DATA["torch"])
    bad["results"][0]["dtype"] = "float8"
    with pytest.raises(ValueError, match="dtype"):
        FW.validate(bad)
    with pytest.raises(ValueError, match="framework must be one of"):
        FW.load("tensorflow")


def test_dump_load_round_trip_keeps_infinities(tmp_path):
    d = copy.deepcopy(DATA["flax"])
    FW.dump(d, tmp_path / "flax.json")
    assert '"inf"' in (tmp_path / "flax.json").read_text()
    back = FW.load("flax", tmp_path)
    assert back["results"] == d["results"]
    assert any(math.isinf(r["worst_ulp"]) for r in back["results"])


def test_error_summary_counts():
    ref = np.array([[1.0, 0.0, -0.5, 2.0]], dtype=F16)
    y = ref.copy()
    y[0, 0] = np.nextafter(F16(1.0), F16(2.0))  # one ulp up
    y[0, 1] = F16(2.0**-20)                       # exact value 0, answer not
    y[0, 3] = F16(np.nan)
    s = FW.error_summary(y, ref, "float16")
    assert s["n"] == 4 and s["correct"] == 1 and s["nan"] == 1 and s["inf"] == 0
    assert s["zero_ref"] == 1 and s["zero_ref_wrong"] == 1 and s["worst_abs_at_zero"] == 2.0**-20
    assert s["within_1ulp"] == 2 and math.isinf(s["worst_ulp"])
    assert s["worst_abs"] == float(P_ulp(1.0))
    assert math.isinf(s["worst_scaled"])  # a NaN where the answer is finite
    s = FW.error_summary(y[:, :3], ref[:, :3], "float16")
    assert s["worst_scaled"] == 1.0       # one ulp of 1 at 1; 2**-20 at 0 is 2**-10 ulp of 1
    with pytest.raises(ValueError, match="shape"):
        FW.error_summary(y[:, :2], ref, "float16")


def P_ulp(x):
    return lneps.book.finite_precision.ulp(x, F16)


def test_measurement_rows_are_reproducible_and_in_format():
    a = FW.measurement_rows("bfloat16", 100)
    b = FW.measurement_rows("bfloat16", 100)
    assert list(a) == list(lneps.families.SURVEYED) + list(FW.HAND_ROWS)
    assert list(FW.HAND_ROWS) == list(lneps.families.names("hand"))  # one registry of names
    assert all(np.array_equal(a[k], b[k]) for k in a) and a["normal"].dtype == BF16
    assert a["normal"].shape == (FW.ELEMENTS // 100, 100)
    # the same draws in every format: the float16 rows are within one float16 ulp of the float32 ones
    r32, r16 = FW.measurement_rows("float32", 8)["sd_300"], FW.measurement_rows("float16", 8)["sd_300"]
    gap = np.abs(r32.astype(np.float64) - r16.astype(np.float64))
    assert np.all(gap <= lneps.book.finite_precision.ulp(r32, F16)) and not np.array_equal(r32, r16.astype(F32))
    assert np.all(FW.hand_row("65504_and_65472", 5) == [65504, 65472, 65504, 65472, 65504])
    with pytest.raises(ValueError, match="name must be one of"):
        FW.hand_row("constant 7", 4)


def test_compare_finds_a_moved_row():
    old = DATA["onnxruntime"]
    new = copy.deepcopy(old)
    assert FW.compare(new, old)["identical"] == len(old["results"])
    r = new["results"][10]
    r["sha256"], r["correct"] = "0" * 64, r["correct"] - 5
    c = FW.compare(new, old, share_tol=0.0)
    assert c["identical"] == len(old["results"]) - 1 and [e["key"][3] for e in c["differ"]] == [r["d"]]
    assert FW.compare(new, old, share_tol=1.0)["differ"] == []


# --- the claims the chapter confirms or refutes, read from the data --------------------------


def test_torch_fp16_constant_60000_is_the_fma_residue():
    p = DATA["torch"]["probes"]["layer_norm | float16 | constant_60000 | 1e-12"]
    assert p["output"] == [-2048.0] * 8 and p["reference"] == [0.0] * 8
    rstd = F32(1) / np.sqrt(F32(1e-12))
    fma = F32(np.float64(F32(60000)) * np.float64(rstd) - np.float64(rstd * F32(60000)))
    assert p["output"][0] == float(fma)
    p5 = DATA["torch"]["probes"]["layer_norm | float16 | constant_60000 | 1e-05"]
    rstd5 = F32(1) / np.sqrt(F32(1e-5))
    assert p5["output"][0] == float(F16(np.float64(F32(60000)) * np.float64(rstd5) - np.float64(rstd5 * F32(60000))))


def test_first_measurement_claims():
    t = DATA["torch"]
    fam = FW.aggregate(t, op="layer_norm", dtype="float16", family="mean_6e4")
    assert 0.85 < 1 - fam["share_correct"] < 0.95
    assert FW.aggregate(t, op="layer_norm", dtype="float16")["worst_abs"] == 2048.0
    assert FW.aggregate(t, op="layer_norm", dtype="bfloat16", family="mean_6e4")["worst_abs"] == 0.875
    f32 = FW.aggregate(t, op="layer_norm", dtype="float32", family="mean_1000")
    assert 1 - f32["share_correct"] > 0.999
    assert 1 - FW.aggregate(t, op="layer_norm", dtype="float32", family="normal")["share_correct"] < 0.6
    ref16 = FW.aggregate(DATA["onnx_reference"], op="layer_norm", dtype="float16", family="mean_1000")
    assert ref16["nan"] > ref16["n"] / 2
    ort = DATA["onnxruntime"]
    assert FW.aggregate(ort, op="layer_norm", dtype="float16", family="stress")["worst_ulp"] < 676
    assert {(u["op"], u["dtype"]) for u in ort["unsupported"]} == {("layer_norm", "bfloat16"), ("rms_norm", "bfloat16")}


def test_eps_is_kept_in_float32_and_rmsnorm_default():
    for fw in ("torch", "flax", "onnxruntime"):
        for key, e in DATA[fw]["eps_handling"].items():
            if "error" in e:
                continue
            if key.endswith("| float16 | 1e-05") or key.endswith("| bfloat16 | 1e-05"):
                assert e["best"] == "kept (float32)" and e["matches"]["kept (float32)"]["rows_equal"] == e["rows"], key
            if "zeros_row" in e:
                assert e["zeros_row"] == [0.0] * 8, key
    eh = DATA["torch"]["eps_handling"]
    pairs = (("float16", "float32"), ("bfloat16", "float32"), ("float32", "float32"), ("float64", "float64"))
    for dtype, best in pairs:
        assert eh[f"torch.nn.RMSNorm(eps=None) | {dtype}"]["best"] == f"finfo({best}).eps"


def test_incidents_file():
    incs = INC.load()
    assert len(incs) == 10 and len({i["key"] for i in incs}) == 10
    bib = (ROOT / "references.bib").read_text()
    for inc in incs:
        assert "{" + inc["cite"] + "," in bib.replace("@misc{", "{"), inc["cite"]
    q = INC.by_key()["pytorch-66707"]["quoted"]
    assert q["greatest_difference"] == float(lneps.book.finite_precision.ulp(1.0, F16))


def test_chapter_numbers_match_the_data():
    g = glued("frameworks.ipynb")
    t = DATA["torch"]
    assert g["c60k_out"] == -2048.0 and g["fma_out"] == -2048.0 and g["cbf_out"] == -0.875
    assert g["nn_rel"] == pytest.approx(1 - math.sqrt((2e-4 + 1e-6) / (2e-4 + 1e-4)))
    assert g["ap_sum"] == pytest.approx(9e-6 / (4e-4 + 1e-6)) and g["ap_rsqrt"] == pytest.approx(0.011, abs=5e-4)
    assert g["ann0"] == pytest.approx(0.75 / (math.sqrt(0.25) + 1e-6)) and g["ln0"] == pytest.approx(
        0.75 / math.sqrt(0.1875 + 1e-5)
    )
    assert g["rms_none_float16"] == "finfo(float32).eps"
    assert g["ref16_nan"] == sum(
        a["nan"] for a in FW.by_family(DATA["onnx_reference"], "layer_norm", "float16").values()
    )
    a = glued("measurement_tables.ipynb")
    fam = FW.aggregate(t, op="layer_norm", dtype="float16", family="mean_6e4")
    assert a["t16_6e4_wrong"] == pytest.approx(1 - fam["correct"] / fam["n"])
    assert a["tb_abs"] == 0.875 and a["ref16_nan"] == g["ref16_nan"]


def test_variance_read_back_from_the_outputs():
    iv = {fw: d["implied_variance"] for fw, d in DATA.items()}
    worst = lambda fw, op: max(v["max_rel_error"] for v in iv[fw].values() if v["op"] == op)
    assert all(v["rows"] >= 40 for d in iv.values() for v in d.values())
    assert worst("onnxruntime", "layer_norm") < 1e-5  # not a float32 one-pass variance
    assert worst("flax", "layer_norm_two_pass") < 1e-5
    assert worst("torch", "layer_norm") < 1e-3  # Welford in float32
    assert worst("flax", "layer_norm") > 0.5  # E[x^2] - E[x]^2 at mean 6e4


def test_compare_tells_a_moved_reference_from_a_moved_framework():
    old = DATA["torch"]
    new = copy.deepcopy(old)
    new["results"][0]["correct"] -= 1  # same output digest, different summary
    c = FW.compare(new, old)
    assert c["identical"] == len(old["results"]) and c["differ"] == []
    assert [e["key"] for e in c["reference_moved"]] == [
        tuple(new["results"][0][k] for k in ("op", "dtype", "family", "d", "eps"))
    ]


def test_stored_data_was_measured_against_the_correctly_rounded_reference():
    assert all(d["reference"]["correctly_rounded"] for d in DATA.values())
    eh = DATA["torch"]["eps_handling"]
    for dtype in ("float16", "bfloat16", "float32", "float64"):
        e = eh[f"torch.nn.RMSNorm(eps=None) | {dtype}"]
        assert e["lneps_eps_none"]["rows_equal"] == e["matches"][e["best"]]["rows_equal"]


def test_worst_scaled_is_lneps_testing_scaled_error():
    """With the input rows, error_summary's worst_scaled is lneps.testing.compare's
    max_ulp_scaled; the stored value for a hand-made row of d = 8 is recomputed from its probe,
    which holds that very row's output (torch's: its CPU kernel treats each row alike whatever
    the batch; Flax's jit compiles per shape, and its probe, a batch of one row, may differ)."""
    rng = np.random.default_rng(3)
    x = (rng.normal(size=(4, 16)) + 300).astype(F16)
    y = lneps.layer_norm(x, eps=1e-5, compute_dtype=F16)
    ref = lneps.layer_norm(x, eps=1e-5)
    s = FW.error_summary(y, ref, "float16", x=x, op="layer_norm", eps=1e-5)
    assert s["worst_scaled"] == lneps.testing.compare(y, x=x, eps=1e-5).max_ulp_scaled > 1
    for fw, d in [("torch", DATA["torch"])]:
        for key, p in d["probes"].items():
            if p["op"] == "group_norm":
                continue
            x = np.array([p["input"]]).astype({"float16": F16, "bfloat16": BF16, "float32": F32}[p["dtype"]])
            y = np.array([p["output"]]).astype(x.dtype)
            row = FW.find(d, op=p["op"], dtype=p["dtype"], family=p["row"], d=8, eps=p["eps"])
            op = "rms_norm" if p["op"] == "rms_norm" else "layer_norm"
            assert len(row) == 1, key
            assert row[0]["worst_scaled"] == lneps.testing.compare(y, x=x, op=op, eps=p["eps"]).max_ulp_scaled, (
                fw,
                key,
            )


def test_summary_rows_and_the_eps_rule():
    rows = FW.summary_rows(DATA)
    keys = [(r["framework"], r["op"], r["dtype"], r["family"]) for r in rows]
    assert len(keys) == len(set(keys)) and {r["family"] for r in rows} == set(FW.SUMMARY_FAMILIES)
    for r in rows[:40]:
        agg = FW.aggregate(DATA[r["framework"]], op=r["op"], dtype=r["dtype"], family=r["family"])
        assert r["worst_scaled"] == agg["worst_scaled"] and r["n"] == agg["n"]
    eh = DATA["torch"]["eps_handling"]
    # float32 and float64: only part of the rows reproduced, and no other candidate reproduces any
    for dtype, eps in (("float32", "float32"), ("float64", "float64")):
        e = eh[f"torch.nn.RMSNorm(eps=None) | {dtype}"]
        assert 0 < e["matches"][f"finfo({eps}).eps"]["rows_equal"] < e["rows"]
        assert FW.eps_verdict(e) == f"finfo({eps}).eps"
    assert all(FW.eps_verdict(e) is None for k, e in DATA["onnx_reference"]["eps_handling"].items())
    assert FW.eps_verdict({"rows": 4, "matches": {"a": {"rows_equal": 2}, "b": {"rows_equal": 1}}}) is None


def test_the_measuring_tool_writes_the_files_the_book_reads():
    # tools/measure_frameworks.py rewrites this checkout's package data; after the package
    # moved into lneps/book/ it once wrote to the old folder, which nothing reads.
    assert framework_runs.STORED == FW.DATA_DIR.resolve()


# --- spread.json: how far each count moves across arithmetic profiles --------------------------

ISSUE_ROW = ("layer_norm", "float32", "normal", 768, 1e-12)  # the row CI failed on, on an AVX2 machine
FLAX_OPS = ("layer_norm", "layer_norm_two_pass", "rms_norm")


def _spread():
    return framework_spread, framework_spread.load_spread()


def test_spread_has_its_provenance_and_every_framework():
    tool, sp = _spread()
    assert sp["command"].startswith("python tools/measure_frameworks.py --spread") and sp["date"].startswith("20")
    assert sp["machine"]["cpu"] and sp["machine"]["cpu_flags"] and sp["reference"]["correctly_rounded"]
    assert list(sp["frameworks"]) == list(FW.FRAMEWORKS)
    for fw, sec in sp["frameworks"].items():
        stored = DATA[fw]
        # the versions measured are the stored files' (and so the pinned ones)
        assert sec["versions"] == {
            k: v for k, v in stored["versions"].items() if k not in ("cpu_capability", "numpy", "ml_dtypes", "python")
        }, fw
        assert all({"name", "env", "cpu", "cpu_flags", "effective"} <= set(p) for p in sec["profiles"]), fw
        assert len({p["name"] for p in sec["profiles"]}) == len(sec["profiles"]), fw
        assert sec["reference_moved"] == [], fw  # counts made against the same reference as the stored ones


def test_spread_includes_the_stored_measurement_row_by_row():
    """profiles[0] is the stored AVX-512 measurement: its outputs and counts are the stored
    file's, so every tolerance derived from the spread covers the machine that made it."""
    tool, sp = _spread()
    for fw, sec in sp["frameworks"].items():
        stored = DATA[fw]
        p0 = sec["profiles"][0]
        assert p0["name"] == "stored" and p0["cpu_flags"] == stored["cpu_flags"] and p0["date"] == stored["date"]
        rows = {(r["op"], r["dtype"], r["family"], r["d"], r["eps"]): r for r in sec["rows"]}
        assert len(rows) == len(sec["rows"]) == len(stored["results"]), fw
        for r in stored["results"]:
            s = rows[(r["op"], r["dtype"], r["family"], r["d"], r["eps"])]
            out = s["outputs"][s["by_profile"][0]]
            assert out["sha256"] == r["sha256"][: tool.DIGEST_CHARS] and s["n"] == r["n"]
            assert {c: out[c] for c in s["spread"]} == {c: r[c] for c in tool.SPREAD_COUNTS if c in r}


def test_spread_covers_the_profiles_ci_and_the_issue_run():
    """The profiles tests/book/test_frameworks_measured.py must pass under: torch's capability levels,
    XLA's instruction-set caps, `make portable`'s numpy level; and the issue's row moved."""
    tool, sp = _spread()
    envs = {fw: [p["env"] for p in sec["profiles"]] for fw, sec in sp["frameworks"].items()}
    assert {"ATEN_CPU_CAPABILITY": "avx2"} in envs["torch"] and {"ATEN_CPU_CAPABILITY": "default"} in envs["torch"]
    for isa in ("AVX2", "AVX", "SSE4_2"):
        assert {"XLA_FLAGS": f"--xla_cpu_max_isa={isa}"} in envs["flax"]
    v2 = tool.portable_env("x86-64-v2")
    assert all(v2 in e for e in envs.values())
    caps = {p["effective"].get("cpu_capability") for p in sp["frameworks"]["torch"]["profiles"]}
    assert {"AVX512", "AVX2", "DEFAULT"} <= caps
    row = next(
        r for r in sp["frameworks"]["flax"]["rows"] if (r["op"], r["dtype"], r["family"], r["d"], r["eps"]) == ISSUE_ROW
    )
    assert row["spread"]["correct"] >= 16909 - 15702  # stored (AVX-512) against AVX2, the issue's numbers


def test_spread_numbers_quoted_by_the_remeasuring_tests():
    """tests/book/test_frameworks_measured.py explains its tolerance with these numbers."""
    tool, sp = _spread()
    fl, tr = sp["frameworks"]["flax"], sp["frameworks"]["torch"]
    assert (tr["rows_with_outputs_differing"], fl["rows_with_outputs_differing"]) == (357, 305)
    assert all(sp["frameworks"][fw]["rows_with_outputs_differing"] == 0 for fw in ("onnxruntime", "onnx_reference"))
    assert {c for c in tool.held_out(tr, 2) if tool.held_out(tr, 2)[c][1]} == {"DEFAULT"}  # AVX2 = AVX-512 bit for bit
    issue = next(r for r in fl["rows"] if (r["op"], r["dtype"], r["family"], r["d"], r["eps"]) == ISSUE_ROW)
    # stored (AVX-512), AVX2, AVX, SSE4.2
    assert [o["correct"] for o in issue["outputs"]] == [16909, 15702, 14944, 17186]
    assert issue["spread"]["correct"] == 2242
    moved_inf = {
        (r["d"], r["spread"]["inf"]) for sec in sp["frameworks"].values() for r in sec["rows"] if r["spread"]["inf"]
    }
    assert moved_inf == {(100, 15188 - 10688), (768, 20033 - 9216)}
    assert not any(r["spread"]["nan"] for sec in sp["frameworks"].values() for r in sec["rows"])
    held = {k: tool.held_out(fl, k) for k in (1, 2, 3)}
    assert [held[k]["AVX512"][0] for k in (1, 2, 3)] == [66, 48, 41] and held[1]["AVX512"][1] == 222
    assert [held[k]["AVX2"][0] for k in (1, 2, 3)] == [30, 21, 17] and held[1]["AVX2"][1] == 186
    assert [held[k]["AVX"][0] for k in (1, 2, 3)] == [72, 40, 36] and held[1]["AVX"][1] == 208
    assert [held[k]["SSE4_2"][0] for k in (1, 2, 3)] == [79, 35, 23] and held[1]["SSE4_2"][1] == 171
    sse = next(p for p in fl["profiles"] if p["env"] == {"XLA_FLAGS": "--xla_cpu_max_isa=SSE4_2"})
    assert {(o, t) for o, t, _ in sse["unsupported"]} == {(op, "float16") for op in FLAX_OPS}
