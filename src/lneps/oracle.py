r"""The exact reference: normalization in exact arithmetic, rounded once to a format.

Every input (``x``, ``gamma``, ``beta``, ``eps``) is taken as the exact binary number it
stores. For one row of d numbers the statistics are exact integers or rationals,

.. math::

    S = \sum_j x_j, \qquad t_i = d\,x_i - S = d\,v_i, \qquad T = \sum_j t_j^2 = d^2 \sum_j v_j^2,

so that :math:`v_i/\sqrt{q+\varepsilon} = t_i/\sqrt{T/d + d^2\varepsilon}` with no division by
d before the square root. Every result has the form :math:`a/\sqrt{s} + b` with rational
a, b and s > 0 (layer norm: :math:`a = \gamma_i t_i`, :math:`s = T/d + d^2\varepsilon`,
:math:`b = \beta_i`; RMS norm: :math:`a = \gamma_i x_i`, :math:`s = \frac1d\sum_j x_j^2 +
\varepsilon`, b = 0), and :func:`round_quotient` rounds such a number to a format exactly:
round to nearest, ties to even, with subnormals and overflow to infinity, decided by integer
arithmetic alone (no floating-point operation takes part in the decision).

Two ways in:

* :func:`layer_norm_exact` and :func:`rms_norm_exact`: pure Python rationals, element by
  element. Slow (about 20 µs an element); for small inputs and for settling single elements.
* :func:`layer_norm_rounded` and :func:`rms_norm_rounded`: the same correctly rounded results,
  for millions of elements. The row statistics are still exact (NumPy arrays of Python
  integers); each element is first estimated in float64 with a proven error bound, and only an
  element whose bound reaches a rounding boundary of the format is rounded exactly by
  :func:`round_quotient`.
  :func:`layer_norm_value` and :func:`rms_norm_value` return those float64 estimates and
  bounds: the exact real value to about 8 float64 ulp, for measuring other methods' errors.

None of this shares code with the package's fast path (:mod:`lneps.norms`), so it can judge it.
"""

from __future__ import annotations

from fractions import Fraction
from math import isqrt

import ml_dtypes
import numpy as np

from ._checks import as_real_float_array, check_eps, check_float_dtype

__all__ = [
    "ExactFormat",
    "exact_format",
    "round_rational",
    "round_quotient",
    "round_float64",
    "layer_norm_exact",
    "rms_norm_exact",
    "layer_norm_value",
    "rms_norm_value",
    "layer_norm_rounded",
    "rms_norm_rounded",
]

_U = 2.0**-53  # unit roundoff of float64


class ExactFormat:
    """A binary format from first principles: p significand bits (the implicit one included),
    normal exponents ``emin..emax``. ``quantum(e)`` is the spacing in the binade
    :math:`[2^e, 2^{e+1})`, never below the smallest subnormal :math:`2^{e_{\\min}-p+1}`."""

    def __init__(self, name: str, p: int, emin: int, emax: int):
        self.name, self.p, self.emin, self.emax = name, p, emin, emax
        self.largest = Fraction((2**p - 1) * 2 ** (emax - p + 1))

    def __repr__(self):
        return f"ExactFormat({self.name!r}, p={self.p}, emin={self.emin}, emax={self.emax})"


def exact_format(dtype) -> ExactFormat:
    """The :class:`ExactFormat` of a real floating dtype, read from ``ml_dtypes.finfo``."""
    dt = check_float_dtype(dtype)
    fi = ml_dtypes.finfo(dt)
    return ExactFormat(str(dt), int(fi.nmant) + 1, int(fi.minexp), int(fi.maxexp) - 1)


def _binade(a: Fraction) -> int:
    """The e with 2**e <= a < 2**(e+1), for a rational a > 0."""
    e = a.numerator.bit_length() - a.denominator.bit_length()
    # 2**e <= a  <=>  2**e * den <= num (shifts, no floating point)
    if (a.denominator << e if e >= 0 else a.denominator) > (a.numerator if e >= 0 else a.numerator << -e):
        e -= 1
    return e


def round_rational(value, fmt: ExactFormat) -> float:
    """The format's nearest number to the rational ``value`` (ties to even), as a Python float.

    Values whose rounding exceeds the largest finite number give ``±inf``, as IEEE 754
    round-to-nearest does. The decision is made in integers.
    """
    v = Fraction(value)
    if v == 0:
        return 0.0
    a = abs(v)
    q = max(_binade(a), fmt.emin) - fmt.p + 1  # exponent of the spacing at a (>= -1074)
    num, den = a.numerator, a.denominator
    if q >= 0:
        den <<= q
    else:
        num <<= -q
    n, r = divmod(num, den)
    if 2 * r > den or (2 * r == den and n % 2 == 1):
        n += 1
    if Fraction(n) * Fraction(2) ** q > fmt.largest:
        return float("inf") if v > 0 else float("-inf")
    out = float(n) * 2.0**q  # n <= 2**p and q >= -1074: exact
    return out if v > 0 else -out


def _next_up(value: float, fmt: ExactFormat) -> float:
    """The format number just above a finite format number (``inf`` above the largest)."""
    v = Fraction(value)
    if v >= fmt.largest:
        return float("inf")
    if v < 0:
        return -_next_down(-value, fmt)
    e = max(_binade(v), fmt.emin) if v > 0 else fmt.emin
    return float(v + Fraction(2) ** (e - fmt.p + 1))


def _next_down(value: float, fmt: ExactFormat) -> float:
    v = Fraction(value)
    if v <= 0:
        return -_next_up(-value, fmt)
    e = max(_binade(v), fmt.emin)
    step = Fraction(2) ** (e - fmt.p + 1)
    if v == Fraction(2) ** e and e > fmt.emin:
        step /= 2  # below a power of two (above the subnormals) the spacing halves
    return float(v - step)


def _boundary(lo: float, hi: float, fmt: ExactFormat):
    """The rounding boundary between adjacent results lo < hi, or None if not adjacent."""
    if np.isinf(lo) and np.isinf(hi):
        return None
    if np.isinf(hi):  # largest -> +inf: half a top spacing above the largest number
        return fmt.largest + Fraction(2) ** (fmt.emax - fmt.p) if Fraction(lo) == fmt.largest else None
    if np.isinf(lo):
        return -(fmt.largest + Fraction(2) ** (fmt.emax - fmt.p)) if Fraction(hi) == -fmt.largest else None
    return (Fraction(lo) + Fraction(hi)) / 2 if _next_up(lo, fmt) == hi else None


def _is_even(value: float, fmt: ExactFormat) -> bool:
    """Whether a format number's last significand bit is 0 (infinity counts as even)."""
    v = abs(Fraction(value)) if np.isfinite(value) else None
    if v is None or v == 0:
        return True
    q = max(_binade(v), fmt.emin) - fmt.p + 1
    return (v / Fraction(2) ** q).numerator % 2 == 0


def _sign_of_difference(a: Fraction, s: Fraction, c: Fraction) -> int:
    """The sign of :math:`a/\\sqrt{s} - c` for rationals a, c and s > 0, exactly."""
    if a == 0:
        return (c < 0) - (c > 0)
    if (a > 0) != (c > 0) or c == 0:
        return 1 if a > 0 else -1
    # Same signs: compare squares, a^2/s against c^2, and flip for negatives.
    lhs, rhs = a * a, c * c * s
    cmp = (lhs > rhs) - (lhs < rhs)
    return cmp if a > 0 else -cmp


def round_quotient(a, s, b, fmt: ExactFormat, bits: int = 96) -> float:
    r"""The format's nearest number to :math:`a/\sqrt{s} + b` (rationals a, b; s >= 0), exactly.

    :math:`\sqrt s` is bracketed by integer square roots to ``bits`` bits; when both ends of
    the bracket round to the same number, sign included, that is the answer. Otherwise the one
    rounding boundary m between the two results decides: the sign of :math:`a/\sqrt s + b - m`
    is computed exactly by comparing squares, and an exact tie goes to the neighbour whose last
    significand bit is 0. An exact 0 is +0 (IEEE 754's sign of an exact zero sum in round to
    nearest); a nonzero value that rounds to 0 keeps its sign. s = 0 gives NaN for a = 0 (the
    0/0 of a constant row with ε = 0) and ±inf otherwise.
    """
    a, s, b = Fraction(a), Fraction(s), Fraction(b)
    if s < 0:
        raise ValueError(f"s must be >= 0; got {s}")
    if s == 0:
        return float("nan") if a == 0 else (float("inf") if a > 0 else float("-inf"))
    if a == 0:
        return round_rational(b, fmt)
    sign = _sign_of_difference(a, s, -b)  # the sign of the value itself
    if sign == 0:
        return 0.0
    while True:
        # sqrt(s) = sqrt(N D)/D lies in [f, f + 1] / (D 2^k) with f = isqrt(N D 4^k) >= 2^k.
        N, D = s.numerator, s.denominator
        k = bits + 2
        f = isqrt((N * D) << (2 * k))
        ends = sorted([a * Fraction(D << k, f) + b, a * Fraction(D << k, f + 1) + b])
        lo, hi = round_rational(ends[0], fmt), round_rational(ends[1], fmt)
        if lo == hi:
            return lo if lo != 0 else (0.0 if sign > 0 else -0.0)
        m = _boundary(lo, hi, fmt)
        if m is not None:
            side = _sign_of_difference(a, s, m - b)
            if side:
                return hi if side > 0 else lo
            return lo if _is_even(lo, fmt) else hi
        bits *= 2  # the bracket spans more than one boundary: tighten it


# --- exact rows -----------------------------------------------------------------------------


def _rows(x, name="x") -> np.ndarray:
    arr = as_real_float_array(x, name)
    if arr.ndim == 0 or arr.shape[-1] == 0:
        raise ValueError(f"{name} must have a non-empty last axis; got shape {arr.shape}")
    x64 = arr.astype(np.float64)
    if not np.all(np.isfinite(x64)):
        raise ValueError(f"{name} must be finite: the exact reference is defined for real numbers")
    return x64


def _affine(param, shape, name) -> np.ndarray | None:
    if param is None:
        return None
    p = as_real_float_array(param, name).astype(np.float64)
    try:
        return np.broadcast_to(p, shape)
    except ValueError:
        raise ValueError(f"{name} of shape {p.shape} does not broadcast to x's shape {shape}") from None


def _exact_layer_norm_row(row, g, b, eps: Fraction, fmt: ExactFormat) -> list[float]:
    xs = [Fraction(float(v)) for v in row]
    d = len(xs)
    S = sum(xs)
    t = [d * v - S for v in xs]
    s = sum(ti * ti for ti in t) / d + d * d * eps
    return [round_quotient((1 if g is None else Fraction(float(g[i]))) * t[i], s,
                           0 if b is None else Fraction(float(b[i])), fmt) for i in range(d)]


def layer_norm_exact(x, gamma=None, beta=None, *, eps, dtype=None) -> np.ndarray:
    r"""Layer norm over the last axis, exactly, each element rounded once to ``dtype``.

    :math:`\gamma_i (x_i-\mu)/\sqrt{\sigma^2+\varepsilon} + \beta_i` with the biased variance
    (divisor d). ``dtype`` defaults to x's own floating dtype (float64 for integers); gamma and
    beta broadcast to x's shape. Inputs must be finite. Returns float64 holding the rounded
    values (so bfloat16 results need no conversion to be compared).
    """
    x64 = _rows(x)
    fmt = exact_format(_out_dtype(x, dtype))
    e = Fraction(check_eps(eps))
    g, b = _affine(gamma, x64.shape, "gamma"), _affine(beta, x64.shape, "beta")
    flat = x64.reshape(-1, x64.shape[-1])
    gf = None if g is None else g.reshape(flat.shape)
    bf = None if b is None else b.reshape(flat.shape)
    out = [_exact_layer_norm_row(r, None if gf is None else gf[k], None if bf is None else bf[k], e, fmt)
           for k, r in enumerate(flat)]
    return np.array(out, dtype=np.float64).reshape(x64.shape)


def rms_norm_exact(x, gamma=None, *, eps, dtype=None) -> np.ndarray:
    r"""RMS norm :math:`\gamma_i x_i/\sqrt{\frac1d\sum_j x_j^2+\varepsilon}` over the last axis,
    exactly, each element rounded once to ``dtype`` (as :func:`layer_norm_exact`)."""
    x64 = _rows(x)
    fmt = exact_format(_out_dtype(x, dtype))
    e = Fraction(check_eps(eps))
    g = _affine(gamma, x64.shape, "gamma")
    flat = x64.reshape(-1, x64.shape[-1])
    gf = None if g is None else g.reshape(flat.shape)
    out = []
    for k, row in enumerate(flat):
        xs = [Fraction(float(v)) for v in row]
        s = sum(v * v for v in xs) / len(xs) + e
        out.append([round_quotient((1 if gf is None else Fraction(float(gf[k, i]))) * v, s, 0, fmt)
                    for i, v in enumerate(xs)])
    return np.array(out, dtype=np.float64).reshape(x64.shape)


# --- exact statistics for many rows, float64 estimates, exact settling ----------------------


def _integers(x64: np.ndarray):
    """Each row as exact integers: ``x = X * 2**E0`` with X an object array of Python ints."""
    m, e = np.frexp(x64)
    M = np.ldexp(m, 53).astype(np.int64)  # exact: |m| < 1 carries 53 bits
    E = np.where(M == 0, np.iinfo(np.int64).max, e.astype(np.int64) - 53)
    E0 = E.min(axis=-1, keepdims=True)
    E0 = np.where(E0 == np.iinfo(np.int64).max, 0, E0)  # an all-zero row
    shift = np.where(M == 0, 0, E - E0)
    return np.left_shift(M.astype(object), shift.astype(object)), E0[:, 0]


def _reciprocal_root(s: Fraction) -> float:
    """:math:`1/\\sqrt s` for a rational s > 0, within :math:`u + 2^{-64}` relative."""
    N, D = s.numerator, s.denominator
    # 1/sqrt(N/D) = sqrt(D N)/N, and f = isqrt(D N 4^64) >= 2^64 has relative error <= 2^-64.
    r = Fraction(isqrt((D * N) << 128), N << 64)
    # beyond float64 (a constant row at the top of the range with a tiny eps): inf; those
    # elements are settled exactly (their numerator is 0, or their bound infinite)
    return float(r) if r < 2**1024 else float("inf")


class _Rows:
    """Exact statistics of the rows of a 2-D float64 array, in integer units.

    ``num`` holds the integers whose quotient by :math:`\\sqrt{s}` is the normalized value:
    layer norm :math:`t_i = d X_i - \\sum_j X_j`, RMS norm :math:`X_i`, where x = X 2^E0.
    The scale cancels: :math:`t_i 2^{E_0}/\\sqrt{2^{2E_0} s} = t_i/\\sqrt{s}` with
    :math:`s = T/d + d^2\\varepsilon\\,2^{-2E_0}` (layer norm) or
    :math:`\\frac1d\\sum_j X_j^2 + \\varepsilon\\,2^{-2E_0}` (RMS norm), exact rationals.
    """

    def __init__(self, flat: np.ndarray, eps: Fraction, kind: str):
        d = flat.shape[1]
        X, E0 = _integers(flat)
        if kind == "layer_norm":
            num = X * d - X.sum(axis=1)[:, None]
            T, ecoef = (num * num).sum(axis=1), d * d * eps
        else:
            num = X
            T, ecoef = (X * X).sum(axis=1), eps
        self.num = num
        self.s = [Fraction(int(Tk), d) + ecoef * Fraction(2) ** (-2 * int(k)) for Tk, k in zip(T, E0)]


def _value(x, gamma, beta, eps, kind):
    x64 = _rows(x)
    shape = x64.shape
    flat = x64.reshape(-1, shape[-1])
    rows = _Rows(flat, Fraction(check_eps(eps)), kind)
    g, b = _affine(gamma, shape, "gamma"), _affine(beta, shape, "beta")
    g = None if g is None else g.reshape(flat.shape)
    b = None if b is None else b.reshape(flat.shape)
    num = rows.num
    # Rows whose integers pass float64's range (float64 input spanning 2^1000) are settled
    # exactly, element by element; 16- and 32-bit input never gets near.
    wide = np.array([int(m).bit_length() > 1000 for m in np.abs(num).max(axis=1)])
    with np.errstate(over="ignore", invalid="ignore"):
        r = np.array([_reciprocal_root(sk) if sk > 0 else np.inf for sk in rows.s])
        tf = np.where(wide[:, None], 0, num).astype(np.float64)  # each rounded once: u
        a = tf * r[:, None]  # r within u + 2^-64, the product rounds once more
        rel = 3 * _U + 2.0**-64
        if g is not None:
            a = a * g
            rel += _U
        a = np.where(num == 0, 0.0, a)  # exactly 0, even where s = 0 (settled below)
        y = a if b is None else a + b
        # The estimate of a is within rel |a|; the sum with beta rounds once (u |y|). A factor
        # 2 covers the rounding of the bound itself.
        bound = 2.0 * (rel * np.abs(a) + (0.0 if b is None else _U * np.abs(y))) + 2.0**-1074
    undefined = np.array([sk == 0 for sk in rows.s])[:, None] & (num == 0)  # 0/0
    y = np.where(undefined, np.nan, y)
    bound = np.where(wide[:, None] | ~np.isfinite(y), np.inf, bound)
    bound = np.where(undefined, 0.0, bound)
    return y.reshape(shape), bound.reshape(shape), (flat.shape, g, b, rows)


def layer_norm_value(x, gamma=None, beta=None, *, eps):
    r"""float64 estimates of the exact layer norm over the last axis, and error bounds.

    Returns ``(value, bound)`` with :math:`|\text{value} - y| \le \text{bound}` for the exact
    real result y of every element (``bound`` is ``inf`` where the estimate is not usable,
    NaN values mark 0/0). The row statistics are exact integers; each element costs a few
    float64 operations, so ``bound`` is about 8 float64 ulp of :math:`|\gamma_i u_i|`, plus
    the rounding of the sum with beta.
    """
    return _value(x, gamma, beta, eps, "layer_norm")[:2]


def rms_norm_value(x, gamma=None, *, eps):
    r"""float64 estimates of the exact RMS norm over the last axis, and error bounds (as
    :func:`layer_norm_value`)."""
    return _value(x, gamma, None, eps, "rms_norm")[:2]


def round_float64(y, dtype) -> np.ndarray:
    """Round float64 values to ``dtype``'s nearest number (ties to even) from first principles:
    divide by the spacing (a power of two), ``np.rint`` (ties to even), multiply back, and
    overflow to ``inf`` past the largest number. Returns float64."""
    fmt = exact_format(dtype)
    y = np.asarray(y, dtype=np.float64)
    a = np.abs(y)
    _, ex = np.frexp(a)
    q = np.maximum(ex - 1, fmt.emin) - fmt.p + 1
    with np.errstate(over="ignore", invalid="ignore"):
        r = np.ldexp(np.rint(np.ldexp(a, -q)), q)
        r = np.where((r > float(fmt.largest)) | np.isinf(a), np.inf, r)
    return np.where(np.isnan(y), np.nan, np.copysign(r, y))


def _out_dtype(x, dtype) -> np.dtype:
    if dtype is not None:
        return check_float_dtype(dtype)
    arr = np.asarray(x)
    return arr.dtype if arr.dtype.kind == "f" or arr.dtype == ml_dtypes.bfloat16 else np.dtype(np.float64)


def _correctly_rounded(x, gamma, beta, eps, dtype, kind):
    """``(out, n)``: every element correctly rounded to the output format (float64 holding
    it), from its float64 estimate and bound where both ends round alike, by
    :func:`round_quotient` where they do not; n is how many were rounded exactly so."""
    value, bound, (shape2, g, b, rows) = _value(x, gamma, beta, eps, kind)
    dt = _out_dtype(x, dtype)
    fmt = exact_format(dt)
    v, bd = value.reshape(shape2), bound.reshape(shape2)
    with np.errstate(over="ignore", invalid="ignore"):
        lo, hi = round_float64(v - bd, dt), round_float64(v + bd, dt)
    out = np.where(((lo == hi) & (np.signbit(lo) == np.signbit(hi))) | np.isnan(v), lo, np.nan)
    hard = np.argwhere(np.isnan(out) & ~np.isnan(v))
    for i, j in hard:
        a = Fraction(int(rows.num[i, j])) * (1 if g is None else Fraction(float(g[i, j])))
        out[i, j] = round_quotient(a, rows.s[i], 0 if b is None else Fraction(float(b[i, j])), fmt)
    return out.reshape(value.shape), len(hard)


def layer_norm_rounded(x, gamma=None, beta=None, *, eps, dtype=None, return_exact_count=False):
    r"""The correctly rounded layer norm over the last axis, for many elements.

    Element by element the format's nearest number (ties to even) to the exact
    :math:`\gamma_i (x_i-\mu)/\sqrt{\sigma^2+\varepsilon} + \beta_i` (biased variance), in
    ``dtype`` (default: x's own floating dtype, float64 for integers). Exact integer row
    statistics, a float64 estimate with a proven bound (:func:`layer_norm_value`), and
    :func:`round_quotient` for every element whose bound reaches a rounding boundary.
    Returns float64 holding the rounded values; with ``return_exact_count=True`` also the
    number of elements rounded exactly by :func:`round_quotient`.
    """
    out, hard = _correctly_rounded(x, gamma, beta, eps, dtype, "layer_norm")
    return (out, hard) if return_exact_count else out


def rms_norm_rounded(x, gamma=None, *, eps, dtype=None, return_exact_count=False):
    r"""The correctly rounded RMS norm over the last axis, for many elements (as
    :func:`layer_norm_rounded`)."""
    out, hard = _correctly_rounded(x, gamma, None, eps, dtype, "rms_norm")
    return (out, hard) if return_exact_count else out


# The names before this version, for the callers not yet moved to the new ones
# (lneps.book.survey.oracle_survey): not in __all__, so that they shadow nothing.
