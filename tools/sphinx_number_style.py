"""Sphinx extension: one style for the numbers a reader reads, on every page.

The book writes a number in prose as ``1.3 × 10⁻⁶`` (true superscripts), ε as ``10⁻⁵`` and a
negative number with a true minus (``−2048``), and never lets a line break inside a number and
its power or unit. Most numbers on a page are computed: the notebooks paste them into the
prose, and some of the helpers that format them (and the measured tables, whose cells are
compact) write Python's ``1e-05`` and ``-2048``. This pass sets every such number in the book's
style where the page is rendered, so that the style has one home, whatever made the number.

It rewrites the text of the rendered document (prose, headings, captions, table cells, pasted
numbers and image alt text) and never code: literals, code cells and their printed outputs,
math and raw HTML are left as they are (what a reader copies into Python stays Python).

``tests/rendered/test_number_style.py`` checks the built pages against the same rules, so
that a number this pass cannot reach (raw HTML, a figure) is caught there.
"""

from __future__ import annotations

import re

from docutils import nodes
from sphinx import addnodes

NBSP = "\u00a0"
_SUPERSCRIPT = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")

# Python's scientific notation: 1e-05, 2.1e6, 1.5e+04 (not inside a word or a longer number,
# nor an argument written as code: norm_eps=1e-5).
E_NOTATION = re.compile(r"(?<![\w.=])(\d+(?:\.\d+)?)[eE]([+-]?)(\d+)(?![\w.])")
# A hyphen-minus that is a sign: before a digit, not inside a word, a range or a date.
HYPHEN_MINUS = re.compile(r"(?<![\w\-–—/.:#)\]])-(?=\d)")
# Spaces a line may not break at: around the × of a power, between a number and its unit.
SPACE_IN_POWER = re.compile(r"(?<=[\d)])[ \n]+(?=×)|(?<=×)[ \n]+(?=\d)")
UNITS = r"(?:scaled(?:\s+ulp|\s*$)|ulp|nats?|bits?|px|[KMG]i?B|ms)\b"
SPACE_BEFORE_UNIT = re.compile(r"(?<=[\d⁰¹²³⁴⁵⁶⁷⁸⁹])[ \n]+(?=" + UNITS + ")")
# The same space at the start of a text that follows a number pasted into the sentence.
LEADING_SPACE = re.compile(r"^[ \n]+(?=×|" + UNITS + ")")
UNIT_FIRST = re.compile(r"(?=×|" + UNITS + ")")
ENDS_IN_NUMBER = re.compile(r"[\d⁰¹²³⁴⁵⁶⁷⁸⁹]$")

# Nodes whose text is code or typeset by something else: left alone.
_CODE = (addnodes.desc_signature, nodes.literal, nodes.literal_block, nodes.math, nodes.math_block, nodes.raw,
         nodes.FixedTextElement, nodes.comment, nodes.substitution_definition)


def _power(sign: str, digits: str) -> str:
    exponent = int(digits) * (-1 if sign == "-" else 1)
    return "10" + str(exponent).translate(_SUPERSCRIPT)


def _e_notation(match: re.Match) -> str:
    mantissa, sign, digits = match.groups()
    power = _power(sign, digits)
    if float(mantissa) == 1 and set(mantissa) <= set("1.0"):
        return power
    return f"{mantissa}{NBSP}×{NBSP}{power}"


def number_style(text: str) -> str:
    """``text`` with its numbers in the book's style.

    >>> number_style("eps = 1e-05 gives -2048, 1.5e+04 scaled ulp; 2.1e6 ✗")
    'eps = 10⁻⁵ gives −2048, 1.5\\xa0×\\xa010⁴\\xa0scaled ulp; 2.1\\xa0×\\xa010⁶ ✗'
    >>> number_style("float16-safe x-1, 2026-12-02, rows 8-16, [-3, -1] near 2 × 10⁻⁸")
    'float16-safe x-1, 2026-12-02, rows 8-16, [−3, −1] near 2\\xa0×\\xa010⁻⁸'
    """
    text = E_NOTATION.sub(_e_notation, text)
    text = HYPHEN_MINUS.sub("−", text)
    text = SPACE_IN_POWER.sub(NBSP, text)
    return SPACE_BEFORE_UNIT.sub(NBSP, text)


def _in_code(node) -> bool:
    while node is not None:
        if isinstance(node, _CODE):
            return True
        classes = node.get("classes", []) if isinstance(node, nodes.Element) else []
        if "cell_input" in classes or ("output" in classes and "text_plain" in classes):
            return True
        node = node.parent
    return False


def _swap(old: nodes.Text, text: str) -> None:
    """Put ``text`` in place of the node ``old``, found by identity: a Text node is a str, so
    docutils' own replace() would find the first equal one (another line break)."""
    parent = old.parent
    i = next(i for i, child in enumerate(parent.children) if child is old)
    parent.children[i] = nodes.Text(text)
    parent.children[i].parent = parent


def _restyle(app, doctree, docname) -> None:
    before = ""  # the text before this one in reading order: a number pasted there?
    gap = None   # a text of white space alone (a line break) just after such a number
    for text in list(doctree.findall(nodes.Text)):
        if text.parent is None or _in_code(text.parent):
            before, gap = "", None
            continue
        old = str(text)
        if ENDS_IN_NUMBER.search(before) and old.strip() == "" and gap is None:
            gap = text  # the source's line break between a number and what follows
            continue
        new = number_style(old)
        if ENDS_IN_NUMBER.search(before):
            if gap is not None and UNIT_FIRST.match(new):
                _swap(gap, NBSP)
            new = LEADING_SPACE.sub(NBSP, new)
        if new != old:
            _swap(text, new)
        before, gap = new, None
    for image in doctree.findall(nodes.image):
        if image.get("alt"):
            image["alt"] = number_style(image["alt"])


def setup(app):
    # doctree-resolved: after myst-nb has pasted the notebooks' numbers into the prose
    app.connect("doctree-resolved", _restyle)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
