"""The chapter 'GPU kernels without a GPU': it reads only the stored grades (no torch, Triton or
JAX in its code), sits before the training chapter, says that no GPU has run its cases, and the
numbers its prose states are the stored data's, recomputed here from the records."""

import ast

import pytest

from lneps.book.gpu_kernels import gpu_results as GR
from notebooks import ROOT, glued, markdown, read

NB = "gpu_kernels.ipynb"
DATA = GR.load()
G = glued(NB)


def _records(**kw):
    return [r for r in DATA["records"] if all(r[k] == v for k, v in kw.items())]


def test_it_reads_stored_grades_and_runs_no_kernel():
    code = "\n".join(c.source for c in read(NB).cells if c.cell_type == "code")
    imported = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module)
    assert not imported & {"torch", "triton", "jax", "liger_kernel"}, imported
    assert not any(m and ("gpu_runs" in m or "gpu_findings" in m) for m in imported)


def test_it_sits_before_training_in_part_three():
    toc = (ROOT / "_toc.yml").read_text()
    part = toc.split('"Part III. In the wild"')[1].split("- caption")[0]
    files = [line.split("file:")[1].strip() for line in part.splitlines() if "file:" in line]
    assert files.index("book/gpu_kernels") == files.index("book/training") - 1


def test_it_says_no_gpu_has_run_them():
    text = markdown(NB)
    assert "No GPU has run these cases yet" in text
    assert "not been run on a GPU yet" in text


def test_versions_and_grid_are_the_stored_ones():
    v = DATA["provenance"]["versions"]
    assert (G["v_triton"], G["v_liger"], G["v_jax"], G["v_torch"]) == (
        v["triton"], v["liger_kernel"], v["jax"], v["torch"])
    assert G["n_records"] == len(DATA["records"])
    assert G["rows_fwd"] == GR.GRID_FORWARD["rows"]


def test_the_llama_numbers():
    f = DATA["findings"]["llama"]
    assert G["llama_d"] == f["d"] and G["llama_scaled"] == pytest.approx(f["llama"]["max_scaled"])
    rs = _records(kernel="liger_rms_norm_llama", dtype="float16", direction="forward")
    assert G["llama_worst"] == pytest.approx(max(r["max_scaled"] for r in rs))
    assert G["llama_rows_pct"] == pytest.approx(100 * sum(r["rows_beyond"] for r in rs)
                                               / sum(r["rows"] for r in rs))
    assert G["emul_scaled"] == pytest.approx(f["llama"]["max_scaled"])


def test_the_none_and_backward_numbers():
    nn = {f["d"]: f for f in DATA["findings"]["none"]}
    assert G["none_c1"] == nn[1]["c"] == 256.0          # 256^2 = 65536 rounds past float16's range
    assert G["f16_max"] == 65504.0
    rs = _records(kernel="liger_rms_norm_none", dtype="float16", direction="forward")
    assert G["none_failed"] == sum(not r["passed"] for r in rs) and G["none_cases"] == len(rs)
    pt = DATA["findings"]["partials"]
    assert G["part_rows"] == pt["rows"]
    assert G["part_scaled"] == pytest.approx(pt["partials_16bit"]["max_scaled"])
    assert G["part_fixed"] < G["part_scaled"]
    failing = [r for r in DATA["records"] if not r["passed"]]
    combos = {(r["kernel"], r["dtype"], r["direction"]) for r in failing}
    assert G["n_failing"] == len(combos)


def test_the_robustness_numbers():
    rob = GR.load_robustness()["records"]
    assert G["rob_cases"] == len(rob)
    assert G["rob_flips"] == sum(r["passed"] != r["passed_moved"] for r in rob)
    assert G["rob_changed_max"] == pytest.approx(100 * max(r["changed"] for r in rob))


def test_the_saved_statistics_numbers():
    for kernel, key in (("pallas_layer_norm", "pal"), ("torch_layer_norm", "tor")):
        rs = _records(kernel=kernel, dtype="float16", direction="backward", output="x")
        failing = [r for r in rs if not r["passed"]]
        assert G[f"{key}_dx_failed"] == len(failing) > 0 and G["dx_cases"] == len(rs)
        assert G[f"{key}_dx_worst"] == pytest.approx(max(r["max_scaled"] for r in failing))
        assert all(r["family"] == "normal" for r in failing)   # the prose: the standard normal rows
    liger = _records(kernel="liger_layer_norm", dtype="float16", direction="backward", output="x")
    assert all(r["passed"] for r in liger)
