"""make portable: the notebooks' stored outputs and the tests of what computes them, under
several arithmetic profiles of this one machine.

Each profile is a fresh process whose environment forces numpy's SIMD level
(NPY_DISABLE_CPU_FEATURES), OpenBLAS's kernels (OPENBLAS_CORETYPE) and its thread count. Each
runs nbval over book/ and the tests of :data:`SELECTION` (not those of the rendered book: its
build, pages and PDF), with a cache of the trained network's forward passes of its own, so
that the network is computed afresh in that arithmetic. The run passes only if every profile
reproduces the stored outputs.

What it proves: the stored outputs do not depend on this CPU's SIMD paths (AVX-512, AVX2 or
the x86-64-v2 baseline, for numpy's loops and OpenBLAS's kernels) nor on BLAS's thread count.
What it does not: another libm, another compiler's contraction of a*b+c into one FMA (arm64
builds; `make portable-arm64` runs nbval there under emulation), or Apple's Accelerate.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable

# name -> (environment, what numpy and OpenBLAS must then report)
PROFILES = {
    "native": ({}, None),
    "avx2": ({"NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",
              "OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_NUM_THREADS": "1"},
             {"numpy_disabled": ["X86_V4"], "openblas": "haswell", "threads": 1}),
    "x86-64-v2": ({"NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4 AVX512_ICL AVX512_SPR",
                   "OPENBLAS_CORETYPE": "Prescott"},
                  {"numpy_disabled": ["X86_V3", "X86_V4"], "openblas": None, "threads": None}),
}
# A profile that would mostly repeat the native one is skipped: "avx2" on a machine without
# AVX-512, where numpy's and OpenBLAS's native kernels are the AVX2 ones already. (What it still
# forces there, one BLAS thread, an AVX-512 machine's CI run covers.)
SAME_AS_NATIVE = {"avx2": "X86_V4"}  # profile -> the native feature without which it repeats native

# What runs under each profile: the stored outputs (nbval over book/), the tests that tie the
# chapters' prose to computed numbers, and the tests of what computes them: the kernel (its
# float64 tier must hold whatever order numpy's SIMD loops sum in) and the backward pass, the
# Jacobian and softmax (LAPACK, exp), the book's exactly rounded operations and the network built
# on them. The other unit tests (the testing tool and its zoo,
# the training lab's stored data, the frameworks' re-measurement, the oracle's rational
# arithmetic, packaging) run natively in `make test`: what they compute with is checked here.
SELECTION = ("book", "tests/chapters", "tests/book/test_claims.py", "tests/kernel/test_kernel.py",
             "tests/kernel/test_kernel_extremes.py", "tests/reference/test_norms.py", "tests/kernel/test_gradients.py",
             "tests/reference/test_backward.py", "tests/reference/test_jacobian.py", "tests/reference/test_softmax.py",
             "tests/book/test_exact_ops.py", "tests/book/test_activations.py", "tests/book/test_survey.py")


def selection() -> list[str]:
    """The paths of :data:`SELECTION`, globs expanded (sorted), relative to the repository."""
    out = []
    for pattern in SELECTION:
        matches = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob(pattern))
        out += matches if any(c in pattern for c in "*?[") else [pattern]
    return out


PROBE = """
import json, numpy, threadpoolctl
from numpy._core._multiarray_umath import __cpu_features__ as f
blas = [i for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"][0]
print(json.dumps({"enabled": sorted(k for k, v in f.items() if v), "openblas": blas["architecture"],
                  "threads": blas["num_threads"]}))
"""


def probe(env: dict) -> dict:
    out = subprocess.run([PYTHON, "-c", PROBE], env=env, cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def check_profile(name: str, seen: dict, want: dict | None) -> None:
    """Refuse to call a run a profile it is not: the settings must have taken effect."""
    if want is None:
        return
    wrong = [k for k in want["numpy_disabled"] if k in seen["enabled"]]
    if wrong:
        raise SystemExit(f"portable: profile {name}: numpy still uses {wrong}")
    if want["openblas"] and seen["openblas"].lower() != want["openblas"]:
        raise SystemExit(f"portable: profile {name}: OpenBLAS runs {seen['openblas']}, not {want['openblas']}")
    if want["threads"] and seen["threads"] != want["threads"]:
        raise SystemExit(f"portable: profile {name}: OpenBLAS has {seen['threads']} threads")


def main(argv: list[str]) -> int:
    """Run the profiles named (all by default), as many at once as there are cores, each with its
    own cache (they share no file they write), and the cores left over as its pytest workers."""
    names = argv or list(PROFILES)
    native = probe(dict(os.environ))["enabled"]
    skipped = [n for n in names if n in SAME_AS_NATIVE and SAME_AS_NATIVE[n] not in native]
    for name in skipped:
        print(f"portable: {name}: skipped, this CPU has no {SAME_AS_NATIVE[name]}: its native "
              f"kernels are those of {name} already", flush=True)
    started = []
    for name in (n for n in names if n not in skipped):
        extra, want = PROFILES[name]
        cache = ROOT / "_build" / "portable" / name
        shutil.rmtree(cache, ignore_errors=True)
        cache.mkdir(parents=True)
        env = {**os.environ, **extra, "LNEPS_CACHE_DIR": str(cache), "LNEPS_PORTABLE_PROFILE": name}
        seen = probe(env)
        check_profile(name, seen, want)
        # numpy's dispatch levels: X86_V4 (AVX-512), X86_V3 (AVX2), else its x86-64-v2 baseline
        simd = [k for k in ("X86_V4", "X86_V3", "ASIMD") if k in seen["enabled"]][:1]
        label = f"{name} (numpy {simd[0] if simd else 'X86_V2'}, OpenBLAS {seen['openblas']}, " \
                f"{seen['threads']} thread{'s' if seen['threads'] != 1 else ''})"
        started.append((label, env))
    cores = os.cpu_count() or 1
    jobs = max(1, min(len(started), cores))
    workers = cores // jobs  # pytest-xdist workers per profile: the cores the profiles leave
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        results = list(pool.map(lambda job: _run(*job, workers), started))
    print("\nportable: profile | result | time")
    for label, code, summary, took, _ in results:
        print(f"  {label} | {'ok' if code == 0 else 'FAILED'}: {summary} | {took:.0f} s")
    for label, code, _, _, output in results:
        if code != 0:
            print(f"\nportable: {label} failed:\n{output}")
    return 0 if all(code == 0 for _, code, _, _, _ in results) else 1


def _run(label: str, env: dict, workers: int):
    print(f"portable: {label}: started", flush=True)
    start = time.monotonic()
    parallel = ["-n", str(workers)] if workers > 1 else []
    run = subprocess.run([PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", *parallel, *selection()],
                         env=env, cwd=ROOT, capture_output=True, text=True)
    took = time.monotonic() - start
    summary = (run.stdout.strip().splitlines() or ["(no output)"])[-1]
    print(f"portable: {label}: {summary}  [{took:.0f} s]", flush=True)
    return label, run.returncode, summary, took, run.stdout[-20000:] + "\n" + run.stderr[-5000:]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
