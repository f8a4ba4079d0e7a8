"""The chapter "Epsilon while a model trains": every number it prints, recomputed from the stored
runs, and every verdict it states, checked against the lab's.

The numbers are recomputed here from the stored files themselves, read with json and NumPy (a
run's final excess is its last held-out loss minus the chain's own held-out loss, computed here;
a comparison the mean of the per-seed differences with its t-interval, from quoted quantiles of
Student's t; the arithmetic floor the range over the stored profiles), not through
lneps.book.training.effects or .claims. The verdicts must be those of
lneps.book.training.claims, which tests/book/test_training_data.py holds to the data. The chapter
reads stored data only: no code cell imports torch or trains.
"""

from __future__ import annotations

import ast
import json

import numpy as np
import pytest

from lneps.book.printing import sci
from notebooks import glued, markdown, read
from training_runs import (CORPUS, DATA, FLOOR, MANIFEST, ROOT, final, ids,
                           interval, mean_loss, paired, stat)

NB = "training.ipynb"


@pytest.fixture(scope="module")
def g():
    return glued(NB)


@pytest.fixture(scope="module")
def arrays():
    with np.load(DATA / "runs.npz") as z:
        return {k: z[k] for k in z.files}


# --- where the chapter sits, and what it reads -----------------------------------------------------


def test_it_is_the_last_chapter_of_part_three():
    toc = (ROOT / "_toc.yml").read_text()
    part = toc.split('"Part III. In the wild"')[1].split("- caption")[0]
    files = [line.split("file:")[1].strip() for line in part.splitlines() if "file:" in line]
    assert files[-5:] == ["book/trained_network", "book/testing_a_kernel", "book/testing_a_backward_kernel",
                         "book/gpu_kernels", "book/training"]


def test_it_reads_stored_runs_and_never_trains():
    code = "\n".join(c.source for c in read(NB).cells if c.cell_type == "code")
    imported = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    assert not {m for m in imported if m.split(".")[0] == "torch"}, imported
    assert not imported & {"lneps.book.training.run", "lneps.book.training.model", "lneps.torch"}, (
        imported
    )
    assert "lneps.book.training.stored" in imported and "claims.all_claims()" in code


def test_the_verdicts_are_the_labs(g):
    from lneps.book.training import claims

    verdicts = {c.key: c.verdict for c in claims.all_claims()}
    assert {
        k.removeprefix("verdict_"): v for k, v in g.items() if k.startswith("verdict_")
    } == verdicts
    text = " ".join(markdown(NB).split())
    for key in verdicts:
        assert f"**Verdict: {{glue:text}}`verdict_{key}`" in text, key
    # what the prose says around them rests on these
    assert (g["verdict_sweet_spot"], g["verdict_pre_vs_post"]) == ("corrected",) * 2
    others = ("sigma_zero", "fp16_tiny_eps", "too_large", "norm_in_float32", "norm_vs_none",
              "finetune_mismatch")
    assert {g[f"verdict_{k}"] for k in others} == {"qualified"}


# --- the lab ---------------------------------------------------------------------------------------


def test_the_corpus_the_floor_and_the_recipe(g):
    assert (g["vocab"], g["corpus_len"], g["context"]) == (
        CORPUS["vocab"],
        CORPUS["length"],
        CORPUS["context"],
    )
    assert g["held_out"] == pytest.approx(FLOOR, rel=1e-12)
    assert g["gap"] == pytest.approx(CORPUS["unigram_entropy_nats"] - FLOOR, rel=1e-12)
    r = MANIFEST["recipe"]
    assert [g[k] for k in ("steps", "lr")] == [r[k] for k in ("steps", "lr")]
    assert g["adam_eps"] == "10⁻⁸" and r["adam_eps"] == 1e-8
    assert g["ft_steps"] == MANIFEST["finetune"]["steps"]
    assert (
        g["n_runs"]
        == len(MANIFEST["runs"])
        == len({r for s in MANIFEST["slices"].values() for r in s["runs"]})
    )
    first, last = MANIFEST["machines"][0], MANIFEST["machines"][-1]
    assert g["torch_version"] == first["torch"].split("+")[0] == last["torch"].split("+")[0]
    assert g["thr_float32"] == "8.4 × 10⁶"
    assert g["margin"] == 0.002


def test_the_model_typed_in_the_prose_is_the_labs(g):
    tree = ast.parse((ROOT / "src/lneps/book/training/model.py").read_text(encoding="utf-8"))
    spec = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelSpec")
    defaults = {
        s.target.id: ast.literal_eval(s.value)
        for s in spec.body
        if isinstance(s, ast.AnnAssign) and s.value
    }
    assert (defaults["layers"], defaults["context"], defaults["vocab"]) == (
        g["n_layers"],
        g["context"],
        g["vocab"],
    )
    text = " ".join(markdown(NB).split())
    assert f"width {defaults['width']}, {defaults['heads']} heads" in text


# --- the figures -----------------------------------------------------------------------------------


def test_the_loss_figure_shows_the_stored_losses(g, arrays):
    from lneps.book.training import figures as TF

    curves = TF.loss_curves()
    assert list(curves) == ["normal", "small"]
    assert list(curves["normal"]) == [
        "ε = 0",
        "ε = 1e-5",
        "ε = 1e-3",
        "ε = 1e-1",
        "ε = 1",
        "no norm",
    ]
    w = g["smooth"]
    for init in ("normal", "small"):
        sets = [ids(placement="pre", init=init, eps=e) for e in (0.0, 1e-5, 1e-3, 1e-1, 1.0)]
        sets.append(ids(placement="none", init=init, eps=None))
        common = set.intersection(
            *({MANIFEST["runs"][r]["config"]["seed"] for r in s} for s in sets)
        )
        rs = [r for r in sets[1] if MANIFEST["runs"][r]["config"]["seed"] in common]
        mean = np.mean([arrays[f"{r}:loss"].astype(np.float64) for r in rs], axis=0)
        expected = (
            np.array([mean[i - w + 1 : i + 1].mean() for i in range(w - 1, len(mean))]) - FLOOR
        )
        steps, got = curves[init]["ε = 1e-5"]
        assert steps[0] == w - 1 and np.allclose(got, expected, rtol=0, atol=1e-12)


def test_the_q_figure_and_what_the_prose_reads_off_it(g, arrays):
    from lneps.book.training import figures as TF

    panels = TF.q_over_eps(eps=1e-5)
    for init in ("normal", "small"):
        rs = ids(placement="pre", init=init, eps=1e-5)
        smallest = np.min([stat(arrays, r, "q_min").min(axis=1) for r in rs], axis=0) / 1e-5
        median = np.median([stat(arrays, r, "q_p50").min(axis=1) for r in rs], axis=0) / 1e-5
        steps, got_s, got_m = panels[init]
        np.testing.assert_allclose(got_s, smallest, rtol=1e-12)
        np.testing.assert_allclose(got_m, median, rtol=1e-12)
    _, _, median = panels["normal"]
    assert g["qe0_normal"] == pytest.approx(median[0], rel=1e-12) and median.max() < 1024
    steps, smallest, median = panels["small"]
    assert g["cross_small"] == steps[int(np.argmax(smallest > 1))]
    assert g["cross_median"] == steps[int(np.argmax(median > 1))] < g["cross_small"]


# --- the claims, recomputed ------------------------------------------------------------------------


def test_sigma_zero(g, arrays):
    dead = ids(placement="sandwich", init="zero_resid", eps=0.0)
    assert {MANIFEST["runs"][r]["stopped_at"] for r in dead} == {0} and g["sz_seeds"] == len(dead)
    eps0 = [
        rid
        for rid, e in MANIFEST["runs"].items()
        if e["config"]["eps"] == 0.0 and e["config"]["ft_steps"] == 0
    ]
    alive = [r for r in eps0 if r not in dead]
    assert g["eps0_alive"] == len(alive) and all(
        MANIFEST["runs"][r]["stopped_at"] is None for r in alive
    )
    gn = {
        e: np.mean([
            float(arrays[f"{r}:grad_norm"][0])
            for r in ids(placement="sandwich", init="zero_resid", eps=e)
        ])
        for e in (1e-12, 1e-5)
    }
    assert g["gn0_1e12"] == sci(gn[1e-12], 1) and g["gn0_1e5"] == pytest.approx(gn[1e-5], rel=1e-6)
    assert gn[1e-12] / gn[1e-5] == pytest.approx(10**3.5, rel=0.3)


def test_float16_and_the_norm_in_bfloat16(g, arrays):
    assert g["f16_of_1e12"] == float(np.float16(1e-12)) == 0.0 == float(np.float16(1e-8))
    d = ids(placement="pre", init="normal", eps=1e-12, precision="fp16_norm32", steps=150)
    e = ids(placement="pre", init="normal", eps=1e-12, precision="fp16_eps16", steps=150)
    t = paired(arrays, d, e)
    assert (
        g["f16_pre_diff"] == interval(t)
        and g["f16_pre_outcome"] == "equivalent"
        and g["f16_seeds"] == t[3]
    )
    assert -0.002 < t[1] and t[2] < 0.002

    def at150(arrays, rid):
        return (
            float(arrays[f"{rid}:eval_loss"][3]) - FLOOR
        )  # held-out losses after 0, 50, 100, 150 steps

    a = ids(placement="pre", init="normal", eps=1e-5)
    b = ids(placement="pre", init="normal", eps=1e-5, precision="bf16_norm32", steps=150)
    c = ids(placement="pre", init="normal", eps=1e-5, precision="bf16_norm16", steps=150)
    assert g["bf16_cb_diff"] == interval(paired(arrays, b, c, at150))
    assert g["bf16_ab_diff"] == interval(paired(arrays, a, b, at150))
    assert g["bf16_seeds"] == len(b) == len(c) == 10
    # the float16 kernel (f): every draw with epsilon 0 in float16 died at step 0
    f = {(i, e): ids(placement="pre", init=i, eps=e, precision="fp16_var16", steps=150)
         for i, e in (("small", 1e-12), ("small", 1e-8), ("small", 1e-6), ("normal", 1e-12))}
    for e in (1e-12, 1e-8):
        assert all(MANIFEST["runs"][r]["first_nonfinite_step"] == 0
                   and MANIFEST["runs"][r]["stopped_at"] is not None for r in f["small", e])
    assert g["hk_draws"] == len(f["small", 1e-8]) == 10 and g["hk_step"] == 0
    q0 = np.median([stat(arrays, r, "q_p50")[0, 0] for r in f["small", 1e-8]])
    assert g["hk_q0"] == sci(q0, 0) and q0 < 2.0**-25
    t = paired(arrays, ids(placement="pre", init="small", eps=1e-6), f["small", 1e-6], at150)
    assert g["hk_1e6"] == interval(t) and t[3] == 10
    e_ = ids(placement="pre", init="normal", eps=1e-12, precision="fp16_eps16", steps=150)
    t = paired(arrays, e_, f["normal", 1e-12], at150)
    assert g["hk_normal"] == interval(t) and t[3] == 10
    assert g["f16_zero_q"] == sci(2.0**-25, 0)


def test_the_sweet_spot_and_the_rule(g, arrays):
    small = {e: ids(placement="pre", init="small", eps=e) for e in (0.0, 1e-8, 1e-6, 1e-5)}
    for e, key in ((1e-8, "sweet_small_1e8"), (1e-6, "sweet_small_1e6"), (1e-5, "sweet_small_1e5")):
        t = paired(arrays, small[0.0], small[e])
        assert g[key] == interval(t) and t[3] == 10, key
    # 1e-6 and 1e-5 cost: their intervals lie above 0; 1e-8's inside the margin
    assert (
        paired(arrays, small[0.0], small[1e-6])[1] > 0
        and paired(arrays, small[0.0], small[1e-5])[1] > 0
    )
    lo, hi = paired(arrays, small[0.0], small[1e-8])[1:3]
    assert -0.002 < lo and hi < 0.002
    q0 = {
        init: np.median([
            np.median(stat(arrays, r, "q_p50")[0, :1])
            for r in ids(placement="pre", init=init, eps=1e-5)
        ])
        for init in ("normal", "small")
    }
    assert (g["q0_normal"], g["q0_small"]) == (sci(q0["normal"], 1), sci(q0["small"], 0))
    # bit for bit epsilon = 0 at normal: 1e-12 only (exercise 2)
    normal = {e: ids(placement="pre", init="normal", eps=e) for e in (0.0, 1e-12, 1e-8)}
    same = [
        e
        for e in normal
        if all(
            np.array_equal(arrays[f"{a}:loss"], arrays[f"{b}:loss"])
            for a, b in zip(normal[e], normal[0.0])
        )
    ]
    assert same == [0.0, 1e-12]


def test_too_large(g, arrays):
    runs = {e: ids(placement="pre", init="normal", eps=e) for e in (1e-5, 1e-1, 1.0)}
    assert g["large_1e1"] == interval(paired(arrays, runs[1e-5], runs[1e-1]), 3)
    assert g["large_1"] == interval(paired(arrays, runs[1e-5], runs[1.0]), 3)
    assert paired(arrays, runs[1e-5], runs[1.0])[1] > 0.02
    gap = CORPUS["unigram_entropy_nats"] - FLOOR
    for init, key in (("normal", "learnt_1"), ("small", "learnt_1_small")):
        learnt = (
            1 - np.mean([final(arrays, r) for r in ids(placement="pre", init=init, eps=1.0)]) / gap
        )
        assert g[key] == pytest.approx(learnt, abs=1e-12)
    assert g["eps1_none"] == interval(
        paired(arrays, ids(placement="none", init="normal", eps=None), runs[1.0]), 3
    )


def test_norm_against_none_and_pre_against_post(g, arrays):
    fin, mean, post = [], [], []
    for init in ("normal", "small", "zero_resid"):
        pre = ids(placement="pre", init=init, eps=1e-5)
        none = ids(placement="none", init=init, eps=None)
        after = ids(placement="post", init=init, eps=1e-5)
        fin.append(paired(arrays, pre, none))
        mean.append(paired(arrays, pre, none, mean_loss))
        post.append(paired(arrays, pre, after))
        for rid in pre + none + after:
            assert np.all(np.isfinite(arrays[f"{rid}:loss"])), rid
    assert (g["nn_fin_lo"], g["nn_fin_hi"]) == pytest.approx(
        (min(t[0] for t in fin), max(t[0] for t in fin)), abs=1e-12
    )
    assert (g["nn_mean_lo"], g["nn_mean_hi"]) == pytest.approx(
        (min(t[0] for t in mean), max(t[0] for t in mean)), abs=1e-12
    )
    assert all(t[1] > 0 for t in fin + mean) and all(t[2] < 0 for t in post)
    assert (g["pp_fin_lo"], g["pp_fin_hi"]) == pytest.approx(
        (-max(t[0] for t in post), -min(t[0] for t in post)), abs=1e-12
    )


def test_fine_tuning(g, arrays):
    n = 0
    for init in ("normal", "small"):
        for ea in (1e-12, 1e-5):
            for rid, e in MANIFEST["runs"].items():
                c = e["config"]
                if (
                    c["ft_steps"]
                    and c["init"] == init
                    and c["eps"] == ea
                    and (c["ft_eps"], c["ft_precision"]) != (ea, "fp32")
                ):
                    if c["seed"] == 0:
                        n += 1
    assert g["ft_swaps"] == n == 12 and g["ft_n"] == 2 * n
    # ten draws for every change, of epsilon and of the precision
    swaps = {}
    for rid, e in MANIFEST["runs"].items():
        c = e["config"]
        if c["ft_steps"]:
            swaps.setdefault((c["init"], c["eps"], c["ft_eps"], c["ft_precision"]), []).append(rid)
    assert {len(v) for k, v in swaps.items() if k[3] == "fp32"} == {10} == {g["ft_seeds"]}
    assert {len(v) for k, v in swaps.items() if k[3] != "fp32"} == {10}
    # the summary: the largest cost of changing to 1e-3 (after the change or after fine-tuning),
    # recomputed from the held-out losses, paired by draw against the control
    def after(rid, i):
        return float(arrays[f"{rid}:eval_loss"][i])

    worst = 0.0
    for (init, ea, fe, fp), rids in swaps.items():
        if fe != 1e-3:
            continue
        ctrl = sorted(swaps[init, ea, ea, "fp32"], key=lambda r: MANIFEST["runs"][r]["config"]["seed"])
        rids = sorted(rids, key=lambda r: MANIFEST["runs"][r]["config"]["seed"])
        for i in (0, -1):
            worst = max(worst, float(np.mean([after(b, i) - after(a, i) for a, b in zip(ctrl, rids)])))
    assert g["ft_big_max"] == sci(worst, 0) and 0 < worst < 0.002


def test_the_probe_numbers(g):
    probe = json.loads((DATA / "probe.json").read_text(encoding="utf-8"))
    assert g["probe_tokens"] == probe["minilm"]["tokens"]
    qmin = min(s["q_min"] for s in probe["minilm"]["sites"].values())
    assert g["probe_minilm_min"] == sci(qmin / 1e-12, 1)


def test_the_exercises_and_the_comparison_count(g, arrays):
    def crossing(eps):
        rs = ids(placement="pre", init="small", eps=eps)
        med = np.median([stat(arrays, r, "q_p50").min(axis=1) for r in rs], axis=0)
        steps = np.unique(np.r_[np.arange(20), np.arange(20, 300, 10), 299])
        return int(steps[np.argmax(med > eps)])

    assert (g["ex_cross_1e6"], g["ex_cross_1e5"]) == (crossing(1e-6), crossing(1e-5)) and crossing(
        1e-8
    ) == 0
    from lneps.book.training import claims

    es = [e for c in claims.all_claims() for e in c.effects]
    assert g["n_comparisons"] == len(es)
    assert g["n_effect"] + g["n_equivalent"] + g["n_undecided"] == len(es)


# --- the rendered page -----------------------------------------------------------------------------


def test_the_page_numbers_its_figures_and_links_the_claims(built_book):
    from rendered import built_article, chapter_pages

    code, output = built_book
    assert code == 0, output[-3000:]
    number = [p.file for p in chapter_pages()].index("book/training") + 1
    main = built_article("book/training.html")
    assert main.find("h1").get_text(" ").strip().startswith(f"{number}.")
    captions = [f.find("figcaption").get_text(" ") for f in main.find_all("figure")]
    assert [c.split()[:2] for c in captions] == [
        ["Figure", f"{number}.1"],
        ["Figure", f"{number}.2"],
    ]
    claims_page = built_article("book/claims.html")
    links = {
        a["href"].split("#")[1]
        for a in claims_page.find_all("a", href=True)
        if "training.html#" in a["href"]
    }
    assert links >= {
        "training-sigma-zero",
        "training-float16",
        "training-sweet-spot",
        "training-too-large",
        "training-norm-vs-none",
        "training-pre-post",
        "training-finetune",
    }
    for anchor in links:
        assert main.find(id=anchor) is not None, anchor
    # the verification detail is in the appendix, linked
    assert "{doc}`how_the_training_runs_are_judged`" in markdown(NB)
