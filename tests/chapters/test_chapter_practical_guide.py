"""The practical guide (book/practical_guide.ipynb): the first page after the introduction.

It is held to what it promises: at most 1,500 words as rendered; no number typed into its
markdown (every number is pasted from its own cells); every entry links to a section that
exists and proves it; and every pasted value agrees with an independent computation here
(closed forms, the formats' definitions, the stored measurements, the trained network's
activations, the stored training runs, read here from their files without the lab's code).

It answers which epsilon to give a new model, per format and for both norms; its training
table is the stored runs'; its inference rule names the one model it rests on and that model's
epsilon; its framework statements name the CPU kernels they were measured on.
"""

from __future__ import annotations

import functools
import json
import math
import re

import ml_dtypes
import numpy as np
import pytest
import yaml

from network_data import measurements, sentences
from notebooks import BOOK, ROOT, glued, markdown, read
from rendered import toc_pages

NB = "practical_guide.ipynb"
PAGE = "book/practical_guide"
SITUATIONS = ("guide-training", "guide-inference", "guide-porting", "guide-kernel")
FORMATS = ("float16", "bfloat16", "float32")


@pytest.fixture(scope="module")
def g():
    return glued(NB)


def _markdown() -> str:
    return "\n".join(c.source for c in read(NB).cells if c.cell_type == "markdown")


# --- the page ---------------------------------------------------------------------------------


def test_it_is_the_first_page_after_the_introduction_and_unnumbered():
    pages = [p.file for p in toc_pages()]
    assert pages[:2] == ["book/intro", PAGE]
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    part = toc["parts"][0]
    assert part["numbered"] is False and [c["file"] for c in part["chapters"]] == [PAGE]


# What counts as a typed number: any digit left once the roles ({glue:text}`x`, {ref}`x`),
# the labels, the directives' options and the format names are taken out. A formula may hold
# digits ($\varepsilon/(2q)$); a math span with no letter in it is a number, and counts.
ROLE = re.compile(r"\{[a-z:]+\}`[^`]*`")
LABEL = re.compile(r"^\([\w-]+\)=$", re.M)
OPTION = re.compile(r"^:[\w-]+:.*$", re.M)
FORMAT_NAME = re.compile(r"\b(?:b?float(?:16|32|64))\b")
MATH = re.compile(r"\$[^$]+\$")
CODE = re.compile(r"^```python\n.*?^```$", re.M | re.S)   # code shown, not a number in prose


def _typed_numbers(text: str) -> list[str]:
    text = CODE.sub(" ", text)
    text = ROLE.sub(" ", text)
    text = LABEL.sub(" ", text)
    text = OPTION.sub(" ", text)
    text = FORMAT_NAME.sub(" ", text)
    typed = [m for m in MATH.findall(text) if not re.search(r"[A-Za-z]", m) and re.search(r"\d", m)]
    text = MATH.sub(lambda m: " " if re.search(r"[A-Za-z]", m.group()) else m.group(), text)
    return typed + re.findall(r"[^\s]*\d[^\s]*", text)


def test_no_number_is_typed():
    assert _typed_numbers(_markdown()) == []


@pytest.mark.parametrize("text, found", [
    ("a threshold of 1024", True), ("$10^{-5}$", True), ("in float16 and bfloat16", False),
    ("$\\varepsilon/(2q)$", False), ("{glue:text}`thr_float16`", False), (":widths: 22 78", False),
    ("```python\nq0 = sites[0]\n```", False), ("```python\nq0\n```, 10 rows", True),
])
def test_the_typed_number_detector(text, found):
    assert bool(_typed_numbers(text)) == found


# --- the links --------------------------------------------------------------------------------

REF = re.compile(r"\{(?:ref|numref)\}`(?:[^`<]*<)?([\w-]+)>?`")


def _labels() -> set[str]:
    labels = set()
    for path in BOOK.glob("*.ipynb"):
        labels |= set(LABEL.findall("\n".join(c.source for c in read(path.name).cells
                                               if c.cell_type == "markdown")))
    for path in BOOK.glob("*.md"):
        labels |= set(LABEL.findall(path.read_text(encoding="utf-8")))
    # and the tables the guide pastes as Markdown (their ``:name:``)
    names = set(re.findall(r"^:name: ([\w-]+)$", _glued_markdown("probe_table"), flags=re.M))
    return {label[1:-2] for label in labels} | names


def _glued_markdown(name: str) -> str:
    """The Markdown a cell of the guide glued under ``name`` (myst-nb's scrapbook output)."""
    for cell in read(NB).cells:
        for out in cell.get("outputs", []):
            if out.get("metadata", {}).get("scrapbook", {}).get("name") == name:
                return out["data"]["application/papermill.record/text/markdown"]
    raise KeyError(name)


def _rows():
    """(situation, format, markdown of that row) for every row of the decision table."""
    text = _markdown()
    for i, situation in enumerate(SITUATIONS):
        start = text.index(f"({situation})=")
        end = text.index(f"({SITUATIONS[i + 1]})=") if i + 1 < len(SITUATIONS) else len(text)
        block = text[start:end]
        # the format rows (training also has the table of the runs, whose rows are epsilons)
        rows = [r for r in re.split(r"^\* - ", block, flags=re.M)[1:]
                if r.split("\n", 1)[0].strip() in FORMATS]
        assert [r.split("\n", 1)[0].strip() for r in rows] == list(FORMATS), situation
        for fmt, row in zip(FORMATS, rows):
            yield situation, fmt, row


def test_every_reference_resolves_to_a_section():
    labels = _labels()
    refs = REF.findall(_markdown())
    assert len(refs) > 20
    assert sorted(set(refs) - labels) == []


@pytest.mark.parametrize("situation", SITUATIONS)
def test_every_row_says_the_four_things_and_links_to_a_proof(situation):
    rows = [(fmt, row) for s, fmt, row in _rows() if s == situation]
    assert len(rows) == len(FORMATS)
    for fmt, row in rows:
        for label in ("**Matters?**", "**Keep:**", "**Frameworks:**", "**Otherwise:**"):
            assert label in row, f"{situation}, {fmt}: no {label}"
    # a row that does not refer to another row carries its own proof
    for fmt, row in rows:
        own = "As for" not in row or "{ref}" in row
        assert own or any("{ref}" in r for _, r in rows), f"{situation}, {fmt}: no proof linked"
    assert any("{ref}" in row for _, row in rows)


# --- the values -------------------------------------------------------------------------------


def test_thresholds_from_the_formats(g):
    # 1 - sqrt(q/(q+eps)) <= eps/(2q) is below the unit roundoff 2**-p once q/eps >= 2**(p-1)
    for name, dtype in (("float16", np.float16), ("bfloat16", ml_dtypes.bfloat16), ("float32", np.float32)):
        p = ml_dtypes.finfo(dtype).nmant + 1
        assert g[f"thr_{name}"] == 2 ** (p - 1)
        t = 2.0 ** (p - 1)
        assert 1 - math.sqrt(t / (t + 1)) <= 2.0 ** -p
    assert (g["thr_float16"], g["thr_bfloat16"], g["thr_float32"]) == (1024, 128, 8388608)
    assert g["thr_float32_sci1"] == "8.4 × 10⁶"


def test_format_facts(g):
    assert g["f16_max"] == 65504.0
    assert g["f16_zero_from"] == 1e-8 and float(np.float16(1e-8)) == 0.0 and float(np.float16(1e-7)) > 0
    assert g["bert_eps_f16"] == 0.0
    assert abs(g["digits_bfloat16"] - 8 * math.log10(2)) < 1e-12
    assert g["sq_first"] == 256.0
    assert g["d_overflow"] == 66 and 65 * 1000 < 65504 < 66 * 1000


def test_backward_facts(g):
    assert g["gain_1e5"] == pytest.approx(1e-5 ** -0.5, rel=1e-12)
    assert g["gain_1e12_sci0"] == "10⁶"
    assert g["rstd_threshold"] == pytest.approx(65504.0 ** -2, rel=1e-15)
    assert g["rstd_threshold_sci2"] == "2.33 × 10⁻¹⁰"
    assert g["gmax_1e5"] == pytest.approx((65504 + 16) * math.sqrt(1e-5))
    assert round(g["gmax_1e5"]) == 207


def test_network_facts(g):
    m = measurements()
    names = list(m.sites)
    q = {n: ((x.astype(np.float64) - x.astype(np.float64).mean(1, keepdims=True)) ** 2).mean(1)
         for n, x in m.sites.items()}
    ratio = {n: q[n].min() / m.eps for n in names}
    assert g["n_sites"] == len(names) == 13 and g["net_eps"] == m.eps == 1e-12
    assert g["net_min_all"] == pytest.approx(min(ratio.values()), rel=0.02)
    assert g["net_min_emb"] == pytest.approx(ratio[names[0]], rel=0.02)
    assert g["net_min_others"] == pytest.approx(min(ratio[n] for n in names[1:]), rel=0.05)
    assert g["net_min_all"] >= 1e9 and g["net_min_others"] > 10 * g["net_min_emb"]
    assert g["port_qe"] == pytest.approx(q[names[0]].min() / 1e-5, abs=0.5)
    assert g["thr_bfloat16"] < g["port_qe"] < g["thr_float16"]
    emb = q[names[0]]
    swap = np.max(np.abs(np.sqrt((emb + 1e-12) / (emb + 1e-5)) - 1))
    assert g["swap_1e5_emb"] == pytest.approx(swap, rel=0.05)
    assert g["emb_sigma"] == pytest.approx(math.sqrt(np.median(emb)), rel=0.02)
    assert 0 < g["f16_share"] < 1 and g["f16_sum_margin"] == pytest.approx(g["f16_share"] ** -0.5, abs=1e-3)
    # the sum of squares is 1/share from overflow; the row, its square root
    assert g["f16_sum_factor"] == pytest.approx(1 / g["f16_share"], abs=5e-3)
    assert g["f16_sum_factor"] > g["f16_sum_margin"]
    assert g["n_sentences"] == len((BOOK / "data" / "sentences.txt").read_text().splitlines())
    assert g["low_nonfinite"] == 0 and g["bf16n_diff"] > g["f16n_diff"]
    assert 0 < g["swap_1e5_cos"] < g["swap_1e3_cos"] < 1 and 0 < g["swap_1e1_cos"] < 0.5


def test_the_trained_network_chapter_agrees(g):
    other = glued("trained_network.ipynb")
    for ours, theirs in (("f16_share", "f16_share"), ("f16_sum_margin", "f16_sum_margin"),
                         ("swap_1e5_cos", "swap_1e5_cos"), ("swap_1e3_cos", "swap_1e3_cos"),
                         ("swap_1e1_cos", "swap_1e1_cos"), ("swap_1e5_emb", "swap_1e5_emb"),
                         ("f16n_diff", "f16n_diff"), ("bf16n_diff", "bf16n_diff"),
                         ("emb_sigma", "emb_median_sigma")):
        if theirs in other:
            assert g[ours] == pytest.approx(other[theirs], rel=1e-9), ours


def test_framework_facts(g):
    data = {fw: json.loads((ROOT / "src/lneps/book/data/frameworks" / f"{fw}.json").read_text())
            for fw in ("torch", "flax", "onnxruntime", "onnx_reference")}
    probe = data["torch"]["probes"]["layer_norm | float16 | constant_60000 | 1e-12"]
    assert (g["c60k_value"], g["c60k_out"]) == (probe["input"][0], probe["output"][0]) == (60000.0, -2048.0)
    iv = data["flax"]["implied_variance"]
    assert g["iv_flax_fast"] == max(v["max_rel_error"] for v in iv.values() if v["op"] == "layer_norm")
    # ONNX Runtime's bfloat16 layer norm: refused by its Python binding, so not measured
    assert [u["error"] for u in data["onnxruntime"]["unsupported"]
            if (u["op"], u["dtype"]) == ("layer_norm", "bfloat16")] == [
        "RuntimeError: Numpy_type 256 can't be converted to MLDataType."]
    assert "refused bfloat16 input" in _markdown()
    # the same float32 value as chapter 8 prints, to the same digits
    assert g["onnx_eps_stored_sci9"] == "9.999999747 × 10⁻⁶"
    for fw in ("torch", "flax", "onnxruntime"):
        e = data[fw]["eps_handling"]["layer_norm | float16 | 1e-12"]
        assert e["matches"]["kept (float32)"]["rows_equal"] == e["rows"]
    assert g["onnx_eps_stored"] == float(np.float32(1e-5))
    assert g["rms_none_half"] == 2.0 ** -23
    assert (g["torch_eps"], g["flax_eps"], g["keras_eps"]) == (1e-5, 1e-6, 1e-3)
    assert (g["llama_default"], g["llama_released"]) == (1e-6, 1e-5)


def test_failure_facts(g):
    from lneps.naive import mean_and_variance
    from lneps.book.survey import family_rows

    pad = np.zeros((2, 768), dtype=np.float16)
    pad[1] = 0.25
    assert g["pad_size"] == pad.size == g["nan_f16_bert"] and g["nan_default_bert"] == 0
    rows = family_rows("mean_6e4", np.random.default_rng(7), 1024, 512, np.float16)
    # the one-pass variance, computed here without lneps: float32 sums of x and x*x
    x = rows.astype(np.float32)
    d = np.float32(x.shape[-1])
    mean = np.sum(x, axis=-1, dtype=np.float32) / d
    var = np.sum(x * x, axis=-1, dtype=np.float32) / d - mean * mean
    _, var_lneps = mean_and_variance(rows, dtype=np.float32, method="one-pass")
    assert g["n_rows"] == 1024 and g["neg_rows"] == int((var_lneps < 0).sum()) > 0
    assert int((var < 0).sum()) > 0  # the cancellation does not depend on the summation order


# --- the training runs ------------------------------------------------------------------------
# Read from the stored files (runs.json, runs.npz, spread.json, spread.npz, corpus.json) with
# json and NumPy alone: the lab's own readers (lneps.book.training) are what the guide uses.

TRAINING = ROOT / "src" / "lneps" / "book" / "data" / "training"
TABLE_EPS = (0.0, 1e-12, 1e-6, 1e-5, 1e-3, 1e-1)
SWEEP_EPS = (1e-12, 1e-8, 1e-6, 1e-5, 1e-3, 1e-1, 1.0)
COLUMNS = {"ln": ("LayerNorm", "normal"), "lns": ("LayerNorm", "small"), "rms": ("RMSNorm", "normal")}
MARGIN, ALPHA = 0.002, 0.05       # the lab's equivalence margin (nats) and level, fixed in advance


@functools.cache
def _training():
    manifest = json.loads((TRAINING / "runs.json").read_text())
    floor = json.loads((TRAINING / "corpus.json").read_text())["loss_floor_nats"]
    with np.load(TRAINING / "runs.npz") as z:
        arrays = {k: z[k] for k in z.files}
    return manifest, floor, arrays


def _runs(**where) -> list[str]:
    """Ids of the stored pre-training runs whose configuration has ``where`` (seed order); the
    recipe's model and schedule unless asked (the slices change lr, depth, width, warm-up)."""
    where = {"precision": "fp32", "steps": 300, "ft_steps": 0, "lr": None, "layers": None,
             "width": None, "warmup": None, **where}
    manifest = _training()[0]
    ids = [rid for rid, e in manifest["runs"].items()
           if all(e["config"].get(k) == v for k, v in where.items())]
    assert ids, where
    return sorted(ids, key=lambda rid: manifest["runs"][rid]["config"]["seed"])


def _seed(rid: str) -> int:
    return _training()[0]["runs"][rid]["config"]["seed"]


def _final(rid: str) -> float:
    """Held-out loss after the last step minus the floor."""
    manifest, floor, arrays = _training()
    assert manifest["runs"][rid]["stopped_at"] is None, rid
    return float(arrays[rid + ":eval_loss"][-1]) - floor


@functools.cache
def _machine_spread() -> float:
    """The largest range of the final held-out loss over the arithmetic profiles (and the stored
    run), over the configurations measured that way."""
    spread = json.loads((TRAINING / "spread.json").read_text())
    arrays = _training()[2]
    with np.load(TRAINING / "spread.npz") as z:
        worst = 0.0
        for rid in spread["configs"]:
            vals = [float(z[f"{name}/{rid}:eval_loss"][-1]) for name in spread["profiles"]]
            vals.append(float(arrays[rid + ":eval_loss"][-1]))
            if all(math.isfinite(v) for v in vals):
                worst = max(worst, max(vals) - min(vals))
    return worst


def _paired(a: list[str], b: list[str]) -> dict:
    """B against A on the final excess, paired by seed (the seeds both have), with SciPy's t:
    the mean difference, its 95 % interval, the two-sided p and the equivalence (TOST) p."""
    from scipy import stats

    sa, sb = {_seed(r): r for r in a}, {_seed(r): r for r in b}
    seeds = sorted(set(sa) & set(sb))
    d = np.array([_final(sb[s]) - _final(sa[s]) for s in seeds])
    n, m, sd = len(d), float(d.mean()), float(d.std(ddof=1))
    if sd == 0:                                   # bit for bit: no spread to test against
        p, pt, h = float(m != 0), float(abs(m) >= MARGIN), 0.0
    else:
        se = sd / math.sqrt(n)
        p = float(2 * stats.t.sf(abs(m) / se, n - 1))
        pt = float(max(stats.t.sf((m + MARGIN) / se, n - 1), stats.t.sf((MARGIN - m) / se, n - 1)))
        h = float(stats.t.ppf(0.975, n - 1) * se)
    return {"n": n, "m": m, "lo": m - h, "hi": m + h, "p": p, "pt": pt}


def _holm(cs: list[dict]) -> list[dict]:
    """Holm's step-down adjustment of both p-values over the family; then each outcome."""
    for key in ("p", "pt"):
        run = 0.0
        for k, c in enumerate(sorted(cs, key=lambda c: c[key])):
            run = max(run, min(1.0, (len(cs) - k) * c[key]))
            c[key + "_adj"] = run
    for c in cs:
        c["outcome"] = ("effect" if c["p_adj"] < ALPHA and abs(c["m"]) > _machine_spread()
                        else "equivalent" if c["pt_adj"] < ALPHA else "undecided")
    return cs


def _signed(x: float, digits: int) -> str:
    return f"{0:.{digits}f}" if x == 0 else f"{x:+.{digits}f}".replace("-", "−")


def _text(c: dict, digits: int = 4) -> str:
    return f"{_signed(c['m'], digits)} [{_signed(c['lo'], digits)}, {_signed(c['hi'], digits)}]"


@functools.cache
def _sweep() -> dict:
    """(column, eps) -> every epsilon of the sweep against 0 in a family, Holm over all of them."""
    out = {}
    for col, (norm, init) in COLUMNS.items():
        zero = _runs(norm=norm, init=init, placement="pre", eps=0.0)
        for e in SWEEP_EPS:
            out[col, e] = _paired(zero, _runs(norm=norm, init=init, placement="pre", eps=e))
    _holm(list(out.values()))
    return out


# (condition, fields, epsilons): epsilon against 0 by q at initialization, Holm over all of them
RULE = (("ln", {"norm": "LayerNorm", "init": "normal"}, (1e-6, 1e-5, 1e-3)),
        ("rms", {"norm": "RMSNorm", "init": "normal"}, (1e-6, 1e-5, 1e-3)),
        ("lns", {"norm": "LayerNorm", "init": "small"}, (1e-8, 1e-6, 1e-5)),
        ("long", {"norm": "LayerNorm", "init": "small", "steps": 900}, (1e-8, 1e-6, 1e-5)),
        ("wide", {"norm": "LayerNorm", "init": "small", "layers": 4, "width": 128}, (1e-8, 1e-6, 1e-5)))


@functools.cache
def _rule() -> dict:
    arrays, out = _training()[2], {}
    for name, where, epss in RULE:
        zero = _runs(placement="pre", eps=0.0, **where)
        for e in epss:
            rs = _runs(placement="pre", eps=e, **where)
            c = _paired(zero, rs)
            # q0: the median over seeds of the median q at the first norm at step 0
            c["q0"] = float(np.median([arrays[r + ":q"][0, 0, 4] for r in rs]))
            c["ratio"] = c["q0"] / e
            out[name, e] = c
    _holm(list(out.values()))
    return out


def _ratio(x: float) -> str:
    """As the page writes a ratio: whole numbers from 10, one decimal from 1, two below."""
    return f"{x:.0f}" if x >= 10 else f"{x:.1f}" if x >= 1 else f"{x:.2f}"


def test_the_training_table_is_read_from_the_stored_runs(g):
    from lneps.book.printing import sci

    seeds = {len(_runs(norm=n, init=i, placement="pre", eps=e))
             for n, i in COLUMNS.values() for e in TABLE_EPS}
    assert seeds == {10} and g["tr_runs"] == "10"
    assert g["tr_steps"] == _training()[0]["recipe"]["steps"] == 300
    layers = {int(s.split(".")[0]) for e in _training()[0]["runs"].values() for s in e["sites"]
              if s[0].isdigit() and "layers" not in e["config"]}
    assert g["tr_layers"] == len(layers) == 2
    assert g["tr_machine"] == pytest.approx(_machine_spread(), rel=1e-6)
    assert g["tr_machine_sci0"] == sci(_machine_spread(), 0)
    assert g["tr_margin"] == MARGIN and g["ci_level"] == "95 %"
    for i, eps in enumerate(TABLE_EPS):
        assert g[f"tr_eps_{i}"] == ("0" if eps == 0 else sci(eps, 0))
    # the row of 0: the final held-out loss over the chain's own held-out loss (the lab's
    # reader, above the entropy rate by the held-out windows' sampling); the rest: differences
    from lneps.book.training.stored import held_out_floor

    floor = held_out_floor()
    assert 0 < floor - _training()[1] < 0.01
    for col, (norm, init) in COLUMNS.items():
        zero = [_final(r) + _training()[1] - floor for r in _runs(norm=norm, init=init, placement="pre", eps=0.0)]
        assert g[f"tr_{col}_0"] == f"{np.mean(zero):.3f} ({len(zero)} runs)"
        for i, eps in enumerate(TABLE_EPS[1:], 1):
            c = _sweep()[col, eps]
            assert g[f"tr_{col}_{i}"] == f"{_text(c, 3)}, {c['outcome']}", (col, eps)


def test_what_the_training_table_shows():
    """The reading the guide gives it: 1e-12 is equivalent to no epsilon everywhere; 1e-6 and
    1e-5 too at the usual initialization, and cost at the small one; 1e-3 and 1e-1 cost
    everywhere."""
    rows = {e: {col: _sweep()[col, e]["outcome"] for col in COLUMNS} for e in SWEEP_EPS}
    for eps in (1e-12, 1e-8):
        assert set(rows[eps].values()) == {"equivalent"}, eps
    for eps in (1e-6, 1e-5):
        assert rows[eps] == {"ln": "equivalent", "lns": "effect", "rms": "equivalent"}, eps
    for eps in (1e-3, 1e-1, 1.0):
        assert set(rows[eps].values()) == {"effect"} and all(
            _sweep()[col, eps]["m"] > 0 for col in COLUMNS), eps


def test_the_table_in_the_page_pastes_the_cells_in_order():
    text = _markdown()
    block = text[text.index("(guide-training)="):text.index("(guide-inference)=")]
    assert "{doc}`proof <training>`" in block   # the training chapter
    for name in ("tr_margin", "ci_level"):
        assert f"{{glue:text}}`{name}`" in block, name
    table = block[block.index(":header-rows: 1"):]
    table = table[:table.index("```")]
    rows = [re.findall(r"\{glue:text\}`(\w+)`", r) for r in re.split(r"^\* - ", table, flags=re.M)[2:]]
    assert rows == [[f"tr_eps_{i}", f"tr_ln_{i}", f"tr_lns_{i}", f"tr_rms_{i}"] for i in range(len(TABLE_EPS))]
    header = re.split(r"^\* - ", table, flags=re.M)[1]
    assert [h.strip(" -\n") for h in header.split("\n")] == \
        ["$\\varepsilon$", "Layer norm", "Layer norm, small init", "RMS norm", ""]


def test_which_epsilon_for_a_new_model(g):
    from lneps.book.printing import sci

    rule = _rule()
    # the rule in q: from the largest q0/eps down, as long as every comparison is equivalent
    # (ratios that agree to two digits are one step)
    steps: dict = {}
    for c in sorted(rule.values(), key=lambda c: -c["ratio"]):
        steps.setdefault(f"{c['ratio']:.2g}", []).append(c)
    equiv = []
    for group in steps.values():
        if not all(c["outcome"] == "equivalent" for c in group):
            break
        equiv += group
    assert g["rule_equiv_from"] == _ratio(min(c["ratio"] for c in equiv)) == "79"
    assert g["rule_seeds"] == 10 and {c["n"] for c in equiv} == {10}
    cost = max((c for c in rule.values() if c["outcome"] == "effect" and c["m"] > 0),
               key=lambda c: c["ratio"])
    assert g["rule_cost_ratio"] == _ratio(cost["ratio"]) and g["rule_cost"] == _text(cost)
    assert cost["ratio"] < 1 and cost["lo"] > MARGIN / 2
    small = rule["lns", 1e-6]
    assert g["cost_small_1e6"] == _text(small) == "+0.0083 [+0.0058, +0.0108]"
    assert g["ratio_small_1e6"] == _ratio(small["ratio"]) and small["outcome"] == "effect"
    assert g["cost_small"] == _text(rule["lns", 1e-5]) and rule["lns", 1e-5]["outcome"] == "effect"
    # longer training: the cost of 1e-5 shrinks but stays; wider: undecided on four seeds
    long = rule["long", 1e-5]
    assert g["cost_small_long"] == _text(long) and long["outcome"] == "effect"
    assert 0 < long["m"] < rule["lns", 1e-5]["m"]
    assert (g["wide_outcome"], g["wide_seeds"]) == (rule["wide", 1e-5]["outcome"], rule["wide", 1e-5]["n"]) \
        == ("undecided", 4)
    # the smallest epsilon of the sweep equivalent to 0 in every family, and float16 loses it
    rec = max(e for e in SWEEP_EPS if all(_sweep()[col, e]["outcome"] == "equivalent" for col in COLUMNS))
    assert g["rec_eps"] == rec == 1e-8 and g["rec_eps_sci0"] == sci(rec, 0)
    assert float(np.float16(rec)) == 0 and rec <= g["f16_zero_from"]
    assert g["gain_rec"] == pytest.approx(rec ** -0.5) and g["gain_rec_sci0"] == "10⁴"
    # q0 at the two initializations
    assert g["q_small"] == pytest.approx(rule["lns", 1e-5]["q0"], rel=1e-6) and g["q_small_sci0"] == "2 × 10⁻⁸"
    assert g["q_normal"] == pytest.approx(rule["ln", 1e-5]["q0"], rel=1e-6)
    assert g["q_normal_sci1"] == sci(rule["ln", 1e-5]["q0"], 1)
    # torch's 1e-5 sits at the rule's ratio at the usual initialization, far below at the small
    assert rule["ln", 1e-5]["ratio"] == min(c["ratio"] for c in equiv) > 1e4 * rule["lns", 1e-5]["ratio"]
    # 1e-8 at the small initialization: below the rule's ratio, and still equivalent
    assert g["ratio_small_1e8"] == _ratio(rule["lns", 1e-8]["ratio"]) and rule["lns", 1e-8]["outcome"] == "equivalent"
    assert rule["lns", 1e-8]["ratio"] < min(c["ratio"] for c in equiv)
    # the page: the probe first, then the rule; one bold answer per format, both norms named
    text = _markdown()
    section = text[text.index("(guide-new-model)="):text.index("(guide-decision-table)=")]
    assert section.index("```{glue:md} probe_table") < section.index("{glue:text}`rule_cost`")
    assert "{numref}`tbl-guide-probe`" in section and "<training-probe>" in section
    answers = re.findall(r"^- \*\*(b?float(?:16|32))\b", section, flags=re.M)
    assert sorted(answers) == sorted(FORMATS)
    assert "layer norm and RMS norm" in section
    for name in ("rule_equiv_from", "rule_cost", "rule_cost_ratio", "cost_small_1e6", "cost_small",
                 "rec_eps_sci0", "f16_zero_from_sci0", "tr_margin"):
        assert f"{{glue:text}}`{name}`" in section, name
    assert "<guide-training>" in section and "<training-rule>" in section
    assert "{ref}`why, and how far it reaches <guide-new-model>`" in text   # the short answer
    assert "for models like the one trained\nhere" in section
    # no sentence recommends a value float16 loses: the answer keeps eps in float32
    short = text[text.index("(guide-short-answer)="):text.index("(guide-new-model)=")]
    assert "measure $q$ at initialization" in short and "pass it as a float32 number" in short


def test_the_probe_table_is_the_stored_probe(g):
    from lneps.book.printing import sci

    probe = json.loads((TRAINING / "probe.json").read_text())
    table = _glued_markdown("probe_table")
    assert ":name: tbl-guide-probe" in table
    rows = [r for r in table.splitlines() if r.startswith("| ") and "model" not in r]
    # the recipe's pre-norm models at initialization (every seed's sites), and MiniLM trained
    groups: dict = {}
    for r in probe["lab"]:
        c = r["config"]
        if c["placement"] == "pre" and "layers" not in c and c["init"] in ("normal", "small"):
            groups.setdefault(f"{c['norm']}, init {c['init']}", []).extend(r["sites"].values())
    assert len(groups) == 4
    assert len(rows) == len(groups) + 1
    for label, sites in groups.items():
        (row,) = [r for r in rows if r.split(" | ")[0] == "| " + label]
        cells = [c.strip() for c in row.strip("|").split("|")]
        q_min = min(s["q_min"] for s in sites)
        assert cells[2] == sci(q_min, 1) and cells[3] == sci(float(np.median([s["q_median"] for s in sites])), 1)
    m = probe["minilm"]
    assert any(r.startswith(f"| {m['model']} (trained) | {sci(m['eps'], 0)} |") for r in rows)
    # MiniLM's row is lneps.torch's probe on the PyTorch module, as the page says
    assert m["route"].startswith("lneps.torch.probe on lneps.book.minilm.torch_model")
    assert g["net_name"] == m["model"] and "{glue:text}`net_name` built\nin PyTorch" in _markdown()


def test_the_page_s_probe_code_runs_and_gives_the_stored_q0():
    """The few lines the page shows, run as shown on all-MiniLM-L6-v2 as a PyTorch module over
    the stored probe's sentences: q0 is the stored first norm's median q (to the float32 spread
    derived in tests/book/test_minilm_torch_model.py)."""
    pytest.importorskip("torch")
    from lneps.book.minilm import files, torch_model

    text = _markdown()
    section = text[text.index("(guide-new-model)="):text.index("(guide-limits)=")]
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    stored = json.loads((TRAINING / "probe.json").read_text())["minilm"]
    m = files.load()
    ns = {"model": torch_model.build(m),
          "inputs": torch_model.pack(files.encode(m, sentences()[: stored["sentences"]]))}
    exec(code, ns)
    first = next(iter(stored["sites"].values()))
    assert len(ns["sites"]) == 13
    assert ns["q0"] == pytest.approx(first["q_median"], rel=2 * 1536 * 2.0**-24)


def test_the_limits_say_what_the_evidence_is_and_how_far_each_rule_reaches(g):
    text = _markdown()
    assert text.index("(guide-limits)=") < text.index("(guide-decision-table)=")
    limits = text[text.index("(guide-limits)="):text.index("(guide-decision-table)=")]
    rows = limits.split("\n* - ")[2:]
    # the four rules that rest on arithmetic alone are marked as independent of scale
    arithmetic = [r for r in rows if "**Any scale:** arithmetic alone" in r]
    assert [r.splitlines()[0] for r in arithmetic] == [
        "$\\varepsilon$ and the statistics in float32", "Two passes for the variance",
        "Never $\\varepsilon = 0$", "$\\varepsilon$ from the checkpoint"]
    # the measured ones say what they were measured on and reach no further
    for name in ("tr_layers", "tr_params_sci1", "tr_steps", "tr_cpu", "tr_torch", "tr_runs",
                 "tr_not_run", "tr_layers_max", "tr_width_max", "tr_steps_max", "cost_small_long",
                 "wide_outcome", "wide_seeds", "net_name", "n_sites", "n_sentences", "v_torch",
                 "fw_cpu"):
        assert f"{{glue:text}}`{name}`" in limits, name
    assert "not their GPU kernels" in limits
    (rule_row,) = [r for r in rows if r.startswith("$q_0/\\varepsilon \\ge$ {glue:text}`rule_equiv_from`")]
    assert "Models of that size and training length" in rule_row
    manifest = _training()[0]
    assert g["tr_steps"] == manifest["recipe"]["steps"] == 300
    assert g["tr_cpu"] == manifest["provenance"]["cpu"]["model"]
    assert manifest["provenance"]["torch"].startswith(g["tr_torch"] + ".")
    # the slices, and what was never run, from the stored configurations
    configs = [e["config"] for e in manifest["runs"].values()]
    assert g["tr_layers_max"] == max(c.get("layers") or 0 for c in configs) == 8
    assert g["tr_width_max"] == max(c.get("width") or 0 for c in configs) == 128
    assert g["tr_steps_max"] == max(c["steps"] for c in configs) == 900
    assert g["wide_seeds"] == len(_runs(norm="LayerNorm", init="small", placement="pre", eps=1e-5,
                                        layers=4, width=128))
    rms_small = any(c["norm"] == "RMSNorm" and c["init"] == "small" for c in configs)
    assert ("RMS norm at the small initialization" in g["tr_not_run"]) == (not rms_small)
    for name, tag in (("bfloat16", "bf16"), ("float16", "fp16")):
        ran = any(c["precision"].startswith(tag) and c["eps"] == 1e-6 for c in configs)
        assert (f"10⁻⁶ in {name}" in g["tr_not_run"]) == (not ran)
    assert "a model deeper than 8 blocks or wider than 128" in g["tr_not_run"]
    assert "longer than 900 steps" in g["tr_not_run"] and "a GPU" in g["tr_not_run"]


def test_the_model_size_is_the_models_own():
    torch = pytest.importorskip("torch")  # noqa: F841 (the lab's model needs it)
    from lneps.book.training.model import ModelSpec, TinyGPT

    g = glued(NB)
    assert g["tr_params"] == TinyGPT(ModelSpec(norm="LayerNorm", placement="pre")).n_params()
    assert g["tr_params_sci1"] == "1.1 × 10⁵"


def test_the_training_rows_facts(g):
    from lneps.book.printing import sci

    manifest, _, arrays = _training()
    gn0 = lambda **w: float(np.mean([arrays[r + ":grad_norm"][0] for r in _runs(**w)]))  # noqa: E731
    assert g["gn_zero_1e12"] == pytest.approx(gn0(placement="sandwich", init="zero_resid", eps=1e-12), rel=1e-6)
    assert g["gn_zero_1e5"] == pytest.approx(gn0(placement="sandwich", init="zero_resid", eps=1e-5), rel=1e-6)
    assert g["gn_pre"] == pytest.approx(gn0(placement="pre", init="normal", eps=1e-5, norm="LayerNorm"), rel=1e-6)
    # the gain eps**-1/2: a million times at 1e-12, hundreds at 1e-5
    assert g["gn_zero_1e12"] > 1e5 * g["gn_pre"] and 100 < g["gn_zero_1e5"] / g["gn_pre"] < 1e3
    # zero rows with eps = 0: dead from the first step, in every run
    for r in _runs(placement="sandwich", init="zero_resid", eps=0.0):
        assert manifest["runs"][r]["first_nonfinite_step"] == 0 and manifest["runs"][r]["stopped_at"] is not None
    # float16: eps stored in float16 (0) against 1e-12 kept in float32, paired by seed: within
    # the margin (the interval, and the outcome of the test alone)
    d = _runs(init="normal", placement="pre", eps=1e-12, precision="fp16_norm32", steps=150)
    e = _runs(init="normal", placement="pre", eps=1e-12, precision="fp16_eps16", steps=150)
    c = _paired(d, e)
    assert g["f16_eps16"] == _text(c) and g["f16_seeds"] == c["n"] == 10
    assert -MARGIN < c["lo"] and c["hi"] < MARGIN and c["pt"] < ALPHA
    for prec, dead in (("fp16_eps16", True), ("fp16_norm32", False)):
        for r in _runs(placement="sandwich", init="zero_resid", eps=1e-12, precision=prec, steps=150):
            assert (manifest["runs"][r]["stopped_at"] is not None) == dead, r
    # bfloat16: the norm in bfloat16 against the norm in float32, held-out loss after 150 steps
    b = _runs(init="normal", placement="pre", eps=1e-5, precision="bf16_norm32", steps=150)
    c = _runs(init="normal", placement="pre", eps=1e-5, precision="bf16_norm16", steps=150)
    bc = _paired(b, c)
    assert g["bf_norm"] == _text(bc) and -MARGIN < bc["lo"] and bc["hi"] < MARGIN
    assert bc["n"] == 10 and bc["pt"] < ALPHA                  # equivalent, on ten draws
    # a variance computed in float16 (the float16 kernel, setup (f)): zero below half float16's
    # smallest subnormal; with 1e-8 at the small initialization every run died at step 0, and
    # every float32 control at 1e-8 trained
    assert g["hk_zero_q"] == sci(2.0**-25, 0)
    f = _runs(placement="pre", init="small", eps=1e-8, precision="fp16_var16", steps=150)
    ctrl = _runs(placement="pre", init="small", eps=1e-8)
    assert len(f) == len(ctrl) == 10
    assert all(manifest["runs"][r]["first_nonfinite_step"] == 0 for r in f)
    assert all(manifest["runs"][r]["stopped_at"] is not None for r in f)
    assert all(manifest["runs"][r]["stopped_at"] is None for r in ctrl)
    assert float(np.median([arrays[r + ":q"][0, 0, 4] for r in f])) < 2.0**-25
    # one zero row in one batch with eps = 0: every parameter NaN in float32 and bfloat16, the
    # step skipped under loss scaling; and CPU autocast keeps a bfloat16 layer norm in bfloat16
    probe = manifest["zero_row_probe"]
    assert all(p["nonfinite_param_share"] == 1.0 for p in probe
               if p["eps"] == 0 and p["precision"] in ("fp32", "bf16_norm32"))
    assert all(p["step_skipped"] for p in probe if p["eps"] == 0 and p["precision"] == "fp16_norm32")
    assert manifest["autocast"]["output_dtype"]["autocast bfloat16, input bfloat16"]["layer_norm"] == "bfloat16"


def test_the_inference_rule_names_its_one_model(g):
    text = _markdown()
    assert "Trained transformers sit far above" not in text
    short = text[text.index("(guide-short-answer)="):text.index("(guide-new-model)=")]
    bullet = short[short.index("One trained model"):]
    bullet = bullet[:bullet.index("\n- ")]
    for name in ("net_name", "net_eps_sci0", "net_min_all_sci1", "torch_eps_sci0", "port_qe:.0f"):
        assert f"{{glue:text}}`{name}`" in bullet, name
    assert "the one trained network measured" in bullet
    assert g["net_name"] == "all-MiniLM-L6-v2" and g["net_name"] in markdown("trained_network.ipynb")
    assert g["net_eps"] == 1e-12 and g["port_qe"] < g["thr_float16"]
    # the inference table says the same, at the model's epsilon
    inference = text[text.index("(guide-inference)="):text.index("(guide-porting)=")]
    assert "one trained model measured" in inference and "{glue:text}`port_qe:.0f`" in inference


def test_framework_statements_name_the_cpu_kernels(g):
    data = {fw: json.loads((ROOT / "src/lneps/book/data/frameworks" / f"{fw}.json").read_text())
            for fw in ("torch", "flax", "onnxruntime")}
    assert data["torch"]["versions"]["torch"].startswith(g["v_torch"] + ".")
    assert data["torch"]["versions"]["torch"].endswith("+cpu")
    assert data["flax"]["versions"]["flax"].startswith(g["v_flax"] + ".")
    assert data["flax"]["versions"]["jax"].startswith(g["v_jax"] + ".")
    assert data["flax"]["versions"]["backend"] == "cpu"
    assert data["onnxruntime"]["versions"]["onnxruntime"].startswith(g["v_ort"] + ".")
    assert data["onnxruntime"]["versions"]["provider"] == "CPUExecutionProvider"
    for d in data.values():
        assert d["platform"]["cpu"].replace("(R)", "").startswith(g["fw_cpu"])
        assert ("avx512f" in d["cpu_flags"]) == (g["fw_isa"] == "AVX-512")
    # the decision table says once, before any framework statement, where they were measured
    text = _markdown()
    head = text[text.index("(guide-decision-table)="):text.index("(guide-training)=")]
    assert "CPU" in head and "not their" in head and "GPU kernels" in head
    for name in ("v_torch", "v_flax", "v_jax", "v_ort", "fw_cpu", "fw_isa"):
        assert f"{{glue:text}}`{name}`" in head, name
    assert text.index("(guide-decision-table)=") < text.index("**Frameworks:**")
    assert "torch's CPU kernel folds" in text and "torch's CPU autocast" in text
