"""Re-make the stored grades of the GPU kernels run in their interpreters on the CPU:
src/lneps/book/data/gpu_kernels/grades.json (the chapter "GPU kernels without a GPU" reads it).

    TRITON_INTERPRET=1 python tools/grade_gpu_kernels.py [--prefix N] [--out PATH]

Needs the gpu extra (requirements-gpu.txt); `make gpu-kernels` installs it and runs this. The
grid (lneps.book.gpu_kernels.gpu_results.GRID) is graded case by case on one core, then the
findings' smallest inputs are searched for; the file carries the provenance (package versions,
interpreter, CPU, the environment settings that fix the arithmetic). --prefix N grades only the
first N cases of the grid and skips the searches (the test that re-runs a prefix uses it).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported, by anything

from lneps.book.gpu_kernels import gpu_results  # noqa: E402

PACKAGES = ("torch", "triton", "liger_kernel", "jax", "jaxlib", "numpy", "ml_dtypes")
ENV = ("TRITON_INTERPRET", "PYTHONHASHSEED", "OMP_NUM_THREADS", "JAX_PLATFORMS",
       "NPY_DISABLE_CPU_FEATURES", "ATEN_CPU_CAPABILITY")


def _cpu():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True, cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def provenance():
    """What the grades depend on besides the kernels' sources."""
    import torch

    return {
        "versions": {p: metadata.version(p.replace("_", "-")) for p in PACKAGES},
        "lneps_commit": _commit(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": _cpu(),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_threads": torch.get_num_threads(),
        "env": {k: os.environ.get(k) for k in ENV},
        "interpreter": "Triton TRITON_INTERPRET=1 (NumPy), Pallas interpret=True (XLA:CPU)",
        "shims": ["float_scalars_as_float32", "libdevice_rsqrt"],
        "device": "CPU only: no GPU has run these cases",
        "date": datetime.date.today().isoformat(),
    }


def saved_statistics():
    """The format each kernel saves its mean and 1/std in for the backward pass, for float16
    input: read from the kernels' own outputs, not from their sources."""
    import jax.numpy as jnp
    import torch
    from jax.experimental.pallas.ops.gpu import layer_norm as pl_ln

    x = torch.ones(2, 8, dtype=torch.float16)
    w = torch.ones(8, dtype=torch.float16)
    _, mean, rstd = torch.native_layer_norm(x, (8,), w, w, 1e-5)
    _, res = pl_ln.layer_norm_forward(jnp.ones((1, 2, 8), jnp.float16), jnp.ones(8, jnp.float16),
                                      jnp.ones(8, jnp.float16), interpret=True)
    return {"torch_layer_norm": [str(t.dtype).removeprefix("torch.") for t in (mean, rstd)],
            "pallas_layer_norm": [str(res[3].dtype), str(res[4].dtype)]}


def robustness(gpu_runs):
    """Re-grade the Triton kernels under each effect the interpreter does not model."""
    start, records = time.perf_counter(), []
    for case in gpu_results.robustness_grid():
        records += gpu_runs.regrade(**case)
    prov = provenance() | {"seconds": round(time.perf_counter() - start)}
    out = {"schema": gpu_results.SCHEMA, "provenance": prov, "records": records}
    gpu_results.ROBUSTNESS_FILE.write_text(json.dumps(gpu_results.encode(out), indent=1) + "\n")
    print(f"robustness: {len(records)} records in {prov['seconds']} s", file=sys.stderr)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prefix", type=int, default=None, help="grade only the first N cases")
    ap.add_argument("--out", type=Path, default=gpu_results.DATA_FILE)
    ap.add_argument("--robustness-only", action="store_true",
                    help="only the re-run under the unmodelled effects (robustness.json)")
    args = ap.parse_args(argv)
    from lneps.book.gpu_kernels import gpu_findings, gpu_runs

    if args.prefix is None:
        robustness(gpu_runs)
    if args.robustness_only:
        return

    cases = gpu_results.grid()
    if args.prefix is not None:
        cases = cases[: args.prefix]
    records, start = [], time.perf_counter()
    for i, case in enumerate(cases):
        records += gpu_runs.grade(**case)
        if i % 25 == 0:
            print(f"{i + 1}/{len(cases)} cases, {time.perf_counter() - start:.0f} s",
                  file=sys.stderr)
    findings = {}
    if args.prefix is None:
        findings = {
            "llama": gpu_findings.llama_smallest(),
            "none": [gpu_findings.none_threshold(d) for d in gpu_results.NONE_D],
            "partials": gpu_findings.partials_smallest(),
            "saved_statistics": saved_statistics(),
        }
    prov = provenance() | {"seconds": round(time.perf_counter() - start)}
    out = {"schema": gpu_results.SCHEMA, "provenance": prov,
           "kernels": {k: v[2] for k, v in gpu_runs.KERNELS.items()},
           "records": records, "findings": findings}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(gpu_results.encode(out), indent=1) + "\n")
    print(f"{len(records)} records in {time.perf_counter() - start:.0f} s -> {args.out}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
