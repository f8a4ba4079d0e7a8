r"""Finite precision: the formats, which epsilon survives them, arithmetic rounded to a format,
and the error of a result in units in the last place (ulp).

Rounded arithmetic
    ``*_rounded`` functions and :func:`rounded_sum` round **every** operation to ``dtype``:
    the input, each partial sum, each product, the division by d, epsilon itself, the square
    root. NumPy float16 and ``ml_dtypes.bfloat16`` do each elementwise operation through
    float32 and round once; float32 has more than twice their significand bits plus two, so
    each of ``+ - * / sqrt`` comes out correctly rounded. Sums are pairwise (a tree, as GPU
    reductions and NumPy do), every partial sum stored in ``dtype``. (``np.mean`` and
    ``np.sum`` on float16 accumulate in float32 behind your back, and ml_dtypes' bfloat16
    ``sum`` is sequential, so neither is used.)

ulp
    For a format with p significand bits, :math:`\operatorname{ulp}(r) = 2^{e-p+1}` where
    :math:`2^e \le |r| < 2^{e+1}`, and never less than the smallest subnormal. Rounding to
    nearest is then within 0.5 ulp of the value it rounds.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from ._checks import as_real_float_array, check_axis, check_eps, check_float_dtype, check_positive_int

__all__ = [
    "FORMATS",
    "EPS_FATES",
    "format_info",
    "format_table",
    "significant_digits",
    "eps_fate",
    "one_plus_eps_is_one",
    "eps_survival_table",
    "rounded_sum",
    "mean_and_variance",
    "VARIANCE_METHODS",
    "layer_norm_rounded",
    "rms_norm_rounded",
    "ulp",
    "ulp_error",
    "worst_ulp_error",
    "layer_norm_exact",
    "FAMILIES",
    "family_rows",
    "worst_ulp_survey",
    "worst_over_d",
    "fmt_ulp",
    "ulp_table",
    "text_table",
]

FORMATS = ("float16", "bfloat16", "float32", "float64")
EPS_FATES = ("zero", "subnormal", "normal")
VARIANCE_METHODS = ("two-pass", "one-pass", "welford")


# --- the formats ------------------------------------------------------------------------


def _finfo(dtype):
    # ml_dtypes.finfo also answers for NumPy's own formats; np.finfo rejects bfloat16.
    return ml_dtypes.finfo(check_float_dtype(dtype))


def significant_digits(dtype) -> float:
    r"""Decimal digits carried by p significand bits (implicit bit included): :math:`p \log_{10} 2`."""
    return (_finfo(dtype).nmant + 1) * math.log10(2)


def format_info(dtype) -> dict:
    """One format's numbers as Python values: bits, significand bits p (implicit bit included),
    exponent bits, smallest subnormal, smallest normal, largest, machine epsilon (spacing
    above 1) and significant digits. Sign + exponent + stored significand bits = bits."""
    fi = _finfo(dtype)
    return {
        "name": str(check_float_dtype(dtype)),
        "bits": int(fi.bits),
        "significand_bits": int(fi.nmant) + 1,
        "exponent_bits": int(fi.nexp),
        "smallest_subnormal": float(fi.smallest_subnormal),
        "smallest_normal": float(fi.smallest_normal),
        "largest": float(fi.max),
        "machine_eps": float(fi.eps),
        "digits": significant_digits(dtype),
    }


def format_table(dtypes=FORMATS) -> list[dict]:
    """:func:`format_info` for each format, in order."""
    return [format_info(dt) for dt in dtypes]


# --- which epsilon survives -------------------------------------------------------------


def _stored(eps, dt: np.dtype) -> float:
    # eps rounded to nearest in dt, read back as a Python float.
    return float(np.asarray(check_eps(eps)).astype(dt))


def _fate(stored: float, dt: np.dtype) -> str:
    zero, subnormal, normal = EPS_FATES
    if stored == 0.0:
        return zero
    return subnormal if stored < _finfo(dt).smallest_normal else normal


def eps_fate(eps, dtype) -> str:
    """What storing ``eps`` in ``dtype`` does to it, one of :data:`EPS_FATES`: ``"zero"``
    (rounded to 0), ``"subnormal"`` (below the smallest normal) or ``"normal"``."""
    dt = check_float_dtype(dtype)
    return _fate(_stored(eps, dt), dt)


def one_plus_eps_is_one(eps, dtype) -> bool:
    """Whether ``1 + eps == 1`` when both are stored in ``dtype`` and the sum is rounded to it."""
    dt = check_float_dtype(dtype)
    one = np.ones((), dtype=dt)
    return bool(one + np.asarray(check_eps(eps)).astype(dt) == one)


def eps_survival_table(eps_values, dtypes=FORMATS) -> list[dict]:
    """For each eps: the value stored in each format, its fate and whether 1 + eps == 1."""
    dts = [check_float_dtype(dt) for dt in dtypes]
    rows = []
    for eps in eps_values:
        row = {"eps": check_eps(eps)}
        for dt in dts:
            stored = _stored(eps, dt)
            row[str(dt)] = stored
            row[f"{dt} fate"] = _fate(stored, dt)
            row[f"{dt} 1+eps==1"] = one_plus_eps_is_one(eps, dt)
        rows.append(row)
    return rows


# --- arithmetic rounded to a format -------------------------------------------------------


def rounded_sum(x, dtype, axis: int = -1) -> np.ndarray:
    """Pairwise sum along ``axis`` (kept, length 1), every partial sum rounded to ``dtype``.

    ``x`` must be real (integer or floating; bool, strings and complex are a ``TypeError``)
    and is first rounded to ``dtype``. The axis is padded with zeros to a power of two;
    adding 0 is exact, so the padding changes no rounding.
    """
    dt = check_float_dtype(dtype)
    arr = as_real_float_array(x, "x")
    a = np.moveaxis(arr.astype(dt), axis, -1)
    n = a.shape[-1]
    width = 1 << max(n - 1, 0).bit_length()
    a = np.concatenate([a, np.zeros(a.shape[:-1] + (width - n,), dtype=dt)], axis=-1)
    with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN are results here
        while a.shape[-1] > 1:
            half = a.shape[-1] // 2
            a = a[..., :half] + a[..., half:]
    return np.moveaxis(a, -1, axis)


def _divide_by_count(s: np.ndarray, n: int) -> np.ndarray:
    # s / n rounded once to s's format (n itself is not rounded: 3000 is not a bfloat16).
    # Up to float32, going through float64 (more than 2p + 2 bits) rounds the same as one
    # correctly rounded division; float64 and wider hold n exactly and divide directly.
    if _finfo(s.dtype).nmant >= 52:
        return s / np.asarray(n, dtype=s.dtype)
    return (s.astype(np.float64) / n).astype(s.dtype)


def _two_pass(x, axis):
    d = x.shape[axis]
    mu = _divide_by_count(rounded_sum(x, x.dtype, axis), d)
    v = x - mu
    return mu, _divide_by_count(rounded_sum(v * v, x.dtype, axis), d)


def _one_pass(x, axis):
    # E[x^2] - E[x]^2: two large numbers subtracted, the textbook catastrophic cancellation.
    d = x.shape[axis]
    mu = _divide_by_count(rounded_sum(x, x.dtype, axis), d)
    mean_sq = _divide_by_count(rounded_sum(x * x, x.dtype, axis), d)
    return mu, mean_sq - mu * mu


def _welford(x, axis):
    # One sweep over the d numbers, all rows at once; the count k is rounded to the format too.
    xs = np.moveaxis(x, axis, -1)
    mu = np.zeros(xs.shape[:-1], dtype=x.dtype)
    m2 = np.zeros_like(mu)
    for k in range(xs.shape[-1]):
        xk = xs[..., k]
        delta = xk - mu
        mu = mu + delta / np.asarray(k + 1).astype(x.dtype)
        m2 = m2 + delta * (xk - mu)
    d = xs.shape[-1]
    return np.expand_dims(mu, axis), np.expand_dims(_divide_by_count(m2, d), axis)


_MOMENTS = {"two-pass": _two_pass, "one-pass": _one_pass, "welford": _welford}


def mean_and_variance(x, *, dtype, method: str = "two-pass", axis: int = -1):
    r"""Mean and biased variance (divisor d) along ``axis`` (kept), every operation in ``dtype``.

    ``x`` must be real (integer or floating; bool, strings and complex are a ``TypeError``)
    and is first rounded to ``dtype``. ``method``:

    * ``"two-pass"``: :math:`\mu = \frac1d\sum x_i`, then :math:`\sigma^2 = \frac1d\sum (x_i-\mu)^2`;
    * ``"one-pass"``: :math:`\sigma^2 = \frac1d\sum x_i^2 - \mu^2` (can cancel catastrophically
      and even come out negative);
    * ``"welford"``: from :math:`\mu = M_2 = 0`, for :math:`k = 1, \dots, d` the update
      :math:`\delta = x_k - \mu`, :math:`\mu \mathrel{+}= \delta/k`,
      :math:`M_2 \mathrel{+}= \delta (x_k - \mu)`; then :math:`\sigma^2 = M_2/d`.
    """
    dt = check_float_dtype(dtype)
    if method not in _MOMENTS:
        raise ValueError(f"method must be one of {VARIANCE_METHODS}; got {method!r}")
    arr = as_real_float_array(x, "x")
    axis = check_axis(arr, axis)
    with np.errstate(over="ignore", invalid="ignore"):
        return _MOMENTS[method](arr.astype(dt), axis)


def layer_norm_rounded(x, *, eps, dtype, method: str = "two-pass", axis: int = -1) -> np.ndarray:
    r"""Layer norm :math:`(x-\mu)/\sqrt{\sigma^2+\varepsilon}` with every operation in ``dtype``.

    :math:`\mu` and the biased variance :math:`\sigma^2` (divisor d, the row length) come
    from :func:`mean_and_variance` with ``method`` (default ``"two-pass"``). No gain or bias:
    :math:`\gamma` and :math:`\beta` are applied by the caller (:func:`lneps.layer_norm`).
    ``x`` must be real. Epsilon is stored in ``dtype`` first, as a naive low-precision
    implementation does: in float16, 1e-12 becomes 0 and a constant row gives 0/0 = NaN.
    Returns ``dtype``.
    """
    dt = check_float_dtype(dtype)
    eps_d = np.asarray(check_eps(eps)).astype(dt)
    xd = as_real_float_array(x, "x").astype(dt)
    mu, var = mean_and_variance(xd, dtype=dt, method=method, axis=axis)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        return (xd - mu) / np.sqrt(var + eps_d)


def rms_norm_rounded(x, *, eps, dtype, axis: int = -1) -> np.ndarray:
    r"""RMS norm :math:`x/\sqrt{\frac1d\sum x_i^2+\varepsilon}` with every operation in ``dtype``.

    ``x`` must be real; no gain (applied by :func:`lneps.rms_norm`). Returns ``dtype``."""
    dt = check_float_dtype(dtype)
    eps_d = np.asarray(check_eps(eps)).astype(dt)
    xd = as_real_float_array(x, "x").astype(dt)
    axis = check_axis(xd, axis)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        mean_sq = _divide_by_count(rounded_sum(xd * xd, dt, axis), xd.shape[axis])
        return xd / np.sqrt(mean_sq + eps_d)


# --- error in ulp -------------------------------------------------------------------------


def ulp(r, dtype) -> np.ndarray:
    r"""Spacing of ``dtype``'s numbers at :math:`|r|` (float64 array): :math:`2^{e-p+1}`,
    :math:`2^e \le |r| < 2^{e+1}`, floored at the smallest subnormal."""
    fi = _finfo(dtype)
    mag = np.abs(np.asarray(r, dtype=np.float64))
    _, exp = np.frexp(mag)  # |r| = m 2**exp with m in [0.5, 1); frexp(0) gives exp 0
    e = np.where(mag == 0, fi.minexp, np.maximum(exp - 1, fi.minexp))
    return np.ldexp(1.0, e - fi.nmant)


def ulp_error(result, reference, dtype) -> np.ndarray:
    """``|result - reference|`` in ulps of ``dtype`` at the (finite, float64) reference.

    A NaN or infinite result where the reference is finite counts as an infinite error.
    """
    res = np.asarray(result).astype(np.float64)
    ref = np.asarray(reference, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        err = np.abs(res - ref) / ulp(ref, dtype)
    return np.where(np.isfinite(res) | ~np.isfinite(ref), err, np.inf)


def worst_ulp_error(result, reference, dtype) -> float:
    """The largest :func:`ulp_error` (a Python float; ``inf`` if any output is NaN or inf)."""
    return float(np.max(ulp_error(result, reference, dtype)))


def layer_norm_exact(x, *, eps, digits: int = 50) -> np.ndarray:
    r"""Layer norm of the rows of ``x`` (last axis) computed with ``digits`` significant decimal
    digits (mpmath), then rounded once to float64: a reference for judging float64 itself.

    :math:`\mu = \frac1d\sum x_i`, :math:`\sigma^2 = \frac1d\sum (x_i-\mu)^2` (divisor d),
    output :math:`(x_i-\mu)/\sqrt{\sigma^2+\varepsilon}`; the input values and eps are taken
    exactly as stored. Slow (pure Python): meant for a few thousand elements.
    """
    import mpmath  # only this reference needs it

    arr = as_real_float_array(x, "x")
    check_axis(arr, -1)
    eps = mpmath.mpf(check_eps(eps))
    rows = arr.astype(np.float64).reshape(-1, arr.shape[-1])
    out = np.empty(rows.shape)
    with mpmath.workdps(check_positive_int(digits, "digits")):
        for k, row in enumerate(rows):
            xs = [mpmath.mpf(float(v)) for v in row]
            mu = mpmath.fsum(xs) / len(xs)
            scale = mpmath.sqrt(mpmath.fsum((v - mu) ** 2 for v in xs) / len(xs) + eps)
            out[k] = [float((v - mu) / scale) for v in xs]
    return out.reshape(arr.shape)


# --- the families of rows that break things -------------------------------------------------

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


# --- layout -----------------------------------------------------------------------------------


def fmt_ulp(v: float) -> str:
    """An error in ulp for a table: 2 decimals below 10, whole numbers below 10^4, then
    ``1.2e+05`` style; 0, inf and NaN as ``0``, ``inf``, ``nan``."""
    v = float(v)
    if v == 0 or not math.isfinite(v):
        return f"{v:g}"
    return f"{v:.2f}" if v < 10 else (f"{v:.0f}" if v < 1e4 else f"{v:.1e}")


def ulp_table(survey: dict, methods, families=None) -> str:
    """:func:`text_table` of a :func:`worst_ulp_survey` result: one row per family (default:
    the survey's, in its order), one column per method, each cell :func:`worst_over_d`
    formatted by :func:`fmt_ulp`."""
    methods = list(methods)
    if families is None:
        families = list(dict.fromkeys(f for _, f, _ in survey))
    return text_table(["family"] + methods,
                      [[fam] + [fmt_ulp(worst_over_d(survey, m, fam)) for m in methods] for fam in families])


def text_table(header, rows) -> str:
    """A fixed-width text table: ``header`` and each row are sequences of strings."""
    cells = [list(map(str, header))] + [list(map(str, r)) for r in rows]
    widths = [max(len(row[j]) for row in cells) for j in range(len(header))]
    lines = ["  ".join(c.rjust(w) if j else c.ljust(w) for j, (c, w) in enumerate(zip(row, widths)))
             for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in lines)
