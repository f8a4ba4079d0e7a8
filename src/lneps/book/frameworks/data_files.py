"""The stored measurements: one JSON file per framework in ``src/lneps/book/data/frameworks/``
(installed with the package: :data:`DATA_DIR`), their schema, and a fresh measurement compared
with a stored one.

``tools/measure_frameworks.py`` writes the files with :func:`dump`, after :func:`compare` has
shown what moved; the book and the tests read them with :func:`load`.

JSON has no NaN or infinity, so :func:`dump` writes them as the strings ``"nan"``, ``"inf"``
and ``"-inf"``, and :func:`load` reads them back as floats.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from .measured import DTYPES, FRAMEWORKS

__all__ = ["SCHEMA", "DATA_DIR", "encode_nonfinite", "dump", "load", "load_all", "validate", "compare"]

SCHEMA = 3  # 2: result rows carry worst_scaled; 3: layer norm rows carry beyond_bound
# Package data (pyproject.toml), so an installed lneps finds it, not only a source checkout:
# lneps/book/data/frameworks/, beside this package (parents[1] is lneps/book/).
DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "frameworks"

# A result row carries its key and output digest (_ROW_KEYS) and every field error_summary
# writes (_SUMMARY_KEYS: kept in step with lneps.book.frameworks.measured.error_summary).
_SUMMARY_KEYS = {
    "n": int, "correct": int, "within_1ulp": int, "worst_ulp": float, "worst_abs": float,
    "nan": int, "inf": int, "zero_ref": int, "zero_ref_wrong": int, "worst_abs_at_zero": float,
    "worst_scaled": float,
}
_ROW_KEYS = {"op": str, "dtype": str, "family": str, "d": int, "eps": float, "sha256": str}
_TOP_KEYS = ("schema", "framework", "versions", "platform", "cpu_flags", "date", "reference",
             "inputs", "results", "unsupported", "probes", "eps_handling", "implied_variance")


def encode_nonfinite(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {k: encode_nonfinite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [encode_nonfinite(v) for v in obj]
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
    text = json.dumps(encode_nonfinite(data), indent=1, allow_nan=False, sort_keys=False)
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


def compare(new: dict, old: dict, *, share_tol: float = 0.0, ulp_rtol: float = 0.0) -> dict:
    """Compare a fresh measurement with a stored one, row by row (same op, dtype, family, d, eps).

    Returns ``{"same_machine", "identical", "differ", "missing", "reference_moved"}``:
    ``identical`` counts rows whose output digests agree (``reference_moved`` lists those among
    them whose summary changed all the same: the reference, not the framework, moved);
    ``differ`` lists the rows whose share of correct outputs moved by more than ``share_tol``
    or whose worst ulp moved by more than ``ulp_rtol`` (relative), or whose NaN/inf counts
    changed; ``missing`` lists keys present in only one of the two.
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
