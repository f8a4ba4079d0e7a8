"""One meaning per symbol: the Notation page defines each symbol once, and the pages use the
unit roundoff and the condition number as it defines them.

The unit roundoff is $u_{\\mathrm{fmt}}$, the format's name as a subscript ($u$ alone, or
$u_\\varepsilon$, is the normalized core); $\\kappa$ is Chan, Golub and LeVeque's
$\\sqrt{1 + \\mu^2/q}$ (or $\\sigma^2$ for $q$).
"""

import re

import nbformat

from notebooks import BOOK, notebook_paths

NOTATION = BOOK / "notation.md"


def _symbols():
    rows = [line for line in NOTATION.read_text().splitlines() if line.startswith("| $")]
    return [line.split("|")[1].strip() for line in rows]


def _markdown(path):
    if path.suffix == ".md":
        return path.read_text()
    nb = nbformat.read(path, as_version=4)
    return "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


def _pages():
    return [*notebook_paths(), *sorted(BOOK.glob("*.md"))]


def test_each_symbol_is_defined_once():
    symbols = _symbols()
    assert len(symbols) > 10
    assert len(symbols) == len(set(symbols)), [s for s in symbols if symbols.count(s) > 1]
    # u alone is not an entry: it is the normalized core with its subscript dropped
    assert "$u$" not in symbols and r"$u_\varepsilon$" in symbols and r"$u_{\mathrm{fmt}}$" in symbols


def test_the_unit_roundoff_carries_its_format():
    # "unit roundoff $u$" or "$u = 2^{-53}$" would give u a second meaning.
    bare = re.compile(r"\$u\s*=\s*2\^|unit roundoff \$u\$|\$u\\kappa")
    for path in _pages():
        hits = bare.findall(_markdown(path))
        assert not hits, (path.name, hits)


def test_kappa_has_one_definition():
    defined = re.compile(r"\\kappa\s*=\s*([^$,]+)")
    for path in _pages():
        for rhs in defined.findall(_markdown(path)):
            assert rhs.strip().startswith(r"\sqrt{1 + \mu^2/"), (path.name, rhs)
