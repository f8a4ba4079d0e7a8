"""Read what a notebook stored: its code cells, printed text and glued values.

Tests use this to tie the prose (glued values) and the printed outputs of the book to values
they compute independently.
"""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"


def notebook_paths() -> list[Path]:
    return sorted(p for p in BOOK.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


def read(name: str):
    return nbformat.read(BOOK / name, as_version=4)


def markdown(name: str) -> str:
    """The notebook's markdown cells, joined."""
    return "\n".join(c.source for c in read(name).cells if c.cell_type == "markdown")


def glued(name: str) -> dict:
    """Every ``glue(name, value)`` the notebook stored, as Python values where literal."""
    values = {}
    for cell in read(name).cells:
        for out in cell.get("outputs", []):
            record = out.get("metadata", {}).get("scrapbook", {})
            if "name" not in record:
                continue
            key = record["name"]
            text = out["data"].get(record["mime_prefix"] + "text/plain", "")
            try:
                values[key] = ast.literal_eval(text)
            except (SyntaxError, ValueError):
                values[key] = text
    return values


def glued_rich(name: str, key: str, mime: str = "text/html") -> str:
    """What a glue of a rich object (a table, an HTML block) stored under ``mime``: glued() keeps
    only its text/plain."""
    for cell in read(name).cells:
        for out in cell.get("outputs", []):
            record = out.get("metadata", {}).get("scrapbook", {})
            if record.get("name") == key:
                return out["data"][record["mime_prefix"] + mime]
    raise KeyError(key)


def stream_text(name: str) -> list[str]:
    """The stdout text of each code cell that printed something, in order."""
    texts = []
    for cell in read(name).cells:
        if cell.cell_type != "code":
            continue
        out = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("name") == "stdout")
        if out:
            texts.append(out)
    return texts
