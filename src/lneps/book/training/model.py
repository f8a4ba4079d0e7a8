r"""The lab's model: a small decoder-only transformer with a choice of norm, placement and init.

Two blocks of width 64, four heads of 16, context 64, an MLP of 256 with GELU, learned token and
position embeddings and an untied output head (about 0.1 M parameters). Placements
(Xiong et al. 2020 compare the first two):

* ``pre``: ``h = h + attn(n(h))``, ``h = h + mlp(n(h))``, a final norm before the head (GPT-2);
* ``post``: ``h = n(h + attn(h))``, ``h = n(h + mlp(h))``, no final norm (the 2017 transformer);
* ``sandwich``: ``pre`` plus a norm on each sublayer's output before it is added,
  ``h = h + n(attn(n(h)))`` (CogView's sandwich-LN, Gemma 2's post-sublayer norms): the one
  placement where a zero-initialized projection puts rows of exactly zero into a norm;
* ``none``: ``h = h + attn(h)``, ``h = h + mlp(h)``, no norm at all.

Inits (:data:`INITS`): every weight matrix and both embeddings drawn from N(0, std^2), biases 0,
norm gains 1 and biases 0, with

* ``normal``: std 0.02 (GPT-2, BERT);
* ``small``: std 1e-4, so that q at the first norm (about 2e-8) lies inside the swept epsilons,
  above 1e-12 and 1e-8 and below 1e-6 .. 1;
* ``zero_resid``: std 0.02 and the two residual projections of each block (attention output,
  MLP down-projection) exactly zero: the limit of GPT-2's 1/sqrt(2L) and DeepNet's down-scaling,
  as ReZero, Fixup/T-Fixup and modded-nanogpt do: every sublayer adds exactly zero at step 0.

Each norm is a :class:`SiteNorm`: it casts its input to the format its precision mode says
(:mod:`.precision`), calls torch's own ``layer_norm`` or ``rms_norm`` kernel, and hands the
input to a recorder (:mod:`.record`) on the steps that are recorded.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from .precision import PRECISIONS, effective_eps
from .record import q_stats

__all__ = ["ModelSpec", "INITS", "PLACEMENTS", "NORMS", "half_norm", "SiteNorm", "Recorder",
           "TinyGPT"]

INITS = {"normal": 0.02, "small": 1e-4, "zero_resid": 0.02}
PLACEMENTS = ("pre", "post", "sandwich", "none")
NORMS = ("LayerNorm", "RMSNorm")
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

# torch.rms_norm on a low-precision input with a float32 weight takes its composite path and says so
warnings.filterwarnings("ignore", message="Mismatch dtype between input and weight")


@dataclass(frozen=True)
class ModelSpec:
    vocab: int = 32
    context: int = 64
    width: int = 64
    heads: int = 4
    layers: int = 2
    mlp: int = 256
    norm: str = "LayerNorm"
    placement: str = "pre"
    init: str = "normal"
    eps: float = 1e-5
    precision: str = "fp32"


def _sum16(t: torch.Tensor) -> torch.Tensor:
    """The sum over the last axis as a tree of float16 additions (each rounded to float16):
    the butterfly a warp-shuffle reduction performs; the width must be a power of two."""
    n = t.shape[-1]
    if n & (n - 1):
        raise ValueError(f"the float16 tree sum needs a power-of-two width; got {n}")
    while n > 1:
        n //= 2
        t = t[..., :n] + t[..., n:]
    return t


class _HalfCore(torch.autograd.Function):
    r"""The normalized core :math:`\hat x = d \cdot r`, :math:`r = (v + \varepsilon)^{-1/2}`, of
    :func:`half_norm`, forward and backward in float16 as a hand-written kernel computes them.
    The backward is the kernel's formula :math:`\partial x = r\,(g - \bar g - \hat x\,
    \overline{g \hat x})` (RMS norm: without :math:`\bar g`), its means float16 tree sums; not
    autograd through the forward's operations, whose derivative of the root,
    :math:`-r^3/2`, overflows float16 once :math:`r > 40`."""

    @staticmethod
    def forward(ctx, x, eps16, centre: bool):
        inv_n = torch.tensor(1.0 / x.shape[-1], dtype=x.dtype)
        d = x - _sum16(x) * inv_n if centre else x
        v = _sum16(d * d) * inv_n
        r = torch.rsqrt(v + eps16)
        xhat = d * r
        ctx.save_for_backward(xhat, r)
        ctx.centre = centre
        return xhat

    @staticmethod
    def backward(ctx, g):
        xhat, r = ctx.saved_tensors
        g = g.to(xhat.dtype)
        inv_n = torch.tensor(1.0 / g.shape[-1], dtype=g.dtype)
        inner = g - xhat * (_sum16(g * xhat) * inv_n)
        if ctx.centre:
            inner = inner - _sum16(g) * inv_n
        return r * inner, None, None


def half_norm(x: torch.Tensor, kind: str, weight: torch.Tensor, bias: torch.Tensor | None,
              eps: float) -> torch.Tensor:
    r"""Layer norm (``kind`` ``"LayerNorm"``) or RMS norm over the last axis computed in float16
    throughout, as a hand-written half-precision kernel does: :math:`\mu = \mathrm{fl}(\sum x /
    n)`, :math:`d = \mathrm{fl}(x - \mu)` (RMS norm: :math:`d = x`), :math:`v = \mathrm{fl}(
    \sum d^2 / n)`, :math:`r = \mathrm{fl}(\mathrm{rsqrt}(v + \varepsilon))`, :math:`y =
    \mathrm{fl}(d \cdot r)`, then the gain and bias, every operation rounded to float16 and each
    sum a tree of float16 additions (:func:`_sum16`); ``eps`` is rounded to float16 first. The
    backward is the kernel's own, in float16 too (:class:`_HalfCore`). Unlike torch's CPU kernels
    (which accumulate in float32), a variance below half float16's smallest subnormal
    (:math:`2^{-25} \approx 2.98 \times 10^{-8}`) becomes exactly 0, and so does an epsilon
    below it (1e-8, 1e-12).

    >>> x = torch.tensor([[1.0, 2.0, 3.0, 4.0], [1e-4, -1e-4, 1e-4, -1e-4]])
    >>> half_norm(x, "LayerNorm", torch.ones(4), torch.zeros(4), 1e-5)[0].float()
    tensor([-1.3418, -0.4473,  0.4473,  1.3418])
    >>> half_norm(x, "LayerNorm", torch.ones(4), None, 1e-8)[1].float()  # v = 0 and eps = 0
    tensor([inf, -inf, inf, -inf])
    """
    h = torch.float16
    with torch.autocast("cpu", enabled=False):
        core = _HalfCore.apply(x.to(h), torch.tensor(eps, dtype=h), kind == "LayerNorm")
        y = core * weight.to(h)
        return y + bias.to(h) if bias is not None else y


class Recorder:
    """Collects one q-statistics row (:data:`.record.STATS`) per norm site when ``on``."""

    def __init__(self):
        self.on = False
        self.rows: dict[str, object] = {}

    def add(self, site: str, kind: str, x: torch.Tensor, y: torch.Tensor, eps: float):
        xd = x.detach().to(torch.float64).reshape(-1, x.shape[-1])
        if kind == "LayerNorm":
            q = (xd - xd.mean(-1, keepdim=True)).pow(2).mean(-1)
        else:
            q = xd.pow(2).mean(-1)
        bad_out = int((~torch.isfinite(y.detach()).all(-1)).sum())
        self.rows[site] = q_stats(q.numpy(), eps, bad_out)


class SiteNorm(nn.Module):
    """A layer norm or RMS norm at one site, computed as its precision mode says."""

    def __init__(self, spec: ModelSpec, site: str, recorder: Recorder | None):
        super().__init__()
        self.site, self.kind, self.recorder = site, spec.norm, recorder
        self.eps = effective_eps(spec.eps, spec.precision)
        nd = PRECISIONS[spec.precision].norm_dtype
        self.dtype = _DTYPES[nd] if nd else None
        self.half = PRECISIONS[spec.precision].kernel == "half"
        self.weight = nn.Parameter(torch.ones(spec.width))
        self.bias = nn.Parameter(torch.zeros(spec.width)) if spec.norm == "LayerNorm" else None

    def _kernel(self, x):
        if self.half:
            return half_norm(x, self.kind, self.weight, self.bias, self.eps)
        d = (x.shape[-1],)
        if self.kind == "LayerNorm":
            return F.layer_norm(x, d, self.weight, self.bias, self.eps)
        return F.rms_norm(x, d, self.weight, self.eps)

    def forward(self, x):
        if self.dtype is torch.float32:  # CUDA autocast's way: float32 statistics and output
            x = x.float()
            with torch.autocast("cpu", enabled=False):
                y = self._kernel(x)
        else:
            if self.dtype is not None:
                x = x.to(self.dtype)
            y = self._kernel(x)
        if self.recorder is not None and self.recorder.on:
            self.recorder.add(self.site, self.kind, x, y, self.eps)
        return y


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.heads = spec.heads
        self.qkv = nn.Linear(spec.width, 3 * spec.width)
        self.out = nn.Linear(spec.width, spec.width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, t, c))


class MLP(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.up = nn.Linear(spec.width, spec.mlp)
        self.down = nn.Linear(spec.mlp, spec.width)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self, spec: ModelSpec, i: int, rec: Recorder | None):
        super().__init__()
        self.placement = spec.placement
        self.attn, self.mlp = Attention(spec), MLP(spec)
        names = {"pre": ("attn.in", "mlp.in"), "post": ("attn.post", "mlp.post"),
                 "sandwich": ("attn.in", "mlp.in", "attn.out", "mlp.out"), "none": ()}[spec.placement]
        self.norms = nn.ModuleDict({n.replace(".", "_"): SiteNorm(spec, f"{i}.{n}", rec) for n in names})

    def _n(self, name, x):
        return self.norms[name](x)

    def forward(self, h):
        p = self.placement
        if p == "pre":
            h = h + self.attn(self._n("attn_in", h))
            return h + self.mlp(self._n("mlp_in", h))
        if p == "post":
            h = self._n("attn_post", h + self.attn(h))
            return self._n("mlp_post", h + self.mlp(h))
        if p == "sandwich":
            h = h + self._n("attn_out", self.attn(self._n("attn_in", h)))
            return h + self._n("mlp_out", self.mlp(self._n("mlp_in", h)))
        h = h + self.attn(h)
        return h + self.mlp(h)


class TinyGPT(nn.Module):
    """The lab's transformer; ``sites`` lists its norm sites in the order data flows through them."""

    def __init__(self, spec: ModelSpec, recorder: Recorder | None = None):
        super().__init__()
        if spec.placement not in PLACEMENTS or spec.norm not in NORMS or spec.init not in INITS:
            raise ValueError(spec)
        self.spec = spec
        self.tok = nn.Embedding(spec.vocab, spec.width)
        self.pos = nn.Embedding(spec.context, spec.width)
        self.blocks = nn.ModuleList(Block(spec, i, recorder) for i in range(spec.layers))
        self.final = SiteNorm(spec, "final", recorder) if spec.placement in ("pre", "sandwich") else None
        self.head = nn.Linear(spec.width, spec.vocab, bias=False)
        self.reset_parameters()

    @property
    def sites(self) -> list[str]:
        return [m.site for m in self.modules() if isinstance(m, SiteNorm)]

    @torch.no_grad()
    def reset_parameters(self):
        std = INITS[self.spec.init]
        for m in self.modules():
            if isinstance(m, SiteNorm):
                m.weight.fill_(1.0)
                if m.bias is not None:
                    m.bias.zero_()
            elif isinstance(m, (nn.Linear, nn.Embedding)):
                m.weight.normal_(0.0, std)
                if getattr(m, "bias", None) is not None:
                    m.bias.zero_()
        if self.spec.init == "zero_resid":
            for blk in self.blocks:
                blk.attn.out.weight.zero_()
                blk.mlp.down.weight.zero_()

    def forward(self, idx):
        t = idx.shape[1]
        h = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for blk in self.blocks:
            h = blk(h)
        if self.final is not None:
            h = self.final(h)
        return self.head(h)

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def param_groups(model: TinyGPT, weight_decay: float):
    """AdamW's two groups: weight decay on the weight matrices, none on embeddings, biases, gains."""
    decay = [p for n, p in model.named_parameters() if p.ndim == 2 and not n.startswith(("tok.", "pos."))]
    rest = [p for n, p in model.named_parameters() if not (p.ndim == 2 and not n.startswith(("tok.", "pos.")))]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]
