"""tools/sphinx_number_style.py: numbers in prose take the book's style, and code does not."""

import doctest
import sys

from docutils import nodes

from notebooks import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import sphinx_number_style as style  # noqa: E402

NBSP = "\u00a0"


def test_doctests():
    assert doctest.testmod(style).failed == 0


def test_e_notation_becomes_a_power():
    assert style.number_style("1e-05") == "10⁻⁵"
    assert style.number_style("1e-12 and 1.0e+00") == "10⁻¹² and 10⁰"
    assert style.number_style("6.9e-05: a") == f"6.9{NBSP}×{NBSP}10⁻⁵: a"
    assert style.number_style("2.56e+08 in bfloat16") == f"2.56{NBSP}×{NBSP}10⁸ in bfloat16"


def test_code_like_text_is_left_alone():
    for text in ("norm_eps=1e-5", "float16", "x-1", "2026-12-02", "sm_80", "v1e5", "e-05",
                 "#142848", "ch5-which"):
        assert style.number_style(text) == text


def test_a_unit_after_a_pasted_number_is_kept_on_its_line():
    para = nodes.paragraph("", "", nodes.inline("", "3205"), nodes.Text(" ulp off, and 2 "),
                           nodes.literal("", "1e-05"), nodes.Text(" ulp"))
    doc = nodes.document(None, None)
    doc += para
    style._restyle(None, doc, "page")
    assert para.astext() == f"3205{NBSP}ulp off, and 2 1e-05 ulp"
    # a line break before the number too: the one after it is replaced, not the first equal one
    para = nodes.paragraph("", "", nodes.Text("within"), nodes.Text("\n"), nodes.inline("", "20"),
                           nodes.Text("\n"), nodes.Text("scaled ulp wherever"))
    doc = nodes.document(None, None)
    doc += para
    style._restyle(None, doc, "page")
    assert para.astext() == f"within\n20{NBSP}scaled ulp wherever"
