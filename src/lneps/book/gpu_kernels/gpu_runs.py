r"""The GPU kernels as functions of NumPy arrays, run on the CPU in their interpreters, and one
case graded by :mod:`lneps.testing`.

Kernels (:data:`KERNELS`): Liger-Kernel's ``LigerLayerNormFunction`` and
``LigerRMSNormFunction`` in each casting mode (Triton, ``TRITON_INTERPRET=1`` with
:mod:`.interpreter_shims`), JAX Pallas's GPU layer norm (``interpret=True``), this project's
:mod:`.triton_two_pass`, and torch's own CPU ``layer_norm`` and ``rms_norm`` as the baseline a
user already has. Inputs come from :mod:`lneps.families`; gamma, beta and dy are standard normal
draws rounded to the input format.

A graded case (:func:`grade`) records, per output: the derived bound's verdict
(:func:`lneps.testing.assert_close` with its default tolerance: pass or fail), the largest
error in ulp and in scaled ulp (:func:`lneps.testing.compare`, exact), how many elements are
correctly rounded, how many exceed the bound and in how many rows, NaN and infinity counts, and
a SHA-256 of the output's bytes (so a re-run can say it is bit-identical).

Needs the ``gpu`` extra (torch, triton, liger-kernel, jax) and ``TRITON_INTERPRET=1`` set
before triton is imported.
"""

from __future__ import annotations

import hashlib

import numpy as np

from lneps import families as F
from lneps.testing import assert_close, compare, default_tolerance

__all__ = ["KERNELS", "OPS", "FORMATS", "EFFECTS", "inputs", "run", "grade", "regrade"]

#: kernel -> (op, formats it is graded in, what it is)
KERNELS = {
    "liger_layer_norm": ("layer_norm", ("float16", "float32"), "Liger LigerLayerNormFunction"),
    "liger_rms_norm_llama": ("rms_norm", ("float16", "float32"),
                             "Liger LigerRMSNormFunction, casting_mode='llama' (its default)"),
    "liger_rms_norm_gemma": ("rms_norm", ("float16", "float32"),
                             "Liger LigerRMSNormFunction, casting_mode='gemma'"),
    "liger_rms_norm_none": ("rms_norm", ("float16", "float32"),
                            "Liger LigerRMSNormFunction, casting_mode='none'"),
    "pallas_layer_norm": ("layer_norm", ("float16", "bfloat16", "float32"),
                          "jax.experimental.pallas.ops.gpu.layer_norm, interpret=True"),
    "two_pass": ("layer_norm", ("float16", "float32"),
                 "this project's Triton kernel, tutorial design, float32 dγ partials"),
    "two_pass_16bit_partials": ("layer_norm", ("float16",),
                                "the same, dγ partials stored in the input format "
                                "(the tutorial's)"),
    "torch_layer_norm": ("layer_norm", ("float16", "bfloat16", "float32"),
                         "torch.nn.functional.layer_norm on the CPU"),
    "torch_rms_norm": ("rms_norm", ("float16", "bfloat16", "float32"),
                       "torch.nn.functional.rms_norm on the CPU"),
}
OPS = {k: v[0] for k, v in KERNELS.items()}
FORMATS = ("float16", "bfloat16", "float32")
#: the eps each op is graded with: BERT's and Llama's defaults
EPS = {"layer_norm": 1e-5, "rms_norm": 1e-6}


def _np_dtype(name):
    import ml_dtypes

    return {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32}[name]


def inputs(family, d, rows, dtype, seed=0):
    """``(x, gamma, beta, dy)`` in ``dtype``: x from :mod:`lneps.families` (its gamma and beta
    where the family has them), the rest standard normal; one generator per (family, d, rows).

    >>> x, g, b, dy = inputs("mean_1000", 8, 2, "float16")
    >>> x.shape, g.shape, dy.dtype, bool(x.min() > 900)
    ((2, 8), (8,), dtype('float16'), True)
    """
    dt = _np_dtype(dtype)
    rng = np.random.default_rng([seed, F.names().index(family), d, rows])
    fam = F.draw(family, rng, d=d, rows=rows, dtype=dt)
    g = fam.gamma if fam.gamma is not None else rng.normal(size=d).astype(dt)
    b = fam.beta if fam.beta is not None else rng.normal(size=d).astype(dt)
    dy = rng.normal(size=(rows, d)).astype(dt)
    return np.asarray(fam.x, dt), np.asarray(g, dt), np.asarray(b, dt), dy


def _torch(a, device="cpu"):
    import torch

    if a.dtype.name == "bfloat16":  # torch reads no ml_dtypes array: through float32, exactly
        return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16).to(device)
    return torch.from_numpy(np.ascontiguousarray(a)).to(device)


def _numpy(t, like):
    t = t.detach().cpu()
    if str(t.dtype) == "torch.bfloat16":
        return t.float().numpy().astype(like)
    return t.numpy()


def _run_torch(kernel, x, g, b, eps, dy, device):
    import contextlib

    import torch

    from . import interpreter_shims as shims

    # the shims are for the interpreter; compiled for a GPU, the kernels need none
    cpu = device == "cpu"
    tx, tg, tb = (_torch(a, device).requires_grad_(dy is not None) for a in (x, g, b))
    if kernel.startswith("two_pass"):
        from . import triton_two_pass as tp

        with shims.float_scalars_as_float32() if cpu else contextlib.nullcontext():
            y, mean, rstd = tp.layer_norm_forward(tx.detach(), tg.detach(), tb.detach(), eps)
            if dy is None:
                return {"y": y}
            dx, dw, db = tp.layer_norm_backward(
                _torch(dy, device), tx.detach(), tg.detach(), mean, rstd,
                partial_dtype="input" if kernel.endswith("16bit_partials") else "float32")
        return {"x": dx, "gamma": dw, "beta": db}
    if kernel.startswith("liger"):
        from liger_kernel.ops.layer_norm import LigerLayerNormFunction
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction

        with shims.interpreted() if cpu else contextlib.nullcontext():
            if kernel == "liger_layer_norm":
                y = LigerLayerNormFunction.apply(tx, tg, tb, eps)
            else:
                mode = kernel.rsplit("_", 1)[1]
                y = LigerRMSNormFunction.apply(tx, tg, eps, 0.0, mode, False)
            if dy is not None:  # the backward kernels run here, within the shims
                y.backward(_torch(dy, device))
    elif kernel == "torch_layer_norm":
        y = torch.nn.functional.layer_norm(tx, (x.shape[-1],), tg, tb, eps)
    else:
        y = torch.nn.functional.rms_norm(tx, (x.shape[-1],), tg, eps)
    if dy is None:
        return {"y": y}
    if not kernel.startswith("liger"):
        y.backward(_torch(dy, device))
    out = {"x": tx.grad, "gamma": tg.grad}
    if OPS[kernel] == "layer_norm":
        out["beta"] = tb.grad
    return out


def _run_pallas(x, g, b, eps, dy, device):
    import jax
    from jax.experimental.pallas.ops.gpu import layer_norm as pl_ln

    def f(x, g, b):
        # the kernel maps over two leading axes (batch, sequence): one batch of rows here
        return pl_ln.layer_norm(x[None], g, b, eps=eps, interpret=device == "cpu")[0]

    if dy is None:
        return {"y": f(x, g, b)}
    _, vjp = jax.vjp(f, x, g, b)
    dx, dg, db = vjp(dy)
    return {"x": dx, "gamma": dg, "beta": db}


def run(kernel, x, gamma, beta, eps, dy=None, device="cpu"):
    """The kernel's outputs as NumPy arrays: ``{"y": y}`` forward, or, given the upstream
    gradient ``dy``, ``{"x": dx, "gamma": dγ, "beta": dβ}`` (no dβ for RMS norm).
    ``device="cpu"``: Triton and Pallas kernels in their interpreters; ``"cuda"``: compiled
    for the GPU (``tools/gpu_check.py``)."""
    if kernel not in KERNELS:
        raise ValueError(f"unknown kernel {kernel!r}; known: {', '.join(KERNELS)}")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda'; got {device!r}")
    if kernel == "pallas_layer_norm":
        out = _run_pallas(x, gamma, beta, eps, dy, device)
        return {k: np.asarray(v) for k, v in out.items()}
    out = _run_torch(kernel, x, gamma, beta, eps, dy, device)
    return {k: _numpy(v, x.dtype) for k, v in out.items()}


def _summary(actual, call):
    """The record of one output against lneps (see the module's docstring)."""
    rep = compare(actual, **call)
    scaled, ulp = rep.scaled_error, rep.ulp_error
    bound = default_tolerance(call.get("op", "layer_norm"), x=call["x"], actual_dtype=actual.dtype,
                              gamma=call.get("gamma"), beta=call.get("beta"), eps=call["eps"],
                              dy=call.get("dy"), wrt=call.get("wrt"))
    beyond = ~(scaled <= bound)  # NaN counts as beyond
    try:
        assert_close(actual, **call)
        passed, message = True, ""
    except AssertionError as e:
        passed, message = False, str(e).splitlines()[0]
    a64 = np.asarray(actual, np.float64)
    worst = np.unravel_index(np.nanargmax(np.where(np.isnan(scaled), np.inf, scaled)), scaled.shape)
    return {
        "passed": passed, "message": message,
        "max_scaled": float(np.nanmax(np.where(np.isnan(scaled), np.inf, scaled))),
        "max_ulp": float(np.nanmax(np.where(np.isnan(ulp), np.inf, ulp))),
        "n": int(actual.size),
        "correct": int(np.sum((a64 == rep.reference) | (np.isnan(a64) & np.isnan(rep.reference)))),
        "beyond": int(beyond.sum()),
        "rows_beyond": int(beyond.reshape(-1, actual.shape[-1]).any(axis=-1).sum())
        if actual.ndim == 2 else int(beyond.any()),
        "worst_at": [int(i) for i in worst],
        "nan": int(np.isnan(a64).sum()), "inf": int(np.isinf(a64).sum()),
        "sha256": hashlib.sha256(np.ascontiguousarray(actual).tobytes()).hexdigest(),
    }


def grade(kernel, dtype, family, d, rows, direction="forward", seed=0, device="cpu"):
    """The graded records of one case: one for the forward output, or one per gradient."""
    op = OPS[kernel]
    eps = EPS[op]
    x, g, b, dy = inputs(family, d, rows, dtype, seed)
    if op == "rms_norm":
        b = np.zeros_like(b)  # RMS norm has no beta; the kernels are called without one
    key = {"kernel": kernel, "op": op, "dtype": dtype, "family": family, "d": d, "rows": rows,
           "eps": eps, "direction": direction}
    if direction == "forward":
        y = run(kernel, x, g, b, eps, device=device)["y"]
        call = {"op": op, "x": x, "gamma": g, "eps": eps}
        if op == "layer_norm":
            call["beta"] = b
        return [{**key, "output": "y", **_summary(y, call)}]
    grads = run(kernel, x, g, b, eps, dy, device=device)
    records = []
    for wrt, actual in grads.items():
        call = {"op": op + "_backward", "wrt": wrt, "x": x, "dy": dy, "gamma": g, "eps": eps}
        records.append({**key, "output": wrt, **_summary(actual, call)})
    return records


#: the unmodelled effects a verdict is re-run under (:mod:`.gpu_like`)
EFFECTS = ("warp_order_sum", "rsqrt_off_by_2")


def regrade(kernel, dtype, family, d, rows, direction="forward", effect="warp_order_sum", seed=0):
    """The case graded twice, as the interpreter runs it and under ``effect``: one record per
    output, with both verdicts and worst scaled errors and the share of elements that changed."""
    from . import gpu_like

    if effect not in EFFECTS:
        raise ValueError(f"effect must be one of {', '.join(EFFECTS)}; got {effect!r}")
    op = OPS[kernel]
    eps = EPS[op]
    x, g, b, dy = inputs(family, d, rows, dtype, seed)
    if op == "rms_norm":
        b = np.zeros_like(b)
    patch = gpu_like.warp_order_sum() if effect == "warp_order_sum" else gpu_like.rsqrt_off_by(2)
    base = run(kernel, x, g, b, eps, dy if direction == "backward" else None)
    with patch:
        moved = run(kernel, x, g, b, eps, dy if direction == "backward" else None)
    records = []
    for out, a in base.items():
        if direction == "forward":
            call = {"op": op, "x": x, "gamma": g, "eps": eps}
            if op == "layer_norm":
                call["beta"] = b
        else:
            call = {"op": op + "_backward", "wrt": out, "x": x, "dy": dy, "gamma": g, "eps": eps}
        s0, s1 = _summary(a, call), _summary(moved[out], call)
        same = (np.asarray(a, np.float64) == np.asarray(moved[out], np.float64))
        records.append({"kernel": kernel, "dtype": dtype, "family": family, "d": d, "rows": rows,
                        "direction": direction, "output": out, "effect": effect,
                        "passed": s0["passed"], "passed_moved": s1["passed"],
                        "max_scaled": s0["max_scaled"], "max_scaled_moved": s1["max_scaled"],
                        "changed": float(1 - same.mean())})
    return records
