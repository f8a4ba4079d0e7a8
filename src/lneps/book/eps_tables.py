r"""The chapters' tables of epsilon defaults, as MyST Markdown and TeX: the facts of
:mod:`lneps.book.defaults` rendered, every value typeset as math and every source cited."""

from __future__ import annotations

import math

import numpy as np

from .defaults import (DEFAULTS, KINDS, LIBRARY_ONLY, RELEASED_ONLY, WRONG, EpsDefault, Verdict, same_value,
                       check_note_table, effective_eps, stored_eps, torch_rmsnorm_eps)

__all__ = ["fmt_eps", "tex_eps", "explanation", "defaults_markdown", "note_table_markdown"]


def fmt_eps(value: float) -> str:
    """``1e-5``, ``1e-12``, ``1.19e-07``: a power of ten as ``1e-k``, anything else to 3 digits."""
    if value > 0:
        k = round(math.log10(value))
        if same_value(value, 10.0**k):
            return f"1e{k}"
    return f"{value:.3g}" if value >= 1e-4 else f"{value:.2e}"


def tex_eps(value: float, digits: int = 3) -> str:
    r"""``value`` as TeX for a table cell: ``10^{-5}``, or ``1.19 \times 10^{-7}`` to ``digits``
    significant digits. Typeset as math, a number never breaks across lines."""
    if value <= 0 or not math.isfinite(value):
        return f"{value:g}"
    k = round(math.log10(value))
    if same_value(value, 10.0**k):
        return f"10^{{{k}}}"
    mantissa, exponent = f"{value:.{digits - 1}e}".split("e")
    return rf"{mantissa} \times 10^{{{int(exponent)}}}"


def explanation(v: Verdict) -> str:
    """What is wrong with a row of the note's table, in a few words of MyST (values as math);
    empty when it is right."""
    parts = []
    if not v.name_right:
        parts.append(f"the layer is {v.fact.where}'s, not {v.claim.names}'s")
    default = f"${tex_eps(effective_eps(v.fact))}$"
    if v.value == RELEASED_ONLY:
        parts.append(f"`{v.fact.layer}()` gives {default}")
    elif v.value == LIBRARY_ONLY:
        released = ", ".join(tex_eps(x) for x in v.fact.released_values)
        parts.append(f"released checkpoints use ${released}$")
    elif v.value == WRONG:
        parts.append(f"the default is {default}")
    return "; ".join(parts)


def _cite(key: str) -> str:
    return "{cite}`" + key + "`"


def _math(tex: str) -> str:
    return f"${tex}$"


def _default_cell(row: EpsDefault) -> str:
    if row.library_default is None:
        eps = torch_rmsnorm_eps(np.float32)
        return (f"`None`: float32's machine epsilon, "
                f"{_math(f'2^{{{round(math.log2(eps))}}} = ' + tex_eps(eps))}")
    text = _math(tex_eps(row.library_default))
    if row.attribute_dtype is not None:
        text += f", stored as {row.attribute_dtype}: {_math(tex_eps(stored_eps(row), 10))}"
    return text


def _released_cell(row: EpsDefault) -> str:
    if not row.released:
        return "–"
    groups = {}
    for r in row.released:
        groups.setdefault(r.value, []).append(f"{r.name} {_cite(r.cite)}")
    return "; ".join(f"{_math(tex_eps(v))} in " + _join(names) for v, names in groups.items())


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _md_table(header: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cells) + " |" for cells in body]
    return "\n".join(lines)


def defaults_markdown(rows: tuple[EpsDefault, ...] | None = None, *, kind: str | None = None) -> str:
    """A MyST markdown table of ``rows`` (default :data:`DEFAULTS`; only those of ``kind``
    if given): the layer with its source cited by a ``{cite}`` role, its library default, and
    the released values in a column of their own. Values are typeset as math."""
    rows = DEFAULTS if rows is None else rows
    if kind is not None and kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS} or None; got {kind!r}")
    body = [[f"{r.where} `{r.layer}` (`{r.parameter}`) {_cite(r.cite)}", _default_cell(r),
             _released_cell(r)]
            for r in rows if kind is None or r.kind == kind]
    return _md_table(["layer", "default ε", "released checkpoints"], body)


def note_table_markdown(verdicts: tuple[Verdict, ...] | None = None) -> str:
    """A MyST markdown table of the stability note's rows (default: :func:`check_note_table`),
    each beside the facts of the row it names and its verdict."""
    verdicts = check_note_table() if verdicts is None else verdicts
    body = []
    for v in verdicts:
        facts = f"`{v.fact.layer}` {_cite(v.fact.cite)}: {_default_cell(v.fact)}"
        if v.fact.released:
            released = ", ".join(tex_eps(x) for x in v.fact.released_values)
            facts += f"; released: {_math(released)}"
        why = explanation(v)
        verdict_text = f"**{v.verdict}**" + (f": {why}" if why else "")
        body.append([v.claim.label, _math(tex_eps(v.claim.eps)), facts, verdict_text])
    return _md_table(["the note's row", "its ε", "the facts", "verdict"], body)
