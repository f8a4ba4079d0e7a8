r"""The precision modes of the training lab, each a model of a real setup, and what CPU
autocast does to the norms (measured by :func:`measure_autocast`).

=================  =====================================================================
mode               what it models
=================  =====================================================================
``fp32``           (a) everything float32
``bf16_norm32``    (b) bfloat16 autocast; each norm runs on ``x.float()`` with autocast off,
                   float32 statistics and output: what CUDA autocast does (``layer_norm`` is
                   on its float32 list)
``bf16_norm16``    (c) bfloat16 autocast; each norm receives its input in bfloat16 and returns
                   bfloat16: what CPU autocast does to a bfloat16 input (it leaves
                   ``layer_norm`` and ``rms_norm`` in their input's type). Only the norm's
                   input and output are rounded: the residual stream, the parameters and
                   AdamW stay float32 (it is not a model held in bfloat16)
``fp16_norm32``    (d) float16 autocast with loss scaling (``GradScaler("cpu")``), norms as (b)
``fp16_eps16``     (e) as (d), but each norm receives float16 and its epsilon is stored in
                   float16: ``eps = float(np.float16(eps))`` (1e-12 and 1e-8 become 0)
``fp16_var16``      (f) as (e), but the norm is a hand-written half-precision kernel
                   (:func:`.model.half_norm`): the mean, the centred squares, their sum, the
                   variance, epsilon added and the reciprocal square root all in float16, as
                   a CUDA kernel with ``__half`` accumulators computes them, and its backward
                   in float16 too; a variance below half float16's smallest subnormal
                   (2.98e-8) becomes exactly 0
``fp16_pure``      contrast: ``model.half()``, no autocast, no scaler, AdamW's own eps = 1e-8
                   in float16 arithmetic (where it is 0): Adam's epsilon, not the norm's
=================  =====================================================================

In every mode the parameters (but in ``fp16_pure``) and AdamW's state are float32, and
AdamW's epsilon is :data:`ADAM_EPS`; the norm's epsilon is the only one compared.

torch's CPU kernels for ``layer_norm`` and ``rms_norm`` on bfloat16 or float16 input
accumulate the statistics in float32 and add epsilon in float32 (:func:`measure_autocast`
checks both), so "computed in bfloat16" means: input and output rounded to bfloat16, epsilon
not rounded. Modes (e) and (f) round epsilon, as a float16 stored constant would be; only (f)
computes the statistics in float16.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["ADAM_EPS", "Precision", "PRECISIONS", "effective_eps", "measure_autocast"]

#: AdamW's own epsilon in every run (PyTorch's default), fixed and kept out of the comparison.
ADAM_EPS = 1e-8


@dataclass(frozen=True)
class Precision:
    name: str
    autocast: str | None      # the autocast dtype, None for no autocast
    norm_dtype: str | None    # the dtype the norm kernel receives; None: whatever arrives
    eps_format: str | None    # the format epsilon is rounded to before use (None: not rounded)
    scaler: bool              # torch.amp.GradScaler("cpu") loss scaling
    params: str = "float32"
    label: str = ""
    #: ``"torch"``: torch's own kernel (float32 statistics on CPU); ``"half"``: the float16
    #: kernel :func:`.model.half_norm`
    kernel: str = "torch"


PRECISIONS = {p.name: p for p in (
    Precision("fp32", None, "float32", None, False, label="(a) float32"),
    Precision("bf16_norm32", "bfloat16", "float32", None, False,
              label="(b) bfloat16 autocast, norm in float32 (CUDA autocast)"),
    Precision("bf16_norm16", "bfloat16", "bfloat16", None, False,
              label="(c) bfloat16 autocast, the norm's input and output in bfloat16 "
                    "(CPU autocast)"),
    Precision("fp16_norm32", "float16", "float32", None, True,
              label="(d) float16 autocast + loss scaling, norm in float32"),
    Precision("fp16_eps16", "float16", "float16", "float16", True,
              label="(e) float16 autocast + loss scaling, norm in float16, eps stored in float16"),
    Precision("fp16_var16", "float16", "float16", "float16", True, kernel="half",
              label="(f) float16 autocast + loss scaling, norm and its variance computed in "
                    "float16, eps stored in float16"),
    Precision("fp16_pure", None, None, None, False, params="float16",
              label="contrast: model.half(), AdamW eps 1e-8 in float16"),
)}


def effective_eps(eps: float, precision: str) -> float:
    """The epsilon the norm kernel receives in ``precision``: rounded to float16 in mode (e)."""
    fmt = PRECISIONS[precision].eps_format
    if fmt is None:
        return float(eps)
    return float(np.dtype(fmt).type(eps))


def _json_float(v: float):
    return v if np.isfinite(v) else str(v)


def measure_autocast() -> dict:
    """What torch's CPU autocast does to the norms and softmax, measured in this process: the
    output dtype of ``layer_norm``, ``rms_norm``, ``softmax`` and ``linear`` under
    ``torch.autocast("cpu", dtype)`` for float32 and low-precision input; whether the low-
    precision kernels accumulate in float32 (a float16 row near 300, whose squares overflow
    float16, normalizes finitely; a row of 1e-4, whose squares underflow float16, normalizes
    to unit variance with eps = 0); and AdamW's eps = 1e-8 in float16."""
    import torch
    import torch.nn.functional as F

    d = 64
    g = torch.Generator().manual_seed(0)
    base = torch.randn(4, d, generator=g)
    w, b = torch.ones(d), torch.zeros(d)
    out: dict = {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                 "output_dtype": {}}
    for low in (torch.bfloat16, torch.float16):
        for src in (torch.float32, low):
            x = base.to(src)
            with torch.autocast("cpu", dtype=low):
                res = {"layer_norm": F.layer_norm(x, (d,), w, b, 1e-5).dtype,
                       "rms_norm": F.rms_norm(x, (d,), w.to(src), 1e-5).dtype,
                       "softmax": torch.softmax(x, -1).dtype,
                       "linear": F.linear(x, torch.eye(d)).dtype}
            key = f"autocast {str(low).split('.')[-1]}, input {str(src).split('.')[-1]}"
            out["output_dtype"][key] = {k: str(v).split(".")[-1] for k, v in res.items()}
    acc = {}
    for low in (torch.bfloat16, torch.float16):
        name = str(low).split(".")[-1]
        big = (300 + base[:2]).to(low)
        tiny = (1e-4 * base[:2]).to(low)
        acc[name] = {
            "layer_norm_rows_near_300_finite": bool(torch.isfinite(F.layer_norm(big, (d,), eps=1e-5)).all()),
            "layer_norm_rows_of_1e-4_eps0_variance":
                float(F.layer_norm(tiny, (d,), eps=0.0).float().var(-1, unbiased=False).mean()),
            "rms_norm_rows_of_1e-4_eps0_mean_square": float(F.rms_norm(tiny, (d,), eps=0.0).float().pow(2).mean()),
        }
    out["low_precision_kernels"] = acc
    out["float16_of"] = {str(e): float(np.float16(e)) for e in (1e-12, 1e-8, 1e-6, 1e-5, 1e-3)}
    p = torch.nn.Parameter(torch.ones(3, dtype=torch.float16))
    opt = torch.optim.AdamW([p], lr=1e-3, eps=ADAM_EPS, weight_decay=0.0)
    p.grad = torch.tensor([1e-4, 1e-5, 0.0], dtype=torch.float16)
    opt.step()
    # non-finite values as text ("nan", "-inf"), so that the manifest stays strict JSON
    out["adamw_half_eps_1e-8"] = {"grad": [1e-4, 1e-5, 0.0],
                                  "param_after_one_step": [_json_float(float(v)) for v in p.detach()],
                                  "exp_avg_sq": [float(v) for v in opt.state[p]["exp_avg_sq"]]}
    ln_f32, ln_low = (out["output_dtype"]["autocast bfloat16, input float32"]["layer_norm"],
                      out["output_dtype"]["autocast bfloat16, input bfloat16"]["layer_norm"])
    out["finding"] = (f"CPU autocast leaves layer_norm in its input's type (float32 in -> {ln_f32}, "
                      f"bfloat16 in -> {ln_low}); CUDA autocast would return float32 for both")
    return out
