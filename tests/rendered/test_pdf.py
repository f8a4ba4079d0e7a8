"""`make pdf` writes the whole book as a PDF: every chapter, math typeset, a table of
contents whose page numbers are right, and page numbers. Read back with poppler's pdftotext.

The PDF is made from the build of `make book` (the session fixture built_book), by the
session fixture built_pdf (tests/conftest.py).
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess

import pytest

from conftest import ROOT
from rendered import HTML, built_article, toc_pages

PDF = ROOT / "_build" / "pdf" / "layer-normalization-epsilon.pdf"
SINGLEHTML = ROOT / "_build" / "pdf" / "singlehtml" / "book.html"
RAW_TEX = re.compile(r"\\frac|\\sqrt|\\varepsilon|\\begin\{|\$\$|\\\(|\\\[")

pytestmark = pytest.mark.skipif(shutil.which("pdftotext") is None,
                                reason="pdftotext (poppler-utils) is not installed")


@pytest.fixture(scope="module")
def pdf(built_pdf):
    code, output = built_pdf
    # the build's own warnings first (they can stand far above the log's last lines)
    warnings = [line for line in output.splitlines() if "WARNING" in line or "ERROR" in line]
    assert code == 0, "\n".join(warnings) + "\n" + output[-3000:]
    assert PDF.is_file()
    text = subprocess.run(["pdftotext", "-layout", str(PDF), "-"], check=True,
                          capture_output=True, text=True).stdout
    return {"pages": [" ".join(p.split()) for p in text.split("\f")][:-1], "log": output}


@functools.cache
def chapter_titles() -> tuple[str, ...]:
    titles = []
    for page in toc_pages():
        h1 = built_article(page.html).find("h1")
        titles.append(" ".join(h1.get_text(" ").split()))
    return tuple(titles)


def test_every_chapter_is_in_the_pdf(pdf):
    text = " ".join(pdf["pages"])
    missing = [t for t in chapter_titles() if t not in text]
    assert missing == []
    assert len(pdf["pages"]) > 40


@functools.cache
def code_text() -> str:
    """All code blocks of the printed book (its singlehtml), whitespace removed: TeX inside
    a docstring shown as code is code, not a formula left untypeset."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(SINGLEHTML.read_text(), "html.parser")
    return "".join("".join(pre.get_text().split()) for pre in soup.find_all("pre"))


def raw_tex(text: str, code: str) -> list[str]:
    """The words of ``text`` that are raw TeX and not part of a code block."""
    return [w for w in text.split() if RAW_TEX.search(w) and w not in code]


def test_no_raw_tex_is_left(pdf):
    code = code_text()
    left = {n: raw_tex(t, code) for n, t in enumerate(pdf["pages"], start=1) if raw_tex(t, code)}
    assert left == {}


def test_raw_tex_is_found_outside_code():
    code = "".join(r"u=v/\sqrt{q+eps}".split())
    assert raw_tex(r"the core $$u = \frac{v}{s}$$ and u=v/\sqrt{q+eps}", code) == [
        "$$u", r"\frac{v}{s}$$"]


def test_the_contents_give_the_page_each_chapter_starts_on(pdf):
    contents = pdf["pages"][0]
    assert contents.startswith("Contents") or " Contents " in f" {contents} "
    for title in chapter_titles()[1:]:
        match = re.search(re.escape(title) + r"\s*(\d+)", contents)
        assert match, f"{title!r} is not in the table of contents"
        start = int(match.group(1))
        assert title in pdf["pages"][start - 1], f"{title!r} does not start on page {start}"


def test_pages_are_numbered(pdf):
    total = len(pdf["pages"])
    for n in (1, total // 2, total):
        assert re.search(rf"\b{n} / {total}\b", pdf["pages"][n - 1]), f"page {n} has no number"


def test_the_download_button_offers_the_pdf(pdf):
    assert (HTML / PDF.name).read_bytes() == PDF.read_bytes()
    page = (HTML / "book" / "layer_norm_by_hand.html").read_text()
    assert f'href="../{PDF.name}"' in page
