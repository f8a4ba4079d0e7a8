r"""all-MiniLM-L6-v2 as a PyTorch module, built from the packaged weights without ``transformers``
(the frameworks extra: this module imports torch; :mod:`lneps.book.minilm` does not import it).

The architecture is :mod:`lneps.book.minilm.encoder`'s, operation for operation: embeddings
(word + token type 0, then + position) and a LayerNorm, then per layer

.. math::

    h' = \operatorname{LN}(h + \operatorname{Attn}(h)), \qquad
    h'' = \operatorname{LN}(h' + W_2\,\operatorname{GELU}(W_1 h' + b_1) + b_2),

with the exact (erf) GELU, attention scores divided by :math:`\sqrt{d_h}` and a softmax per
sentence, and the sentence embedding the mean of the last hidden states over the sentence's
tokens scaled to unit length. Every normalization is a real ``torch.nn.LayerNorm(384,
eps=1e-12)`` module (13 of them), named as in the model's own checkpoint
(``embeddings.LayerNorm``, ``encoder.layer.{i}.attention.output.LayerNorm``,
``encoder.layer.{i}.output.LayerNorm``), so :func:`lneps.torch.probe` finds them as it finds a
reader's.

Sentences are *packed*, not padded: the input is every sentence's token ids one after another
and their lengths, and attention is masked to each sentence's own tokens. So each LayerNorm
sees exactly one row per real token, the rows the NumPy encoder's sites hold, and no padding
row enters a probe's statistics.

Arithmetic: torch's float32 CPU kernels (BLAS products accumulate in float32 in an order of
their own), so the results agree with the NumPy encoder's defined float32 arithmetic to float32
rounding amplified by the network, not bit for bit (tests/book/test_minilm_torch_model.py
measures and bounds it).

>>> import torch
>>> ids, lengths = pack([[101, 7592, 102], [101, 102]])
>>> ids.tolist(), lengths.tolist(), ids.dtype == torch.int64
([101, 7592, 102, 101, 102], [3, 2], True)
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .files import MiniLM

__all__ = ["Encoder", "build", "pack"]


class _SelfAttention(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value = (nn.Linear(width, width) for _ in range(3))


class _AttentionOutput(nn.Module):
    def __init__(self, width: int, eps: float):
        super().__init__()
        self.dense = nn.Linear(width, width)
        self.LayerNorm = nn.LayerNorm(width, eps=eps)


class _Attention(nn.Module):
    def __init__(self, width: int, heads: int, eps: float):
        super().__init__()
        self.self = _SelfAttention(width, heads)
        self.output = _AttentionOutput(width, eps)

    def forward(self, h, mask):
        s = self.self
        t, width = h.shape
        dh = width // s.heads
        # (heads, tokens, dh) each; scores masked to each sentence's own tokens
        q, k, v = (m(h).reshape(t, s.heads, dh).transpose(0, 1) for m in (s.query, s.key, s.value))
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(dh)
        p = torch.softmax(scores.masked_fill(~mask, -math.inf), dim=-1)
        ctx = (p @ v).transpose(0, 1).reshape(t, width)
        return self.output.LayerNorm(self.output.dense(ctx) + h)


class _Intermediate(nn.Module):
    def __init__(self, width: int, inner: int):
        super().__init__()
        self.dense = nn.Linear(width, inner)


class _Output(nn.Module):
    def __init__(self, inner: int, width: int, eps: float):
        super().__init__()
        self.dense = nn.Linear(inner, width)
        self.LayerNorm = nn.LayerNorm(width, eps=eps)


class _Layer(nn.Module):
    def __init__(self, width: int, inner: int, heads: int, eps: float):
        super().__init__()
        self.attention = _Attention(width, heads, eps)
        self.intermediate = _Intermediate(width, inner)
        self.output = _Output(inner, width, eps)

    def forward(self, h, mask):
        h = self.attention(h, mask)
        mid = F.gelu(self.intermediate.dense(h))  # the exact GELU, x Phi(x)
        return self.output.LayerNorm(self.output.dense(mid) + h)


class _Embeddings(nn.Module):
    def __init__(self, vocab: int, positions: int, types: int, width: int, eps: float):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, width)
        self.position_embeddings = nn.Embedding(positions, width)
        self.token_type_embeddings = nn.Embedding(types, width)
        self.LayerNorm = nn.LayerNorm(width, eps=eps)

    def forward(self, ids, positions):
        # the NumPy encoder's order of the two float32 additions
        x = self.word_embeddings(ids) + self.token_type_embeddings.weight[0]
        return self.LayerNorm(x + self.position_embeddings(positions))


class _Stack(nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.layer = nn.ModuleList(layers)


class Encoder(nn.Module):
    """all-MiniLM-L6-v2's encoder with its pooling: ``Encoder(config)(ids, lengths)`` returns the
    unit-length sentence embeddings, (sentences, 384) float32, of the packed token ids ``ids``
    (1-D int64) of sentences of ``lengths`` tokens (see :func:`pack`). Build it with
    :func:`build`, which loads the weights."""

    def __init__(self, config: dict):
        super().__init__()
        width, eps = config["hidden_size"], float(config["layer_norm_eps"])
        self.embeddings = _Embeddings(config["vocab_size"], config["max_position_embeddings"],
                                      config["type_vocab_size"], width, eps)
        self.encoder = _Stack(
            [_Layer(width, config["intermediate_size"], config["num_attention_heads"], eps)
             for _ in range(config["num_hidden_layers"])])

    def hidden_states(self, ids, lengths):
        """The last layer's output, one row per token (tokens, 384)."""
        ids, lengths = torch.as_tensor(ids), torch.as_tensor(lengths)
        if ids.ndim != 1 or lengths.ndim != 1 or int(lengths.sum()) != ids.numel():
            raise ValueError(f"ids must be 1-D and lengths must add up to its size; got ids of "
                             f"shape {tuple(ids.shape)} and lengths adding up to {int(lengths.sum())}")
        if (lengths <= 0).any():
            raise ValueError("every sentence must have at least one token (lengths > 0)")
        sentence = torch.repeat_interleave(torch.arange(lengths.numel()), lengths)
        starts = torch.cumsum(lengths, 0) - lengths
        positions = torch.arange(ids.numel()) - starts[sentence]
        mask = sentence[:, None] == sentence[None, :]
        h = self.embeddings(ids, positions)
        for layer in self.encoder.layer:
            h = layer(h, mask)
        return h

    def forward(self, ids, lengths):
        h = self.hidden_states(ids, lengths)
        lengths = torch.as_tensor(lengths)
        sentence = torch.repeat_interleave(torch.arange(lengths.numel()), lengths)
        sums = torch.zeros(lengths.numel(), h.shape[1], dtype=h.dtype).index_add_(0, sentence, h)
        # the mean's division by the count cancels in the scaling to unit length
        return F.normalize(sums, dim=1)


def build(model: MiniLM) -> Encoder:
    """The :class:`Encoder` of a loaded model (:func:`lneps.book.minilm.load`) with its float32
    weights, in evaluation mode. A weight the module needs and the file lacks, or of another
    shape, raises a ``ValueError`` naming it (the pooler's weights, unused, are not loaded)."""
    enc = Encoder(model.config)
    state = {}
    for name, p in enc.state_dict().items():
        if name not in model.weights:
            raise ValueError(f"{model.directory / 'model.safetensors'} has no tensor {name!r}")
        w = torch.from_numpy(model.weights[name].copy())
        if tuple(w.shape) != tuple(p.shape):
            raise ValueError(f"{name}: shape {tuple(w.shape)} in the file, {tuple(p.shape)} expected")
        state[name] = w
    enc.load_state_dict(state)
    return enc.eval()


def pack(token_ids) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, lengths)``: the sentences' token ids (from :func:`lneps.book.minilm.encode`) one
    after another, int64, and each sentence's count."""
    seqs = [torch.as_tensor(t, dtype=torch.int64).reshape(-1) for t in token_ids]
    if not seqs or any(s.numel() == 0 for s in seqs):
        raise ValueError("token_ids must be a non-empty list of non-empty sequences of token ids")
    return torch.cat(seqs), torch.tensor([s.numel() for s in seqs], dtype=torch.int64)
