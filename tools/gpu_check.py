"""The cases of the chapter "GPU kernels without a GPU", run natively on a CUDA GPU: torch's CUDA
layer_norm and rms_norm, Liger's and this project's Triton kernels compiled for the device, and
Pallas's layer norm compiled by JAX, forward and backward, graded by lneps.testing exactly as
tools/grade_gpu_kernels.py grades the interpreters' runs on the CPU.

    python tools/gpu_check.py [--prefix N] [--out PATH]

On a fresh machine with one NVIDIA GPU and PyPI (a few minutes of installs, then the run):
    pip install -e . torch==2.13.0 triton==3.9.0 liger-kernel==0.8.5 "jax[cuda12]==0.10.2"
(untested as yet: no GPU has been lent to this project; jax's CUDA extra may be named otherwise
for that release). The run itself is the grid of tools/grade_gpu_kernels.py, compiled instead of
interpreted; --prefix N runs its first N cases.
It stores src/lneps/book/data/gpu_kernels/gpu_check.json (the device, the driver, the package
versions and the records) and prints, per kernel and format, the interpreter's worst scaled error
and verdict beside the GPU's. Without a CUDA device it refuses: exit status 2 and a message that
says what is missing. It must not run under TRITON_INTERPRET=1 (that is the CPU's path).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

from lneps.book.gpu_kernels import gpu_results

OUT = gpu_results.DATA_FILE.with_name("gpu_check.json")
PACKAGES = ("torch", "triton", "liger_kernel", "jax", "jaxlib", "numpy")


def cuda_problem():
    """Why this machine cannot run the check natively, or None when it can."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return ("TRITON_INTERPRET=1 is set: that runs Triton in its CPU interpreter. Unset it; "
                "tools/grade_gpu_kernels.py is the CPU's path")
    try:
        import torch
    except ImportError:
        return ("torch is not installed (pip install torch==2.13.0 with CUDA, see this script's "
                "docstring)")
    if not torch.cuda.is_available():
        return (f"no CUDA device: torch {torch.__version__} sees none "
                f"(torch.cuda.is_available() is False). This script grades the kernels on a GPU; "
                f"on a CPU, run `make gpu-kernels` (their interpreters)")
    return None


def _driver():
    try:
        query = ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]
        return subprocess.run(query, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def side_by_side(cpu_records, gpu_records):
    """Rows ``(kernel, dtype, direction, cpu worst, cpu passed, gpu worst, gpu passed)`` for every
    (kernel, format, direction) both sets of records hold."""
    rows = []
    for direction in ("forward", "backward"):
        c = gpu_results.worst_by_kernel(cpu_records, direction)
        g = gpu_results.worst_by_kernel(gpu_records, direction)
        for key in c:
            if key in g:
                rows.append((*key, direction, c[key][0], c[key][1], g[key][0], g[key][1]))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prefix", type=int, default=None, help="run only the first N cases")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    problem = cuda_problem()
    if problem:
        print(f"gpu_check: refused: {problem}", file=sys.stderr)
        return 2
    import torch

    from lneps.book.gpu_kernels import gpu_runs

    cases = gpu_results.grid()[: args.prefix]
    start, records = time.perf_counter(), []
    for case in cases:
        records += gpu_runs.grade(**case, device="cuda")
    out = {"schema": gpu_results.SCHEMA,
           "device": {"name": torch.cuda.get_device_name(0), "nvidia_smi": _driver(),
                      "cuda": torch.version.cuda,
                      "capability": list(torch.cuda.get_device_capability(0))},
           "versions": {p: metadata.version(p.replace("_", "-")) for p in PACKAGES},
           "seconds": round(time.perf_counter() - start), "records": records}
    args.out.write_text(json.dumps(gpu_results.encode(out), indent=1) + "\n")
    stored = gpu_results.load()["records"]
    print(f"{'kernel':28s} {'format':9s} {'pass':8s} {'interpreter':>12s} {'GPU':>12s}")
    for k, dt, direction, cw, cp, gw, gp in side_by_side(stored, records):
        print(f"{k:28s} {dt:9s} {direction:8s} {cw:9.3g} {'ok' if cp else 'FAIL':4s}"
              f" {gw:9.3g} {'ok' if gp else 'FAIL':4s}")
    print(f"{len(records)} records in {out['seconds']} s -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
