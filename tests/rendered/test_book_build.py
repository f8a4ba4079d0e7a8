from conftest import SPHINX_WARNING, ROOT


def test_book_builds_without_a_warning(built_book):
    code, output = built_book
    warnings = [line for line in output.splitlines() if SPHINX_WARNING.search(line)]
    assert code == 0, output[-3000:]
    assert warnings == []
    assert (ROOT / "_build/html/book/layer_norm_by_hand.html").is_file()
