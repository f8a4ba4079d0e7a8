"""The linter's configuration (pyproject.toml's [tool.ruff], run first by `make test`): it must
see every Python file of the project. Its exclusion of the book's notebooks once read "book",
which ruff matches at any depth, so src/lneps/book/ and tests/book/ went unlinted."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _ruff() -> list[str]:
    exe = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if exe is None:
        pytest.skip("ruff is not installed (requirements-dev.txt)")
    return [exe]


def test_ruff_checks_every_python_file_git_tracks():
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    wanted = {p for p in tracked.stdout.split() if not p.startswith("bench/tmp/")}
    shown = subprocess.run([*_ruff(), "check", "--show-files"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    seen = {Path(p).resolve().relative_to(ROOT).as_posix() for p in shown}
    assert not wanted - seen, sorted(wanted - seen)[:10]
    assert any(p.startswith("src/lneps/book/") for p in seen)
    assert not any(p.startswith("book/") for p in seen)  # the notebooks: nbval, not ruff
