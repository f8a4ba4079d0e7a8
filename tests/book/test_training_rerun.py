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


@pytest.fixture(scope="module")
def reruns():
    import torch

    from lneps.book.training import run
    from lneps.book.training.provenance import provenance

    threads, det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    run.configure(1)
    try:
        stream = stored.corpus()
        out = {}
        for cfg in grid.RERUN_CONFIGS:
            short = replace(cfg, steps=PREFIX)
            out[run_id(cfg)] = run.run_job([short], stream)[run_id(short)]
        return out, provenance()
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(det)


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
