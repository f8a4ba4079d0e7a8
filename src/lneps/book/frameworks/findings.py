"""What the book reads out of the stored measurements (:func:`lneps.book.frameworks.load`):
result rows selected and pooled (:func:`find`, :func:`aggregate`, :func:`by_family`), the
chapter's table of every framework, operation, format and family (:func:`summary_rows`), and the
epsilon each kernel is inferred to use (:func:`eps_verdict`).
"""

from __future__ import annotations

import math

from ... import families as registry
from .measured import DTYPES

__all__ = ["find", "aggregate", "by_family", "SUMMARY_FAMILIES", "summary_rows", "eps_verdict"]


def _kind(family: str) -> str | None:
    """The kind of a stored row's family (:data:`lneps.families.KINDS`), None if unknown."""
    entry = registry.FAMILIES.get(family)
    return entry.kind if entry else None


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


# --- the chapter's tables -------------------------------------------------------------------

#: The families of :func:`summary_rows`: the stress families, then the hand-made rows pooled.
SUMMARY_FAMILIES = registry.SURVEYED + ("hand",)


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
