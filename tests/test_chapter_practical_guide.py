"""The practical guide (book/practical_guide.ipynb): the first page after the introduction.

It is held to what it promises: at most 1,500 words as rendered; no number typed into its
markdown (every number is pasted from its own cells); every entry links to a section that
exists and proves it; and every pasted value agrees with an independent computation here
(closed forms, the formats' definitions, the stored measurements, the trained network's
activations).
"""

from __future__ import annotations

import json
import math
import re

import ml_dtypes
import numpy as np
import pytest
import yaml

from network_data import measurements
from notebooks import BOOK, ROOT, glued, read
from rendered import HTML, built_article, code_share, toc_pages

NB = "practical_guide.ipynb"
PAGE = "book/practical_guide"
WORD_BUDGET = 1500
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


def test_the_chapters_keep_their_numbers(built_book):
    code, output = built_book
    assert code == 0, output[-3000:]
    # the sidebar's numbers: the guide's part is unnumbered, so chapter 1 is still "1."
    html = (HTML / "book" / "layer_norm_by_hand.html").read_text(encoding="utf-8")
    assert re.search(r">\s*1\.\s*Layer normalization by hand", html)
    assert re.search(r">\s*9\.\s*A trained network", html)
    frameworks = (HTML / "book" / "frameworks.html").read_text(encoding="utf-8")
    assert "Figure 7.1" in frameworks


def test_within_the_word_budget(built_book):
    code, output = built_book
    assert code == 0, output[-3000:]
    share = code_share(built_article(PAGE + ".html"))
    assert share["total"] <= WORD_BUDGET, f"{share['total']} words rendered; at most {WORD_BUDGET}"
    assert share["code"] == 0, "the guide shows no code"


def test_it_opens_with_the_question(built_book):
    code, output = built_book
    assert code == 0, output[-3000:]
    main = built_article(PAGE + ".html")
    first = main.find("h1").find_next("p")
    question = first.find("strong").get_text(" ")
    assert question.startswith("Which") and question.rstrip().endswith("?")
    assert "in which precision" in question


# What counts as a typed number: any digit left once the roles ({glue:text}`x`, {ref}`x`),
# the labels, the directives' options and the format names are taken out. A formula may hold
# digits ($\varepsilon/(2q)$); a math span with no letter in it is a number, and counts.
ROLE = re.compile(r"\{[a-z:]+\}`[^`]*`")
LABEL = re.compile(r"^\([\w-]+\)=$", re.M)
OPTION = re.compile(r"^:[\w-]+:.*$", re.M)
FORMAT_NAME = re.compile(r"\b(?:b?float(?:16|32|64))\b")
MATH = re.compile(r"\$[^$]+\$")


def _typed_numbers(text: str) -> list[str]:
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
    return {label[1:-2] for label in labels}


def _rows():
    """(situation, format, markdown of that row) for every row of the decision table."""
    text = _markdown()
    for i, situation in enumerate(SITUATIONS):
        start = text.index(f"({situation})=")
        end = text.index(f"({SITUATIONS[i + 1]})=") if i + 1 < len(SITUATIONS) else len(text)
        block = text[start:end]
        rows = re.split(r"^\* - ", block, flags=re.M)[1:]
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


def test_the_built_links_land_on_sections(built_book):
    code, output = built_book
    assert code == 0, output[-3000:]
    main = built_article(PAGE + ".html")
    links = [a["href"] for a in main.select("a.reference.internal") if "#" in a.get("href", "")]
    assert len(links) > 20
    for href in links:
        page, anchor = href.split("#", 1)
        target = (HTML / "book" / page) if page else HTML / (PAGE + ".html")
        assert target.is_file(), href
        assert f'id="{anchor}"' in target.read_text(encoding="utf-8"), href


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
    probe = data["torch"]["probes"]["layer_norm | float16 | constant 60000 | 1e-12"]
    assert (g["c60k_value"], g["c60k_out"]) == (probe["input"][0], probe["output"][0]) == (60000.0, -2048.0)
    iv = data["flax"]["implied_variance"]
    assert g["iv_flax_fast"] == max(v["max_rel_error"] for v in iv.values() if v["op"] == "layer_norm")
    assert g["ort_no_bf16"] is True
    for fw in ("torch", "flax", "onnxruntime"):
        e = data[fw]["eps_handling"]["layer_norm | float16 | 1e-12"]
        assert e["matches"]["kept (float32)"]["rows_equal"] == e["rows"]
    assert g["onnx_eps_stored"] == float(np.float32(1e-5))
    assert g["rms_none_half"] == 2.0 ** -23
    assert (g["torch_eps"], g["flax_eps"], g["keras_eps"]) == (1e-5, 1e-6, 1e-3)
    assert (g["llama_default"], g["llama_released"]) == (1e-6, 1e-5)


def test_failure_facts(g):
    from lneps.rounded import mean_and_variance
    from lneps.book.survey import family_rows

    pad = np.zeros((2, 768), dtype=np.float16)
    pad[1] = 0.25
    assert g["pad_size"] == pad.size == g["nan_f16_bert"] and g["nan_default_bert"] == 0
    rows = family_rows("mean 6e4, sd 8", np.random.default_rng(7), 1024, 512, np.float16)
    # the one-pass variance, computed here without lneps: float32 sums of x and x*x
    x = rows.astype(np.float32)
    d = np.float32(x.shape[-1])
    mean = np.sum(x, axis=-1, dtype=np.float32) / d
    var = np.sum(x * x, axis=-1, dtype=np.float32) / d - mean * mean
    _, var_lneps = mean_and_variance(rows, dtype=np.float32, method="one-pass")
    assert g["n_rows"] == 1024 and g["neg_rows"] == int((var_lneps < 0).sum()) > 0
    assert int((var < 0).sum()) > 0  # the cancellation does not depend on the summation order
