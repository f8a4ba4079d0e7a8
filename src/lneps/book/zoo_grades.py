r"""The kernel zoo of :mod:`lneps.book.kernel_zoo` graded against lneps's exact answer with the
two checks of :mod:`lneps.testing`: the derived per-element bound
(:func:`lneps.testing.forward_bound`) and the test across rows for a systematic scale error
(:func:`lneps.testing.scale_bias`). The chapter "Testing a kernel against the exact
answer" publishes the table.

:func:`make_case` computes one input of the grid with its exact result, bound and scale test,
once for every kernel of its op; :func:`grade_case` grades one kernel on it, :func:`grade` the
whole zoo on the whole grid, and :func:`table_text` prints the result.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass

import numpy as np

import lneps
from lneps import testing as lt
from lneps.testing import ScaleTest, forward_bound

from . import result_cache
from .kernel_zoo import BF16, F64, ZOO

__all__ = ["scaled_error", "Case", "make_case", "grade_case", "grade", "table_text"]


def _kept_in_cache(fn):
    """``fn``'s result kept by :mod:`lneps.book.result_cache`: two pages grade the same zoo on
    the same grid (15 s each), and the grades are a function of the arguments and the package's
    code alone. Formats are keyed by name and kernels by their names."""

    def spelled(name, value):
        if name == "dtypes":
            return repr([np.dtype(t).name for t in value])
        if name == "zoo":
            return repr([k.name for k in value])
        return repr(value)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        bound = inspect.signature(fn).bind(*args, **kwargs)
        bound.apply_defaults()
        parts = [f"{n}={spelled(n, v)}" for n, v in bound.arguments.items()]
        return result_cache.cached_json(f"zoo-{fn.__name__}", parts, lambda: fn(*args, **kwargs))

    return wrapper


def scaled_error(actual, exact, gamma, dtype):
    """|actual - exact| in ulp of max(|exact|, |gamma|) (1 without a gain) in ``dtype``: the
    testing tool's own metric (:func:`lneps.testing.scaled_error`, which
    :func:`lneps.testing.compare` reports), for an exact result a case computes once for all
    the kernels graded on it."""
    return lt.scaled_error(actual, exact=exact, gamma=gamma, dtype=dtype)


@dataclass
class Case:
    """One input of the grid: op, dtype, d, eps, family; x, gamma, beta; the exact result, its
    statistics, the derived bound and the systematic test's work on x."""

    op: str
    dtype: np.dtype
    d: int
    eps: float
    family: str
    x: np.ndarray
    gamma: np.ndarray | None
    beta: np.ndarray | None
    exact: np.ndarray
    stats: tuple
    bound: np.ndarray
    test: ScaleTest
    #: the probabilistic bound (``forward_bound(..., probabilistic=True)``), where asked for
    bound_p: np.ndarray | None = None


@functools.lru_cache(maxsize=8)
def _families(dtype, d, rows, seed):
    return lt.families(dtype, d, rows=rows, seed=seed)


def _checks(op, x, g, b, eps, dtype, exact, stats, kernels=None, probabilistic=False):
    """The derived bound and the test across rows on one input: for the default classes, or
    for ``kernels`` (a design's own); with ``probabilistic``, the probabilistic bound too."""
    kw = dict(x=x, gamma=g, beta=b, eps=eps, exact=exact, stats=stats)
    cls = {} if kernels is None else {"kernels": kernels}
    bound_p = forward_bound(op, **kw, **cls, probabilistic=True) if probabilistic else None
    return forward_bound(op, **kw, **cls), ScaleTest(op, dtype=dtype, **kw, **cls), bound_p


def make_case(op, dtype, d, eps, family, rows=16, seed=0, probabilistic=False):
    """The :class:`Case` for one point of the grid (None where the family does not exist);
    ``probabilistic``: with the probabilistic bound as well."""
    fam = _families(np.dtype(dtype), d, rows, seed).get(family)
    if fam is None:
        return None
    x, g, b = fam
    if op == "rms_norm":
        b = None
    x64 = x.astype(F64)
    with np.errstate(all="ignore"):
        if op == "layer_norm":
            y, mean, rstd = lneps.layer_norm(x64, g, b, eps=eps, return_stats=True)
            stats = (mean, rstd)
        else:
            y, rstd = lneps.rms_norm(x64, g, eps=eps, return_stats=True)
            stats = (rstd,)
    bound, test, bound_p = _checks(op, x, g, b, eps, dtype, y, stats, probabilistic=probabilistic)
    return Case(op, np.dtype(dtype), d, eps, family, x, g, b, y, stats, bound, test, bound_p)


def grade_case(kernel, case):
    """One kernel on one case: dict with the worst error-to-bound ratio, whether the per-element
    bound and the systematic test caught it, and the systematic test's result; where the case
    has the probabilistic bound, the worst ratio to it (``ratio_p``) and whether it caught the
    kernel (``bound_p``)."""
    with np.errstate(all="ignore"):
        a = kernel.fn(case.x, case.gamma, case.beta, case.eps)
    err = scaled_error(a, case.exact, case.gamma, case.dtype)
    bound, test, bound_p = case.bound, case.test, case.bound_p
    if kernel.classes:  # a design: graded against its own class, bound and test across rows
        c = case
        bound, test, bound_p = _checks(
            c.op,
            c.x,
            c.gamma,
            c.beta,
            c.eps,
            c.dtype,
            c.exact,
            c.stats,
            kernel.classes,
            probabilistic=bound_p is not None,
        )
    sb = test.check(a)
    out = dict(systematic=sb.verdict == "fail", scale=sb)
    for key, b in (("", bound), ("_p", bound_p)):
        if b is None:
            continue
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(err == 0, 0.0, err / b)
        out["ratio" + key] = float(np.nanmax(ratio)) if ratio.size else 0.0
        out["bound" + key] = bool((err > b).any())
    return out


@_kept_in_cache
def grade(
    dtypes=(np.float16, BF16, np.float32),
    ds=(8, 64, 768, 4096),
    eps_values=(1e-5, 1e-12),
    families=None,
    rows=16,
    zoo=ZOO,
    seed=0,
    probabilistic=False,
):
    """Grade every kernel of ``zoo`` on every case of the grid (its op; the families of
    :func:`lneps.testing.families`, all by default): a list of dicts, one per kernel, with
    name, kind, op, ``passed`` (neither check fired anywhere), ``worst_ratio`` (the largest
    error-to-bound ratio), ``caught_by`` ("bound", "systematic", both, or "" if neither) and
    ``cases``/``caught`` (how many cases, how many caught), and ``suspects`` (the systematic
    test's suspects, most frequent first). With ``probabilistic``, each row also has, against
    :func:`lneps.testing.forward_bound`'s probabilistic bound with the same test across rows,
    ``worst_ratio_p``, ``bound_p`` (cases the probabilistic bound caught) and ``caught_p``
    (cases either check caught)."""
    out = {
        k.name: dict(
            name=k.name,
            kind=k.kind,
            op=k.op,
            cases=0,
            caught=0,
            worst_ratio=0.0,
            bound=0,
            systematic=0,
            suspects={},
            worst_ratio_p=0.0,
            bound_p=0,
            caught_p=0,
        )
        for k in zoo
    }
    for op in sorted({k.op for k in zoo}):
        for dt in dtypes:
            for d in ds:
                names = families or list(_families(np.dtype(dt), d, rows, seed))
                for eps in eps_values:
                    for fam in names:
                        case = make_case(
                            op, dt, d, eps, fam, rows=rows, seed=seed, probabilistic=probabilistic
                        )
                        if case is None:
                            continue
                        for k in zoo:
                            if k.op != op:
                                continue
                            g = grade_case(k, case)
                            row = out[k.name]
                            row["cases"] += 1
                            row["worst_ratio"] = max(row["worst_ratio"], g["ratio"])
                            row["bound"] += g["bound"]
                            row["systematic"] += g["systematic"]
                            row["caught"] += g["bound"] or g["systematic"]
                            if probabilistic:
                                row["worst_ratio_p"] = max(row["worst_ratio_p"], g["ratio_p"])
                                row["bound_p"] += g["bound_p"]
                                row["caught_p"] += g["bound_p"] or g["systematic"]
                            if g["scale"].suspect:
                                row["suspects"][g["scale"].suspect] = (
                                    row["suspects"].get(g["scale"].suspect, 0) + 1
                                )
    rows_out = []
    for row in out.values():
        by = [n for n in ("bound", "systematic") if row[n]]
        row["caught_by"] = " + ".join(by)
        row["passed"] = row["caught"] == 0
        row["suspects"] = [s for s, _ in sorted(row["suspects"].items(), key=lambda kv: -kv[1])]
        rows_out.append(row)
    return rows_out


def table_text(rows):
    """The graded zoo as a plain-text table."""
    head = ["kernel", "kind", "op", "worst err/bound", "verdict", "caught by (cases)", "suspect"]
    body = []
    for r in rows:
        caught = ", ".join(f"{n} {r[n]}" for n in ("bound", "systematic") if r[n])
        body.append(
            [
                r["name"],
                r["kind"],
                r["op"],
                f"{r['worst_ratio']:.3g}",
                "pass" if r["passed"] else f"caught {r['caught']}/{r['cases']}",
                caught or "-",
                (r["suspects"][0] if r["suspects"] else ""),
            ]
        )
    widths = [max(len(str(c)) for c in col) for col in zip(head, *body)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(head, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)) for row in body]
    return "\n".join(lines)
