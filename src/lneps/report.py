"""Small formatting helpers for numbers the book quotes in prose (through myst-nb ``glue``).

They format; they compute nothing. Keeping them here means every chapter prints a vector the
same way and the tests can compare the quoted text with the seeds'.
"""

from __future__ import annotations

import numpy as np

__all__ = ["fmt_vec", "decimal_place"]


def fmt_vec(x, digits: int = 3) -> str:
    """``[-1.342, -0.447, 0.447, 1.342]``: a 1-D vector rounded to ``digits`` decimals.

    Negative zero prints as ``0.000``, not ``-0.000``.
    """
    values = np.round(np.asarray(x, dtype=np.float64), digits) + 0.0
    return "[" + ", ".join(f"{v:.{digits}f}" for v in values) + "]"


def decimal_place(delta: float) -> int:
    """The first decimal place a change of size ``delta`` (0 < delta < 1) can touch.

    ``decimal_place(1.3e-6) == 6``: the change shows in the sixth decimal, not before.
    """
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1); got {delta!r}")
    return int(np.floor(-np.log10(delta))) + 1
