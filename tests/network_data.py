"""The measured all-MiniLM-L6-v2 data the network tests share, loaded once per session.

The activations the book stored in $LNEPS_CACHE_DIR, else _build/lneps-cache (under the key of this model file, these
sentences and this package's code) are read back if they are there; otherwise, or if a
concurrent `make book` removes them while they are read, they are computed here (about 3 s on
a quiet machine) and not written. Either way the tests recompute every quoted number from them
with their own code.
"""

from __future__ import annotations

import base64
import functools
import json
import os
from pathlib import Path

import numpy as np

from notebooks import BOOK

SENTENCES = BOOK / "data" / "sentences.txt"
REFERENCE = BOOK / "data" / "minilm_reference.json"


def sentences() -> list[str]:
    return SENTENCES.read_text(encoding="utf-8").splitlines()


def unpack(entry) -> np.ndarray:
    raw = base64.b64decode(entry["float32_base64"])
    return np.frombuffer(raw, "<f4").reshape(entry["shape"]).astype(np.float64)


@functools.cache
def reference() -> dict:
    return json.loads(REFERENCE.read_text(encoding="utf-8"))


@functools.cache
def model():
    from lneps.book import minilm

    return minilm.load()


CACHE = Path(os.environ.get("LNEPS_CACHE_DIR") or BOOK.parent / "_build" / "lneps-cache")


@functools.cache
def measurements():
    from lneps.book import activations

    try:
        stored = activations.measure(sentences(), model=model(), cache_dir=CACHE, write=False)
        if stored.from_cache:
            return stored
    except (OSError, ValueError, KeyError):
        pass
    return activations.measure(sentences(), model=model(), cache_dir=None)
