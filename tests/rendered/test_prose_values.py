"""The values pasted into the prose read as words a reader wants, never as "True" or "False".

Every page of book/ is read as MyST Markdown (the notebooks' markdown cells and the .md
pages): each reference to a glued value, the roles {glue}, {glue:any}, {glue:text} and
{glue:md} and the glue directives (inside other directives too: a figure's caption, a
dropdown), with ``other.ipynb::name`` resolved in that notebook. The value is what the notebook
stored: the text/plain of the output that myst-nb records under the name (its "scrapbook"
metadata). A Boolean there, or a string that says one, would print "(True)" into a sentence;
a check belongs in a hidden cell's assert or in the chapter's test, and the sentence should
say the fact ("at all 13 sites").
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from markdown_it.renderer import RendererHTML
from myst_parser.config.main import MdParserConfig
from myst_parser.parsers.mdit import create_md_parser

from notebooks import BOOK, notebook_paths

# What a glued Boolean stores as text/plain: Python's and NumPy's bool, or a string saying one.
BOOLEAN_TEXTS = {"True", "False", "np.True_", "np.False_", "numpy.True_", "numpy.False_",
                 "'True'", "'False'", '"True"', '"False"'}
GLUE_ROLES = {"glue", "glue:", "glue:any", "glue:text", "glue:md"}

_MD = create_md_parser(MdParserConfig(enable_extensions={"colon_fence", "dollarmath"}), RendererHTML)


def stored_values(nb) -> dict[str, str]:
    """name -> the text/plain a notebook stored for each glued value."""
    values = {}
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            record = out.get("metadata", {}).get("scrapbook", {})
            if "name" in record:
                values[record["name"]] = out.get("data", {}).get(record.get("mime_prefix", "") + "text/plain", "")
    return values


def _key(role: str, content: str) -> tuple[str | None, str]:
    """(other notebook or None, name) of a role's content: ``[doc::]name[:format]``."""
    doc, _, rest = content.rpartition("::")
    name = rest.split(":", 1)[0] if role in ("glue:text", "glue:md") else rest
    return (doc or None), name.strip()


def glue_references(markdown: str) -> list[tuple[str | None, str]]:
    """Every glued value a piece of MyST Markdown pastes: (other notebook or None, name), in order."""
    refs = []
    for token in _MD.parse(markdown):
        if token.type == "inline":
            for child in token.children or []:
                if child.type == "myst_role" and child.meta.get("name") in GLUE_ROLES:
                    refs.append(_key(child.meta["name"], child.content))
        elif token.type in ("fence", "colon_fence") and token.info.startswith("{"):
            name, _, argument = token.info[1:].partition("}")
            if name.startswith("glue") and argument.strip():
                refs.append(_key("glue", argument.strip()))
            refs += glue_references(token.content)   # a directive's body is Markdown too
    return refs


def _page_markdown(path: Path) -> list[tuple[str, str]]:
    """(where, markdown) of each markdown cell of a notebook, or of a whole .md page."""
    if path.suffix == ".md":
        return [(path.name, path.read_text(encoding="utf-8"))]
    nb = nbformat.read(path, as_version=4)
    return [(f"{path.name} cell {c.get('id', i)}", c.source)
            for i, c in enumerate(nb.cells) if c.cell_type == "markdown"]


def boolean_pastes(path: Path) -> tuple[list[str], list[str]]:
    """(references to a Boolean value, references to no stored value) on one page."""
    values = {None: stored_values(nbformat.read(path, as_version=4)) if path.suffix == ".ipynb" else {}}
    booleans, missing = [], []
    for where, markdown in _page_markdown(path):
        for doc, name in glue_references(markdown):
            if doc not in values:
                values[doc] = stored_values(nbformat.read(path.parent / doc, as_version=4))
            label = f"{where}: {doc + '::' if doc else ''}{name}"
            if name not in values[doc]:
                missing.append(label)
            elif values[doc][name].strip() in BOOLEAN_TEXTS:
                booleans.append(f"{label} = {values[doc][name].strip()}")
    return booleans, missing


PAGES = notebook_paths() + sorted(BOOK.glob("*.md"))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_glued_boolean_is_pasted_into_the_prose(page):
    booleans, missing = boolean_pastes(page)
    assert missing == [], f"pasted values that no notebook stored: {missing}"
    assert booleans == [], (
        f"{page.name} prints a Boolean into its prose; say the fact in words, and check it in a "
        f"hidden cell or the chapter's test: {booleans}")


def test_every_notebook_is_read():
    assert {p.name for p in notebook_paths()} >= {"backward_pass.ipynb", "trained_network.ipynb",
                                                   "testing_a_kernel.ipynb", "claims.ipynb"}


# The detector itself, on a made-up notebook.

def _notebook(tmp_path: Path, markdown: str, values: dict, name="page.ipynb") -> Path:
    outputs = [nbformat.v4.new_output(
        "display_data", data={"application/papermill.record/text/plain": text},
        metadata={"scrapbook": {"name": key, "mime_prefix": "application/papermill.record/"}})
        for key, text in values.items()]
    code = nbformat.v4.new_code_cell("glue(...)", outputs=outputs)
    nb = nbformat.v4.new_notebook(cells=[code, nbformat.v4.new_markdown_cell(markdown)])
    path = tmp_path / name
    nbformat.write(nb, path)
    return path


@pytest.mark.parametrize("markdown", [
    "Every gradient is finite ({glue:text}`ok`).",
    "All of them: {glue}`ok`.",
    "As a number: {glue:text}`ok:.0f`.",
    "```{dropdown} Solution\nIt holds ({glue:text}`ok`).\n```",
    "```{glue:figure} ok\n:name: fig-x\n\nA caption.\n```",
    "From elsewhere: {glue:text}`other.ipynb::ok:s`.",
])
def test_the_detector_finds_a_boolean(tmp_path, markdown):
    _notebook(tmp_path, "", {"ok": "True"}, name="other.ipynb")
    page = _notebook(tmp_path, markdown, {"ok": "True"})
    booleans, missing = boolean_pastes(page)
    assert missing == [] and len(booleans) == 1 and booleans[0].endswith("ok = True")


@pytest.mark.parametrize("text", ["False", "np.True_", "'True'"])
def test_the_detector_finds_every_spelling(tmp_path, text):
    page = _notebook(tmp_path, "It is {glue:text}`ok`.", {"ok": text})
    assert len(boolean_pastes(page)[0]) == 1


def test_the_detector_passes_numbers_words_and_literal_roles(tmp_path):
    markdown = ("At all {glue:text}`n:,` sites, the gradient is {glue:text}`fate` "
                "(written `` {glue:text}`ok` `` in the source).\n\n```python\nglue('ok', True)\n```")
    page = _notebook(tmp_path, markdown, {"n": "13", "fate": "'NaN'", "ok": "True"})
    assert boolean_pastes(page) == ([], [])


def test_the_detector_reports_a_value_never_stored(tmp_path):
    page = _notebook(tmp_path, "It is {glue:text}`absent:.2f`.", {})
    booleans, missing = boolean_pastes(page)
    assert booleans == [] and len(missing) == 1 and missing[0].endswith(": absent")
