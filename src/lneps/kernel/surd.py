r"""Exact rounding of a quadratic surd :math:`y = a/\sqrt{s} + b` to a binary format, in
integer arithmetic: the kernel's own last resort.

Every result of the kernel has this form with rational a, b and s (layer norm:
:math:`a = \gamma_i t_i`, :math:`s = T/d + d^2\varepsilon`, :math:`b = \beta_i`; see
:mod:`lneps.kernel`), and :func:`round_surd` rounds one exactly. It shares no code with
:mod:`lneps.oracle`, which judges the kernel, and is tested against it
(``tests/kernel/test_surd.py``).

Each decision is an exact comparison of integers:

* *y against a rational r* (:meth:`_Surd.sign_minus`): :math:`y - r = a/\sqrt s - c` with
  :math:`c = r - b`. Unless a and c have the same (nonzero) sign the sign is read off; if
  they do, it is sign(a) times the sign of :math:`a^2 - c^2 s`, compared as integers with
  the denominators cleared.
* *where y lies* (:meth:`_Surd.bracket`): :math:`R = \lfloor\sqrt{\lfloor 4^k s_d/s_n
  \rfloor}\rfloor` (``math.isqrt``) gives :math:`R \le 2^k/\sqrt s < R + 1`, so y is
  bracketed within :math:`|a|\,2^{-k}`; k grows until the bracket of :math:`|y|` is narrower
  than a quarter of the format's spacing there.

Rounding (:func:`round_surd`): the sign of y first (y = 0 exactly gives +0); the binade e of
:math:`|y|` (:math:`2^e \le |y| < 2^{e+1}`, one exact comparison when the bracket straddles a
power of two); the spacing :math:`q = 2^E`, :math:`E = \max(e, e_{\min}) - p + 1`; then
:math:`m = \lfloor |y|/q \rfloor` (one exact comparison when the bracket holds a multiple of
q) and the side of the midpoint :math:`(m + \frac12) q` (one exact comparison when the
bracket holds it). An exact tie goes to the even one of m and m + 1; a result of
:math:`2^{e_{\max}+1}` or more (the overflow threshold reached) is infinity.
"""

from __future__ import annotations

import math
from fractions import Fraction

from ..formats import Format

__all__ = ["round_surd"]


def _sign(v: int) -> int:
    return (v > 0) - (v < 0)


def _pow2(e: int):
    """:math:`2^e` as a (numerator, denominator) pair of ints."""
    return (1 << e, 1) if e >= 0 else (1, 1 << -e)


def _binade(v: Fraction) -> int:
    """The e with :math:`2^e \\le v < 2^{e+1}`, for a rational v > 0."""
    n, d = v.numerator, v.denominator
    e = n.bit_length() - d.bit_length()  # 2^(e-1) < v < 2^(e+1)
    if (n << -e if e < 0 else n) < (d << e if e > 0 else d):  # v < 2^e
        e -= 1
    return e


class _Surd:
    """:math:`y = a/\\sqrt s + b` for rationals a, b and s > 0, held as integers:
    :math:`a = a_n/a_d`, :math:`b = b_n/b_d`, :math:`s = s_n/s_d` (denominators positive)."""

    def __init__(self, a: Fraction, s: Fraction, b: Fraction):
        self.an, self.ad = a.numerator, a.denominator
        self.sn, self.sd = s.numerator, s.denominator
        self.bn, self.bd = b.numerator, b.denominator
        self.b = b

    def sign_minus(self, rn: int, rd: int) -> int:
        """The sign of :math:`y - r_n/r_d` (:math:`r_d > 0`), exactly."""
        # y - r = a/sqrt(s) - c, c = (rn bd - bn rd) / (rd bd)
        cn, cd = rn * self.bd - self.bn * rd, rd * self.bd
        sa, sc = _sign(self.an), _sign(cn)
        if sa == 0:
            return -sc
        if sc != sa:  # a/sqrt(s) and -c do not pull against each other
            return sa
        # |a|/sqrt(s) against |c| on squares: an^2 sd / (ad^2 sn) against cn^2 / cd^2
        return sa * _sign(self.an * self.an * self.sd * cd * cd - cn * cn * self.ad * self.ad * self.sn)

    def bracket(self, prec: int):
        """Rationals lo <= y <= hi, hi - lo about :math:`2^{-prec}|a|/\\sqrt s`."""
        if self.an == 0:
            return self.b, self.b
        # R <= 2^k / sqrt(s) < R + 1 with R >= 2^prec: 2^k/sqrt(s) >= 2^(k - (bits(sn) - bits(sd) + 1)/2)
        k = prec + max(0, (self.sn.bit_length() - self.sd.bit_length()) // 2 + 1)
        R = math.isqrt((self.sd << (2 * k)) // self.sn)
        ends = (Fraction(self.an * R, self.ad << k) + self.b, Fraction(self.an * (R + 1), self.ad << k) + self.b)
        return min(ends), max(ends)


def round_surd(a, s, b, fmt: Format) -> float:
    r"""The number of format ``fmt`` nearest to :math:`y = a/\sqrt{s} + b`, exactly.

    a, b and s >= 0 are rationals (anything :class:`fractions.Fraction` takes). Round to
    nearest, ties to the even significand, with subnormals, and to ±inf at or beyond the
    overflow threshold :math:`(2 - 2^{-p})\,2^{e_{\max}}`, as IEEE 754 defines it. An exact
    zero is +0; a nonzero y that rounds to 0 is a zero of y's sign. s = 0: NaN for a = 0
    (the 0/0 of a constant row with ε = 0), else the infinity of a's sign. Returns a Python
    float (the format's number, exactly).

    >>> from lneps.formats import format_of
    >>> f16 = format_of("float16")
    >>> round_surd(1, 2, 0, f16)  # 1/sqrt(2) in float16
    0.70703125
    >>> round_surd(0, 1, 2049, f16), round_surd(0, 1, 2051, f16)  # ties to even
    (2048.0, 2052.0)
    """
    a, s, b = Fraction(a), Fraction(s), Fraction(b)
    if s < 0:
        raise ValueError(f"s must be >= 0; got {s}")
    if s == 0:
        return math.nan if a == 0 else math.copysign(math.inf, a)
    y = _Surd(a, s, b)
    sign = y.sign_minus(0, 1)
    if sign == 0:
        return 0.0

    def above(rn: int, rd: int) -> int:
        """The sign of |y| - rn/rd, exactly: sign(y) sign(y - sign(y) rn/rd)."""
        return sign * y.sign_minus(sign * rn, rd)

    # |y| within [L, H], H - L < 2^-(p+2) L: k grows until the bracket clears 0 and is narrow
    prec = max(fmt.p + 8, 32)
    while True:
        lo, hi = y.bracket(prec)
        L, H = (lo, hi) if sign > 0 else (-hi, -lo)
        if L > 0 and (H - L) * (1 << (fmt.p + 2)) < L:
            break
        prec *= 2  # cancellation between a/sqrt(s) and b: more bits
    e = _binade(L)
    if _binade(H) > e and above(*_pow2(e + 1)) >= 0:
        e += 1  # the bracket straddles 2^(e+1), and |y| is at or above it
    if e > fmt.emax:
        return math.copysign(math.inf, sign)
    E = max(e, fmt.emin) - fmt.p + 1  # the spacing q = 2^E; H - L < 2^(e-p-1) <= q/4
    qn, qd = _pow2(E)
    m = (L.numerator * qd) // (L.denominator * qn)  # floor(L / q)
    if (H.numerator * qd) // (H.denominator * qn) > m and above((m + 1) * qn, qd) >= 0:
        m += 1  # the bracket holds (m + 1) q, and |y| is at or above it
    # the midpoint (m + 1/2) q = (2m + 1) 2^(E-1): decided by the bracket where it can be
    mid = Fraction((2 * m + 1) * qn, 2 * qd)
    side = -1 if H < mid else (1 if L > mid else above(mid.numerator, mid.denominator))
    n = m + 1 if side > 0 or (side == 0 and m % 2 == 1) else m
    if n.bit_length() + E > fmt.emax + 1:  # n q = 2^(emax + 1): beyond the largest number
        return math.copysign(math.inf, sign)
    return math.copysign(math.ldexp(float(n), E), sign)  # n <= 2^p: exact
