"""Every chapter follows the reader's path of the plan: it opens with "In this chapter" (the
question it answers, what the reader can do afterwards, what to know first) and closes with a
Summary whose numbers are computed and 2-5 Exercises with solutions in dropdowns, one of which
asks the reader to change and run code.

Read from the built HTML (the session fixture built_book) for every notebook chapter of
_toc.yml, and from the notebook's markdown for the Summary's numbers.

The practical guide (book/practical_guide), the first page after the introduction, is not a
chapter: it sits outside the numbered parts and has no "In this chapter", Summary or
Exercises. It is held to opening with the question it answers (below) and to its own budget
(tests/chapters/test_chapter_practical_guide.py).
"""

from __future__ import annotations

import re

import nbformat
import pytest

from rendered import built_article, chapter_pages, reader_pages

# Chapters are the notebooks of the numbered parts: not the guide (its own part, "Start here"),
# and not an appendix page that computes (a notebook under "Appendix").
GUIDE = "book/practical_guide"
CHAPTERS = chapter_pages()
# What a number typed into prose looks like, once math ($...$) and roles ({glue:text}`x`,
# {eq}`x`, {numref}`x`...) are taken out: a digit not glued to letters (float16 is a name).
ROLE = re.compile(r"\{[a-z:]+\}`[^`]*`")
MATH = re.compile(r"\$[^$]+\$")
TYPED_NUMBER = re.compile(r"(?<![A-Za-z0-9_.])\d[\d.,]*(?:e-?\d+)?(?![A-Za-z])")


def _section(main, title: str):
    for h2 in main.find_all("h2"):
        if h2.get_text(" ").split()[-1] == title or title in h2.get_text(" "):
            return h2.find_parent("section")
    return None


@pytest.fixture(scope="module")
def pages(built_book):
    code, output = built_book
    assert code == 0, output[-3000:]
    return {p.file: built_article(p.html) for p in CHAPTERS}


def test_the_guide_is_not_a_chapter_but_opens_with_its_question(built_book):
    code, output = built_book
    assert code == 0, output[-3000:]
    assert GUIDE in {p.file for p in reader_pages()}
    main = built_article(GUIDE + ".html")
    question = main.find("h1").find_next("p").find("strong").get_text(" ").strip()
    assert question.startswith("Which") and question.endswith("?"), question
    titles = [h.get_text(" ") for h in main.find_all("h2")]
    assert not any(t.startswith(("Summary", "Exercises")) for t in titles)


@pytest.mark.parametrize("page", CHAPTERS, ids=lambda p: p.file)
def test_opens_with_in_this_chapter(pages, page):
    main = pages[page.file]
    boxes = [a for a in main.select("div.admonition")
             if a.select_one(".admonition-title") and
             a.select_one(".admonition-title").get_text(strip=True) == "In this chapter"]
    assert len(boxes) == 1, f"{page.html}: no 'In this chapter' box"
    text = boxes[0].get_text(" ")
    # the question the chapter answers, what the reader can do afterwards, what to know first
    for phrase in ("The question.", "Afterwards you can", "You should know"):
        assert phrase in text, f"{page.html}: the 'In this chapter' box lacks {phrase!r}"
    # it comes before the first section of the chapter
    first_h2 = main.find("h2")
    assert first_h2 is None or boxes[0].find_all_next("h2")[:1] == [first_h2]


@pytest.mark.parametrize("page", CHAPTERS, ids=lambda p: p.file)
def test_closes_with_a_summary_and_exercises(pages, page):
    main = pages[page.file]
    summary, exercises = _section(main, "Summary"), _section(main, "Exercises")
    assert summary is not None and exercises is not None, f"{page.html}: no Summary or Exercises"
    assert main.find_all("h2")[-2:] == [summary.find("h2"), exercises.find("h2")], (
        "Summary and Exercises are the chapter's last two sections")
    bullets = summary.find("ul").find_all("li", recursive=False)
    assert 3 <= len(bullets) <= 6, f"{page.html}: {len(bullets)} summary bullets"
    items = exercises.find("ol").find_all("li", recursive=False)
    assert 2 <= len(items) <= 5, f"{page.html}: {len(items)} exercises"
    for item in items:
        dropdowns = item.find_all("details")
        assert dropdowns and "Solution" in dropdowns[0].find("summary").get_text(), (
            f"{page.html}: an exercise without a solution in a dropdown")
    # the question of each exercise: its text outside the solution's dropdown
    questions = [" ".join(t for t in item.find_all(string=True)
                          if not any(p.name == "details" for p in t.parents)) for item in items]
    assert any(re.search(r"\brun\b", q) and re.search(r"\bchange\b", q, re.I) for q in questions), (
        f"{page.html}: no exercise asks the reader to change and run code")


@pytest.mark.parametrize("page", CHAPTERS, ids=lambda p: p.file)
def test_the_summary_numbers_are_computed(page):
    nb = nbformat.read(page.source, as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    match = re.search(r"^## Summary\n(.*?)^## ", text, re.S | re.M)
    assert match, f"{page.source.name}: no '## Summary' section"
    summary = MATH.sub(" ", ROLE.sub(" ", match.group(1)))
    typed = TYPED_NUMBER.findall(summary)
    assert typed == [], f"{page.source.name}: numbers typed into the summary: {typed}"
