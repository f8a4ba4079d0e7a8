"""Every page fits the reader's screen, at 1280 x 900 and at 390 x 844 (a phone).

Measured in Chromium on the built book (tests/browser.py; the session fixture built_book),
after opening every dropdown and folded cell, in the main column of every page of _toc.yml:

* no element is wider than the column, unless it sits in a scroll box of its own (a wide
  table's container, a code block);
* no box that hides its overflow is hiding any (a clipped formula, a clipped figure);
* no display formula needs to scroll: long equations break;
* the page never scrolls sideways;
* every figure is drawn at the width it is shown on a laptop, and its smallest text is at
  least 9 CSS px as displayed, on a laptop and on a phone. The text size is read from the
  figure's PNG, which lneps.book.plotting stamps with the figure's design width and its smallest
  font size, measured on the figure's own text artists when it was drawn.

* every table scrolls only inside a box of its own, never the page; a table wider than the
  column (a phone) keeps its first column pinned while it scrolls (CSS position: sticky), and
  no cell cuts its text.

And, from the HTML alone: every figure has a number, a caption and alt text.
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

import pytest
from PIL import Image

from browser import VIEWPORTS
from rendered import HTML, built_article, toc_pages

PAGES = toc_pages()
MIN_TEXT_PX = 9.0


def _layout(visits, page, size):
    visit = visits.get(page.html)
    assert visit is not None, f"{page.html} was not visited (not built?)"
    assert size in visit["layout"], f"{page.html}: no main column measured"
    return visit["layout"][size]


@pytest.mark.parametrize("size", list(VIEWPORTS))
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.file)
def test_nothing_is_wider_than_the_column(visits, page, size):
    m = _layout(visits, page, size)
    problems = {
        "wider than the column": m["overflow"],
        "clipped": m["clipped"],
        "display formula scrolls": m["math"],
    }
    problems = {k: v for k, v in problems.items() if v}
    assert m["page"] <= m["viewport"], f"{page.html} scrolls sideways: {m['page']} px"
    assert problems == {}, f"{page.html} at {VIEWPORTS[size]}: {problems}"


def figure_record(png_path) -> dict:
    """The design width and smallest text size lneps.book.plotting stamps into a figure's PNG."""
    info = Image.open(png_path).info
    if "lneps:css-width" not in info:
        return {}
    return {"css_width": float(info["lneps:css-width"]),
            "min_text_px": float(info["lneps:min-text-px"])}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.file)
def test_figures_are_drawn_at_their_size_with_readable_text(visits, page):
    problems = []
    for size in VIEWPORTS:
        for img in _layout(visits, page, size)["images"]:
            path = HTML / unquote(urlsplit(img["src"]).path).lstrip("/")
            record = figure_record(path) if path.suffix == ".png" else {}
            if not record:
                problems.append(f"{path.name}: no size record; draw it with lneps.book.plotting")
                continue
            scale = img["shown"] / record["css_width"]
            text = record["min_text_px"] * scale
            if size == "desktop" and abs(scale - 1) > 0.01:
                problems.append(f"{path.name}: drawn {record['css_width']:.0f} px wide, "
                                f"shown {img['shown']:.0f} px at {VIEWPORTS[size]}")
            if text < MIN_TEXT_PX:
                problems.append(f"{path.name}: smallest text {text:.1f} px at {VIEWPORTS[size]}")
    assert problems == [], f"{page.html}: {sorted(set(problems))}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.file)
def test_every_figure_has_a_number_a_caption_and_alt_text(built_book, page):
    code, output = built_book
    assert code == 0, output[-3000:]
    main = built_article(page.html)
    problems = []
    for img in main.find_all("img"):
        figure = img.find_parent("figure")
        name = img.get("src", "?").rsplit("/", 1)[-1][:24]
        if not (img.get("alt") or "").strip():
            problems.append(f"{name}: no alt text")
        if figure is None:
            problems.append(f"{name}: not a figure (no number, no caption)")
            continue
        caption = figure.find("figcaption")
        if caption is None or caption.select_one(".caption-number") is None:
            problems.append(f"{name}: no figure number")
        elif len(caption.get_text(" ").split()) < 5:
            problems.append(f"{name}: no caption")
    assert problems == [], f"{page.html}: {problems}"


@pytest.mark.parametrize("size", list(VIEWPORTS))
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.file)
def test_tables_scroll_in_their_own_box_with_the_first_column_pinned(visits, page, size):
    problems = []
    for t in _layout(visits, page, size).get("tables", []):
        if t["cut"]:
            problems.append(f"{t['name']}: text cut in {t['cut']}")
        if t["wider"] and not t["scrolls"]:
            problems.append(f"{t['name']}: {t['width']} px wide and no scroll box of its own")
        if t["wider"] and not t["pinned"]:
            problems.append(f"{t['name']}: scrolls, but its first column is not pinned")
    assert problems == [], f"{page.html} at {VIEWPORTS[size]}: {problems}"
