r"""The epsilon of real frameworks and models: library defaults, released checkpoints, sources.

The facts are data, installed with the package and read by small loaders:

* ``data/framework_defaults.toml``: one row per layer or configuration class, with the file
  its value was read from and the ``references.bib`` key that cites it (:data:`DEFAULTS`,
  :func:`load_defaults`);
* ``data/stability_note_table.toml``: the table of defaults of the stability note,
  "Numerical Stability in Normalization – The Epsilon Problem", transcribed verbatim
  (:data:`NOTE_TABLE`, :func:`load_note_table`).

Two things are kept apart on purpose:

* the **library default**: what a layer or config class uses when nobody passes a value
  (``LlamaConfig.rms_norm_eps`` is ``1e-6``);
* the **released value**: what a published checkpoint's ``config.json`` (or the authors'
  reference code) sets (the released Llama 2 and 3 configs say ``1e-05``).

:func:`check_note_table` judges each row of the note's table against the row it names: its
value (right, right only for the released checkpoints, right only for the library default, or
wrong) and its name (does the label name the framework or model the value belongs to?).

What swapping one of these values for another does to a row is :mod:`lneps.book.eps_swap`;
the tables the chapters print from these facts are :mod:`lneps.book.eps_tables`.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import ml_dtypes
import numpy as np

from .._checks import check_eps
from .eps_swap import KINDS
from ..norms import rms_norm_default_eps

__all__ = [
    "Released",
    "EpsDefault",
    "NoteRow",
    "Verdict",
    "DEFAULTS",
    "NOTE_TABLE",
    "NOTE_TITLE",
    "VERDICTS",
    "KINDS",
    "load_defaults",
    "load_note_table",
    "by_key",
    "torch_rmsnorm_eps",
    "effective_eps",
    "stored_eps",
    "verdict",
    "names_match",
    "check_note_table",
    "SAME_EPS_RTOL",
]


# The answers check_note_table can give, from best to worst.
RIGHT = "right"
MISNAMED = "right value, wrong name"
RELEASED_ONLY = "right for released checkpoints only"
LIBRARY_ONLY = "right for the library default only"
WRONG = "wrong"
VERDICTS = (RIGHT, MISNAMED, RELEASED_ONLY, LIBRARY_ONLY, WRONG)


@dataclass(frozen=True)
class Released:
    """One published value: a checkpoint's ``config.json`` or the authors' reference code."""

    name: str
    value: float
    source: str
    cite: str


@dataclass(frozen=True)
class EpsDefault:
    """One layer or config class and its epsilon.

    ``library_default`` is ``None`` when the parameter's default is ``None`` and the layer picks
    a value at run time (``torch.nn.RMSNorm``: see :func:`effective_eps`). ``model`` is the
    model family a configuration class is for (``"Llama"`` for ``LlamaConfig``).
    ``attribute_dtype`` names the format the value is stored in when it is not a 64-bit Python
    float (ONNX attributes are float32). ``released`` is empty for libraries that ship no
    checkpoint.
    """

    key: str
    where: str
    layer: str
    parameter: str
    library_default: float | None
    kind: str
    source: str
    cite: str
    released: tuple[Released, ...] = ()
    attribute_dtype: str | None = None
    model: str = ""
    note: str = ""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}; got {self.kind!r}")

    @property
    def released_values(self) -> tuple[float, ...]:
        """The distinct released values, in the order listed."""
        return tuple(dict.fromkeys(r.value for r in self.released))


@dataclass(frozen=True)
class NoteRow:
    """One row of the stability note's table of defaults: its label, the epsilon it gives,
    the framework or model the label names (``names``), and the key of the :data:`DEFAULTS`
    row it is judged against (``matches``)."""

    label: str
    eps: float
    names: str
    matches: str


@dataclass(frozen=True)
class Verdict:
    """A row of the note's table judged against its fact row: ``value`` is the
    :func:`verdict` on the epsilon, ``name_right`` whether the label names the framework or
    model the value belongs to (:func:`names_match`)."""

    claim: NoteRow
    fact: EpsDefault
    value: str
    name_right: bool

    @property
    def verdict(self) -> str:
        """One of :data:`VERDICTS`: the value's verdict, or ``"right value, wrong name"``."""
        return MISNAMED if self.value == RIGHT and not self.name_right else self.value

# --- the data files ---------------------------------------------------------------------

_DATA = resources.files(__package__) / "data"
_DEFAULTS_FILE = "framework_defaults.toml"
_NOTE_FILE = "stability_note_table.toml"

_ROW_FIELDS = {  # field: (types allowed, required)
    "key": (str, True), "where": (str, True), "layer": (str, True), "parameter": (str, True),
    "library_default": ((int, float, str), True), "kind": (str, True), "source": (str, True),
    "cite": (str, True), "released": (list, False), "attribute_dtype": (str, False),
    "model": (str, False), "note": (str, False),
}
_RELEASED_FIELDS = {"name": (str, True), "value": ((int, float), True), "source": (str, True),
                    "cite": (str, True)}
_NOTE_FIELDS = {"label": (str, True), "eps": ((int, float), True), "names": (str, True),
                "matches": (str, True)}


def _read(path, default_name: str) -> tuple[dict, str]:
    """The parsed TOML file and the name to report it by."""
    source = _DATA / default_name if path is None else Path(path)
    name = default_name if path is None else str(path)
    try:
        return tomllib.loads(source.read_text(encoding="utf-8")), name
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{name}: not valid TOML: {err}") from err


def _fields(table, spec: dict, where: str) -> dict:
    """``table`` checked against ``spec``: a dict, no unknown or missing field, right types."""
    if not isinstance(table, dict):
        raise ValueError(f"{where}: must be a table of fields; got {table!r}")
    unknown = set(table) - set(spec)
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {sorted(unknown)}; known: {sorted(spec)}")
    for field, (types, required) in spec.items():
        if field not in table:
            if required:
                raise ValueError(f"{where}: missing field {field!r}")
            continue
        if not isinstance(table[field], types) or isinstance(table[field], bool):
            raise ValueError(f"{where}: field {field!r} has the wrong type: {table[field]!r}")
    return table


def _rows(data: dict, name: str) -> list:
    rows = data.get("row")
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"{name}: no [[row]] tables")
    return rows


def _positive_eps(value: float, where: str) -> float:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{where}: epsilon must be a positive finite number; got {value!r}")
    return value


def _named(table, where: str, name_field: str) -> str:
    """``where`` with the row's own name appended, when it has one."""
    if isinstance(table, dict) and isinstance(table.get(name_field), str):
        return f"{where} ({table[name_field]!r})"
    return where


def _default_row(table, where: str) -> EpsDefault:
    where = _named(table, where, "key")
    t = _fields(table, _ROW_FIELDS, where)
    default = t["library_default"]
    if isinstance(default, str):
        if default != "None":
            raise ValueError(f"{where}: library_default must be a number or the string "
                             f"\"None\"; got {default!r}")
        default = None
    else:
        default = _positive_eps(float(default), where)
    released = []
    for j, rel in enumerate(t.get("released", [])):
        r = _fields(rel, _RELEASED_FIELDS, f"{where}, released {j + 1}")
        released.append(Released(r["name"], _positive_eps(float(r["value"]), where), r["source"],
                                 r["cite"]))
    dtype = t.get("attribute_dtype")
    if dtype is not None:
        try:
            np.dtype(dtype)
        except TypeError as err:
            raise ValueError(f"{where}: attribute_dtype {dtype!r} is not a NumPy dtype") from err
    try:
        return EpsDefault(t["key"], t["where"], t["layer"], t["parameter"], default, t["kind"],
                          t["source"], t["cite"], tuple(released), dtype,
                          t.get("model", ""), t.get("note", ""))
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from err


def load_defaults(path=None) -> tuple[EpsDefault, ...]:
    """The rows of a framework-defaults file (default: the package's
    ``data/framework_defaults.toml``), in file order.

    Every row is checked before any is returned: a missing or unknown field, a wrong type, a
    non-positive epsilon, an unknown ``kind`` or a repeated ``key`` is a ``ValueError`` that
    names the file and the row.
    """
    data, name = _read(path, _DEFAULTS_FILE)
    rows = tuple(_default_row(t, f"{name}, row {i + 1}") for i, t in enumerate(_rows(data, name)))
    keys = [r.key for r in rows]
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        raise ValueError(f"{name}: repeated key(s) {repeated}")
    return rows


def load_note_table(path=None, rows: tuple[EpsDefault, ...] | None = None):
    """``(title, rows)`` of a note-table file (default: the package's
    ``data/stability_note_table.toml``): the table's title and its :class:`NoteRow` rows.

    Each row's ``matches`` must be a key of ``rows`` (default :data:`DEFAULTS`); a bad row is a
    ``ValueError`` naming the file and the row.
    """
    data, name = _read(path, _NOTE_FILE)
    title = data.get("title")
    if not isinstance(title, str):
        raise ValueError(f"{name}: missing the string field 'title'")
    keys = {r.key for r in (DEFAULTS if rows is None else rows)}
    out = []
    for i, table in enumerate(_rows(data, name)):
        where = _named(table, f"{name}, row {i + 1}", "label")
        t = _fields(table, _NOTE_FIELDS, where)
        if t["matches"] not in keys:
            raise ValueError(f"{where}: matches {t['matches']!r}, which is not a key of the "
                             f"defaults; known: {sorted(keys)}")
        out.append(NoteRow(t["label"], _positive_eps(float(t["eps"]), where), t["names"],
                           t["matches"]))
    return title, tuple(out)


DEFAULTS: tuple[EpsDefault, ...] = load_defaults()
NOTE_TITLE, NOTE_TABLE = load_note_table()


def by_key(key: str, rows: tuple[EpsDefault, ...] = DEFAULTS) -> EpsDefault:
    """The row with ``key``; ``KeyError`` naming the known keys otherwise."""
    for row in rows:
        if row.key == key:
            return row
    raise KeyError(f"no row {key!r}; known keys: {[r.key for r in rows]}")


def torch_rmsnorm_eps(input_dtype=np.float32) -> float:
    """The eps ``torch.nn.RMSNorm(eps=None)`` uses: machine epsilon of the computation type.

    float16 and bfloat16 are computed in float32, so they get ``finfo(float32).eps``
    (:math:`2^{-23}`); float32 gets the same; float64 gets ``finfo(float64).eps``.
    """
    try:
        dtype = np.dtype(input_dtype)
    except TypeError as err:
        raise TypeError(f"input_dtype must be a NumPy dtype; got {input_dtype!r}") from err
    halves = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
    if dtype not in (*halves, np.dtype(np.float32), np.dtype(np.float64)):
        raise ValueError(
            f"input_dtype must be float16, bfloat16, float32 or float64; got {dtype}"
        )
    # The rule lneps.rms_norm(eps=None) follows too: one definition for both.
    return rms_norm_default_eps(dtype)


def effective_eps(row: EpsDefault, input_dtype=np.float32) -> float:
    """The epsilon the layer actually adds for input of ``input_dtype`` when left at default."""
    if row.library_default is None:
        return torch_rmsnorm_eps(input_dtype)
    return row.library_default


def stored_eps(row: EpsDefault) -> float:
    """The library default as the format stores it: ONNX's float32 attribute turns 1e-5 into
    ``float(np.float32(1e-5))`` = 9.999999747e-06. Other rows keep their 64-bit value."""
    value = effective_eps(row)
    if row.attribute_dtype is None:
        return value
    return float(np.dtype(row.attribute_dtype).type(value))


# Two epsilons are "the same value" when they agree to this relative tolerance: far below any
# difference between the values in use, far above the last-bit noise of 1e-5 vs 10**-5.
SAME_EPS_RTOL = 1e-12


def same_value(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=SAME_EPS_RTOL, abs_tol=0.0)


def verdict(claimed_eps: float, row: EpsDefault) -> str:
    """Judge a claimed "default" epsilon against ``row``: one of ``"right"``,
    ``"right for released checkpoints only"``, ``"right for the library default only"`` or
    ``"wrong"``.

    Right when it is both the library default and every released value (or there is no
    release); right for released checkpoints only when it matches them but not the library
    default; right for the library default only when the releases differ; wrong otherwise.

    Convention: two values count as equal when they agree to a relative tolerance of
    ``1e-12`` (:data:`SAME_EPS_RTOL`; ``math.isclose(a, b, rel_tol=1e-12, abs_tol=0)``), so
    ``1e-5``, ``1e-05`` and ``10**-5`` all match, while ONNX's float32 ``9.999999747e-06``
    (relative difference 2.5e-8) does not.
    """
    claimed_eps = check_eps(claimed_eps)
    library = same_value(claimed_eps, effective_eps(row))
    released = row.released_values
    matches_release = bool(released) and all(same_value(claimed_eps, v) for v in released)
    if library and (not released or matches_release):
        return RIGHT
    if matches_release:
        return RELEASED_ONLY
    if library:
        return LIBRARY_ONLY
    return WRONG


def names_match(names: str, row: EpsDefault) -> bool:
    """Whether a label that names ``names`` (a framework or model) names ``row``: the row's
    framework (``where``) or, for a configuration class, its model family (``model``)
    occurs in it. ``"Llama 2 / 3"`` names ``LlamaConfig`` (model ``"Llama"``);
    ``"TensorFlow"`` does not name Keras's layer."""
    return any(word and word.casefold() in names.casefold() for word in (row.where, row.model))


def check_note_table(table: tuple[NoteRow, ...] | None = None,
                     rows: tuple[EpsDefault, ...] | None = None) -> tuple[Verdict, ...]:
    """Each row of the stability note's table (default :data:`NOTE_TABLE`) with the fact row
    it names (from ``rows``, default :data:`DEFAULTS`), judged on its value (:func:`verdict`)
    and its name (:func:`names_match`)."""
    table = NOTE_TABLE if table is None else table
    rows = DEFAULTS if rows is None else rows
    out = []
    for claim in table:
        fact = by_key(claim.matches, rows)
        out.append(Verdict(claim, fact, verdict(claim.eps, fact), names_match(claim.names, fact)))
    return tuple(out)
