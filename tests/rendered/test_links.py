"""Every internal link of the built book leads somewhere: each href and src of every page
(outside _static and _sources) that names a file of the book names one that is there, and
each #anchor names an id on its page. The PDF is one of them: a page links
layer-normalization-epsilon.pdf only where `make pdf` has put it next to the pages.

Read from the HTML of `make book` (the session fixture built_book).
"""

from __future__ import annotations

import functools
from pathlib import Path
from urllib.parse import unquote, urlsplit

from bs4 import BeautifulSoup

from rendered import HTML

PDF_NAME = "layer-normalization-epsilon.pdf"


def html_pages(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.html")
                  if "_static" not in p.parts and "_sources" not in p.parts)


@functools.cache
def ids(page: Path) -> frozenset[str]:
    soup = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
    return frozenset(n["id"] for n in soup.find_all(id=True)) | frozenset(
        n["name"] for n in soup.find_all("a", attrs={"name": True}))


def broken_links(page: Path, root: Path) -> list[str]:
    """The links of ``page`` to files of the book under ``root`` that lead nowhere:
    'href target (why)' for each."""
    soup = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
    broken = []
    for node in soup.find_all(["a", "img", "link", "script", "source", "iframe"]):
        for attr in ("href", "src"):
            url = node.get(attr)
            if not url:
                continue
            parts = urlsplit(url)
            if parts.scheme or parts.netloc or url.startswith(("mailto:", "javascript:", "data:")):
                continue  # another site (an external request is the browser test's concern)
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if parts.path.endswith("/") or target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                broken.append(f"{attr} {url} (no file {target.relative_to(root.resolve())})"
                              if target.is_relative_to(root.resolve()) else
                              f"{attr} {url} (outside the book)")
                continue
            fragment = unquote(parts.fragment)
            if fragment and target.suffix == ".html" and fragment not in ids(target):
                broken.append(f"{attr} {url} (no id {fragment!r} on {target.name})")
    return broken


def test_every_internal_link_resolves(built_book):
    code, output = built_book
    assert code == 0, output[-3000:]
    pages = html_pages(HTML)
    assert len(pages) > 20
    broken = {p.relative_to(HTML).as_posix(): broken_links(p, HTML) for p in pages}
    assert {page: links for page, links in broken.items() if links} == {}


def test_the_pages_link_the_pdf_only_where_it_is(built_book):
    code, output = built_book
    assert code == 0, output[-3000:]
    page = (HTML / "book" / "layer_norm_by_hand.html").read_text(encoding="utf-8")
    assert (f'href="../{PDF_NAME}"' in page) == (HTML / PDF_NAME).is_file()


def test_a_missing_file_or_anchor_is_found(tmp_path):
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "a.html").write_text('<p id="here">x</p>')
    page = tmp_path / "book" / "b.html"
    page.write_text('<a href="a.html#here">ok</a> <a href="a.html#gone">anchor</a>'
                    f' <a href="../{PDF_NAME}">pdf</a> <img src="fig.png">'
                    ' <a href="https://example.org/x.pdf">away</a> <a href="#top">self</a>')
    assert broken_links(page, tmp_path) == [
        "href a.html#gone (no id 'gone' on a.html)",
        f"href ../{PDF_NAME} (no file {PDF_NAME})",
        "src fig.png (no file book/fig.png)",
        "href #top (no id 'top' on b.html)",
    ]
