"""One name for one idea: no two modules of the package share a basename (``report.py``,
``precision.py``, ``figures.py``, ``stored.py`` and ``error_free.py`` once stood twice), so a
name in a traceback, an import or the API page points at one file."""

from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "lneps"


def test_no_module_basename_is_used_twice():
    where = defaultdict(list)
    for p in SRC.rglob("*.py"):
        if p.name != "__init__.py":
            where[p.name].append(str(p.relative_to(SRC)))
    assert len(where) > 50
    assert {name: paths for name, paths in where.items() if len(paths) > 1} == {}
