"""Run PyTorch's CPU backward pass of layer_norm and rms_norm on the cases of
lneps.book.frameworks.torch_backward and store what it computes, with what
torch.testing.assert_close says of it, in src/lneps/book/data/frameworks/torch_backward.{json,npz}.

    python tools/measure_torch_backward.py              # measure and write
    python tools/measure_torch_backward.py --out DIR    # write elsewhere
    python tools/measure_torch_backward.py --profiles   # and record what moves under the other
                                                        # ATEN_CPU_CAPABILITY levels (make torch-backward)

One thread (torch.set_num_threads(1)), so that the reductions' order is the single-threaded one;
the instruction set is what torch picks (ATEN_CPU_CAPABILITY, if set, caps it) and is recorded.
torch.testing's expected value is torch's own float64 gradient on the same inputs, cast to the
case's format: the usual way a kernel engineer writes that test. Needs the frameworks extra.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import ml_dtypes
import numpy as np
import torch

from lneps.book.frameworks import torch_backward as TB

from framework_runs import cpu_info, lneps_reference_info

_TORCH = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def _tensor(a: np.ndarray, dtype: str) -> torch.Tensor:
    """The same numbers as a torch tensor (16-bit formats through their bits: numpy has no bfloat16)."""
    if dtype == "float32":
        return torch.from_numpy(a.copy())
    return torch.from_numpy(TB.encode(a).view(np.int16).copy()).view(_TORCH[dtype])


def _from(t: torch.Tensor, dtype: str) -> np.ndarray:
    t = t.detach().contiguous()
    if t.dtype == torch.float32:
        return t.numpy().copy()
    return TB.decode(t.view(torch.int16).numpy().view(np.uint16), dtype)


def gradients(case: TB.Case, a: dict, *, float64: bool = False) -> dict[str, torch.Tensor]:
    """torch's gradients of the case (in its format, or in float64 from the same values)."""
    dt = case.dtype
    wide = (lambda t: t.to(torch.float64)) if float64 else (lambda t: t)  # noqa: E731
    leaf = lambda v: None if v is None else wide(_tensor(v, dt)).requires_grad_(True)  # noqa: E731
    x, g, b = leaf(a["x"]), leaf(a["gamma"]), leaf(a["beta"])
    dy = wide(_tensor(a["dy"], dt))
    if case.op == "layer_norm":
        y = torch.nn.functional.layer_norm(x, (case.d,), g, b, case.eps)
    else:
        y = torch.nn.functional.rms_norm(x, (case.d,), g, case.eps)
    y.backward(dy)
    out = {"dx": x.grad}
    if g is not None:
        out["dgamma"], out["dbeta"] = g.grad, b.grad
    return out


def torch_testing_verdict(actual: torch.Tensor, expected: torch.Tensor) -> dict:
    """torch.testing.assert_close(actual, expected) with its defaults: passed, its message, and
    the default rtol and atol it used for this dtype."""
    # torch documents the defaults as a table; the function that holds them is private.
    from torch.testing._comparison import default_tolerances

    rtol, atol = default_tolerances(actual, expected)
    verdict = {"passed": True, "message": "", "rtol": rtol, "atol": atol}
    try:
        torch.testing.assert_close(actual, expected)
    except AssertionError as failure:
        verdict.update(passed=False, message=str(failure))
    return verdict


def running_sums(case: TB.Case, a: dict, got: dict) -> dict[str, float]:
    """The share of dgamma's and dbeta's columns equal to a sum over the rows accumulated in the
    input format (each row's float32 term added, then rounded), with the mean and rstd torch's
    forward saved (torch.ops.aten.native_layer_norm: in the input format)."""
    dt = case.dtype
    x, dy = _tensor(a["x"], dt), _tensor(a["dy"], dt)
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, (case.d,), _tensor(a["gamma"], dt),
                                                     _tensor(a["beta"], dt), case.eps)
    xhat = (x.float() - mean.float()) * rstd.float()
    terms = {"dgamma": dy.float() * xhat, "dbeta": dy.float()}
    out = {"saved_statistics_dtype": str(mean.dtype).replace("torch.", "")}
    for name, term in terms.items():
        acc = torch.zeros(case.d, dtype=x.dtype)
        for row in term:
            acc = (acc.float() + row).to(x.dtype)
        out[name] = float((acc == got[name]).double().mean())
    return out


def measure() -> tuple[dict, dict]:
    torch.set_num_threads(1)
    meta, arrays = {}, {}
    for case in TB.CASES:
        a = TB.inputs(case)
        got = gradients(case, a)
        ref = gradients(case, a, float64=True)
        rec = {f: getattr(case, f) for f in TB.Case.__dataclass_fields__}
        rec["torch_testing"] = {k: torch_testing_verdict(got[k], ref[k].to(got[k].dtype)) for k in got}
        if case.op == "layer_norm":
            rec["running_sums"] = running_sums(case, a, got)
        meta[case.key] = rec
        for name, v in a.items():
            if v is not None:
                arrays[f"{case.key}/{name}"] = TB.encode(v)
        for name, t in got.items():
            arrays[f"{case.key}/{name}"] = TB.encode(_from(t, case.dtype))
    model, flags = cpu_info()
    provenance = {
        "torch": torch.__version__,
        "torch_git": torch.version.git_version,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "ATEN_CPU_CAPABILITY": os.environ.get("ATEN_CPU_CAPABILITY", ""),
        "threads": torch.get_num_threads(),
        "numpy": np.__version__,
        "ml_dtypes": ml_dtypes.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu": model,
        "cpu_flags": flags,
        "lneps_commit": lneps_reference_info()["lneps_commit"],
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "torch_testing_expected": "torch's float64 gradient on the same inputs, cast to the case's format",
    }
    return {"provenance": provenance, "cases": meta}, arrays


def differing(a: dict, b: dict) -> list[str]:
    """The "case/gradient" names whose stored bits differ between two measurements."""
    out = []
    for key, c in a["cases"].items():
        for name in ("dx", "dgamma", "dbeta"):
            if c[name] is not None and not np.array_equal(TB.encode(c[name]), TB.encode(b["cases"][key][name])):
                out.append(f"{key}/{name}")
    return out


def profiles(stored_dir: Path, native: str) -> dict[str, list[str]]:
    """Re-measure under every lower ATEN_CPU_CAPABILITY level this CPU has, each in a process of
    its own, and list per level the gradients whose bits differ from the measurement in
    ``stored_dir`` (the native level lists none)."""
    order = ["avx512", "avx2", "default"]  # x86's levels, highest first; elsewhere only "default"
    levels = order[order.index(native.lower()) + 1:] if native.lower() in order else []
    out = {native: []}
    base = TB.load(stored_dir)
    for level in levels:
        with tempfile.TemporaryDirectory() as tmp:
            env = {**os.environ, "ATEN_CPU_CAPABILITY": level}
            subprocess.run([sys.executable, __file__, "--out", tmp], env=env, check=True,
                           stdout=subprocess.DEVNULL)
            other = TB.load(tmp)
            out[other["provenance"]["cpu_capability"]] = differing(base, other)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=TB.DATA_DIR)
    p.add_argument("--profiles", action="store_true", help="record what moves under other ATEN_CPU_CAPABILITY levels")
    args = p.parse_args(argv)
    meta, arrays = measure()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{TB.FILE}.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    np.savez_compressed(args.out / f"{TB.FILE}.npz", **arrays)
    stored = TB.load(args.out)
    if args.profiles:
        meta["provenance"]["profiles"] = profiles(args.out, meta["provenance"]["cpu_capability"])
        (args.out / f"{TB.FILE}.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        print("bits that move per ATEN_CPU_CAPABILITY level:",
              {k: len(v) for k, v in meta["provenance"]["profiles"].items()})
    failed = sum(not v["passed"] for c in stored["cases"].values() for v in c["torch_testing"].values())
    print(f"{len(stored['cases'])} cases written to {args.out}; torch.testing failed {failed} gradients")
    return 0


if __name__ == "__main__":
    sys.exit(main())
