"""Run PyTorch, Flax, ONNX Runtime and ONNX's reference evaluator on the book's inputs and
write what they compute to src/lneps/book/data/frameworks/<framework>.json (`make frameworks`), the
package data lneps.book.frameworks.load reads.

Every output is compared element by element with lneps's default path, the format's value
nearest to the exact result (lneps.book.frameworks.error_summary). Before overwriting a stored file,
the fresh measurement is compared with it, so a reader on another CPU sees what moved.

    python tools/measure_frameworks.py                 # all four, full grid
    python tools/measure_frameworks.py --only torch    # one framework
    python tools/measure_frameworks.py --out /tmp/fw   # write elsewhere, compare with the stored

Needs the extra (requirements-frameworks.txt). The runners are importable (tests re-measure a
subset with them); nothing here is imported by `import lneps`.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import math
import os
import platform
import subprocess
import sys
import time
import warnings
from pathlib import Path

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

    def __init__(self):
        import torch
        import torch.nn.functional as F

        torch.set_num_threads(1)  # rows are independent; one thread is as deterministic and polite
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

    def __init__(self):
        import onnx
        import onnxruntime as ort

        self.ort, self.onnx = ort, onnx
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
            opts.intra_op_num_threads = 1
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


def measure_results(runner, *, dtypes=FW.DTYPES, ds=FW.DS, eps_values=FW.EPS_VALUES, ops=None):
    """Result rows (one per op, dtype, family, d, eps) and the (op, dtype) pairs not supported."""
    results, unsupported = [], {}
    ops = tuple(ops or runner.ops)
    for dtype in dtypes:
        dt = np_dtype(dtype)
        for d in ds:
            fams = FW.measurement_rows(dtype, d)
            x = np.concatenate(list(fams.values()))
            bounds = np.cumsum([0] + [len(v) for v in fams.values()])
            for eps in eps_values:
                refs = {}
                for op in ops:
                    if (op, dtype) in unsupported:
                        continue
                    try:
                        y = runner.run(op, x, eps)
                    except Exception as exc:  # a dtype the framework does not implement
                        unsupported[op, dtype] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                        continue
                    assert y.dtype == dt and y.shape == x.shape, (op, dtype, y.dtype, y.shape)
                    kind = REFERENCE_OF[op]
                    if kind not in refs:
                        refs[kind] = reference(op, x, eps)
                    for k, family in enumerate(fams):
                        sl = slice(bounds[k], bounds[k + 1])
                        row = {"op": op, "dtype": dtype, "family": family, "d": d, "eps": eps}
                        row.update(FW.error_summary(y[sl], refs[kind][sl], dtype, x=x[sl], op=kind, eps=eps))
                        row["sha256"] = FW.output_digest(y[sl])
                        results.append(row)
    return results, [{"op": o, "dtype": t, "error": e} for (o, t), e in unsupported.items()]


PROBES = (("zeros", 1e-12), ("constant 60000", 1e-12), ("constant 60000", 1e-5),
          ("+-65504", 1e-5), ("65504 and 65472", 1e-5))


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


def implied_variance(runner, op, *, d=100, rows=64, dtype="float32", family="mean 6e4, sd 8") -> dict:
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
    return {f"{op} | float32 | mean 6e4, sd 8 | {d}": implied_variance(runner, op, d=d)
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=list(RUNNERS), action="append")
    ap.add_argument("--out", type=Path, default=STORED)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
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
