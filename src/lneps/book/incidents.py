"""Real reports about the layer-normalization epsilon: the table behind chapter 7's
"Incidents, recomputed" (``src/lneps/book/data/frameworks/incidents.toml``, package data).

Each incident names its thread (``thread``, ``url``, the ``references.bib`` key ``cite``), what
was reported, what the chapter recomputes, and the numbers copied from the thread
(``quoted``), which the chapter marks as quoted. The recomputations themselves are a few lines
of NumPy and :mod:`lneps` each, in the chapter.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

__all__ = ["INCIDENTS_FILE", "FIELDS", "load", "by_key"]

INCIDENTS_FILE = Path(__file__).resolve().parent / "data" / "frameworks" / "incidents.toml"  # package data
FIELDS = ("key", "thread", "url", "cite", "report", "recompute", "quoted")


def load(path=None) -> list[dict]:
    """The incidents, in file order; ``ValueError`` naming the first bad entry."""
    data = tomllib.loads(Path(path or INCIDENTS_FILE).read_text(encoding="utf-8"))
    incidents = data.get("incident", [])
    if not incidents:
        raise ValueError("no [[incident]] entries")
    seen = set()
    for i, inc in enumerate(incidents):
        missing = [f for f in FIELDS if f not in inc]
        if missing:
            raise ValueError(f"incident {i} lacks {missing}")
        if not inc["url"].startswith("https://github.com/") or "/blob/main/" in inc["url"]:
            raise ValueError(f"incident {inc['key']}: url must be a GitHub thread, got {inc['url']!r}")
        if not isinstance(inc["quoted"], dict):
            raise ValueError(f"incident {inc['key']}: quoted must be a table")
        if inc["key"] in seen:
            raise ValueError(f"duplicate incident key {inc['key']!r}")
        seen.add(inc["key"])
    return incidents


def by_key(path=None) -> dict[str, dict]:
    """:func:`load` as ``{key: incident}``."""
    return {inc["key"]: inc for inc in load(path)}
