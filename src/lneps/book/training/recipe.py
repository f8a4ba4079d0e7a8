r"""The training recipe every run shares, fixed and kept out of the comparison.

AdamW (betas 0.9 / 0.95, its own epsilon :data:`.precision.ADAM_EPS` = 1e-8 in float32 state,
weight decay 0.1 on weight matrices only), peak learning rate 3e-3 reached linearly in 20 steps
and decayed by a cosine to a tenth of it at step 299 (the schedule is that of a 300-step run
also in a run stopped earlier: a shorter run is a prefix of the full one), gradients clipped to a global norm of
1.0 (the norm recorded is the one before clipping), batches of 8 windows of 64 symbols drawn at
seeded offsets from the training part of the stream (the same offsets for every configuration
with the same seed), loss and evaluation in float32 from the logits. Evaluation: the mean
cross-entropy over the held-out tail of the stream (256 windows of 64), every
:data:`EVAL_EVERY` steps and at the last.

Fine-tuning (:data:`FINETUNE`) continues from a trained model's weights with a fresh AdamW at a
constant learning rate of 3e-4 on offsets from another seeded stream.

NumPy only: the schedule and the batches are computed the same with or without torch.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["RECIPE", "FINETUNE", "EVAL_EVERY", "HELD_OUT", "lr_at", "batch_offsets",
           "eval_offsets", "eval_steps"]

RECIPE = {"steps": 300, "batch": 8, "lr": 3e-3, "warmup": 20, "final_lr_fraction": 0.1,
          "betas": (0.9, 0.95), "weight_decay": 0.1, "clip": 1.0, "adam_eps": 1e-8,
          "stop_after_nonfinite": 40}
FINETUNE = {"steps": 100, "lr": 3e-4, "seed_offset": 1000}
EVAL_EVERY = 50
HELD_OUT = 256 * 64 + 1  # the stream's tail: 256 evaluation windows (and one target more)


def lr_at(step: int, steps: int, peak: float, warmup: int, final_fraction: float) -> float:
    """Linear warm-up to ``peak`` over ``warmup`` steps, then a cosine to ``final_fraction * peak``
    at step ``steps - 1``."""
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(steps - 1 - warmup, 1)
    return peak * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * t)))


def batch_offsets(seed: int, steps: int, batch: int, context: int, n_tokens: int) -> np.ndarray:
    """Window starts, shape (steps, batch), from the training part of a stream of ``n_tokens``
    (everything before the held-out tail); the same for every configuration with this seed."""
    hi = n_tokens - HELD_OUT - context - 1
    rows = max(steps, RECIPE["steps"])  # always the full run's draws: a shorter run is a prefix
    return np.random.default_rng([seed, 7]).integers(0, hi, size=(rows, batch))[:steps]


def eval_offsets(context: int, n_tokens: int) -> np.ndarray:
    """The held-out windows' starts: 256 consecutive non-overlapping windows in the tail."""
    start = n_tokens - HELD_OUT
    return start + context * np.arange((HELD_OUT - 1) // context)


def eval_steps(steps: int, every: int = EVAL_EVERY) -> np.ndarray:
    """The steps after which the held-out loss is measured: 0 (before training), every
    ``every``-th step and the last."""
    s = sorted({0, *range(every, steps, every), steps})
    return np.asarray(s, dtype=np.int32)
