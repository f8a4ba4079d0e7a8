r"""Floating-point formats, and what storing epsilon in one does to it.

The one registry of the formats lneps computes exactly (:data:`REGISTRY`, :func:`format_of`):
float16, bfloat16, float32 and float64, each a :class:`Format` with its precision p
(significand bits, the implicit bit included), normal exponent range, unit roundoff, smallest
subnormal and largest number. Every module asks it (the kernel, the testing tool, the book);
only the exact oracle keeps its own reading, so that the judge shares nothing with what it
judges. Every figure is read from ``ml_dtypes.finfo``, which answers for NumPy's formats and
for ``ml_dtypes.bfloat16`` alike (``np.finfo`` rejects bfloat16); a test holds them to IEEE
754's table. Rounding a float64 value once to a format is :func:`round_to` (:func:`to_format`
without the checks, for the kernel and the testing tool).

The unit in the last place: for a format with p significand bits,
:math:`\operatorname{ulp}(r) = 2^{e-p+1}` where :math:`2^e \le |r| < 2^{e+1}`, and never less
than the smallest subnormal (:func:`ulp`); rounding to nearest is then within 0.5 ulp of the
value it rounds. Errors are measured in it by :func:`ulp_error` and :func:`worst_ulp_error`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from ._checks import check_eps, check_float_dtype

__all__ = [
    "Format",
    "REGISTRY",
    "DTYPES",
    "NARROW",
    "FORMAT_NAMES",
    "format_of",
    "FORMATS",
    "round_to",
    "ulp",
    "ulp_error",
    "worst_ulp_error",
    "EPS_FATES",
    "format_info",
    "format_table",
    "eps_fate",
    "one_plus_eps_is_one",
    "eps_survival_table",
]


FORMATS = ("float16", "bfloat16", "float32", "float64")


@dataclass(frozen=True)
class Format:
    r"""A binary floating-point format: ``p`` significand bits (the implicit one included),
    normal exponents ``emin..emax``; subnormals below :math:`2^{e_{\min}}` are spaced
    :math:`2^{e_{\min}-p+1}`."""

    name: str
    dtype: np.dtype
    p: int
    emin: int
    emax: int

    @property
    def u(self) -> float:
        """The unit roundoff :math:`2^{-p}`: rounding to nearest is within u relative."""
        return 2.0 ** -self.p

    @property
    def tiny(self) -> float:
        r"""The smallest subnormal, :math:`2^{e_{\min}-p+1}`."""
        return 2.0 ** (self.emin - self.p + 1)

    @property
    def largest(self) -> float:
        r"""The largest finite number, :math:`(2 - 2^{1-p})\,2^{e_{\max}}`."""
        return (2.0 - 2.0 ** (1 - self.p)) * 2.0 ** self.emax


def _dtype_named(name: str) -> np.dtype:
    # NumPy's own formats by name, else ml_dtypes' (bfloat16, the float8 formats, ...).
    try:
        return np.dtype(name)
    except TypeError:
        return np.dtype(getattr(ml_dtypes, name))


def _read(name: str) -> Format:
    dt = _dtype_named(name)
    fi = ml_dtypes.finfo(dt)
    return Format(name, dt, int(fi.nmant) + 1, int(fi.minexp), int(fi.maxexp) - 1)


#: The formats lneps computes exactly, by name.
REGISTRY = {name: _read(name) for name in FORMATS}
#: Their dtypes, in order; :data:`NARROW` those float64 arithmetic serves: 2p + 2 <= 53, so that
#: an elementwise operation done in float64 and rounded once to the format is correctly rounded,
#: and a product of two of its numbers is exact in float64 (the kernel's float64 tier).
DTYPES = tuple(f.dtype for f in REGISTRY.values())
NARROW = tuple(f.dtype for f in REGISTRY.values() if 2 * f.p + 2 <= 53)
#: The formats' names as a message lists them: "float16, bfloat16, float32 or float64".
FORMAT_NAMES = ", ".join(FORMATS[:-1]) + " or " + FORMATS[-1]
_BY_DTYPE = {f.dtype: f for f in REGISTRY.values()}


def format_of(dtype) -> Format:
    """The :class:`Format` of float16, bfloat16, float32 or float64 (a dtype, a type or its
    name); ``TypeError`` for any other.

    >>> f = format_of(np.float16)
    >>> f.p, f.emin, f.emax, f.u, f.largest
    (11, -14, 15, 0.00048828125, 65504.0)
    """
    try:
        return _BY_DTYPE[_dtype_named(dtype) if isinstance(dtype, str) else np.dtype(dtype)]
    except (KeyError, TypeError):
        raise TypeError(f"no format lneps computes exactly is {dtype!r}: {FORMAT_NAMES}") from None

EPS_FATES = ("zero", "subnormal", "normal")

def _finfo(dtype):
    # ml_dtypes.finfo also answers for NumPy's own formats; np.finfo rejects bfloat16.
    return ml_dtypes.finfo(check_float_dtype(dtype))

_BF16 = np.dtype(ml_dtypes.bfloat16)


def to_format(y: np.ndarray, dtype) -> np.ndarray:
    """float64 ``y`` rounded once to ``dtype`` (float16, bfloat16 or float32), ties to even.

    NumPy's float64 to float16 and float32 conversions already are round to nearest, ties to
    even; ``ml_dtypes`` converts float64 to bfloat16 through float32, rounding twice, which
    this repairs: the only double-rounding cases are those where the float32 value lands
    exactly on a bfloat16 midpoint, and there one float32 step toward the float64 value
    decides the side. Any other format's conversion (NumPy's own, ml_dtypes' float8 formats) is
    taken as it is: a format added to :data:`FORMATS` whose conversion from float64 rounds twice
    needs its repair here. No checks (the kernel's hot path): :func:`round_to` checks its
    arguments."""
    dt = np.dtype(dtype)
    if dt == np.float16:
        return _to_float16(y)
    if dt != _BF16:
        with np.errstate(over="ignore"):
            return y.astype(dt)
    with np.errstate(over="ignore"):
        r32 = y.astype(np.float32)
    tie = (r32.view(np.uint32) & 0xFFFF) == 0x8000  # exactly between two bfloat16 numbers
    if tie.any():
        idx = np.nonzero(tie)
        exact, rounded = y[idx], r32[idx]
        toward = np.where(exact > rounded, np.float32(np.inf), np.float32(-np.inf))
        r32[idx] = np.where(exact == rounded, rounded, np.nextafter(rounded, toward))
    return r32.astype(_BF16)


def _to_float16(y):
    """NumPy's conversion, except where more than 1/64 of the values lie below float16's
    smallest normal number 2^-14, where NumPy takes about 60 ns an element (its bits are
    right): there the numbers are k 2^-24, so rint(y 2^24) (ties to even) is k, and k with
    y's sign bit is the float16 bit pattern (k = 1024 is 2^-14's)."""
    if not isinstance(y, np.ndarray):  # a scalar stays a scalar, as astype keeps it
        return _to_float16(np.array(y, dtype=np.float64))[()]
    y = y.astype(np.float64, copy=False)
    tiny = np.abs(y) < 2.0**-14
    if np.count_nonzero(tiny) * 64 <= tiny.size:  # none, or few: NumPy's conversion, slow there
        with np.errstate(over="ignore"):
            return y.astype(np.float16)
    with np.errstate(over="ignore"):
        out = np.where(tiny, 0.0, y).astype(np.float16)
    small = y[tiny]
    k = np.abs(np.rint(small * 2.0**24)).astype(np.uint16)
    out.view(np.uint16)[tiny] = k | np.where(np.signbit(small), np.uint16(0x8000), np.uint16(0))
    return out


def round_to(y, dtype) -> np.ndarray:
    """float64 values ``y`` rounded once to ``dtype`` (float16, bfloat16 or float32), to
    nearest, ties to even: NumPy's conversion, except that float64 to bfloat16 (which
    ``ml_dtypes`` does through float32, rounding twice) is repaired where the two roundings
    disagree (:func:`to_format`, with the arguments checked).

    >>> round_to(np.array([1 + 2.0**-8, 1 + 2.0**-8 + 2.0**-30]), ml_dtypes.bfloat16)  # a tie; above it
    array([1, 1.00781], dtype=bfloat16)
    """
    return to_format(np.asarray(y, dtype=np.float64), check_float_dtype(dtype))


# --- ulp: a format's spacing, and errors measured in it -----------------------------------


def ulp(r, dtype) -> np.ndarray:
    r"""Spacing of ``dtype``'s numbers at :math:`|r|` (float64 array): :math:`2^{e-p+1}`,
    :math:`2^e \le |r| < 2^{e+1}`, floored at the smallest subnormal.

    >>> ulp([1.0, 1.5, 2.0, 0.0], np.float16)
    array([9.76562500e-04, 9.76562500e-04, 1.95312500e-03, 5.96046448e-08])
    """
    fi = _finfo(dtype)
    out = np.array(r, dtype=np.float64)  # a copy, worked on in place
    np.abs(out, out=out)
    bits = out.view(np.uint64)
    finite = bits < _INF_BITS
    # 2^floor(log2 |r|) is |r| with its fraction bits cleared (0 below float64's normal range)
    np.bitwise_and(bits, _EXPONENT, out=bits)
    out *= 2.0 ** -int(fi.nmant)
    np.maximum(out, 2.0 ** (int(fi.minexp) - int(fi.nmant)), out=out)
    if not np.all(finite):  # inf and NaN: as np.frexp reads them, exponent 0
        out = np.where(finite, out, 2.0 ** (max(-1, int(fi.minexp)) - int(fi.nmant)))
    return out


_EXPONENT = np.uint64(0x7FF0000000000000)
_INF_BITS = np.uint64(0x7FF0000000000000)


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


def format_info(dtype) -> dict:
    r"""One format's numbers as Python values: bits, significand bits p (implicit bit included),
    exponent bits, smallest subnormal, smallest normal, largest, machine epsilon (spacing
    above 1) and significant decimal digits, :math:`p \log_{10} 2`. Sign + exponent + stored
    significand bits = bits."""
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
        "digits": (int(fi.nmant) + 1) * math.log10(2),
    }

def format_table(dtypes=FORMATS) -> list[dict]:
    """:func:`format_info` for each format, in order."""
    return [format_info(dt) for dt in dtypes]

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
