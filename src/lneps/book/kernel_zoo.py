r"""A zoo of layer-norm and RMS-norm kernels, correct and defective, each a few lines of NumPy,
and their registry, :data:`ZOO`; :mod:`lneps.book.zoo_grades` grades every one of them against
lneps's exact answer.

Every kernel takes ``(x, gamma, beta, eps)``, x of shape (rows, d) in float16, bfloat16 or
float32 (gamma, beta: None or shape (d,) in the same format; RMS kernels ignore beta), computes
in float32 unless its description says otherwise, and returns x's dtype. The correct ones are
the kernels production libraries run: two passes with sequential or warp-tree sums, Welford
sequentially or per lane with Chan's merges (PyTorch's ``WelfordOps``, Apex's
``cuChanOnlineSum``), one pass in float64, CUDA's ``rsqrtf`` (up to 2 ulp off, modelled as the
correctly rounded value moved by -2..2 ulp: at random, always down, always up), the affine step
in other orders. Each defect changes one thing; the first ones are the chapter's six, the
correct pairwise two-pass kernel changed once (the variance in one pass, every operation in the
input format, the variance rounded to it before eps, the affine step in it, the d - 1 variance,
eps / 10).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import ml_dtypes
import numpy as np

__all__ = ["Kernel", "ZOO", "CHAPTER", "kernels", "by_name"]

F32, F64, BF16 = np.float32, np.float64, np.dtype(ml_dtypes.bfloat16)
LANES = 32


# --- sums in float32 ------------------------------------------------------------------------


def sequential_sum(a):
    """Left to right, each addition rounded to a's format: (rows, d) -> (rows, 1)."""
    acc = np.zeros(a.shape[0], a.dtype)
    for j in range(a.shape[1]):
        acc = acc + a[:, j]
    return acc[:, None]


def warp_tree_sum(a):
    """32 lanes, lane l summing a[:, l::32] left to right, then a tree over the lanes (the
    butterfly of a warp's shuffles): (rows, d) -> (rows, 1)."""
    rows, d = a.shape
    pad = -d % LANES
    v = np.concatenate([a, np.zeros((rows, pad), a.dtype)], axis=1).reshape(rows, -1, LANES)
    lanes = v[:, 0]
    for s in range(1, v.shape[1]):
        lanes = lanes + v[:, s]
    while lanes.shape[1] > 1:
        h = lanes.shape[1] // 2
        lanes = lanes[:, :h] + lanes[:, h:]
    return lanes


def pairwise_sum(a):
    """NumPy's own float32 sum (pairwise, blocks of 8 unrolled)."""
    return np.sum(a, axis=-1, keepdims=True, dtype=a.dtype)


def _rsqrt(w, ulps=0):
    """1/sqrt(w) correctly rounded to float32, then moved by ``ulps`` float32 ulp (an int or a
    (rows, 1) array of ints in -2..2): a model of CUDA's rsqrtf."""
    r = (1.0 / np.sqrt(w.astype(F64))).astype(F32)
    k = np.broadcast_to(np.asarray(ulps), r.shape)
    for step in (1, 2):
        r = np.where(k >= step, np.nextafter(r, F32(np.inf)), r)
        r = np.where(k <= -step, np.nextafter(r, F32(0)), r)
    return r


def _random_ulps(rows, stream=1234):
    """-2..2 per row, the same every call."""
    return np.random.default_rng(stream).integers(-2, 3, size=(rows, 1))


def _affine(n, gamma, beta):
    """gamma * n + beta, each operation rounded to float32."""
    if gamma is not None:
        n = n * gamma.astype(F32)
    if beta is not None:
        n = n + beta.astype(F32)
    return n


def _two_pass_stats(xf, total):
    d = F32(xf.shape[1])
    mu = total(xf) / d
    t = xf - mu
    return t, total(t * t) / d


def _out(n, x):
    return n.astype(x.dtype)


# --- correct layer-norm kernels -----------------------------------------------------------


def two_pass_sequential(x, gamma=None, beta=None, eps=1e-5):
    """Two passes, each sum left to right in float32; 1/sqrt correctly rounded."""
    t, var = _two_pass_stats(x.astype(F32), sequential_sum)
    return _out(_affine(t * _rsqrt(var + F32(eps)), gamma, beta), x)


def two_pass_warp_tree(x, gamma=None, beta=None, eps=1e-5):
    """Two passes, each sum over 32 strided lanes then a tree (a warp's shuffles)."""
    t, var = _two_pass_stats(x.astype(F32), warp_tree_sum)
    return _out(_affine(t * _rsqrt(var + F32(eps)), gamma, beta), x)


def two_pass_pairwise(x, gamma=None, beta=None, eps=1e-5):
    """Two passes with NumPy's pairwise float32 sums; 1/sqrt as a float32 sqrt then a division."""
    t, var = _two_pass_stats(x.astype(F32), pairwise_sum)
    return _out(_affine(t * (F32(1) / np.sqrt(var + F32(eps))), gamma, beta), x)


def welford_sequential(x, gamma=None, beta=None, eps=1e-5):
    """Welford's running mean and M2, left to right in float32 (delta, mean += delta / n,
    m2 += delta * (x - mean))."""
    xf = x.astype(F32)
    mean = np.zeros(xf.shape[0], F32)
    m2 = np.zeros(xf.shape[0], F32)
    for j in range(xf.shape[1]):
        delta = xf[:, j] - mean
        mean = mean + delta / F32(j + 1)
        m2 = m2 + delta * (xf[:, j] - mean)
    var = (m2 / F32(xf.shape[1]))[:, None]
    return _out(_affine((xf - mean[:, None]) * _rsqrt(var + F32(eps)), gamma, beta), x)


def _lane_welford(xf, chunk=1):
    """Welford per lane: lane l takes the chunks of ``chunk`` elements l, l + 32, ... (as
    Apex's cuWelfordOnlineSum, chunks of 4, or PyTorch's strided lanes, chunk 1): arrays
    (rows, 32) of count, mean, m2."""
    rows, d = xf.shape
    idx = np.arange(d)
    lane = (idx // chunk) % LANES
    step = idx // (chunk * LANES) * chunk + idx % chunk  # position within the lane
    n = np.zeros((rows, LANES), F32)
    mean = np.zeros((rows, LANES), F32)
    m2 = np.zeros((rows, LANES), F32)
    for s in range(int(step.max()) + 1):
        cols = np.nonzero(step == s)[0]
        ls = lane[cols]
        v = xf[:, cols]
        cnt = n[:, ls] + F32(1)
        delta = v - mean[:, ls]
        new = mean[:, ls] + delta / cnt
        m2[:, ls] = m2[:, ls] + delta * (v - new)
        mean[:, ls], n[:, ls] = new, cnt
    return n, mean, m2


def _pytorch_combine(a, b):
    """PyTorch's WelfordOps::combine, in float32: (count, mean, m2) of two parts."""
    (na, ma, qa), (nb, mb, qb) = a, b
    with np.errstate(invalid="ignore", divide="ignore"):
        delta = mb - ma
        n = na + nb
        nb_over_n = nb / n
        mean = ma + delta * nb_over_n
        m2 = qa + qb + delta * delta * na * nb_over_n
    mean = np.where(na == 0, mb, np.where(nb == 0, ma, mean))
    m2 = np.where(na == 0, qb, np.where(nb == 0, qa, m2))
    return n, mean, m2


def _apex_chan(a, b):
    """Apex's cuChanOnlineSum, in float32."""
    (na, ma, qa), (nb, mb, qb) = a, b
    with np.errstate(invalid="ignore", divide="ignore"):
        delta = mb - ma
        n = na + nb
        fa, fb = na / n, nb / n
        mean = fa * ma + fb * mb
        m2 = qa + qb + delta * delta * fa * fb * n
    ok = n > 0
    return n, np.where(ok, mean, F32(0)), np.where(ok, m2, F32(0))


def _warp_merge(parts, combine, xor=True):
    """Five rounds of shuffles over the 32 lanes, each lane combining itself with lane
    l ^ 2^k (a butterfly, PyTorch) or (l + 2^k) mod 32 (Apex); lane 0's result."""
    lanes = np.arange(LANES)
    for k in range(4, -1, -1) if xor else range(5):
        src = lanes ^ (1 << k) if xor else (lanes + (1 << k)) % LANES
        parts = combine(parts, tuple(p[:, src] for p in parts))
    return tuple(p[:, :1] for p in parts)


def _welford_merged(x, gamma, beta, eps, chunk, combine, xor):
    xf = x.astype(F32)
    n, mean, m2 = _warp_merge(_lane_welford(xf, chunk), combine, xor)
    var = m2 / n
    return _out(_affine((xf - mean) * _rsqrt(var + F32(eps)), gamma, beta), x)


def welford_chan_pytorch(x, gamma=None, beta=None, eps=1e-5):
    """Welford per lane over strided elements, then PyTorch's WelfordOps combine in a butterfly
    of shuffles (its CUDA layer norm)."""
    return _welford_merged(x, gamma, beta, eps, 1, _pytorch_combine, True)


def welford_chan_apex(x, gamma=None, beta=None, eps=1e-5):
    """Apex: cuWelfordOnlineSum per lane over chunks of 4, then cuChanOnlineSum over the warp."""
    return _welford_merged(x, gamma, beta, eps, 4, _apex_chan, False)


def one_pass_float64(x, gamma=None, beta=None, eps=1e-5):
    """One pass, E[x^2] - E[x]^2, in float64, clamped at 0; mean and variance then rounded to
    float32 and the rest in float32."""
    x64 = x.astype(F64)
    d = x.shape[1]
    mu = x64.sum(axis=1, keepdims=True) / d
    var = np.maximum((x64 * x64).sum(axis=1, keepdims=True) / d - mu * mu, 0.0)
    t = x.astype(F32) - mu.astype(F32)
    return _out(_affine(t * _rsqrt(var.astype(F32) + F32(eps)), gamma, beta), x)


def rsqrt_random_2ulp(x, gamma=None, beta=None, eps=1e-5):
    """Two passes (pairwise); the reciprocal square root off by -2..2 ulp, at random per row."""
    t, var = _two_pass_stats(x.astype(F32), pairwise_sum)
    return _out(_affine(t * _rsqrt(var + F32(eps), _random_ulps(x.shape[0])), gamma, beta), x)


def rsqrt_low_2ulp(x, gamma=None, beta=None, eps=1e-5):
    """Two passes (warp tree); the reciprocal square root always 2 ulp low (a biased rsqrtf)."""
    t, var = _two_pass_stats(x.astype(F32), warp_tree_sum)
    return _out(_affine(t * _rsqrt(var + F32(eps), -2), gamma, beta), x)


def rsqrt_high_2ulp(x, gamma=None, beta=None, eps=1e-5):
    """Two passes (sequential); the reciprocal square root always 2 ulp high."""
    t, var = _two_pass_stats(x.astype(F32), sequential_sum)
    return _out(_affine(t * _rsqrt(var + F32(eps), 2), gamma, beta), x)


def affine_gamma_times_r(x, gamma=None, beta=None, eps=1e-5):
    """Two passes; the gain folded into the reciprocal square root first: (gamma r) t + beta."""
    t, var = _two_pass_stats(x.astype(F32), warp_tree_sum)
    r = _rsqrt(var + F32(eps))
    n = t * (r if gamma is None else gamma.astype(F32) * r)
    return _out(n if beta is None else n + beta.astype(F32), x)


def affine_fma(x, gamma=None, beta=None, eps=1e-5):
    """Two passes (Welford lanes, PyTorch); the affine step as one fused multiply-add,
    fma(gamma, t r, beta), emulated in float64 (exact product, one rounding to float32)."""
    xf = x.astype(F32)
    n, mean, m2 = _warp_merge(_lane_welford(xf, 1), _pytorch_combine, True)
    nrm = (xf - mean) * _rsqrt(m2 / n + F32(eps))
    g = np.float64(1) if gamma is None else gamma.astype(F64)
    b = np.float64(0) if beta is None else beta.astype(F64)
    return _out((g * nrm.astype(F64) + b).astype(F32), x)


# --- correct RMS-norm kernels -------------------------------------------------------------


def _rms(x, gamma, eps, total, ulps=0):
    xf = x.astype(F32)
    ms = total(xf * xf) / F32(xf.shape[1])
    return _out(_affine(xf * _rsqrt(ms + F32(eps), ulps), gamma, None), x)


def rms_sequential(x, gamma=None, beta=None, eps=1e-5):
    """RMS norm: the sum of squares left to right in float32."""
    return _rms(x, gamma, eps, sequential_sum)


def rms_warp_tree(x, gamma=None, beta=None, eps=1e-5):
    """RMS norm: the sum of squares over 32 lanes then a tree."""
    return _rms(x, gamma, eps, warp_tree_sum)


def rms_rsqrt_2ulp(x, gamma=None, beta=None, eps=1e-5):
    """RMS norm: pairwise sum of squares; the reciprocal square root off by -2..2 ulp at random."""
    return _rms(x, gamma, eps, pairwise_sum, _random_ulps(x.shape[0]))


# --- defective kernels --------------------------------------------------------------------


def eps_after_sqrt(x, gamma=None, beta=None, eps=1e-5):
    """Defect: t / (sqrt(var) + eps), eps added after the square root."""
    t, var = _two_pass_stats(x.astype(F32), pairwise_sum)
    return _out(_affine(t / (np.sqrt(var) + F32(eps)), gamma, beta), x)


def unbiased_variance(x, gamma=None, beta=None, eps=1e-5):
    """Defect: the unbiased variance, sum of squares / (d - 1)."""
    xf = x.astype(F32)
    t = xf - pairwise_sum(xf) / F32(xf.shape[1])
    var = pairwise_sum(t * t) / F32(xf.shape[1] - 1)
    return _out(_affine(t * _rsqrt(var + F32(eps)), gamma, beta), x)


def eps_ignored(x, gamma=None, beta=None, eps=1e-5):
    """Defect: eps never added (1/sqrt(var))."""
    t, var = _two_pass_stats(x.astype(F32), pairwise_sum)
    with np.errstate(divide="ignore", invalid="ignore"):
        return _out(_affine(t * _rsqrt(var), gamma, beta), x)


def accumulate_16bit(x, gamma=None, beta=None, eps=1e-5):
    """Defect: both sums accumulated left to right in a 16-bit format (the input's; bfloat16
    for float32 input); the rest in float32."""
    h = x.dtype if x.dtype.itemsize == 2 else BF16
    xh = x.astype(h)
    d = x.shape[1]
    mu = sequential_sum(xh).astype(F32) / F32(d)
    t = x.astype(F32) - mu
    var = sequential_sum((t * t).astype(h)).astype(F32) / F32(d)
    return _out(_affine(t * _rsqrt(var + F32(eps)), gamma, beta), x)


def one_pass_float32(x, gamma=None, beta=None, eps=1e-5):
    """Defect: one pass, E[x^2] - E[x]^2 in float32 (pairwise sums), clamped at 0."""
    xf = x.astype(F32)
    d = F32(xf.shape[1])
    mu = pairwise_sum(xf) / d
    var = np.maximum(pairwise_sum(xf * xf) / d - mu * mu, F32(0))
    return _out(_affine((xf - mu) * _rsqrt(var + F32(eps)), gamma, beta), x)


def rstd_bfloat16(x, gamma=None, beta=None, eps=1e-5):
    """Defect: the reciprocal standard deviation stored in bfloat16 (a statistics buffer in a
    16-bit format)."""
    t, var = _two_pass_stats(x.astype(F32), pairwise_sum)
    r = _rsqrt(var + F32(eps)).astype(BF16).astype(F32)
    return _out(_affine(t * r, gamma, beta), x)


def eps_float16(x, gamma=None, beta=None, eps=1e-5):
    """Defect: eps stored in float16 (1e-12 becomes 0, 1e-5 a subnormal)."""
    t, var = _two_pass_stats(x.astype(F32), pairwise_sum)
    with np.errstate(divide="ignore", invalid="ignore"):
        return _out(_affine(t * _rsqrt(var + F32(np.float16(eps))), gamma, beta), x)


def eps_tenth(x, gamma=None, beta=None, eps=1e-5):
    """Defect: another library's default, eps / 10."""
    return two_pass_pairwise(x, gamma, beta, eps / 10)


# --- real designs: correct within their own class -----------------------------------------


def stats_in_input_format(x, gamma=None, beta=None, eps=1e-5):
    """Design: two-pass statistics in float32, the mean and rstd stored in the input format (as
    torch's CPU kernels keep them), then (x - mean) * rstd and the affine step in float32."""
    dt, xf = x.dtype, x.astype(F32)
    _, var = _two_pass_stats(xf, pairwise_sum)
    mu = pairwise_sum(xf) / F32(xf.shape[1])  # the same float32 mean the variance used
    n = (xf - mu.astype(dt).astype(F32)) * _rsqrt(var + F32(eps)).astype(dt).astype(F32)
    return _out(_affine(n, gamma, beta), x)


def llama_rms(x, gamma=None, beta=None, eps=1e-5):
    """Design (RMS norm, Hugging Face's Llama RMSNorm): x * rsqrt(mean(x^2) + eps) in float32,
    cast to the input format, then multiplied by the gain in the input format."""
    dt, xf = x.dtype, x.astype(F32)
    n = (xf * _rsqrt(pairwise_sum(xf * xf) / F32(xf.shape[1]) + F32(eps))).astype(dt)
    return n if gamma is None else (gamma * n).astype(dt)


def mean_float16(x, gamma=None, beta=None, eps=1e-5):
    """Defect: the mean rounded to float16 (a 16-bit statistics buffer) before it is
    subtracted; the rest in float32."""
    xf = x.astype(F32)
    _, var = _two_pass_stats(xf, pairwise_sum)
    mu = pairwise_sum(xf) / F32(xf.shape[1])
    n = (xf - mu.astype(np.float16).astype(F32)) * _rsqrt(var + F32(eps))
    return _out(_affine(n, gamma, beta), x)


def rsqrt_12bit(x, gamma=None, beta=None, eps=1e-5):
    """Defect: a reciprocal square root good to 12 bits (a hardware estimate without its
    Newton step)."""
    t, var = _two_pass_stats(x.astype(F32), pairwise_sum)
    r = _rsqrt(var + F32(eps))
    m, e = np.frexp(r)
    r12 = np.ldexp(np.round(m * 2.0**12) / 2.0**12, e).astype(F32)
    return _out(_affine(t * r12, gamma, beta), x)


def all_in_input_format(x, gamma=None, beta=None, eps=1e-5):
    """Defect: the two-pass kernel with every operation in x's own format (no float32; in
    float32 it is the correct kernel)."""
    dt = x.dtype
    d = dt.type(x.shape[1])
    t = x - pairwise_sum(x) / d
    r = dt.type(1) / np.sqrt(pairwise_sum(t * t) / d + dt.type(eps))
    n = t * r
    if gamma is not None:
        n = n * gamma
    return n if beta is None else n + beta


def eps_after_rounding(x, gamma=None, beta=None, eps=1e-5):
    """Defect: the variance rounded to x's format before eps (itself in x's format) is added."""
    dt = x.dtype
    t, var = _two_pass_stats(x.astype(F32), pairwise_sum)
    w = (var.astype(dt) + dt.type(eps)).astype(F32)
    return _out(_affine(t * (F32(1) / np.sqrt(w)), gamma, beta), x)


def affine_in_input_format(x, gamma=None, beta=None, eps=1e-5):
    """Defect: the normalized value rounded to x's format, gamma and beta applied there (the
    design of Hugging Face's Llama RMSNorm, here for layer norm)."""
    dt = x.dtype
    t, var = _two_pass_stats(x.astype(F32), pairwise_sum)
    n = (t * (F32(1) / np.sqrt(var + F32(eps)))).astype(dt)
    if gamma is not None:
        n = n * gamma
    return n if beta is None else n + beta


def rms_eps_after_sqrt(x, gamma=None, beta=None, eps=1e-5):
    """Defect (RMS norm): x / (sqrt(mean(x^2)) + eps)."""
    xf = x.astype(F32)
    ms = pairwise_sum(xf * xf) / F32(xf.shape[1])
    return _out(_affine(xf / (np.sqrt(ms) + F32(eps)), gamma, None), x)


# --- the registry -------------------------------------------------------------------------


@dataclass(frozen=True)
class Kernel:
    """One kernel of the zoo: ``fn(x, gamma, beta, eps)``; kind "correct", "design" (a real
    design that rounds inside the kernel, correct within its own class of
    :data:`lneps.testing.DESIGN_CLASSES`, ``classes``) or "defective"; op "layer_norm" or
    "rms_norm"."""

    name: str
    kind: str
    op: str
    fn: Callable
    description: str
    classes: tuple | None = None


def _k(name, kind, op, fn, classes=None):
    return Kernel(name, kind, op, fn, " ".join((fn.__doc__ or "").split()), classes)


#: The zoo, correct kernels first.
ZOO = (
    _k("two-pass, sequential sums", "correct", "layer_norm", two_pass_sequential),
    _k("two-pass, warp-tree sums", "correct", "layer_norm", two_pass_warp_tree),
    _k("two-pass, pairwise sums", "correct", "layer_norm", two_pass_pairwise),
    _k("Welford, sequential", "correct", "layer_norm", welford_sequential),
    _k("Welford + Chan merges (PyTorch)", "correct", "layer_norm", welford_chan_pytorch),
    _k("Welford + Chan merges (Apex)", "correct", "layer_norm", welford_chan_apex),
    _k("one pass in float64", "correct", "layer_norm", one_pass_float64),
    _k("rsqrt +-2 ulp at random", "correct", "layer_norm", rsqrt_random_2ulp),
    _k("rsqrt always 2 ulp low", "correct", "layer_norm", rsqrt_low_2ulp),
    _k("rsqrt always 2 ulp high", "correct", "layer_norm", rsqrt_high_2ulp),
    _k("affine (gamma r) t + beta", "correct", "layer_norm", affine_gamma_times_r),
    _k("affine as one fma", "correct", "layer_norm", affine_fma),
    _k("RMS, sequential sum", "correct", "rms_norm", rms_sequential),
    _k("RMS, warp-tree sum", "correct", "rms_norm", rms_warp_tree),
    _k("RMS, rsqrt +-2 ulp", "correct", "rms_norm", rms_rsqrt_2ulp),
    _k(
        "statistics stored in the input format",
        "design",
        "layer_norm",
        stats_in_input_format,
        ("stats_in_input_format",),
    ),
    _k(
        "Llama RMSNorm: cast, then weighted",
        "design",
        "rms_norm",
        llama_rms,
        ("cast_then_weighted",),
    ),
    _k("one pass in float32", "defective", "layer_norm", one_pass_float32),
    _k("all in the input format", "defective", "layer_norm", all_in_input_format),
    _k("eps after rounding", "defective", "layer_norm", eps_after_rounding),
    _k("affine in the input format", "defective", "layer_norm", affine_in_input_format),
    _k("unbiased (d - 1) variance", "defective", "layer_norm", unbiased_variance),
    _k("eps / 10", "defective", "layer_norm", eps_tenth),
    _k("eps after the square root", "defective", "layer_norm", eps_after_sqrt),
    _k("eps ignored", "defective", "layer_norm", eps_ignored),
    _k("16-bit accumulation", "defective", "layer_norm", accumulate_16bit),
    _k("rstd stored in bfloat16", "defective", "layer_norm", rstd_bfloat16),
    _k("eps stored in float16", "defective", "layer_norm", eps_float16),
    _k("RMS, eps after the square root", "defective", "rms_norm", rms_eps_after_sqrt),
    _k("mean rounded to float16", "defective", "layer_norm", mean_float16),
    _k("12-bit rsqrt", "defective", "layer_norm", rsqrt_12bit),
)


#: The chapter's table of families: the correct pairwise two-pass kernel and its six one-change defects.
CHAPTER = (
    "two-pass, pairwise sums",
    "one pass in float32",
    "all in the input format",
    "eps after rounding",
    "affine in the input format",
    "unbiased (d - 1) variance",
    "eps / 10",
)


def by_name(name):
    """The zoo's kernel called ``name`` (``KeyError`` naming the names otherwise)."""
    for k in ZOO:
        if k.name == name:
            return k
    raise KeyError(f"no kernel {name!r} in the zoo; it has {', '.join(k.name for k in ZOO)}")


def kernels(kind=None, op=None):
    """The zoo's kernels, optionally only one kind ("correct", "defective") or op."""
    return [k for k in ZOO if (kind is None or k.kind == kind) and (op is None or k.op == op)]
