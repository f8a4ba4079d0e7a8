"""The measured all-MiniLM-L6-v2 data the network tests share, computed once per session.

Computed here without a cache (about 3 s), so the tests never read files that a concurrent
`make book` may be replacing, and what they check is a fresh run of the package.
"""

from __future__ import annotations

import base64
import functools
import json

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
    from lneps import minilm

    return minilm.load()


@functools.cache
def measurements():
    from lneps import activations

    return activations.measure(sentences(), model=model(), cache_dir=None)
