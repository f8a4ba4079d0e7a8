"""Re-measure the frameworks and compare with the stored data (needs the extra,
requirements-frameworks.txt; `make frameworks` installs it).

Without the extra these tests skip, except under CI=1, where they fail: CI installs the extra
(.ci/run), so a skip there would hide a broken install.

On the machine that made the stored measurement (same CPU flags and versions) every kernel
measured is deterministic, so every re-measured row must be bit-identical (same output digest).
Elsewhere SIMD paths differ: the share of correctly rounded outputs may move by at most
SHARE_TOL per row, and NaN/inf counts must agree. torch, ONNX Runtime and ONNX's reference run
the full grid (a few seconds); Flax, whose jit compiles once per shape, a subset of d and eps.
"""

import importlib.util
import os
from importlib import metadata
from pathlib import Path

import pytest

from lneps.book import frameworks as FW

ROOT = Path(__file__).resolve().parents[1]
SHARE_TOL = 0.02


def _have(mod):
    return importlib.util.find_spec(mod) is not None


MISSING = [m for m in ("torch", "flax", "onnxruntime", "onnx") if not _have(m)]
if MISSING and os.environ.get("CI"):
    pytest.fail(f"CI must install requirements-frameworks.txt; missing {MISSING}", pytrace=False)
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"frameworks extra not installed ({MISSING})")


def _tool():
    spec = importlib.util.spec_from_file_location("measure_frameworks", ROOT / "tools" / "measure_frameworks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


GRIDS = {
    "torch": {},
    "onnxruntime": {},
    "onnx_reference": {},
    "flax": {"ds": (768,), "eps_values": (1e-12,)},
}


def test_extra_is_cpu_only():
    import torch

    assert torch.__version__.endswith("+cpu")
    assert not [d.metadata["Name"] for d in metadata.distributions() if d.metadata["Name"].lower().startswith("nvidia")]


@pytest.mark.parametrize("fw", list(GRIDS))
def test_remeasure_matches_stored(fw):
    tool = _tool()
    runner = tool.RUNNERS[fw]()
    stored = FW.load(fw)
    results, unsupported = tool.measure_results(runner, **GRIDS[fw])
    assert {(u["op"], u["dtype"]) for u in unsupported} == {(u["op"], u["dtype"]) for u in stored["unsupported"]}
    key = lambda r: (r["op"], r["dtype"], r["family"], r["d"], r["eps"])
    old = {key(r): r for r in stored["results"]}
    assert results and all(key(r) in old for r in results)
    model, flags = tool.cpu_info()
    same = flags == stored["cpu_flags"] and runner.versions() == {k: stored["versions"][k] for k in runner.versions()}
    for r in results:
        o = old[key(r)]
        if same:
            assert r["sha256"] == o["sha256"], key(r)
        else:
            assert abs(r["correct"] - o["correct"]) <= SHARE_TOL * r["n"], key(r)
            assert (r["nan"], r["inf"]) == (o["nan"], o["inf"]), key(r)


def test_remeasure_eps_handling_and_probes():
    tool = _tool()
    runner = tool.RUNNERS["torch"]()
    stored = FW.load("torch")
    eps = tool.measure_eps_handling(runner)
    assert {k: v["best"] for k, v in eps.items()} == {k: v["best"] for k, v in stored["eps_handling"].items()}
    probes = tool.measure_probes(runner)
    assert probes["layer_norm | float16 | constant 60000 | 1e-12"]["output"] == [-2048.0] * 8
    assert probes.keys() == stored["probes"].keys()
