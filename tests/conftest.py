import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))


def _make(*targets: str) -> tuple[int, str]:
    proc = subprocess.run(["make", "--no-print-directory", *targets], cwd=ROOT, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return proc.returncode, proc.stdout


@pytest.fixture(scope="session")
def built_book():
    """`make book`, exactly as a reader runs it; (exit code, output)."""
    return _make("book")


@pytest.fixture(scope="session")
def built_pdf(built_book):
    """`make pdf` from that build (-o book: the book is not built again); (exit code, output)."""
    code, output = built_book
    assert code == 0, output[-3000:]
    return _make("-o", "book", "pdf")


SPHINX_WARNING = re.compile(r"(WARNING|ERROR|CRITICAL):")


# The browser's session fixtures (Chromium, the served book, one visit of every page), shared
# by tests/rendered/test_browser.py and tests/rendered/test_layout.py so that each page is loaded only once.
from browser import browser, html_dir, report, site, visits  # noqa: E402,F401
