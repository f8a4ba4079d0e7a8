r"""The families of rows that break low-precision layer norms, and surveys of their errors.

The families are :mod:`lneps.families`'s (:data:`lneps.families.SURVEYED` names the ones
surveyed). A survey
draws rows from each family at each row length d, stores them in a format, and
measures every method's error in ulp (:func:`lneps.formats.ulp`) against the exact oracle
(:mod:`lneps.oracle`) with :func:`oracle_survey`: the error against the exact real value, whether each output is the
correctly rounded one, and the elements whose exact value is 0, counted apart (their ulp is
the smallest subnormal, so any other answer would count as about 1e37 ulp).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import families as registry
from .._checks import check_float_dtype, check_positive_int
from ..families import SURVEYED
from ..formats import ulp

__all__ = [
    "SURVEYED",
    "family_rows",
    "Accuracy",
    "accuracy",
    "combine",
    "oracle_survey",
    "float64_two_pass",
    "layer_norm_methods",
]




def family_rows(name: str, rng: np.random.Generator, n: int, d: int, dtype) -> np.ndarray:
    """``n`` rows of ``d`` numbers from family ``name`` of :data:`lneps.families.FAMILIES` (the
    surveys draw :data:`lneps.families.SURVEYED`), stored in ``dtype``: :func:`lneps.families.draw`'s ``x``.

    ``rng`` must be a ``np.random.Generator``; ``n`` and ``d`` integers >= 1."""
    family = registry.get(name)
    _check_rng(rng)
    n, d = check_positive_int(n, "n"), check_positive_int(d, "d")
    return family.draw(rng, d, n, check_float_dtype(dtype)).x

def _check_rng(rng) -> None:
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator (np.random.default_rng(seed)); got {rng!r}")

@dataclass(frozen=True)
class Accuracy:
    r"""One method's accuracy on a set of elements, judged by the exact oracle.

    ``worst_ulp`` is the largest :math:`|y - r|/\operatorname{ulp}(r)` over the elements whose
    exact value r is not 0 (``inf`` if one of them came out NaN or inf); ``worst_scaled`` the
    largest :math:`|y - r|/\operatorname{ulp}(\max(|r|, 1))` over all the elements, the error in
    ulp of the output's scale as :func:`lneps.testing.compare` measures it without a gain
    (its ``max_ulp_scaled``; ``inf`` likewise); ``correct`` the
    share of all elements equal to the correctly rounded value; ``zeros`` the number of
    elements whose exact value is 0, and ``zeros_missed`` how many of those came out nonzero;
    ``nonfinite`` the NaN and inf outputs; ``elements`` the count; ``beyond`` how many
    elements are further off than any correct two-pass float32 kernel can be
    (:func:`lneps.testing.two_pass_bound`), None where that bound does not apply (RMS norm,
    float64).
    """

    worst_ulp: float
    correct: float
    worst_scaled: float
    zeros: int
    zeros_missed: int
    nonfinite: int
    elements: int
    beyond: int | None = None


def accuracy(result, value, bound, rounded, dtype, limit=None) -> Accuracy:
    """:class:`Accuracy` of ``result`` from the oracle's float64 ``value`` of the exact answer,
    its error ``bound`` and the correctly rounded answer ``rounded`` (all the same shape);
    ``limit``, if given, is a correct kernel's largest scaled error per element."""
    res = np.asarray(result).astype(np.float64)
    value, bound, rounded = (np.asarray(a, dtype=np.float64) for a in (value, bound, rounded))
    exact_zero = (value == 0) & (bound <= 2.0**-1070)
    finite = np.isfinite(res)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.where(finite, np.abs(res - value) / ulp(value, dtype), np.inf)
        scaled = np.where(finite, np.abs(res - value) / ulp(np.fmax(np.abs(value), 1.0), dtype), np.inf)
    err = err[~exact_zero]
    same = (res == rounded) | (np.isnan(res) & np.isnan(rounded))
    return Accuracy(
        worst_ulp=float(err.max()) if err.size else 0.0,
        correct=float(same.mean()),
        worst_scaled=float(scaled.max()) if scaled.size else 0.0,
        zeros=int(exact_zero.sum()),
        zeros_missed=int((exact_zero & (res != 0)).sum()),
        nonfinite=int((~finite).sum()),
        elements=int(res.size),
        beyond=None if limit is None else int(np.sum(scaled > np.asarray(limit))),
    )


def combine(survey: dict, method: str, family: str | None = None) -> Accuracy:
    """One :class:`Accuracy` for ``method`` over every d (and every family, if ``family`` is
    None) of an :func:`oracle_survey` result: the worst of the worst errors, the share correct
    over all the elements, the counts added. ``KeyError`` if there is no such entry."""
    parts = [a for (m, f, _), a in survey.items() if m == method and (family is None or f == family)]
    if not parts:
        raise KeyError(f"no entry for method {method!r} and family {family!r} in the survey")
    n = sum(a.elements for a in parts)
    return Accuracy(
        worst_ulp=max(a.worst_ulp for a in parts),
        correct=sum(a.correct * a.elements for a in parts) / n,
        worst_scaled=max(a.worst_scaled for a in parts),
        zeros=sum(a.zeros for a in parts),
        zeros_missed=sum(a.zeros_missed for a in parts),
        nonfinite=sum(a.nonfinite for a in parts),
        elements=n,
        beyond=None if any(a.beyond is None for a in parts) else sum(a.beyond for a in parts),
    )


def oracle_survey(methods: dict, *, eps, dtype, ds, rng, kind: str = "layer", families=SURVEYED,
                  elements: int = 8192, counts: dict | None = None) -> dict:
    """Every method's :class:`Accuracy` on each family at each row length d, against the exact
    oracle (:func:`lneps.oracle.layer_norm_rounded` or, with ``kind="rms"``, ``rms_norm_rounded``).

    For every family and d, ``elements // d`` rows are drawn (:func:`family_rows`, stored in
    ``dtype``); ``methods[name](x)`` must return the normalized rows. Returns
    ``{(name, family, d): Accuracy}``, with ``beyond`` counted against
    :func:`lneps.testing.two_pass_bound` for layer norm in 16- and 32-bit formats. ``counts``
    (a dict), if given, accumulates ``elements`` and ``exact``: how many the oracle had to decide in exact arithmetic.
    """
    from .. import oracle  # the oracle is slow to import for nothing else
    from .. import testing

    if kind not in ("layer", "rms"):
        raise ValueError(f"kind must be 'layer' or 'rms'; got {kind!r}")
    if not isinstance(methods, dict) or not methods:
        raise TypeError(f"methods must be a non-empty dict of name: function; got {methods!r}")
    dt = check_float_dtype(dtype)
    _check_rng(rng)
    ds = [check_positive_int(d, "each d in ds") for d in ds]
    value_of = oracle.layer_norm_value if kind == "layer" else oracle.rms_norm_value
    rounded_of = oracle.layer_norm_rounded if kind == "layer" else oracle.rms_norm_rounded
    out = {}
    for family in families:
        for d in ds:
            x = family_rows(family, rng, max(check_positive_int(elements, "elements") // d, 1), d, dt)
            value, bound = value_of(x, eps=eps)
            rounded, exact = rounded_of(x, eps=eps, dtype=dt, return_exact_count=True)
            if counts is not None:
                counts["elements"] = counts.get("elements", 0) + x.size
                counts["exact"] = counts.get("exact", 0) + exact
            # what a correct two-pass float32 kernel can reach, element by element (layer norm)
            limit = testing.two_pass_bound(x, eps=eps) if kind == "layer" and dt.itemsize < 8 else None
            for name, method in methods.items():
                out[name, family, d] = accuracy(method(x), value, bound, rounded, dt, limit)
    return out



def float64_two_pass(x, eps=1e-5) -> np.ndarray:
    """Layer norm of the rows of ``x`` from NumPy's float64 mean and variance, rounded once to
    x's format (for bfloat16 through ml_dtypes, whose conversion goes through float32)."""
    x = np.asarray(x)
    x64 = x.astype(np.float64)
    v = x64 - x64.mean(axis=-1, keepdims=True)
    return (v / np.sqrt(x64.var(axis=-1, keepdims=True) + eps)).astype(x.dtype)


def layer_norm_methods(low, eps=1e-5) -> dict:
    """The ways of computing a layer norm that the chapter "Epsilon in finite precision"
    compares, each a function of rows stored in ``low`` returning them in ``low``: the naive
    layer (every operation in ``low``), float32 statistics with the one-pass, two-pass and
    sequential Welford variance, float64 two-pass statistics rounded once, and lneps's default
    (exact, rounded once)."""
    from ..norms import layer_norm
    from ..naive import layer_norm_naive

    low = check_float_dtype(low)

    def in_f32(method):  # float32 statistics, the output rounded to low
        return lambda x: layer_norm_naive(x, eps=eps, dtype=np.float32, method=method).astype(low)

    return {
        f"naive {low.name}": lambda x: layer_norm(x, eps=eps, compute_dtype=low),
        "float32 one-pass": in_f32("one-pass"),
        "float32 two-pass": in_f32("two-pass"),
        "float32 Welford": in_f32("welford"),
        "float64 two-pass": lambda x: float64_two_pass(x, eps),
        "lneps default": lambda x: layer_norm(x, eps=eps),
    }
