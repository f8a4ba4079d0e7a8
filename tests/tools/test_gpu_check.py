"""tools/gpu_check.py on a computer without CUDA: it refuses, with exit status 2 and a message
that names what is missing; its side-by-side table pairs records by kernel and format."""

import subprocess
import sys

import pytest

from notebooks import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import gpu_check  # noqa: E402


def _has_cuda():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.mark.skipif(_has_cuda(), reason="a CUDA device is present: the script would run")
def test_refuses_without_cuda():
    env = {k: v for k, v in __import__("os").environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_check.py")],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 2, run.stderr
    assert "refused" in run.stderr
    assert "no CUDA device" in run.stderr or "torch is not installed" in run.stderr
    assert "Traceback" not in run.stderr


def test_refuses_under_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert "TRITON_INTERPRET=1" in gpu_check.cuda_problem()
    assert gpu_check.main([]) == 2


def test_side_by_side_pairs_kernel_and_format():
    rec = {"kernel": "k", "dtype": "float16", "direction": "forward", "output": "y"}
    cpu = [rec | {"max_scaled": 0.5, "passed": True}]
    gpu = [rec | {"max_scaled": 0.7, "passed": False},
           rec | {"kernel": "other", "max_scaled": 1.0, "passed": True}]
    assert gpu_check.side_by_side(cpu, gpu) == [("k", "float16", "forward", 0.5, True, 0.7, False)]
