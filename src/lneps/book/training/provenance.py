"""What the stored runs were computed with: versions, CPU, threads, arithmetic settings, date,
command. :func:`provenance` is called inside the process that trains (torch is imported there);
:func:`arithmetic_key` is the part that decides the bits of a run."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import sys

__all__ = ["SIMD_FLAGS", "ENV_VARS", "cpu_info", "provenance", "arithmetic_key"]

SIMD_FLAGS = ("sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
              "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_bf16", "amx_tile", "amx_fp16")
#: The variables that change a run's arithmetic; stored with their value or "unset".
ENV_VARS = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA",
            "OMP_NUM_THREADS", "MKL_NUM_THREADS", "MKL_ENABLE_INSTRUCTIONS")


def cpu_info() -> dict:
    """The CPU model and its SIMD flags (of :data:`SIMD_FLAGS`), from /proc/cpuinfo."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name") and model in ("", platform.machine(), platform.processor()):
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return {"model": model, "machine": platform.machine(), "logical_cpus": os.cpu_count(),
            "simd_flags": [f for f in SIMD_FLAGS if f in flags]}


def provenance(command: list[str] | None = None) -> dict:
    """Everything the runs' bits depend on, read in the training process itself."""
    import numpy
    import torch

    return {
        "torch": torch.__version__, "torch_git": torch.version.git_version, "numpy": numpy.__version__,
        "python": platform.python_version(), "platform": platform.platform(),
        "cpu": cpu_info(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "mkl": torch.backends.mkl.is_available(), "mkldnn": torch.backends.mkldnn.is_available(),
        "mkldnn_enabled": torch.backends.mkldnn.enabled,
        "env": {k: os.environ.get(k, "unset") for k in ENV_VARS},
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join(command if command is not None else sys.argv),
    }


def arithmetic_key(p: dict) -> tuple:
    """The fields of :func:`provenance` that decide a run's bits (not date or command)."""
    return (p["torch"], p["cpu"]["model"], tuple(p["cpu"]["simd_flags"]), p["cpu_capability"], p["threads"],
            tuple(sorted((k, v) for k, v in p["env"].items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"))))
