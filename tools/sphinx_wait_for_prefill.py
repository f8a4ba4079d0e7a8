"""Sphinx extension: Sphinx starts while the notebooks still execute, and reads each notebook
only once it is in the cache.

`make book` executes the notebooks into the jupyter-cache (tools/run_notebooks.py) on every
core, and Sphinx then only renders. Run one after the other, one core sat idle through all of
Sphinx (6 s of a 23 s cold build). So `make book` starts both at once, with
``LNEPS_PREFILL_DIR`` naming the folder where tools/run_notebooks.py signals its progress:

- ``todo.json``: the notebooks it will execute (resolved paths), written before the first;
- ``<key>.done``: one notebook finished (:func:`marker`; stored in the cache, or failed);
- ``end``: it has stopped, with its exit code.

Before Sphinx reads a notebook (``source-read``), this waits until that notebook is done or
the run has stopped, or its process (``LNEPS_PREFILL_PID``) is gone. Whatever is still not
in the cache then, myst-nb executes itself, so a failure is reported by the build as before;
`make book` also fails on the executor's own exit code. Without ``LNEPS_PREFILL_DIR`` (Sphinx
run by hand, or nothing to execute) this does nothing. Sphinx reads documents in name order;
tools/run_notebooks.py starts them in that order too.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

POLL_S = 0.05
TIMEOUT_S = 3600  # far beyond the book's execution timeout: never wait forever


def marker(folder: Path, notebook: str) -> Path:
    """The file that says ``notebook`` (a resolved path) has been executed."""
    return Path(folder) / (hashlib.sha256(notebook.encode()).hexdigest()[:16] + ".done")


def _alive(pid: str | None) -> bool:
    if not pid:
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError):
        return True
    return True


def wait_for(folder: Path, notebook: str, pid: str | None = None, timeout: float = TIMEOUT_S) -> str:
    """Block until ``notebook`` need not be waited for; return why ("done", "not executed
    here", "stopped", "gone" or "timeout")."""
    folder = Path(folder)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if marker(folder, notebook).exists():
            return "done"
        todo = folder / "todo.json"
        if todo.exists() and notebook not in json.loads(todo.read_text()):
            return "not executed here"
        if (folder / "end").exists():
            return "stopped"
        if not _alive(pid):
            return "gone"
        time.sleep(POLL_S)
    return "timeout"


def _before_reading(app, docname, source):
    folder = os.environ.get("LNEPS_PREFILL_DIR")
    path = Path(app.env.doc2path(docname))
    if folder and path.suffix == ".ipynb":
        wait_for(Path(folder), str(path.resolve()), os.environ.get("LNEPS_PREFILL_PID"))


def setup(app):
    app.connect("source-read", _before_reading)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
