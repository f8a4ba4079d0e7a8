"""The frameworks behind one interface, run on the book's grid: PyTorch, Flax, ONNX Runtime and
ONNX's reference evaluator (:data:`RUNNERS`, one :class:`Runner` for each name of
``lneps.book.frameworks.FRAMEWORKS``, the one list of frameworks), lneps's reference for what each op computes, the
grid run block by block (:func:`run_grid`), and a run's provenance (the CPU, the reference's
commit and whether it rounds correctly).

Shared by the measurement (tools/measure_frameworks.py) and the spread across arithmetic
profiles (tools/framework_spread.py). Needs the extra (requirements-frameworks.txt) for the
runners themselves; each imports its framework when it is made.
"""

from __future__ import annotations

import platform
import subprocess
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


class Runner:
    """What a framework's runner holds: its ``name`` (one of ``FW.FRAMEWORKS``), the ``ops`` it
    runs, whether it takes a thread count, ``run(op, x, eps)``, ``versions()``, and what the
    spread needs of it: the arithmetic profiles it is run under (:meth:`profiles`) and the
    settings a run reports as in effect (:meth:`effective`). Adding a framework is a name in
    ``FW.FRAMEWORKS`` and a subclass here."""

    name = ""
    ops: tuple = ()
    takes_threads = False

    @classmethod
    def make(cls, threads: int = 1) -> "Runner":
        return cls(threads=threads) if cls.takes_threads else cls()

    @classmethod
    def profiles(cls, have: set, profile, numpy_env) -> list[dict]:
        """The profiles --spread runs it under on a CPU with flags ``have``: ``profile(label,
        env=None, cpus=2, threads=1)`` makes one, ``numpy_env(name)`` is the environment of
        `make portable`'s numpy profile ``name``. By default numpy's x86-64-v2 baseline only."""
        return [profile("numpy x86-64-v2 (make portable)", numpy_env("x86-64-v2"))]

    def effective(self) -> dict:
        """The framework's own settings in effect during a run (beyond CPUs and numpy's SIMD)."""
        return {}


class Torch(Runner):
    name = "torch"
    takes_threads = True
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

    @classmethod
    def profiles(cls, have, profile, numpy_env):
        # Only levels the CPU has: ATEN_CPU_CAPABILITY=avx512 on a CPU without AVX-512 dies of an
        # illegal instruction (torch 2.13 does not check).
        caps = [None]
        caps += ["avx512"] if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= have else []
        caps += ["avx2"] if {"avx2", "fma"} <= have else []
        caps += ["default"]
        out = []
        for cap in caps:
            env = {} if cap is None else {"ATEN_CPU_CAPABILITY": cap}
            for threads in (1, 2):
                label = (f"{'native' if cap is None else 'ATEN_CPU_CAPABILITY=' + cap}, "
                         f"{threads} thread{'s' * (threads > 1)}")
                out.append(profile(label, env, threads=threads))
        return out + super().profiles(have, profile, numpy_env)

    def effective(self):
        return {"cpu_capability": self.torch.backends.cpu.get_cpu_capability(),
                "threads": self.torch.get_num_threads()}

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


class Flax(Runner):
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

    @classmethod
    def profiles(cls, have, profile, numpy_env):
        isas = [None] + [isa for isa, need in (("AVX512", "avx512f"), ("AVX2", "avx2"), ("AVX", "avx"),
                                               ("SSE4_2", "sse4_2")) if need in have]
        out = []
        for isa in isas:
            env = {} if isa is None else {"XLA_FLAGS": f"--xla_cpu_max_isa={isa}"}
            for cpus in (2, 1):
                label = (f"{'native' if isa is None else 'XLA_FLAGS=--xla_cpu_max_isa=' + isa}, "
                         f"{cpus} CPU{'s' * (cpus > 1)}")
                out.append(profile(label, env, cpus=cpus))
        return out + super().profiles(have, profile, numpy_env)

    def effective(self):
        import os

        return {"XLA_FLAGS": os.environ.get("XLA_FLAGS", "")}

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


class OnnxRuntime(Runner):
    name = "onnxruntime"
    ops = ("layer_norm", "rms_norm")
    takes_threads = True

    @classmethod
    def profiles(cls, have, profile, numpy_env):
        # No variable or session option caps MLAS's dispatch (it reads CPUID itself): threads only.
        return [profile("native, 1 thread"), profile("native, 2 threads", threads=2),
                profile("native, 1 thread, 1 CPU", cpus=1), *super().profiles(have, profile, numpy_env)]

    def effective(self):
        return {"threads": self.threads}

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


class OnnxReference(Runner):
    name = "onnx_reference"
    ops = ("layer_norm", "rms_norm")

    @classmethod
    def profiles(cls, have, profile, numpy_env):  # numpy's own loops: its SIMD levels are the profiles
        return [profile("native"), profile("numpy avx2 (make portable)", numpy_env("avx2")),
                *super().profiles(have, profile, numpy_env)]

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


def _runners() -> dict[str, type[Runner]]:
    by_name = {cls.name: cls for cls in Runner.__subclasses__()}
    missing = [name for name in FW.FRAMEWORKS if name not in by_name]
    if missing or len(by_name) != len(FW.FRAMEWORKS):
        raise RuntimeError(f"a Runner for each of FW.FRAMEWORKS and no other: missing {missing}, "
                           f"extra {sorted(set(by_name) - set(FW.FRAMEWORKS))}")
    return {name: by_name[name] for name in FW.FRAMEWORKS}


#: The runners, by framework, in the order of ``FW.FRAMEWORKS``.
RUNNERS = _runners()


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


def unsupported_list(unsupported: dict) -> list[dict]:
    return [{"op": o, "dtype": t, "error": e} for (o, t), e in unsupported.items()]

