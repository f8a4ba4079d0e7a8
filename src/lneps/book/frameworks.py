r"""What the frameworks compute: the inputs they are measured on, the error summary, and the
loaders of the measurements stored in ``src/lneps/book/data/frameworks/`` (installed with the package:
:data:`DATA_DIR`).

This module never imports a framework. ``tools/measure_frameworks.py`` runs PyTorch, Flax,
ONNX Runtime and ONNX's reference evaluator on :func:`measurement_rows` and stores, for every
(operation, dtype, family, d, eps), each family named as in :mod:`lneps.families`, the
:func:`error_summary` of its output against the package's default path
(:func:`lneps.layer_norm` / :func:`lneps.rms_norm`, the format's value nearest to the exact
result). The book and the tests read those files with :func:`load`.

Error summary
    ``correct``: outputs equal to the reference (correctly rounded). Elements whose reference is
    exactly 0 (an element equal to its row's mean, a constant row) are counted apart
    (``zero_ref``, ``zero_ref_wrong``, ``worst_abs_at_zero``): at 0 an ulp is the smallest
    subnormal and any nonzero answer would be "1e37 ulp" off. ``worst_ulp`` is the largest
    :func:`lneps.book.precision.ulp_error` over the other elements, ``inf`` when an output is NaN or
    infinite there. ``worst_abs`` is the largest absolute error over finite outputs.
    ``worst_scaled`` is :func:`lneps.testing.compare`'s ``max_ulp_scaled`` for the same output:
    the error against the exact value in ulp of :math:`\max(|y_{\mathrm{exact}}|, 1)` (the rows
    have no gain, so s = 1), over every element, exact zeros included (there it is the error in
    ulp of 1), ``inf`` for a NaN or infinite output where the answer is finite.
    ``beyond_bound`` (layer norm in float16, bfloat16 and float32): how many outputs are
    further from the exact value than any correct two-pass float32 kernel can be
    (:func:`lneps.testing.two_pass_bound`): defects, not conditioning.

JSON has no NaN or infinity, so :func:`dump` writes them as the strings ``"nan"``, ``"inf"``
and ``"-inf"``, and :func:`load` reads them back as floats.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import ml_dtypes
import numpy as np

from .. import families as registry
from .._checks import check_float_dtype
from ..ulp import ulp as lneps_ulp
from .precision import FAMILIES, family_rows, ulp_error

__all__ = [
    "DATA_DIR",
    "FRAMEWORKS",
    "DTYPES",
    "DS",
    "EPS_VALUES",
    "ELEMENTS",
    "SEED",
    "HAND_ROWS",
    "measurement_rows",
    "hand_row",
    "error_summary",
    "output_digest",
    "dump",
    "load",
    "load_all",
    "validate",
    "aggregate",
    "by_family",
    "find",
    "compare",
    "SCHEMA",
    "summary_rows",
    "eps_verdict",
]

# Package data (pyproject.toml), so an installed lneps finds it, not only a source checkout.
SCHEMA = 3  # 2: result rows carry worst_scaled; 3: layer norm rows carry beyond_bound
DATA_DIR = Path(__file__).resolve().parent / "data" / "frameworks"
FRAMEWORKS = ("torch", "flax", "onnxruntime", "onnx_reference")
DTYPES = ("float16", "bfloat16", "float32")
DS = (8, 100, 768, 4096)
EPS_VALUES = (1e-5, 1e-6, 1e-12)
ELEMENTS = 32768  # per family and d: ELEMENTS // d rows
SEED = 20261201

# The hand-made rows of lneps.families, one of each per d: name -> how to fill a row of d numbers.
HAND_ROWS = {name: registry.FAMILIES[name].description for name in registry.names("hand")}

_SUMMARY_KEYS = {
    "n": int, "correct": int, "within_1ulp": int, "worst_ulp": float, "worst_abs": float,
    "nan": int, "inf": int, "zero_ref": int, "zero_ref_wrong": int, "worst_abs_at_zero": float,
    "worst_scaled": float,
}
_ROW_KEYS = {"op": str, "dtype": str, "family": str, "d": int, "eps": float, "sha256": str}
_TOP_KEYS = ("schema", "framework", "versions", "platform", "cpu_flags", "date", "reference",
             "inputs", "results", "unsupported", "probes", "eps_handling", "implied_variance")


def _dtype(name: str) -> np.dtype:
    return check_float_dtype(ml_dtypes.bfloat16 if name == "bfloat16" else name)


def hand_row(name: str, d: int) -> np.ndarray:
    """One hand-made row of ``d`` float64 numbers (:data:`HAND_ROWS`; :mod:`lneps.families`)."""
    if name not in HAND_ROWS:
        raise ValueError(f"name must be one of {list(HAND_ROWS)}; got {name!r}")
    return registry.draw(name, 0, d).x[0]


def _kind(family: str) -> str | None:
    """The kind of a stored row's family (:data:`lneps.families.KINDS`), None if unknown."""
    entry = registry.FAMILIES.get(family)
    return entry.kind if entry else None


def measurement_rows(dtype: str, d: int) -> dict[str, np.ndarray]:
    """The inputs of one (dtype, d): ``{family: rows}``, stored in ``dtype``, every family named
    as in :mod:`lneps.families`.

    Each stress family of :data:`lneps.book.precision.FAMILIES` gets ``ELEMENTS // d`` rows (at
    least 1), drawn from a generator seeded by (SEED, k, d), k its position there, so every
    dtype sees the same draws rounded to its format; each hand-made row (:data:`HAND_ROWS`)
    gets one row.
    """
    dt = _dtype(dtype)
    out = {}
    for k, family in enumerate(FAMILIES):
        rng = np.random.default_rng([SEED, k, d])
        out[family] = family_rows(family, rng, max(ELEMENTS // d, 1), d, np.float64).astype(dt)
    for name in HAND_ROWS:
        out[name] = hand_row(name, d)[None, :].astype(dt)
    return out


def output_digest(y) -> str:
    """SHA-256 of the output's bytes (its own dtype, C order): equal digests, identical bits."""
    return hashlib.sha256(np.ascontiguousarray(y).tobytes()).hexdigest()


def error_summary(y, reference, dtype, *, x=None, op="layer_norm", eps=1e-5) -> dict:
    """Compare a framework's output ``y`` with the correctly rounded ``reference`` (same shape).

    Returns the counts and worst cases described in the module docstring, as Python numbers.
    With the input rows ``x`` (and the ``op``, ``"layer_norm"`` or ``"rms_norm"``, and ``eps``
    that made ``y``), ``worst_scaled`` is ``lneps.testing.compare(y, x, op=op,
    eps=eps).max_ulp_scaled``; without them it is measured against ``reference``.
    """
    dt = _dtype(dtype) if isinstance(dtype, str) else check_float_dtype(dtype)
    y64 = np.asarray(y).astype(np.float64)
    r64 = np.asarray(reference).astype(np.float64)
    if y64.shape != r64.shape:
        raise ValueError(f"y has shape {y64.shape}, the reference {r64.shape}")
    finite = np.isfinite(y64)
    zero = r64 == 0
    with np.errstate(invalid="ignore"):
        err = ulp_error(y64, r64, dt)
        absdiff = np.abs(y64 - r64)
    nonzero = ~zero
    beyond = None
    if x is not None:
        from .. import testing  # lneps.testing: the metric the chapter leads with

        report = testing.compare(np.asarray(y), x=np.asarray(x), op=op, eps=eps)
        scaled = report.max_ulp_scaled
        if op == "layer_norm" and dt != np.float64 and np.asarray(x).dtype == dt:
            # beyond what any correct two-pass float32 kernel can reach: a defect, not conditioning
            beyond = int(report.exceeding(testing.two_pass_bound(np.asarray(x), eps=eps)).sum())
    else:
        with np.errstate(invalid="ignore"):
            same = (y64 == r64) | (np.isnan(y64) & np.isnan(r64))
            fin = finite & np.isfinite(r64)
            s_err = np.where(fin, absdiff / lneps_ulp(np.fmax(np.abs(r64), 1.0), dt), np.where(same, 0.0, np.inf))
        scaled = float(s_err.max()) if s_err.size else 0.0
    return {
        "n": int(y64.size),
        "correct": int(np.sum(y64 == r64)),
        "within_1ulp": int(np.sum((err <= 1) & nonzero) + np.sum((y64 == 0) & zero)),
        "worst_ulp": float(err[nonzero].max()) if nonzero.any() else 0.0,
        "worst_abs": float(absdiff[finite].max()) if finite.any() else math.inf,
        "nan": int(np.isnan(y64).sum()),
        "inf": int(np.isinf(y64).sum()),
        "zero_ref": int(zero.sum()),
        "zero_ref_wrong": int(np.sum(zero & (y64 != 0))),
        "worst_abs_at_zero": float(absdiff[zero & finite].max()) if (zero & finite).any() else 0.0,
        "worst_scaled": float(scaled),
        **({} if beyond is None else {"beyond_bound": beyond}),
    }


# --- storage ----------------------------------------------------------------------------


def _encode(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {k: _encode(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_encode(v) for v in obj]
    return obj


_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _decode(obj, key=None):
    if isinstance(obj, dict):
        return {k: _decode(v, k) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_decode(v, key) for v in obj]
    if isinstance(obj, str) and obj in _NONFINITE and key not in ("family", "op", "name"):
        return _NONFINITE[obj]
    return obj


def dump(data: dict, path) -> None:
    """Write one framework's measurement as strict JSON (non-finite floats as strings)."""
    validate(data)
    text = json.dumps(_encode(data), indent=1, allow_nan=False, sort_keys=False)
    Path(path).write_text(text + "\n", encoding="utf-8")


def load(framework: str, data_dir=None) -> dict:
    """Read and :func:`validate` ``<data_dir>/<framework>.json`` (default: :data:`DATA_DIR`)."""
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework must be one of {FRAMEWORKS}; got {framework!r}")
    path = Path(data_dir or DATA_DIR) / f"{framework}.json"
    data = _decode(json.loads(path.read_text(encoding="utf-8")))
    validate(data)
    return data


def load_all(data_dir=None) -> dict[str, dict]:
    """:func:`load` of every framework, in :data:`FRAMEWORKS` order."""
    return {fw: load(fw, data_dir) for fw in FRAMEWORKS}


def validate(data: dict) -> None:
    """Raise ``ValueError`` naming the first field that breaks the schema (:data:`SCHEMA`)."""
    if not isinstance(data, dict):
        raise ValueError("a measurement must be a JSON object")
    missing = [k for k in _TOP_KEYS if k not in data]
    if missing:
        raise ValueError(f"measurement lacks {missing}")
    if data["schema"] != SCHEMA or data["framework"] not in FRAMEWORKS:
        raise ValueError(f"unknown schema {data['schema']!r} or framework {data['framework']!r}")
    for key in ("versions", "platform", "reference", "inputs", "probes", "eps_handling", "implied_variance"):
        if not isinstance(data[key], dict):
            raise ValueError(f"{key} must be an object")
    if not (isinstance(data["cpu_flags"], list) and all(isinstance(f, str) for f in data["cpu_flags"])):
        raise ValueError("cpu_flags must be a list of strings")
    if not isinstance(data["date"], str) or len(data["date"]) < 10:
        raise ValueError("date must be an ISO date string")
    if not data["results"]:
        raise ValueError("results is empty")
    for i, row in enumerate(data["results"]):
        for key, kind in {**_ROW_KEYS, **_SUMMARY_KEYS}.items():
            value = row.get(key)
            ok = isinstance(value, kind) or (kind is float and isinstance(value, int))
            if not ok or isinstance(value, bool):
                raise ValueError(f"results[{i}].{key} must be {kind.__name__}; got {value!r}")
        if row["dtype"] not in DTYPES:
            raise ValueError(f"results[{i}].dtype {row['dtype']!r} is not one of {DTYPES}")
        counts = [row[k] for k in ("correct", "within_1ulp", "nan", "inf", "zero_ref")]
        if min(counts) < 0 or max(counts) > row["n"] or row["zero_ref_wrong"] > row["zero_ref"]:
            raise ValueError(f"results[{i}] has counts outside 0..n: {row}")
        if row["correct"] > row["within_1ulp"]:
            raise ValueError(f"results[{i}]: more correct than within 1 ulp")
        if row["op"] == "layer_norm" and not (isinstance(row.get("beyond_bound"), int)
                                              and 0 <= row["beyond_bound"] <= row["n"]):
            raise ValueError(f"results[{i}].beyond_bound must be a count in 0..n for layer_norm rows")
    for i, row in enumerate(data["unsupported"]):
        if not {"op", "dtype", "error"} <= set(row):
            raise ValueError(f"unsupported[{i}] needs op, dtype and error")


# --- summaries ----------------------------------------------------------------------------


def _merge(rows: list[dict]) -> dict:
    out = {k: 0 for k in ("n", "correct", "within_1ulp", "nan", "inf", "zero_ref", "zero_ref_wrong")}
    out.update(worst_ulp=0.0, worst_abs=0.0, worst_abs_at_zero=0.0, worst_scaled=0.0)
    for r in rows:
        for k in ("n", "correct", "within_1ulp", "nan", "inf", "zero_ref", "zero_ref_wrong"):
            out[k] += r[k]
        for k in ("worst_ulp", "worst_abs", "worst_abs_at_zero", "worst_scaled"):
            out[k] = max(out[k], r[k])
    out["share_correct"] = out["correct"] / out["n"] if out["n"] else math.nan
    if rows and all("beyond_bound" in r for r in rows):
        out["beyond_bound"] = sum(r["beyond_bound"] for r in rows)
        out["share_beyond_bound"] = out["beyond_bound"] / out["n"] if out["n"] else math.nan
    out["share_within_1ulp"] = out["within_1ulp"] / out["n"] if out["n"] else math.nan
    return out


def find(data: dict, **where) -> list[dict]:
    """The result rows whose fields equal ``where`` (e.g. ``op="layer_norm", dtype="float16"``);
    ``family="stress"`` selects the stress families, ``family="hand"`` the hand-made rows (the
    families of that kind in :mod:`lneps.families`)."""
    rows = []
    for r in data["results"]:
        ok = True
        for k, v in where.items():
            if k == "family" and v == "stress":
                ok &= _kind(r["family"]) != "hand"
            elif k == "family" and v == "hand":
                ok &= _kind(r["family"]) == "hand"
            else:
                ok &= r[k] == v
        if ok:
            rows.append(r)
    return rows


def aggregate(data: dict, **where) -> dict:
    """Counts summed and worst cases maxed over the rows :func:`find` selects, with
    ``share_correct`` and ``share_within_1ulp``. ``KeyError`` when nothing matches."""
    rows = find(data, **where)
    if not rows:
        raise KeyError(f"no results with {where} in {data['framework']}")
    return _merge(rows)


def by_family(data: dict, op: str, dtype: str, eps=None) -> dict[str, dict]:
    """:func:`aggregate` per family (over every d, and every eps unless one is given)."""
    where = {"op": op, "dtype": dtype} | ({} if eps is None else {"eps": eps})
    families = dict.fromkeys(r["family"] for r in find(data, **where))
    return {f: aggregate(data, family=f, **where) for f in families}


def compare(new: dict, old: dict, *, share_tol: float = 0.0, ulp_rtol: float = 0.0) -> dict:
    """Compare a fresh measurement with a stored one, row by row (same op, dtype, family, d, eps).

    Returns ``{"same_machine", "identical", "differ", "missing", "reference_moved"}``:
    ``identical`` counts rows whose output digests agree (``reference_moved`` lists those among
    them whose summary changed all the same: the reference, not the framework, moved); ``differ`` lists the rows whose share of correct outputs moved
    by more than ``share_tol`` or whose worst ulp moved by more than ``ulp_rtol`` (relative),
    or whose NaN/inf counts changed; ``missing`` lists keys present in only one of the two.
    ``same_machine`` says whether the CPU flags and the framework versions agree.
    """
    key = lambda r: (r["op"], r["dtype"], r["family"], r["d"], r["eps"])
    a = {key(r): r for r in new["results"]}
    b = {key(r): r for r in old["results"]}
    out = {
        "same_machine": new["cpu_flags"] == old["cpu_flags"] and new["versions"] == old["versions"],
        "identical": 0,
        "differ": [],
        "missing": sorted(set(a) ^ set(b), key=str),
        "reference_moved": [],
    }
    for k in a.keys() & b.keys():
        ra, rb = a[k], b[k]
        if ra["sha256"] == rb["sha256"]:
            out["identical"] += 1
            if any(ra[f] != rb[f] for f in _SUMMARY_KEYS):
                out["reference_moved"].append({"key": k, "new": ra, "old": rb})
            continue
        share = abs(ra["correct"] / ra["n"] - rb["correct"] / rb["n"])
        wa, wb = ra["worst_ulp"], rb["worst_ulp"]
        ulp_moved = (wa != wb) and not (math.isfinite(wa) and math.isfinite(wb)
                                        and abs(wa - wb) <= ulp_rtol * max(wa, wb, 1.0))
        if share > share_tol or ulp_moved or ra["nan"] != rb["nan"] or ra["inf"] != rb["inf"]:
            out["differ"].append({"key": k, "new": ra, "old": rb})
    out["differ"].sort(key=lambda e: str(e["key"]))
    out["reference_moved"].sort(key=lambda e: str(e["key"]))
    return out


# --- the chapter's tables -------------------------------------------------------------------

#: The families of :func:`summary_rows`: the stress families, then the hand-made rows pooled.
SUMMARY_FAMILIES = tuple(FAMILIES) + ("hand",)


def summary_rows(data_all: dict[str, dict]) -> list[dict]:
    """One row per (framework, op, dtype, family), pooled over every d and eps: the table the
    chapter's figure and tables are drawn from, one dict per row so that further columns can be
    joined on its keys ``framework``, ``op``, ``dtype``, ``family``.

    Each row has :func:`aggregate`'s counts and worst cases (``worst_scaled`` first among
    them; for layer norm also ``beyond_bound`` and ``share_beyond_bound``, the outputs beyond
    a correct two-pass kernel's bound), ``nonfinite`` (NaN and inf outputs) and ``worst_d`` (the row length of the worst
    scaled error). Combinations a framework does not run are left out.
    """
    out = []
    for fw, data in data_all.items():
        for op in dict.fromkeys(r["op"] for r in data["results"]):
            for dtype in DTYPES:
                if not find(data, op=op, dtype=dtype):
                    continue
                for family in SUMMARY_FAMILIES:
                    parts = find(data, op=op, dtype=dtype, family=family)
                    agg = _merge(parts)
                    worst = max(parts, key=lambda r: r["worst_scaled"])
                    out.append({"framework": fw, "op": op, "dtype": dtype, "family": family, **agg,
                                "nonfinite": agg["nan"] + agg["inf"], "worst_d": worst["d"]})
    return out


def eps_verdict(entry: dict) -> str | None:
    """The epsilon a kernel is inferred to use from one ``eps_handling`` entry, or None.

    The rows are normalized with each candidate epsilon by lneps, correctly rounded, and the
    rows the framework's output equals bit for bit are counted. A candidate is accepted when it
    matches every row, or when it matches some rows and every other candidate matches none (a
    kernel that is not correctly rounded, as in float32 and float64, cannot match every row,
    but a wrong epsilon moves the outputs by far more than its rounding). Anything else (two
    candidates each matching part of the rows, or none matching) decides nothing.
    """
    if "error" in entry:
        return None
    rows, m = entry["rows"], {k: v["rows_equal"] for k, v in entry["matches"].items()}
    for label, n in m.items():
        others = [v for k, v in m.items() if k != label]
        if n == rows or (n > 0 and all(v == 0 for v in others)):
            return label
    return None
