r"""A column of dγ rounded exactly: a sum of square roots of rationals, decided in integers.

Column j of layer norm's (or RMS norm's) dγ is :math:`\sum_i g_{ij} t_{ij}/\sqrt{s_i}`, over the
rows i: with the integers of :mod:`lneps.kernel.gradients` (:math:`t_{ij} = \tau_{ij} 2^{e_x}`,
:math:`s_i = \sigma_i 2^{e_s}/d`) each term is a rational times :math:`\sqrt{d/\sigma_i}`. The
gradient kernel sums the column in double-double with a proven bound and comes here only for a
column it cannot decide: one that cancels, or lies on a rounding boundary.

Two square roots :math:`\sqrt{d/\sigma_i}` and :math:`\sqrt{d/\sigma_k}` are rational multiples
of each other exactly when :math:`\sigma_i\sigma_k` is a perfect square. So the rows are grouped
by that class (candidates bucketed by :func:`_class_key`: the parities of the small primes'
exponents and Legendre symbols, which a pair in one class must share; then :func:`math.isqrt`
decides), and each group's terms are summed exactly as one rational times one square root.
Square roots of rationals from different classes are linearly independent over
:math:`\mathbb Q`, so the column is rational exactly when every irrational group's
coefficient vanishes: then it is rounded exactly, ties to even. Otherwise no rounding
boundary equals it, and integer square roots of doubling precision bracket it until both ends
round alike, which must happen. The rounding is the kernel's own
(:func:`lneps.kernel.surd.round_surd`), never :mod:`lneps.oracle`'s.
"""

from __future__ import annotations

import math
from fractions import Fraction
from math import isqrt

from .surd import round_surd

__all__ = ["ExactColumnGradient"]


_PRIMES = [p for p in range(2, 200) if all(p % q for q in range(2, int(p**0.5) + 1))]


def _class_key(sigma: int):
    """``(key, R)``: sigma = (small primes) * R with R free of them; key holds the parities of
    the small primes' exponents, R mod 8 and R's Legendre symbols modulo the odd small primes,
    all equal for two sigmas whose product is a perfect square."""
    mask = 0
    R = sigma
    for b, p in enumerate(_PRIMES):
        while R % p == 0:
            R //= p
            mask ^= 1 << b
    legendre = tuple(pow(R % p, (p - 1) // 2, p) for p in _PRIMES[1:12])
    return (mask, R % 8, legendre), R


class ExactColumnGradient:
    """dγ_j exactly, column by column (``instance(j)``): the rows grouped once by the class of
    their sigma modulo rational squares, each column's terms summed per class.

    ``fmt`` is the output's :class:`lneps.formats.Format`; ``rows`` the integer statistics the
    gradient kernel kept (per row ``sigma``, ``es``, ``ex`` and, for layer norm, ``S``: see
    :mod:`lneps.kernel.gradients`). ``refinements`` counts the brackets an irrational column
    took."""

    def __init__(self, fmt, kind, x64, g64, rows):
        self.fmt, self.kind, self.x64, self.g64, self.rows = fmt, kind, x64, g64, rows
        self.refinements = 0
        n, d = x64.shape
        self.d = d
        buckets = {}
        self.rep = [0] * n  # each row's class representative (a row index)
        for i in range(n):
            key, R = _class_key(rows.sigma[i])
            for rep, Rr in buckets.setdefault(key, []):
                P = R * Rr
                if isqrt(P) ** 2 == P:
                    self.rep[i] = rep
                    break
            else:
                buckets[key].append((i, R))
                self.rep[i] = i

    def __call__(self, j):
        rows, d = self.rows, self.d
        groups = {}
        for i in range(self.x64.shape[0]):
            gij = float(self.g64[i, j])
            if gij == 0:
                continue
            ex = rows.ex[i]
            X = Fraction(float(self.x64[i, j])) / Fraction(2) ** ex
            tau = int(X) * d - rows.S[i] if self.kind == "layer" else int(X)
            if tau == 0:
                continue
            r = self.rep[i]
            sig_i, sig_r = rows.sigma[i], rows.sigma[r]
            # g t / sqrt(s) = g tau 2^(ex - es/2) sqrt(d / sigma_i), and
            # sqrt(d / sigma_i) = sqrt(d / sigma_r) isqrt(sigma_r sigma_i) / sigma_i
            coef = Fraction(gij) * tau * Fraction(2) ** (ex - rows.es[i] // 2)
            coef *= Fraction(isqrt(sig_r * sig_i), sig_i)
            groups[r] = groups.get(r, 0) + coef
        rational = Fraction(0)
        roots = []  # (A, sigma): A sqrt(d / sigma)
        for r, A in groups.items():
            if A == 0:
                continue
            sig = rows.sigma[r]
            root = isqrt(sig * d)
            if root * root == sig * d:
                rational += A * Fraction(root, sig)
            else:
                roots.append((A, sig))
        if not roots:
            return round_surd(0, 1, rational, self.fmt)
        k = 64
        while True:
            self.refinements += 1
            lo = hi = rational
            for A, sig in roots:
                f = isqrt((d << (2 * k)) // sig)  # sqrt(d / sig) 2^k in [f, f + 1]
                a, b = A * Fraction(f, 1 << k), A * Fraction(f + 1, 1 << k)
                lo, hi = lo + min(a, b), hi + max(a, b)
            rl, rh = round_surd(0, 1, lo, self.fmt), round_surd(0, 1, hi, self.fmt)
            if rl == rh and math.copysign(1.0, rl) == math.copysign(1.0, rh):
                return rl
            k *= 2
