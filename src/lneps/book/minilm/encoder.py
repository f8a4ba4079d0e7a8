r"""all-MiniLM-L6-v2's forward pass in NumPy, in a defined arithmetic. The model it runs is loaded,
and its sentences tokenized, by :mod:`lneps.book.minilm.files`.

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

from dataclasses import dataclass

import numpy as np

from .. import exact_ops as cr
from ..._checks import check_eps, check_float_dtype
from ...norms import layer_norm
from ...formats import round_to as to_format
from .files import MiniLM

__all__ = ["Forward", "forward"]


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
    """Run the encoder on ``token_ids`` (from :func:`~lneps.book.minilm.files.encode`).

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
