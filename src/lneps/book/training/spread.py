r"""The spread over machines: the same runs under several arithmetic profiles.

PyTorch's CPU training is not bit-reproducible across CPUs: the SIMD kernels torch dispatches
to (``ATEN_CPU_CAPABILITY``), the thread count, MKL's and oneDNN's code paths each change the last
bits of a step, and a training run amplifies them. On one machine the profiles
:data:`PROFILES` reproduce that variety: ``native`` (what torch picks here), ``avx2`` and
``default`` (no vector ISA) capped by ``ATEN_CPU_CAPABILITY``, each with 1 and 2 threads.
tools/train.py --spread (``make training-spread``) runs :data:`.grid.SPREAD_CONFIGS` under each,
in a subprocess of its own, and stores them with their provenance (``spread.json``,
``spread.npz``).

From them (NumPy only):

* :func:`metric_spread`: per metric of :mod:`.effects`, max - min over the profiles, per
  configuration, and the largest over the configurations (what the effect rule uses);
* :func:`loss_envelope`: per configuration and step, the largest distance of a profile's training
  loss from the stored run's (what tests/book/test_training_rerun.py allows a re-run).
"""

from __future__ import annotations

import numpy as np

from . import stored
from .config import from_dict

__all__ = ["PROFILES", "PROFILE_VARS", "profile_runs", "identical_groups", "metric_spread",
           "loss_envelope", "machine_spread"]

#: Variables a profile may set; any of them not set by the profile is removed from its environment.
PROFILE_VARS = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")
PROFILES = {
    "native-1t": {"env": {}, "threads": 1},
    "native-2t": {"env": {}, "threads": 2},
    "avx2-1t": {"env": {"ATEN_CPU_CAPABILITY": "avx2"}, "threads": 1},
    "avx2-2t": {"env": {"ATEN_CPU_CAPABILITY": "avx2"}, "threads": 2},
    "default-1t": {"env": {"ATEN_CPU_CAPABILITY": "default"}, "threads": 1},
    "default-2t": {"env": {"ATEN_CPU_CAPABILITY": "default"}, "threads": 2},
}


def profile_runs(data_dir=stored.DATA_DIR) -> dict[str, dict[str, stored.Run]]:
    """``{profile: {run id: Run}}`` for the spread's runs, plus ``"stored"``: the grid's own runs
    of the same configurations."""
    m, a = stored.spread_manifest(data_dir), stored.spread_arrays(data_dir)
    out: dict[str, dict[str, stored.Run]] = {}
    for name, prof in m["profiles"].items():
        out[name] = {}
        for rid, entry in prof["runs"].items():
            k = f"{name}/{rid}"
            out[name][rid] = stored.Run(rid, from_dict(entry["config"]), tuple(entry["sites"]), entry,
                                        a[f"{k}:loss"], a[f"{k}:grad_norm"], a[f"{k}:eval_loss"],
                                        a[f"{k}:q"].astype(np.float64), a.get(f"{k}:scale"))
    grid = stored.runs(data_dir)
    out["stored"] = {rid: grid[rid] for rid in m["configs"]}
    return out


def _same(a: stored.Run, b: stored.Run) -> bool:
    return all(np.array_equal(x, y, equal_nan=True) for x, y in
               ((a.loss, b.loss), (a.grad_norm, b.grad_norm), (a.eval_loss, b.eval_loss)))


def identical_groups(rid: str, data_dir=stored.DATA_DIR) -> list[list[str]]:
    """The profiles (and ``"stored"``) grouped by bit-identical records of run ``rid``."""
    pr = profile_runs(data_dir)
    groups: list[list[str]] = []
    for name, runs in pr.items():
        for g in groups:
            if _same(pr[g[0]][rid], runs[rid]):
                g.append(name)
                break
        else:
            groups.append([name])
    return groups


def metric_spread(metric, data_dir=stored.DATA_DIR) -> dict[str, float]:
    """max - min of ``metric(run)`` over the profiles, per spread configuration (NaN-free
    metrics; a dead run's metric is +inf, and a spread between dead and alive is inf)."""
    pr = profile_runs(data_dir)
    out = {}
    for rid in stored.spread_manifest(data_dir)["configs"]:
        vals = np.array([metric(runs[rid]) for runs in pr.values()], dtype=np.float64)
        out[rid] = 0.0 if np.all(vals == vals[0]) else float(np.nanmax(vals) - np.nanmin(vals))
    return out


def machine_spread(metric, data_dir=stored.DATA_DIR) -> float:
    """The spread over machines the effect rule uses for ``metric``: the largest
    :func:`metric_spread` over the spread configurations."""
    return max(metric_spread(metric, data_dir).values())


def loss_envelope(rid: str, data_dir=stored.DATA_DIR) -> np.ndarray:
    """Per step, the largest |loss_profile - loss_stored| over the profiles of run ``rid``
    (float64; NaN steps of a stopped run count as 0 where both are NaN)."""
    pr = profile_runs(data_dir)
    ref = pr["stored"][rid].loss.astype(np.float64)
    env = np.zeros_like(ref)
    for name, runs in pr.items():
        d = np.abs(runs[rid].loss.astype(np.float64) - ref)
        both_nan = np.isnan(runs[rid].loss) & np.isnan(ref)
        d[both_nan] = 0.0
        env = np.fmax(env, np.where(np.isnan(d), np.inf, d))
    return env
