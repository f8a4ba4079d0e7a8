"""The appendix "How the tolerance is derived and checked": its glued numbers and tables,
recomputed here, and its place in the appendix."""

import math
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import lneps.testing as lt
from lneps.book import kernel_zoo as kz
from lneps.book.printing import sci
from lneps.testing import families
from notebooks import glued, glued_rich, markdown, read

NB = "how_the_tolerance_is_derived.ipynb"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def g():
    return glued(NB)


def _glued_html(key, mime="text/html"):
    return glued_rich(NB, key, mime)


def test_it_is_in_the_appendix_after_how_the_reference_works():
    toc = (ROOT / "_toc.yml").read_text()
    part = toc.split('"Appendix"')[1]
    files = [line.split("file:")[1].strip() for line in part.splitlines() if "file:" in line]
    i = files.index("book/how_the_tolerance_is_derived")
    assert files[i - 1] == "book/how_the_reference_works"


def test_the_chapter_links_here():
    chapter = "\n".join(c.source for c in read("testing_a_kernel.ipynb").cells
                        if c.cell_type == "markdown")
    assert "{doc}`how_the_tolerance_is_derived`" in chapter
    for label in ("tolerance-cap", "tolerance-false-alarm", "tolerance-zoo", "tolerance-two-pass"):
        assert f"({label})=" in markdown(NB) and label in chapter, label


def test_the_zoo_counts(g):
    assert g["zoo_correct"] == len(kz.kernels("correct")) == 15
    assert g["zoo_defects"] == len(kz.kernels("defective")) == 14
    assert g["zoo_designs"] == len(kz.kernels("design")) == 2
    table = _glued_html("tbl-kernel-zoo", "text/markdown")
    assert all(f"| {k.name} |" in table for k in kz.ZOO)


def test_the_zoo_at_the_other_row_lengths(g):
    from lneps.book import zoo_grades

    assert g["grid_ds"] == "8, 9, 100 and 1024"
    table = _glued_html("tbl-kernel-zoo-grid", "text/markdown")
    n = len(kz.kernels("correct"))
    assert table.count(f"| {n} of {n} |") == 12  # every correct kernel passes, 3 formats x 4 d
    # one row recomputed: float16, d = 8
    graded = zoo_grades.grade(dtypes=(np.float16,), ds=(8,))
    caught = sum(bool(r["caught"]) for r in graded if r["kind"] == "defective")
    row = next(line for line in table.splitlines() if line.startswith("| float16 | 8 |"))
    assert f"| {caught} of {len(kz.kernels('defective'))} |" in row


def test_the_false_alarm_derivation(g):
    # 2 exp(-lambda^2 / 2) with the lambda the test uses (lneps.testing's private constant)
    from lneps.testing._private import systematic

    assert g["lambda_rows"] == systematic.LAMBDA == 6
    assert g["false_alarm_2"] == sci(2 * math.exp(-(6**2) / 2), 2) == "3.05 × 10⁻⁸"


    assert "lambda S$ is {glue:text}`spread_rows`" in markdown(NB).replace("\n", " ")
    assert g["spread_rows"].endswith(("⁻⁵", "⁻⁶", "⁻⁷")) and "×" in g["spread_rows"]


def test_the_mean_rounded_to_float16(g):
    # the shift is |fl16(mean) - mean| / std, at most, on the 16 rows of N(0, 1) numbers
    x = families(np.float16, 4096, rows=16)["normal"].x.astype(np.float64)
    mean, std = x.mean(axis=-1), x.std(axis=-1)
    shift = float(np.max(np.abs(mean.astype(np.float16).astype(np.float64) - mean) / std))
    assert g["mf16_shift"] == sci(shift, 1) and shift < 2.0**-10 / 10  # a tenth of an ulp of 1, less
    assert g["mf16_ulps"] == f"{shift / 2.0**-10:.3g}" and 1e-3 <= shift / 2.0**-10 < 100
    first, second, third = (int(v) for v in g["mf16_catches"].split(", "))
    assert first >= second >= third  # fewer as d grows


def test_the_d_minus_1_variance_with_and_without_the_probabilistic_bound(g):
    # the table: 64 rows of 4096, ten inputs per format and family (the correct kernels on three);
    # no false alarm either way, probabilistic=True catches every input, the default misses
    # bfloat16's normal rows
    table = _glued_html("tbl-unbiased-probabilistic", "text/markdown")
    rows = [line for line in table.splitlines() if line.startswith(("| float16", "| bfloat16"))]
    assert len(rows) == 4
    passing = len(kz.kernels("correct", "layer_norm")) + 1  # and statistics in the input format
    assert g["unb_passing"] == passing == 13 and (g["unb_seeds"], g["unb_fa_seeds"]) == (10, 3)
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[3] == "10 of 10" and cells[4] == cells[5] == f"0 of {3 * passing}", row
    assert g["unb_fa_cases"] == 4 * 3 * passing
    assert g["unb_bf16_normal"] == "0 of 10" and g["unb_default_caught"] == "30 of 40"
    # one input recomputed: bfloat16 normal rows, the first seed
    x, gamma, beta = families(ml_dtypes.bfloat16, 4096, rows=64)["normal"]
    a = kz.by_name("unbiased (d - 1) variance").fn(x, gamma, beta, 1e-5)
    lt.assert_close(a, x=x, gamma=gamma, beta=beta, eps=1e-5)  # the default misses it
    with pytest.raises(AssertionError, match="exceed their bound"):
        lt.assert_close(a, x=x, gamma=gamma, beta=beta, eps=1e-5, probabilistic=True)


def test_the_design_passes_its_class_on_rows_of_tiny_spread(g):
    # the design that stores its statistics in float16, against its own class, on lneps.families'
    # rows of tiny spread (a mean near 0 stored as a subnormal): no false alarm either way
    assert (g["tiny_default"], g["tiny_prob"], g["tiny_cases"]) == (0, 0, 4)
    k = kz.by_name("statistics stored in the input format")
    x, gamma, beta = families(np.float16, 1024, rows=8, kinds="all")["sd_1e-4"]
    a = k.fn(x, gamma, beta, 1e-5)
    kw = dict(x=x, gamma=gamma, beta=beta, eps=1e-5, kernels=k.classes)
    lt.assert_close(a, **kw)
    lt.assert_close(a, **kw, probabilistic=True)
