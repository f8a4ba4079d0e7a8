"""The practical guide as built: the chapters keep their numbers after its unnumbered part, it
fits its word budget, opens with its question, and its links land on sections. (Its values are
tested in tests/chapters/test_chapter_practical_guide.py, from the notebook.)"""

from __future__ import annotations

import re

from rendered import HTML, built_article, code_share

PAGE = "book/practical_guide"
# 1,500 words, plus the section on what the answers rest on and how far they reach (about 330
# words: its table of rules, evidence and reach). The table of q measured at initialization, the
# first step of the answer for a new model, is data and is not counted.
WORD_BUDGET = 1850


def test_the_chapters_keep_their_numbers(built_book):
    code, output = built_book
    assert code == 0, output[-3000:]
    # the sidebar's numbers: the guide's part is unnumbered, so chapter 1 is still "1."
    html = (HTML / "book" / "layer_norm_by_hand.html").read_text(encoding="utf-8")
    assert re.search(r">\s*1\.\s*Layer normalization by hand", html)
    assert re.search(r">\s*9\.\s*A trained network", html)
    frameworks = (HTML / "book" / "frameworks.html").read_text(encoding="utf-8")
    assert "Figure 7.1" in frameworks


def test_within_the_word_budget(built_book):
    code, output = built_book
    assert code == 0, output[-3000:]
    main = built_article(PAGE + ".html")
    share = code_share(main)
    probe = main.find("table", id="tbl-guide-probe")
    assert probe is not None
    words = share["total"] - len(probe.get_text(" ").split())
    assert words <= WORD_BUDGET, f"{words} words rendered besides the probe's table; at most {WORD_BUDGET}"
    # the only code is the probe's few lines, the first step of choosing epsilon
    blocks = [b.get_text() for b in main.select("div.highlight pre")]
    assert len(blocks) == 1 and "from lneps.torch import probe" in blocks[0], blocks
    assert share["code"] <= 30, f"{share['code']} words of code; the guide shows only the probe's lines"


def test_it_opens_with_the_question(built_book):
    code, output = built_book
    assert code == 0, output[-3000:]
    main = built_article(PAGE + ".html")
    first = main.find("h1").find_next("p")
    question = first.find("strong").get_text(" ")
    assert question.startswith("Which") and question.rstrip().endswith("?")
    assert "in which precision" in question


def test_the_built_links_land_on_sections(built_book):
    code, output = built_book
    assert code == 0, output[-3000:]
    main = built_article(PAGE + ".html")
    links = [a["href"] for a in main.select("a.reference.internal") if "#" in a.get("href", "")]
    assert len(links) > 20
    for href in links:
        page, anchor = href.split("#", 1)
        target = (HTML / "book" / page) if page else HTML / (PAGE + ".html")
        assert target.is_file(), href
        assert f'id="{anchor}"' in target.read_text(encoding="utf-8"), href
