r"""Effect sizes and the rule that decides whether a difference is an effect (NumPy only).

A metric maps one stored run to one number (:data:`METRICS`). Comparing configuration A with B
(each over its seeds) gives an :class:`Effect`: the difference of the means, B - A, against

* the spread over seeds: the larger of the two configurations' ranges (max - min over seeds);
* the spread over machines: the largest range of the same metric over the arithmetic profiles
  of :mod:`.spread`, over the configurations measured there.

The difference is an effect only when it exceeds both. With ``paired=True`` (the fine-tuning
comparisons, where A and B are the same trained model evaluated or fine-tuned two ways) the
values are the per-seed differences B - A, the difference their mean and the spread over seeds
their range. A run that died (its parameters went
non-finite, or its steps stayed non-finite: :attr:`.stored.Run.dead`) has no loss to compare;
dead against alive is an effect when every seed of one side died and no seed of the other did,
and a mixed side is no effect (it depends on the seed).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from . import spread as SP
from . import stored

__all__ = ["METRICS", "SPREAD_METRIC", "final_excess", "mean_excess", "excess_at", "after_swap",
           "after_finetune", "log10_max_grad_norm", "Effect", "compare", "machine_spread"]


def _floor() -> float:
    return stored.floor()


def final_excess(run: stored.Run) -> float:
    """Held-out loss after the run's last step minus the loss floor (nats); +inf if dead."""
    return math.inf if run.dead else float(run.eval_loss[-1]) - _floor()


def mean_excess(run: stored.Run) -> float:
    """The training loss's mean excess over the floor across all steps (nats): the area between
    the learning curve and the floor, a measure of speed; +inf if dead."""
    return math.inf if run.dead else float(np.mean(run.loss.astype(np.float64)) - _floor())


@functools.cache
def excess_at(step: int):
    """The metric: held-out loss after ``step`` steps minus the floor (+inf if dead)."""
    def metric(run: stored.Run) -> float:
        if run.dead:
            return math.inf
        return run.eval_at(step) - _floor()
    metric.__name__ = f"excess_at_{step}"
    return metric


def after_swap(run: stored.Run) -> float:
    """A fine-tuning run's held-out loss right after the swap, before any step, minus the floor."""
    return float(run.eval_loss[0]) - _floor()


def after_finetune(run: stored.Run) -> float:
    """A fine-tuning run's held-out loss after its last step, minus the floor (+inf if dead)."""
    return final_excess(run)


def log10_max_grad_norm(run: stored.Run) -> float:
    """log10 of the largest finite gradient norm (before clipping) of the run."""
    g = run.grad_norm[np.isfinite(run.grad_norm)]
    return float(np.log10(g.max())) if len(g) else math.nan


METRICS = {"final_excess": final_excess, "mean_excess": mean_excess, "excess_at_50": excess_at(50),
           "excess_at_150": excess_at(150), "after_swap": after_swap, "after_finetune": after_finetune,
           "log10_max_grad_norm": log10_max_grad_norm}

#: Which metric's machine spread bounds a metric: fine-tuning metrics are held-out losses of
#: trained models, bounded by the spread of the trained runs' held-out loss.
SPREAD_METRIC = {"final_excess": "final_excess", "mean_excess": "mean_excess", "excess_at_50": "excess_at_50",
                 "excess_at_150": "excess_at_150", "after_swap": "final_excess",
                 "after_finetune": "final_excess", "log10_max_grad_norm": "log10_max_grad_norm"}


@functools.cache
def machine_spread(metric_name: str, data_dir=stored.DATA_DIR) -> float:
    """The spread over machines for ``metric_name``: the largest range over the profiles of
    :mod:`.spread` of its bounding metric (:data:`SPREAD_METRIC`), over the measured runs that
    reach that step and stayed alive in every profile."""
    m = METRICS[SPREAD_METRIC[metric_name]]
    pr = SP.profile_runs(data_dir)
    worst = 0.0
    for rid in stored.spread_manifest(data_dir)["configs"]:
        try:
            vals = np.array([m(runs[rid]) for runs in pr.values()], dtype=np.float64)
        except ValueError:  # a prefix run has no held-out loss at that step
            continue
        if not np.all(np.isfinite(vals)):
            continue
        worst = max(worst, float(vals.max() - vals.min()))
    return worst


@dataclass(frozen=True)
class Effect:
    """B against A on one metric: ``diff`` = mean(B) - mean(A), and whether it is an effect."""

    metric: str
    a: str
    b: str
    values_a: tuple[float, ...]
    values_b: tuple[float, ...]
    seed_spread: float
    machine_spread: float

    @property
    def mean_a(self) -> float:
        return float(np.mean(self.values_a))

    @property
    def mean_b(self) -> float:
        return float(np.mean(self.values_b))

    @property
    def dead_a(self) -> int:
        return sum(math.isinf(v) for v in self.values_a)

    @property
    def dead_b(self) -> int:
        return sum(math.isinf(v) for v in self.values_b)

    @property
    def diff(self) -> float:
        """mean(B) - mean(A); +inf (-inf) when every B (A) seed died and no A (B) seed did,
        NaN when either side is mixed or both died."""
        if self.dead_a or self.dead_b:
            if self.dead_b == len(self.values_b) and self.dead_a == 0:
                return math.inf
            if self.dead_a == len(self.values_a) and self.dead_b == 0:
                return -math.inf
            return math.nan
        return self.mean_b - self.mean_a

    @property
    def is_effect(self) -> bool:
        """|diff| exceeds the spread over seeds and the spread over machines."""
        d = self.diff
        if math.isnan(d):
            return False
        return abs(d) > self.seed_spread and abs(d) > self.machine_spread

    @property
    def ratio(self) -> float:
        """|diff| over the larger of the two spreads (> 1: an effect)."""
        s = max(self.seed_spread, self.machine_spread)
        return math.inf if s == 0 else abs(self.diff) / s

    @property
    def marginal(self) -> bool:
        """|diff| within 25 % of the larger spread (ratio 0.8 .. 1.25): the verdict could go either
        way on another machine's re-run, so the book does not lean on it."""
        return 0.8 <= self.ratio <= 1.25

    def as_dict(self) -> dict:
        return {"metric": self.metric, "a": self.a, "b": self.b, "mean_a": self.mean_a, "mean_b": self.mean_b,
                "diff": self.diff, "seed_spread": self.seed_spread, "machine_spread": self.machine_spread,
                "is_effect": self.is_effect}

    def __str__(self) -> str:
        verdict = ("effect" if self.is_effect else "no effect") + (", marginal" if self.marginal else "")
        return (f"{self.metric}: {self.b} - {self.a} = {self.diff:+.4g} (seeds ±{self.seed_spread:.3g}, "
                f"machines ±{self.machine_spread:.3g}): {verdict}")


def _range(vals) -> float:
    v = np.asarray([x for x in vals if math.isfinite(x)], dtype=np.float64)
    return float(v.max() - v.min()) if len(v) > 1 else 0.0


def compare(runs_a: list[stored.Run], runs_b: list[stored.Run], metric: str,
            label_a: str = "A", label_b: str = "B", paired: bool = False, data_dir=stored.DATA_DIR) -> Effect:
    """The :class:`Effect` of going from configuration A to B (their seeds' runs) on ``metric``
    (a key of :data:`METRICS`). ``paired``: compare seed by seed (the spread over seeds is then
    the range of the per-seed differences; ``values_a`` are zeros, ``values_b`` the differences)."""
    if not runs_a or not runs_b:
        raise ValueError(f"nothing to compare: {len(runs_a)} runs against {len(runs_b)}")
    f = METRICS[metric]
    va, vb = tuple(f(r) for r in runs_a), tuple(f(r) for r in runs_b)
    if paired:
        if [r.config.seed for r in runs_a] != [r.config.seed for r in runs_b]:
            raise ValueError("paired runs must have the same seeds")
        d = tuple(b - a for a, b in zip(va, vb))
        return Effect(metric + " (paired)", label_a, label_b, tuple(0.0 for _ in d), d, _range(d),
                      machine_spread(metric, data_dir))
    return Effect(metric, label_a, label_b, va, vb, max(_range(va), _range(vb)),
                  machine_spread(metric, data_dir))
