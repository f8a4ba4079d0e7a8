r"""The training chapter's tables, as MyST Markdown (rendered as HTML tables that scroll inside
their own box on a phone), built from the stored runs and :mod:`.claims` (NumPy only).

Numbers follow the book's style: nats to four decimals with a true minus, an interval as
``+0.0084 [+0.0062, +0.0106]``, powers of ten as ``10⁻⁵`` (:func:`lneps.book.printing.sci`).
"""

from __future__ import annotations

import math

from ..printing import sci
from . import claims as CL
from . import effects as E
from . import spread as SP
from . import stored

__all__ = [
    "signed",
    "interval",
    "eps_text",
    "ratio_text",
    "comparison_html",
    "grid_table",
    "where_text",
    "scope_text",
    "markdown_table",
    "comparison_cells",
    "sweep_table",
    "verdict_rows",
    "verdict_table",
    "where_table",
    "rule_table",
    "probe_table",
    "floor_table",
    "autocast_table",
    "GUIDE_COLUMNS",
    "GUIDE_ROWS",
    "guide_training",
]


def signed(x: float, digits: int = 4) -> str:
    """``+0.0084``, ``−0.0031`` (a true minus), ``0.0000`` for an exact zero.

    >>> signed(-0.00312), signed(0.0), signed(math.inf)
    ('−0.0031', '0.0000', 'all died')
    """
    if math.isinf(x):
        return "all died" if x > 0 else "all of the other died"
    if x == 0:
        return f"{0:.{digits}f}"
    return f"{x:+.{digits}f}".replace("-", "−")


def interval(c: E.Comparison, digits: int = 4) -> str:
    """``+0.0084 [+0.0062, +0.0106]``: the mean difference and its 95 % t-interval."""
    if not math.isfinite(c.diff):
        return signed(c.diff, digits)
    lo, hi = c.ci()
    return f"{signed(c.diff, digits)} [{signed(lo, digits)}, {signed(hi, digits)}]"


def eps_text(e) -> str:
    """An epsilon for a table: ``0``, ``1``, ``10⁻⁵``; ``none`` for no norm."""
    if e is None:
        return "none"
    return "0" if e == 0 else ("1" if e == 1 else sci(e, 0))


def ratio_text(x: float | None) -> str:
    """A ratio for prose: whole numbers from 10, one decimal from 1, two below; powers of ten
    outside 0.01 .. 10,000.

    >>> ratio_text(790.4), ratio_text(2.04), ratio_text(0.0198), ratio_text(2e-3)
    ('790', '2.0', '0.02', '2.0 × 10⁻³')
    """
    if x is None:
        return "none"
    if 0.01 <= x < 1e4:
        return f"{x:.0f}" if x >= 10 else f"{x:.2f}" if x < 1 else f"{x:.1f}"
    return sci(x, 1)


class HtmlTable:
    """A table a notebook shows as HTML (``_repr_html_``), and as its rows in plain text
    elsewhere; so that the lab needs no IPython."""

    def __init__(self, caption: str, header: list[str], rows: list[list[str]]):
        self.caption, self.header, self.rows = caption, header, rows

    def _repr_html_(self) -> str:
        from html import escape

        head = "".join(f"<th>{escape(h)}</th>" for h in self.header)
        body = "".join("<tr>" + "".join(f"<td>{escape(x)}</td>" for x in r) + "</tr>" for r in self.rows)
        return (f'<table class="table"><caption>{escape(self.caption)}</caption><thead><tr>{head}</tr>'
                f"</thead><tbody>{body}</tbody></table>")

    def __repr__(self) -> str:
        return "\n".join([self.caption] + [" | ".join(r) for r in [self.header] + self.rows])


def comparison_html(c: E.Comparison) -> HtmlTable:
    """One comparison in full, as a table a notebook shows in HTML: each draw's values and
    difference, then the mean, its interval and the outcome."""
    rows = [[str(s), f"{a:.4f}", f"{b:.4f}", signed(b - a)]
            for s, a, b in zip(c.seeds, c.values_a, c.values_b)]
    rows.append(["mean, 95 % interval", f"{c.mean_a:.4f}", f"{c.mean_b:.4f}", interval(c)])
    rows.append(["outcome", "", "", c.outcome])
    return HtmlTable(f"{c.b} (B) against {c.a} (A): final excess per draw (nats)",
                     ["draw", c.a, c.b, "B − A"], rows)


def grid_table() -> tuple[list, list]:
    """(header, rows): per slice of :mod:`.grid`, its configurations, the seeds each has in the
    stored runs, and the runs stored."""
    from .config import run_id
    from .grid import SLICES, configs

    have = stored.runs()
    header = ["slice", "configurations", "draws each", "runs"]
    rows = []
    for name in SLICES:
        cs = configs(name)
        per: dict = {}
        for c in cs:
            if run_id(c) in have:
                per.setdefault(c.key(), set()).add(c.seed)
        if not per:
            continue
        counts = sorted({len(v) for v in per.values()})
        seeds = (
            "–".join(str(n) for n in (counts[0], counts[-1])) if len(counts) > 1 else str(counts[0])
        )
        label = "ten draws (draws 3–9 added)" if name == "ten_seeds" else name.replace("_", " ")
        rows.append([label, str(len(per)), seeds, str(sum(len(v) for v in per.values()))])
    return header, rows


def where_text(rows: list[dict]) -> str:
    """A sentence per condition of :func:`.claims.where_it_holds` other than the recipe: the
    norm's value and the largest gradient norms."""
    parts = []
    for r in rows[1:]:
        c, g = r["none_minus_pre"], r["max_grad_norm"]
        parts.append(
            f"{r['condition']}: no norm {interval(c, 3)} nats ({c.outcome}), largest gradient "
            f"norm {g['none']:.2g} without a norm against {g['pre']:.2g} with it"
        )
    return ("; ".join(parts) + ".") if parts else ""


def scope_text(rows: list[dict]) -> str:
    """Where post-norm was ahead of pre-norm by an effect, and where the comparison was not."""
    ahead = [
        r["condition"]
        for r in rows
        if r["post_minus_pre"].is_effect and r["post_minus_pre"].diff < 0
    ]
    other = [
        f"{r['condition']} ({r['post_minus_pre'].outcome})"
        for r in rows
        if r["condition"] not in ahead
    ]
    text = (
        "post-norm ahead at " + ", ".join(ahead) if ahead else "post-norm never ahead by an effect"
    )
    return text + ("; not at " + ", ".join(other) if other else "")


def markdown_table(caption: str, name: str, header, rows) -> str:
    """A numbered MyST table (``{table}`` directive) with ``caption``, label ``name``."""
    esc = [[str(c).replace("|", "\\|") for c in r] for r in [header, *rows]]
    lines = ["| " + " | ".join(esc[0]) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in esc[1:]]
    return f"```{{table}} {caption}\n:name: {name}\n\n" + "\n".join(lines) + "\n```"


def comparison_cells(c: E.Comparison, digits: int = 4) -> list[str]:
    """The cells a comparison fills: difference and interval, seeds, outcome."""
    return [interval(c, digits), str(c.n), c.outcome]


def sweep_table(rows=(0.0, 1e-12, 1e-8, 1e-6, 1e-5, 1e-3, 1e-1, 1.0)) -> tuple[list, list]:
    """(header, rows) of the epsilon sweep: per epsilon and family, the mean final excess and
    the paired difference to epsilon = 0 with its interval and outcome (Holm over the sweep)."""
    g = CL.guide_table(rows)
    fams = list(CL.SWEEP_FAMILIES)
    header = ["ε", *[n.replace(", init", ",") for n in fams]]
    out = []
    for e in rows:
        cells = [eps_text(e)]
        for n in fams:
            v = g[n, e]
            c = v["against_0"]
            cells.append(
                f"excess {v['mean']:.4f} ({v['seeds']} draws)"
                if c is None
                else f"{interval(c)}, {c.outcome} ({c.n})"
            )
        out.append(cells)
    return header, out


def verdict_rows(C: dict) -> list[tuple[str, str, E.Comparison]]:
    """(claim key, what is compared, comparison) for the verdict table: the comparisons each
    verdict rests on."""

    def pick(key, a=None, b=None, metric=None, i=None):
        es = C[key].effects
        if i is not None:
            return es[i]
        (e,) = [
            e
            for e in es
            if (a is None or e.a == a)
            and (b is None or e.b == b)
            and (metric is None or e.metric == metric)
        ]
        return e

    sw = "LayerNorm, init {}, eps 0"
    return [
        ("sigma_zero", "ε = 0 against 10⁻⁵, zero rows at step 0", pick("sigma_zero", i=0)),
        (
            "sigma_zero",
            "10⁻¹² against 10⁻⁵, log₁₀ of the largest gradient norm",
            pick("sigma_zero", i=1),
        ),
        ("fp16_tiny_eps", "(e) against (d), every q > 0", pick("fp16_tiny_eps", i=0)),
        ("fp16_tiny_eps", "(e) against float32, zero rows at step 0", pick("fp16_tiny_eps", i=1)),
        (
            "sweet_spot",
            "10⁻⁶ against 0, init normal",
            pick("sweet_spot", sw.format("normal"), "eps 1e-06"),
        ),
        (
            "sweet_spot",
            "10⁻⁵ against 0, init normal",
            pick("sweet_spot", sw.format("normal"), "eps 1e-05"),
        ),
        (
            "sweet_spot",
            "10⁻⁸ against 0, init small",
            pick("sweet_spot", sw.format("small"), "eps 1e-08"),
        ),
        (
            "sweet_spot",
            "10⁻⁶ against 0, init small",
            pick("sweet_spot", sw.format("small"), "eps 1e-06"),
        ),
        (
            "sweet_spot",
            "10⁻⁵ against 0, init small",
            pick("sweet_spot", sw.format("small"), "eps 1e-05"),
        ),
        (
            "sweet_spot",
            "10⁻³ against 0, RMSNorm",
            pick("sweet_spot", "RMSNorm, init normal, eps 0", "eps 0.001"),
        ),
        (
            "too_large",
            "1 against 10⁻⁵, init normal",
            pick("too_large", "LayerNorm, init normal, eps 1e-5", "eps 1", "final_excess"),
        ),
        (
            "too_large",
            "1 against no norm, init normal",
            pick("too_large", "no norm, normal", "eps 1"),
        ),
        (
            "norm_in_float32",
            "(f) float16 kernel against float32, init small, 10⁻⁸ (0 in float16)",
            pick("norm_in_float32", i=1),
        ),
        (
            "norm_in_float32",
            "(f) against (e), init normal, 10⁻¹² (0 in float16)",
            pick("norm_in_float32", i=4),
        ),
        (
            "norm_vs_none",
            "no norm against pre-norm, init normal",
            pick("norm_vs_none", "pre, normal", None, "final_excess"),
        ),
        (
            "pre_vs_post",
            "post- against pre-norm, init normal",
            pick("pre_vs_post", "pre, normal", None, "final_excess"),
        ),
        (
            "finetune_mismatch",
            "10⁻¹² to 10⁻⁵, init normal, after fine-tuning",
            pick("finetune_mismatch", "normal, trained 1e-12", "1e-05 fp32", "after_finetune"),
        ),
        (
            "finetune_mismatch",
            "10⁻¹² to 10⁻³, init normal, after fine-tuning",
            pick("finetune_mismatch", "normal, trained 1e-12", "0.001 fp32", "after_finetune"),
        ),
    ]


#: The claims' short titles, as the chapter's sections name them.
TITLES = {
    "sigma_zero": "σ = 0 early in training",
    "fp16_tiny_eps": "10⁻¹² in float16",
    "sweet_spot": "the sweet spot",
    "too_large": "too large an ε",
    "norm_in_float32": "the norm in float32",
    "norm_vs_none": "a norm against none",
    "pre_vs_post": "pre- against post-norm",
    "finetune_mismatch": "fine-tuning with another ε",
}


def verdict_table(C: dict) -> tuple[list, list]:
    """(header, rows): per claim its verdict, then each comparison it rests on."""
    header = ["claim and comparison", "B − A, 95 % interval", "draws", "outcome"]
    rows, seen = [], set()
    for key, what, c in verdict_rows(C):
        if key not in seen:
            seen.add(key)
            rows.append([f"**{TITLES[key]}**: {C[key].verdict}", "", "", ""])
        rows.append([what, *comparison_cells(c, 3 if c.metric == "log10_max_grad_norm" else 4)])
    return header, rows


def half_kernel_table() -> tuple[list, list]:
    """(header, rows) of :func:`.claims.half_kernel`: per initialization and epsilon of the
    float16 kernel (f), epsilon in float16, q0 and q0 over it, the dead draws (with the exact
    95 % interval of the share that dies) and their non-finite steps, the step at which the
    median q at the first norm reaches epsilon, and the paired difference of the held-out loss
    after 150 steps to its control."""
    hk = CL.half_kernel()
    header = ["init, ε", "ε in float16", "q₀ (smallest)", "q₀/ε", "dead (share, 95 %)",
              "non-finite steps",
              "median q reaches ε", "(f) − control, 150 steps", "outcome"]
    rows = []
    for r in hk["rows"]:
        c = r["comparison"]
        e16 = r["eps_float16"]
        steps = r["nonfinite_steps"]
        rows.append([
            f"{r['init']}, {eps_text(r['eps'])}",
            "0" if e16 == 0 else sci(e16, 4),
            f"{sci(r['q0'], 1)} ({sci(r['q0_min'], 1)})",
            "∞" if e16 == 0 else ratio_text(r["q0_over_eps"]),
            "{} of {} ({:.2f}–{:.2f})".format(r["dead"], r["runs"], *r["dead_ci95"]),
            f"{min(steps)}–{max(steps)}" if min(steps) != max(steps) else str(steps[0]),
            "—" if r["steps_to_q_eps"] is None else f"step {r['steps_to_q_eps']:.0f}",
            ("dead against alive" if c.diff == float("inf") else interval(c))
            + f" ({r['control']}, {c.n})",
            c.outcome,
        ])
    c = hk["eps_cost"]
    rows.append(["small, 10⁻⁶ against 10⁻⁵", "", "", "", "", "", "",
                 f"{interval(c)} ({c.n})",
                 c.outcome])
    return header, rows


def where_table() -> tuple[list, list]:
    """(header, rows) of :func:`.claims.where_it_holds`."""
    header = [
        "condition",
        "draws",
        "no norm − pre-norm",
        "post − pre-norm",
        "largest gradient norm: pre, post, none",
        "non-finite steps",
    ]
    rows = []
    for r in CL.where_it_holds():
        g, nf = r["max_grad_norm"], r["nonfinite_steps"]
        rows.append([
            r["condition"],
            str(r["seeds"]),
            f"{interval(r['none_minus_pre'], 3)} {r['none_minus_pre'].outcome}",
            f"{interval(r['post_minus_pre'], 3)} {r['post_minus_pre'].outcome}",
            ", ".join(f"{g[p]:.2g}" for p in ("pre", "post", "none")),
            ", ".join(str(nf[p]) for p in ("pre", "post", "none")),
        ])
    return header, rows


def rule_table() -> tuple[list, list]:
    """(header, rows) of :func:`.claims.eps_rule`: epsilon's cost against q at initialization."""
    header = [
        "runs",
        "ε",
        "q₀ (median)",
        "q₀/ε",
        "against ε = 0, 95 % interval",
        "draws",
        "outcome",
    ]
    rows = []
    for r in CL.eps_rule():
        c = r["comparison"]
        rows.append([
            r["condition"],
            eps_text(r["eps"]),
            sci(r["q0"], 1),
            ratio_text(r["q0_over_eps"]),
            interval(c),
            str(c.n),
            c.outcome,
        ])
    return header, rows


def probe_table() -> tuple[list, list]:
    """(header, rows) of :func:`.stored.probe_summary`: q at every norm, per model."""
    header = ["model", "ε", "smallest q", "median q", "smallest q/ε"]
    rows = [
        [
            r["model"],
            eps_text(r["eps"]),
            sci(r["q_min"], 1) if r["q_min"] else "0",
            sci(r["q_median"], 1),
            sci(r["q_min"] / r["eps"], 1) if r["q_min"] else "0",
        ]
        for r in stored.probe_summary()
    ]
    return header, rows


def floor_table() -> tuple[list, list]:
    """(header, rows): per configuration of the spread, the range of its final excess over the
    arithmetic profiles of one CPU, and which profiles gave the stored run bit for bit."""
    per = SP.metric_spread(E.final_excess)
    header = ["run (draw 0)", "range of the final excess", "bit for bit with the stored run"]
    rows = []
    for rid, v in per.items():
        same = next(g for g in SP.identical_groups(rid) if "stored" in g)
        rows.append([
            rid.replace("-s0", ""),
            sci(v, 1) if v else "0",
            ", ".join(p for p in same if p != "stored"),
        ])
    return header, rows


def autocast_table() -> tuple[list, list]:
    """(header, rows): the output type of each operation under CPU autocast, as stored."""
    dt = stored.manifest()["autocast"]["output_dtype"]
    ops = list(next(iter(dt.values())))
    header = ["autocast, input", *ops]
    rows = [[k.replace("autocast ", ""), *(v[o] for o in ops)] for k, v in dt.items()]
    return header, rows


#: The guide's training table: its columns (short name -> sweep family) and rows (epsilons).
GUIDE_COLUMNS = {
    "ln": "LayerNorm, init normal",
    "lns": "LayerNorm, init small",
    "rms": "RMSNorm, init normal",
}
GUIDE_ROWS = (0.0, 1e-12, 1e-6, 1e-5, 1e-3, 1e-1)


def guide_training() -> dict:
    """What the practical guide shows of the training runs, ready to glue: ``cells[col, i]`` (the
    row of 0: its final excess and seeds; the others: the paired difference to 0, its interval
    and outcome), ``seeds`` (the fewest and most seeds of a cell), ``rec_eps`` (the largest
    epsilon of the sweep equivalent to 0 in every family), the rule in q (``rule_equiv_from``,
    ``rule_cost_ratio``, ``rule_cost``: ratios as text and the costly comparison), ``cost_small``
    (torch's 1e-5 against 0 at the small initialization) and ``arithmetic_floor``."""
    g = CL.guide_table(GUIDE_ROWS)
    cells, seeds = {}, []
    for col, fam in GUIDE_COLUMNS.items():
        for i, e in enumerate(GUIDE_ROWS):
            v = g[fam, e]
            c = v["against_0"]
            seeds.append(v["seeds"] if c is None else c.n)
            cells[col, i] = (
                f"{v['mean']:.3f} ({v['seeds']} seeds)"
                if c is None
                else f"{interval(c, 3)}, {c.outcome}"
            )
    rule = CL.new_model_eps()
    return {
        "cells": cells,
        "seeds": (min(seeds), max(seeds)),
        "rec_eps": rule["largest_eps_equivalent_everywhere"],
        "rule_equiv_from": ratio_text(rule["equivalent_from_q0_over_eps"]),
        "rule_cost_ratio": ratio_text(rule["costs_up_to_q0_over_eps"]),
        "rule_cost": rule["cost_at_that_ratio"],
        "cost_small": g[GUIDE_COLUMNS["lns"], 1e-5]["against_0"],
        "arithmetic_floor": E.arithmetic_floor("final_excess"),
    }
