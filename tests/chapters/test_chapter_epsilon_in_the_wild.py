"""The chapter "Epsilon in the wild" (the stability note's table of defaults): every quoted
number recomputed here.

The tables the chapter shows must be exactly the ones lneps.book.defaults generates; each number
glued into the prose is recomputed with lneps (or from its closed form) and compared.
"""

import re

import ml_dtypes
import numpy as np
import pytest

import lneps
from lneps.book import defaults, eps_swap, eps_tables
from notebooks import glued, read, stream_text
from bibliography import EXPECTED_VERDICTS, bib_entries

NB = "epsilon_in_the_wild.ipynb"


@pytest.fixture(scope="module")
def g():
    return glued(NB)


def notebook_code() -> str:
    return "\n".join(c.source for c in read(NB).cells if c.cell_type == "code")


@pytest.fixture(scope="module")
def chapter_rows():
    """The chapter's random rows, regenerated here from its generator's seed and recipe (cells
    of sections "Porting ..." and "RMSNorm ..."): the layer-norm rows, then the RMS targets and
    the two row shapes drawn from the same generator."""
    (seed,) = {int(m) for m in re.findall(r"np\.random\.default_rng\((\d+)\)", notebook_code())}
    rng = np.random.default_rng(seed)
    sigmas = np.array([1.0, 0.3, 0.1, 0.03, 0.01, 3e-3, 1e-3])
    rows = (rng.standard_normal((len(sigmas), 64, 768)) * sigmas[:, None, None]
            + rng.normal(0, 1, (len(sigmas), 64, 1)))
    targets = np.logspace(-3, 1, 25)
    shapes = {
        "Gaussian": rng.standard_normal((len(targets), 2, 4096)),
        "Student t (3 dof)": rng.standard_t(3, (len(targets), 2, 4096)),
    }
    return sigmas, rows, targets, shapes


def glued_mime(name: str, mime: str) -> str:
    for cell in read(NB).cells:
        for out in cell.get("outputs", []):
            record = out.get("metadata", {}).get("scrapbook", {})
            if record.get("name") == name:
                return out["data"][record["mime_prefix"] + mime]
    raise KeyError(name)


TABLES = ("note_table", "defaults_layernorm", "defaults_rmsnorm", "port_table")


def test_the_shown_tables_are_the_generated_ones():
    assert glued_mime("note_table", "text/markdown") == eps_tables.note_table_markdown()
    for kind in defaults.KINDS:
        assert (glued_mime(f"defaults_{kind.lower()}", "text/markdown")
                == eps_tables.defaults_markdown(kind=kind))
    text = "".join(c.source for c in read(NB).cells if c.cell_type == "markdown")
    for name in TABLES:
        assert f"```{{glue:md}} {name}\n:format: myst" in text
        # Numbers in the tables are math, so none wraps inside a cell ("1e-/12").
        assert not re.search(r"\de-\d", glued_mime(name, "text/markdown")), name


def test_every_cite_in_the_chapter_is_in_references_bib():
    text = "".join(c.source for c in read(NB).cells if c.cell_type == "markdown")
    text += "".join(glued_mime(name, "text/markdown") for name in TABLES)
    keys = {k.strip() for group in re.findall(r"\{cite\}`([^`]+)`", text) for k in group.split(",")}
    assert keys - set(bib_entries()) == set()
    # Every issue thread of the facts file is cited somewhere in the chapter.
    for key in ("gh-pytorch-41527", "gh-tensorflow-24979", "gh-deepspeed-581", "gh-pytorch-86580",
                "gh-transformers-15332", "gh-llama-771", "gh-llamacpp-2384"):
        assert key in keys


def test_note_table_verdicts(g):
    assert g["n_note_rows"] == 6
    assert g["note_title"] == "Practical ε Values Across Frameworks"
    counts = list(EXPECTED_VERDICTS.values())
    assert g["n_right"] == counts.count("right") == 3
    assert g["n_misnamed"] == counts.count("right value, wrong name") == 1
    assert g["n_released_only"] == counts.count("right for released checkpoints only") == 2
    assert g["n_wrong"] == 0
    assert (g["llama_default"], g["llama_released"]) == ("1e-6", "1e-5")
    assert (g["mistral_default"], g["mistral_released"]) == ("1e-6", "1e-5")
    assert g["keras_default"] == "1e-3"
    printed = stream_text(NB)[0].splitlines()
    assert printed == ["LlamaConfig.rms_norm_eps: library default 1e-06",
                       "  1e-05 in Llama-2-7b-hf config.json", "  1e-05 in Meta-Llama-3-8B config.json",
                       "  1e-05 in Meta's llama/model.py (norm_eps)"]
    # The verdict on TensorFlow's row says what the prose says: right value, Keras's name.
    note = glued_mime("note_table", "text/markdown")
    assert "**right value, wrong name**: the layer is Keras's, not TensorFlow's" in note


def test_onnx_and_torch_rmsnorm_values(g):
    assert g["onnx_f32"] == float(np.float32(1e-5))
    assert f"{g['onnx_f32']:.9e}" == "9.999999747e-06"
    assert g["onnx_f32_error"] == pytest.approx(abs(float(np.float32(1e-5)) - 1e-5), rel=1e-12)
    assert g["torch_rms_eps"] == float(np.finfo(np.float32).eps) == 2.0**-23
    assert g["torch_rms_eps_log2"] == -23
    assert g["torch_rms_eps_f64"] == 2.0**-52
    assert (g["n_rows"], g["n_rms_rows"]) == (12, 6)
    # "smaller than every value configured for an RMS-style layer in the table"
    configured = [v for r in defaults.DEFAULTS if r.kind == "RMSNorm" and r.library_default
                  for v in (r.library_default, *r.released_values)]
    assert g["min_rms_configured"] == "1e-6" == eps_tables.fmt_eps(min(configured))
    assert g["torch_rms_eps_f64"] < g["torch_rms_eps"] < min(configured)
    assert g["rms_none_ratio"] == pytest.approx(1e-6 / 2.0**-23) and round(g["rms_none_ratio"], 1) == 8.4


def test_bert_eps_underflows_in_float16_only(g):
    assert np.float16(1e-12) == 0 and g["bert_eps_f16"] == 0.0
    assert (g["bert_eps_f16_fate"], g["bert_eps_bf16_fate"]) == ("zero", "normal")
    assert float(ml_dtypes.finfo(ml_dtypes.bfloat16).smallest_normal) < g["bert_eps_bf16"]
    assert g["bert_eps_bf16"] == float(np.asarray(1e-12, dtype=ml_dtypes.bfloat16)) > 0
    assert g["tiny16"] == float(ml_dtypes.finfo(np.float16).smallest_subnormal)
    assert 1e-12 < g["tiny16"] / 2  # below half the smallest subnormal: rounds to 0


def test_constant_row_gives_nan_only_on_the_all_float16_path(g):
    pad = np.zeros((2, 768), dtype=np.float16)
    pad[1] = 0.25
    naive = lneps.layer_norm(pad, eps=1e-12, compute_dtype=np.float16)
    assert naive.dtype == np.float16 and np.isnan(naive).all()
    assert not np.isnan(lneps.layer_norm(pad, eps=1e-5, compute_dtype=np.float16)).any()
    bf = pad.astype(ml_dtypes.bfloat16)
    assert not np.isnan(lneps.layer_norm(bf, eps=1e-12, compute_dtype=ml_dtypes.bfloat16).astype(np.float32)).any()
    default = lneps.layer_norm(pad, eps=1e-12)
    assert default.dtype == np.float16 and (default == 0).all()
    assert g["pad_size"] == pad.size == g["nan_f16_bert"]
    assert g["nan_f16_1e5"] == g["nan_bf16_bert"] == g["nan_default_bert"] == 0


def test_porting_measured_matches_closed_form_on_the_chapters_rows(g, chapter_rows):
    sigmas, rows, _, _ = chapter_rows
    measured = eps_swap.relative_change(rows, 1e-12, 1e-5)
    # The same rows as the notebook's: the glued medians come out again.
    for s, key in ((1.0, "port_rel_1"), (0.1, "port_rel_01"), (0.01, "port_rel_001"),
                   (1e-3, "port_rel_1e3")):
        i = int(np.flatnonzero(sigmas == s)[0])
        assert float(np.median(measured[i])) == pytest.approx(g[key], rel=1e-12)
    # q recomputed independently of lneps (NumPy's biased variance), then the closed form
    # |sqrt((q + a) / (q + b)) - 1| written out here.
    q = rows.var(axis=-1)
    want = np.abs(np.sqrt((q + 1e-12) / (q + 1e-5)) - 1)
    agree = float(np.max(np.abs(measured / want - 1)))
    assert agree < 1e-8
    assert g["port_agree"] < 1e-8
    # The table shown: one line per spread, its median change and the output std at 1e-5.
    lines = glued_mime("port_table", "text/markdown").splitlines()[2:]
    assert [line.split(" | ")[0].strip("| ") for line in lines] == [f"{s:g}" for s in sigmas]
    out_5 = lneps.layer_norm(rows, eps=1e-5)
    for line, m, std in zip(lines, np.median(measured, axis=-1), out_5.std(axis=-1).mean(axis=-1)):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[1] == f"${eps_tables.tex_eps(float(m))}$" and cells[3] == f"{std:.3f}"
    np.testing.assert_allclose(eps_swap.predicted_relative_change(q, 1e-12, 1e-5), want, rtol=1e-9)


def test_porting_1e12_to_1e5(g):
    # Sample rows: q is sigma^2 up to sampling noise (d = 768: about 5%), so compare with
    # the closed form loosely; the inverted closed form exactly.
    def closed(sigma):
        return float(eps_swap.predicted_relative_change(sigma**2, 1e-12, 1e-5))

    assert g["port_rel_1"] == pytest.approx(closed(1.0), rel=0.1)
    assert g["port_rel_01"] == pytest.approx(closed(0.1), rel=0.1)
    assert g["port_rel_001"] == pytest.approx(closed(0.01), rel=0.1)
    assert g["port_rel_1e3"] == pytest.approx(closed(1e-3), rel=0.05)
    assert 4e-6 < g["port_rel_1"] < 6e-6  # about 1e-5 / 2
    # The largest output shift: about max|u| (3 to 4 for 768 Gaussian numbers) times the change.
    assert 2 < g["port_shift_1"] / g["port_rel_1"] < 5
    assert 2 < g["port_shift_01"] / g["port_rel_01"] < 5
    std_1e5 = 1e-3 / np.sqrt(1e-6 + 1e-5)  # sigma / sqrt(sigma^2 + eps)
    assert g["port_std_1e3"] == pytest.approx(std_1e5, rel=0.05)
    assert g["port_std_1e3_12"] == pytest.approx(1.0, abs=1e-3)
    assert g["sqrt_1e5"] == pytest.approx(np.sqrt(1e-5), rel=1e-15)
    # Check yourself 2: the large-q estimate |d eps| / (2 sigma^2) at sigma = 0.1, near the measurement.
    assert g["port_approx_01"] == pytest.approx(5e-4, rel=1e-6)
    assert g["port_approx_01"] == pytest.approx(g["port_rel_01"], rel=0.1)
    for change, key in ((1e-3, "port_sigma_1e3"), (1e-4, "port_sigma_1e4")):
        sigma = g[key]
        assert closed(sigma) == pytest.approx(change, rel=1e-9)
        assert sigma == pytest.approx(np.sqrt(1e-5 / (2 * change)), rel=0.01)


def test_rmsnorm_1e6_versus_1e5(g):
    for r, key in ((1.0, "rms_rel_1"), (0.1, "rms_rel_01"), (0.03, "rms_rel_003"),
                   (0.01, "rms_rel_001"), (0.003, "rms_rel_0003")):
        want = float(eps_swap.predicted_relative_change(r * r, 1e-5, 1e-6))
        assert g[key] == pytest.approx(want, rel=1e-8)
    assert g["rms_rel_1"] == pytest.approx(4.5e-6, rel=1e-4)  # (1e-5 - 1e-6) / 2
    assert round(g["rms_rel_0003"] * 100) == 38
    for change, key in ((1e-3, "rms_for_1e3"), (1e-2, "rms_for_1e2")):
        r = g[key]
        assert float(eps_swap.predicted_relative_change(r * r, 1e-5, 1e-6)) == pytest.approx(change, rel=1e-9)


def test_rmsnorm_measured_matches_closed_form_on_the_chapters_rows(g, chapter_rows):
    _, _, targets, shapes = chapter_rows
    for name, z in shapes.items():
        # Unit RMS per row, then scaled: NumPy here, lneps.rms_norm(eps=0) in the notebook.
        x = z / np.sqrt(np.mean(z**2, axis=-1, keepdims=True)) * targets[:, None, None]
        measured = eps_swap.relative_change(x, 1e-5, 1e-6, kind="RMSNorm")
        q = np.mean(x**2, axis=-1)
        want = np.abs(np.sqrt((q + 1e-5) / (q + 1e-6)) - 1)
        agree = float(np.max(np.abs(measured / want - 1)))
        assert agree < 1e-8, name
        # Every row of the shape gives the curve's value at its RMS: the shape does not matter.
        curve = np.abs(np.sqrt((targets**2 + 1e-5) / (targets**2 + 1e-6)) - 1)
        np.testing.assert_allclose(measured.mean(axis=-1), curve, rtol=1e-8)
    assert g["rms_agree"] < 1e-8


def test_the_chapter_uses_the_package_not_hand_copies():
    code = notebook_code()
    assert "precision.eps_survival_table(" in code and "precision.format_info(" in code
    assert "rms_norm(z, eps=0)" in code
    assert "eps_swap.relative_change(" in code and "eps_swap.predicted_relative_change(" in code
    # No hand-computed subnormal, stored eps or mean square / variance in the notebook.
    for pattern in (r"finfo\([^)]*\)\.smallest_subnormal", r"np\.float16\(bert_eps\)",
                    r"\(\w+ \* \w+\)\.mean\(", r"\.var\("):
        assert not re.search(pattern, code), pattern


def test_the_figure_is_glued_and_shown_numbered_with_caption_and_alt_text():
    assert glued_mime("fig-eps-swap", "image/png")
    text = "".join(c.source for c in read(NB).cells if c.cell_type == "markdown")
    block = text[text.index("```{glue:figure} fig-eps-swap"):]
    block = block[:block.index("\n```\n")]
    assert ":name: fig-eps-swap" in block and ":alt: Two log-log panels" in block
    assert "Lines: the closed form {eq}`eq-eps-swap`" in block
    assert "{numref}`fig-eps-swap`" in text


def test_the_exercise_that_changes_the_code(g):
    # Exercise 4: Flax's 1e-6 run at PyTorch's 1e-5; the 1% spread, and which spreads pass it.
    sigma = g["flax_sigma_1pct"]
    assert float(eps_swap.predicted_relative_change(sigma**2, 1e-6, 1e-5)) == pytest.approx(0.01, rel=1e-9)
    assert sigma == pytest.approx(np.sqrt(9e-6 / 0.02), rel=0.02)
    assert 0.01 < sigma < 0.03  # so 0.01, 0.003 and 0.001 of the cell's spreads change by more
    assert "replace `1e-12, 1e-5` by\n   `1e-6, 1e-5`" in "".join(
        c.source for c in read(NB).cells if c.cell_type == "markdown")
