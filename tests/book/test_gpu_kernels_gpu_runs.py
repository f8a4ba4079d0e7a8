"""lneps.book.gpu_kernels.gpu_runs and gpu_findings, re-run against the stored grades where the
gpu extra is installed: a prefix of the grid and one case of each kind of kernel re-graded, the
outputs bit-identical to the stored ones (the interpreters compute in NumPy and XLA:CPU in a
fixed order), the verdicts the same.
Skips without the extra."""

import doctest

import sys

import pytest

from gpu_extra import require_extra
from notebooks import ROOT

require_extra()

from lneps.book.gpu_kernels import gpu_results, gpu_runs  # noqa: E402

STORED = gpu_results.load()
FIELDS = ("kernel", "dtype", "family", "d", "rows", "direction", "output")
BY_KEY = {tuple(r[k] for k in FIELDS): r for r in STORED["records"]}
PREFIX = 3
# torch's CPU kernels are left out of the bitwise check: their SIMD path depends on the CPU
INTERPRETED = [c for c in gpu_results.grid() if not c["kernel"].startswith("torch")]
ONE_OF_EACH = {c["kernel"]: c for c in INTERPRETED if c["d"] == 64 and c["family"] == "mean_1000"}


@pytest.mark.parametrize("case", INTERPRETED[:PREFIX] + list(ONE_OF_EACH.values()),
                         ids=lambda c: "-".join(str(v) for v in c.values()))
def test_a_case_regrades_to_the_stored_bytes(case):
    for rec in gpu_runs.grade(**case):
        key = tuple(rec[k] for k in FIELDS)
        stored = BY_KEY[key]
        assert rec["sha256"] == stored["sha256"], key
        assert rec["passed"] == stored["passed"]
        assert rec["max_scaled"] == pytest.approx(stored["max_scaled"])


def test_the_tool_writes_a_prefix_with_provenance(tmp_path):
    sys.path.insert(0, str(ROOT / "tools"))
    import grade_gpu_kernels

    out = tmp_path / "grades.json"
    grade_gpu_kernels.main(["--prefix", "1", "--out", str(out)])
    data = gpu_results.load(out)
    assert len(data["records"]) == 1 and data["findings"] == {}
    assert data["provenance"]["versions"] == STORED["provenance"]["versions"]


def test_an_unknown_kernel_or_device_is_named():
    with pytest.raises(ValueError, match="unknown kernel 'liger'"):
        gpu_runs.run("liger", None, None, None, 1e-5)
    with pytest.raises(ValueError, match="device"):
        gpu_runs.run("two_pass", None, None, None, 1e-5, device="tpu")


def test_docstring_examples_run():
    assert doctest.testmod(gpu_runs).failed == 0
