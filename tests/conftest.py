import functools
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))


# The book build takes about as long as nbval's run over the notebooks, and each runs one
# kernel at a time: so when a test that needs the build is selected, `make book` starts in
# the background right after collection, and the tests that use the build run last. On 2
# cores the build then overlaps the unit tests and nbval instead of following them.
_BUILD: dict = {}


@functools.cache
def _names_built_book(path: str) -> bool:
    return path.endswith(".py") and "built_book" in Path(path).read_text()


@functools.cache
def _names_measurements(path: str) -> bool:
    text = Path(path).read_text() if path.endswith(".py") else ""
    return re.search(r"from network_data import .*\bmeasurements\b", text) is not None


def _uses_build(item) -> bool:
    """The item takes built_book, or its module asks for it by name (getfixturevalue)."""
    return "built_book" in getattr(item, "fixturenames", ()) or _names_built_book(str(item.fspath))


def _start_build():
    log = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen(
        ["make", "--no-print-directory", "book"],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, so that it can be stopped whole
    )
    _BUILD.update(proc=proc, log=log)


@pytest.hookimpl(trylast=True)  # after -k/-m deselection: start only a build that is needed
def pytest_collection_modifyitems(session, config, items):
    if config.option.collectonly or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    late = [item for item in items if _uses_build(item)]
    if os.environ.get("LNEPS_PORTABLE_PROFILE"):
        # `make portable` reruns what computes numbers under other arithmetic (tools/portable.py);
        # the tests of the rendered book (its build, pages, PDF) are not about arithmetic.
        config.hook.pytest_deselected(items=late)
        items[:] = [item for item in items if item not in late]
        late = []
    # The network's activations are computed once, by the build's notebook, into its cache in
    # _build: the tests that read them run after the other tests and nbval, when that cache
    # is there (computing them here too, while the build runs, cost 10 s on 2 cores).
    network = [item for item in items if item not in late and _names_measurements(str(item.fspath))]
    items[:] = [item for item in items if item not in late and item not in network] + network + late
    # Start early only a build that will surely be used; others start on first request.
    if any("built_book" in getattr(item, "fixturenames", ()) for item in late):
        _start_build()
        pdf, visits = (any(name in getattr(item, "fixturenames", ()) for item in late)
                       for name in ("built_pdf", "visits"))
        watcher = threading.Thread(target=_after_build, args=(pdf, visits), daemon=True)
        watcher.start()
        _BUILD["watcher"] = watcher


def _after_build(pdf: bool, visits: bool):
    """When the background build ends well, start `make pdf` and the visits of every page
    (tests/browser.py) at once, if the session will use them: they then run beside the unit
    tests and nbval (one core) instead of after them."""
    if _BUILD["proc"].wait() != 0:
        return
    if pdf:
        _start_pdf()
    if visits and not os.environ.get("LNEPS_BOOK_HTML"):
        import browser

        if browser._unavailable() is None:
            html = (ROOT / "_build" / "html").resolve()
            browser.EARLY_VISITS[html] = browser.start_visits(html)


def pytest_sessionfinish(session):
    for key in ("proc", "pdf_proc"):
        proc = _BUILD.get(key)
        if proc is not None and proc.poll() is None:  # interrupted: leave no build running
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait()


def _start_pdf():
    """`make pdf` from the finished book build (-o book: the book is not rebuilt under the
    browser tests' feet), in the background, so that it prints while they run."""
    log = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen(["make", "--no-print-directory", "-o", "book", "pdf"], cwd=ROOT,
                            stdout=log, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    _BUILD.update(pdf_proc=proc, pdf_log=log)


@pytest.fixture(scope="session")
def built_book(request):
    """Run the book build exactly as `make book` does; return (exit code, output)."""
    if "proc" not in _BUILD:
        _start_build()
    code = _BUILD["proc"].wait()
    if "watcher" in _BUILD:  # it has then started what it starts
        _BUILD["watcher"].join()
    log = _BUILD["log"]
    log.seek(0)
    wants_pdf = any("built_pdf" in getattr(item, "fixturenames", ()) for item in request.session.items)
    if code == 0 and wants_pdf and "pdf_proc" not in _BUILD:
        _start_pdf()
    return code, log.read()


@pytest.fixture(scope="session")
def built_pdf(built_book):
    """`make pdf` after the book build (started as soon as the build ends); (exit code, output)."""
    code, output = built_book
    assert code == 0, output[-3000:]
    if "pdf_proc" not in _BUILD:
        _start_pdf()
    pdf_code = _BUILD["pdf_proc"].wait()
    log = _BUILD["pdf_log"]
    log.seek(0)
    return pdf_code, log.read()


SPHINX_WARNING = re.compile(r"(WARNING|ERROR|CRITICAL):")


# The browser's session fixtures (Chromium, the served book, one visit of every page), shared
# by tests/rendered/test_browser.py and tests/rendered/test_layout.py so that each page is loaded only once.
from browser import browser, html_dir, report, site, visits  # noqa: E402,F401
