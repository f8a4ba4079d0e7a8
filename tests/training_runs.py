"""What the training chapter's tests and its appendix's share: the stored runs read with json and
NumPy, the chain's own held-out loss recomputed from the stored stream, and a paired comparison
computed here (the mean of the per-draw differences with its t-interval, from quoted quantiles
of Student's t), not through lneps.book.training.effects or .claims."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from notebooks import read

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "src" / "lneps" / "book" / "data" / "training"
MANIFEST = json.loads((DATA / "runs.json").read_text(encoding="utf-8"))
CORPUS = json.loads((DATA / "corpus.json").read_text(encoding="utf-8"))
SPREAD = json.loads((DATA / "spread.json").read_text(encoding="utf-8"))
STATS = MANIFEST["record"]["stats"]
#: Student's t, 0.975 quantile, by degrees of freedom (quoted from standard tables).
T975 = {2: 4.302652729749464, 3: 3.182446305284263, 9: 2.262157162798205}


def _held_out_floor() -> float:
    """The chain's own cross-entropy on the held-out windows, from the stored stream."""
    from lneps.book.training import corpus

    s = np.load(DATA / "corpus.npy").astype(np.int64)
    p = corpus.transitions()
    starts = len(s) - (256 * 64 + 1) + 64 * np.arange(256)
    idx = starts[:, None] + np.arange(64)
    return float(-np.mean(np.log(p[s[idx], s[idx + 1]])))


FLOOR = _held_out_floor()


def glued_table(key: str, nb: str) -> str:
    """The Markdown of a table the notebook ``nb`` glued (its text/markdown, not the object's
    repr)."""
    for cell in read(nb).cells:
        for out in cell.get("outputs", []):
            record = out.get("metadata", {}).get("scrapbook", {})
            if record.get("name") == key:
                return out["data"][record["mime_prefix"] + "text/markdown"]
    raise KeyError(key)


def ids(**where) -> list[str]:
    """The stored runs whose configuration has every field given (LayerNorm, float32, 300 steps
    and pre-training unless given otherwise), in the order of their draws."""
    where.setdefault("norm", "LayerNorm")
    where.setdefault("precision", "fp32")
    where.setdefault("steps", 300)
    if not any(k.startswith("ft_") for k in where):
        where["ft_steps"] = 0
    for k in ("lr", "layers", "width", "warmup"):
        where.setdefault(k, None)
    hits = [
        (e["config"]["seed"], rid)
        for rid, e in MANIFEST["runs"].items()
        if all(e["config"].get(k) == v for k, v in where.items())
    ]
    assert hits, where
    return [rid for _, rid in sorted(hits)]


def final(arrays, rid) -> float:
    """Held-out loss after the last step minus the floor; inf for a stopped run."""
    if MANIFEST["runs"][rid]["stopped_at"] is not None:
        return math.inf
    return float(arrays[f"{rid}:eval_loss"][-1]) - FLOOR


def mean_loss(arrays, rid) -> float:
    return float(np.mean(arrays[f"{rid}:loss"].astype(np.float64))) - FLOOR


def paired(arrays, a: list[str], b: list[str], metric=final) -> tuple[float, float, float, int]:
    """(mean of B - A over the seeds both have, the 95 % t-interval's ends, the seeds)."""
    seed = {r: MANIFEST["runs"][r]["config"]["seed"] for r in a + b}
    ba = {seed[r]: r for r in b}
    pairs = [(r, ba[seed[r]]) for r in a if seed[r] in ba]
    d = np.array([metric(arrays, y) - metric(arrays, x) for x, y in pairs])
    n = len(d)
    h = T975[n - 1] * d.std(ddof=1) / np.sqrt(n)
    return float(d.mean()), float(d.mean() - h), float(d.mean() + h), n


def signed(x, digits=4) -> str:
    return "0.0000" if x == 0 else f"{x:+.{digits}f}".replace("-", "−")


def interval(t, digits=4) -> str:
    m, lo, hi, _ = t
    return f"{signed(m, digits)} [{signed(lo, digits)}, {signed(hi, digits)}]"


def stat(arrays, rid, name) -> np.ndarray:
    """One column of the q record: (record steps, sites)."""
    return arrays[f"{rid}:q"][:, :, STATS.index(name)].astype(np.float64)
