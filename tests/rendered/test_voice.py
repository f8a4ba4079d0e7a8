"""The book's voice: outside the appendix "How this book checks itself", no page talks about
how the book is made.

Read from the built HTML (the session fixture built_book): the whole main column of every
page in _toc.yml, code and outputs included, plus the alt text and hover titles a reader
meets. Each forbidden word is matched as a whole word, with its plurals (tests/rendered.py).
"""

import pytest

from rendered import (APPENDIX, FORBIDDEN, REFERENCE, built_article, forbidden_words, reader_pages,
                      rendered_text, toc_pages)

PAGES = reader_pages()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.file)
def test_no_word_about_the_machinery(built_book, page):
    code, output = built_book
    assert code == 0, output[-3000:]
    found = forbidden_words(rendered_text(built_article(page.html)))
    assert found == {}, f"{page.html} talks about how the book is made: {found}"


def test_the_appendix_is_in_the_book_and_exempt():
    assert APPENDIX in {p.file for p in toc_pages()}
    assert APPENDIX not in {p.file for p in PAGES}
    assert REFERENCE in {p.file for p in toc_pages()} and REFERENCE not in {p.file for p in PAGES}


@pytest.mark.parametrize("text, word", [
    ("The seed's numbers", "seed"), ("rng seeded with 5", "seed"), ("Issue 5 says", "issue"),
    ("pasted in with glue", "glue"), ("glued values", "glue"), ("CI runs nbval", "nbval"),
    ("see tests/test_x.py", "tests/"), ("the committed file", "committed"),
    ("a browser test reads", "browser test"), ("# NBVAL_IGNORE_OUTPUT", "NBVAL_"),
    ("from myst_nb import glue", "myst-nb"), ("myst-nb's role", "myst-nb"),
])
def test_the_detector_finds_each_word(text, word):
    assert word in forbidden_words(text)


@pytest.mark.parametrize("text", [
    "Seedless words: tissue, issuer? no: linseed", "gluon", "the tests pass", "committee",
])
def test_the_detector_matches_whole_words_only(text):
    # "tissue", "gluon", "committee": not the words; "linseed" is not "seed" either.
    assert forbidden_words(text) == {}
    assert set(FORBIDDEN) >= {"seed", "issue", "glue", "nbval", "tests/", "committed",
                              "browser test", "NBVAL_", "myst-nb"}
