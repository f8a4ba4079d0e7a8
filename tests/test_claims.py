"""The appendix "Every claim of the sources": its own computations recomputed independently,
and the map complete (every claim has a verdict and a place).

The format ranges are recomputed from the formats' bit layouts (exponent bits and significand
bits), not from ml_dtypes.finfo as the page does; the initialization check from the bits of
the two results; the sweet-spot figures from their closed forms in exact rationals.
"""

import math
import re
from fractions import Fraction

import pytest

from notebooks import glued
from notebooks import markdown as markdown_of

NB = "claims.ipynb"
# (exponent bits, fraction bits) of each format
LAYOUT = {"float16": (5, 10), "bfloat16": (8, 7), "float32": (8, 23)}


def _normal_span(exp_bits, frac_bits, subnormal=False):
    bias = 2 ** (exp_bits - 1) - 1
    largest = (2 - Fraction(1, 2**frac_bits)) * Fraction(2) ** bias
    smallest = Fraction(1, 2 ** (bias - 1 + (frac_bits if subnormal else 0)))
    return math.log10(largest / smallest)


@pytest.fixture(scope="module")
def g():
    return glued(NB)


@pytest.fixture(scope="module")
def markdown():
    return markdown_of(NB)


def test_format_ranges(g):
    for name, layout in LAYOUT.items():
        assert g[f"range_{name}"] == pytest.approx(_normal_span(*layout), abs=1e-12)
    assert g["range_float16_sub"] == pytest.approx(_normal_span(5, 10, subnormal=True), abs=1e-12)
    assert g["f16_max"] == 65504.0
    rows = g["f16_row_overflow"]
    assert rows * 100**2 > 65504 >= (rows - 1) * 100**2


def test_initialization_gives_the_core(g):
    import ml_dtypes
    import numpy as np

    import lneps

    assert g["init_rows"] >= 100
    rng = np.random.default_rng(1)
    for t in (np.float16, ml_dtypes.bfloat16, np.float32, np.float64):
        x = rng.normal(-2.0, 5.0, size=(32, 48)).astype(t)
        a = lneps.layer_norm(x, np.ones(48, t), np.zeros(48, t), eps=1e-5)
        assert a.tobytes() == lneps.layer_norm(x, eps=1e-5).tobytes()


def test_sweet_spot(g):
    assert g["sweet_lip_lo"] == pytest.approx(1000.0, rel=1e-15)
    assert g["sweet_lip_hi"] == pytest.approx(math.sqrt(1e5), rel=1e-15)
    q = Fraction(1, 10**4)
    assert g["sweet_keep_lo"] == pytest.approx(float(q / (q + Fraction(1, 10**6))), rel=1e-15)
    assert g["sweet_keep_hi"] == pytest.approx(float(q / (q + Fraction(1, 10**5))), rel=1e-15)


def test_every_claim_has_a_verdict_and_a_place(markdown):
    rows = [r for r in markdown.splitlines() if r.startswith("| ") and not r.startswith("| claim")]
    assert len(rows) >= 45
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1] in {"✓", "✗", "~", "—"}, row
        assert "{ref}" in cells[2] or "{glue" in cells[2], row
    # the one claim beyond the book says why, on this page
    beyond = [r for r in rows if "| — |" in r]
    assert len(beyond) == 1 and "claims-beyond" in beyond[0]
    assert "(claims-beyond)=" in markdown and "quoted from {cite}`ba2016layer`" in markdown


def test_no_cell_says_not_computed(markdown):
    assert not re.search(r"not computed", markdown)
