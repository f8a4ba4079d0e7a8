r"""PyTorch's CPU backward pass of layer and RMS norm, measured once and stored: the inputs, the
upstream gradient, torch's gradients and what ``torch.testing.assert_close`` said of them.

``tools/measure_torch_backward.py`` runs torch on :data:`CASES` and writes two files to
:data:`DATA_DIR` (the frameworks data): ``torch_backward.npz`` holds every array as the bits of
its format (uint16 for float16 and bfloat16, uint32 for float32: a bfloat16 array has no
portable ``.npy`` dtype), ``torch_backward.json`` the provenance (torch's version and git
commit, the CPU, its flags, ``ATEN_CPU_CAPABILITY``, the thread count, and under ``profiles``,
per instruction-set level of this CPU, the gradients whose bits move there) and, per case, the
verdict of ``torch.testing.assert_close(grad, expected)`` with its default tolerances, where
``expected`` is torch's own float64 gradient on the same inputs cast to the case's format,
the usual way to write that test. The book grades the stored gradients with
:mod:`lneps.testing`; nothing here imports torch.

A case's inputs are a function of the case alone (:func:`inputs`): the rows of
:func:`lneps.testing.families` with ``rows`` rows and seed 0, the family's gain and bias where
it has them (else a gain drawn from U(0.5, 2) and a zero bias, for layer norm), and an
upstream gradient drawn from N(0, 1) with the case's own seed, all rounded to the format. The
stored inputs are checked against them, so the data cannot drift from their definition.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np

from lneps.testing import families

__all__ = ["Case", "CASES", "DATA_DIR", "FILE", "inputs", "encode", "decode", "load", "case_key"]

#: Where the stored files are: the frameworks data, installed with the package.
DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "frameworks"
#: The two files' common stem.
FILE = "torch_backward"

_FORMATS = {"float16": (np.float16, np.uint16), "bfloat16": (ml_dtypes.bfloat16, np.uint16),
            "float32": (np.float32, np.uint32)}
_LAYER_FAMILIES = ("normal", "offset", "near_constant", "constant", "wide_range", "midpoint",
                   "cancelling_beta")


@dataclass(frozen=True)
class Case:
    """One measured call: ``op`` ("layer_norm" or "rms_norm"), the format, the row length d,
    the family of :func:`lneps.testing.families`, the number of rows, eps and the seed of dy."""

    op: str
    dtype: str
    d: int
    family: str
    rows: int = 8
    eps: float = 1e-5
    seed: int = 0

    @property
    def key(self) -> str:
        return case_key(self.op, self.dtype, self.d, self.family)


def case_key(op: str, dtype: str, d: int, family: str) -> str:
    """The name of a case in the stored files: ``"layer_norm|float16|768|normal"``."""
    return f"{op}|{dtype}|{d}|{family}"


#: layer_norm in float16 and bfloat16 at d = 64 and 768 on every family (8 rows, eps = 1e-5),
#: and rms_norm in float32 on 16 wide_range rows of 64 (values from the smallest normal float32
#: up to about 10^17), without a gain: the case where torch's composite autograd goes wrong.
CASES = tuple(
    Case("layer_norm", t, d, f, seed=1000 + 100 * i + 10 * j + k)
    for i, t in enumerate(("float16", "bfloat16"))
    for j, d in enumerate((64, 768))
    for k, f in enumerate(_LAYER_FAMILIES)
) + (Case("rms_norm", "float32", 64, "wide_range", rows=16, seed=7),)


def dtype_of(name: str):
    """The NumPy dtype of a format's name."""
    return np.dtype(_FORMATS[name][0])


def inputs(case: Case) -> dict[str, np.ndarray | None]:
    """x, dy, gamma and beta of a case (gamma and beta None for rms_norm), in its format.

    >>> c = CASES[0]
    >>> a = inputs(c)
    >>> a["x"].shape, a["dy"].dtype == a["x"].dtype, a["gamma"].shape
    ((8, 64), True, (64,))
    """
    dt = dtype_of(case.dtype)
    fam = families(dt, case.d, rows=case.rows, seed=0)[case.family]
    rng = np.random.default_rng(case.seed)
    dy = rng.normal(size=fam.x.shape).astype(dt)
    if case.op == "rms_norm":
        return {"x": fam.x, "dy": dy, "gamma": None, "beta": None}
    gamma = fam.gamma if fam.gamma is not None else rng.uniform(0.5, 2.0, size=case.d).astype(dt)
    beta = fam.beta if fam.beta is not None else np.zeros(case.d, dtype=dt)
    return {"x": fam.x, "dy": dy, "gamma": gamma, "beta": beta}


def encode(a: np.ndarray) -> np.ndarray:
    """The bits of an array of one of the formats (for the .npz file)."""
    for name, (dt, bits) in _FORMATS.items():
        if a.dtype == np.dtype(dt):
            return a.view(bits)
    raise TypeError(f"no stored format for dtype {a.dtype}")


def decode(bits: np.ndarray, dtype: str) -> np.ndarray:
    """The inverse of :func:`encode`, given the format's name."""
    return np.ascontiguousarray(bits).view(dtype_of(dtype))


def load(data_dir=None) -> dict:
    """The stored measurement: ``{"provenance": ..., "cases": {key: case}}``, each case a dict
    with its :class:`Case` fields, ``torch_testing`` (the verdict) and the arrays ``x``, ``dy``,
    ``gamma``, ``beta`` (None for rms_norm) and the gradients ``dx`` (and ``dgamma``, ``dbeta``
    for layer_norm) in the case's format. Raises ``ValueError`` if a stored input is not
    :func:`inputs`'s."""
    base = Path(data_dir or DATA_DIR)
    meta = json.loads((base / f"{FILE}.json").read_text(encoding="utf-8"))
    with np.load(base / f"{FILE}.npz") as z:
        arrays = {k: z[k] for k in z.files}
    out = {}
    for key, rec in meta["cases"].items():
        case = Case(**{f: rec[f] for f in Case.__dataclass_fields__})
        entry = dict(rec)
        for name in ("x", "dy", "gamma", "beta", "dx", "dgamma", "dbeta"):
            stored = f"{key}/{name}"
            entry[name] = decode(arrays[stored], case.dtype) if stored in arrays else None
        for name, a in inputs(case).items():
            same = (a is None and entry[name] is None) or (
                a is not None and entry[name] is not None and np.array_equal(encode(a), encode(entry[name])))
            if not same:
                raise ValueError(f"stored {name} of {key} is not the case's input")
        out[key] = entry
    return {"provenance": meta["provenance"], "cases": out}
