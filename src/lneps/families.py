r"""The input families: every kind of row lneps grades kernels on or the book measures, each
under one name.

One registry, asked by every consumer: :func:`lneps.testing.families` (the rows that break
kernels, recommended to kernel engineers), the book's accuracy surveys
(``lneps.book.survey.family_rows``) and its measurement of the frameworks
(``lneps.book.frameworks.measurement_rows``). The same rows have the same name everywhere.

**Names** are lowercase ASCII words joined by ``_``, numbers as Python writes them (``1e-3``,
``6e4``, ``0.5``): what the rows are, not why they are hard, so the name a table shows is the
key a program asks for. A normal family is named by what sets it apart from :math:`N(0, 1)`:
its mean when that is not 0, else its standard deviation.

**Kinds** (:data:`KINDS`):

* ``distribution``: normal draws, the same real numbers in every format, rounded to it once;
* ``format``: rows built from the format's precision p and exponent range to break kernels
  in that format (they need float16, bfloat16, float32 or float64);
* ``hand``: one hand-made row, the same numbers in every format, rounded to it (float16 and
  wider hold them exactly, bfloat16 rounds some).

:data:`FAMILIES` maps each name to its :class:`InputFamily`; :func:`draw` draws its rows as a
:class:`Family` ``(x, gamma, beta)``, gamma and beta None unless the family needs them. A
family's position in :data:`FAMILIES` is its seed index in :func:`lneps.testing.families`
(``np.random.default_rng([seed, k])``): new families are appended.

>>> import numpy as np
>>> from lneps import families as F
>>> F.names("distribution")
('normal', 'constant', 'mean_1000', 'mean_6e4', 'sd_300', 'sd_1e-3', 'sd_1e-4')
>>> F.FAMILIES["mean_6e4"].params
{'mean': 60000.0, 'sd': 8.0}
>>> x, gamma, beta = F.draw("mean_6e4", np.random.default_rng(0), d=4, rows=2, dtype=np.float16)
>>> x.shape, x.dtype, gamma
((2, 4), dtype('float16'), None)
>>> F.draw("65504_and_-65504", 0, d=4).x
array([[ 65504., -65504.,  65504., -65504.]])
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ._checks import check_float_dtype, check_positive_int
from .formats import format_of
from .formats import ulp

__all__ = ["KINDS", "FAMILIES", "HARD", "SURVEYED", "Family", "InputFamily", "names", "get", "draw"]

#: The kinds of family, each with what it means.
KINDS = {
    "distribution": "normal draws, the same real numbers in every format, rounded to it once",
    "format": "rows built from the format's precision and exponent range to break kernels in it",
    "hand": "one hand-made row, the same numbers in every format, rounded to it",
}

Family = namedtuple("Family", "x gamma beta", defaults=(None, None))
Family.__doc__ = """One input family's rows: ``x`` (rows, d) and, where the family needs them,
``gamma`` and ``beta`` of shape (d,) (else None), all in the family's dtype."""


@dataclass(frozen=True)
class InputFamily:
    """One family of the registry: its ``name``, its ``kind`` (a key of :data:`KINDS`), a one-line
    ``description``, its parameters (``params``: mean and sd of a normal family, the values of a
    hand-made row), whether it needs an even d (``even_d``), and its generator, which
    :meth:`draw` calls."""

    name: str
    kind: str
    description: str
    generate: Callable = field(repr=False)  # generate(rng, d, rows, dtype) -> Family
    params: dict = field(default_factory=dict, compare=False)
    even_d: bool = False

    def draw(self, rng, d: int, rows: int = 1, dtype=np.float64) -> Family:
        """``rows`` rows of ``d`` numbers stored in ``dtype`` (and gamma, beta where the family
        has them), drawn from ``rng``: a ``numpy.random.Generator``, or a seed for
        ``np.random.default_rng`` (hand-made rows draw nothing)."""
        if rng is None or isinstance(rng, np.random.RandomState):
            raise TypeError(f"rng must be a numpy.random.Generator or a seed; got {rng!r}")
        d, rows = check_positive_int(d, "d"), check_positive_int(rows, "rows")
        dt = check_float_dtype(dtype)
        if self.kind == "format":
            format_of(dt)  # TypeError for a format lneps does not compute exactly
        if self.even_d and d % 2:
            raise ValueError(f"family {self.name!r} needs an even d; got d = {d}")
        return self.generate(np.random.default_rng(rng), d, rows, dt)


# --- the generators ----------------------------------------------------------------------------


def _normal(mean, sd):
    def generate(rng, d, rows, dt):
        return Family(rng.normal(mean, sd, size=(rows, d)).astype(dt))
    return generate


def _constant(rng, d, rows, dt):
    return Family(np.repeat(rng.normal(0.0, 10.0, size=(rows, 1)), d, axis=1).astype(dt))


def _offset(rng, d, rows, dt):
    p = format_of(dt).p
    sign = rng.choice([-1.0, 1.0], size=(rows, 1))
    return Family((rng.normal(0.0, 1.0, size=(rows, d)) + sign * 2.0 ** (p - 4)).astype(dt))


def _near_constant(rng, d, rows, dt):
    c = rng.normal(0, 10, size=(rows, 1)).astype(dt).astype(np.float64)
    return Family((c + rng.integers(-3, 4, size=(rows, d)) * ulp(c, dt)).astype(dt))


def _wide_range(rng, d, rows, dt):
    f = format_of(dt)
    top = max(f.emin, (f.emax - int(d - 1).bit_length()) // 2 - 1)
    m = rng.uniform(1, 2, size=(rows, d)) * rng.choice([-1.0, 1.0], size=(rows, d))
    return Family(np.ldexp(m, rng.integers(f.emin, top + 1, size=(rows, d))).astype(dt))


def _midpoint(rng, d, rows, dt):
    p = format_of(dt).p
    c = np.ldexp(1.0, -(-p // 2) - 5 + rng.integers(0, 3, size=(rows, 1)))
    k = rng.integers(-4, 5, size=(rows, 1))
    high = np.argsort(rng.random((rows, d)), axis=1) < d // 2  # exactly half of each row
    K = rng.integers(-3, 4, size=d)
    gamma = np.ldexp(1.0 + 2.0 ** (1 - p) * rng.integers(1, 2 ** (p - 1), size=d), K)
    beta = rng.choice([-1.0, 1.0], size=d) * np.ldexp(1.0, K - p)
    return Family(np.where(high, (k + 1) * c, (k - 1) * c).astype(dt), gamma.astype(dt), beta.astype(dt))


def _cancelling_beta(rng, d, rows, dt):
    z = rng.normal(size=d).astype(dt).astype(np.float64)
    v = z - z.mean()
    sd = np.sqrt((v * v).mean())
    u = v / sd if sd > 0 else v
    gamma = rng.uniform(0.5, 2.0, size=d).astype(dt)
    shift = np.ldexp(1.0, rng.integers(-2, 3, size=(rows, 1)))
    o = rng.normal(size=(rows, 1))
    shift[0], o[0] = 1.0, 0.0
    return Family((shift * (z + o)).astype(dt), gamma, (-gamma.astype(np.float64) * u).astype(dt))


def _hand(pair):
    def generate(rng, d, rows, dt):  # the pair repeated along the row, the row down the rows
        row = np.resize(np.array(pair, dtype=np.float64), d)
        return Family(np.repeat(row[None, :], rows, axis=0).astype(dt))
    return generate


def _entry(name, kind, description, generate, **kw):
    return name, InputFamily(name, kind, description, generate, **kw)


def _distribution(name, description, mean, sd):
    return _entry(name, "distribution", description, _normal(mean, sd), params={"mean": mean, "sd": sd})


def _hand_row(name, description, pair):
    return _entry(name, "hand", description, _hand(pair), params={"values": pair})


#: Every family, by name, in seed-index order (:func:`lneps.testing.families` draws family k
#: from ``np.random.default_rng([seed, k])``; new families go at the end).
FAMILIES: dict[str, InputFamily] = dict([
    _distribution("normal", "N(0, 1)", 0.0, 1.0),
    _entry("offset", "format", "N(0, 1) plus ±2**(p-4) per row: the mean's subtraction cancels all but "
           "about 4 of each element's p bits", _offset),
    _entry("near_constant", "format", "a N(0, 10**2) constant c per row plus k ulp(c), k uniform in -3..3: "
           "a variance comparable to eps", _near_constant),
    _entry("constant", "distribution", "one N(0, 10**2) draw per row, repeated along it", _constant,
           params={"mean": 0.0, "sd": 10.0}),
    _entry("wide_range", "format", "±m 2**E, m uniform in [1, 2), E from the smallest normal exponent to "
           "where the sum of squares still fits the format", _wide_range),
    _entry("midpoint", "format", "rows with u = ±1 exactly and gamma, beta making every exact output a "
           "rounding midpoint of the format (even d only)", _midpoint, even_d=True),
    _entry("cancelling_beta", "format", "gamma in [0.5, 2] and beta = -gamma u(z) for shifted copies of one "
           "N(0, 1) row z: outputs that nearly cancel", _cancelling_beta),
    _distribution("mean_1000", "N(1000, 1): a mean a thousand times the spread", 1000.0, 1.0),
    _distribution("mean_6e4", "N(6e4, 8**2): near float16's largest number, 65504", 6e4, 8.0),
    _distribution("sd_300", "N(0, 300**2): squares beyond float16's range", 0.0, 300.0),
    _distribution("sd_1e-3", "N(0, 1e-3**2): a variance of 1e-6, near the usual eps", 0.0, 1e-3),
    _distribution("sd_1e-4", "N(0, 1e-4**2): a variance of 1e-8, below the usual eps", 0.0, 1e-4),
    _hand_row("zeros", "every element 0", (0.0,)),
    _hand_row("constant_0.5", "every element 0.5", (0.5,)),
    _hand_row("constant_1000", "every element 1000", (1000.0,)),
    _hand_row("constant_60000", "every element 60000", (60000.0,)),
    _hand_row("65504_and_-65504", "alternating 65504 and -65504, the largest float16", (65504.0, -65504.0)),
    _hand_row("65504_and_65472", "alternating 65504 and 65472, the two largest float16", (65504.0, 65472.0)),
])

#: The families :func:`lneps.testing.families` returns by default: those that break kernels,
#: with the plain normal and constant rows every kernel must get right.
HARD = ("normal", "offset", "near_constant", "constant", "wide_range", "midpoint", "cancelling_beta")

#: The families the book's error surveys (:mod:`lneps.book.survey`) and its measurement of the
#: frameworks draw, in this order: N(0, 1), five normal distributions that break low-precision
#: layers, and constant rows. The frameworks' measurement seeds each by its position here
#: (:func:`lneps.book.frameworks.measurement_rows`): new ones go at the end.
SURVEYED = ("normal", "mean_1000", "mean_6e4", "sd_300", "sd_1e-3", "sd_1e-4", "constant")


def names(kinds=None) -> tuple[str, ...]:
    """The names of the families of ``kinds`` (a kind of :data:`KINDS`, a sequence of them, or
    None or ``"all"`` for every family), in :data:`FAMILIES` order.

    >>> names("hand")
    ('zeros', 'constant_0.5', 'constant_1000', 'constant_60000', '65504_and_-65504', '65504_and_65472')
    """
    if kinds is None or kinds == "all":
        return tuple(FAMILIES)
    wanted = (kinds,) if isinstance(kinds, str) else tuple(kinds)
    bad = [k for k in wanted if k not in KINDS]
    if bad or not wanted:
        raise ValueError(f"kinds must be 'all' or among {list(KINDS)}; got {kinds!r}")
    return tuple(n for n, f in FAMILIES.items() if f.kind in wanted)


def get(name: str) -> InputFamily:
    """The :class:`InputFamily` named ``name``; ``ValueError`` naming the valid names otherwise."""
    try:
        return FAMILIES[name]
    except (KeyError, TypeError):
        raise ValueError(f"name must be one of {list(FAMILIES)}; got {name!r}") from None


def draw(name: str, rng, d: int, rows: int = 1, dtype=np.float64) -> Family:
    """``rows`` rows of ``d`` numbers of family ``name``, stored in ``dtype``, as a :class:`Family`
    (:meth:`InputFamily.draw`). ``rng``: a ``numpy.random.Generator`` or a seed."""
    return get(name).draw(rng, d, rows, dtype)
