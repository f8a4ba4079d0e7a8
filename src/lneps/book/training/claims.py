r"""The stability note's training claims, settled on the stored runs (NumPy only).

Each function returns a :class:`Claim`: the note's words, a verdict of :data:`VERDICTS`, a
one-paragraph finding with its numbers, the paired comparisons it rests on
(:class:`.effects.Comparison`, Holm-corrected over that claim's comparisons: the family of one
verdict) and the facts read off the runs. Verdicts:

* ``true``: the runs show what the note says, by effects (paired 95 % intervals clear of 0);
* ``corrected``: the runs show something else, by effects or by equivalence within the margin;
* ``qualified``: true only under conditions the note does not state (named in the finding);
* ``undecided``: the comparisons it would need are neither effects nor equivalent.

Every verdict holds where it was measured: the lab's 2-block model of width 64 (and the ``lr``
and ``scale`` slices where named), 300 steps of the recipe, float32 unless named, on two x86-64
CPUs (an AMD EPYC made the first three draws of the first five slices, an Intel Xeon the
others: ``Run.machine``; a paired comparison pairs two runs of one machine). Every verdict rests
on comparisons of at least :data:`.effects.MIN_DRAWS` paired draws (:func:`_cmp`); a comparison
with fewer is reported undecided. :func:`all_claims` lists them in the order of the note;
:func:`where_it_holds` and :func:`eps_rule` carry the generality slices and the rule in q the guide states.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from . import stored
from .effects import MIN_DRAWS, Comparison, compare, death_share_ci, final_excess, holm
from .grid import EPS_SWEEP, HALF_KERNEL, INIT_NAMES, PRECISION_STEPS
from .precision import PRECISIONS

__all__ = [
    "VERDICTS",
    "Claim",
    "SWEEP_FAMILIES",
    "zero_row_sites",
    "sigma_zero",
    "fp16_tiny_eps",
    "eps_table",
    "eps_against_zero",
    "plateau",
    "sweet_spot",
    "too_large",
    "norm_in_float32",
    "norm_vs_none",
    "pre_vs_post",
    "finetune_mismatch",
    "half_kernel",
    "where_it_holds",
    "eps_rule",
    "guide_table",
    "new_model_eps",
    "all_claims",
]

VERDICTS = ("true", "corrected", "qualified", "undecided")

#: The epsilon sweep's three families of runs (pre-norm, float32): which norm, which init. (Not
#: :data:`lneps.families.FAMILIES`, the input rows the kernels are graded on.)
SWEEP_FAMILIES = {
    "LayerNorm, init normal": {"norm": "LayerNorm", "init": "normal"},
    "LayerNorm, init small": {"norm": "LayerNorm", "init": "small"},
    "RMSNorm, init normal": {"norm": "RMSNorm", "init": "normal"},
}


@dataclass(frozen=True)
class Claim:
    key: str
    quote: str
    verdict: str
    finding: str
    effects: tuple[Comparison, ...] = ()
    facts: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(self.verdict)


def _sel(**where) -> list[stored.Run]:
    # LayerNorm unless asked: the RMSNorm runs share pre-norm, init normal and the sweep's epsilons
    where.setdefault("norm", "LayerNorm")
    where.setdefault("precision", "fp32")
    where.setdefault("steps", 300)
    runs = stored.select(**where)
    if not runs:
        raise LookupError(f"no stored runs for {where}")
    return runs


def _cmp(*args, **kw) -> Comparison:
    """:func:`.effects.compare` for a verdict: undecided below :data:`.effects.MIN_DRAWS` draws
    (the generality slices' four draws, :func:`where_it_holds` and :func:`eps_rule`, use
    :func:`.effects.compare` itself and say how many draws they rest on)."""
    return compare(*args, min_draws=MIN_DRAWS, **kw)


def _eps(e) -> str:
    return "0" if e == 0 else f"{e:g}"


def _mean(vals) -> float:
    return float(np.mean(vals))


# --- sigma = 0 ---------------------------------------------------------------------------------


def zero_row_sites() -> dict[tuple, list[int]]:
    """Every (placement, init, eps, precision, site) where a recorded step of a pre-training run
    had a row with q = 0 exactly, with the recorded steps it happened at (over the seeds)."""
    out: dict[tuple, set] = {}
    for r in stored.runs().values():
        if r.config.is_finetune or not r.sites:
            continue
        z = r.stat("zero_rows")
        for j, site in enumerate(r.sites):
            hits = np.nonzero(z[:, j] > 0)[0]
            if len(hits):
                c = r.config
                key = (c.placement, c.init, c.eps, c.precision, site)
                out.setdefault(key, set()).update(int(s) for s in r.record_steps[hits])
    return {k: sorted(v) for k, v in sorted(out.items(), key=str)}


def sigma_zero() -> Claim:
    """ "sigma = 0 at the start of training when weights are initialized poorly, when a layer
    has died"; "one zero standard deviation can kill an entire training run".

    Where rows of zero variance reach a norm at all (:func:`zero_row_sites`), what epsilon = 0
    does there (the sandwich at ``zero_resid``), what 1e-12 and 1e-5 do instead (the gradient
    at step 0 grows as 1/sqrt(epsilon)), how small q gets under the small init, and the
    zero-row probe: one dead row in one batch, with and without loss scaling."""
    sites = zero_row_sites()
    sw = dict(placement="sandwich", init="zero_resid")
    dead0 = _sel(**sw, eps=0.0)
    alive = {e: _sel(**sw, eps=e) for e in (1e-12, 1e-5)}
    base = _sel(placement="pre", init="normal", eps=1e-5)
    small = _sel(placement="pre", init="small", eps=1e-5)
    q_small = float(min(np.nanmin(r.stat("q_min")[0]) for r in small))
    eps0 = [r for r in stored.runs().values() if r.config.eps == 0.0 and not r.config.is_finetune]
    eps0_dead_elsewhere = sorted(
        r.id
        for r in eps0
        if r.dead and (r.config.placement, r.config.init) != ("sandwich", "zero_resid")
    )
    probe = stored.manifest()["zero_row_probe"]

    def pr(prec, eps):
        return [p for p in probe if p["precision"] == prec and p["eps"] == eps]

    killed = all(
        not p["loss_finite"] and p["nonfinite_param_share"] == 1.0
        for p in pr("fp32", 0.0) + pr("bf16_norm32", 0.0)
    )
    guarded = all(
        p["step_skipped"] and p["nonfinite_param_share"] == 0.0 for p in pr("fp16_norm32", 0.0)
    )
    tiny_ok = all(p["loss_finite"] and p["nonfinite_param_share"] == 0.0 for p in pr("fp32", 1e-12))
    label = "sandwich, zero_resid, eps 1e-5"
    effects = tuple(
        holm(
            [
                _cmp(alive[1e-5], dead0, "final_excess", label, "eps 0"),
                _cmp(alive[1e-5], alive[1e-12], "log10_max_grad_norm", label, "eps 1e-12"),
                _cmp(alive[1e-5], alive[1e-12], "final_excess", label, "eps 1e-12"),
            ],
            family="zero rows",
        )
    )
    gn0 = {_eps(e): [float(r.grad_norm[0]) for r in rs] for e, rs in alive.items()}
    gn0["pre, normal, 1e-5"] = [float(r.grad_norm[0]) for r in base]
    only_sandwich = all(
        k[0] == "sandwich" and k[1] == "zero_resid" and k[4].endswith(".out") for k in sites
    )
    unscaled = {k: v for k, v in sites.items() if not PRECISIONS[k[3]].scaler}
    at_step0 = all(v == [0] for v in unscaled.values())
    scaled_last = {k: v[-1] for k, v in sites.items() if PRECISIONS[k[3]].scaler}
    d_last = max((v for k, v in scaled_last.items() if k[3] == "fp16_norm32"), default=0)
    facts = {
        "zero_row_sites": {"/".join(map(str, k)): v for k, v in sites.items()},
        "only_sandwich_zero_resid_outputs": only_sandwich,
        "only_at_step_0_without_loss_scaling": at_step0,
        "last_zero_row_step_with_loss_scaling": {
            "/".join(map(str, k)): v for k, v in scaled_last.items()
        },
        "eps0_first_nonfinite_step": [r.first_nonfinite_step for r in dead0],
        "eps0_stopped_at": [r.stopped_at for r in dead0],
        "eps0_runs": len(eps0),
        "eps0_dead_elsewhere": eps0_dead_elsewhere,
        "grad_norm_step0": gn0,
        "q_min_small_init_step0": q_small,
        "probe_kills_fp32_bf16": killed,
        "probe_guarded_by_loss_scaling": guarded,
        "probe_1e-12_survives": tiny_ok,
        "probe": probe,
    }
    finding = (
        f"Rows with q = 0 reached a norm only at the sandwich's sublayer-output norms under the "
        f"zero-initialized projections ({', '.join(sorted({k[4] for k in sites}))}): each sublayer adds "
        f"exactly zero there, so every row is zero, "
        f"{'at step 0 only' if at_step0 else 'also after step 0'} in float32 (the first update moves the "
        f"projections), and until step {d_last} under loss scaling with the norm in float32 (d), whose "
        f"skipped steps update nothing, for ever in mode (e). With epsilon = 0 such a run is dead at step "
        f"{dead0[0].first_nonfinite_step} (all {len(dead0)} seeds); with 1e-12 or 1e-5 it trains (final excess "
        f"{_mean([final_excess(r) for r in alive[1e-12]]):.3f} and "
        f"{_mean([final_excess(r) for r in alive[1e-5]]):.3f} nats), "
        f"but the gradient norm at step 0 is {_mean(gn0['1e-12']):.3g} at 1e-12 and {_mean(gn0['1e-05']):.3g} at 1e-5 "
        f"against {_mean(gn0['pre, normal, 1e-5']):.3g} for pre-norm: 1/sqrt(epsilon) times a zero row's gradient. "
        f"The small init does not give sigma = 0 (q at least {q_small:.2g} at step 0), and no other of the "
        f"{len(eps0)} runs with epsilon = 0 died. One zero row in one batch is enough: with epsilon = 0 its "
        f"NaN spreads through attention to its whole window, the loss and every gradient, and after one "
        f"AdamW step {'every' if killed else 'not every'} parameter is NaN in float32 and bfloat16; loss "
        f"scaling {'skips that step and the parameters stay finite' if guarded else 'does not save it'}; "
        f"1e-12 {'keeps it finite' if tiny_ok else 'does not help'}."
    )
    verdict = "qualified" if killed and only_sandwich else ("true" if killed else "corrected")
    return Claim(
        "sigma_zero",
        "sigma = 0 ... at the start of training when weights are initialized poorly, when "
        "a layer has died; one zero standard deviation can kill an entire training run",
        verdict,
        finding,
        effects,
        facts,
    )


# --- 1e-12 in float16 ---------------------------------------------------------------------------


def fp16_tiny_eps() -> Claim:
    """ "In float16, 1e-12 may simply underflow to zero -- you added nothing": mode (e) (epsilon
    stored in float16, so 0) against (d) (norm in float32 with 1e-12) at pre-norm ``normal``
    (q > 0 everywhere), and (e) against float32 (a) with 1e-12 at the sandwich ``zero_resid``
    (q = 0 at step 0), 150-step prefixes (held-out loss after 150 steps), ten draws; and, as a
    fact, what the float16 kernel (f) does with 1e-12 where q0 is below float16's smallest
    subnormal (:func:`half_kernel`). (d) at the sandwich has three draws: its skipped steps are
    reported, not tested."""
    n = PRECISION_STEPS
    pre = dict(placement="pre", init="normal", eps=1e-12, steps=n)
    sw = dict(placement="sandwich", init="zero_resid", eps=1e-12)
    d_pre, e_pre = _sel(**pre, precision="fp16_norm32"), _sel(**pre, precision="fp16_eps16")
    a_sw = _sel(**sw)
    d_sw = _sel(**sw, precision="fp16_norm32", steps=n)
    e_sw = _sel(**sw, precision="fp16_eps16", steps=n)
    effects = tuple(
        holm(
            [
                _cmp(d_pre, e_pre, f"excess_at_{n}", "(d) pre-norm, 1e-12",
                     "(e) eps 0 in float16"),
                _cmp(a_sw, e_sw, f"excess_at_{n}", "(a) sandwich zero_resid, 1e-12",
                     "(e) eps 0 in float16"),
            ],
            family="1e-12 in float16",
        )
    )
    share16 = max(float(np.nanmax(r.stat("share_below_float16"))) for r in d_pre)
    qmin = min(float(np.nanmin(r.stat("q_min"))) for r in d_pre + e_pre)
    f16 = stored.manifest()["autocast"]["float16_of"]
    (half,) = [r for r in half_kernel()["rows"] if (r["init"], r["eps"]) == ("small", 1e-12)]
    facts = {
        "float16_of_1e-12": f16["1e-12"],
        "float16_of_1e-8": f16["1e-08"],
        "pre_max_share_below_float16_threshold": share16,
        "pre_min_q": qmin,
        "pre_min_q_over_1e-12": qmin / 1e-12,
        "sandwich_e_first_nonfinite": [r.first_nonfinite_step for r in e_sw],
        "sandwich_e_stopped_at": [r.stopped_at for r in e_sw],
        "sandwich_d_skipped_steps": [r.meta["nonfinite_steps"] for r in d_sw],
        "sandwich_d_dead": [r.dead for r in d_sw],
        "sandwich_d_draws": len(d_sw),
        "half_kernel_small_1e-12": half,
    }
    pre_none, sw_kill = (
        effects[0].is_equivalent,
        effects[1].is_effect and effects[1].diff == math.inf,
    )
    half_kill = half["comparison"].is_effect and half["comparison"].diff == math.inf
    finding = (
        f"1e-12 is {f16['1e-12']:g} in float16 (so is 1e-8). Where every row has q > 0 and the "
        f"statistics are float32 that costs nothing: in pre-norm the smallest q of any row at any "
        f"site was {qmin:.2g}, {qmin / 1e-12:.1g} times 1e-12 (share of rows below float16's "
        f"threshold: {share16:g}); (e) against (d): {_text(effects[0])}. Where q = 0 it is fatal: "
        f"the sandwich at zero_resid with the float16 epsilon has a NaN loss from step "
        f"{e_sw[0].first_nonfinite_step}, loss scaling skips every step, and the run is stopped "
        f"after {e_sw[0].meta['nonfinite_steps']} skipped steps; against float32 with 1e-12: "
        f"{_text(effects[1])}. It is also fatal where the variance itself is computed in float16 "
        f"and q0 ({half['q0']:.2g}) is below float16's smallest subnormal: the float16 kernel (f) at the "
        f"small init dies in {half['dead']} of {half['runs']} draws, where float32 with 1e-12 "
        f"trains ({_text(half['comparison'])})."
    )
    verdict = ("qualified" if pre_none and sw_kill and half_kill
               else ("true" if sw_kill else "undecided"))
    return Claim(
        "fp16_tiny_eps",
        "In float16, 1e-12 may simply underflow to zero -- you added nothing; "
        "still vulnerable in mixed-precision training",
        verdict,
        finding,
        effects,
        facts,
    )


# --- the sweet spot and too large an epsilon ---------------------------------------------------


def _family_runs(fam: dict) -> dict[float, list[stored.Run]]:
    return {e: _sel(placement="pre", eps=e, **fam) for e in EPS_SWEEP}


def _text(c: Comparison, digits: int = 4) -> str:
    """``+0.0084 nats [+0.0062, +0.0106], 10 seeds: effect`` (plain text, for findings)."""
    if math.isnan(c.diff):
        return f"{c.diff:+} ({c.dead_a} and {c.dead_b} of {c.n} seeds dead): {c.outcome}"
    if math.isinf(c.diff):
        # one side died in every draw, the other in none: the exact interval of the share dying
        lo, hi = death_share_ci(c.n, c.n)
        return (f"{c.diff:+} ({c.dead_a} and {c.dead_b} of {c.n} seeds dead; share dying "
                f"[{lo:.2f}, {hi:.2f}]): {c.outcome}")
    lo, hi = c.ci()
    return f"{c.diff:+.{digits}f} [{lo:+.{digits}f}, {hi:+.{digits}f}], {c.n} seeds: {c.outcome}"


def eps_table(metric: str = "final_excess") -> dict[str, dict[float, tuple[float, ...]]]:
    """Per family of :data:`SWEEP_FAMILIES`, per epsilon of the sweep, the metric's per-seed
    values."""
    from .effects import METRICS

    f = METRICS[metric]
    return {
        name: {e: tuple(f(r) for r in rs) for e, rs in _family_runs(fam).items()}
        for name, fam in SWEEP_FAMILIES.items()
    }


_SWEEP_CACHE: dict = {}


def eps_against_zero(metric: str = "final_excess") -> dict[str, dict[float, Comparison]]:
    """Per family, every epsilon of the sweep against epsilon = 0 (the same model with no
    epsilon), paired by seed; Holm over the family of all of them (3 x 7 comparisons)."""
    if metric not in _SWEEP_CACHE:
        pairs = []
        for name, fam in SWEEP_FAMILIES.items():
            runs = _family_runs(fam)
            pairs += [
                (name, e, _cmp(runs[0.0], runs[e], metric, f"{name}, eps 0", f"eps {_eps(e)}"))
                for e in EPS_SWEEP
                if e != 0
            ]
        adj = holm([c for *_, c in pairs], family="the epsilon sweep against epsilon = 0")
        out: dict[str, dict[float, Comparison]] = {n: {} for n in SWEEP_FAMILIES}
        for (name, e, _), c in zip(pairs, adj):
            out[name][e] = c
        _SWEEP_CACHE[metric] = out
    return _SWEEP_CACHE[metric]


def plateau(fam: dict, metric: str = "final_excess") -> tuple[float, list[float]]:
    """The reference epsilon of a family (0: no epsilon at all) and every epsilon of the sweep
    equivalent to it within the margin (:data:`.effects.MARGINS`), 0 included."""
    (name,) = [n for n, f in SWEEP_FAMILIES.items() if f == fam]
    cs = eps_against_zero(metric)[name]
    return 0.0, [0.0] + [e for e, c in cs.items() if c.is_equivalent]


def _q0(runs) -> float:
    """Median over seeds of the median q at the first norm site at step 0."""
    return float(np.median([r.stat("q_p50")[0][0] for r in runs]))


def sweet_spot() -> Claim:
    """ "The sweet spot -- typically epsilon in [1e-6, 1e-5] -- balances stability against
    fidelity": per family, every epsilon against epsilon = 0 (:func:`eps_against_zero`). A
    sweet spot needs 1e-6 or 1e-5 to beat 0 by an effect; it is corrected where each of them is
    equivalent to 0 or worse than it."""
    table = eps_against_zero()
    effects, facts, lines = [], {}, []
    for name, fam in SWEEP_FAMILIES.items():
        runs = _family_runs(fam)
        cs = table[name]
        effects += list(cs.values())
        rng = {e: cs[e] for e in (1e-6, 1e-5)}
        identical = [
            e
            for e, rs in runs.items()
            if all(np.array_equal(r.loss, r0.loss) for r, r0 in zip(rs, runs[0.0]))
        ]
        never_below = [
            e
            for e, rs in runs.items()
            if max(float(np.nanmax(r.stat("share_below_float32"))) for r in rs) == 0
        ]
        facts[name] = {
            "seeds": len(runs[0.0]),
            "median_q_step0": _q0(runs[1e-5]),
            "outcome": {_eps(e): c.outcome for e, c in cs.items()},
            "diff": {_eps(e): c.diff for e, c in cs.items()},
            "ci95": {_eps(e): c.ci() for e, c in cs.items()},
            "plateau": plateau(fam)[1],
            "better_than_eps0": [e for e, c in cs.items() if c.is_effect and c.diff < 0],
            "worse_than_eps0": {
                _eps(e): c.diff for e, c in cs.items() if c.is_effect and c.diff > 0
            },
            "range_beats_eps0": any(c.is_effect and c.diff < 0 for c in rng.values()),
            "range_decided": all(
                c.is_equivalent or (c.is_effect and c.diff > 0) for c in rng.values()
            ),
            "bit_identical_to_eps0": identical,
            "never_below_float32_threshold": never_below,
            "means": {_eps(e): _mean([final_excess(r) for r in rs]) for e, rs in runs.items()},
        }
        lines.append(
            f"{name} (q at step 0 about {facts[name]['median_q_step0']:.2g}): "
            + "; ".join(f"{_eps(e)} {_text(cs[e])}" for e in (1e-8, 1e-6, 1e-5, 1e-3))
        )
    beats = [n for n, f in facts.items() if f["range_beats_eps0"]]
    decided = all(f["range_decided"] for f in facts.values())
    if len(beats) == len(facts):
        verdict = "true"
    elif beats:
        verdict = "qualified"
    elif decided:
        verdict = "corrected"
    else:
        verdict = "undecided"
    finding = (
        "Final excess over the chain's held-out loss, each epsilon against epsilon = 0, paired "
        "by seed (95 % interval, Holm over the sweep's 21 comparisons): "
        + "; ".join(lines)
        + ". Runs whose rows never had q/epsilon below 2^23 are those of epsilon = 0 bit for bit: "
        + "; ".join(
            f"{n}: {', '.join(_eps(e) for e in v['bit_identical_to_eps0'])}"
            for n, v in facts.items()
        )
        + ". "
        + (
            "In no family does 1e-6 or 1e-5 beat epsilon = 0; where q at initialization is far "
            "above them they are equivalent to it, where it is below them they cost."
            if not beats
            else "Some family has an epsilon in the range better than 0."
        )
    )
    return Claim(
        "sweet_spot",
        "The sweet spot -- typically eps in [1e-6, 1e-5] -- balances stability against fidelity",
        verdict,
        finding,
        tuple(effects),
        facts,
    )


def too_large() -> Claim:
    """ "Too large (1e-1 or 1.0): the normalization no longer normalizes -- it's dividing by a
    constant ... expressivity is destroyed": per family, 1e-1 and 1 against 1e-5 on the final
    excess and the mean excess (speed); epsilon = 1 against no norm at all (same init, layer
    norm families); the share of the learnable gap (unigram entropy - floor) still learnt at
    epsilon 1; and how far the network raised q at the first norm. Holm over the claim's 14
    comparisons."""
    meta = stored.corpus_meta()
    gap = meta["unigram_entropy_nats"] - stored.held_out_floor()
    raw, keys = [], []
    for name, fam in SWEEP_FAMILIES.items():
        runs = _family_runs(fam)
        for big in (1e-1, 1.0):
            for metric in ("final_excess", "mean_excess"):
                raw.append(
                    _cmp(runs[1e-5], runs[big], metric, f"{name}, eps 1e-5", f"eps {_eps(big)}")
                )
                keys.append((name, big, metric))
        if fam["norm"] == "LayerNorm":
            none = _sel(placement="none", init=fam["init"], eps=None)
            raw.append(_cmp(none, runs[1.0], "final_excess", f"no norm, {fam['init']}", "eps 1"))
            keys.append((name, "none", "final_excess"))
    effects = holm(raw, family="too large an epsilon")
    by = dict(zip(keys, effects))
    facts, lines, destroyed, costs_all = {}, [], {}, True
    for name, fam in SWEEP_FAMILIES.items():
        runs = _family_runs(fam)
        fin = [by[name, 1e-1, "final_excess"], by[name, 1.0, "final_excess"]]
        costs_all &= all(e.is_effect and e.diff > 0 for e in fin)
        learnt = 1 - _mean([final_excess(r) for r in runs[1.0]]) / gap
        destroyed[name] = learnt < 0.5
        site0 = runs[1.0][0].sites[0]
        q_end = {
            _eps(e): float(np.median([r.stat("q_p50", site0)[-1] for r in runs[e]]))
            for e in (1e-5, 1.0)
        }
        q_start = float(np.median([r.stat("q_p50", site0)[0] for r in runs[1.0]]))
        facts[name] = {
            "final_cost_1e-1": fin[0].diff,
            "final_cost_1": fin[1].diff,
            "ci_1e-1": fin[0].ci(),
            "ci_1": fin[1].ci(),
            "seeds": fin[0].n,
            "share_of_gap_learnt_at_1": learnt,
            "q_p50_first_site_start": q_start,
            "q_p50_first_site_end": q_end,
        }
        line = (
            f"{name}: 1e-1 {_text(fin[0], 3)}, 1 {_text(fin[1], 3)}; at 1 it still learns "
            f"{learnt:.0%} of the gap; q at the first norm ends at {q_end['1']:.2g} (from {q_start:.2g}; "
            f"{q_end['1e-05']:.2g} at 1e-5)"
        )
        if (name, "none", "final_excess") in by:
            e = by[name, "none", "final_excess"]
            facts[name]["eps_1_against_no_norm"] = e.diff
            facts[name]["eps_1_against_no_norm_outcome"] = e.outcome
            line += f"; epsilon 1 against no norm at all: {_text(e, 3)}"
        lines.append(line)
    finding = (
        "Against 1e-5, final excess over the chain's held-out loss (paired, 95 % interval, Holm over "
        "14 comparisons): "
        + "; ".join(lines)
        + f". The learnable gap (unigram entropy - floor) is "
        f"{gap:.3f} nats. What a large epsilon costs is what the norm was worth, and that depends on "
        "q: little where the init makes q large, most of the learning where q starts far below "
        "epsilon."
    )
    if not costs_all:
        verdict = "undecided"
    elif all(destroyed.values()):
        verdict = "true"
    else:
        verdict = "qualified"
    facts["destroyed"] = destroyed
    return Claim(
        "too_large",
        "eps too large (1e-1 or 1.0): the normalization no longer normalizes -- it's "
        "dividing by a constant; expressivity is destroyed",
        verdict,
        finding,
        tuple(effects),
        facts,
    )


# --- placements ----------------------------------------------------------------------------------

_PLACEMENT_METRICS = ("final_excess", "mean_excess", "log10_max_grad_norm")


def _placement_effects(a: str, b: str, **where) -> tuple[list[Comparison], dict]:
    """Per init, placement ``b`` against ``a`` (1e-5; no epsilon for ``none``) on the three
    metrics, Holm over them (9 comparisons)."""
    raw, facts = [], {}
    for init in INIT_NAMES:
        ra = _sel(placement=a, init=init, eps=None if a == "none" else 1e-5, **where)
        rb = _sel(placement=b, init=init, eps=None if b == "none" else 1e-5, **where)
        raw += [_cmp(ra, rb, m, f"{a}, {init}", f"{b}, {init}") for m in _PLACEMENT_METRICS]
        facts[init] = {
            "dead": [sum(r.dead for r in ra), sum(r.dead for r in rb)],
            "nonfinite_steps": [
                sum(r.meta["nonfinite_steps"] for r in ra),
                sum(r.meta["nonfinite_steps"] for r in rb),
            ],
            "seeds": min(len(ra), len(rb)),
        }
    effects = holm(raw, family=f"{b} against {a}")
    for e in effects:
        init = e.a.split(", ")[1]
        facts[init][e.metric] = {
            "diff": e.diff,
            "ci95": e.ci(),
            "outcome": e.outcome,
            "mean_a": e.mean_a,
            "mean_b": e.mean_b,
        }
    return effects, facts


def _who_is_better(effects: list[Comparison]) -> tuple[dict, dict]:
    """Per init: is A better (lower final and mean excess, each by an effect), is B better."""
    a_better, b_better = {}, {}
    for init in INIT_NAMES:
        loss = [
            e for e in effects if e.a.endswith(init) and e.metric in ("final_excess", "mean_excess")
        ]
        a_better[init] = all(e.is_effect and e.diff > 0 for e in loss)
        b_better[init] = all(e.is_effect and e.diff < 0 for e in loss)
    return a_better, b_better


def _placement_finding(effects, what) -> str:
    parts = []
    for init in INIT_NAMES:
        es = {e.metric: e for e in effects if e.a.endswith(init)}
        f, m, g = es["final_excess"], es["mean_excess"], es["log10_max_grad_norm"]
        parts.append(
            f"{init}: final {_text(f, 3)}, mean {_text(m, 3)}, largest gradient norm "
            f"x{10**g.diff:.2g} ({g.outcome})"
        )
    return (
        f"{what} (second minus first, paired, Holm over 9 comparisons), per init: "
        + "; ".join(parts)
        + "."
    )


def _stability(facts) -> tuple[bool, bool]:
    """Whether any run of A, or of B, died or had a non-finite step."""
    a = any(v["dead"][0] or v["nonfinite_steps"][0] for v in facts.values())
    b = any(v["dead"][1] or v["nonfinite_steps"][1] for v in facts.values())
    return a, b


def norm_vs_none() -> Claim:
    """Layer normalization against none, at the recipe's scale: no norm against pre-norm (1e-5),
    per init, on the final excess, the mean excess (speed) and the largest gradient norm; and
    whether any run of either had a non-finite step (stability). :func:`where_it_holds` carries
    the learning rates, depths, widths and warm-up."""
    effects, facts = _placement_effects("pre", "none")
    norm_better, none_better = _who_is_better(effects)
    unstable_pre, unstable_none = _stability(facts)
    faster = all(norm_better.values())
    more_stable = unstable_none and not unstable_pre
    if faster and more_stable:
        verdict = "true"
    elif faster:
        verdict = "qualified"
    elif any(none_better.values()):
        verdict = "corrected"
    else:
        verdict = "undecided"
    finding = (
        _placement_finding(effects, "No norm against pre-norm (1e-5)")
        + " "
        + (
            "The norm makes training faster and better at every init at the recipe's learning rate. "
            if faster
            else ""
        )
        + (
            "No run without a norm had a non-finite step or died at the recipe's scale."
            if not unstable_none
            else "Runs without a norm had non-finite steps."
        )
    )
    facts.update(
        norm_better=norm_better,
        none_better=none_better,
        unstable_pre=unstable_pre,
        unstable_none=unstable_none,
    )
    return Claim(
        "norm_vs_none",
        "Layer normalization makes training faster and more stable (against no normalization)",
        verdict,
        finding,
        tuple(effects),
        facts,
    )


def pre_vs_post() -> Claim:
    """Pre-norm against post-norm (both 1e-5), per init, on the same three metrics and stability.
    The usual claim (Xiong et al. 2020 and after): pre-norm trains faster and more stably."""
    effects, facts = _placement_effects("pre", "post")
    pre_better, post_better = _who_is_better(effects)
    unstable_pre, unstable_post = _stability(facts)
    if all(pre_better.values()) and not unstable_pre:
        verdict = "true"
    elif all(post_better.values()) and not unstable_post:
        verdict = "corrected"
    elif not any(pre_better.values()) and not any(post_better.values()):
        verdict = "undecided"
    else:
        verdict = "qualified"
    finding = (
        _placement_finding(effects, "Post-norm against pre-norm (1e-5)")
        + " "
        + (
            "Post-norm is ahead at every init, and no run of either placement had a non-finite step: "
            "with two blocks and a warm-up, post-norm's known instability does not appear."
            if verdict == "corrected"
            else ""
        )
    )
    facts.update(
        pre_better=pre_better,
        post_better=post_better,
        unstable_pre=unstable_pre,
        unstable_post=unstable_post,
    )
    return Claim(
        "pre_vs_post",
        "Pre-norm trains faster and more stably than post-norm",
        verdict,
        finding,
        tuple(effects),
        facts,
    )


#: The generality slices' conditions (:mod:`.grid`, ``lr`` and ``scale``): name -> the fields
#: that select them. The recipe's own runs come first.
CONDITIONS = {
    "recipe (2 blocks, lr 3e-3)": {},
    "lr 1e-2": {"lr": 1e-2},
    "lr 3e-2": {"lr": 3e-2},
    "8 blocks": {"layers": 8},
    "4 blocks": {"layers": 4},
    "4 blocks of width 128": {"layers": 4, "width": 128},
    "no warm-up": {"warmup": 0},
}


def where_it_holds() -> list[dict]:
    """Per condition of :data:`CONDITIONS` (init ``normal``, seeds 0-3 outside the recipe): no norm
    against pre-norm and post-norm against pre-norm on the final excess, paired (Holm over
    the 14 comparisons), and per placement the median over seeds of the largest gradient norm
    and the non-finite steps: the stability measure."""
    rows, raw = [], []
    for cond, where in CONDITIONS.items():
        try:
            runs = {
                p: _sel(placement=p, init="normal", eps=None if p == "none" else 1e-5, **where)
                for p in ("pre", "post", "none")
            }
        except LookupError:  # a slice not stored (yet): the chapter says which are
            continue
        row = {
            "condition": cond,
            "seeds": min(len(v) for v in runs.values()),
            "max_grad_norm": {
                p: float(np.median([np.nanmax(r.grad_norm) for r in rs])) for p, rs in runs.items()
            },
            "nonfinite_steps": {
                p: sum(r.meta["nonfinite_steps"] for r in rs) for p, rs in runs.items()
            },
            "dead": {p: sum(r.dead for r in rs) for p, rs in runs.items()},
            "final_excess": {p: _mean([final_excess(r) for r in rs]) for p, rs in runs.items()},
        }
        raw += [
            compare(runs["pre"], runs["none"], "final_excess", f"pre, {cond}", "no norm"),
            compare(runs["pre"], runs["post"], "final_excess", f"pre, {cond}", "post"),
        ]
        rows.append(row)
    adj = holm(raw, family="where the placements' verdicts hold")
    for i, row in enumerate(rows):
        row["none_minus_pre"], row["post_minus_pre"] = adj[2 * i], adj[2 * i + 1]
    return rows


# --- fine-tuning --------------------------------------------------------------------------------


def finetune_mismatch() -> Claim:
    """ "Models trained with incompatible eps values and then fine-tuned in different precision
    can exhibit subtle degradation": per pre-trained model (init, eps_a), each swap (another eps
    in float32, or another precision with the same eps) against the control (same eps, float32),
    paired by seed: the held-out loss right after the swap and after the fine-tuning steps (Holm
    over all of them), and the change of the norm's output the stored q predicts
    (lneps.book.eps_swap)."""
    from ..eps_swap import predicted_relative_change

    raw, facts, keys = [], {}, []
    for init in ("normal", "small"):
        for ea in (1e-12, 1e-5):
            ctrl = _sel(init=init, eps=ea, ft_eps=ea, ft_precision="fp32")
            base = _sel(placement="pre", init=init, eps=ea)
            ft = [
                r
                for r in stored.select(
                    init=init, eps=ea, precision="fp32", steps=300, ft_steps=ctrl[0].config.ft_steps
                )
                if (r.config.ft_eps, r.config.ft_precision) != (ea, "fp32")
            ]
            swaps = sorted({(r.config.ft_eps, r.config.ft_precision) for r in ft}, key=str)
            for eb, prec in swaps:
                rs = _sel(init=init, eps=ea, ft_eps=eb, ft_precision=prec)
                label, to = f"{init}, trained {_eps(ea)}", f"{_eps(eb)} {prec}"
                raw += [
                    _cmp(ctrl, rs, "after_swap", label, to),
                    _cmp(ctrl, rs, "after_finetune", label, to),
                ]
                qmin = min(float(np.nanmin(r.stat("q_min")[-1])) for r in base)
                qmed = float(np.median([np.nanmedian(r.stat("q_p50")[-1]) for r in base]))
                # the first norm sees the embeddings: its median q stays far below the others'
                q1 = float(np.median([r.stat("q_p50")[-1][0] for r in base]))
                eb_eff = float(np.float16(eb)) if prec == "fp16_eps16" else eb
                key = f"{label} -> {to}"
                keys.append(key)
                facts[key] = {
                    "q_min_end": qmin,
                    "q_median_end": qmed,
                    "q_first_norm_median_end": q1,
                    "predicted_change_at_first_norm": float(
                        predicted_relative_change(q1, ea, eb_eff)
                    ),
                    "predicted_change_at_q_min": float(predicted_relative_change(qmin, ea, eb_eff)),
                    "predicted_change_at_median_q": float(
                        predicted_relative_change(qmed, ea, eb_eff)
                    ),
                }
    effects = holm(raw, family="fine-tuning swaps against their controls")
    for i, key in enumerate(keys):
        e0, e1 = effects[2 * i], effects[2 * i + 1]
        facts[key].update({
            "after_swap": e0.diff,
            "after_swap_ci": e0.ci(),
            "after_swap_outcome": e0.outcome,
            "after_finetune": e1.diff,
            "after_finetune_ci": e1.ci(),
            "after_finetune_outcome": e1.outcome,
            "seeds": e0.n,
        })
    counts = {
        o: sum(e.outcome == o for e in effects) for o in ("effect", "equivalent", "undecided")
    }
    # the verdict rests on the swaps with ten draws (all of them, since ten_seeds covers every
    # swap); one with fewer would be undecided by construction, and is named
    tested = [e for e in effects if e.n >= MIN_DRAWS]
    few = sorted({f"{e.a} -> {e.b}" for e in effects if e.n < MIN_DRAWS})
    hit = sorted({f"{e.a} -> {e.b} ({e.metric})" for e in effects if e.is_effect})
    finding = (
        f"{len(keys)} swaps, each against its control (same model, same epsilon, float32), paired by "
        f"seed, the held-out loss right after the swap and after fine-tuning; Holm over the "
        f"{len(effects)} differences: {counts['effect']} effects, {counts['equivalent']} equivalent "
        f"within the margin, {counts['undecided']} undecided"
        + (f" (below {MIN_DRAWS} draws: " + "; ".join(few) + ")" if few else "")
        + ". Effects: "
        + ("; ".join(hit) if hit else "none")
        + ". The norm's output changes by "
        "|sqrt((q+a)/(q+b)) - 1| (lneps.book.eps_swap): at the trained models' median q that is at most "
        f"{max(v['predicted_change_at_median_q'] for k, v in facts.items() if '0.001' not in k):.1g} "
        "for the swaps between 1e-12 and 1e-5 and "
        f"{max(v['predicted_change_at_median_q'] for k, v in facts.items() if '0.001' in k):.1g} for 1e-3."
    )
    facts["counts"] = counts
    facts["few_draws"], facts["tested"] = few, len(tested)
    only_big = all(e.b.startswith("0.001") for e in tested if e.is_effect)
    if any(e.is_effect for e in tested) and only_big:
        verdict = "qualified"
    elif any(e.is_effect for e in tested):
        verdict = "true"
    elif tested and all(e.is_equivalent for e in tested):
        verdict = "corrected"  # every swap tested equivalent to its control within the margin
    else:
        verdict = "undecided"
    return Claim(
        "finetune_mismatch",
        "Models trained with incompatible eps values and then fine-tuned in "
        "different precision can exhibit subtle degradation",
        verdict,
        finding,
        tuple(effects),
        facts,
    )


# --- the norm in float32 ------------------------------------------------------------------------


def norm_in_float32() -> Claim:
    """ "Cast the normalization computation to float32 temporarily ... This is exactly what
    PyTorch's built-in LayerNorm does internally ... critical to correctness": what torch 2.13's
    CPU kernels and CPU autocast do (measured, stored in the manifest); in training, the
    float16 kernel (f) against its controls (:func:`half_kernel`, ten draws: the verdict rests
    on these); and (c) the norm's input and output rounded to bfloat16 (the residual stream,
    parameters and AdamW stay float32) against (b) bfloat16 autocast with the norm in float32,
    and (b) against float32 (a), pre-norm ``normal`` at 1e-5, held-out loss after 150 steps,
    ten draws."""
    n = PRECISION_STEPS
    a = _sel(placement="pre", init="normal", eps=1e-5)
    b = _sel(placement="pre", init="normal", eps=1e-5, precision="bf16_norm32", steps=n)
    c = _sel(placement="pre", init="normal", eps=1e-5, precision="bf16_norm16", steps=n)
    bf16 = holm(
        [
            _cmp(b, c, f"excess_at_{n}", "(b) bfloat16, norm in float32",
                 "(c) norm's input and output in bfloat16"),
            _cmp(a, b, f"excess_at_{n}", "(a) float32", "(b) bfloat16, norm in float32"),
        ],
        family="the norm's input and output in bfloat16",
    )
    hk = half_kernel()
    effects = tuple(hk["effects"]) + tuple(bf16)
    auto = stored.manifest()["autocast"]
    dt = auto["output_dtype"]
    kernels = auto["low_precision_kernels"]
    internal32 = all(
        v["layer_norm_rows_near_300_finite"]
        and abs(v["layer_norm_rows_of_1e-4_eps0_variance"] - 1) < 0.01
        for v in kernels.values()
    )
    cpu_autocast_keeps = (
        dt["autocast bfloat16, input bfloat16"]["layer_norm"] == "bfloat16"
        and dt["autocast bfloat16, input float32"]["layer_norm"] == "float32"
    )
    rows = {(r["init"], r["eps"]): r for r in hk["rows"]}
    dead_small = [e for (i, e), r in rows.items() if i == "small" and r["dead"] == r["runs"]]
    killed = all(rows[("small", e)]["comparison"].diff == math.inf for e in dead_small)
    alive = [r for r in hk["rows"] if r["dead"] == 0]
    facts = {
        "kernels_accumulate_in_float32": internal32,
        "cpu_autocast_keeps_input_type": cpu_autocast_keeps,
        "autocast_output_dtype": dt,
        "torch": stored.manifest()["provenance"]["torch"],
        "bf16_outcomes": [e.outcome for e in bf16],
        "bf16_draws": bf16[0].n,
        "half_dead_small_eps": dead_small,
        "half_alive": [(r["init"], r["eps"], r["comparison"].outcome) for r in alive],
        "seeds": hk["effects"][0].n,
    }
    finding = (
        f"torch {facts['torch']}'s CPU layer_norm and rms_norm on bfloat16 or float16 input "
        f"{'accumulate in float32' if internal32 else 'do not accumulate in float32'}, and CPU "
        f"autocast "
        f"{'leaves layer_norm in its input type' if cpu_autocast_keeps else 'changes it'}. "
        f"A kernel that computes the variance in float16 (f), at the small init (q0 "
        f"{rows[('small', 1e-8)]['q0']:.2g}, below float16's smallest subnormal, so the float16 "
        f"variance is 0): with epsilon {', '.join(_eps(e) for e in dead_small)} (0 in float16) "
        f"every draw dies; "
        + "; ".join(
            f"{r['init']}, {_eps(r['eps'])} against {r['control']}: {_text(r['comparison'])}"
            for r in alive
        )
        + f"; (f) 1e-6 against 1e-5: {_text(hk['eps_cost'])}. The norm's input and output in "
        f"bfloat16, (c) against (b): {_text(bf16[0])}; (b) against (a): {_text(bf16[1])}."
    )
    if killed and dead_small:
        verdict = "qualified"  # critical where q is below float16's range and epsilon is 0
    elif not internal32:
        verdict = "true"
    elif all(r["comparison"].is_equivalent for r in hk["rows"]):
        verdict = "corrected"
    else:
        verdict = "undecided"
    return Claim(
        "norm_in_float32",
        "Cast the normalization computation to float32 ... exactly what PyTorch's "
        "built-in LayerNorm does internally ... critical to correctness",
        verdict,
        finding,
        effects,
        facts,
    )


# --- a norm computed in float16 -----------------------------------------------------------------


def _crossing(runs, eps: float) -> float | None:
    """Median over the live runs of the first recorded step at which the median q at the first
    norm reaches ``eps`` (None when no run gets there)."""
    hits = []
    for r in runs:
        if r.dead:
            continue
        q = r.stat("q_p50")[:, 0]
        k = np.nonzero(q >= eps)[0]
        if len(k):
            hits.append(int(r.record_steps[k[0]]))
    return float(np.median(hits)) if hits else None


@functools.cache
def half_kernel() -> dict:
    """The ``half_kernel`` slice (:mod:`.grid`): pre-norm layer norm in mode (f), the norm and its
    variance computed in float16 with epsilon stored in float16, 150-step prefixes, ten draws.
    Per (init, epsilon) of :data:`.grid.HALF_KERNEL` a row: epsilon in float16, the median q at
    the first norm at step 0 (q0) and the smallest q of any row there, the dead runs (with the
    exact 95 % interval of the share that dies, :func:`.effects.death_share_ci`, and the dead
    controls) and their non-finite steps, the step at which the median q at the first norm reaches epsilon, and the
    paired comparison of the held-out loss after 150 steps against its control: float32 (a) at
    the same epsilon at ``small``, mode (e) at the same epsilon at ``normal`` (the same autocast
    and epsilon 0, the statistics in float32). One more comparison: (f) at 1e-6 against (f) at
    1e-5 at ``small``. Holm over that family (``effects``)."""
    n = PRECISION_STEPS
    raw, rows = [], []
    for init, e in HALF_KERNEL:
        f = _sel(placement="pre", init=init, eps=e, precision="fp16_var16", steps=n)
        if init == "small":
            ctrl, what = _sel(placement="pre", init=init, eps=e), "(a) float32"
        else:
            ctrl = _sel(placement="pre", init=init, eps=e, precision="fp16_eps16", steps=n)
            what = "(e) statistics in float32"
        raw.append(_cmp(ctrl, f, f"excess_at_{n}", f"{what}, {init}, {_eps(e)}",
                        "(f) float16 kernel"))
        e16 = float(np.float16(e))
        rows.append({
            "init": init,
            "eps": e,
            "eps_float16": e16,
            "runs": len(f),
            "dead": sum(r.dead for r in f),
            "dead_ci95": death_share_ci(sum(r.dead for r in f), len(f)),
            "control_dead": sum(r.dead for r in ctrl),
            "first_nonfinite_step": sorted({r.first_nonfinite_step for r in f if r.dead}),
            "nonfinite_steps": [int(r.meta["nonfinite_steps"]) for r in f],
            "q0": _q0(f),
            "q0_min": float(min(np.nanmin(r.stat("q_min")[0]) for r in f)),
            "q0_over_eps": _q0(f) / e16 if e16 else math.inf,
            "steps_to_q_eps": _crossing(f, e16) if e16 else None,
            "control": what,
        })
    small = {e: _sel(placement="pre", init="small", eps=e, precision="fp16_var16", steps=n)
             for e in (1e-6, 1e-5)}
    raw.append(_cmp(small[1e-5], small[1e-6], f"excess_at_{n}", "(f) small, 1e-5", "(f) 1e-6"))
    effects = holm(raw, family="the float16 kernel (f)")
    for row, c in zip(rows, effects):
        row["comparison"] = c
    return {"rows": rows, "effects": effects, "eps_cost": effects[-1]}


# --- the rule in q, and the guide's table ------------------------------------------------------

#: Where epsilon's cost is measured against q at initialization: (name, fields selecting the
#: runs, epsilons compared with 0). The recipe's three sweep families, and the small init at 3x
#: the steps and at 4 blocks of width 128 (the ``scale`` slice, four seeds).
EPS_CONDITIONS = (
    ("LayerNorm, init normal", {"norm": "LayerNorm", "init": "normal"}, (1e-6, 1e-5, 1e-3)),
    ("RMSNorm, init normal", {"norm": "RMSNorm", "init": "normal"}, (1e-6, 1e-5, 1e-3)),
    ("LayerNorm, init small", {"norm": "LayerNorm", "init": "small"}, (1e-8, 1e-6, 1e-5)),
    (
        "LayerNorm, init small, 900 steps",
        {"norm": "LayerNorm", "init": "small", "steps": 900},
        (1e-8, 1e-6, 1e-5),
    ),
    (
        "LayerNorm, init small, 4 blocks of width 128",
        {"norm": "LayerNorm", "init": "small", "layers": 4, "width": 128},
        (1e-8, 1e-6, 1e-5),
    ),
)


def eps_rule() -> list[dict]:
    """Epsilon's cost as a function of q at initialization: per condition of
    :data:`EPS_CONDITIONS` and epsilon, the median q at the first norm at step 0, q0/epsilon,
    and the paired comparison against epsilon = 0 on the final excess (Holm over all of them).
    The rule the guide states is read off these rows (:func:`new_model_eps`)."""
    rows, raw = [], []
    for name, where, epss in EPS_CONDITIONS:
        w = {"placement": "pre", "steps": 300, **where}
        try:
            zero = _sel(eps=0.0, **w)
        except LookupError:  # a slice not stored (yet)
            continue
        for e in epss:
            try:
                rs = _sel(eps=e, **w)
            except LookupError:
                continue
            raw.append(compare(zero, rs, "final_excess", f"{name}, eps 0", f"eps {_eps(e)}"))
            q0 = _q0(rs)
            rows.append({"condition": name, "eps": e, "q0": q0, "q0_over_eps": q0 / e})
    adj = holm(raw, family="epsilon against 0, by q at initialization")
    for row, c in zip(rows, adj):
        row["comparison"] = c
    return rows


def new_model_eps() -> dict:
    """The rule for a new model, from :func:`eps_rule`: the smallest q0/epsilon from which on
    every comparison was equivalent to 0 within the margin, the largest at which it cost an
    effect, and the
    largest epsilon of the sweep equivalent to 0 in every family of :data:`SWEEP_FAMILIES`
    (None when there is none)."""
    rows = eps_rule()
    # from the largest q0/eps down, as long as every comparison is equivalent; rows whose
    # ratios agree to two digits are one step, all equivalent or none
    equiv = []
    for _, group in itertools.groupby(
        sorted(rows, key=lambda r: -r["q0_over_eps"]), key=lambda r: f"{r['q0_over_eps']:.2g}"
    ):
        group = list(group)
        if not all(r["comparison"].is_equivalent for r in group):
            break
        equiv += group
    cost = [r for r in rows if r["comparison"].is_effect and r["comparison"].diff > 0]
    table = eps_against_zero()
    safe = [e for e in EPS_SWEEP if e > 0 and all(table[n][e].is_equivalent for n in table)]
    worst = max(cost, key=lambda r: r["q0_over_eps"]) if cost else None
    return {
        "equivalent_from_q0_over_eps": min((r["q0_over_eps"] for r in equiv), default=None),
        "costs_up_to_q0_over_eps": worst["q0_over_eps"] if worst else None,
        "cost_at_that_ratio": worst["comparison"] if worst else None,
        "largest_eps_equivalent_everywhere": max(safe) if safe else None,
        "rows": rows,
    }


def guide_table(rows=(0.0, 1e-12, 1e-6, 1e-5, 1e-3, 1e-1)) -> dict:
    """The guide's training table: per epsilon of ``rows`` and family of :data:`SWEEP_FAMILIES`,
    the mean final excess over the chain's held-out loss, and (for epsilon > 0) the paired
    comparison against epsilon = 0 (:func:`eps_against_zero`), keyed ``(family, eps)``."""
    table = eps_table()
    cmp_ = eps_against_zero()
    return {
        (n, e): {
            "mean": _mean(table[n][e]),
            "seeds": len(table[n][e]),
            "against_0": None if e == 0 else cmp_[n][e],
        }
        for n in SWEEP_FAMILIES
        for e in rows
    }


def all_claims() -> list[Claim]:
    """Every claim, in the order of the note."""
    return [
        sigma_zero(),
        fp16_tiny_eps(),
        sweet_spot(),
        too_large(),
        norm_in_float32(),
        norm_vs_none(),
        pre_vs_post(),
        finetune_mismatch(),
    ]
