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

Needs the extra (requirements-frameworks.txt). The runners are importable (tests re-measure a
subset with them); nothing here is imported by `import lneps`.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import json
import math
import os
import platform
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

import lneps
from lneps.book import frameworks as FW

ROOT = Path(__file__).resolve().parents[1]
# The stored measurements: this checkout's package data, the files to rewrite and compare with
# (not FW.DATA_DIR, which for a non-editable install lies inside site-packages).
STORED = ROOT / "src" / "lneps" / "book" / "data" / "frameworks"
BF16 = ml_dtypes.bfloat16
SIMD_FLAGS = ("sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
              "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_bf16", "amx_tile", "amx_fp16")

# Ops measured, per framework, and the lneps reference each is judged against.
REFERENCE_OF = {"layer_norm": "layer_norm", "layer_norm_two_pass": "layer_norm",
                "group_norm": "layer_norm", "rms_norm": "rms_norm"}


def np_dtype(name: str):
    return BF16 if name == "bfloat16" else np.dtype(name).type


def reference(op: str, x: np.ndarray, eps: float) -> np.ndarray:
    """lneps's default path for what ``op`` computes, rows (n, d) in, rows out; group_norm as
    the runners call it, on shape (n, C=1, d) with one group."""
    if op == "group_norm":
        return lneps.group_norm(x.reshape(len(x), 1, x.shape[-1]), 1, eps=eps).reshape(x.shape)
    if REFERENCE_OF[op] == "rms_norm":
        return lneps.rms_norm(x, eps=eps)
    return lneps.layer_norm(x, eps=eps)


# --- the runners: each takes rows (n, d) in a NumPy dtype and returns (n, d) in that dtype ---


class Torch:
    name = "torch"
    ops = ("layer_norm", "rms_norm", "group_norm")

    def __init__(self, threads: int = 1):
        import torch
        import torch.nn.functional as F

        # rows are independent; one thread is as deterministic and polite (--spread also runs 2)
        torch.set_num_threads(threads)
        self.torch, self.F = torch, F

    def versions(self):
        return {"torch": self.torch.__version__, "torch_git": self.torch.version.git_version,
                "cpu_capability": self.torch.backends.cpu.get_cpu_capability()}

    def _t(self, x):
        if x.dtype == BF16:
            return self.torch.from_numpy(x.view(np.int16).copy()).view(self.torch.bfloat16)
        return self.torch.from_numpy(np.ascontiguousarray(x))

    def _n(self, t):
        if t.dtype == self.torch.bfloat16:
            return t.contiguous().view(self.torch.int16).numpy().view(BF16)
        return t.numpy()

    def run(self, op, x, eps):
        t, d = self._t(x), x.shape[-1]
        with self.torch.no_grad():
            if op == "layer_norm":
                y = self.F.layer_norm(t, (d,), eps=eps)
            elif op == "rms_norm":
                y = self.F.rms_norm(t, (d,), eps=eps)
            elif op == "group_norm":  # (N, C=1, L=d), one group: the group-norm kernel on each row
                y = self.F.group_norm(t.reshape(len(x), 1, d), 1, eps=eps).reshape(len(x), d)
            else:
                raise ValueError(op)
        return self._n(y)


class Flax:
    name = "flax"
    ops = ("layer_norm", "layer_norm_two_pass", "rms_norm")

    def __init__(self):
        import flax
        import flax.linen as nn
        import jax
        import jax.numpy as jnp
        import jaxlib

        self.jax, self.jnp, self.nn, self.flax, self.jaxlib = jax, jnp, nn, flax, jaxlib
        self._cache, self._params = {}, {}

    def versions(self):
        return {"jax": self.jax.__version__, "jaxlib": self.jaxlib.__version__,
                "flax": self.flax.__version__, "backend": self.jax.default_backend()}

    def _fn(self, op, dtype, eps, d):
        key = (op, str(dtype), eps, d)
        if key not in self._cache:
            nn, jnp = self.nn, self.jnp
            jdt = jnp.bfloat16 if dtype == BF16 else jnp.dtype(dtype)
            # dtype=input dtype: the layer returns the input's format, as in mixed precision;
            # the parameters stay float32 (param_dtype's default), scale 1 and bias 0.
            if op == "layer_norm":
                mod = nn.LayerNorm(epsilon=eps, dtype=jdt)
            elif op == "layer_norm_two_pass":
                mod = nn.LayerNorm(epsilon=eps, dtype=jdt, use_fast_variance=False)
            elif op == "rms_norm":
                mod = nn.RMSNorm(epsilon=eps, dtype=jdt)
            else:
                raise ValueError(op)
            # Parameters depend only on the layer kind and d (float32 ones and zeros), so they
            # are made once per pair: every init is an XLA compile of its own.
            pkey = ("rms" if op == "rms_norm" else "ln", d)
            if pkey not in self._params:
                self._params[pkey] = mod.init(self.jax.random.PRNGKey(0), jnp.zeros((1, d), jnp.float32))
            params = self._params[pkey]
            self._cache[key] = self.jax.jit(lambda v: mod.apply(params, v))
        return self._cache[key]

    def run(self, op, x, eps):
        y = self._fn(op, x.dtype, eps, x.shape[-1])(self.jnp.asarray(x))
        return np.asarray(y).astype(x.dtype)


def _onnx_model(op: str, dtype, eps: float):
    from onnx import TensorProto, helper

    elem = {np.dtype("float16"): TensorProto.FLOAT16, np.dtype("float32"): TensorProto.FLOAT,
            np.dtype(BF16): TensorProto.BFLOAT16}[np.dtype(dtype)]
    onnx_op, opset = {"layer_norm": ("LayerNormalization", 17),
                      "rms_norm": ("RMSNormalization", 23)}[op]
    X = helper.make_tensor_value_info("X", elem, ["N", "D"])
    S = helper.make_tensor_value_info("Scale", elem, ["D"])
    Y = helper.make_tensor_value_info("Y", elem, ["N", "D"])
    # stash_type is left at its default, 1 (float32 statistics), as an exporter writes it.
    node = helper.make_node(onnx_op, ["X", "Scale"], ["Y"], axis=-1, epsilon=eps)
    model = helper.make_model(helper.make_graph([node], op, [X, S], [Y]),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


class OnnxRuntime:
    name = "onnxruntime"
    ops = ("layer_norm", "rms_norm")

    def __init__(self, threads: int = 1):
        import onnx
        import onnxruntime as ort

        self.ort, self.onnx = ort, onnx
        self.threads = threads  # intra-op threads: 1 here, 2 in one of --spread's profiles
        self._cache = {}

    def versions(self):
        info = self.ort.get_build_info()
        commit = info.split("git-commit-id=")[1].split(",")[0] if "git-commit-id=" in info else ""
        return {"onnxruntime": self.ort.__version__, "onnxruntime_git": commit,
                "onnx": self.onnx.__version__, "provider": "CPUExecutionProvider"}

    def _session(self, op, dtype, eps):
        key = (op, str(dtype), eps)
        if key not in self._cache:
            opts = self.ort.SessionOptions()
            opts.intra_op_num_threads = self.threads
            opts.log_severity_level = 3
            self._cache[key] = self.ort.InferenceSession(
                _onnx_model(op, dtype, eps).SerializeToString(), opts, providers=["CPUExecutionProvider"])
        return self._cache[key]

    def run(self, op, x, eps):
        sess = self._session(op, x.dtype, eps)
        return sess.run(None, {"X": x, "Scale": np.ones(x.shape[-1], x.dtype)})[0]


class OnnxReference:
    name = "onnx_reference"
    ops = ("layer_norm", "rms_norm")

    def __init__(self):
        import onnx
        from onnx.reference import ReferenceEvaluator

        self.onnx, self.Ref = onnx, ReferenceEvaluator
        self._cache = {}

    def versions(self):
        return {"onnx": self.onnx.__version__, "evaluator": "onnx.reference.ReferenceEvaluator"}

    def run(self, op, x, eps):
        key = (op, str(x.dtype), eps)
        if key not in self._cache:
            self._cache[key] = self.Ref(_onnx_model(op, x.dtype, eps))
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            y = self._cache[key].run(None, {"X": x, "Scale": np.ones(x.shape[-1], x.dtype)})[0]
        return np.asarray(y).astype(x.dtype)


RUNNERS = {"torch": Torch, "flax": Flax, "onnxruntime": OnnxRuntime, "onnx_reference": OnnxReference}


# --- the machine ----------------------------------------------------------------------------


def cpu_info() -> tuple[str, list[str]]:
    model, flags = platform.processor() or platform.machine(), []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and ":" in line:
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags") and ":" in line and not flags:
                have = set(line.split(":", 1)[1].split())
                flags = [f for f in SIMD_FLAGS if f in have]
    except OSError:
        pass
    return model, flags


def lneps_reference_info() -> dict:
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = ""
    # Correct rounding is what the reference must have: test it on issue 9's two reproducers
    # (bfloat16 double rounding, float32 statistics near the mean) rather than trust a version.
    bf = lneps.layer_norm(np.array([-0.041259765625, 2.171875, 1.765625], dtype=BF16))[2]
    f32 = lneps.layer_norm(np.float32([59988.21484375, 60000.0, 60011.7890625]))[1]
    rounded = bool(float(bf) == 0.486328125 and f32 == np.float32(-1.3529354e-4))
    return {
        "layer_norm": "lneps.layer_norm(x, eps=eps), default path",
        "rms_norm": "lneps.rms_norm(x, eps=eps), default path",
        "group_norm": "lneps.group_norm(x.reshape(n, 1, d), 1, eps=eps)",
        "lneps_commit": commit,
        "correctly_rounded": rounded,
    }


# --- measuring ---------------------------------------------------------------------------------


def run_grid(runner, unsupported: dict, *, dtypes=FW.DTYPES, ds=FW.DS, eps_values=FW.EPS_VALUES, ops=None):
    """Run ``runner`` on the grid, no reference computed: yields ``(op, dtype, d, eps, fams,
    bounds, x, y)`` per block, the families' rows ``fams`` stacked into ``x`` (family k is
    ``x[bounds[k]:bounds[k + 1]]``) and the framework's output ``y``. The (op, dtype) pairs the
    framework does not implement go into ``unsupported`` (key -> error) and are skipped."""
    ops = tuple(ops or runner.ops)
    for dtype in dtypes:
        dt = np_dtype(dtype)
        for d in ds:
            fams = FW.measurement_rows(dtype, d)
            x = np.concatenate(list(fams.values()))
            bounds = np.cumsum([0] + [len(v) for v in fams.values()])
            for eps in eps_values:
                for op in ops:
                    if (op, dtype) in unsupported:
                        continue
                    try:
                        y = runner.run(op, x, eps)
                    except Exception as exc:  # a dtype the framework does not implement
                        unsupported[op, dtype] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                        continue
                    assert y.dtype == dt and y.shape == x.shape, (op, dtype, y.dtype, y.shape)
                    yield op, dtype, d, eps, fams, bounds, x, y


def _unsupported_list(unsupported: dict) -> list[dict]:
    return [{"op": o, "dtype": t, "error": e} for (o, t), e in unsupported.items()]


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
    return results, _unsupported_list(unsupported)


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
        "inputs": {"families": list(lneps.book.precision.FAMILIES), "hand_rows": FW.HAND_ROWS,
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


# --- the spread across arithmetic profiles (--spread, spread.json) ---------------------------
#
# The stored files hold what one machine computed (its CPU flags: cpu_flags). Another CPU, or
# the same one with a framework's dispatch capped, runs other SIMD kernels, and some outputs move.
# --spread measures by how much: the grid once per profile (an environment that caps a
# framework's instruction set, a thread count, numpy's SIMD level), each in a fresh process, and
# stores per result row the outputs seen (a digest prefix and their counts: correct, nan, inf,
# beyond_bound), which profile gave which, and the spread of each count (max - min over the
# profiles, the stored measurement included). tests/book/test_frameworks_measured.py derives its
# tolerance from it.

SPREAD_FILE = "spread.json"
SPREAD_SCHEMA = 1
DIGEST_CHARS = 16  # a prefix of an output's SHA-256 (FW.output_digest) names it in spread.json
SPREAD_COUNTS = ("correct", "nan", "inf", "beyond_bound")
# Variables that choose a framework's or numpy's arithmetic; a profile's process starts with
# none of them set, then sets its own.
PROFILE_VARS = ("ATEN_CPU_CAPABILITY", "XLA_FLAGS", "NPY_DISABLE_CPU_FEATURES", "NPY_ENABLE_CPU_FEATURES",
                "OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
SPREAD_COMMAND = "python tools/measure_frameworks.py --spread   (make frameworks-spread)"


def _cpu_flag_set() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags") and ":" in line:
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def portable_env(name: str) -> dict:
    """The environment of `make portable`'s profile ``name`` (tools/portable.py), under which
    the whole test suite, this tool's re-measurement included, runs in CI."""
    spec = importlib.util.spec_from_file_location("lneps_portable", ROOT / "tools" / "portable.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return dict(mod.PROFILES[name][0])


def spread_profiles(name: str, flags: set[str] | None = None) -> list[dict]:
    """The profiles --spread runs ``name`` under on a CPU with ``flags`` (default: this one's):
    ``env`` (added to an environment without PROFILE_VARS), ``cpus`` (the process's CPU
    affinity) and ``threads`` (the runner's intra-op threads, torch and ONNX Runtime; the others
    take none). Only levels the CPU has: ATEN_CPU_CAPABILITY=avx512 on a CPU without AVX-512
    dies of an illegal instruction (torch 2.13 does not check)."""
    have = _cpu_flag_set() if flags is None else set(flags)
    prof = lambda label, env=None, cpus=2, threads=1: {"name": label, "env": env or {}, "cpus": cpus,
                                                        "threads": threads}
    v2 = portable_env("x86-64-v2")
    out = []
    if name == "torch":
        caps = [None]
        caps += ["avx512"] if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= have else []
        caps += ["avx2"] if {"avx2", "fma"} <= have else []
        caps += ["default"]
        for cap in caps:
            env = {} if cap is None else {"ATEN_CPU_CAPABILITY": cap}
            for threads in (1, 2):
                label = (f"{'native' if cap is None else 'ATEN_CPU_CAPABILITY=' + cap}, "
                         f"{threads} thread{'s' * (threads > 1)}")
                out.append(prof(label, env, threads=threads))
        out.append(prof("numpy x86-64-v2 (make portable)", v2))
    elif name == "flax":
        isas = [None] + [isa for isa, need in (("AVX512", "avx512f"), ("AVX2", "avx2"), ("AVX", "avx"),
                                               ("SSE4_2", "sse4_2")) if need in have]
        for isa in isas:
            env = {} if isa is None else {"XLA_FLAGS": f"--xla_cpu_max_isa={isa}"}
            for cpus in (2, 1):
                label = (f"{'native' if isa is None else 'XLA_FLAGS=--xla_cpu_max_isa=' + isa}, "
                         f"{cpus} CPU{'s' * (cpus > 1)}")
                out.append(prof(label, env, cpus=cpus))
        out.append(prof("numpy x86-64-v2 (make portable)", v2))
    elif name == "onnxruntime":
        # No variable or session option caps MLAS's dispatch (it reads CPUID itself): threads only.
        out += [prof("native, 1 thread"), prof("native, 2 threads", threads=2),
                prof("native, 1 thread, 1 CPU", cpus=1), prof("numpy x86-64-v2 (make portable)", v2)]
    elif name == "onnx_reference":  # numpy's own loops: its SIMD levels are the profiles
        out += [prof("native"), prof("numpy avx2 (make portable)", portable_env("avx2")),
                prof("numpy x86-64-v2 (make portable)", v2)]
    else:
        raise ValueError(name)
    return out


def _profile_environ(profile: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in PROFILE_VARS}
    return env | profile["env"]


def spread_worker(name: str, out: Path, threads: int, cpus: int) -> None:
    """One profile's run (a process of its own, started by :func:`measure_spread`): the grid's
    outputs, no reference, into ``out``.npz (one array per result row) and ``out``.json."""
    avail = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, avail[:cpus])  # before any framework starts its thread pools
    t0 = time.perf_counter()
    runner = RUNNERS[name](threads=threads) if name in ("torch", "onnxruntime") else RUNNERS[name]()
    unsupported, rows, arrays, inputs = {}, [], {}, {}
    for op, dtype, d, eps, fams, bounds, x, y in run_grid(runner, unsupported):
        inputs.setdefault(f"{dtype} | {d}", FW.output_digest(x))
        for k, family in enumerate(fams):
            ys = y[bounds[k]:bounds[k + 1]]
            arrays[f"r{len(rows)}"] = ys.view(np.uint16) if ys.dtype.itemsize == 2 else ys
            rows.append([op, dtype, family, d, eps, FW.output_digest(ys)])
    np.savez(out.with_suffix(".npz"), **arrays)
    from numpy._core._multiarray_umath import __cpu_features__ as npf

    effective = {"cpus": len(os.sched_getaffinity(0)),
                 "numpy_simd": next((k for k in ("X86_V4", "X86_V3") if npf.get(k)), "X86_V2")}
    if name == "torch":
        effective |= {"cpu_capability": runner.torch.backends.cpu.get_cpu_capability(),
                      "threads": runner.torch.get_num_threads()}
    elif name == "onnxruntime":
        effective["threads"] = runner.threads
    elif name == "flax":
        effective["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "")
    out.with_suffix(".json").write_text(json.dumps({
        "rows": rows, "unsupported": _unsupported_list(unsupported), "inputs": inputs,
        "versions": runner.versions(), "effective": effective,
        "seconds": round(time.perf_counter() - t0, 1)}))


def _run_profile(name: str, profile: dict, tmp: Path) -> tuple[dict, Any]:
    out = tmp / f"{name}-{len(list(tmp.iterdir()))}"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--spread-worker", name, "--worker-out", str(out),
           "--threads", str(profile["threads"]), "--cpus", str(profile["cpus"])]
    run = subprocess.run(cmd, env=_profile_environ(profile), cwd=ROOT, capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"spread: {name} under {profile['name']} failed ({run.returncode}):\n{run.stderr[-3000:]}")
    return json.loads(out.with_suffix(".json").read_text()), np.load(out.with_suffix(".npz"))


def _row_key(r) -> tuple:
    return (r["op"], r["dtype"], r["family"], r["d"], r["eps"])


class ReferenceBlocks:
    """The grid's inputs and lneps's reference per block (dtype, d, eps and the reference's
    kind), computed once, on first use, for every profile and framework: the correctly rounded
    reference is the slow part of a measurement. :meth:`summary` gives a row's counts."""

    def __init__(self):
        self.inputs, self.refs = {}, {}

    def input(self, dtype, d):
        if (dtype, d) not in self.inputs:
            fams = FW.measurement_rows(dtype, d)
            x = np.concatenate(list(fams.values()))
            b = np.cumsum([0] + [len(v) for v in fams.values()])
            self.inputs[dtype, d] = (x, {f: slice(b[k], b[k + 1]) for k, f in enumerate(fams)})
        return self.inputs[dtype, d]

    def summary(self, op, dtype, family, d, eps, y) -> dict:
        x, slices = self.input(dtype, d)
        kind = REFERENCE_OF[op]
        if (kind, dtype, d, eps) not in self.refs:
            self.refs[kind, dtype, d, eps] = reference(kind, x, eps)
        sl = slices[family]
        s = FW.error_summary(y, self.refs[kind, dtype, d, eps][sl], dtype, x=x[sl], op=kind, eps=eps)
        return {c: s[c] for c in SPREAD_COUNTS if c in s}


def spread_framework(name: str, blocks: ReferenceBlocks, tmp: Path, previous: dict | None = None,
                     log=print) -> dict:
    """One framework's section of spread.json: the stored measurement, then every profile of
    :func:`spread_profiles` on this machine, then the profiles ``previous`` (the section of the
    file being replaced) holds from other machines, if made with the same versions: a run on a
    second machine adds to the spread rather than replacing the first one's."""
    stored = FW.load(name, STORED)
    rows = {_row_key(r): {"op": r["op"], "dtype": r["dtype"], "family": r["family"], "d": r["d"], "eps": r["eps"],
                          "n": r["n"], "outputs": [], "by_profile": []} for r in stored["results"]}
    fields = {k: [c for c in SPREAD_COUNTS if c in r] for k, r in zip(rows, stored["results"])}

    def add(k, digest, counts):
        row = rows[k]
        entry = {"sha256": digest[:DIGEST_CHARS], **counts}
        if entry not in row["outputs"]:
            row["outputs"].append(entry)
        row["by_profile"].append(row["outputs"].index(entry))

    profiles = [{"name": "stored", "source": f"src/lneps/book/data/frameworks/{name}.json", "date": stored["date"],
                 "cpu": stored["platform"]["cpu"], "cpu_flags": stored["cpu_flags"], "env": {},
                 "effective": {k: v for k, v in stored["versions"].items() if k == "cpu_capability"},
                 "unsupported": [[u["op"], u["dtype"], u["error"]] for u in stored["unsupported"]]}]
    for r in stored["results"]:
        add(_row_key(r), r["sha256"], {c: r[c] for c in fields[_row_key(r)]})
    stored_unsupported = {(u["op"], u["dtype"]) for u in stored["unsupported"]}
    computed, moved, versions = {}, [], None
    model, flags = cpu_info()
    for prof in spread_profiles(name):
        t0 = time.perf_counter()
        meta, arrays = _run_profile(name, prof, tmp)
        unsupported = {(u["op"], u["dtype"]) for u in meta["unsupported"]}
        if not stored_unsupported <= unsupported:
            raise SystemExit(f"spread: {name} under {prof['name']}: unsupported {meta['unsupported']}, "
                             f"stored {sorted(stored_unsupported)}")
        if unsupported != stored_unsupported:  # a profile that fails where the stored run did not
            log(f"  {name} | {prof['name']}: fails on {meta['unsupported']}", flush=True)
        for key, digest in meta["inputs"].items():
            dtype, d = key.split(" | ")
            if FW.output_digest(blocks.input(dtype, int(d))[0]) != digest:
                raise SystemExit(f"spread: {name} under {prof['name']}: the inputs {key} differ from this process's")
        v = {k: x for k, x in meta["versions"].items() if k != "cpu_capability"}
        if versions is not None and v != versions:
            raise SystemExit(f"spread: {name}: versions differ between profiles: {v} != {versions}")
        versions = v
        fresh = 0
        for i, (op, dtype, family, d, eps, digest) in enumerate(meta["rows"]):
            k = (op, dtype, family, d, eps)
            if (k, digest) not in computed:
                y = arrays[f"r{i}"]
                y = y.view(np_dtype(dtype)) if y.dtype == np.uint16 else y
                computed[k, digest] = blocks.summary(op, dtype, family, d, eps, y)
                fresh += 1
            add(k, digest, {c: computed[k, digest][c] for c in fields[k]})
        for k, r in rows.items():  # a row of a pair the profile fails on has no output: null
            if len(r["by_profile"]) == len(profiles) and (k[0], k[1]) in unsupported:
                r["by_profile"].append(None)
        missing = [k for k, r in rows.items() if len(r["by_profile"]) != len(profiles) + 1]
        if missing:
            raise SystemExit(f"spread: {name} under {prof['name']}: {len(missing)} stored rows not measured,"
                             f" e.g. {missing[0]}")
        arrays.close()
        profiles.append({"name": prof["name"], "cpu": model, "cpu_flags": flags, "env": prof["env"],
                         "cpus": prof["cpus"], "threads": prof["threads"], "effective": meta["effective"],
                         "unsupported": [[u["op"], u["dtype"], u["error"]] for u in meta["unsupported"]],
                         "seconds": round(time.perf_counter() - t0, 1)})
        log(f"  {name} | {prof['name']}: {meta['effective']}, {fresh} outputs new, "
            f"{round(time.perf_counter() - t0, 1)} s", flush=True)
    carry_over(name, previous, rows, profiles, computed, versions, (model, flags), add, fields, log)
    for r in stored["results"]:  # the stored output met again: were its counts made against this reference?
        k = _row_key(r)
        c = computed.get((k, r["sha256"]))
        if c is not None and any(c[f] != r[f] for f in fields[k]):
            moved.append({"row": list(k), "stored": {f: r[f] for f in fields[k]}, "here": {f: c[f] for f in fields[k]}})
    for r in rows.values():
        r["spread"] = {c: max(o[c] for o in r["outputs"]) - min(o[c] for o in r["outputs"])
                       for c in SPREAD_COUNTS if c in r["outputs"][0]}
    out_rows = list(rows.values())
    return {"versions": versions, "profiles": profiles,
            "rows_with_outputs_differing": sum(len(r["outputs"]) > 1 for r in out_rows),
            "worst": spread_worst(out_rows), "reference_moved": moved, "rows": out_rows}


def carry_over(name, previous, rows, profiles, computed, versions, here, add, fields, log) -> None:
    """Append to ``profiles`` (and every row) the profiles of ``previous`` measured on another
    machine, unless the versions differ or an output met here too carries other counts there
    (the reference moved in between: those counts are stale)."""
    if not previous:
        return
    others = [i for i, p in enumerate(previous["profiles"]) if i > 0 and [p["cpu"], list(p["cpu_flags"])] != list(here)]
    if not others:
        return
    prev_rows = {_row_key(r): r for r in previous["rows"]}
    if previous["versions"] != versions or set(prev_rows) != set(rows):
        log(f"  {name}: not keeping {len(others)} profiles of other machines (other versions or grid)")
        return
    here_counts = {(k, dg[:DIGEST_CHARS]): c for (k, dg), c in computed.items()}
    for k, pr in prev_rows.items():
        for i in others:
            j = pr["by_profile"][i]
            mine = None if j is None else here_counts.get((k, pr["outputs"][j]["sha256"]))
            if mine is not None and any(mine[c] != pr["outputs"][j][c] for c in mine):
                log(f"  {name}: not keeping the profiles of other machines: {k} has other counts there")
                return
    for i in others:
        profiles.append(previous["profiles"][i])
        for k, pr in prev_rows.items():
            j = pr["by_profile"][i]
            if j is None:
                rows[k]["by_profile"].append(None)
            else:
                o = pr["outputs"][j]
                add(k, o["sha256"], {c: o[c] for c in fields[k]})
    cpus = sorted({previous["profiles"][i]["cpu"] for i in others})
    log(f"  {name}: kept {len(others)} profiles of other machines: {cpus}")


def spread_worst(rows: list[dict]) -> dict:
    """Per count: the largest spread (as a count and as a share of the row's n), its row, and
    how many rows have a spread at all."""
    out = {}
    for c in SPREAD_COUNTS:
        have = [r for r in rows if c in r["spread"]]
        if not have:
            continue
        w = max(have, key=lambda r: (r["spread"][c] / r["n"], r["spread"][c]))
        out[c] = {"rows_moved": sum(r["spread"][c] > 0 for r in have), "rows": len(have),
                  "max": max(r["spread"][c] for r in have), "max_share": w["spread"][c] / w["n"],
                  "at": [w["op"], w["dtype"], w["family"], w["d"], w["eps"]] if w["spread"][c] else None}
    return out


def isa_class(profile: dict) -> str:
    """The instruction-set class a profile ran: what --spread's leave-one-out holds out together
    (thread counts and numpy's level do not change the frameworks' kernels)."""
    eff, env = profile.get("effective", {}), profile.get("env", {})
    if "cpu_capability" in eff:
        return eff["cpu_capability"]
    if "xla_cpu_max_isa" in env.get("XLA_FLAGS", ""):
        return env["XLA_FLAGS"].split("=")[-1]
    flags = set(profile.get("cpu_flags", []))
    return next((isa for isa, need in (("AVX512", "avx512f"), ("AVX2", "avx2"), ("AVX", "avx"))
                 if need in flags), "SSE4_2")


def held_out(section: dict, safety: float) -> dict:
    """Leave-one-out over instruction-set classes: for each class, judge its outputs that no
    other class produced by rule 3 of tests/book/test_frameworks_measured.py with the spread of the
    other classes only, anchored on the stored output (on a native one when the stored class is
    the one held out). Returns class -> (rows beyond the tolerance, rows judged)."""
    classes = [isa_class(p) for p in section["profiles"]]
    out = {}
    for g in dict.fromkeys(classes):
        beyond = judged = 0
        anchor = 0 if classes[0] != g else next((i for i, c in enumerate(classes) if c != g), None)
        if anchor is None:
            continue
        for r in section["rows"]:
            kept = [r["outputs"][j] for j, c in zip(r["by_profile"], classes) if c != g and j is not None]
            if r["by_profile"][anchor] is None:
                continue
            a = r["outputs"][r["by_profile"][anchor]]
            seen = {o["sha256"] for o in kept}
            for j in {j for j, c in zip(r["by_profile"], classes) if c == g and j is not None}:
                o = r["outputs"][j]
                if o["sha256"] in seen:
                    continue
                judged += 1
                spread = {c: max(k[c] for k in kept) - min(k[c] for k in kept) for c in r["spread"]}
                beyond += any(abs(o[c] - a[c]) > safety * spread[c] for c in spread)
        out[g] = (beyond, judged)
    return out


def load_spread(path=None) -> dict:
    """spread.json (default: this checkout's), checked by :func:`validate_spread`."""
    data = json.loads(Path(path or STORED / SPREAD_FILE).read_text(encoding="utf-8"))
    validate_spread(data)
    return data


def validate_spread(data: dict) -> None:
    """Raise ValueError naming what breaks spread.json's structure."""
    if data.get("schema") != SPREAD_SCHEMA:
        raise ValueError(f"spread.json: schema {data.get('schema')!r}, expected {SPREAD_SCHEMA}")
    for key in ("command", "date", "machine", "reference", "frameworks"):
        if key not in data:
            raise ValueError(f"spread.json lacks {key}")
    for fw, sec in data["frameworks"].items():
        np_ = len(sec["profiles"])
        if sec["profiles"][0]["name"] != "stored":
            raise ValueError(f"spread.json {fw}: the first profile must be the stored measurement")
        for i, r in enumerate(sec["rows"]):
            where = f"spread.json {fw} rows[{i}]"
            given = [j for j in r["by_profile"] if j is not None]  # null: the profile fails on the pair
            if len(r["by_profile"]) != np_ or not all(0 <= j < len(r["outputs"]) for j in given):
                raise ValueError(f"{where}: by_profile must index outputs, one entry per profile")
            if r["by_profile"][0] is None or sorted(set(given)) != list(range(len(r["outputs"]))):
                raise ValueError(f"{where}: an output no profile gave")
            for c, s in r["spread"].items():
                vals = [o[c] for o in r["outputs"]]
                if s != max(vals) - min(vals) or not all(0 <= v <= r["n"] for v in vals):
                    raise ValueError(f"{where}: spread of {c} is not max - min of its outputs")


def dump_spread(data: dict, path: Path) -> None:
    """Strict JSON, one profile and one result row a line (so a re-measurement's diff shows the
    rows that moved)."""
    validate_spread(data)
    lists = {(fw, part): sec[part] for fw, sec in data["frameworks"].items() for part in ("profiles", "rows")}
    shell = {**data, "frameworks": {fw: {**sec, "profiles": f"@@{fw} profiles@@", "rows": f"@@{fw} rows@@"}
                                    for fw, sec in data["frameworks"].items()}}
    text = json.dumps(shell, indent=1, allow_nan=False)
    for (fw, part), items in lists.items():
        body = "[\n" + ",\n".join("    " + json.dumps(r, allow_nan=False) for r in items) + "\n   ]"
        text = text.replace(json.dumps(f"@@{fw} {part}@@"), body)
    Path(path).write_text(text + "\n", encoding="utf-8")


def measure_spread(names, out_dir: Path) -> dict:
    """Re-make spread.json for ``names`` (other frameworks' sections are kept from the file)."""
    import tempfile

    path = out_dir / SPREAD_FILE
    old = load_spread(path) if path.is_file() else None
    model, flags = cpu_info()
    data = {
        "schema": SPREAD_SCHEMA,
        "what": "Per result row of the stored measurements (op, dtype, family, d, eps): the outputs each "
                "profile computed (sha256: the first 16 hex digits of the output's SHA-256) with their counts "
                "(correct, nan, inf, beyond_bound, as in the stored files), by_profile[i] the output of "
                "profiles[i] (profiles[0]: the stored measurement; null where that profile fails on the "
                "op and dtype, its unsupported), spread = max - min of each count over the profiles. "
                "tests/book/test_frameworks_measured.py derives its tolerance from it.",
        "command": SPREAD_COMMAND,
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {"system": platform.system(), "machine": platform.machine(), "cpu": model,
                    "cpu_flags": flags, "cores": os.cpu_count()},
        "versions": {"numpy": np.__version__, "ml_dtypes": ml_dtypes.__version__, "python": platform.python_version()},
        "reference": lneps_reference_info(),
        "profile_vars": list(PROFILE_VARS),
        "frameworks": dict(old["frameworks"]) if old else {},
    }
    blocks = ReferenceBlocks()
    with tempfile.TemporaryDirectory(prefix="lneps-spread-") as tmp:
        for name in names:
            t0 = time.perf_counter()
            print(f"{name}: {len(spread_profiles(name))} profiles", flush=True)
            sec = spread_framework(name, blocks, Path(tmp), previous=(old or {}).get("frameworks", {}).get(name))
            sec["seconds"] = round(time.perf_counter() - t0, 1)
            data["frameworks"][name] = sec
            for f in Path(tmp).iterdir():
                f.unlink()
            # written after each framework, in FRAMEWORKS order, so that an interrupted run keeps its work
            data["frameworks"] = {fw: data["frameworks"][fw] for fw in FW.FRAMEWORKS if fw in data["frameworks"]}
            dump_spread(data, path)
    return data


def spread_report(data: dict, names) -> str:
    lines = []
    for fw in names:
        sec = data["frameworks"][fw]
        lines.append(f"{fw}: {len(sec['profiles'])} profiles (stored + {len(sec['profiles']) - 1} here), "
                     f"{sec['rows_with_outputs_differing']} of {len(sec['rows'])} rows with outputs differing")
        for c, w in sec["worst"].items():
            if w["at"] is None:
                lines.append(f"  {c}: the same in every profile, all {w['rows']} rows")
                continue
            op, dtype, family, d, eps = w["at"]
            lines.append(f"  {c}: spread > 0 in {w['rows_moved']} of {w['rows']} rows; worst {w['max_share']:.2%} "
                         f"at {op} {dtype} {family} d={d} eps={eps:g}; largest count {w['max']}")
        for safety in (1, 2, 3):
            ho = {g: f"{b} of {n}" for g, (b, n) in held_out(sec, safety).items() if n}
            if ho:
                lines.append(f"  left out, judged by the others' spread x {safety}: rows beyond {ho}")
        if sec["reference_moved"]:
            lines.append(f"  {len(sec['reference_moved'])} stored outputs met again with other counts: "
                         "the lneps reference moved since the stored measurement")
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
