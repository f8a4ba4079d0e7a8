"""Hypothesis strategies for a kernel's inputs: rows shaped like the input families, which
Hypothesis shrinks to a small reproducer when a kernel fails.

Optional: ``pip install "lneps[hypothesis]"`` (``import lneps.testing`` never imports this
module). Each strategy draws a structure first, the way :func:`lneps.testing.families` builds
its rows: a row centre c, a spread :math:`2^k` and unit numbers w, so that each row is
:math:`c + 2^k w` rounded to the format. N(0, 1)-like rows, offset rows (|c| far above the
spread), near-constant and constant rows (a tiny or zero spread) and wide spreads are all
drawn, and a failure shrinks toward c = 0, k = 0, w = 0: the smallest d, the fewest distinct
numbers, the simplest row that still fails.

>>> import numpy as np
>>> from hypothesis import given, settings
>>> from lneps.testing.strategies import layer_norm_inputs
>>> @settings(max_examples=5, database=None)
... @given(layer_norm_inputs(np.float16, 16))
... def check(inputs):
...     x, gamma, beta = inputs
...     assert x.shape[-1] == 16 and x.dtype == np.float16
>>> check()
"""

from __future__ import annotations

import numpy as np

try:
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError('lneps.testing.strategies needs Hypothesis: pip install "lneps[hypothesis]"') from exc

from .._checks import check_float_dtype, check_positive_int
from ..formats import format_of
from ._private.arguments import FORMATS, FORMAT_NAMES

__all__ = ["layer_norm_inputs", "rms_norm_inputs"]


def _format(dtype):
    dt = check_float_dtype(dtype)
    if dt not in FORMATS:
        raise TypeError(f"dtype must be {FORMAT_NAMES}; got {dt}")
    return dt


def _units(rows, d):
    """Unit numbers in [-4, 4], drawn as float32 so that every format can hold them after scaling."""
    return hnp.arrays(np.float32, (rows, d), elements=st.floats(-4, 4, width=32, allow_subnormal=False))


@st.composite
def _rows(draw, dt, d, max_rows):
    p = format_of(dt).p
    rows = draw(st.integers(1, max_rows))
    # the centre: 0, ordinary, or offset far above the spread (the cancellation families)
    exponent = draw(st.integers(0, p + 2))
    centre = draw(st.sampled_from([0.0, 1.0, -1.0])) * 2.0 ** exponent * (1 + draw(st.integers(0, 7)) / 8)
    # the spread: 2^k times unit numbers; k below -p makes near-constant rows, a zero unit row a constant one
    k = draw(st.integers(-p - 2, 4))
    w = draw(_units(rows, d)).astype(np.float64)
    # keep sum(x^2) finite in the format, as the families do (a wide range is its own family)
    top = format_of(dt).largest / (4 * d)
    x = np.clip(centre + np.ldexp(w, k), -np.sqrt(top), np.sqrt(top))
    return x.astype(dt)


def _params(dt, d, draw):
    return draw(st.one_of(st.none(), hnp.arrays(np.float32, (d,), elements=st.floats(-4, 4, width=32))
                          .map(lambda a: a.astype(dt))))


def layer_norm_inputs(dtype, d, *, max_rows=8):
    """A strategy for ``(x, gamma, beta)``: x of shape ``(rows, d)`` in ``dtype`` (1 to
    ``max_rows`` rows), gamma and beta of shape ``(d,)`` in ``dtype`` or None, as the input
    families have them (module docstring)."""
    dt, d = _format(dtype), check_positive_int(d, "d")
    max_rows = check_positive_int(max_rows, "max_rows")

    @st.composite
    def inputs(draw):
        return draw(_rows(dt, d, max_rows)), _params(dt, d, draw), _params(dt, d, draw)

    return inputs()


def rms_norm_inputs(dtype, d, *, max_rows=8):
    """A strategy for ``(x, gamma)``: as :func:`layer_norm_inputs`, without beta."""
    dt, d = _format(dtype), check_positive_int(d, "d")
    max_rows = check_positive_int(max_rows, "max_rows")

    @st.composite
    def inputs(draw):
        return draw(_rows(dt, d, max_rows)), _params(dt, d, draw)

    return inputs()
