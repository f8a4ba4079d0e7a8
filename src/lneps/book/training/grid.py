r"""The grid of stored runs: not a full product, but one slice per claim, each with the reason it
suffices. Every configuration of the first five slices runs with the seeds :data:`SEEDS`, and
those the verdicts rest on with seven more (``ten_seeds``) (the seed fixes the init and the
batches, so two configurations with one seed see the same batches from the same init draws:
their difference is the configuration's, not the data's). All runs are float32 with the recipe of
:mod:`.recipe` unless the slice says otherwise.

Slices (:data:`SLICES`; :func:`configs` lists a slice's runs):

``eps_sweep``
    Pre-norm, the eight epsilons :data:`EPS_SWEEP`, for layer norm at init ``normal`` and
    ``small`` and RMS norm at ``normal``. Settles the sweet spot and the cost of a large epsilon:
    what epsilon changes is :math:`\sqrt{q+\varepsilon}`, so what matters is epsilon against q;
    ``normal`` puts q at about 1e-3 at step 0 and ``small`` about 2e-8, so between them the eight
    values fall below, near and far above q. Pre-norm is the placement of the models whose
    defaults the claim cites (GPT-2, Llama); RMS norm is Llama's and Mistral's.
``placement``
    Post-norm and sandwich, at every init, with epsilon 0 and 1e-5 (and 1e-12 for the sandwich
    at ``zero_resid``, where q = 0 at step 0 makes 1/sqrt(epsilon) the gradient's gain); the
    pre-norm runs of ``eps_sweep`` at 0 and 1e-5 complete the table (``zero_resid`` pre-norm is
    added here). Settles sigma = 0 at the start of training (a row of
    zero variance can only come from the init, so every init meets every placement, and epsilon
    0 shows what a zero row does) and pre- against post-norm (at 1e-5, per init).
``no_norm``
    No norm at all, at every init: against the pre- and post-norm runs at 1e-5.
``precision``
    150-step prefixes (the lr schedule of a 300-step run, so a float32 run's first 150 steps are
    its control) in the modes of :mod:`.precision`: (d) against (e) at 1e-12 for pre-norm
    ``normal`` (q > 0 everywhere) and sandwich ``zero_resid`` (q = 0 at step 0): the two places
    1e-12 -> 0 can and cannot matter; (b) against (c) at 1e-5, pre-norm ``normal`` (bfloat16
    has float32's exponent range, so 1e-12 is not rounded to 0 there: nothing to run); and the
    contrast ``fp16_pure``. Low precision costs 5-7 times float32 on this CPU, hence prefixes.
``finetune``
    Pre-norm layer norm, init ``normal`` and ``small``, pre-trained with 1e-12 (BERT) or 1e-5
    (PyTorch), then fine-tuned :data:`.recipe.FINETUNE` steps with the same epsilon (the
    control), the other one, or 1e-3 (TensorFlow/Keras), in float32; and for ``normal`` in
    modes (c) and (e) with its own epsilon (so 1e-12 becomes 0 in (e)). ``small`` is where q is
    smallest after training, so where a swap can matter most.
``half_kernel``
    Pre-norm layer norm in mode (f) of :mod:`.precision` (the norm and its variance computed in
    float16, forward and backward, epsilon stored in float16), 150-step prefixes, seeds 0-9,
    all made on one machine (their float32 controls' seeds 0-2 on the first): at init
    ``small``, where q at step 0 (about 2e-8) is below float16's smallest subnormal, so the
    float16 variance is 0, with epsilon 1e-12 and 1e-8 (both 0 in float16: BERT's value and the smallest the sweep
    keeps) against 1e-6 and 1e-5 (1.01e-6 and 1.0014e-5 in float16, the guide's value and
    PyTorch's); and at init ``normal`` (q near 1e-3) with 1e-12, the contrast where 0 is
    harmless, paired with mode (e) at 1e-12 (the same epsilon 0 and autocast, the statistics
    in float32): what the float16 variance alone does. The float32 runs of ``eps_sweep`` at
    the same epsilon, at step 150, are the controls (same schedule, same seeds).
``ten_seeds``
    Seeds 3-9 (:data:`MORE_SEEDS`) of the configurations of the first five slices that the
    chapter's verdicts and the guide's rows rest on (:data:`TEN_SEEDS`): a paired difference
    over ten seeds resolves a few 1e-3 nats, where three seeds resolve only large effects.
    Every placement run; of the precision slice, every pre-norm run ((d), (e), the bfloat16 pair
    (b)/(c), ``fp16_pure``) and (e) at the sandwich; every swap of the fine-tuning slice. Only
    (d) at the sandwich keeps three seeds: its skipped steps are reported, not compared.
``lr``
    Pre-norm and post-norm layer norm at 1e-5 and no norm, init ``normal``, at peak learning
    rates 1e-2 and 3e-2 (the recipe's is 3e-3), seeds 0-3 (:data:`FEW_SEEDS`): does the
    norm's value, and the order of the placements, hold as the learning rate rises?
``scale``
    The same three placements with 8 blocks, and with 4 blocks of width 64 and of width 128;
    the same three without warm-up; and pre-norm layer norm at init ``small`` with epsilon 0,
    1e-8, 1e-6 and 1e-5 at 3x the steps (900, the schedule stretched) and at 4 blocks of width
    128; seeds 0-3. Where the verdicts of the recipe's scale hold as depth, width, warm-up and
    budget change, one factor at a time.

Only the configuration tuples live here; :mod:`.run` trains them, tools/train.py stores them.
"""

from __future__ import annotations

from dataclasses import replace

from .config import RunConfig, run_id
from .recipe import FINETUNE

__all__ = [
    "SEEDS",
    "FIRST_SEEDS",
    "MORE_SEEDS",
    "FIRST_SLICES",
    "TEN_SEEDS",
    "FEW_SEEDS",
    "TEN",
    "HALF_KERNEL",
    "LRS",
    "EPS_SWEEP",
    "INIT_NAMES",
    "SLICES",
    "configs",
    "all_configs",
    "jobs",
    "SPREAD_CONFIGS",
    "RERUN_CONFIGS",
]

#: The first grid's seeds: every configuration of its five slices (:data:`FIRST_SLICES`).
SEEDS = FIRST_SEEDS = (0, 1, 2)
#: The seeds ``ten_seeds`` adds, so that a paired difference of a few 1e-3 nats is resolved.
MORE_SEEDS = tuple(range(3, 10))
FIRST_SLICES = ("eps_sweep", "placement", "no_norm", "precision", "finetune")
#: The generality slices' seeds (``lr``, ``scale``): enough to see a sign change.
FEW_SEEDS = (0, 1, 2, 3)
LRS = (1e-2, 3e-2)
EPS_SWEEP = (0.0, 1e-12, 1e-8, 1e-6, 1e-5, 1e-3, 1e-1, 1.0)
INIT_NAMES = ("normal", "small", "zero_resid")
PRECISION_STEPS = 150


def _seeded(cs):
    return [replace(c, seed=s) for c in cs for s in SEEDS]


def _eps_sweep():
    fam = [("LayerNorm", "normal"), ("LayerNorm", "small"), ("RMSNorm", "normal")]
    return _seeded([RunConfig(norm=n, init=i, eps=e) for n, i in fam for e in EPS_SWEEP])


def _placement():
    cs = [
        RunConfig(placement=p, init=i, eps=e)
        for p in ("post", "sandwich")
        for i in INIT_NAMES
        for e in (0.0, 1e-5)
    ]
    cs += [RunConfig(placement="sandwich", init="zero_resid", eps=1e-12)]
    cs += [RunConfig(placement="pre", init="zero_resid", eps=e) for e in (0.0, 1e-5)]
    return _seeded(cs)


def _no_norm():
    return _seeded([RunConfig(placement="none", init=i, eps=None) for i in INIT_NAMES])


def _precision():
    n = PRECISION_STEPS
    cs = [
        RunConfig(placement=p, init=i, eps=1e-12, precision=m, steps=n)
        for p, i in (("pre", "normal"), ("sandwich", "zero_resid"))
        for m in ("fp16_norm32", "fp16_eps16")
    ]
    cs += [RunConfig(eps=1e-5, precision=m, steps=n) for m in ("bf16_norm32", "bf16_norm16")]
    cs += [RunConfig(eps=1e-5, precision="fp16_pure", steps=n)]
    return _seeded(cs)


def _finetune():
    out = []
    k = FINETUNE["steps"]
    for init in ("normal", "small"):
        for ea, other in ((1e-12, 1e-5), (1e-5, 1e-12)):
            base = RunConfig(init=init, eps=ea)
            out += [
                replace(base, ft_eps=eb, ft_precision="fp32", ft_steps=k)
                for eb in (ea, other, 1e-3)
            ]
            if init == "normal":
                out += [
                    replace(base, ft_eps=ea, ft_precision=m, ft_steps=k)
                    for m in ("bf16_norm16", "fp16_eps16")
                ]
    return _seeded(out)


#: The ``half_kernel`` slice's (init, epsilon) pairs and its seeds.
HALF_KERNEL = (("small", 1e-12), ("small", 1e-8), ("small", 1e-6), ("small", 1e-5),
               ("normal", 1e-12))
TEN = FIRST_SEEDS + MORE_SEEDS


def _half_kernel():
    return [
        RunConfig(init=i, eps=e, precision="fp16_var16", steps=PRECISION_STEPS, seed=s)
        for i, e in HALF_KERNEL
        for s in TEN
    ]


def _placements(**kw):
    return [
        RunConfig(eps=1e-5, **kw),
        RunConfig(placement="post", eps=1e-5, **kw),
        RunConfig(placement="none", eps=None, **kw),
    ]


def _few(cs):
    return [replace(c, seed=s) for c in cs for s in FEW_SEEDS]


def _lr():
    return _few([c for lr in LRS for c in _placements(lr=lr)])


def _scale():
    cs = _placements(layers=8) + _placements(layers=4) + _placements(layers=4, width=128)
    cs += _placements(warmup=0)
    small = (0.0, 1e-8, 1e-6, 1e-5)
    cs += [RunConfig(init="small", eps=e, steps=900) for e in small]
    cs += [RunConfig(init="small", eps=e, layers=4, width=128) for e in small]
    return _few(cs)


#: Which configurations of the first slices ``ten_seeds`` extends to ten seeds: (slice, a
#: predicate on the configuration). Those the chapter's verdicts and the guide's rows rest on.
TEN_SEEDS = (
    # the whole sweep: every epsilon against 0 in every family
    ("eps_sweep", lambda c: True),
    # every placement run: pre against post, the zero rows (epsilon 0) at every init, the
    # sandwich at every init
    ("placement", lambda c: True),
    ("no_norm", lambda c: True),
    # every pre-norm run: (d) against (e) at 1e-12 where q > 0 (pre-norm ``normal``), the
    # bfloat16 pair (b)/(c) and the fp16_pure contrast; (e) at the sandwich's q = 0 rows
    # (against the float32 runs at 1e-12); (d) at the sandwich keeps three seeds (its skipped
    # steps are a fact, not a comparison)
    ("precision", lambda c: c.placement == "pre"
     or (c.placement, c.precision) == ("sandwich", "fp16_eps16")),
    # every swap, in float32 and in low precision
    ("finetune", lambda c: True),
)


def _ten_seeds():
    first = {name: SLICES[name]() for name in FIRST_SLICES}
    out = []
    for name, wanted in TEN_SEEDS:
        cs = [c for c in first[name] if c.seed == FIRST_SEEDS[0] and wanted(c)]
        out += [replace(c, seed=s) for c in cs for s in MORE_SEEDS]
    return out


SLICES = {
    "eps_sweep": _eps_sweep,
    "placement": _placement,
    "no_norm": _no_norm,
    "precision": _precision,
    "finetune": _finetune,
    "ten_seeds": _ten_seeds,
    "half_kernel": _half_kernel,
    "lr": _lr,
    "scale": _scale,
}


def configs(slice_name: str) -> list[RunConfig]:
    """The runs of one slice (seeds included)."""
    return SLICES[slice_name]()


def all_configs() -> list[RunConfig]:
    """Every stored run once, in slice order."""
    seen, out = set(), []
    for name in SLICES:
        for c in configs(name):
            if c not in seen:
                seen.add(c)
                out.append(c)
    return out


def jobs(cs: list[RunConfig] | None = None) -> list[list[RunConfig]]:
    """The runs grouped by the pre-training they share: a fine-tuning run's base is trained
    once, in the same job, and stored too (it is an ``eps_sweep`` run)."""
    cs = all_configs() if cs is None else cs
    by_base: dict[RunConfig, list[RunConfig]] = {}
    for c in cs:
        by_base.setdefault(c.base(), []).append(c)
    out = []
    for base, group in by_base.items():
        if base not in group and any(g.is_finetune for g in group):
            group = [base, *group]
        out.append(group)
    return out


#: What the machine spread is measured on (seed 0): one run per kind of arithmetic the grid has
#: (pre- and post-norm float32, RMS norm, the amplified gradient of a sandwich at 1e-12, small
#: init, a bfloat16 prefix).
SPREAD_CONFIGS = (
    RunConfig(eps=1e-5),
    RunConfig(placement="post", eps=1e-5),
    RunConfig(norm="RMSNorm", eps=1e-5),
    RunConfig(init="small", eps=1e-5),
    RunConfig(placement="sandwich", init="zero_resid", eps=1e-12),
    RunConfig(eps=1e-5, precision="bf16_norm16", steps=PRECISION_STEPS),
)

#: What tests/book/test_training_rerun.py re-runs a prefix of.
RERUN_CONFIGS = (SPREAD_CONFIGS[0], SPREAD_CONFIGS[4], SPREAD_CONFIGS[2])


def describe() -> dict:
    """The slices as stored in the manifest: name -> run ids and the slice's reason (the
    paragraph of this module's docstring)."""
    doc = __doc__.split("Slices (")[1]
    out = {}
    for name in SLICES:
        part = doc.split(f"``{name}``", 1)[1]
        nxt = [part.find(f"``{n}``") for n in SLICES if n != name and part.find(f"``{n}``") >= 0]
        text = part[: min(nxt)] if nxt else part.split("Only the configuration")[0]
        out[name] = {"why": " ".join(text.split()), "runs": [run_id(c) for c in configs(name)]}
    return out
