"""An independent judge of correctly rounded layer and RMS normalization.

It shares no code with lneps (not the kernel, not lneps.oracle, not lneps.kernel.rounding): every
input is taken as the exact rational number it stores (``fractions.Fraction``), the exact
result

    y = gamma * v / sqrt(s) + beta,   v = x_i - mean(x),  s = mean(v**2) + eps   (layer norm)
                                      v = x_i,            s = mean(x**2) + eps   (RMS norm)

is located with mpmath at 320 bits, and every decision that matters (which binade, which two
neighbours, which side of their midpoint, exactly 0 or not) is made by exact comparisons of
rationals: y < r  <=>  a / sqrt(s) < r - b, decided on squares. Rounding follows IEEE 754's
definitions for a binary format of p significand bits and exponents emin..emax: subnormals below
2**emin, round to nearest with ties to the even significand, results at or beyond the overflow
threshold (2 - 2**-p) * 2**emax to infinity, an exact zero as +0, a nonzero value that rounds to
zero with its own sign.
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np

# p (significand bits, the implicit one included), emin, emax: IEEE 754 binary16, bfloat16,
# binary32, binary64.
FORMATS = {"float16": (11, -14, 15), "bfloat16": (8, -126, 127), "float32": (24, -126, 127),
           "float64": (53, -1022, 1023)}
_PREC = 320


def _fraction(value) -> Fraction:
    return Fraction(float(value))


def _mp(q: Fraction):
    return mpmath.mpf(q.numerator) / q.denominator


class _Value:
    """The exact y = a / sqrt(s) + b (a, b rational, s > 0 rational), compared exactly."""

    def __init__(self, a: Fraction, s: Fraction, b: Fraction):
        self.a, self.s, self.b = a, s, b

    def sign_minus(self, r: Fraction) -> int:
        """The sign of y - r, exactly."""
        c = r - self.b  # y - r = a/sqrt(s) - c
        a = self.a
        if a == 0:
            return (c < 0) - (c > 0)
        if a > 0 and c <= 0:
            return 1
        if a < 0 and c >= 0:
            return -1
        # same signs: |a|/sqrt(s) against |c|, on squares
        left, right = a * a, c * c * self.s
        bigger = (left > right) - (left < right)
        return bigger if a > 0 else -bigger

    def approx(self):
        with mpmath.workprec(_PREC):
            return _mp(self.a) / mpmath.sqrt(_mp(self.s)) + _mp(self.b)


def round_exact(value: _Value, fmt: str) -> float:
    """The format's nearest number to the exact value (as a Python float), from the IEEE rules."""
    p, emin, emax = FORMATS[fmt]
    sign = value.sign_minus(Fraction(0))
    if sign == 0:
        return 0.0  # an exact zero is +0
    # |y| compared with a positive rational r, exactly
    def above(r: Fraction) -> int:
        return sign * value.sign_minus(sign * r)

    approx = abs(value.approx())
    with mpmath.workprec(_PREC):
        e = int(mpmath.floor(mpmath.log(approx, 2))) if approx > 0 else emin - p
    while above(Fraction(2) ** e) < 0:  # make 2**e <= |y| < 2**(e+1) exact
        e -= 1
    while above(Fraction(2) ** (e + 1)) >= 0:
        e += 1
    q = Fraction(2) ** (max(e, emin) - p + 1)  # the spacing there (subnormals: the smallest)
    with mpmath.workprec(_PREC):
        k = int(mpmath.floor(approx / _mp(q)))
    while above(k * q) < 0:
        k -= 1
    while above((k + 1) * q) >= 0:
        k += 1
    # k q <= |y| < (k + 1) q: nearest, ties to the even one
    side = above((2 * k + 1) * q / 2)
    n = k + 1 if side > 0 or (side == 0 and k % 2 == 1) else k
    largest = (2**p - 1) * Fraction(2) ** (emax - p + 1)
    magnitude = n * q
    if magnitude > largest:
        return math.copysign(math.inf, sign)
    return math.copysign(float(magnitude), sign)  # exact: at most p bits


def _row_values(row, gamma, beta, eps, kind, columns=None):
    xs = [_fraction(v) for v in row]
    d = len(xs)
    e = Fraction(float(eps))
    if kind == "layer":
        mean = sum(xs) / d
        vs = [v - mean for v in xs]
    else:
        vs = xs
    s = sum(v * v for v in vs) / d + e
    out = []
    for i in range(d) if columns is None else columns:
        g = Fraction(1) if gamma is None else _fraction(gamma[i])
        b = Fraction(0) if beta is None else _fraction(beta[i])
        out.append((g * vs[i], s, b))
    return out


def judge_columns(row, columns, gamma=None, beta=None, *, eps, kind="layer", fmt=None) -> np.ndarray:
    """The judge's results for some columns of one (long) row only."""
    row = np.asarray(row)
    out = []
    for a, s, b in _row_values(row, gamma, beta, eps, kind, columns):
        out.append(math.nan if s == 0 and a == 0 else round_exact(_Value(a, s, b), fmt or row.dtype.name))
    return np.array(out)


def judge(x, gamma=None, beta=None, *, eps, kind="layer", fmt=None) -> np.ndarray:
    """The correctly rounded results over the last axis of x (float64 array of the format's
    numbers), gamma and beta broadcast to x's shape. ``fmt`` defaults to x's dtype name."""
    x = np.asarray(x)
    fmt = fmt or x.dtype.name
    rows = x.reshape(-1, x.shape[-1])
    g = None if gamma is None else np.broadcast_to(np.asarray(gamma), x.shape).reshape(rows.shape)
    b = None if beta is None else np.broadcast_to(np.asarray(beta), x.shape).reshape(rows.shape)
    out = np.empty(rows.shape)
    for r, row in enumerate(rows):
        gr, br = None if g is None else g[r], None if b is None else b[r]
        for i, (a, s, bb) in enumerate(_row_values(row, gr, br, eps, kind)):
            if s == 0:
                out[r, i] = math.nan if a == 0 else math.copysign(math.inf, a)
            else:
                out[r, i] = round_exact(_Value(a, s, bb), fmt)
    return out.reshape(x.shape)


def misrounded(got, want) -> np.ndarray:
    """Where got (any float dtype) differs from the judge's want: value, sign of zero, NaN."""
    got = np.asarray(got).astype(np.float64)
    same = ((got == want) & (np.signbit(got) == np.signbit(want))) | (np.isnan(got) & np.isnan(want))
    return ~same
