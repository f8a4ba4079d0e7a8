r"""What a trained network's LayerNorms see: statistics of their inputs, and a cache for them.

For one LayerNorm input ("site") the rows are tokens :math:`x \in \mathbb R^d`; per token
:math:`\mu`, :math:`v = x - \mu\mathbf 1` and the biased variance :math:`q = v\cdot v/d`.
:func:`site_summary` reduces a site to the numbers the book quotes: the smallest q and
:math:`q/\varepsilon`, the largest :math:`|x|` and :math:`|v|`, the largest
:math:`\sum_i v_i^2` (exact, and as a naive float16 layer computes it), and the largest
backward gain :math:`1/\sqrt{q+\varepsilon}`.

:func:`measure` runs all-MiniLM-L6-v2 (:mod:`lneps.book.minilm`) on a list of sentences: once in
float32 on every sentence, keeping the 13 LayerNorm inputs, and then, on every
``subset_step``-th sentence, with other ε and in float16 / bfloat16. The forward passes use
the defined arithmetic of :mod:`lneps.book.minilm`, so the results are functions of the model file,
the sentences and this package's code alone, the same bits on every machine; they are cached on
disk under a key made of the three (the model file's SHA-256 first, as its installer recorded
it: :func:`lneps.book.minilm.model_sha256`), by :mod:`lneps.book.result_cache`: a second run
reads them back instead of recomputing them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .._checks import check_eps, check_positive_int
from ..naive import rounded_sum
from . import result_cache

__all__ = [
    "F16_MAX",
    "SWAP_EPS",
    "token_variance",
    "site_label",
    "float16_sum_of_squares",
    "site_summary",
    "Measurements",
    "measure",
]

F16_MAX = 65504.0
SWAP_EPS = (1e-6, 1e-5, 1e-3, 1e-1)
# The end-to-end runs besides float32: (name, dtype name, LayerNorm arithmetic).
LOW_PRECISION = (("float16 naive", "float16", "naive"), ("float16, exact LayerNorm", "float16", "exact"),
                 ("bfloat16 naive", "bfloat16", "naive"))
CACHE_VERSION = 1


def token_variance(x) -> np.ndarray:
    """The biased variance q of each row of ``x`` (tokens, d), two-pass with float64
    accumulation (NumPy's ``var``: the mean first, then the mean of the squared deviations)."""
    return np.asarray(x).var(axis=-1, dtype=np.float64)


def site_label(name: str) -> str:
    """A short label for a LayerNorm's weight prefix: ``emb``, ``L1 attn``, ..., ``L6 FFN``."""
    if name.startswith("embeddings."):
        return "emb"
    layer = int(name.split(".")[2]) + 1
    return f"L{layer} {'attn' if '.attention.' in name else 'FFN'}"


def float16_sum_of_squares(x) -> np.ndarray:
    r"""Per row, :math:`\sum_i (x_i - \mu)^2` as a naive float16 layer norm computes it: the row
    rounded to float16, :math:`\mu` its pairwise float16 sum divided by d (rounded), the
    differences, squares and their pairwise sum all rounded to float16
    (:func:`lneps.book.finite_precision.rounded_sum`). ``inf`` where the sum overflows 65504."""
    x16 = np.asarray(x).astype(np.float16)
    d = x16.shape[-1]
    with np.errstate(over="ignore", invalid="ignore"):
        mu = (rounded_sum(x16, np.float16).astype(np.float64) / d).astype(np.float16)
        v = x16 - mu
        return rounded_sum(v * v, np.float16)[..., 0].astype(np.float64)


def site_summary(x, eps, *, q=None, candidates: float = 0.5) -> dict:
    r"""The numbers of one site, ``x`` of shape (tokens, d), for a LayerNorm with ``eps``.

    Keys: ``tokens``; ``q_min``, ``q_median``, ``q_max``, ``q_over_eps_min`` and its token
    ``argmin``; ``abs_x_max`` and ``abs_v_max`` (:math:`v = x - \mu`); ``sumsq_max`` (exact
    :math:`\max \sum v_i^2 = d\max q`) and ``sumsq_f16_max`` with its token ``sumsq_f16_argmax``
    (the naive float16 sum, :func:`float16_sum_of_squares`); ``gain_max`` =
    :math:`1/\sqrt{q_{\min}+\varepsilon}`, the largest backward gain of the site. ``q``: the
    rows' variances if already computed (:func:`token_variance`).

    The float16 sums are computed only for the tokens whose exact :math:`\sum v_i^2` is at least
    ``candidates`` times the largest. Rounding a row to float16 moves each entry by at most
    :math:`2^{-11}` relative, and a float16 pairwise sum of d terms is within a relative
    :math:`\lceil\log_2 d\rceil\,2^{-11}` (under 0.5 % for d = 384) of the exact sum of its
    terms, so a token below half the largest exact sum cannot hold the largest float16 sum.
    """
    eps = check_eps(eps)
    x = np.asarray(x)
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"x must be a non-empty (tokens, d) array; got shape {x.shape}")
    mu = x.mean(axis=-1, dtype=np.float64)
    q = token_variance(x) if q is None else np.asarray(q, dtype=np.float64)
    d = x.shape[-1]
    # the largest |x_i - mu| of a row is at its largest or its smallest entry
    abs_v = np.maximum(x.max(axis=-1) - mu, mu - x.min(axis=-1))
    pick = np.flatnonzero(q >= candidates * q.max())
    f16 = float16_sum_of_squares(np.asarray(x)[pick])
    k = int(np.argmin(q))
    j = int(np.argmax(f16))
    return {
        "tokens": int(x.shape[0]),
        "q_min": float(q[k]),
        "q_median": float(np.median(q)),
        "q_max": float(q.max()),
        "q_over_eps_min": float(q[k] / eps) if eps > 0 else float("inf"),
        "argmin": k,
        "abs_x_max": float(np.abs(x).max()),
        "abs_v_max": float(abs_v.max()),
        "sumsq_max": float(d * q.max()),
        "sumsq_f16_max": float(f16[j]),
        "sumsq_f16_argmax": int(pick[j]),
        "gain_max": float(1 / np.sqrt(q[k] + eps)),
    }


@dataclass(frozen=True)
class Measurements:
    """What :func:`measure` computed (or read back from its cache).

    ``sites``: LayerNorm weight prefix -> its float32 input (tokens, 384) over every sentence;
    ``embeddings``: the float32 embeddings of every sentence; ``lengths``: tokens per
    sentence; ``subset``: the sentence indices of the end-to-end runs; ``runs``: run name ->
    embeddings of the subset (``"float32"``, ``"eps=1e-06"``, ..., ``"float16 naive"``, ...);
    ``nonfinite``: run name -> count of non-finite embedding entries; ``model_sha256``.
    """

    sites: dict
    embeddings: np.ndarray
    lengths: np.ndarray
    subset: np.ndarray
    runs: dict
    nonfinite: dict
    model_sha256: str
    eps: float
    from_cache: bool


def _key(model_sha: str, sentences, subset_step: int) -> str:
    # the package's code too (result_cache.key): the passes run on lneps.book.minilm and
    # exact_ops, which use lneps.kernel's rounding and lneps.oracle
    return result_cache.key(str(CACHE_VERSION), model_sha, "\n".join(sentences), str(subset_step),
                            np.__version__)


def _one_blas_thread():
    """A context in which BLAS uses one thread (threadpoolctl), or a no-op without it.

    The book executes several notebooks at a time on two cores; a second OpenBLAS thread per
    kernel then mostly spins, and on a busy machine it made these forward passes 3 to 8 times
    slower. The thread count changes only the speed: the defined arithmetic's results do not
    depend on how BLAS orders its sums."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        import contextlib

        return contextlib.nullcontext()
    return threadpool_limits(1, user_api="blas")


def _compute(model, sentences, subset_step):
    with _one_blas_thread():
        return _compute_all(model, sentences, subset_step)


def _compute_all(model, sentences, subset_step):
    import ml_dtypes

    from . import minilm

    ids = minilm.encode(model, sentences)
    base = minilm.forward(model, ids, keep_sites=True)
    subset = np.arange(0, len(ids), subset_step)
    sub = [ids[i] for i in subset]
    runs = {"float32": base.embeddings[subset]}
    for eps in SWAP_EPS:
        runs[f"eps={eps:g}"] = minilm.forward(model, sub, eps=eps).embeddings
    formats = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for name, fmt, how in LOW_PRECISION:
            runs[name] = minilm.forward(model, sub, dtype=formats[fmt], layer_norms=how).embeddings
    return base, subset, runs


def _write(folder: Path, arrays: dict, meta: dict) -> None:
    def write(tmp: Path) -> None:
        for name, a in arrays.items():
            np.save(tmp / f"{name}.npy", a)
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))

    result_cache.write_folder(folder, write)


def measure(sentences, *, model=None, cache_dir=result_cache.FROM_ENV, subset_step: int = 10,
            write: bool = True) -> Measurements:
    """Measure all-MiniLM-L6-v2 on ``sentences`` (see the module docstring).

    ``model``: a loaded :class:`lneps.book.minilm.MiniLM` (default: :func:`lneps.book.minilm.load`).
    ``cache_dir``: a folder for the cache (default: ``$LNEPS_CACHE_DIR``; None, or that
    variable unset or empty: no cache). A cache that cannot be written is
    skipped silently: the results are the same, only slower next time. ``write=False`` reads
    the cache but never adds to it.
    """
    from . import minilm

    if isinstance(sentences, str) or not all(isinstance(s, str) for s in sentences):
        raise TypeError("sentences must be a sequence of strings")
    sentences = list(sentences)
    if not sentences:
        raise ValueError("sentences is empty")
    subset_step = check_positive_int(subset_step, "subset_step")
    cache_dir = result_cache.cache_dir(cache_dir)
    folder = minilm.model_directory(None if model is None else model.directory)
    sha = minilm.model_sha256(folder)
    target = None if cache_dir is None else Path(cache_dir) / f"minilm-{_key(sha, sentences, subset_step)}"
    if target is not None and (target / "meta.json").is_file():
        meta = json.loads((target / "meta.json").read_text())
        load = lambda name: np.load(target / f"{name}.npy")  # noqa: E731
        return Measurements(
            sites={n: load(f"site{i:02d}") for i, n in enumerate(meta["sites"])},
            embeddings=load("embeddings"), lengths=load("lengths"), subset=load("subset"),
            runs={n: load(f"run{i:02d}") for i, n in enumerate(meta["runs"])},
            nonfinite=meta["nonfinite"], model_sha256=sha, eps=meta["eps"], from_cache=True)
    model = minilm.load(folder) if model is None else model
    base, subset, runs = _compute(model, sentences, subset_step)
    nonfinite = {n: int(np.size(e) - np.isfinite(e).sum()) for n, e in runs.items()}
    result = Measurements(base.sites, base.embeddings, base.lengths, subset, runs, nonfinite, sha,
                          model.eps, False)
    if target is not None and write:
        arrays = {f"site{i:02d}": a for i, a in enumerate(base.sites.values())}
        arrays.update({f"run{i:02d}": a for i, a in enumerate(runs.values())})
        arrays.update(embeddings=base.embeddings, lengths=base.lengths, subset=subset)
        _write(target, arrays, {"sites": list(base.sites), "runs": list(runs), "nonfinite": nonfinite,
                                "eps": model.eps, "model_sha256": sha})
    return result
