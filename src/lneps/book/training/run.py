r"""One training run of the lab, start to end (needs torch).

:func:`train` takes a :class:`.config.RunConfig` and the token stream and returns the run's
record (plain NumPy arrays and numbers, see :func:`train`); :func:`run_job` trains one
pre-training run and the fine-tuning runs that continue from it. :func:`configure` fixes the
arithmetic first: the thread count and ``torch.use_deterministic_algorithms(True)``; with the
same configuration, seed, thread count and arithmetic profile, a run is the same bit for bit.
"""

from __future__ import annotations

import contextlib
import math
import time

import numpy as np
import torch
import torch.nn.functional as F

from .config import RunConfig, run_id
from .model import ModelSpec, Recorder, SiteNorm, TinyGPT, param_groups
from .precision import PRECISIONS
from .recipe import FINETUNE, RECIPE, batch_offsets, eval_offsets, eval_steps, lr_at
from .record import STATS, record_steps

__all__ = ["configure", "spec_of", "build", "evaluate", "train", "finetune", "run_job"]

_LOW = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def configure(threads: int = 1) -> None:
    """Fix the arithmetic of this process: ``threads`` intra-op threads, deterministic kernels."""
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)


def spec_of(cfg: RunConfig, finetune: bool = False) -> ModelSpec:
    """The model of ``cfg``: its norm, placement, init, epsilon and precision, and its depth and
    width when the configuration sets them (the MLP stays four times the width)."""
    eps = cfg.ft_eps if finetune else cfg.eps
    prec = cfg.ft_precision if finetune else cfg.precision
    size = {}
    if cfg.layers is not None:
        size["layers"] = cfg.layers
    if cfg.width is not None:
        size.update(width=cfg.width, mlp=4 * cfg.width)
    return ModelSpec(norm=cfg.norm, placement=cfg.placement, init=cfg.init, eps=eps, precision=prec,
                     **size)


def build(spec: ModelSpec, seed: int, recorder: Recorder | None = None) -> TinyGPT:
    """The model with its seeded init (``torch.manual_seed(seed)`` right before), in its
    parameters' dtype (float16 for ``fp16_pure``)."""
    torch.manual_seed(seed)
    model = TinyGPT(spec, recorder)
    if PRECISIONS[spec.precision].params == "float16":
        model = model.half()
    return model


def _autocast(precision: str):
    p = PRECISIONS[precision]
    if p.autocast is None:
        return contextlib.nullcontext()
    return torch.autocast("cpu", dtype=_LOW[p.autocast])


def windows(stream: torch.Tensor, starts: np.ndarray, context: int):
    idx = torch.as_tensor(starts, dtype=torch.long)[:, None] + torch.arange(context + 1)
    w = stream[idx]
    return w[:, :-1], w[:, 1:]


def _loss(model, x, y, precision):
    with _autocast(precision):
        logits = model(x)
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))


@torch.no_grad()
def evaluate(model: TinyGPT, stream: torch.Tensor, precision: str, chunk: int = 64) -> float:
    """Mean cross-entropy (nats) over the held-out windows, in the run's precision."""
    starts = eval_offsets(model.spec.context, len(stream))
    was = model.training
    model.eval()
    total = 0.0
    for i in range(0, len(starts), chunk):
        x, y = windows(stream, starts[i:i + chunk], model.spec.context)
        total += float(_loss(model, x, y, precision)) * len(x)
    model.train(was)
    return total / len(starts)


def _eps_of(model: TinyGPT) -> float | None:
    """The epsilon the model's norms receive (after any rounding of its precision mode)."""
    norms = [m for m in model.modules() if isinstance(m, SiteNorm)]
    return norms[0].eps if norms else None


def _finite_params(model) -> bool:
    return all(bool(torch.isfinite(p).all()) for p in model.parameters())


def _loop(model, rec, stream, *, precision, seed, steps, lr_fn, eps_label):
    """The optimizer loop shared by pre-training and fine-tuning; returns the record."""
    ctx = model.spec.context
    opt = torch.optim.AdamW(param_groups(model, RECIPE["weight_decay"]), lr=lr_fn(0),
                            betas=RECIPE["betas"], eps=RECIPE["adam_eps"], foreach=False)
    scaler = torch.amp.GradScaler("cpu") if PRECISIONS[precision].scaler else None
    offsets = batch_offsets(seed, steps, RECIPE["batch"], ctx, len(stream))
    rsteps, esteps = record_steps(steps), eval_steps(steps)
    sites = model.sites
    loss_a = np.full(steps, np.nan, np.float32)
    gn_a = np.full(steps, np.nan, np.float32)
    scale_a = np.full(steps, np.nan, np.float32) if scaler else None
    q = np.full((len(rsteps), len(sites), len(STATS)), np.nan, np.float64)
    ev = np.full(len(esteps), np.nan, np.float64)
    ev[0] = evaluate(model, stream, precision)
    first_bad = first_bad_param = stopped = None
    bad_run = 0
    rpos = {int(s): i for i, s in enumerate(rsteps)}
    epos = {int(s): i for i, s in enumerate(esteps)}
    params = [p for p in model.parameters()]
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_fn(step)
        x, y = windows(stream, offsets[step], ctx)
        rec.on, rec.rows = step in rpos, {}
        loss = _loss(model, x, y, precision)
        rec.on = False
        opt.zero_grad(set_to_none=True)
        if scaler:
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
        else:
            loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(params, RECIPE["clip"])
        if scaler:
            scale_a[step] = scaler.get_scale()
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        loss_a[step], gn_a[step] = float(loss.detach()), float(gn)
        if step in rpos:
            for j, s in enumerate(sites):
                if s in rec.rows:
                    q[rpos[step], j] = rec.rows[s]
        finite = math.isfinite(loss_a[step]) and math.isfinite(gn_a[step])
        if not finite and first_bad is None:
            first_bad = step
        bad_run = 0 if finite else bad_run + 1
        params_ok = _finite_params(model)
        if not params_ok and first_bad_param is None:
            first_bad_param = step
        if step + 1 in epos:
            ev[epos[step + 1]] = evaluate(model, stream, precision)
        # dead: parameters not finite and the loss already shows it, or too many skipped steps
        if (not params_ok and not finite) or bad_run >= RECIPE["stop_after_nonfinite"]:
            stopped = step
            break
    last = stopped if stopped is not None else steps - 1
    out = {"sites": sites, "loss": loss_a, "grad_norm": gn_a, "record_steps": rsteps, "q": q,
           "nonfinite_steps": int(np.count_nonzero(~(np.isfinite(loss_a) & np.isfinite(gn_a))[:last + 1])),
           "eval_steps": esteps, "eval_loss": ev, "first_nonfinite_step": first_bad,
           "first_nonfinite_param_step": first_bad_param, "stopped_at": stopped, "eps_used": eps_label}
    if scaler:
        out["scale"] = scale_a
    return out


def train(cfg: RunConfig, stream: torch.Tensor):
    """Pre-train ``cfg.base()`` on ``stream`` (a 1-D long tensor); returns ``(model, record)``.

    The record: ``sites`` (norm sites in data-flow order), per step ``loss`` and ``grad_norm``
    (float32; NaN after a stop) and ``scale`` (the loss scale, float16 modes), ``record_steps``
    and ``q`` (record steps x sites x :data:`.record.STATS`), ``eval_steps`` and ``eval_loss``
    (held-out loss after that many steps), ``first_nonfinite_step`` (loss or gradient norm
    not finite), ``first_nonfinite_param_step``, ``stopped_at`` (parameters not finite, or
    :data:`.recipe.RECIPE` ``stop_after_nonfinite`` non-finite steps in a row), ``seconds``."""
    t0, c0 = time.perf_counter(), time.process_time()
    base = cfg.base()
    spec = spec_of(base)
    rec = Recorder()
    model = build(spec, base.seed, rec)
    r = RECIPE

    def lr_fn(step):
        # a run longer than the recipe's (the budget slice) has its schedule stretched to its
        # length; a shorter one is a prefix of the recipe's
        peak = r["lr"] if base.lr is None else base.lr
        warm = r["warmup"] if base.warmup is None else base.warmup
        return lr_at(step, max(r["steps"], base.steps), peak, warm, r["final_lr_fraction"])

    out = _loop(model, rec, stream, precision=base.precision, seed=base.seed, steps=base.steps,
                lr_fn=lr_fn, eps_label=_eps_of(model))
    out["seconds"], out["cpu_seconds"] = time.perf_counter() - t0, time.process_time() - c0
    return model, out


def finetune(cfg: RunConfig, trained: TinyGPT, stream: torch.Tensor):
    """Fine-tune a copy of ``trained`` with ``cfg.ft_eps`` in ``cfg.ft_precision`` for
    ``cfg.ft_steps`` steps (:data:`.recipe.FINETUNE`); the record as :func:`train`'s, plus
    ``eval_before_swap`` (the trained model's held-out loss in its own settings)."""
    t0, c0 = time.perf_counter(), time.process_time()
    spec = spec_of(cfg, finetune=True)
    rec = Recorder()
    model = build(spec, cfg.seed, rec)
    state = {k: v.to(next(iter(model.state_dict().values())).dtype) if v.is_floating_point() else v
             for k, v in trained.state_dict().items()}
    model.load_state_dict(state)
    out = _loop(model, rec, stream, precision=cfg.ft_precision, seed=cfg.seed + FINETUNE["seed_offset"],
                steps=cfg.ft_steps, lr_fn=lambda step: FINETUNE["lr"], eps_label=_eps_of(model))
    out["eval_before_swap"] = evaluate(trained, stream, cfg.precision)
    out["seconds"], out["cpu_seconds"] = time.perf_counter() - t0, time.process_time() - c0
    return out


def run_job(job: list[RunConfig], stream: np.ndarray) -> dict[str, dict]:
    """Train the job's one base configuration and every fine-tuning configuration of the job
    from it; returns ``{run_id: record}`` (the base included when it is in ``job``)."""
    s = torch.as_tensor(np.asarray(stream, dtype=np.int64))
    bases = {c.base() for c in job}
    if len(bases) != 1:
        raise ValueError("a job shares one pre-training run")
    (base,) = bases
    model, rec = train(base, s)
    out = {}
    if base in job:
        out[run_id(base)] = rec
    for c in job:
        if c.is_finetune:
            out[run_id(c)] = finetune(c, model, s)
    return out


#: The probe's configurations: (precision, eps). float32 and bfloat16 without a guard, float16
#: with GradScaler (which skips a step whose gradients are not finite), and 1e-12 as control.
PROBE_CASES = (("fp32", 0.0), ("fp32", 1e-12), ("bf16_norm32", 0.0), ("fp16_norm32", 0.0))


def zero_row_probe(seed: int, precision: str = "fp32", eps: float = 0.0, site: str = "0.attn.in",
                   row: tuple[int, int] = (0, 7), stream: np.ndarray | None = None) -> dict:
    """Does one row of zeros at one norm kill a run? A pre-norm layer-norm model at init
    ``normal``, one training step on the first batch of ``seed`` with the input row ``row``
    (window, position) of the norm at ``site`` replaced by zeros (a "dead" row, q = 0), and
    nothing else changed. Returns what that one row did: the norm's non-finite output rows, the
    share of positions with non-finite logits, whether the loss and the gradient norm were
    finite, the share of parameter elements that are not finite after the step, and whether
    loss scaling skipped the step."""
    from .corpus import generate

    s = torch.as_tensor(np.asarray(generate() if stream is None else stream, dtype=np.int64))
    spec = ModelSpec(eps=eps, precision=precision)
    rec = Recorder()
    model = build(spec, seed, rec)
    norm = next(m for m in model.modules() if getattr(m, "site", None) == site)

    def kill_row(_mod, args):
        (x,) = args
        x = x.clone()
        x[row] = 0
        return (x,)

    handle = norm.register_forward_pre_hook(kill_row)
    logits_bad = {}

    def see_logits(_mod, _args, out):
        logits_bad["share"] = float((~torch.isfinite(out.detach()).all(-1)).float().mean())

    h2 = model.head.register_forward_hook(see_logits)
    opt = torch.optim.AdamW(param_groups(model, RECIPE["weight_decay"]), lr=lr_at(0, RECIPE["steps"], RECIPE["lr"],
                            RECIPE["warmup"], RECIPE["final_lr_fraction"]), betas=RECIPE["betas"],
                            eps=RECIPE["adam_eps"], foreach=False)
    scaler = torch.amp.GradScaler("cpu") if PRECISIONS[precision].scaler else None
    x, y = windows(s, batch_offsets(seed, 1, RECIPE["batch"], spec.context, len(s))[0], spec.context)
    rec.on = True
    loss = _loss(model, x, y, precision)
    rec.on = False
    if scaler:
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
    else:
        loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(list(model.parameters()), RECIPE["clip"])
    skipped = None
    if scaler:
        before = scaler.get_scale()
        scaler.step(opt)
        scaler.update()
        skipped = scaler.get_scale() < before
    else:
        opt.step()
    handle.remove(), h2.remove()
    n = sum(p.numel() for p in model.parameters())
    bad = sum(int((~torch.isfinite(p)).sum()) for p in model.parameters())
    site_row = rec.rows[site]
    return {"seed": seed, "precision": precision, "eps": eps, "site": site, "row": list(row),
            "zero_rows": int(site_row[9]), "nonfinite_out_rows": int(site_row[11]),
            "rows": int(x.numel()), "nonfinite_logit_share": logits_bad["share"],
            "loss_finite": bool(torch.isfinite(loss.detach())), "grad_norm_finite": bool(torch.isfinite(gn)),
            "nonfinite_param_share": bad / n, "step_skipped": skipped}
