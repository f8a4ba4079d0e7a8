"""Run PyTorch, Flax, ONNX Runtime and ONNX's reference evaluator on the book's inputs and
write what they compute to src/lneps/book/data/frameworks/<framework>.json (`make frameworks`), the
package data lneps.book.frameworks.load reads.

Every output is compared element by element with lneps's default path, the format's value
nearest to the exact result (lneps.book.frameworks.error_summary). Before overwriting a stored file,
the fresh measurement is compared with it, so a reader on another CPU sees what moved.

    python tools/measure_frameworks.py                 # all four, full grid
    python tools/measure_frameworks.py --only torch    # one framework
    python tools/measure_frameworks.py --out /tmp/fw   # write elsewhere, compare with the stored
    python tools/measure_frameworks.py --spread        # the spread across arithmetic profiles

--spread (`make frameworks-spread`) runs the grid once per arithmetic profile (an instruction set
capped by ATEN_CPU_CAPABILITY or XLA_FLAGS=--xla_cpu_max_isa=..., numpy's SIMD level, thread
counts), each in a process of its own, and writes spread.json next to the stored measurements:
per result row, the outputs each profile computed and by how much each count moves (the stored
measurement counts as a profile). tests/book/test_frameworks_measured.py derives its tolerance from it.

Needs the extra (requirements-frameworks.txt). The command and the measurement live here, the
runners and the grid in tools/framework_runs.py, the spread in tools/framework_spread.py; all
three are importable (tests re-measure a subset with them), and nothing here is imported by
`import lneps`.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import math
import os
import platform
import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np

import lneps
from lneps.book import frameworks as FW

from framework_runs import (REFERENCE_OF, RUNNERS, STORED, cpu_info, lneps_reference_info, np_dtype, reference,
                            run_grid, unsupported_list)
from framework_spread import SPREAD_FILE, measure_spread, spread_report, spread_worker


def measure_results(runner, *, dtypes=FW.DTYPES, ds=FW.DS, eps_values=FW.EPS_VALUES, ops=None):
    """Result rows (one per op, dtype, family, d, eps) and the (op, dtype) pairs not supported."""
    results, unsupported, refs, block = [], {}, {}, None
    for op, dtype, d, eps, fams, bounds, x, y in run_grid(runner, unsupported, dtypes=dtypes, ds=ds,
                                                          eps_values=eps_values, ops=ops):
        if block != (dtype, d, eps):  # one reference per kind and block, shared by its ops
            refs, block = {}, (dtype, d, eps)
        kind = REFERENCE_OF[op]
        if kind not in refs:
            refs[kind] = reference(op, x, eps)
        for k, family in enumerate(fams):
            sl = slice(bounds[k], bounds[k + 1])
            row = {"op": op, "dtype": dtype, "family": family, "d": d, "eps": eps}
            row.update(FW.error_summary(y[sl], refs[kind][sl], dtype, x=x[sl], op=kind, eps=eps))
            row["sha256"] = FW.output_digest(y[sl])
            results.append(row)
    return results, unsupported_list(unsupported)


# Hand-made rows (lneps.families's names, FW.HAND_ROWS) and the eps each is probed with.
PROBES = (("zeros", 1e-12), ("constant_60000", 1e-12), ("constant_60000", 1e-5),
          ("65504_and_-65504", 1e-5), ("65504_and_65472", 1e-5))


def measure_probes(runner, dtypes=FW.DTYPES) -> dict:
    """Hand-made rows of d = 8, output and reference in full, for the chapter's tables."""
    probes = {}
    for op in runner.ops:
        for dtype in dtypes:
            for name, eps in PROBES:
                x = FW.hand_row(name, 8)[None, :].astype(np_dtype(dtype))
                try:
                    y = runner.run(op, x, eps)
                except Exception:
                    continue
                probes[f"{op} | {dtype} | {name} | {eps:g}"] = {
                    "op": op, "dtype": dtype, "row": name, "eps": eps,
                    "input": x[0].astype(np.float64).tolist(),
                    "output": y[0].astype(np.float64).tolist(),
                    "reference": reference(op, x, eps)[0].astype(np.float64).tolist(),
                }
    return probes


def eps_rows(eps_scale: float, dtype: str, n: int = 256, d: int = 8):
    """Rows (a, -a, a, -a, ...) whose mean is 0 and mean square a**2, for a**2 from 1e-3 to 1e2
    times ``eps_scale``: there the output a/sqrt(a**2 + eps) depends on the eps used."""
    a = np.sqrt(eps_scale * np.logspace(-3, 2, n))
    x = np.resize(np.array([1.0, -1.0]), d)[None, :] * a[:, None]
    x = x.astype(np_dtype(dtype))
    return x[np.all(x != 0, axis=1)]


def eps_hypotheses(runner, op, dtype, eps, candidates: dict) -> dict:
    """Which epsilon the framework's output matches: for each candidate value, the number of
    rows of :func:`eps_rows` whose output equals lneps's correctly rounded output with it."""
    scale = max(float(eps) if eps is not None else 0.0, 1e-12)
    if eps is None:
        scale = max(v for v in candidates.values() if v > 0)
    x = eps_rows(scale, dtype)
    try:
        y = runner.run(op, x, eps)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
    out = {"rows": int(len(x)), "matches": {}}
    for label, value in candidates.items():
        ref = reference(op, x, value)
        out["matches"][label] = {"eps": value, "rows_equal": int(np.all(y == ref, axis=1).sum())}
    out["best"] = max(out["matches"], key=lambda k: out["matches"][k]["rows_equal"])
    return out


def measure_eps_handling(runner) -> dict:
    """Is eps kept in float32 or rounded to the input's 16-bit format, and does 1e-12 survive?"""
    res = {}
    for op in runner.ops:
        if op == "layer_norm_two_pass":
            continue
        for dtype in ("float16", "bfloat16"):
            dt = np_dtype(dtype)
            for eps in (1e-5, 1e-12):
                cands = {"kept (float32)": float(np.float32(eps)), f"rounded to {dtype}": float(dt(eps))}
                if cands["kept (float32)"] == cands[f"rounded to {dtype}"]:
                    cands = {"kept (float32)": cands["kept (float32)"]}
                res[f"{op} | {dtype} | {eps:g}"] = eps_hypotheses(runner, op, dtype, eps, cands)
                zero_row = np.zeros((1, 8), dt)
                try:
                    z = runner.run(op, zero_row, eps)[0].astype(np.float64)
                    res[f"{op} | {dtype} | {eps:g}"]["zeros_row"] = z.tolist()
                except Exception:
                    pass
    if runner.name == "torch":
        res.update(measure_torch_rmsnorm_default(runner))
    return res


def measure_torch_rmsnorm_default(runner) -> dict:
    """torch.nn.RMSNorm(eps=None): the eps it really adds, per input dtype."""
    torch = runner.torch
    out = {}
    cands = {name: float(ml_dtypes.finfo(np_dtype(name) if name != "float64" else np.float64).eps)
             for name in ("float16", "bfloat16", "float32", "float64")}
    labels = {k: f"finfo({k}).eps" for k in cands}
    for dtype in ("float16", "bfloat16", "float32", "float64"):
        dt = np_dtype(dtype)
        mod = torch.nn.RMSNorm(8, eps=None, elementwise_affine=False)

        class _Mod:
            name = "torch.nn.RMSNorm"

            @staticmethod
            def run(op, x, eps):
                return runner._n(mod(runner._t(x)))

        hyp = {labels[k]: v for k, v in cands.items()}
        scale = cands["float32"] if dtype != "float64" else cands["float64"]
        x = eps_rows(scale, dtype)
        y = _Mod.run("rms_norm", x, None)
        entry = {"rows": int(len(x)), "matches": {}}
        for label, value in hyp.items():
            ref = lneps.rms_norm(x, eps=value)
            entry["matches"][label] = {"eps": value, "rows_equal": int(np.all(y == ref, axis=1).sum())}
        entry["best"] = max(entry["matches"], key=lambda k: entry["matches"][k]["rows_equal"])
        entry["module_eps_attribute"] = mod.eps
        # lneps's own eps=None rule, an independent statement of torch's: same rows matched?
        entry["lneps_eps_none"] = {"eps": lneps.rms_norm_default_eps(dt),
                                   "rows_equal": int(np.all(y == lneps.rms_norm(x, eps=None), axis=1).sum())}
        out[f"torch.nn.RMSNorm(eps=None) | {dtype}"] = entry
    return out


def implied_variance(runner, op, *, d=100, rows=64, dtype="float32", family="mean_6e4") -> dict:
    """The variance a layer used, read back from its float32 output: for each row,
    s = (x_max - x_min) / (y_max - y_min) is its sqrt(var + eps), so var = s**2 - eps, compared
    with the exact variance of the stored row. Output rounding alone leaves a relative error
    near 1e-7; a one-pass E[x^2] - E[x]^2 in float32 at mean 6e4 is off by order 1."""
    eps = 1e-5
    x = FW.measurement_rows(dtype, d)[family][:rows]
    y = runner.run(op, x, eps).astype(np.float64)
    xs = x.astype(np.float64)
    errs = []
    for xr, yr in zip(xs, y):
        j, k = int(np.argmax(xr)), int(np.argmin(xr))
        if yr[j] == yr[k] or not np.isfinite(yr[j] - yr[k]):
            continue
        s = (xr[j] - xr[k]) / (yr[j] - yr[k])
        exact = float(np.var(xr))
        errs.append(abs(s * s - float(np.float32(eps)) - exact) / exact)
    return {"op": op, "dtype": dtype, "family": family, "d": d, "rows": len(errs),
            "max_rel_error": float(max(errs)) if errs else math.nan,
            "median_rel_error": float(np.median(errs)) if errs else math.nan}


def measure_statistics(runner) -> dict:
    return {f"{op} | float32 | mean_6e4 | {d}": implied_variance(runner, op, d=d)
            for op in runner.ops if op != "rms_norm" for d in (100, 768)}


def measure(name: str, **grid) -> dict:
    runner = RUNNERS[name]()
    model, flags = cpu_info()
    t0 = time.perf_counter()
    results, unsupported = measure_results(runner, **grid)
    data = {
        "schema": FW.SCHEMA,
        "framework": name,
        "versions": runner.versions() | {"numpy": np.__version__, "ml_dtypes": ml_dtypes.__version__,
                                        "python": platform.python_version()},
        "platform": {"system": platform.system(), "machine": platform.machine(), "cpu": model,
                     "cores": os.cpu_count()},
        "cpu_flags": flags,
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "reference": lneps_reference_info(),
        "inputs": {"families": list(lneps.families.SURVEYED), "hand_rows": FW.HAND_ROWS,
                   "ds": list(grid.get("ds", FW.DS)), "eps": list(grid.get("eps_values", FW.EPS_VALUES)),
                   "dtypes": list(grid.get("dtypes", FW.DTYPES)), "elements_per_family_and_d": FW.ELEMENTS,
                   "seed": FW.SEED},
        "results": results,
        "unsupported": unsupported,
        "probes": measure_probes(runner),
        "eps_handling": measure_eps_handling(runner),
        "implied_variance": measure_statistics(runner),
    }
    data["seconds"] = round(time.perf_counter() - t0, 1)
    return data


def report(new: dict, old: dict | None) -> str:
    """What a reader sees after re-measuring: the comparison with the stored measurement."""
    fw = new["framework"]
    if old is None:
        return f"{fw}: no stored measurement to compare with"
    c = FW.compare(new, old, share_tol=0.0)
    lines = [f"{fw}: {c['identical']} of {len(new['results'])} result rows bit-identical to the stored"
             f" measurement ({old['date']}, {old['platform']['cpu']});"
             f" same CPU flags and versions: {c['same_machine']}"]
    if new["cpu_flags"] != old["cpu_flags"]:
        lines.append(f"  CPU flags differ: stored {old['cpu_flags']}, here {new['cpu_flags']}")
    for k in sorted(set(new["versions"]) | set(old["versions"])):
        if new["versions"].get(k) != old["versions"].get(k):
            lines.append(f"  {k}: stored {old['versions'].get(k)}, here {new['versions'].get(k)}")
    for e in c["differ"][:25]:
        op, dtype, family, d, eps = e["key"]
        a, b = e["new"], e["old"]
        lines.append(f"  differs: {op} {dtype} {family} d={d} eps={eps:g}: correct {b['correct']}->{a['correct']}"
                     f" of {a['n']}, worst ulp {b['worst_ulp']:.3g}->{a['worst_ulp']:.3g},"
                     f" nan {b['nan']}->{a['nan']}")
    if len(c["differ"]) > 25:
        lines.append(f"  ... and {len(c['differ']) - 25} more rows differ")
    if c["reference_moved"]:
        lines.append(f"  {len(c['reference_moved'])} rows with identical outputs changed their summary:"
                     f" the lneps reference moved (stored commit {old['reference'].get('lneps_commit', '?')[:7]},"
                     f" here {new['reference'].get('lneps_commit', '?')[:7]})")
    if c["missing"]:
        lines.append(f"  rows in only one of the two: {len(c['missing'])}")
    return "\n".join(lines)



def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=list(RUNNERS), action="append")
    ap.add_argument("--out", type=Path, default=STORED)
    ap.add_argument("--spread", action="store_true",
                    help=f"measure the spread across arithmetic profiles into <out>/{SPREAD_FILE}")
    ap.add_argument("--spread-worker", choices=list(RUNNERS), help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--cpus", type=int, default=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.spread_worker:
        spread_worker(args.spread_worker, args.worker_out, args.threads, args.cpus)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if args.spread:
        names = args.only or list(RUNNERS)
        data = measure_spread(names, args.out)
        print(spread_report(data, names))
        print(f"-> {args.out / SPREAD_FILE}; total {time.perf_counter() - t0:.1f} s")
        return 0
    for name in args.only or list(RUNNERS):
        stored = STORED / f"{name}.json"
        old = None
        if stored.is_file():
            try:
                old = FW.load(name, STORED)
            except ValueError as exc:  # a file from an older schema: measure anyway, say so
                print(f"{name}: the stored measurement does not fit the current schema ({exc})")
        data = measure(name)
        FW.dump(data, args.out / f"{name}.json")
        print(f"{name}: {len(data['results'])} rows in {data['seconds']} s -> {args.out / (name + '.json')}")
        print(report(data, old), flush=True)
    print(f"total {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

