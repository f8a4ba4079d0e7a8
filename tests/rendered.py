"""The book as a reader meets it: the pages of _toc.yml, and the text of each built page.

Shared by the voice test, the code-share test, the layout test and the PDF test, so that
each is written once over every page of the table of contents (a chapter added to _toc.yml
is checked with no change here). Pages are read from the built HTML, not from the
notebooks: what counts is what the reader sees.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import yaml
from bs4 import BeautifulSoup

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"

APPENDIX = "book/how_this_book_checks_itself"
"""The one page that may talk about how the book is made (glue, nbval, the tests...)."""

# Words about the book's own machinery, which belong in the appendix only. Case-insensitive,
# whole words, with their plurals and participles.
FORBIDDEN = {
    "seed": r"\bseed(?:s|ed|ing)?\b",
    "issue": r"\bissue[sd]?\b",
    "glue": r"\bglue[sd]?\b",
    "nbval": r"\bnbval\b",
    "tests/": r"\btests/",
    "committed": r"\bcommitted\b",
    "browser test": r"\bbrowser[ -]tests?\b",
    "NBVAL_": r"NBVAL_",
    "myst-nb": r"\bmyst[-_]nb\b",
}
URL = re.compile(r"https?://\S+")
FORBIDDEN_RE = {word: re.compile(pattern, re.IGNORECASE) for word, pattern in FORBIDDEN.items()}

# What counts as code and output on a page: code cells (input and output) and every other
# code block (literalinclude, fenced code in the prose or in a dropdown).
CODE_SELECTORS = ("div.cell_input", "div.cell_output", "pre")
# Never text a reader reads: scripts, styles, and the pilcrow-like "#" of heading links.
NOT_TEXT = ("script", "style", "a.headerlink")


@dataclass(frozen=True)
class Page:
    file: str   # as in _toc.yml: "book/layer_norm_by_hand"
    part: str   # the part's caption, "" for the root and for pages outside a part

    @property
    def html(self) -> str:
        """Path of the built page, relative to _build/html."""
        return self.file + ".html"

    @property
    def source(self) -> Path:
        for ext in (".ipynb", ".md"):
            path = ROOT / (self.file + ext)
            if path.is_file():
                return path
        raise FileNotFoundError(f"no source for {self.file} (.ipynb or .md)")

    @property
    def is_notebook(self) -> bool:
        return self.source.suffix == ".ipynb"


def _entries(entries, part: str):
    for entry in entries or []:
        if "file" in entry:
            yield Page(entry["file"], part)
        yield from _entries(entry.get("chapters", []) + entry.get("sections", []), part)


def toc_pages(toc_path: Path = ROOT / "_toc.yml") -> list[Page]:
    """Every page of the table of contents, in reading order: root, then parts/chapters."""
    toc = yaml.safe_load(toc_path.read_text())
    pages = [Page(toc["root"], "")]
    pages += list(_entries(toc.get("chapters"), ""))
    for part in toc.get("parts", []) or []:
        pages += list(_entries(part.get("chapters"), part.get("caption", "")))
    return pages


REFERENCE = "book/api"
"""The API reference: docstrings, which name parameters such as ``seed``, and signatures."""


def reader_pages() -> list[Page]:
    """The pages the voice and code-share rules apply to: all but the appendix and the API
    reference."""
    return [p for p in toc_pages() if p.file not in (APPENDIX, REFERENCE)]


def chapter_pages() -> list[Page]:
    """The chapters: the notebooks of the numbered parts ("Part I. ...", not the appendix)."""
    return [p for p in reader_pages() if p.is_notebook and p.part.startswith("Part ")]


def article(html_text: str):
    """The main column of a built page (sphinx-book-theme's ``article.bd-article``)."""
    soup = BeautifulSoup(html_text, "html.parser")
    main = soup.select_one("article.bd-article")
    if main is None:
        raise ValueError("no <article class='bd-article'> in the page")
    for node in main.select(", ".join(NOT_TEXT)):
        node.decompose()
    return main


@functools.cache
def built_article(html: str):
    """:func:`article` of the built page ``html`` (relative to _build/html), parsed once per
    test session; callers must not modify it."""
    return article((HTML / html).read_text(encoding="utf-8"))


def words(text: str) -> list[str]:
    """Runs of characters between ASCII white space, as ``wc -w`` counts: a non-breaking space
    joins, so ``1.3 × 10⁻⁶`` (non-breaking spaces around ×) is one word, as it reads."""
    return re.split(r"[ \t\n\r\f\v]+", text.strip(" \t\n\r\f\v")) if text.strip() else []


def rendered_text(main) -> str:
    """All the text of the article, code and outputs included, plus what the page says in
    attributes a reader meets: image alt text and hover titles (a citation's title).

    An address (``https://github.com/.../issues/41527``, as the bibliography prints them) is
    not prose: it names a page, and is left out.
    """
    parts = [main.get_text(" ")]
    for node in main.find_all(True):
        for attr in ("alt", "title", "aria-label"):
            if node.get(attr):
                parts.append(node[attr])
    return URL.sub(" ", " ".join(parts))


def forbidden_words(text: str) -> dict[str, list[str]]:
    """{word: [the matches, in context]} for each machinery word found in ``text``."""
    found = {}
    for word, rx in FORBIDDEN_RE.items():
        hits = [text[max(0, m.start() - 40):m.end() + 40].replace("\n", " ")
                for m in rx.finditer(text)]
        if hits:
            found[word] = hits
    return found


def code_share(main) -> dict:
    """Words of code and output against all words of the article.

    Code is every code cell (input and output, folded ones included: they are on the page,
    a click away) and every other code block. Prose is everything else: text, headings,
    captions, dropdowns, and math (counted by its TeX tokens). A word is a run of characters
    between white space, as ``wc -w`` counts: code keeps its own spacing (the highlighter's
    spans are not word breaks), prose is read with a break at every element.
    """
    code_nodes = []
    for node in main.select(", ".join(CODE_SELECTORS)):
        # count each block once: skip a <pre> inside a cell already counted
        if not any(parent in code_nodes for parent in node.parents):
            code_nodes.append(node)
    code = sum(len(words(n.get_text())) for n in code_nodes)
    inside = {id(n) for n in code_nodes}
    prose = sum(len(words(t)) for t in main.find_all(string=True)
                if not any(id(p) in inside for p in t.parents))
    total = prose + code
    return {"total": total, "code": code, "prose": prose, "share": code / total if total else 0.0}
