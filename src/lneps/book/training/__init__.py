"""The training lab: what the layer-norm epsilon does to a small transformer while it trains.

A 2-layer decoder-only transformer (width 64, 4 heads, context 64) learns a seeded Markov chain
whose loss floor is known exactly, under a grid of norms, placements, inits, epsilons and
precision modes (three seeds each, ten where a verdict rests on them), and of learning rates,
depths, widths, warm-up and budget (four seeds); every run records its loss, gradient norm, first non-finite
step and, at every norm site, the distribution of q/epsilon. The runs are stored in
``lneps/book/data/training/`` and read back without torch.

Modules (each loaded on first use; only those marked torch import it):

* ``corpus``: the Markov chain, its exact entropy rate and loss floor, the stream;
* ``config``, ``recipe``, ``grid``: a run's configuration, the fixed training recipe, the slices
  of the grid and why each suffices;
* ``record``: the q statistics recorded at a norm site;
* ``precision``: the precision modes, and what CPU autocast does to the norms (measured, torch);
* ``model`` (torch), ``run`` (torch): the transformer and the training loop;
* ``provenance``: what the runs' bits depend on;
* ``stored``: the stored runs, read without torch;
* ``spread``: the spread over arithmetic profiles;
* ``effects``: metrics and the paired test (interval, equivalence margin, Holm);
* ``claims``: the stability note's training claims, settled, and where each verdict holds;
* ``tables``: the training chapter's tables (MyST Markdown);
* ``figures``: the training chapter's figures (loss curves, q/epsilon over training).
"""

import importlib

_MODULES = (
    "corpus",
    "config",
    "recipe",
    "grid",
    "record",
    "precision",
    "model",
    "run",
    "provenance",
    "stored",
    "spread",
    "effects",
    "claims",
    "tables",
    "figures",
)


def __getattr__(name):
    if name in _MODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'lneps.book.training' has no attribute {name!r}")
