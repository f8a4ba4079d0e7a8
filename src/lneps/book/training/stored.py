r"""The stored runs of the training lab, read without torch.

``data/training/`` holds:

* ``corpus.npy`` (the token stream, uint8) and ``corpus.json`` (its generator's parameters, exact
  entropies and loss floor, SHA-256);
* ``runs.json`` (the manifest: provenance, recipe, what is recorded, the grid's slices and why,
  the autocast finding, the zero-row probe, and per run its configuration, sites, first
  non-finite step, stop, timing) and ``runs.npz`` (per run ``<id>:loss``, ``<id>:grad_norm``,
  ``<id>:eval_loss``, ``<id>:q`` and, in the float16 modes, ``<id>:scale``);
* ``spread.json`` and ``spread.npz``: the same configurations under several arithmetic profiles
  (:mod:`.spread`).

:func:`runs` gives every run as a :class:`Run`; :func:`select` filters them by configuration.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from .config import RunConfig, from_dict, run_id
from .record import EVERY, FULL_STEPS, STATS, record_steps
from .recipe import eval_steps

__all__ = [
    "DATA_DIR",
    "Run",
    "manifest",
    "runs",
    "select",
    "one",
    "corpus",
    "corpus_meta",
    "spread_manifest",
    "spread_arrays",
    "floor",
    "held_out_floor",
    "probe",
    "probe_summary",
]

DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "training"


@functools.cache
def _json(name: str, data_dir: Path) -> dict:
    return json.loads((Path(data_dir) / name).read_text(encoding="utf-8"))


@functools.cache
def _npz(name: str, data_dir: Path) -> dict:
    with np.load(Path(data_dir) / name) as z:
        return {k: z[k] for k in z.files}


def manifest(data_dir: Path = DATA_DIR) -> dict:
    return _json("runs.json", data_dir)


def _arrays(data_dir: Path = DATA_DIR) -> dict:
    return _npz("runs.npz", data_dir)


@functools.cache
def corpus(data_dir: Path = DATA_DIR) -> np.ndarray:
    """The stored token stream (uint8)."""
    return np.load(Path(data_dir) / "corpus.npy")


def corpus_meta(data_dir: Path = DATA_DIR) -> dict:
    return _json("corpus.json", data_dir)


def floor(data_dir: Path = DATA_DIR) -> float:
    """The loss floor of the stored corpus (nats): the entropy rate of its chain."""
    return corpus_meta(data_dir)["loss_floor_nats"]


@functools.cache
def held_out_floor(data_dir: Path = DATA_DIR) -> float:
    """The chain's own cross-entropy on the held-out windows of the stored stream (nats): the
    lowest held-out loss any model can reach there, and what the lab's excess is measured over.
    It lies above :func:`floor` (the entropy rate) by the windows' sampling."""
    from .corpus import held_out_loss

    return held_out_loss(corpus(data_dir), context=corpus_meta(data_dir)["context"])


def probe(data_dir: Path = DATA_DIR) -> dict:
    """``probe.json``: :func:`lneps.torch.probe` on the lab's models at initialization and on
    all-MiniLM-L6-v2 as a PyTorch module (:mod:`lneps.book.minilm.torch_model`; tools/train.py
    --probe)."""
    return _json("probe.json", data_dir)


def probe_summary(data_dir: Path = DATA_DIR) -> list[dict]:
    """One row per model of :func:`probe`: its label, the smallest q over its sites and seeds, the
    median over sites and seeds of each site's median q, and the largest share of rows (over
    sites) where its epsilon acts, per format. The lab's models are at initialization with
    epsilon 1e-5; MiniLM is trained, with its own epsilon (1e-12)."""
    d = probe(data_dir)
    groups: dict[str, list] = {}
    for r in d["lab"]:
        c = r["config"]
        size = (f", {c['layers']} blocks" if "layers" in c else "") + (
            f" of width {c['width']}" if "width" in c else ""
        )
        label = f"{c['norm']}, {c['placement']}-norm, init {c['init']}{size}"
        groups.setdefault(label, []).append((c["eps"], r["sites"]))
    m = d["minilm"]
    groups[f"{m['model']} (trained)"] = [(m["eps"], m["sites"])]
    rows = []
    for label, items in groups.items():
        sites = [s for _, ss in items for s in ss.values()]
        rows.append({
            "model": label,
            "eps": items[0][0],
            "q_min": min(s["q_min"] for s in sites),
            "q_median": float(np.median([s["q_median"] for s in sites])),
            "share_acts": {
                f: max(s["share_acts"][f] for s in sites) for f in sites[0]["share_acts"]
            },
        })
    return rows


def spread_manifest(data_dir: Path = DATA_DIR) -> dict:
    return _json("spread.json", data_dir)


def spread_arrays(data_dir: Path = DATA_DIR) -> dict:
    return _npz("spread.npz", data_dir)


@dataclass(frozen=True)
class Run:
    """One stored run: its configuration, its record (arrays as stored) and its manifest entry."""

    id: str
    config: RunConfig
    sites: tuple[str, ...]
    meta: dict
    loss: np.ndarray
    grad_norm: np.ndarray
    eval_loss: np.ndarray
    q: np.ndarray
    scale: np.ndarray | None

    @property
    def steps(self) -> int:
        """The steps the run was meant to take (pre-training, or fine-tuning for a fine-tune)."""
        return self.config.ft_steps if self.config.is_finetune else self.config.steps

    @property
    def record_steps(self) -> np.ndarray:
        return record_steps(self.steps, FULL_STEPS, EVERY)

    @property
    def eval_steps(self) -> np.ndarray:
        return eval_steps(self.steps)

    @property
    def first_nonfinite_step(self):
        return self.meta["first_nonfinite_step"]

    @property
    def stopped_at(self):
        return self.meta["stopped_at"]

    @property
    def machine(self) -> int:
        """Which machine made the run: an index into the manifest's ``machines`` (0: the whole
        grid's, whose provenance is the manifest's ``provenance``)."""
        return self.meta.get("machine", 0)

    @property
    def dead(self) -> bool:
        """The run stopped: its parameters went non-finite, or its steps stayed non-finite."""
        return self.meta["stopped_at"] is not None

    def stat(self, name: str, site: str | None = None) -> np.ndarray:
        """One column of :data:`.record.STATS` over the record steps (x sites, or at ``site``)."""
        col = self.q[:, :, STATS.index(name)]
        return col if site is None else col[:, self.sites.index(site)]

    def eval_at(self, step: int) -> float:
        """The held-out loss after ``step`` steps (a step of :attr:`eval_steps`)."""
        return float(self.eval_loss[list(self.eval_steps).index(step)])


@functools.cache
def runs(data_dir: Path = DATA_DIR) -> dict[str, Run]:
    """Every stored run by id."""
    m, a = manifest(data_dir), _arrays(data_dir)
    out = {}
    for rid, entry in m["runs"].items():
        cfg = from_dict(entry["config"])
        assert run_id(cfg) == rid, (rid, run_id(cfg))
        out[rid] = Run(
            rid,
            cfg,
            tuple(entry["sites"]),
            entry,
            a[f"{rid}:loss"],
            a[f"{rid}:grad_norm"],
            a[f"{rid}:eval_loss"],
            a[f"{rid}:q"].astype(np.float64),
            a.get(f"{rid}:scale"),
        )
    return out


_FIELDS = {f.name for f in fields(RunConfig)}
_RECIPE_FIELDS = ("lr", "layers", "width", "warmup")


def select(data_dir: Path = DATA_DIR, **where) -> list[Run]:
    """The stored runs whose configuration has every ``field=value`` given (``seed`` too), in
    seed order; fine-tuning runs only when an ``ft_*`` field is given, and runs of another
    learning rate, depth, width or warm-up than the recipe's only when that field is given."""
    bad = set(where) - _FIELDS
    if bad:
        raise TypeError(f"not RunConfig fields: {sorted(bad)}")
    if not any(k.startswith("ft_") for k in where):
        where = {**where, "ft_steps": 0}
    # the recipe's learning rate, size and warm-up unless asked: the generality slices' runs are
    # selected by naming what they change
    where = {**{k: None for k in _RECIPE_FIELDS}, **where}
    hits = [
        r
        for r in runs(data_dir).values()
        if all(getattr(r.config, k) == v for k, v in where.items())
    ]
    return sorted(hits, key=lambda r: (r.config.seed, r.id))


def one(data_dir: Path = DATA_DIR, **where) -> Run:
    (r,) = select(data_dir, **where)
    return r
