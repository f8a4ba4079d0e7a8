"""Re-run the first PREFIX steps of a few stored training runs (lneps.book.training.grid.RERUN_CONFIGS)
and compare them with the stored runs, within the stored spread over machines.

The rule, as for the frameworks' measurements (tests/book/test_frameworks_measured.py):

1. Under the arithmetic of the stored runs (same torch, CPU model and flags, kernel capability,
   threads, MKL/oneDNN settings: lneps.book.training.provenance.arithmetic_key) the prefix is
   the stored one, bit for bit: a run is deterministic.
2. Under the arithmetic of one of the spread's profiles (e.g. ATEN_CPU_CAPABILITY=default on the
   machine that made them), it is that profile's run, bit for bit.
3. Anywhere, each step's loss lies within SAFETY x the stored envelope: the largest distance of
   any profile's loss from the stored run over the prefix's steps (lneps.book.training.spread.loss_envelope).

Without torch these tests skip, except under CI=1, where they fail.
"""

import importlib.util
import os
from dataclasses import replace

import numpy as np
import pytest

from lneps.book.training import grid, record, spread, stored
from lneps.book.training.config import run_id

HAVE_TORCH = importlib.util.find_spec("torch") is not None
if not HAVE_TORCH and os.environ.get("CI"):
    pytest.fail("CI must install requirements-frameworks.txt; missing torch", pytrace=False)
pytestmark = pytest.mark.skipif(not HAVE_TORCH, reason="torch (the frameworks extra) not installed")

PREFIX = 20
SAFETY = 2


def _rerun(configs):
    """The first PREFIX steps of each configuration, one thread, deterministic (as the grid made
    them), and this machine's provenance; torch's settings restored afterwards."""
    import torch

    from lneps.book.training import run
    from lneps.book.training.provenance import provenance

    threads, det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    run.configure(1)
    try:
        stream = stored.corpus()
        out = {}
        for cfg in configs:
            short = replace(cfg, steps=PREFIX)
            out[run_id(cfg)] = run.run_job([short], stream)[run_id(short)]
        return out, provenance()
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(det)


@pytest.fixture(scope="module")
def reruns():
    return _rerun(grid.RERUN_CONFIGS)


def _matching_profile(prov) -> str | None:
    from lneps.book.training.provenance import arithmetic_key
    key = arithmetic_key(prov)
    if key == arithmetic_key(stored.manifest()["provenance"]):
        return "stored"
    for name, p in stored.spread_manifest()["profiles"].items():
        if key == arithmetic_key(p["provenance"]):
            return name
    return None


def _common_records(n_steps):
    """Indices into a PREFIX-step run's q records and a stored run's, at the steps both recorded."""
    mine, theirs = record.record_steps(PREFIX), record.record_steps(n_steps)
    common = np.intersect1d(mine, theirs)
    return np.searchsorted(mine, common), np.searchsorted(theirs, common)


@pytest.mark.parametrize("cfg", grid.RERUN_CONFIGS, ids=run_id)
def test_prefix_is_within_the_stored_spread(cfg, reruns):
    got, prov = reruns
    rid = run_id(cfg)
    new, old = got[rid], stored.runs()[rid]
    envelope = spread.loss_envelope(rid)[:PREFIX]
    tol = SAFETY * float(envelope.max())
    diff = np.abs(new["loss"].astype(np.float64) - old.loss[:PREFIX].astype(np.float64))
    assert np.all(np.isfinite(new["loss"])) == np.all(np.isfinite(old.loss[:PREFIX]))
    assert np.nanmax(diff) <= tol, (f"{rid}: loss moved {np.nanmax(diff):.3g} at step {int(np.nanargmax(diff))}; "
                                   f"allowed {tol:.3g} ({SAFETY} x the spread over profiles)")
    assert new["sites"] == list(old.sites)
    k = old.first_nonfinite_step
    assert new["first_nonfinite_step"] == (k if k is not None and k < PREFIX else None)


@pytest.mark.parametrize("cfg", grid.RERUN_CONFIGS, ids=run_id)
def test_prefix_is_bit_identical_under_a_measured_arithmetic(cfg, reruns):
    got, prov = reruns
    profile = _matching_profile(prov)
    if profile is None:
        pytest.skip("this machine's arithmetic is none of the measured ones: rule 3 only")
    rid = run_id(cfg)
    ref = stored.runs()[rid] if profile == "stored" else spread.profile_runs()[profile][rid]
    new = got[rid]
    assert np.array_equal(new["loss"], ref.loss[:PREFIX], equal_nan=True), profile
    assert np.array_equal(new["grad_norm"], ref.grad_norm[:PREFIX], equal_nan=True), profile
    assert new["eval_loss"][0] == ref.eval_loss[0]
    mine, theirs = _common_records(ref.steps)
    np.testing.assert_array_equal(new["q"][mine].astype(np.float32).astype(np.float64), ref.q[theirs])


def test_reruns_use_the_stored_corpus():
    from lneps.book.training import corpus
    assert corpus.digest(stored.corpus()) == stored.corpus_meta()["sha256"] == stored.manifest()["corpus"]["sha256"]


#: The float16 kernel's runs (mode (f), the ``half_kernel`` slice): one that dies at step 0 (its
#: float16 variance and epsilon are both 0) and one that trains.
HALF_CONFIGS = tuple(c for c in grid.configs("half_kernel") if c.seed == 0 and c.init == "small"
                     and c.eps in (1e-8, 1e-5))


@pytest.fixture(scope="module")
def half_reruns():
    return _rerun(HALF_CONFIGS)


@pytest.mark.parametrize("cfg", HALF_CONFIGS, ids=run_id)
def test_a_float16_kernel_prefix_is_the_stored_one(cfg, half_reruns):
    """Under the arithmetic of the machine that made the run, bit for bit; under any other, the
    same fate: death at step 0 where the float16 variance and epsilon are both 0 (no rounding
    can make them otherwise), a finite loss near the stored one where epsilon is not. (The
    spread was not measured on these runs: no tolerance is derived for them.)"""
    from lneps.book.training.provenance import arithmetic_key

    got, prov = half_reruns
    rid = run_id(cfg)
    new, old = got[rid], stored.runs()[rid]
    maker = stored.manifest()["machines"][old.machine]
    assert new["sites"] == list(old.sites)
    if arithmetic_key(prov) == arithmetic_key(maker):
        assert np.array_equal(new["loss"], old.loss[:PREFIX], equal_nan=True)
        assert np.array_equal(new["grad_norm"], old.grad_norm[:PREFIX], equal_nan=True)
        assert new["eval_loss"][0] == old.eval_loss[0] or np.isnan(old.eval_loss[0])
        return
    if old.dead:
        assert new["first_nonfinite_step"] == old.first_nonfinite_step == 0
        assert not np.any(np.isfinite(new["loss"]))
    else:
        assert np.all(np.isfinite(new["loss"])) and np.all(np.isfinite(old.loss[:PREFIX]))
        # a loose bound, not a measured spread: the first steps of a float16 run
        assert np.max(np.abs(new["loss"] - old.loss[:PREFIX])) < 0.05
