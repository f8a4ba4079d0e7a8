"""lneps.book.defaults against the verified facts (shared/reference/epsilon-facts.md) and the
stability note's table of defaults ("Numerical Stability in Normalization - The Epsilon
Problem", /work/shared/seeds/004_*.txt).

The expected values below are transcribed from the facts file and the note, independently of
the module and its data files: a row that drifts from its source fails here. The loaders are
tested on broken copies of the data files: every bad row is refused with an error naming it.
"""

import dataclasses
import re

import ml_dtypes
import numpy as np
import pytest

from lneps.book import defaults, eps_tables
from lneps.book.defaults import by_key
from bibliography import EXPECTED_VERDICTS, bib_entries
from notebooks import ROOT

# key -> (layer, parameter, library default, kind, released values in the facts file)
FACTS = {
    "torch-layernorm": ("torch.nn.LayerNorm", "eps", 1e-5, "LayerNorm", ()),
    "torch-rmsnorm": ("torch.nn.RMSNorm", "eps", None, "RMSNorm", ()),
    "keras-layernorm": ("keras.layers.LayerNormalization", "epsilon", 1e-3, "LayerNorm", ()),
    "flax-layernorm": ("flax.linen.LayerNorm", "epsilon", 1e-6, "LayerNorm", ()),
    "flax-rmsnorm": ("flax.linen.RMSNorm", "epsilon", 1e-6, "RMSNorm", ()),
    "onnx-layernorm": ("LayerNormalization (opset 17)", "epsilon", 1e-5, "LayerNorm", ()),
    "hf-bert": ("BertConfig", "layer_norm_eps", 1e-12, "LayerNorm", (1e-12,)),
    "hf-gpt2": ("GPT2Config", "layer_norm_epsilon", 1e-5, "LayerNorm", (1e-5, 1e-5)),
    "hf-llama": ("LlamaConfig", "rms_norm_eps", 1e-6, "RMSNorm", (1e-5, 1e-5, 1e-5)),
    "hf-mistral": ("MistralConfig", "rms_norm_eps", 1e-6, "RMSNorm", (1e-5,)),
    "hf-t5": ("T5Config", "layer_norm_epsilon", 1e-6, "RMSNorm", ()),
    "hf-gemma": ("GemmaConfig", "rms_norm_eps", 1e-6, "RMSNorm", ()),
}

# Where each value was read (facts file), as the last part of the row's source path.
SOURCES = {
    "torch-layernorm": "torch/nn/modules/normalization.py",
    "torch-rmsnorm": "torch/nn/modules/normalization.py",
    "keras-layernorm": "keras/src/layers/normalization/layer_normalization.py",
    "flax-layernorm": "flax/linen/normalization.py",
    "flax-rmsnorm": "flax/linen/normalization.py",
    "onnx-layernorm": "onnx/defs/nn/defs.cc",
    "hf-bert": "models/bert/configuration_bert.py",
    "hf-gpt2": "models/gpt2/configuration_gpt2.py",
    "hf-llama": "models/llama/configuration_llama.py",
    "hf-mistral": "models/mistral/configuration_mistral.py",
    "hf-t5": "models/t5/configuration_t5.py",
    "hf-gemma": "models/gemma/configuration_gemma.py",
}

# The stability note, "Practical eps Values Across Frameworks", verbatim.
NOTE = [
    ("PyTorch LayerNorm", 1e-5),
    ("TensorFlow LayerNorm", 1e-3),
    ("Llama 2 / 3 (RMSNorm)", 1e-5),
    ("Mistral (RMSNorm)", 1e-5),
    ("GPT-2 (LayerNorm)", 1e-5),
    ("BERT (LayerNorm)", 1e-12),
]

ISSUE_THREADS = {
    "gh-pytorch-41527": "github.com/pytorch/pytorch/issues/41527",
    "gh-tensorflow-24979": "github.com/tensorflow/tensorflow/pull/24979",
    "gh-deepspeed-581": "github.com/deepspeedai/DeepSpeed/issues/581",
    "gh-pytorch-86580": "github.com/pytorch/pytorch/issues/86580",
    "gh-transformers-15332": "github.com/huggingface/transformers/pull/15332",
    "gh-llama-771": "github.com/meta-llama/llama/issues/771",
    "gh-llamacpp-2384": "github.com/ggml-org/llama.cpp/pull/2384",
}


def test_every_fact_row_is_present_with_its_value():
    assert [r.key for r in defaults.DEFAULTS] == list(FACTS)
    for key, (layer, parameter, default, kind, released) in FACTS.items():
        row = by_key(key)
        assert (row.layer, row.parameter, row.kind) == (layer, parameter, kind)
        assert row.library_default == default
        assert tuple(r.value for r in row.released) == released
        assert row.source.endswith(SOURCES[key])


def test_library_default_and_released_value_are_kept_apart_for_llama_and_mistral():
    for key in ("hf-llama", "hf-mistral"):
        row = by_key(key)
        assert row.library_default == 1e-6 and row.released_values == (1e-5,)
    names = [r.name for r in by_key("hf-llama").released]
    assert any("Llama-2-7b-hf" in n for n in names) and any("Meta-Llama-3-8B" in n for n in names)
    assert any("model.py" in r.source for r in by_key("hf-llama").released)


def test_rows_are_immutable():
    row = by_key("hf-bert")
    assert isinstance(defaults.DEFAULTS, tuple) and isinstance(row.released, tuple)
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.library_default = 1e-5
    with pytest.raises(ValueError, match="kind"):
        dataclasses.replace(row, kind="BatchNorm")


def test_every_row_and_release_is_cited_through_references_bib():
    entries = bib_entries()
    keys = {r.cite for r in defaults.DEFAULTS} | {
        rel.cite for r in defaults.DEFAULTS for rel in r.released
    }
    for key in keys | set(ISSUE_THREADS):
        assert key in entries, f"{key} missing from references.bib"
        assert re.search(r"url\s*=\s*\{https://", entries[key]), key
    for key in keys - {"pytorch-layernorm"} | set(ISSUE_THREADS):
        assert entries[key].startswith("@misc") and "howpublished" in entries[key], key
    for key, url in ISSUE_THREADS.items():
        assert url in entries[key]


def test_onnx_epsilon_is_stored_as_float32():
    onnx = by_key("onnx-layernorm")
    stored = defaults.stored_eps(onnx)
    assert stored == float(np.float32(1e-5)) != 1e-5
    assert f"{stored:.9e}" == "9.999999747e-06"
    assert defaults.stored_eps(by_key("torch-layernorm")) == 1e-5  # 64-bit rows unchanged


def test_torch_rmsnorm_default_is_the_machine_epsilon_of_the_computation_type():
    row = by_key("torch-rmsnorm")
    for dt in (np.float16, ml_dtypes.bfloat16, np.float32):
        assert defaults.effective_eps(row, dt) == 2.0**-23 == np.finfo(np.float32).eps
    assert defaults.effective_eps(row, np.float64) == 2.0**-52
    assert defaults.effective_eps(by_key("hf-t5"), np.float16) == 1e-6
    with pytest.raises(ValueError, match="input_dtype"):
        defaults.torch_rmsnorm_eps(np.int32)
    with pytest.raises(TypeError, match="input_dtype"):
        defaults.torch_rmsnorm_eps("no-such-type")


def test_note_table_is_the_notes_and_each_row_gets_its_verdict():
    assert [(r.label, r.eps) for r in defaults.NOTE_TABLE] == NOTE
    assert defaults.NOTE_TITLE == "Practical ε Values Across Frameworks"
    got = {v.claim.label: v.verdict for v in defaults.check_note_table()}
    assert got == EXPECTED_VERDICTS
    tf = next(v for v in defaults.check_note_table() if v.claim.label.startswith("TensorFlow"))
    assert tf.fact.layer == "keras.layers.LayerNormalization"
    assert (tf.value, tf.name_right) == ("right", False)
    assert eps_tables.explanation(tf) == "the layer is Keras's, not TensorFlow's"
    for v in defaults.check_note_table():
        assert v.verdict in defaults.VERDICTS
        assert (eps_tables.explanation(v) == "") == (v.verdict == "right"), v.claim.label


def test_names_match_the_framework_or_the_model_family():
    assert defaults.names_match("PyTorch", by_key("torch-layernorm"))
    assert defaults.names_match("Llama 2 / 3", by_key("hf-llama"))  # model "Llama"
    assert defaults.names_match("bert", by_key("hf-bert"))
    assert not defaults.names_match("TensorFlow", by_key("keras-layernorm"))
    assert not defaults.names_match("Mistral", by_key("hf-llama"))


def test_verdict_reaches_every_answer():
    llama, bert, keras = by_key("hf-llama"), by_key("hf-bert"), by_key("keras-layernorm")
    assert defaults.verdict(1e-5, llama) == "right for released checkpoints only"
    assert defaults.verdict(1e-6, llama) == "right for the library default only"
    assert defaults.verdict(1e-5, bert) == "wrong"  # the Electra port's mistake
    assert defaults.verdict(1e-5, keras) == "wrong"
    assert defaults.verdict(2.0**-23, by_key("torch-rmsnorm")) == "right"
    with pytest.raises(ValueError, match="eps"):
        defaults.verdict(-1e-5, llama)


def test_markdown_tables_cite_every_row_and_keep_columns_apart():
    table = eps_tables.defaults_markdown()
    lines = table.splitlines()
    assert lines[0] == "| layer | default ε | released checkpoints |"
    assert len(lines) == 2 + len(defaults.DEFAULTS)
    for row, line in zip(defaults.DEFAULTS, lines[2:]):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert len(cells) == 3
        assert "{cite}`" + row.cite + "`" in cells[0] and f"`{row.layer}`" in cells[0]
        for rel in row.released:
            assert "{cite}`" + rel.cite + "`" in cells[2]
        assert (cells[2] == "–") == (not row.released)
    llama = [c.strip() for c in lines[2 + [r.key for r in defaults.DEFAULTS].index("hf-llama")].split("|")]
    assert llama[2] == "$10^{-6}$" and llama[3].startswith("$10^{-5}$ in Llama-2-7b-hf")
    # Numbers are typeset as math, so none can break across lines inside a cell.
    assert r"$9.999999747 \times 10^{-6}$" in table and r"$2^{-23} = 1.19 \times 10^{-7}$" in table
    assert not re.search(r"\d+e-\d", table)
    by_kind = {k: eps_tables.defaults_markdown(kind=k).splitlines()[2:] for k in defaults.KINDS}
    assert len(by_kind["LayerNorm"]) + len(by_kind["RMSNorm"]) == len(defaults.DEFAULTS)
    assert sorted(by_kind["LayerNorm"] + by_kind["RMSNorm"]) == sorted(lines[2:])
    with pytest.raises(ValueError, match="kind"):
        eps_tables.defaults_markdown(kind="BatchNorm")
    note = eps_tables.note_table_markdown().splitlines()
    assert len(note) == 2 + len(NOTE)
    assert all("{cite}`" in line for line in note[2:])
    assert "**right value, wrong name**: the layer is Keras's, not TensorFlow's" in note[3]
    assert "**right for released checkpoints only**: `LlamaConfig()` gives $10^{-6}$" in note[4]
    assert not re.search(r"\d+e-\d", eps_tables.note_table_markdown())


def test_fmt_eps_and_tex_eps():
    assert [eps_tables.fmt_eps(v) for v in (1e-5, 1e-12, 1e-3)] == ["1e-5", "1e-12", "1e-3"]
    assert eps_tables.fmt_eps(2.0**-23) == "1.19e-07"
    assert [eps_tables.tex_eps(v) for v in (1e-5, 1e-12, 1.0)] == ["10^{-5}", "10^{-12}", "10^{0}"]
    assert eps_tables.tex_eps(2.0**-23) == r"1.19 \times 10^{-7}"
    assert eps_tables.tex_eps(float(np.float32(1e-5)), 10) == r"9.999999747 \times 10^{-6}"


def test_verdict_tolerance_is_relative_1e12_as_documented():
    torch_ln = by_key("torch-layernorm")  # library default 1e-5, no release
    assert defaults.SAME_EPS_RTOL == 1e-12
    assert "relative tolerance of" in defaults.verdict.__doc__ and "1e-12" in defaults.verdict.__doc__
    assert defaults.verdict(10**-5, torch_ln) == "right"
    assert defaults.verdict(1e-5 * (1 + 5e-13), torch_ln) == "right"
    assert defaults.verdict(1e-5 * (1 + 2e-12), torch_ln) == "wrong"
    # ONNX's float32 attribute (relative difference 2.5e-8) is not "the same value".
    assert defaults.verdict(defaults.stored_eps(by_key("onnx-layernorm")), torch_ln) == "wrong"


# --- the data files and their loaders ----------------------------------------------------

DATA = ROOT / "src" / "lneps" / "book" / "data"


def test_the_tables_are_read_from_the_packages_data_files():
    from importlib import resources

    files = resources.files("lneps.book") / "data"
    assert (files / "framework_defaults.toml").is_file()
    assert (files / "stability_note_table.toml").is_file()
    assert defaults.load_defaults() == defaults.DEFAULTS
    assert defaults.load_defaults(DATA / "framework_defaults.toml") == defaults.DEFAULTS
    assert defaults.load_note_table() == (defaults.NOTE_TITLE, defaults.NOTE_TABLE)
    # pyproject.toml installs them with the package (not only the editable checkout).
    assert '"lneps.book" = ["data/*.toml"]' in (ROOT / "pyproject.toml").read_text()


def _broken(tmp_path, name: str, old: str, new: str):
    text = (DATA / name).read_text()
    assert old in text, old
    path = tmp_path / name
    path.write_text(text.replace(old, new, 1))
    return path


DEFAULTS_FILE, NOTE_FILE = "framework_defaults.toml", "stability_note_table.toml"


@pytest.mark.parametrize("name, old, new, message", [
    (DEFAULTS_FILE, 'cite = "pytorch-layernorm"\n', "", r"row 1 \('torch-layernorm'\): missing field 'cite'"),
    (DEFAULTS_FILE, 'kind = "LayerNorm"\n', 'kind = "BatchNorm"\n',
     r"row 1 \('torch-layernorm'\): kind must be one of"),
    (DEFAULTS_FILE, "library_default = 1e-5\n", "library_default = -1e-5\n", r"row 1 .*positive finite"),
    (DEFAULTS_FILE, "library_default = 1e-5\n", "library_default = true\n",
     r"row 1 .*'library_default' has the wrong type"),
    (DEFAULTS_FILE, 'library_default = "None"\n', 'library_default = "none"\n', r"row 2 \('torch-rmsnorm'\).*\"None\""),
    (DEFAULTS_FILE, 'note = "biased variance', 'notes = "biased variance',
     r"row 1 \('torch-layernorm'\): unknown field\(s\) \['notes'\]"),
    (DEFAULTS_FILE, 'key = "keras-layernorm"', 'key = "torch-layernorm"', r"repeated key\(s\) \['torch-layernorm'\]"),
    (DEFAULTS_FILE, 'attribute_dtype = "float32"', 'attribute_dtype = "float33"',
     r"row 6 \('onnx-layernorm'\): attribute_dtype"),
    (DEFAULTS_FILE, "  value = 1e-12\n", '  value = "1e-12"\n', r"row 7 \('hf-bert'\), released 1: field 'value'"),
    (DEFAULTS_FILE, "[[row]]\nkey = \"flax-rmsnorm\"", "[[row]\nkey = \"flax-rmsnorm\"", "not valid TOML"),
    (NOTE_FILE, 'matches = "hf-mistral"', 'matches = "hf-mistrall"',
     r"row 4 \('Mistral \(RMSNorm\)'\): matches 'hf-mistrall'"),
    (NOTE_FILE, "eps = 1e-12\n", "eps = 0.0\n", r"row 6 \('BERT \(LayerNorm\)'\): epsilon must be a positive finite"),
    (NOTE_FILE, 'names = "GPT-2"\n', "", r"row 5 \('GPT-2 \(LayerNorm\)'\): missing field 'names'"),
    (NOTE_FILE, "eps = 1e-3\n", "eps = inf\n", r"row 2 .*positive finite"),
    (NOTE_FILE, 'title = "Practical', 'heading = "Practical', r"missing the string field 'title'"),
])
def test_a_bad_row_is_refused_with_its_name(tmp_path, name, old, new, message):
    path = _broken(tmp_path, name, old, new)
    load = defaults.load_defaults if name == DEFAULTS_FILE else defaults.load_note_table
    with pytest.raises(ValueError, match=message) as err:
        load(path)
    assert str(path) in str(err.value)


def test_a_file_with_no_rows_is_refused(tmp_path):
    path = tmp_path / "empty.toml"
    path.write_text('title = "x"\n')
    with pytest.raises(ValueError, match=r"no \[\[row\]\] tables"):
        defaults.load_defaults(path)
    with pytest.raises(ValueError, match=r"no \[\[row\]\] tables"):
        defaults.load_note_table(path)


def test_the_note_table_can_be_judged_against_other_rows():
    # A custom set of facts: the loader checks "matches" against it, not against DEFAULTS.
    only_torch = (by_key("torch-layernorm"),)
    with pytest.raises(ValueError, match="not a key of the defaults"):
        defaults.load_note_table(rows=only_torch)
    table = defaults.NOTE_TABLE[:1]
    (v,) = defaults.check_note_table(table, only_torch)
    assert v.verdict == "right" and v.fact is only_torch[0]
