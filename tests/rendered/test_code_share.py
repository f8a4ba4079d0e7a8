"""Code and output are at most 40 % of each page's words, measured on the built HTML (the
session fixture built_book).

A page's words are the whitespace-separated tokens of its main column; code and output are
those inside code cells (input and output, folded cells included) and other code blocks
(tests/rendered.py, ``code_share``). The appendix is exempt: it shows how the book checks
itself, in code.
"""

import pytest

from rendered import article, built_article, chapter_pages, code_share, reader_pages

LIMIT = 0.40
PAGES = reader_pages()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.file)
def test_code_is_at_most_40_percent_of_the_words(built_book, page):
    code, output = built_book
    assert code == 0, output[-3000:]
    share = code_share(built_article(page.html))
    assert share["total"] > 100, f"{page.html} has almost no text: {share}"
    assert share["share"] <= LIMIT, (
        f"{page.html}: code and output are {share['share']:.0%} of its words "
        f"({share['code']} of {share['total']}); at most {LIMIT:.0%}")


def _page(body: str):
    return article(f'<html><body><article class="bd-article">{body}</article></body></html>')


def test_the_measure_counts_cells_and_code_blocks_once():
    main = _page(
        "<h1>Title<a class='headerlink'>#</a></h1><p>one two three four five six</p>"
        "<div class='cell'><div class='cell_input'><div class='highlight'><pre>x = 1</pre>"
        "</div></div><div class='cell_output'><pre>1</pre></div></div>"
        "<div class='highlight-python'><pre>def f(): pass</pre></div>"
        "<script>var not_words = 1;</script>")
    share = code_share(main)
    # words: Title + six prose words + "x = 1" (3) + "1" + "def f(): pass" (3)
    assert (share["total"], share["code"]) == (14, 7)
    assert share["share"] == pytest.approx(0.5)


def test_a_page_of_prose_has_no_code():
    share = code_share(_page("<p>" + "word " * 50 + "</p>"))
    assert (share["code"], share["total"], share["share"]) == (0, 50, 0.0)


# A chapter is read in one sitting: at most 3,000 words of prose and 1,500 of code and output,
# as rendered (the guide has its own, smaller budget: tests/chapters/test_chapter_practical_guide.py).
PROSE_BUDGET, CODE_BUDGET = 3000, 1500


@pytest.mark.parametrize("page", chapter_pages(), ids=lambda p: p.file)
def test_each_chapter_fits_its_budget(built_book, page):
    code, output = built_book
    assert code == 0, output[-3000:]
    share = code_share(built_article(page.html))
    assert share["prose"] <= PROSE_BUDGET and share["code"] <= CODE_BUDGET, (
        f"{page.html}: {share['prose']} words of prose (at most {PROSE_BUDGET}) and "
        f"{share['code']} of code and output (at most {CODE_BUDGET})")
