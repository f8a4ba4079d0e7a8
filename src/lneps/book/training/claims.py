r"""The stability note's training claims, settled on the stored runs (NumPy only).

Each function returns a :class:`Claim`: the note's words, a verdict of :data:`VERDICTS`, a
one-paragraph finding with its numbers, the :class:`.effects.Effect` comparisons it rests on
and the facts read off the runs. Verdicts:

* ``true``: the runs show what the note says, with an effect beyond both spreads;
* ``corrected``: the runs show something else, with an effect (or its absence) beyond doubt;
* ``qualified``: true only under conditions the note does not state (named in the finding);
* ``not an effect``: the difference the note implies stays within the spread over seeds or
  machines.

:func:`all_claims` lists them in the order of the note.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from . import stored
from .effects import Effect, compare, final_excess
from .grid import EPS_SWEEP, INIT_NAMES
from .precision import PRECISIONS

__all__ = ["VERDICTS", "Claim", "FAMILIES", "zero_row_sites", "sigma_zero", "fp16_tiny_eps", "eps_table",
           "plateau", "sweet_spot", "too_large", "norm_in_float32", "norm_vs_none", "pre_vs_post",
           "finetune_mismatch", "all_claims"]

VERDICTS = ("true", "corrected", "qualified", "not an effect")

#: The eps sweep's three families (pre-norm, float32): norm and init.
FAMILIES = {"LayerNorm, init normal": {"norm": "LayerNorm", "init": "normal"},
            "LayerNorm, init small": {"norm": "LayerNorm", "init": "small"},
            "RMSNorm, init normal": {"norm": "RMSNorm", "init": "normal"}}


@dataclass(frozen=True)
class Claim:
    key: str
    quote: str
    verdict: str
    finding: str
    effects: tuple[Effect, ...] = ()
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
    """"sigma = 0 at the start of training when weights are initialized poorly, when a layer
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
    eps0_dead_elsewhere = sorted(r.id for r in eps0
                                 if r.dead and (r.config.placement, r.config.init) != ("sandwich", "zero_resid"))
    probe = stored.manifest()["zero_row_probe"]

    def pr(prec, eps):
        return [p for p in probe if p["precision"] == prec and p["eps"] == eps]

    killed = all(not p["loss_finite"] and p["nonfinite_param_share"] == 1.0
                 for p in pr("fp32", 0.0) + pr("bf16_norm32", 0.0))
    guarded = all(p["step_skipped"] and p["nonfinite_param_share"] == 0.0 for p in pr("fp16_norm32", 0.0))
    tiny_ok = all(p["loss_finite"] and p["nonfinite_param_share"] == 0.0 for p in pr("fp32", 1e-12))
    effects = (compare(alive[1e-5], dead0, "final_excess", "sandwich, zero_resid, eps 1e-5", "eps 0"),
               compare(alive[1e-5], alive[1e-12], "log10_max_grad_norm", "sandwich, zero_resid, eps 1e-5", "eps 1e-12"),
               compare(alive[1e-5], alive[1e-12], "final_excess", "sandwich, zero_resid, eps 1e-5", "eps 1e-12"))
    gn0 = {_eps(e): [float(r.grad_norm[0]) for r in rs] for e, rs in alive.items()}
    gn0["pre, normal, 1e-5"] = [float(r.grad_norm[0]) for r in base]
    only_sandwich = all(k[0] == "sandwich" and k[1] == "zero_resid" and k[4].endswith(".out") for k in sites)
    unscaled = {k: v for k, v in sites.items() if not PRECISIONS[k[3]].scaler}
    at_step0 = all(v == [0] for v in unscaled.values())
    scaled_last = {k: v[-1] for k, v in sites.items() if PRECISIONS[k[3]].scaler}
    d_last = max((v for k, v in scaled_last.items() if k[3] == "fp16_norm32"), default=0)
    facts = {"zero_row_sites": {"/".join(map(str, k)): v for k, v in sites.items()},
             "only_sandwich_zero_resid_outputs": only_sandwich, "only_at_step_0_without_loss_scaling": at_step0,
             "last_zero_row_step_with_loss_scaling": {"/".join(map(str, k)): v for k, v in scaled_last.items()},
             "eps0_first_nonfinite_step": [r.first_nonfinite_step for r in dead0],
             "eps0_stopped_at": [r.stopped_at for r in dead0],
             "eps0_runs": len(eps0), "eps0_dead_elsewhere": eps0_dead_elsewhere,
             "grad_norm_step0": gn0, "q_min_small_init_step0": q_small,
             "probe_kills_fp32_bf16": killed, "probe_guarded_by_loss_scaling": guarded, "probe_1e-12_survives": tiny_ok,
             "probe": probe}
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
        f"1e-12 {'keeps it finite' if tiny_ok else 'does not help'}.")
    verdict = "qualified" if killed and only_sandwich else ("true" if killed else "corrected")
    return Claim("sigma_zero", "sigma = 0 ... at the start of training when weights are initialized poorly, when "
                 "a layer has died; one zero standard deviation can kill an entire training run",
                 verdict, finding, effects, facts)


# --- 1e-12 in float16 ---------------------------------------------------------------------------

def fp16_tiny_eps() -> Claim:
    """"In float16, 1e-12 may simply underflow to zero -- you added nothing": mode (e) (epsilon
    stored in float16, so 0) against (d) (norm in float32 with 1e-12), pre-norm ``normal``
    (q > 0 everywhere) and sandwich ``zero_resid`` (q = 0 at step 0), 150-step prefixes."""
    n = 150
    pre = dict(placement="pre", init="normal", eps=1e-12, steps=n)
    sw = dict(placement="sandwich", init="zero_resid", eps=1e-12, steps=n)
    d_pre, e_pre = _sel(**pre, precision="fp16_norm32"), _sel(**pre, precision="fp16_eps16")
    d_sw, e_sw = _sel(**sw, precision="fp16_norm32"), _sel(**sw, precision="fp16_eps16")
    effects = (compare(d_pre, e_pre, "final_excess", "(d) pre-norm, 1e-12", "(e) eps 0 in float16"),
               compare(d_sw, e_sw, "final_excess", "(d) sandwich zero_resid, 1e-12", "(e) eps 0 in float16"))
    share16 = max(float(np.nanmax(r.stat("share_below_float16"))) for r in d_pre)
    qmin = min(float(np.nanmin(r.stat("q_min"))) for r in d_pre + e_pre)
    f16 = stored.manifest()["autocast"]["float16_of"]
    facts = {"float16_of_1e-12": f16["1e-12"], "float16_of_1e-8": f16["1e-08"],
             "pre_max_share_below_float16_threshold": share16, "pre_min_q": qmin,
             "pre_min_q_over_1e-12": qmin / 1e-12,
             "sandwich_e_first_nonfinite": [r.first_nonfinite_step for r in e_sw],
             "sandwich_e_stopped_at": [r.stopped_at for r in e_sw],
             "sandwich_d_skipped_steps": [r.meta["nonfinite_steps"] for r in d_sw],
             "sandwich_d_dead": [r.dead for r in d_sw]}
    pre_none, sw_kill = not effects[0].is_effect, effects[1].is_effect and effects[1].diff == math.inf
    finding = (
        f"1e-12 is {f16['1e-12']:g} in float16 (so is 1e-8). Where every row has q > 0 that costs nothing: in "
        f"pre-norm the smallest q of any row at any site was {qmin:.2g}, {qmin / 1e-12:.1g} times 1e-12, "
        f"so q + 1e-12 rounds to q in float16 anyway (share of rows where it would not: {share16:g}); "
        f"(e) against (d): {effects[0]}. Where q = 0 it is fatal: the sandwich at zero_resid with the float16 "
        f"epsilon has a NaN loss from step {e_sw[0].first_nonfinite_step}, loss scaling skips every step "
        f"(no update can move the zero projections), and the run is stopped after "
        f"{e_sw[0].meta['nonfinite_steps']} skipped steps, in every seed; with 1e-12 kept in float32 (d) it "
        f"trains, after {min(facts['sandwich_d_skipped_steps'])}-{max(facts['sandwich_d_skipped_steps'])} skipped "
        f"steps while the scaler backs off from the 1/sqrt(1e-12) gradient.")
    verdict = "qualified" if pre_none and sw_kill else ("true" if sw_kill else "not an effect")
    return Claim("fp16_tiny_eps", "In float16, 1e-12 may simply underflow to zero -- you added nothing; "
                 "still vulnerable in mixed-precision training", verdict, finding, effects, facts)


# --- the sweet spot and too large an epsilon ---------------------------------------------------

def _family_runs(fam: dict) -> dict[float, list[stored.Run]]:
    return {e: _sel(placement="pre", eps=e, **fam) for e in EPS_SWEEP}


def eps_table(metric: str = "final_excess") -> dict[str, dict[float, tuple[float, ...]]]:
    """Per family of :data:`FAMILIES`, per epsilon of the sweep, the metric's per-seed values."""
    from .effects import METRICS
    f = METRICS[metric]
    return {name: {e: tuple(f(r) for r in rs) for e, rs in _family_runs(fam).items()} for name, fam in FAMILIES.items()}


def plateau(fam: dict, metric: str = "final_excess") -> tuple[float, list[float]]:
    """The best epsilon of a family (lowest mean ``metric``) and every epsilon not worse than it
    by an effect."""
    runs = _family_runs(fam)
    from .effects import METRICS
    f = METRICS[metric]
    best = min(runs, key=lambda e: _mean([f(r) for r in runs[e]]))
    flat = [e for e in runs if e == best or not compare(runs[best], runs[e], metric).is_effect]
    return best, flat


def sweet_spot() -> Claim:
    """"The sweet spot -- typically epsilon in [1e-6, 1e-5] -- balances stability against
    fidelity": per family, the best epsilon, the plateau of epsilons not worse than it by an
    effect, and whether 1e-6 or 1e-5 beats every smaller epsilon (0, 1e-12, 1e-8) by an effect
    (an interior optimum needs that)."""
    effects, facts, lines = [], {}, []
    interior_all = True
    for name, fam in FAMILIES.items():
        runs = _family_runs(fam)
        best, flat = plateau(fam)
        beats_small = {}
        for e in (1e-6, 1e-5):
            cs = [compare(runs[s], runs[e], "final_excess", f"{name}, eps {_eps(s)}", f"eps {_eps(e)}")
                  for s in (0.0, 1e-12, 1e-8)]
            effects += cs
            beats_small[_eps(e)] = all(c.is_effect and c.diff < 0 for c in cs)
        interior = any(beats_small.values())
        interior_all &= interior
        q0 = float(np.median([np.nanmedian(r.stat("q_p50")[0]) for r in runs[1e-5]]))
        identical = [e for e, rs in runs.items()
                     if all(np.array_equal(r.loss, r0.loss) for r, r0 in zip(rs, runs[0.0]))]
        never_below = [e for e, rs in runs.items()
                       if max(float(np.nanmax(r.stat("share_below_float32"))) for r in rs) == 0]
        worse = {_eps(e): c.diff for e in (1e-6, 1e-5) for c in effects
                 if c.a == f"{name}, eps 0" and c.b == f"eps {_eps(e)}" and c.is_effect and c.diff > 0}
        facts[name] = {"best": best, "plateau": flat, "beats_every_smaller_eps": beats_small,
                       "median_q_step0": q0, "bit_identical_to_eps0": identical,
                       "never_below_float32_threshold": never_below, "worse_than_eps0": worse,
                       "means": {_eps(e): _mean([final_excess(r) for r in rs]) for e, rs in runs.items()}}
        line = (f"{name}: best {_eps(best)}, no worse by an effect: {', '.join(_eps(e) for e in flat)} "
                f"(q at step 0 about {q0:.2g})")
        if worse:
            line += "; worse than 0 by an effect: " + ", ".join(f"{k} (+{v:.3f} nats)" for k, v in worse.items())
        lines.append(line)
    finding = ("Final excess over the floor, per family: " + "; ".join(lines) + ". Runs whose rows never had "
               "q/epsilon below 2^23 (float32's threshold) are those of epsilon = 0 bit for bit: "
               + "; ".join(f"{n}: {', '.join(_eps(e) for e in v['bit_identical_to_eps0'])}"
                           for n, v in facts.items()) + ". "
               + ("1e-6 or 1e-5 beats every smaller epsilon in every family." if interior_all else
                  "No epsilon in [1e-6, 1e-5] beats 0, 1e-12 and 1e-8 in every family: below some edge "
                  "epsilon does not matter at all, and the edge is set by q (the init), not by a constant."))
    verdict = "true" if interior_all else "corrected"
    return Claim("sweet_spot", "The sweet spot -- typically eps in [1e-6, 1e-5] -- balances stability against fidelity",
                 verdict, finding, tuple(effects), facts)


def too_large() -> Claim:
    """"Too large (1e-1 or 1.0): the normalization no longer normalizes -- it's dividing by a
    constant ... expressivity is destroyed": per family, 1e-1 and 1 against 1e-5 on the final
    excess and the mean excess (speed); epsilon = 1 against no norm at all (same init, layer
    norm families); the share of the learnable gap (unigram entropy - floor) still learnt at
    epsilon 1; and how far the network raised q at the first norm."""
    meta = stored.corpus_meta()
    gap = meta["unigram_entropy_nats"] - meta["loss_floor_nats"]
    effects, facts, lines = [], {}, []
    costs_all, destroyed = True, {}
    for name, fam in FAMILIES.items():
        runs = _family_runs(fam)
        fin = []
        for big in (1e-1, 1.0):
            for metric in ("final_excess", "mean_excess"):
                e = compare(runs[1e-5], runs[big], metric, f"{name}, eps 1e-5", f"eps {_eps(big)}")
                effects.append(e)
                if metric == "final_excess":
                    fin.append(e)
        costs_all &= all(e.is_effect and e.diff > 0 for e in fin)
        learnt = 1 - _mean([final_excess(r) for r in runs[1.0]]) / gap
        destroyed[name] = learnt < 0.5
        site0 = runs[1.0][0].sites[0]
        q_end = {_eps(e): float(np.median([r.stat("q_p50", site0)[-1] for r in runs[e]])) for e in (1e-5, 1.0)}
        q_start = float(np.median([r.stat("q_p50", site0)[0] for r in runs[1.0]]))
        facts[name] = {"final_cost_1e-1": fin[0].diff, "final_cost_1": fin[1].diff, "share_of_gap_learnt_at_1": learnt,
                       "q_p50_first_site_start": q_start, "q_p50_first_site_end": q_end}
        line = (f"{name}: +{fin[0].diff:.3f} nats at 1e-1 and +{fin[1].diff:.3f} at 1 "
                f"({'effects' if fin[0].is_effect and fin[1].is_effect else 'not both effects'}); at 1 it still learns "
                f"{learnt:.0%} of the gap; q at the first norm ends at {q_end['1']:.2g} (from {q_start:.2g}; "
                f"{q_end['1e-05']:.2g} at 1e-5)")
        if fam["norm"] == "LayerNorm":
            none = _sel(placement="none", init=fam["init"], eps=None)
            e = compare(none, runs[1.0], "final_excess", f"no norm, {fam['init']}", "eps 1")
            effects.append(e)
            facts[name]["eps_1_against_no_norm"] = e.diff
            facts[name]["eps_1_like_no_norm"] = not e.is_effect
            line += f"; against no norm at all: {e.diff:+.3f} ({'an effect' if e.is_effect else 'no effect'})"
        lines.append(line)
    like_none = all(v.get("eps_1_like_no_norm", True) for v in facts.values())
    finding = ("Against 1e-5, final excess over the floor: " + "; ".join(lines) + f". The learnable gap "
               f"(unigram entropy - floor) is {gap:.3f} nats. "
               + ("At epsilon 1 the norm divides by about one: the runs are those without a norm, within the "
                  "spreads. " if like_none else "")
               + "What it costs is what the norm was worth, and that depends on q: little where the init "
                 "makes q large, most of the learning where q starts far below epsilon.")
    if not costs_all:
        verdict = "not an effect"
    elif all(destroyed.values()):
        verdict = "true"
    else:
        verdict = "qualified"
    facts["destroyed"] = destroyed
    facts["eps_1_like_no_norm"] = like_none
    return Claim("too_large", "eps too large (1e-1 or 1.0): the normalization no longer normalizes -- it's dividing "
                 "by a constant; expressivity is destroyed", verdict, finding, tuple(effects), facts)


# --- placements ----------------------------------------------------------------------------------

_PLACEMENT_METRICS = ("final_excess", "mean_excess", "log10_max_grad_norm")


def _placement_effects(a: str, b: str) -> tuple[list[Effect], dict]:
    """Per init, placement ``b`` against ``a`` (1e-5; no epsilon for ``none``) on the three metrics."""
    effects, facts = [], {}
    for init in INIT_NAMES:
        ra = _sel(placement=a, init=init, eps=None if a == "none" else 1e-5)
        rb = _sel(placement=b, init=init, eps=None if b == "none" else 1e-5)
        es = [compare(ra, rb, m, f"{a}, {init}", f"{b}, {init}") for m in _PLACEMENT_METRICS]
        effects += es
        facts[init] = {e.metric: {"diff": e.diff, "effect": e.is_effect, "mean_a": e.mean_a, "mean_b": e.mean_b}
                       for e in es}
        facts[init]["dead"] = [sum(r.dead for r in ra), sum(r.dead for r in rb)]
        facts[init]["nonfinite_steps"] = [sum(r.meta["nonfinite_steps"] for r in ra),
                                          sum(r.meta["nonfinite_steps"] for r in rb)]
    return effects, facts


def _who_is_better(effects: list[Effect]) -> tuple[dict, dict]:
    """Per init: is A better (lower final and mean excess, each by an effect), is B better."""
    a_better, b_better = {}, {}
    for init in INIT_NAMES:
        loss = [e for e in effects if e.a.endswith(init) and e.metric in ("final_excess", "mean_excess")]
        a_better[init] = all(e.is_effect and e.diff > 0 for e in loss)
        b_better[init] = all(e.is_effect and e.diff < 0 for e in loss)
    return a_better, b_better


def _placement_finding(effects, what) -> str:
    parts = []
    for init in INIT_NAMES:
        es = {e.metric: e for e in effects if e.a.endswith(init)}
        f, m, g = es["final_excess"], es["mean_excess"], es["log10_max_grad_norm"]
        parts.append(f"{init}: final {f.diff:+.3f} nats ({'effect' if f.is_effect else 'no effect'}), mean "
                     f"{m.diff:+.3f} ({'effect' if m.is_effect else 'no effect'}), largest gradient norm "
                     f"x{10 ** g.diff:.2g}")
    return f"{what} (second minus first), per init: " + "; ".join(parts) + "."


def _stability(facts) -> tuple[bool, bool]:
    """Whether any run of A, or of B, died or had a non-finite step."""
    a = any(v["dead"][0] or v["nonfinite_steps"][0] for v in facts.values())
    b = any(v["dead"][1] or v["nonfinite_steps"][1] for v in facts.values())
    return a, b


def norm_vs_none() -> Claim:
    """Layer normalization against none, at this scale: no norm against pre-norm (1e-5), per init,
    on the final excess, the mean excess (speed) and the largest gradient norm; and whether any
    run of either had a non-finite step (stability)."""
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
        verdict = "not an effect"
    finding = (_placement_finding(effects, "No norm against pre-norm (1e-5)") + " "
               + ("The norm makes training faster and better at every init. " if faster else "")
               + ("No run without a norm had a non-finite step or died, and their largest gradient norms are "
                  "smaller: at this scale there is no instability for the norm to prevent."
                  if not unstable_none else "Runs without a norm had non-finite steps."))
    facts.update(norm_better=norm_better, none_better=none_better, unstable_pre=unstable_pre,
                 unstable_none=unstable_none)
    return Claim("norm_vs_none", "Layer normalization makes training faster and more stable (against no normalization)",
                 verdict, finding, tuple(effects), facts)


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
        verdict = "not an effect"
    else:
        verdict = "qualified"
    finding = (_placement_finding(effects, "Post-norm against pre-norm (1e-5)") + " "
               + ("Post-norm is ahead at every init, and no run of either placement had a non-finite step: "
                  "with two layers and a warm-up, post-norm's known instability does not appear."
                  if verdict == "corrected" else ""))
    facts.update(pre_better=pre_better, post_better=post_better, unstable_pre=unstable_pre, unstable_post=unstable_post)
    return Claim("pre_vs_post", "Pre-norm trains faster and more stably than post-norm",
                 verdict, finding, tuple(effects), facts)


# --- fine-tuning --------------------------------------------------------------------------------

def finetune_mismatch() -> Claim:
    """"Models trained with incompatible eps values and then fine-tuned in different precision
    can exhibit subtle degradation": per pre-trained model (init, eps_a), each swap (another eps
    in float32, or another precision with the same eps) against the control (same eps, float32),
    paired by seed: the held-out loss right after the swap and after the fine-tuning steps, and the
    change of the norm's output the stored q predicts (lneps.book.eps_swap)."""
    from ..eps_swap import predicted_relative_change

    effects, facts = [], {}
    for init in ("normal", "small"):
        for ea in (1e-12, 1e-5):
            ctrl = _sel(init=init, eps=ea, ft_eps=ea, ft_precision="fp32")
            base = _sel(placement="pre", init=init, eps=ea)
            ft = [r for r in stored.select(init=init, eps=ea, precision="fp32", steps=300,
                                           ft_steps=ctrl[0].config.ft_steps)
                  if (r.config.ft_eps, r.config.ft_precision) != (ea, "fp32")]
            swaps = sorted({(r.config.ft_eps, r.config.ft_precision) for r in ft}, key=str)
            for eb, prec in swaps:
                rs = _sel(init=init, eps=ea, ft_eps=eb, ft_precision=prec)
                label = f"{init}, trained {_eps(ea)}"
                to = f"{_eps(eb)} {prec}"
                e0 = compare(ctrl, rs, "after_swap", label, to, paired=True)
                e1 = compare(ctrl, rs, "after_finetune", label, to, paired=True)
                effects += [e0, e1]
                qmin = min(float(np.nanmin(r.stat("q_min")[-1])) for r in base)
                qmed = float(np.median([np.nanmedian(r.stat("q_p50")[-1]) for r in base]))
                eb_eff = float(np.float16(eb)) if prec == "fp16_eps16" else eb
                facts[f"{label} -> {to}"] = {
                    "after_swap": e0.diff, "after_swap_effect": e0.is_effect,
                    "after_finetune": e1.diff, "after_finetune_effect": e1.is_effect,
                    "q_min_end": qmin, "q_median_end": qmed,
                    "predicted_change_at_q_min": float(predicted_relative_change(qmin, ea, eb_eff)),
                    "predicted_change_at_median_q": float(predicted_relative_change(qmed, ea, eb_eff))}
    predicted = {k: v["predicted_change_at_median_q"] for k, v in facts.items()}

    def to_big(key):
        return key.split("-> ")[1].startswith("0.001")

    clear = [e for e in effects if e.is_effect and not e.marginal]
    marginal = [e for e in effects if e.marginal]
    hit = sorted({f"{e.a} -> {e.b}" for e in clear})
    only_big = all(e.b.startswith("0.001") for e in clear)
    sizes = [e.diff for e in clear]
    big_swap = [e.diff for e in effects if e.b.startswith("0.001") and e.metric.startswith("after_swap")]
    defaults = [e for e in effects if not e.b.startswith("0.001")]
    finding = (f"{len(effects) // 2} swaps, each against its control (same model, same epsilon, float32), paired "
               f"by seed. Clear effects: {len(clear)} of {len(effects)} differences"
               + (f", all of them the loss after fine-tuning with 1e-3 ({', '.join(hit)}): +{min(sizes):.2g} to "
                  f"+{max(sizes):.2g} nats above the control; right after the swap to 1e-3 the loss is up by "
                  f"+{min(big_swap):.2g} to +{max(big_swap):.2g}, which is at or within the spread over seeds"
                  if clear and only_big else (f" ({', '.join(hit)})" if clear else ""))
               + (f"; marginal (within 25 % of the spread): {len(marginal)}" if marginal else "")
               + f". Swaps between 1e-12 and 1e-5, and into bfloat16 (norm in bfloat16) or float16 (epsilon "
               f"stored in float16, where 1e-12 becomes 0): no effect, the largest "
               f"{max(abs(e.diff) for e in defaults):.2g} nats. The norm's output changes by "
               f"|sqrt((q+a)/(q+b)) - 1| (lneps.book.eps_swap): at the trained models' median q that is at most "
               f"{max(v for k, v in predicted.items() if not to_big(k)):.1g} for the other swaps and "
               f"{max(v for k, v in predicted.items() if to_big(k)):.1g} for 1e-3.")
    if not clear:
        verdict = "not an effect"
    else:
        verdict = "qualified"
    return Claim("finetune_mismatch", "Models trained with incompatible eps values and then fine-tuned in different "
                 "precision can exhibit subtle degradation", verdict, finding, tuple(effects), facts)


# --- the norm in float32 ------------------------------------------------------------------------

def norm_in_float32() -> Claim:
    """"Cast the normalization computation to float32 temporarily ... This is exactly what
    PyTorch's built-in LayerNorm does internally ... critical to correctness": what torch 2.13's
    CPU kernels and CPU autocast do (measured, stored in the manifest), and whether the norm's
    format matters to training: (c) norm in bfloat16 against (b) norm in float32, (b) against
    float32 throughout (a), pre-norm ``normal`` at 1e-5, held-out loss after 150 steps."""
    a = _sel(placement="pre", init="normal", eps=1e-5)
    b = _sel(placement="pre", init="normal", eps=1e-5, precision="bf16_norm32", steps=150)
    c = _sel(placement="pre", init="normal", eps=1e-5, precision="bf16_norm16", steps=150)
    effects = (compare(b, c, "excess_at_150", "(b) bfloat16, norm in float32", "(c) norm in bfloat16"),
               compare(a, b, "excess_at_150", "(a) float32", "(b) bfloat16, norm in float32"))
    auto = stored.manifest()["autocast"]
    dt = auto["output_dtype"]
    kernels = auto["low_precision_kernels"]
    internal32 = all(v["layer_norm_rows_near_300_finite"]
                     and abs(v["layer_norm_rows_of_1e-4_eps0_variance"] - 1) < 0.01 for v in kernels.values())
    cpu_autocast_keeps = (dt["autocast bfloat16, input bfloat16"]["layer_norm"] == "bfloat16"
                          and dt["autocast bfloat16, input float32"]["layer_norm"] == "float32")
    facts = {"kernels_accumulate_in_float32": internal32, "cpu_autocast_keeps_input_type": cpu_autocast_keeps,
             "autocast_output_dtype": dt}
    none = all(not e.is_effect for e in effects)
    finding = (
        f"torch 2.13's CPU layer_norm and rms_norm on bfloat16 or float16 input "
        f"{'accumulate in float32' if internal32 else 'do not accumulate in float32'}: a float16 row near 300, whose "
        f"squares overflow float16, normalizes finitely, and a row of 1e-4, whose squares underflow, normalizes to "
        f"unit variance with epsilon 0. So the statistics are float32 inside the kernel either way; what the format "
        f"changes is the rounding of the norm's input and output. CPU autocast "
        f"{'leaves layer_norm in its input type' if cpu_autocast_keeps else 'changes layer_norm'} (float32 in, float32 "
        f"out; bfloat16 in, bfloat16 out), where CUDA autocast, by PyTorch's op lists (not measured here), returns "
        f"float32 for both; in this model's pre-norm the residual stream is float32 under autocast (embeddings plus "
        f"bfloat16 sublayer outputs promote to float32), so plain CPU autocast computes these norms in float32, and "
        f"mode (c) casts their input to bfloat16 to model a bfloat16 stream. In training: {effects[0]}; "
        f"{effects[1]}.")
    verdict = "qualified" if none and internal32 else ("true" if not none else "not an effect")
    return Claim("norm_in_float32", "Cast the normalization computation to float32 ... exactly what PyTorch's "
                 "built-in LayerNorm does internally ... critical to correctness", verdict, finding, effects, facts)


def all_claims() -> list[Claim]:
    """Every claim, in the order of the note."""
    return [sigma_zero(), fp16_tiny_eps(), sweet_spot(), too_large(), norm_in_float32(), norm_vs_none(),
            pre_vs_post(), finetune_mismatch()]
