"""The appendix "How the training runs are judged": the lab in full, the paired test, the
arithmetic floor, one comparison in full and the tables the training chapter summarizes, each
number recomputed from the stored runs with json and NumPy (the helpers of
tests/training_runs.py, which state how), and its place in the appendix."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import training_runs as T
from lneps.book.printing import sci
from notebooks import glued, markdown, read

NB = "how_the_training_runs_are_judged.ipynb"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def g():
    return glued(NB)


@pytest.fixture(scope="module")
def arrays():
    with np.load(T.DATA / "runs.npz") as z:
        return {k: z[k] for k in z.files}


def glued_table(key: str) -> str:
    """The Markdown of a table this page glued."""
    return T.glued_table(key, NB)


def test_it_is_in_the_appendix_after_the_tolerance():
    toc = (ROOT / "_toc.yml").read_text()
    part = toc.split('"Appendix"')[1]
    files = [line.split("file:")[1].strip() for line in part.splitlines() if "file:" in line]
    i = files.index("book/how_the_training_runs_are_judged")
    assert files[i - 1] == "book/how_the_tolerance_is_derived"


def test_the_chapter_links_here():
    chapter = markdown("training.ipynb")
    assert "{doc}`how_the_training_runs_are_judged`" in chapter
    text = markdown(NB)
    for label in ("judged-autocast", "judged-sweep", "judged-where", "judged-probe",
                  "judged-comparison"):
        assert f"({label})=" in text and f"<{label}>`" in chapter, label


def test_the_corpus_the_floor_the_recipe_and_the_machines(g):
    c = T.CORPUS
    assert (g["vocab"], g["corpus_len"], g["context"]) == (c["vocab"], c["length"], c["context"])
    assert g["floor"] == c["loss_floor_nats"] and g["held_out"] == pytest.approx(T.FLOOR, rel=1e-12)
    assert g["floor_offset"] == pytest.approx(T.FLOOR - c["loss_floor_nats"], rel=1e-9)
    assert g["unigram"] == c["unigram_entropy_nats"]
    assert g["gap"] == pytest.approx(c["unigram_entropy_nats"] - T.FLOOR, rel=1e-12)
    r = T.MANIFEST["recipe"]
    keys = ("steps", "batch", "lr", "warmup", "clip")
    assert [g[k] for k in keys] == [r[k] for k in keys]
    assert g["adam_eps"] == "10⁻⁸" and r["adam_eps"] == 1e-8
    assert g["n_runs"] == len(T.MANIFEST["runs"])
    first, last = T.MANIFEST["machines"][0], T.MANIFEST["machines"][-1]
    assert (g["cpu"], g["isa"]) == (first["cpu"]["model"], first["cpu_capability"])
    assert (g["cpu2"], g["isa2"]) == (last["cpu"]["model"], last["cpu_capability"])
    assert g["torch_version"] == first["torch"].split("+")[0] == last["torch"].split("+")[0]
    assert (g["thr_float16"], g["thr_bfloat16"]) == (1024.0, 128.0)
    assert g["margin"] == 0.002 and g["margin_ppl"] == pytest.approx(np.expm1(0.002), rel=1e-12)
    assert g["alpha"] == 0.05


def test_the_model_typed_in_the_prose_is_the_labs(g):
    tree = ast.parse((ROOT / "src/lneps/book/training/model.py").read_text(encoding="utf-8"))
    spec = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelSpec")
    defaults = {s.target.id: ast.literal_eval(s.value) for s in spec.body
                if isinstance(s, ast.AnnAssign) and s.value}
    assert (defaults["layers"], defaults["context"]) == (g["n_layers"], g["context"])
    text = " ".join(markdown(NB).split())
    assert f"width {defaults['width']}, {defaults['heads']} heads, an MLP of width {defaults['mlp']}" in text


def test_the_comparison_shown_in_full(arrays):
    a = T.ids(placement="pre", init="small", eps=0.0)
    b = T.ids(placement="pre", init="small", eps=1e-6)
    t = T.paired(arrays, a, b)
    cell = next(c for c in read(NB).cells if c.get("id") == "tj-compare")
    assert cell.source.count("1e-6") == 3 and "small" in cell.source  # exercise 1 edits it
    table = "".join(next(o["data"]["text/html"] for o in cell["outputs"] if "data" in o))
    assert "<td>mean, 95 % interval</td>" in table and f"<td>{T.interval(t)}</td>" in table
    assert "<td>outcome</td><td></td><td></td><td>effect</td>" in table
    assert "ε = 10⁻⁶ (B) against ε = 0 (A)" in table and "<th>draw</th>" in table
    assert t[3] == 10 and t[1] > 0
    for ra, rb in zip(a, b):
        assert T.signed(T.final(arrays, rb) - T.final(arrays, ra)) in table


def _floor(arrays, fp32_only=False) -> float:
    """The largest range, over the stored profiles and the grid's own run, of a measured
    configuration's final held-out loss."""
    with np.load(T.DATA / "spread.npz") as z:
        worst = 0.0
        for rid in T.SPREAD["configs"]:
            if fp32_only and "-fp32-" not in rid:
                continue
            vals = [float(z[f"{p}/{rid}:eval_loss"][-1]) for p in T.SPREAD["profiles"]] + [
                float(arrays[f"{rid}:eval_loss"][-1])
            ]
            worst = max(worst, max(vals) - min(vals))
    return worst


def test_the_arithmetic_floor(g, arrays):
    assert g["machine_final"] == sci(_floor(arrays), 1)
    assert g["machine_final_fp32"] == sci(_floor(arrays, True), 1)
    assert g["n_profiles"] == len(T.SPREAD["profiles"]) == 6
    # the table: the native one-thread profile reproduces every stored run bit for bit
    with np.load(T.DATA / "spread.npz") as z:
        for rid in T.SPREAD["configs"]:
            for part in ("loss", "grad_norm", "eval_loss"):
                assert np.array_equal(
                    z[f"native-1t/{rid}:{part}"], arrays[f"{rid}:{part}"], equal_nan=True
                ), (rid, part)
    table = glued_table("floor_table")
    assert table.count("native-1t") == len(T.SPREAD["configs"]) and sci(_floor(arrays), 1) in table


def test_the_sweep_table(g, arrays):
    table = glued_table("sweep_table")
    for e in (1e-6, 1e-5):
        t = T.paired(arrays, T.ids(placement="pre", init="normal", eps=0.0),
                     T.ids(placement="pre", init="normal", eps=e))
        assert T.interval(t) in table and t[3] >= 10
        assert -0.002 < t[1] and t[2] < 0.002
    assert g["sweep_n"] == 21 and "draws)" in table


def test_the_where_table(arrays):
    table = glued_table("where_table")
    for lr in (1e-2, 3e-2):
        pre = T.ids(placement="pre", init="normal", eps=1e-5, lr=lr)
        none = T.ids(placement="none", init="normal", eps=None, lr=lr)
        assert T.interval(T.paired(arrays, pre, none), 3) in table, lr


def test_the_probe_table():
    assert glued_table("probe_table").count("\n| ") == 1 + 23


def test_the_grid_and_autocast_tables():
    grid = glued_table("grid_table")
    assert "draws each" in grid and grid.count("\n| ") == 1 + len(T.MANIFEST["slices"])
    assert glued_table("autocast_table").count("\n| ") >= 2


def test_the_float16_kernel(g, arrays):
    # recomputed from the stored files: deaths, and each paired difference of the held-out loss
    # after 150 steps (index 3 of the held-out losses: after 0, 50, 100, 150 steps)
    def at150(arrays, rid):
        if T.MANIFEST["runs"][rid]["stopped_at"] is not None:
            return float("inf")
        return float(arrays[f"{rid}:eval_loss"][3]) - T.FLOOR

    table = glued_table("half_table")
    stop = T.MANIFEST["recipe"]["stop_after_nonfinite"]
    f = {(i, e): T.ids(placement="pre", init=i, eps=e, precision="fp16_var16", steps=150)
         for i, e in (("small", 1e-12), ("small", 1e-8), ("small", 1e-6), ("small", 1e-5),
                      ("normal", 1e-12))}
    assert all(len(v) == 10 for v in f.values()) and g["hk_draws"] == 10
    steps = {T.MANIFEST["runs"][r]["config"]["steps"] for v in f.values() for r in v}
    assert steps == {g["prefix_steps"]} == {150}
    # ten of ten dead: the exact lower end of the share dying, 0.025 ** (1/10) (Clopper-Pearson)
    assert g["hk_dead_lo"] == f"{0.025 ** 0.1:.2f}" == "0.69" and "0.69–1.00" in table
    for e in (1e-12, 1e-8):
        runs = [T.MANIFEST["runs"][r] for r in f["small", e]]
        assert all(r["first_nonfinite_step"] == 0 and r["nonfinite_steps"] == stop for r in runs)
        assert all(r["stopped_at"] is not None for r in runs)
    assert g["hk_skipped"] == stop and table.count("10 of 10") >= 2
    for e, key in ((1e-6, "hk_cost_1e6"), (1e-5, "hk_cost_1e5")):
        t = T.paired(arrays, T.ids(placement="pre", init="small", eps=e), f["small", e], at150)
        assert g[key] == T.interval(t) and t[3] == 10 and T.interval(t) in table
    t = T.paired(arrays, f["small", 1e-5], f["small", 1e-6], at150)
    assert g["hk_eps_cost"] == T.interval(t) and t[3] == 10
    ctrl = T.ids(placement="pre", init="normal", eps=1e-12, precision="fp16_eps16", steps=150)
    t = T.paired(arrays, ctrl, f["normal", 1e-12], at150)
    assert g["hk_normal"] == T.interval(t) and t[3] == 10
    assert g["f16_half_sub"] == sci(2.0**-25, 2) and float(np.float16(2.0**-25)) == 0.0
    assert (g["min_draws"], g["few_draws"]) == (10, 4)
