r"""Whether one configuration trains differently from another: a paired test (NumPy and mpmath).

A metric maps one stored run to one number (:data:`METRICS`). Configurations A and B are run
with the same seeds, and a seed fixes the init draws and the batches, so the two runs of one
seed differ only by the configuration: :func:`compare` takes the per-seed differences
:math:`d_i = m(B_i) - m(A_i)` and reports their mean :math:`\bar d`, the 95 % t-interval
:math:`\bar d \pm t_{0.975,\,n-1}\, s/\sqrt n` and one of three outcomes (:data:`OUTCOMES`):

* ``"effect"``: the two-sided paired t-test rejects :math:`\bar\delta = 0` at :data:`ALPHA`
  (after Holm's correction over the family, :func:`holm`), and :math:`|\bar d|` exceeds the
  arithmetic floor;
* ``"equivalent"``: the two one-sided tests (TOST) reject :math:`|\bar\delta| \ge \Delta` at
  :data:`ALPHA` (after Holm), :math:`\Delta` the metric's margin :data:`MARGINS`, fixed before
  the ten-seed runs were made: the 90 % interval lies inside :math:`(-\Delta, \Delta)`;
* ``"undecided"``: neither. With few seeds most small differences are undecided, and the
  book says so rather than reading a miss as "the same". A comparison made with
  ``min_draws`` (the verdicts use :data:`MIN_DRAWS`) is undecided below that many draws,
  whatever its tests say: a verdict rests on at least ten paired draws.

The margin for the losses is 0.002 nats: a 0.2 % change of perplexity, the size of the offset
between the chain's entropy rate and its own held-out loss (a difference no model can remove,
:func:`.stored.held_out_floor`), and hundreds of times the arithmetic floor in float32. For the
largest gradient norm it is 0.1 in :math:`\log_{10}` (a factor 1.26).

The arithmetic floor (:func:`arithmetic_floor`) is the largest range of a metric over the
arithmetic profiles of one CPU (:mod:`.spread`: kernel ISA levels and thread counts on the
machine that made the runs): how far a number moves when only the kernels' rounding changes.
It is not a spread over machines and not part of the test; it is a floor below which an effect
is not claimed.

A run that died (:attr:`.stored.Run.dead`) has no loss: when every seed of one side died and
none of the other, that is an effect (:math:`\pm\infty`); any other mix is undecided.

Excess is measured over the chain's own held-out loss (:func:`.stored.held_out_floor`), the
lowest loss any model can reach on the held-out windows.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

import mpmath
import numpy as np

from . import spread as SP
from . import stored

__all__ = [
    "ALPHA",
    "MIN_DRAWS",
    "MARGINS",
    "OUTCOMES",
    "METRICS",
    "SPREAD_METRIC",
    "final_excess",
    "mean_excess",
    "excess_at",
    "after_swap",
    "after_finetune",
    "log10_max_grad_norm",
    "t_quantile",
    "t_two_sided_p",
    "power",
    "death_share_ci",
    "Comparison",
    "paired",
    "compare",
    "holm",
    "arithmetic_floor",
    "machine_spread",
]

ALPHA = 0.05
#: The fewest paired draws a verdict of the book rests on (``compare(..., min_draws=...)``).
MIN_DRAWS = 10
OUTCOMES = ("effect", "equivalent", "undecided")
_NATS = 0.002
#: The equivalence margin per metric, fixed in advance (see the module's docstring).
MARGINS = {
    "final_excess": _NATS,
    "mean_excess": _NATS,
    "excess_at_50": _NATS,
    "excess_at_150": _NATS,
    "after_swap": _NATS,
    "after_finetune": _NATS,
    "log10_max_grad_norm": 0.1,
}


def _floor() -> float:
    return stored.held_out_floor()


def final_excess(run: stored.Run) -> float:
    """Held-out loss after the run's last step minus the chain's own held-out loss (nats);
    +inf if dead."""
    return math.inf if run.dead else float(run.eval_loss[-1]) - _floor()


def mean_excess(run: stored.Run) -> float:
    """The training loss's mean excess over the chain's held-out loss across all steps (nats): the
    area between the learning curve and the floor, a measure of speed; +inf if dead."""
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


METRICS = {
    "final_excess": final_excess,
    "mean_excess": mean_excess,
    "excess_at_50": excess_at(50),
    "excess_at_150": excess_at(150),
    "after_swap": after_swap,
    "after_finetune": after_finetune,
    "log10_max_grad_norm": log10_max_grad_norm,
}

#: Which metric's arithmetic floor bounds a metric: fine-tuning metrics are held-out losses of
#: trained models, bounded by the floor of the trained runs' held-out loss.
SPREAD_METRIC = {
    "final_excess": "final_excess",
    "mean_excess": "mean_excess",
    "excess_at_50": "excess_at_50",
    "excess_at_150": "excess_at_150",
    "after_swap": "final_excess",
    "after_finetune": "final_excess",
    "log10_max_grad_norm": "log10_max_grad_norm",
}


# --- Student's t, from the regularized incomplete beta function (mpmath, 30 digits) -----------


@functools.cache
def t_two_sided_p(t: float, df: int) -> float:
    r"""Two-sided p-value of Student's t with ``df`` degrees of freedom:
    :math:`P(|T| \ge |t|) = I_{df/(df+t^2)}(df/2, 1/2)`, to about 15 digits.

    >>> round(t_two_sided_p(2.262157, 9), 6)
    0.05
    """
    if df < 1:
        raise ValueError(f"df must be at least 1; got {df}")
    if math.isinf(t):
        return 0.0
    with mpmath.workdps(30):
        x = mpmath.mpf(df) / (df + mpmath.mpf(t) ** 2)
        return float(mpmath.betainc(df / mpmath.mpf(2), mpmath.mpf(1) / 2, 0, x, regularized=True))


@functools.cache
def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (0.5 < p < 1), by
    bisection on :func:`t_two_sided_p` to 1e-12.

    >>> round(t_quantile(0.975, 9), 4), round(t_quantile(0.975, 2), 4)
    (2.2622, 4.3027)
    """
    if not 0.5 < p < 1:
        raise ValueError(f"p must lie in (0.5, 1); got {p}")
    target = 2 * (1 - p)
    lo, hi = 0.0, 1.0
    while t_two_sided_p(hi, df) > target:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_two_sided_p(mid, df) > target:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return (lo + hi) / 2


@functools.cache
def power(effect_size: float, n: int, alpha: float = ALPHA) -> float:
    r"""The probability that the two-sided paired t-test at ``alpha`` over ``n`` seeds rejects,
    when the true mean difference is ``effect_size`` standard deviations of the differences:
    :math:`\int_0^\infty f_{\chi^2_{n-1}}(v)\,[\Phi(-c\sqrt{v/(n-1)} - \delta) +
    1 - \Phi(c\sqrt{v/(n-1)} - \delta)]\,dv`, :math:`\delta = \text{effect\_size}\sqrt n`,
    :math:`c = t_{1-\alpha/2,\,n-1}` (the noncentral t), by mpmath quadrature.

    >>> round(power(1.0, 10), 3), round(power(0.0, 10), 3)
    (0.803, 0.05)
    """
    df = n - 1
    c = t_quantile(1 - alpha / 2, df)
    d = effect_size * math.sqrt(n)
    with mpmath.workdps(20):
        k = df / mpmath.mpf(2)

        def f(v):
            dens = v ** (k - 1) * mpmath.exp(-v / 2) / (2**k * mpmath.gamma(k))
            s = c * mpmath.sqrt(v / df)
            return dens * (mpmath.ncdf(-s - d) + 1 - mpmath.ncdf(s - d))

        return float(mpmath.quad(f, [0, df, 4 * df, mpmath.inf]))


def _binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), as an exact sum of n - k + 1 terms."""
    return math.fsum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k, n + 1))


@functools.cache
def death_share_ci(dead: int, n: int, level: float = 0.95) -> tuple[float, float]:
    r"""The exact (Clopper-Pearson) ``level`` interval of the share of runs that die, from
    ``dead`` of ``n`` independent draws: the lower end solves :math:`P(X \ge dead) = (1 -
    level)/2`, the upper :math:`P(X \le dead) = (1 - level)/2`, for :math:`X \sim
    \mathrm{Binomial}(n, p)`, by bisection on the exact binomial sums to 1e-12. For a verdict
    that rests on runs dying (a paired difference has no finite value there): at 10 of 10 the
    share is at least :math:`(0.025)^{1/10} = 0.69`.

    >>> [round(x, 4) for x in death_share_ci(10, 10)], [round(x, 4) for x in death_share_ci(0, 10)]
    ([0.6915, 1.0], [0.0, 0.3085])
    >>> [round(x, 4) for x in death_share_ci(5, 10)]
    [0.1871, 0.8129]
    """
    if not (isinstance(dead, int) and isinstance(n, int)) or not 0 <= dead <= n or n < 1:
        raise ValueError(f"need integers 0 <= dead <= n, n >= 1; got dead={dead!r}, n={n!r}")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1); got {level}")
    a = (1 - level) / 2

    def solve(f, target) -> float:  # f increases with p
        lo, hi = 0.0, 1.0
        while hi - lo > 1e-12:
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if f(mid) < target else (lo, mid)
        return (lo + hi) / 2

    # P(X >= dead) = a, and P(X <= dead) = a, i.e. P(X >= dead + 1) = 1 - a
    lower = 0.0 if dead == 0 else solve(lambda p: _binomial_tail(dead, n, p), a)
    upper = 1.0 if dead == n else solve(lambda p: _binomial_tail(dead + 1, n, p), 1 - a)
    return lower, upper


def _one_sided_p(t: float, df: int) -> float:
    """P(T >= t)."""
    half = t_two_sided_p(abs(t), df) / 2
    return half if t >= 0 else 1 - half


# --- the comparison --------------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    """B against A on one metric, paired by seed. ``p_adjust`` and ``p_tost_adjust``, when set by
    :func:`holm`, are the Holm-adjusted p-values the outcome is decided on."""

    metric: str
    a: str
    b: str
    seeds: tuple[int, ...]
    values_a: tuple[float, ...]
    values_b: tuple[float, ...]
    margin: float
    floor: float
    family: str = ""
    p_adjust: float | None = None
    p_tost_adjust: float | None = None
    #: Below this many draws the outcome is ``"undecided"`` (0: no minimum).
    min_draws: int = 0

    @property
    def n(self) -> int:
        return len(self.seeds)

    @property
    def dead_a(self) -> int:
        return sum(math.isinf(v) for v in self.values_a)

    @property
    def dead_b(self) -> int:
        return sum(math.isinf(v) for v in self.values_b)

    @property
    def _dead_outcome(self) -> float | None:
        """+inf / -inf when one side all died and the other not at all, NaN for another mix,
        None when no run died."""
        if not (self.dead_a or self.dead_b):
            return None
        if self.dead_b == self.n and self.dead_a == 0:
            return math.inf
        if self.dead_a == self.n and self.dead_b == 0:
            return -math.inf
        return math.nan

    @property
    def diffs(self) -> np.ndarray:
        return np.asarray(self.values_b, np.float64) - np.asarray(self.values_a, np.float64)

    @property
    def diff(self) -> float:
        """The mean per-seed difference B - A (or +-inf / NaN, see :attr:`_dead_outcome`)."""
        d = self._dead_outcome
        return float(np.mean(self.diffs)) if d is None else d

    @property
    def mean_a(self) -> float:
        return float(np.mean(self.values_a))

    @property
    def mean_b(self) -> float:
        return float(np.mean(self.values_b))

    @property
    def sd(self) -> float:
        return float(np.std(self.diffs, ddof=1)) if self.n > 1 else math.nan

    def ci(self, level: float = 0.95) -> tuple[float, float]:
        """The t-interval of the mean difference at ``level``."""
        d = self.diff
        if not math.isfinite(d) or self.n < 2:
            return (d, d)
        h = t_quantile(0.5 + level / 2, self.n - 1) * self.sd / math.sqrt(self.n)
        return (d - h, d + h)

    @property
    def p(self) -> float:
        """Two-sided paired t-test of mean difference 0 (unadjusted)."""
        d = self._dead_outcome
        if d is not None:
            return 0.0 if math.isinf(d) else 1.0
        if self.n < 2:
            return 1.0
        m, s = self.diff, self.sd
        if s == 0:
            return 1.0 if m == 0 else 0.0
        return t_two_sided_p(m / (s / math.sqrt(self.n)), self.n - 1)

    @property
    def p_tost(self) -> float:
        """The larger of the two one-sided p-values of |mean difference| >= margin (unadjusted)."""
        if self._dead_outcome is not None or self.n < 2:
            return 1.0
        m, s = self.diff, self.sd
        if s == 0:
            return 0.0 if abs(m) < self.margin else 1.0
        se = s / math.sqrt(self.n)
        lower = _one_sided_p((m + self.margin) / se, self.n - 1)
        upper = _one_sided_p((self.margin - m) / se, self.n - 1)
        return max(lower, upper)

    @property
    def outcome(self) -> str:
        """``"effect"``, ``"equivalent"`` or ``"undecided"`` (see the module); undecided
        below :attr:`min_draws` draws."""
        if self.n < self.min_draws:
            return "undecided"
        p = self.p if self.p_adjust is None else self.p_adjust
        pt = self.p_tost if self.p_tost_adjust is None else self.p_tost_adjust
        if p < ALPHA and abs(self.diff) > self.floor:
            return "effect"
        if pt < ALPHA:
            return "equivalent"
        return "undecided"

    @property
    def is_effect(self) -> bool:
        return self.outcome == "effect"

    @property
    def is_equivalent(self) -> bool:
        return self.outcome == "equivalent"

    @property
    def marginal(self) -> bool:
        """Undecided: neither an effect nor equivalent within the margin."""
        return self.outcome == "undecided"

    @property
    def worse_by(self) -> int:
        """Seeds where B's metric is above A's."""
        return int(np.sum(self.diffs > 0))

    def as_dict(self) -> dict:
        lo, hi = self.ci()
        return {
            "metric": self.metric,
            "a": self.a,
            "b": self.b,
            "n": self.n,
            "diff": self.diff,
            "ci95": [lo, hi],
            "p": self.p,
            "p_tost": self.p_tost,
            "p_adjust": self.p_adjust,
            "p_tost_adjust": self.p_tost_adjust,
            "margin": self.margin,
            "floor": self.floor,
            "outcome": self.outcome,
            "min_draws": self.min_draws,
            "family": self.family,
        }

    def __str__(self) -> str:
        lo, hi = self.ci()
        return (
            f"{self.metric}: {self.b} - {self.a} = {self.diff:+.4g} "
            f"[{lo:+.4g}, {hi:+.4g}], {self.n} seeds: {self.outcome}"
        )


def paired(
    values_a,
    values_b,
    *,
    metric: str = "final_excess",
    margin: float | None = None,
    floor: float = 0.0,
    a: str = "A",
    b: str = "B",
    seeds=None,
    min_draws: int = 0,
) -> Comparison:
    """A :class:`Comparison` from per-seed values (same order: seed i of A with seed i of B);
    undecided below ``min_draws`` draws.

    >>> c = paired([1.0, 2.0, 3.0, 4.0], [1.1, 2.1, 3.2, 4.0], margin=0.5)
    >>> round(c.diff, 3), c.outcome
    (0.1, 'equivalent')
    >>> paired([1.0, 2.0, 3.0, 4.0], [1.1, 2.1, 3.2, 4.0], margin=0.5, min_draws=10).outcome
    'undecided'
    """
    va, vb = tuple(float(v) for v in values_a), tuple(float(v) for v in values_b)
    if len(va) != len(vb) or not va:
        raise ValueError(f"paired values need equal, non-zero lengths; got {len(va)} and {len(vb)}")
    if margin is None:
        margin = MARGINS[metric]
    if not margin > 0:
        raise ValueError(f"margin must be positive; got {margin}")
    seeds = tuple(range(len(va))) if seeds is None else tuple(seeds)
    return Comparison(metric, a, b, seeds, va, vb, float(margin), float(floor),
                      min_draws=int(min_draws))


def holm(comparisons, family: str = "") -> list:
    """The comparisons with Holm-adjusted p-values (the effect tests and the equivalence tests
    each adjusted over the ``family``): the k-th smallest of m p-values becomes
    :math:`\\max_{j \\le k} \\min(1, (m - j + 1)\\, p_{(j)})`. Controls the family-wise error
    rate at :data:`ALPHA` for each kind of claim.

    >>> cs = [paired([0, 0, 0], [d, d + 0.1, d - 0.1]) for d in (1.0, 0.0)]
    >>> [round(c.p_adjust, 4) for c in holm(cs)]
    [0.0066, 1.0]
    """
    cs = list(comparisons)
    m = len(cs)

    def adjust(ps):
        order = np.argsort(ps, kind="stable")
        out, run = [0.0] * m, 0.0
        for k, i in enumerate(order):
            run = max(run, min(1.0, (m - k) * ps[i]))
            out[i] = run
        return out

    pa = adjust([c.p for c in cs])
    pt = adjust([c.p_tost for c in cs])
    return [
        replace(c, p_adjust=x, p_tost_adjust=y, family=family or c.family)
        for c, x, y in zip(cs, pa, pt)
    ]


@functools.cache
def arithmetic_floor(metric_name: str, data_dir=stored.DATA_DIR) -> float:
    """The largest range of ``metric_name``'s bounding metric (:data:`SPREAD_METRIC`) over the
    arithmetic profiles of one CPU (:mod:`.spread`), over the configurations measured there that
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


#: The name the first version of the book gave :func:`arithmetic_floor`.
machine_spread = arithmetic_floor


def compare(
    runs_a: list[stored.Run],
    runs_b: list[stored.Run],
    metric: str,
    label_a: str = "A",
    label_b: str = "B",
    paired_by_seed: bool = True,
    data_dir=stored.DATA_DIR,
    min_draws: int = 0,
    **_ignored,
) -> Comparison:
    """The :class:`Comparison` of configuration B against A (their runs) on ``metric`` (a key of
    :data:`METRICS`), paired by seed over the seeds both have; undecided below ``min_draws``
    draws."""
    if not runs_a or not runs_b:
        raise ValueError(f"nothing to compare: {len(runs_a)} runs against {len(runs_b)}")
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {list(METRICS)}; got {metric!r}")
    f = METRICS[metric]
    by_a = {r.config.seed: r for r in runs_a}
    by_b = {r.config.seed: r for r in runs_b}
    seeds = sorted(set(by_a) & set(by_b))
    if not seeds:
        raise ValueError("the two configurations share no seed")
    return paired(
        [f(by_a[s]) for s in seeds],
        [f(by_b[s]) for s in seeds],
        metric=metric,
        floor=arithmetic_floor(metric, data_dir),
        a=label_a,
        b=label_b,
        seeds=seeds,
        min_draws=min_draws,
    )
