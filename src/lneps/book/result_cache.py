"""Results the book computes more than once, kept on disk between runs.

Two pages grade the same kernel zoo, and a chapter and its tests read the same network
activations; each costs tens of seconds. A result is stored in the folder ``$LNEPS_CACHE_DIR``
names (the Makefile sets ``_build/lneps-cache``; unset or empty: nothing is kept) under a key
that hashes everything it depends on: the caller's arguments and the source of the whole
``lneps`` package (:func:`code_digest`). Changing any of the package's code therefore computes
it again: a stale result is never read back. A cache that cannot be written is skipped: the
result is the same, only slower next time.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

__all__ = ["FROM_ENV", "cache_dir", "code_digest", "key", "write_folder", "cached_json"]

FROM_ENV = "$LNEPS_CACHE_DIR"


def cache_dir(folder=FROM_ENV) -> Path | None:
    """The cache folder: ``folder``, or with the default ``$LNEPS_CACHE_DIR``; None (or an unset
    or empty variable): no cache.

    >>> cache_dir(None) is None, cache_dir("/tmp/c")
    (True, PosixPath('/tmp/c'))
    """
    if folder == FROM_ENV:
        folder = os.environ.get("LNEPS_CACHE_DIR") or None
    return None if folder is None else Path(folder)


@functools.cache
def code_digest() -> str:
    """SHA-256 of every ``.py`` file of the installed ``lneps`` package, paths included (once
    per process: the code does not change under a running interpreter).

    >>> len(code_digest())
    64
    """
    h = hashlib.sha256()
    package = Path(__file__).resolve().parents[1]
    for path in sorted(package.rglob("*.py")):
        h.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def key(*parts: str) -> str:
    """24 hex digits of SHA-256 over ``parts`` (each ended by a NUL, so parts cannot run into
    each other) and :func:`code_digest`.

    >>> key("a", "bc") == key("a", "bc") != key("ab", "c")
    True
    """
    h = hashlib.sha256()
    for part in (*parts, code_digest()):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:24]


def write_folder(target: Path, write: Callable[[Path], None]) -> None:
    """Make the folder ``target`` by ``write(tmp)`` into a temporary folder beside it, then
    rename it into place: a reader sees all of it or none. Where it cannot (no space, or another
    run got there first), nothing is kept."""
    tmp = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=target.parent))
        write(tmp)
        os.replace(tmp, target)
    except OSError:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def cached_json(name: str, parts, compute: Callable[[], object], *, folder=FROM_ENV):
    """``compute()``, or the value a run with the same ``name``, ``parts`` (strings) and
    package code stored before. The value must be what JSON keeps: dicts with string keys,
    lists, strings, bools, ints and floats (Python writes a float's shortest exact repr, and
    reads inf and NaN back); a tuple comes back as a list.

    >>> import tempfile
    >>> calls = []
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     f = lambda: calls.append(1) or {"x": [0.1, float("inf")]}
    ...     cached_json("demo", ["1"], f, folder=tmp) == cached_json("demo", ["1"], f, folder=tmp)
    True
    >>> len(calls)
    1
    """
    root = cache_dir(folder)
    target = None if root is None else root / f"{name}-{key(name, *parts)}"
    if target is not None and (target / "value.json").is_file():
        return json.loads((target / "value.json").read_text())
    value = compute()
    text = json.dumps(value)  # a TypeError names what JSON cannot hold
    if target is not None:
        write_folder(target, lambda tmp: (tmp / "value.json").write_text(text))
    return value
