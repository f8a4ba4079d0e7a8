r"""The epsilon of real frameworks and models: library defaults, released checkpoints, sources.

The data are the verified facts of the book (each row names the file it was read from and the
``references.bib`` key that cites it). Two things are kept apart on purpose:

* the **library default**: what a layer or config class uses when nobody passes a value
  (``LlamaConfig.rms_norm_eps`` is ``1e-6``);
* the **released value**: what a published checkpoint's ``config.json`` (or the authors'
  reference code) sets (the released Llama 2 and 3 configs say ``1e-05``).

:data:`SEED_TABLE` is seed 004's six-row table; :func:`compare_seed` says which of its rows are
right, right only for the released checkpoints, or wrong.

The consequences of swapping one epsilon for another are closed forms. For a row with
statistic :math:`q` (the biased variance for layer norm, the mean square for RMS norm) the
normalized output is :math:`v/\sqrt{q+\varepsilon}` with :math:`v` independent of
:math:`\varepsilon`, so changing :math:`\varepsilon_a \to \varepsilon_b` multiplies the whole
row by :math:`\sqrt{(q+\varepsilon_a)/(q+\varepsilon_b)}`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from ._checks import as_float_array, check_axis, check_eps, check_real
from .norms import layer_norm, rms_norm
from .rounded import mean_and_variance

__all__ = [
    "Released",
    "EpsDefault",
    "SeedRow",
    "Verdict",
    "DEFAULTS",
    "SEED_TABLE",
    "VERDICTS",
    "KINDS",
    "by_key",
    "torch_rmsnorm_eps",
    "effective_eps",
    "stored_eps",
    "verdict",
    "compare_seed",
    "fmt_eps",
    "defaults_markdown",
    "seed_markdown",
    "SAME_EPS_RTOL",
    "row_statistic",
    "predicted_relative_change",
    "relative_change",
    "statistic_for_relative_change",
]

KINDS = ("LayerNorm", "RMSNorm")

# The four answers compare_seed can give, from best to worst.
RIGHT = "right"
RELEASED_ONLY = "right for released checkpoints only"
LIBRARY_ONLY = "right for the library default only"
WRONG = "wrong"
VERDICTS = (RIGHT, RELEASED_ONLY, LIBRARY_ONLY, WRONG)


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
    a value at run time (``torch.nn.RMSNorm``: see :func:`effective_eps`). ``attribute_dtype``
    names the format the value is stored in when it is not a 64-bit Python float (ONNX
    attributes are float32). ``released`` is empty for libraries that ship no checkpoint.
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
    note: str = ""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}; got {self.kind!r}")

    @property
    def released_values(self) -> tuple[float, ...]:
        """The distinct released values, in the order listed."""
        return tuple(dict.fromkeys(r.value for r in self.released))


@dataclass(frozen=True)
class SeedRow:
    """One row of seed 004's table and the fact row (``matches``, a key of DEFAULTS) it names."""

    label: str
    eps: float
    matches: str
    note: str = ""


@dataclass(frozen=True)
class Verdict:
    """A seed row judged against its fact row."""

    seed: SeedRow
    fact: EpsDefault
    verdict: str


_PT = "pytorch/pytorch: torch/nn/modules/normalization.py"
_HF = "huggingface/transformers: src/transformers/models/"

DEFAULTS: tuple[EpsDefault, ...] = (
    EpsDefault(
        "torch-layernorm", "PyTorch", "torch.nn.LayerNorm", "eps", 1e-5, "LayerNorm",
        _PT, "pytorch-layernorm",
        note="biased variance, eps inside the square root",
    ),
    EpsDefault(
        "torch-rmsnorm", "PyTorch", "torch.nn.RMSNorm", "eps", None, "RMSNorm",
        _PT, "pytorch-rmsnorm",
        note="eps=None: machine epsilon of the computation type, finfo(float32).eps "
        "for float16, bfloat16 and float32 input",
    ),
    EpsDefault(
        "keras-layernorm", "Keras (tf.keras)", "keras.layers.LayerNormalization", "epsilon",
        1e-3, "LayerNorm",
        "keras-team/keras: keras/src/layers/normalization/layer_normalization.py",
        "keras-layernormalization",
    ),
    EpsDefault(
        "flax-layernorm", "Flax", "flax.linen.LayerNorm", "epsilon", 1e-6, "LayerNorm",
        "google/flax: flax/linen/normalization.py", "flax-normalization",
        note="statistics computed in at least float32",
    ),
    EpsDefault(
        "flax-rmsnorm", "Flax", "flax.linen.RMSNorm", "epsilon", 1e-6, "RMSNorm",
        "google/flax: flax/linen/normalization.py", "flax-normalization",
    ),
    EpsDefault(
        "onnx-layernorm", "ONNX", "LayerNormalization (opset 17)", "epsilon", 1e-5, "LayerNorm",
        "onnx/onnx: onnx/defs/nn/defs.cc", "onnx-layernormalization",
        attribute_dtype="float32",
        note="stash_type float32 for the statistics",
    ),
    EpsDefault(
        "hf-bert", "Hugging Face", "BertConfig", "layer_norm_eps", 1e-12, "LayerNorm",
        _HF + "bert/configuration_bert.py", "hf-bert-config",
        released=(
            Released("bert-base-uncased config.json", 1e-12,
                     "google-bert/bert-base-uncased: config.json", "hf-bert-base-uncased-json"),
        ),
    ),
    EpsDefault(
        "hf-gpt2", "Hugging Face", "GPT2Config", "layer_norm_epsilon", 1e-5, "LayerNorm",
        _HF + "gpt2/configuration_gpt2.py", "hf-gpt2-config",
        released=(
            Released("gpt2 config.json", 1e-5,
                     "openai-community/gpt2: config.json", "hf-gpt2-json"),
            Released("OpenAI's src/model.py", 1e-5,
                     "openai/gpt-2: src/model.py", "openai-gpt2-model"),
        ),
    ),
    EpsDefault(
        "hf-llama", "Hugging Face", "LlamaConfig", "rms_norm_eps", 1e-6, "RMSNorm",
        _HF + "llama/configuration_llama.py", "hf-llama-config",
        released=(
            Released("Llama-2-7b-hf config.json", 1e-5,
                     "meta-llama/Llama-2-7b-hf: config.json", "hf-llama2-7b-json"),
            Released("Meta-Llama-3-8B config.json", 1e-5,
                     "meta-llama/Meta-Llama-3-8B: config.json", "hf-llama3-8b-json"),
            Released("Meta's llama/model.py (norm_eps)", 1e-5,
                     "meta-llama/llama: llama/model.py", "meta-llama-model"),
        ),
        note="1e-6 is the LLaMA-1 value",
    ),
    EpsDefault(
        "hf-mistral", "Hugging Face", "MistralConfig", "rms_norm_eps", 1e-6, "RMSNorm",
        _HF + "mistral/configuration_mistral.py", "hf-mistral-config",
        released=(
            Released("Mistral-7B-v0.1 config.json", 1e-5,
                     "mistralai/Mistral-7B-v0.1: config.json", "hf-mistral-7b-json"),
        ),
    ),
    EpsDefault(
        "hf-t5", "Hugging Face", "T5Config", "layer_norm_epsilon", 1e-6, "RMSNorm",
        _HF + "t5/configuration_t5.py", "hf-t5-config",
        note="T5's LayerNorm is RMS-style: no mean subtraction, no bias, variance in float32",
    ),
    EpsDefault(
        "hf-gemma", "Hugging Face", "GemmaConfig", "rms_norm_eps", 1e-6, "RMSNorm",
        _HF + "gemma/configuration_gemma.py", "hf-gemma-config",
    ),
)

SEED_TABLE: tuple[SeedRow, ...] = (
    SeedRow("PyTorch LayerNorm", 1e-5, "torch-layernorm"),
    SeedRow("TensorFlow LayerNorm", 1e-3, "keras-layernorm",
            note="the value is Keras's: keras.layers.LayerNormalization (tf.keras)"),
    SeedRow("Llama 2 / 3 (RMSNorm)", 1e-5, "hf-llama",
            note="LlamaConfig() gives 1e-6, the LLaMA-1 value"),
    SeedRow("Mistral (RMSNorm)", 1e-5, "hf-mistral",
            note="MistralConfig() gives 1e-6"),
    SeedRow("GPT-2 (LayerNorm)", 1e-5, "hf-gpt2"),
    SeedRow("BERT (LayerNorm)", 1e-12, "hf-bert"),
)


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
    # Half-precision input is upcast for the computation, so its eps is float32's.
    compute = np.float64 if dtype == np.float64 else np.float32
    return float(np.finfo(compute).eps)


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


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=SAME_EPS_RTOL, abs_tol=0.0)


def verdict(seed_eps: float, row: EpsDefault) -> str:
    """Judge a claimed "default" against ``row``: one of :data:`VERDICTS`.

    Right when it is both the library default and every released value (or there is no
    release); right for released checkpoints only when it matches them but not the library
    default; right for the library default only when the releases differ; wrong otherwise.

    Convention: two values count as equal when they agree to a relative tolerance of
    ``1e-12`` (:data:`SAME_EPS_RTOL`; ``math.isclose(a, b, rel_tol=1e-12, abs_tol=0)``), so
    ``1e-5``, ``1e-05`` and ``10**-5`` all match, while ONNX's float32 ``9.999999747e-06``
    (relative difference 2.5e-8) does not.
    """
    seed_eps = check_eps(seed_eps)
    library = _same(seed_eps, effective_eps(row))
    released = row.released_values
    matches_release = bool(released) and all(_same(seed_eps, v) for v in released)
    if library and (not released or matches_release):
        return RIGHT
    if matches_release:
        return RELEASED_ONLY
    if library:
        return LIBRARY_ONLY
    return WRONG


def compare_seed(seed: tuple[SeedRow, ...] = SEED_TABLE,
                 rows: tuple[EpsDefault, ...] = DEFAULTS) -> tuple[Verdict, ...]:
    """Each seed row with the fact row it names and its :func:`verdict`."""
    out = []
    for s in seed:
        fact = by_key(s.matches, rows)
        out.append(Verdict(s, fact, verdict(s.eps, fact)))
    return tuple(out)


def fmt_eps(value: float) -> str:
    """``1e-5``, ``1e-12``, ``1.19e-07``: a power of ten as ``1e-k``, anything else to 3 digits."""
    if value > 0:
        k = round(math.log10(value))
        if _same(value, 10.0**k):
            return f"1e{k}"
    return f"{value:.3g}" if value >= 1e-4 else f"{value:.2e}"


def _cite(key: str) -> str:
    return "{cite}`" + key + "`"


def _default_cell(row: EpsDefault) -> str:
    if row.library_default is None:
        return (f"`None` → `finfo(float32).eps` = {fmt_eps(torch_rmsnorm_eps(np.float32))}")
    text = fmt_eps(row.library_default)
    if row.attribute_dtype is not None:
        text += f" (as {row.attribute_dtype}: {stored_eps(row):.9e})"
    return text


def _released_cell(row: EpsDefault) -> str:
    if not row.released:
        return "–"
    return "; ".join(f"{fmt_eps(r.value)} ({r.name} {_cite(r.cite)})" for r in row.released)


def _md_table(header: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cells) + " |" for cells in body]
    return "\n".join(lines)


def defaults_markdown(rows: tuple[EpsDefault, ...] = DEFAULTS) -> str:
    """A MyST markdown table of ``rows``: library default and released values in separate
    columns, each source cited with a ``{cite}`` role."""
    body = [
        [f"{r.where} `{r.layer}`", f"`{r.parameter}`", r.kind, _default_cell(r),
         _released_cell(r), f"`{r.source.partition(': ')[2] or r.source}` {_cite(r.cite)}"]
        for r in rows
    ]
    header = ["where", "parameter", "kind", "library default", "released value", "source"]
    return _md_table(header, body)


def seed_markdown(verdicts: tuple[Verdict, ...] | None = None) -> str:
    """A MyST markdown table of seed 004's rows beside the facts and the verdict on each."""
    verdicts = compare_seed() if verdicts is None else verdicts
    body = []
    for v in verdicts:
        released = ", ".join(fmt_eps(x) for x in v.fact.released_values) or "–"
        body.append([v.seed.label, fmt_eps(v.seed.eps),
                     f"{_default_cell(v.fact)} (`{v.fact.layer}` {_cite(v.fact.cite)})",
                     released, f"**{v.verdict}**", v.seed.note or "–"])
    header = ["seed row", "seed ε", "library default", "released value", "verdict", "note"]
    return _md_table(header, body)


def row_statistic(x, *, kind: str = "LayerNorm", axis: int = -1) -> np.ndarray:
    r"""The per-row :math:`q` the epsilon is added to: the biased variance (``"LayerNorm"``)
    or the mean square (``"RMSNorm"``), in float64, one number per row (``axis`` removed).

    The variance is :func:`lneps.precision.mean_and_variance` in float64 (two-pass, divisor
    d); the mean square :math:`\frac1d\sum_i x_i^2` has no other home in the package.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}; got {kind!r}")
    arr, _ = as_float_array(x)
    axis = check_axis(arr, axis)
    xw = arr.astype(np.float64)
    if kind == "LayerNorm":
        _, q = mean_and_variance(xw, dtype=np.float64, axis=axis)
        return np.squeeze(q, axis=axis)
    return (xw * xw).mean(axis=axis)


def predicted_relative_change(q, eps_from: float, eps_to: float) -> np.ndarray:
    r"""Closed form of the relative change of a normalized row when :math:`\varepsilon_a`
    (``eps_from``) is replaced by :math:`\varepsilon_b` (``eps_to``):

    .. math:: \left|\sqrt{\frac{q+\varepsilon_a}{q+\varepsilon_b}} - 1\right|
              \approx \frac{|\varepsilon_b-\varepsilon_a|}{2q} \quad (q \gg \varepsilon).
    """
    eps_from, eps_to = check_eps(eps_from), check_eps(eps_to)
    q = np.asarray(q, dtype=np.float64)
    if np.any(q < 0):
        raise ValueError("q must be >= 0 (a variance or a mean square)")
    # (a - b) / (sqrt(a) (sqrt(a) + sqrt(b))) is sqrt(a/b) - 1 without cancellation near 1.
    a, b = q + eps_from, q + eps_to
    return np.abs((a - b) / (np.sqrt(b) * (np.sqrt(a) + np.sqrt(b))))


def relative_change(x, eps_from: float, eps_to: float, *, kind: str = "LayerNorm",
                    axis: int = -1) -> np.ndarray:
    r"""Measured relative change per row, :math:`\|N_b(x) - N_a(x)\|_2 / \|N_a(x)\|_2`, with
    :math:`N` the package's ``layer_norm`` or ``rms_norm`` (float64) at the two epsilons.

    A row whose :math:`N_a` is all zero (a constant row under layer norm) gives NaN.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}; got {kind!r}")
    arr, _ = as_float_array(x)
    axis = check_axis(arr, axis)
    norm = layer_norm if kind == "LayerNorm" else rms_norm
    xw = arr.astype(np.float64)
    a = norm(xw, eps=eps_from, axis=axis)
    b = norm(xw, eps=eps_to, axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.linalg.norm(b - a, axis=axis) / np.linalg.norm(a, axis=axis)


def statistic_for_relative_change(change: float, eps_from: float, eps_to: float) -> float:
    r"""The row statistic :math:`q` at which swapping ``eps_from`` for ``eps_to`` changes the
    output by exactly the relative amount ``change``: the inverse of
    :func:`predicted_relative_change`. Rows with a smaller :math:`q` change by more.

    With :math:`s = 1 - c` when :math:`\varepsilon_b > \varepsilon_a` (the output shrinks) and
    :math:`s = 1 + c` otherwise, :math:`(q+\varepsilon_a)/(q+\varepsilon_b) = s^2` gives
    :math:`q = (\varepsilon_b s^2 - \varepsilon_a)/(1 - s^2)`.
    """
    eps_from, eps_to = check_eps(eps_from), check_eps(eps_to)
    if eps_from == eps_to:
        raise ValueError("eps_from and eps_to must differ: equal epsilons change nothing")
    change = check_real(change, "change")
    if not 0 < change < math.inf:  # also rejects NaN
        raise ValueError(f"change must be a positive finite number; got {change!r}")
    largest = float(predicted_relative_change(0.0, eps_from, eps_to))  # reached at q = 0
    if change >= largest:
        raise ValueError(
            f"change must be below {largest:.6g}, the change of a constant row (q = 0); "
            f"got {change!r}"
        )
    s = 1.0 - change if eps_to > eps_from else 1.0 + change
    return (eps_to * s * s - eps_from) / (1.0 - s * s)
