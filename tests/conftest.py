import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def built_book():
    """Run the book build exactly as `make book` does; return (exit code, output)."""
    proc = subprocess.run(
        ["make", "--no-print-directory", "book"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    return proc.returncode, proc.stdout + proc.stderr


SPHINX_WARNING = re.compile(r"(WARNING|ERROR|CRITICAL):")
