"""nbval passes a code cell with no stored output, so prove every notebook was executed.

A notebook passes when each code cell has an execution count, the counts are 1..n in order
(one clean top-to-bottom run in a fresh kernel), and no stored output is an error.
"""

import re

import pytest
import yaml

from notebooks import BOOK, ROOT, notebook_paths, read

NOTEBOOKS = notebook_paths()


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 1


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_executed_top_to_bottom(path):
    nb = read(path.relative_to(BOOK))
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, f"{path.name} has no code cells"
    assert all(c.source.strip() for c in code), f"{path.name} has an empty code cell"
    counts = [c.execution_count for c in code]
    assert None not in counts, f"{path.name}: unexecuted cells; run `make notebooks`"
    assert counts == list(range(1, len(code) + 1)), f"{path.name}: counts {counts}"
    for cell in code:
        for out in cell.outputs:
            assert out.output_type != "error", f"{path.name}: stored error {out.get('ename')}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_outputs_are_deterministic_text(path):
    # Addresses and timings change from run to run; nbval would compare them.
    text = path.read_text()
    assert not re.search(r" at 0x[0-9a-fA-F]{6,}", text), f"{path.name} stores a memory address"
    assert "Wall time" not in text and "CPU times" not in text


def _toc_files(entries):
    for entry in entries:
        if "file" in entry:
            yield entry["file"]
        yield from _toc_files(entry.get("chapters", []) + entry.get("sections", []))
        for part in entry.get("parts", []):
            yield from _toc_files(part.get("chapters", []))


def test_every_notebook_is_in_the_book():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    listed = set(_toc_files(toc.get("chapters", []) + toc.get("parts", [])))
    on_disk = {str(p.relative_to(ROOT).with_suffix("")) for p in NOTEBOOKS}
    assert on_disk <= listed, f"notebooks missing from _toc.yml: {sorted(on_disk - listed)}"


def test_nbval_compares_every_output_unsanitized():
    # nbval compares the stored outputs whole: no sanitizing pattern, so no output may hold what
    # changes from run to run (a memory address, a uuid).
    import json
    import re
    import tomllib

    addopts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    assert not any("sanitize" in opt for opt in addopts)
    volatile = re.compile(r"at 0x[0-9a-fA-F]+|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
    for path in sorted((ROOT / "book").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            for out in cell.get("outputs", []):
                text = "".join(out.get("text", "")) + json.dumps(out.get("data", {}))
                assert not volatile.search(text), path.name
