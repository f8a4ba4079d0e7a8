"""Formatting helpers: the vectors, errors and text tables the chapters print.

They format; they compute nothing, so every chapter prints a vector or a table the same way.
"""

from __future__ import annotations

import math

import numpy as np


__all__ = ["fmt_vec", "decimal_place", "sci", "fmt_ulp", "text_table"]

_SUPERSCRIPT = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")


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


def sci(x: float, digits: int = 1) -> str:
    """``x`` in scientific notation for prose: ``sci(1.3282e-06) == "1.3 × 10⁻⁶"``.

    ``digits`` decimals of the mantissa; a mantissa of exactly 1 with ``digits=0`` is left
    out (``sci(1e-5, 0) == "10⁻⁵"``); 0, inf and NaN print as ``0``, ``inf``, ``nan``.
    """
    x = float(x)
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    mantissa, exponent = f"{x:.{digits}e}".split("e")
    power = "10" + str(int(exponent)).translate(_SUPERSCRIPT)
    if mantissa.lstrip("-") == "1":
        return ("−" if mantissa.startswith("-") else "") + power
    return f"{mantissa.replace('-', '−')} × {power}"


def fmt_ulp(v: float) -> str:
    """An error in ulp for a table: 2 decimals below 10, whole numbers below 10^4, then
    ``1.2e+05`` style; 0, inf and NaN as ``0``, ``inf``, ``nan``."""
    v = float(v)
    if v == 0 or not math.isfinite(v):
        return f"{v:g}"
    return f"{v:.2f}" if v < 10 else (f"{v:.0f}" if v < 1e4 else f"{v:.1e}")


def text_table(header, rows) -> str:
    """A fixed-width text table: ``header`` and each row are sequences of strings."""
    cells = [list(map(str, header))] + [list(map(str, r)) for r in rows]
    widths = [max(len(row[j]) for row in cells) for j in range(len(header))]
    lines = ["  ".join(c.rjust(w) if j else c.ljust(w) for j, (c, w) in enumerate(zip(row, widths)))
             for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in lines)
