"""tools/sphinx_wait_for_prefill.py: when Sphinx may read a notebook that `make book` is still
executing, and tools/run_notebooks.py's side of the exchange (the files it writes)."""

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import run_notebooks  # noqa: E402
from sphinx_wait_for_prefill import marker, wait_for  # noqa: E402

NB = "/book/a.ipynb"


def test_a_notebook_to_execute_is_waited_for_until_it_is_done(tmp_path):
    (tmp_path / "todo.json").write_text(json.dumps([NB, "/book/b.ipynb"]))
    threading.Timer(0.3, lambda: marker(tmp_path, NB).write_text("0")).start()
    start = time.monotonic()
    assert wait_for(tmp_path, NB, timeout=10) == "done"
    assert time.monotonic() - start >= 0.25


def test_what_is_not_executed_is_not_waited_for(tmp_path):
    (tmp_path / "todo.json").write_text(json.dumps(["/book/b.ipynb"]))
    assert wait_for(tmp_path, NB, timeout=10) == "not executed here"


def test_the_wait_ends_when_the_executor_stops_or_is_gone(tmp_path):
    assert wait_for(tmp_path, NB, timeout=0.2) == "timeout"   # nothing written yet
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert wait_for(tmp_path, NB, pid=str(dead.pid), timeout=10) == "gone"
    (tmp_path / "end").write_text("1")
    assert wait_for(tmp_path, NB, timeout=10) == "stopped"


def test_markers_are_per_notebook(tmp_path):
    assert marker(tmp_path, NB) != marker(tmp_path, "/book/b.ipynb")
    assert marker(tmp_path, NB).parent == tmp_path and marker(tmp_path, NB).suffix == ".done"


@pytest.mark.parametrize("mode", ["off", "cache"])
def test_run_notebooks_always_writes_the_end(tmp_path, mode):
    config = tmp_path / "_config.yml"
    config.write_text(f"execute:\n  execute_notebooks: {mode}\n")
    signal = tmp_path / "signal"
    # No notebook at all: nothing to execute, and the waiting side must still be released.
    code = run_notebooks.fill_cache([], tmp_path / "cache", 2, config, signal)
    assert code == 0 and (signal / "end").read_text() == "0"
    if mode == "cache":
        assert json.loads((signal / "todo.json").read_text()) == []
