r"""The families of rows that break low-precision layer norms, and surveys of worst errors.

A survey draws rows from each family at each row length d, stores them in a format, and
measures every method's worst error in ulp (:mod:`lneps.ulp`) against a reference.
"""

from __future__ import annotations

import numpy as np

from ._checks import check_float_dtype, check_positive_int
from .ulp import worst_ulp_error

__all__ = [
    "FAMILIES",
    "family_rows",
    "worst_ulp_survey",
    "worst_over_d",
]


# name: (mean, standard deviation); "constant" rows repeat one N(0, 10) draw across the row.
FAMILIES = {
    "N(0,1)": (0.0, 1.0),
    "mean 1000, sd 1": (1000.0, 1.0),
    "mean 6e4, sd 8": (6e4, 8.0),
    "sd 300": (0.0, 300.0),
    "sd 1e-3": (0.0, 1e-3),
    "sd 1e-4": (0.0, 1e-4),
    "constant": (0.0, 10.0),
}

def family_rows(name: str, rng: np.random.Generator, n: int, d: int, dtype) -> np.ndarray:
    """``n`` rows of ``d`` numbers from family ``name`` (:data:`FAMILIES`), stored in ``dtype``.

    ``rng`` must be a ``np.random.Generator``; ``n`` and ``d`` integers >= 1."""
    if name not in FAMILIES:
        raise ValueError(f"name must be one of {list(FAMILIES)}; got {name!r}")
    _check_rng(rng)
    n, d = check_positive_int(n, "n"), check_positive_int(d, "d")
    dt = check_float_dtype(dtype)
    mean, sd = FAMILIES[name]
    if name == "constant":
        x = np.repeat(rng.normal(mean, sd, size=(n, 1)), d, axis=1)
    else:
        x = rng.normal(mean, sd, size=(n, d))
    return x.astype(dt)

def _check_rng(rng) -> None:
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator (np.random.default_rng(seed)); got {rng!r}")

def worst_ulp_survey(methods: dict, reference, *, dtype, ds, rng, families=tuple(FAMILIES),
                     elements: int = 32768) -> dict:
    """Worst ulp error of each method on each family at each row length d.

    For every family and d, ``elements // d`` rows are drawn (:func:`family_rows`, stored in
    ``dtype``) and every ``methods[name](x)`` is compared with ``reference(x)`` in ulps of
    ``dtype``. Returns ``{(name, family, d): worst}``, in the order family, d, method.
    ``ds`` is a non-empty sequence of integers >= 1 and ``elements`` an integer >= 1.
    """
    if not isinstance(methods, dict) or not methods:
        raise TypeError(f"methods must be a non-empty dict of name: function; got {methods!r}")
    check_float_dtype(dtype)
    _check_rng(rng)
    if isinstance(ds, (str, bytes)) or not hasattr(ds, "__iter__"):
        raise TypeError(f"ds must be a sequence of row lengths; got {ds!r}")
    ds = [check_positive_int(d, "each d in ds") for d in ds]
    if not ds:
        raise ValueError("ds must hold at least one row length")
    elements = check_positive_int(elements, "elements")
    worst = {}
    for family in families:
        for d in ds:
            x = family_rows(family, rng, max(elements // d, 1), d, dtype)
            ref = reference(x)
            for name, method in methods.items():
                worst[name, family, d] = worst_ulp_error(method(x), ref, dtype)
    return worst

def worst_over_d(survey: dict, method: str, family: str) -> float:
    """The largest error of ``method`` on ``family`` over every d in a
    :func:`worst_ulp_survey` result (``KeyError`` if the pair is not in it)."""
    values = [v for (m, f, _), v in survey.items() if (m, f) == (method, family)]
    if not values:
        raise KeyError(f"no entry for method {method!r} and family {family!r} in the survey")
    return max(values)
