r"""The training chapter's figures, drawn from the stored runs (NumPy and matplotlib, no torch).

Each figure is two steps: a data function that reads :mod:`.stored` and returns arrays, and a
drawing function that takes only those arrays and returns a figure of
:func:`lneps.book.plotting.subplots` (pass it to :func:`lneps.book.plotting.png` to show it).

* :func:`loss_curves` / :func:`draw_loss_curves`: the training loss's excess over the loss floor
  against the step, for several epsilons and no norm, one panel per init;
* :func:`q_over_eps` / :func:`draw_q_over_eps`: the smallest and the median :math:`q/\varepsilon`
  at the norm sites against the step, with the formats' thresholds :data:`.record.THRESHOLDS`.
"""

from __future__ import annotations

import numpy as np

from .. import plotting
from . import stored
from .record import THRESHOLDS

__all__ = [
    "LOSS_EPS",
    "SMOOTH",
    "smoothed",
    "loss_curves",
    "draw_loss_curves",
    "q_over_eps",
    "draw_q_over_eps",
]

#: The epsilons of the loss figure (the sweep's others lie on the curve of 0 or of 1e-5).
LOSS_EPS = (0.0, 1e-5, 1e-3, 1e-1, 1.0)
#: The training loss is averaged over this many steps (it is the loss of one batch of 512 symbols).
SMOOTH = 10


def _label(eps) -> str:
    if eps is None:
        return "no norm"
    if eps == 0:
        return "ε = 0"
    if eps == 1:
        return "ε = 1"
    return f"ε = 1e{int(round(np.log10(eps)))}"


def smoothed(loss: np.ndarray, window: int = SMOOTH) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values): the mean of each ``window`` consecutive values, at the window's last step."""
    c = np.cumsum(np.r_[0.0, np.asarray(loss, dtype=np.float64)])
    return np.arange(window - 1, len(loss)), (c[window:] - c[:-window]) / window


def loss_curves(inits=("normal", "small"), eps_values=LOSS_EPS, norm: str = "LayerNorm") -> dict:
    """{init: {label: (steps, excess)}}: pre-norm runs (float32, 300 steps) at each epsilon and
    the runs without a norm; the training loss averaged over the seeds every curve of an init
    has (so that the curves differ by the configuration only), then by :func:`smoothed`, minus
    the chain's held-out loss (nats)."""
    floor = stored.held_out_floor()
    out = {}
    for init in inits:
        curves, sel = {}, {}
        for eps in (*eps_values, None):
            placement = "pre" if eps is not None else "none"
            sel[eps] = stored.select(
                norm=norm, placement=placement, init=init, eps=eps, precision="fp32", steps=300
            )
        common = set.intersection(*({r.config.seed for r in rs} for rs in sel.values()))
        for eps, rs in sel.items():
            runs = [r for r in rs if r.config.seed in common]
            steps, mean = smoothed(np.mean([r.loss.astype(np.float64) for r in runs], axis=0))
            curves[_label(eps)] = (steps, mean - floor)
        out[init] = curves
    return out


def draw_loss_curves(panels: dict, width: int = 400, height: int = 560):
    """The figure of :func:`loss_curves`' data: one panel per init, log excess against step."""
    fig, axes = plotting.subplots(width, height, nrows=len(panels), sharex=True)
    axes = np.atleast_1d(axes)
    labels = list(next(iter(panels.values())))
    colours = {
        lab: (0.15, 0.15, 0.15) if lab == "no norm" else c
        for lab, c in zip(labels, _ramp(len(labels) - 1) + [None])
    }
    for ax, (init, curves) in zip(axes, panels.items()):
        for lab, (steps, excess) in curves.items():
            ax.plot(
                steps,
                excess,
                color=colours[lab],
                label=lab,
                ls="--" if lab == "no norm" else "-",
                lw=1.6 if lab == "no norm" else 1.8,
            )
        ax.set_yscale("log")
        ax.set_title(f"init {init}", loc="left")
        ax.set_ylabel("loss − floor (nats)")
        ax.grid(True, which="major", alpha=0.3)
    axes[-1].set_xlabel("step")
    # two columns: at 400 px a phone shows the figure near its design size, 11 pt type legible
    fig.legend(
        *axes[0].get_legend_handles_labels(), loc="outside upper center", ncol=2, frameon=False
    )
    return fig


def _ramp(n: int) -> list:
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    return [cmap(v) for v in np.linspace(0.0, 0.85, n)]


def q_over_eps(inits=("normal", "small"), eps: float = 1e-5, norm: str = "LayerNorm") -> dict:
    """{init: (steps, smallest, median)}: for the pre-norm float32 runs at ``eps``, per recorded
    step, the smallest q/eps of any row at any site in any draw, and the median q/eps of the site
    whose median is lowest (the median over the draws)."""
    out = {}
    for init in inits:
        runs = stored.select(
            norm=norm, placement="pre", init=init, eps=eps, precision="fp32", steps=300
        )
        smallest = np.min([np.nanmin(r.stat("q_min"), axis=1) for r in runs], axis=0) / eps
        median = np.median([np.nanmin(r.stat("q_p50"), axis=1) for r in runs], axis=0) / eps
        out[init] = (runs[0].record_steps, smallest, median)
    return out


def draw_q_over_eps(
    panels: dict, eps: float, thresholds: dict | None = None, width: int = 400, height: int = 560
):
    """The figure of :func:`q_over_eps`' data: one panel per init, log q/eps against step, a
    dotted line at each of ``thresholds`` (by default q = eps, and each format's threshold of
    :data:`.record.THRESHOLDS`, above which eps changes nothing in that format)."""
    thresholds = {"q = ε": 1.0, **THRESHOLDS} if thresholds is None else thresholds
    fig, axes = plotting.subplots(width, height, nrows=len(panels), sharex=True, sharey=True)
    axes = np.atleast_1d(axes)
    for ax, (init, (steps, smallest, median)) in zip(axes, panels.items()):
        ax.plot(steps, median, color="C0", label="median row (lowest site)")
        ax.plot(steps, smallest, color="C3", label="smallest row")
        for name, t in thresholds.items():
            ax.axhline(t, color="0.35", lw=1, ls=":")
            # named beside the panel; the names of two lines within a decade are pushed apart
            near = [u for u in thresholds.values() if u != t and abs(np.log10(u / t)) < 1]
            va = "center" if not near else ("top" if near[0] > t else "bottom")
            ax.text(
                1.02, t, name, transform=ax.get_yaxis_transform(), ha="left", va=va, color="0.25"
            )
        ax.set_yscale("log")
        ax.set_title(f"init {init}, {_label(eps)}", loc="left")
        ax.set_ylabel("q / ε")
        ax.grid(True, which="major", axis="x", alpha=0.3)
    axes[-1].set_xlabel("step")
    fig.legend(
        *axes[0].get_legend_handles_labels(), loc="outside upper center", ncol=1, frameon=False
    )
    return fig
