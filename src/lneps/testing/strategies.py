"""Hypothesis strategies for a kernel's inputs: rows shaped like the input families, which
Hypothesis shrinks to a small reproducer when a kernel fails.

Optional: ``pip install "lneps[hypothesis]"`` (``import lneps.testing`` never imports this
module). Each strategy draws a structure first, the way :func:`lneps.testing.families` builds
its rows: a row length d (fixed, or drawn from a range), a number of rows, a row centre c, a
spread :math:`2^k` and unit numbers w, so that each row is :math:`c + 2^k w` rounded to the
format. N(0, 1)-like rows, offset rows (|c| far above the spread), near-constant and constant
rows (a tiny or zero spread) and wide spreads are all drawn, and a failure shrinks toward
c = 0, k = 0, w = 0: the smallest d, the fewest rows, the fewest distinct numbers, the simplest
rows that still fail. Up to 64 rows by default: the test across rows for a scale error every
row shares (:func:`lneps.testing.scale_bias`) needs at least 8 distinct rows, and 64 to catch
the d - 1 variance at d = 4096 in float32.

Rows of up to 256 numbers are drawn number by number (Hypothesis shrinks each one); longer
rows are unit normal numbers from a drawn seed, rounded to :math:`2^{-b}` with b drawn (b = 0:
integers), so that a large d costs no more to draw and still shrinks to few distinct values.

>>> import numpy as np
>>> from hypothesis import given, settings
>>> from lneps.testing.strategies import layer_norm_inputs
>>> @settings(max_examples=5, database=None)
... @given(layer_norm_inputs(np.float16, (16, 1024)))
... def check(inputs):
...     x, gamma, beta = inputs
...     assert 16 <= x.shape[-1] <= 1024 and x.dtype == np.float16
>>> check()
"""

from __future__ import annotations

import numpy as np

try:
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        'lneps.testing.strategies needs Hypothesis: pip install "lneps[hypothesis]"'
    ) from exc

from .._checks import check_float_dtype, check_positive_int
from ..formats import DTYPES, format_of
from ._private.arguments import FORMAT_NAMES

__all__ = ["layer_norm_inputs", "rms_norm_inputs"]


def _format(dtype):
    dt = check_float_dtype(dtype)
    if dt not in DTYPES:
        raise TypeError(f"dtype must be {FORMAT_NAMES}; got {dt}")
    return dt


#: Rows up to this long are drawn number by number; longer ones from a drawn seed.
_ELEMENTWISE = 256


def _units(draw, rows, d):
    """Unit numbers in [-4, 4], as float32 so that every format can hold them after scaling."""
    if d <= _ELEMENTWISE:
        return draw(
            hnp.arrays(
                np.float32, (rows, d), elements=st.floats(-4, 4, width=32, allow_subnormal=False)
            )
        )
    seed, bits = draw(st.integers(0, 2**32 - 1)), draw(st.integers(0, 12))
    w = np.clip(np.random.default_rng(seed).normal(size=(rows, d)), -4, 4)
    return (np.round(np.ldexp(w, bits)) / 2.0**bits).astype(np.float32)


def _lengths(d):
    """``d``: a fixed length, or ``(min_d, max_d)``, drawn (shrinking toward min_d)."""
    if isinstance(d, tuple):
        lo, hi = (check_positive_int(v, "d") for v in d)
        if lo > hi:
            raise ValueError(f"d=(min_d, max_d) needs min_d <= max_d; got {d}")
        return lo, hi
    d = check_positive_int(d, "d")
    return d, d


def _counts(min_rows, max_rows):
    lo, hi = check_positive_int(min_rows, "min_rows"), check_positive_int(max_rows, "max_rows")
    if lo > hi:
        raise ValueError(f"min_rows must be at most max_rows; got {min_rows} and {max_rows}")
    return lo, hi


@st.composite
def _rows(draw, dt, d, rows):
    p = format_of(dt).p
    rows = draw(st.integers(*rows))
    # the centre: 0, ordinary, or offset far above the spread (the cancellation families)
    exponent = draw(st.integers(0, p + 2))
    centre = (
        draw(st.sampled_from([0.0, 1.0, -1.0])) * 2.0**exponent * (1 + draw(st.integers(0, 7)) / 8)
    )
    # the spread: 2^k times unit numbers; k below -p makes near-constant rows, a zero unit row a constant one
    k = draw(st.integers(-p - 2, 4))
    w = _units(draw, rows, d).astype(np.float64)
    # keep sum(x^2) finite in the format, as the families do (a wide range is its own family)
    top = format_of(dt).largest / (4 * d)
    x = np.clip(centre + np.ldexp(w, k), -np.sqrt(top), np.sqrt(top))
    return x.astype(dt)


def _params(dt, d, draw):
    return draw(
        st.one_of(
            st.none(),
            hnp.arrays(np.float32, (d,), elements=st.floats(-4, 4, width=32)).map(
                lambda a: a.astype(dt)
            ),
        )
    )


def layer_norm_inputs(dtype, d, *, min_rows=1, max_rows=64):
    """A strategy for ``(x, gamma, beta)``: x of shape ``(rows, d)`` in ``dtype``
    (``min_rows`` to ``max_rows`` rows; d fixed, or drawn from ``(min_d, max_d)``), gamma and
    beta of shape ``(d,)`` in ``dtype`` or None, as the input families have them (module
    docstring)."""
    dt, lengths, rows = _format(dtype), _lengths(d), _counts(min_rows, max_rows)

    @st.composite
    def inputs(draw):
        n = draw(st.integers(*lengths))
        return draw(_rows(dt, n, rows)), _params(dt, n, draw), _params(dt, n, draw)

    return inputs()


def rms_norm_inputs(dtype, d, *, min_rows=1, max_rows=64):
    """A strategy for ``(x, gamma)``: as :func:`layer_norm_inputs`, without beta."""
    dt, lengths, rows = _format(dtype), _lengths(d), _counts(min_rows, max_rows)

    @st.composite
    def inputs(draw):
        n = draw(st.integers(*lengths))
        return draw(_rows(dt, n, rows)), _params(dt, n, draw)

    return inputs()
