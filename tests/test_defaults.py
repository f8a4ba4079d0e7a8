"""lneps.defaults against the verified facts (shared/reference/epsilon-facts.md) and seed 004.

The expected values below are transcribed from the facts file, independently of the module:
a row that drifts from its source fails here.
"""

import dataclasses
import re

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lneps import defaults
from lneps.defaults import by_key
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

# Seed 004, "Practical eps values across frameworks", verbatim.
SEED = [
    ("PyTorch LayerNorm", 1e-5),
    ("TensorFlow LayerNorm", 1e-3),
    ("Llama 2 / 3 (RMSNorm)", 1e-5),
    ("Mistral (RMSNorm)", 1e-5),
    ("GPT-2 (LayerNorm)", 1e-5),
    ("BERT (LayerNorm)", 1e-12),
]

EXPECTED_VERDICTS = {
    "PyTorch LayerNorm": "right",
    "TensorFlow LayerNorm": "right",  # right value, but it is Keras's LayerNormalization
    "Llama 2 / 3 (RMSNorm)": "right for released checkpoints only",
    "Mistral (RMSNorm)": "right for released checkpoints only",
    "GPT-2 (LayerNorm)": "right",
    "BERT (LayerNorm)": "right",
}

ISSUE_THREADS = {
    "gh-pytorch-41527": "github.com/pytorch/pytorch/issues/41527",
    "gh-tensorflow-24979": "github.com/tensorflow/tensorflow/pull/24979",
    "gh-deepspeed-581": "github.com/deepspeedai/DeepSpeed/issues/581",
    "gh-pytorch-86580": "github.com/pytorch/pytorch/issues/86580",
    "gh-transformers-15332": "github.com/huggingface/transformers/pull/15332",
    "gh-llama-771": "github.com/meta-llama/llama/issues/771",
    "gh-llamacpp-2384": "github.com/ggml-org/llama.cpp/pull/2384",
}


def bib_entries() -> dict[str, str]:
    text = (ROOT / "references.bib").read_text()
    starts = list(re.finditer(r"@(\w+)\{([^,]+),", text))
    entries = {}
    for m, nxt in zip(starts, starts[1:] + [None]):
        key = m.group(2).strip()
        assert key not in entries, f"duplicate bib key {key}"
        entries[key] = text[m.start(): nxt.start() if nxt else len(text)]
    return entries


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


def test_seed_table_is_the_seed_and_each_row_gets_its_verdict():
    assert [(s.label, s.eps) for s in defaults.SEED_TABLE] == SEED
    got = {v.seed.label: v.verdict for v in defaults.compare_seed()}
    assert got == EXPECTED_VERDICTS
    tf = next(v for v in defaults.compare_seed() if v.seed.label.startswith("TensorFlow"))
    assert tf.fact.layer == "keras.layers.LayerNormalization" and "Keras" in tf.seed.note


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
    table = defaults.defaults_markdown()
    lines = table.splitlines()
    assert len(lines) == 2 + len(defaults.DEFAULTS)
    for row, line in zip(defaults.DEFAULTS, lines[2:]):
        assert "{cite}`" + row.cite + "`" in line
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert len(cells) == 6
        for rel in row.released:
            assert "{cite}`" + rel.cite + "`" in cells[4]
    llama = lines[2 + [r.key for r in defaults.DEFAULTS].index("hf-llama")].split("|")
    assert llama[4].strip() == "1e-6" and llama[5].strip().startswith("1e-5")
    assert "9.999999747e-06" in table and "1.19e-07" in table
    seed = defaults.seed_markdown().splitlines()
    assert len(seed) == 2 + len(SEED)
    assert all("{cite}`" in line for line in seed[2:])


def test_fmt_eps():
    assert [defaults.fmt_eps(v) for v in (1e-5, 1e-12, 1e-3)] == ["1e-5", "1e-12", "1e-3"]
    assert defaults.fmt_eps(2.0**-23) == "1.19e-07"


@settings(max_examples=60, deadline=None)
@given(
    scale=st.floats(1e-3, 10.0),
    kind=st.sampled_from(defaults.KINDS),
    pair=st.sampled_from([(1e-12, 1e-5), (1e-5, 1e-12), (1e-6, 1e-5), (1e-5, 1e-6), (0.0, 1e-3)]),
    seed=st.integers(0, 2**16),
)
def test_measured_relative_change_matches_the_closed_form(scale, kind, pair, seed):
    x = np.random.default_rng(seed).standard_t(4, size=(3, 64)) * scale + 0.5
    q = defaults.row_statistic(x, kind=kind)
    got = defaults.relative_change(x, *pair, kind=kind)
    want = defaults.predicted_relative_change(q, *pair)
    # The measured value is a difference of two outputs: its absolute error is ~1e-16.
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-14)


def test_closed_form_limits():
    # Large q: |eps_b - eps_a| / (2 q); q = 0: |sqrt(eps_a / eps_b) - 1|.
    assert defaults.predicted_relative_change(1.0, 1e-12, 1e-5) == pytest.approx(5e-6, rel=1e-5)
    assert defaults.predicted_relative_change(0.0, 1e-6, 1e-5) == pytest.approx(1 - np.sqrt(0.1), rel=1e-14)
    x = np.array([[1.0, -1.0, 1.0, -1.0]])  # variance 1 and mean square 1
    assert defaults.row_statistic(x).tolist() == [1.0]
    assert defaults.row_statistic(x + 3).tolist() == [1.0]
    assert defaults.row_statistic(x + 3, kind="RMSNorm").tolist() == [10.0]
    with pytest.raises(ValueError, match="kind"):
        defaults.row_statistic(x, kind="GroupNorm")
    with pytest.raises(ValueError, match="q"):
        defaults.predicted_relative_change(-1.0, 1e-6, 1e-5)


@settings(max_examples=60, deadline=None)
@given(change=st.floats(1e-6, 0.5), pair=st.sampled_from([(1e-12, 1e-5), (1e-5, 1e-6), (1e-6, 1e-5)]))
def test_statistic_for_relative_change_inverts_the_closed_form(change, pair):
    q = defaults.statistic_for_relative_change(change, *pair)
    assert q > 0
    assert defaults.predicted_relative_change(q, *pair) == pytest.approx(change, rel=1e-8)


def test_statistic_for_relative_change_rejects_the_impossible():
    with pytest.raises(ValueError, match="below"):
        defaults.statistic_for_relative_change(0.9, 1e-6, 1e-5)  # most a row can change: 0.68
    with pytest.raises(ValueError, match="differ"):
        defaults.statistic_for_relative_change(0.1, 1e-5, 1e-5)
    with pytest.raises(ValueError, match="change"):
        defaults.statistic_for_relative_change(-0.1, 1e-6, 1e-5)


@pytest.mark.parametrize("bad", ["0.1", True, np.True_, None, 1j, [0.1]])
def test_statistic_for_relative_change_rejects_a_change_that_is_not_a_real_number(bad):
    with pytest.raises(TypeError, match="change"):
        defaults.statistic_for_relative_change(bad, 1e-6, 1e-5)


@pytest.mark.parametrize("bad", [0, 0.0, -0.1, float("nan"), float("inf"), 0.9, 1])
def test_statistic_for_relative_change_rejects_a_change_out_of_range(bad):
    with pytest.raises(ValueError, match="change"):
        defaults.statistic_for_relative_change(bad, 1e-6, 1e-5)


def test_statistic_for_relative_change_accepts_any_real_number_type():
    want = defaults.statistic_for_relative_change(float(np.float32(0.01)), 1e-6, 1e-5)
    assert defaults.statistic_for_relative_change(np.float32(0.01), 1e-6, 1e-5) == want
    with pytest.raises(TypeError, match="eps"):
        defaults.statistic_for_relative_change(0.01, True, 1e-5)


def test_verdict_tolerance_is_relative_1e12_as_documented():
    torch_ln = by_key("torch-layernorm")  # library default 1e-5, no release
    assert defaults.SAME_EPS_RTOL == 1e-12
    assert "relative tolerance of" in defaults.verdict.__doc__ and "1e-12" in defaults.verdict.__doc__
    assert defaults.verdict(10**-5, torch_ln) == "right"
    assert defaults.verdict(1e-5 * (1 + 5e-13), torch_ln) == "right"
    assert defaults.verdict(1e-5 * (1 + 2e-12), torch_ln) == "wrong"
    # ONNX's float32 attribute (relative difference 2.5e-8) is not "the same value".
    assert defaults.verdict(defaults.stored_eps(by_key("onnx-layernorm")), torch_ln) == "wrong"


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**16), axis=st.sampled_from([0, 1, -1]), shift=st.floats(-100, 100))
def test_row_statistic_is_numpys_biased_variance_or_mean_square(seed, axis, shift):
    x = np.random.default_rng(seed).standard_normal((3, 5, 8)) + shift
    np.testing.assert_allclose(defaults.row_statistic(x, axis=axis), x.var(axis=axis),
                               rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(defaults.row_statistic(x, kind="RMSNorm", axis=axis),
                               np.mean(x**2, axis=axis), rtol=1e-12)
    assert defaults.row_statistic(x.astype(np.float32), axis=axis).dtype == np.float64
