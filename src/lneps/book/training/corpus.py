r"""The training lab's data: a seeded Markov chain whose loss floor is known exactly.

Every symbol of the stream is drawn from a transition row chosen by the ``order`` symbols before
it: :math:`P[b, :]` for order 1, :math:`P[a, b, :]` for order 2. The rows are drawn once, from a
symmetric Dirichlet(:math:`\alpha`) with a seeded NumPy generator, and the stream starts in the
chain's stationary distribution (over states: symbols, or pairs for order 2), so every window of
the stream is distributed alike. No model can predict a symbol better than the chain's own row
does, so the cross-entropy a model reaches is bounded below by:

* the entropy rate :math:`H = \sum_s \pi(s)\, H(P[s, :])` for a symbol with at least ``order``
  symbols before it in its window;
* for order 2, :math:`H(X_1 \mid X_0)` for the first prediction of a window, which sees one
  symbol only.

:func:`loss_floor` averages them over a window's positions the way the training loss does; for
order 1 it is the entropy rate itself.
Only NumPy is needed here: the stored stream is re-made and checked without torch.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from dataclasses import asdict, dataclass

import numpy as np

__all__ = [
    "Chain",
    "CHAIN",
    "transitions",
    "stationary",
    "entropy_rate",
    "unigram_entropy",
    "first_step_entropy",
    "loss_floor",
    "held_out_loss",
    "generate",
    "digest",
    "describe",
]


@dataclass(frozen=True)
class Chain:
    """The generator's parameters: alphabet size, Dirichlet concentration, seed, stream length,
    order (1 or 2)."""

    vocab: int = 32
    alpha: float = 0.2
    seed: int = 20261201
    length: int = 1 << 18
    order: int = 1

    def as_dict(self) -> dict:
        return asdict(self)


#: The chain the stored runs were trained on (data/training/corpus.npy).
CHAIN = Chain()


def _rng(chain: Chain) -> np.random.Generator:
    return np.random.default_rng(chain.seed)


def _draw_rows(rng: np.random.Generator, chain: Chain) -> np.ndarray:
    if chain.order not in (1, 2):
        raise ValueError("order must be 1 or 2")
    v = chain.vocab
    return rng.dirichlet(np.full(v, chain.alpha), size=(v,) * chain.order)


def transitions(chain: Chain = CHAIN) -> np.ndarray:
    """The transition rows, float64: shape (V, V) with ``P[b, c]`` = Pr(next = c | b) for
    order 1, (V, V, V) with ``P[a, b, c]`` = Pr(next = c | a, b) for order 2."""
    return _draw_rows(_rng(chain), chain)


def _state_matrix(p: np.ndarray) -> np.ndarray:
    """The chain over states (symbols, or pairs (a, b) -> (b, c) for order 2)."""
    if p.ndim == 2:
        return p
    v = p.shape[0]
    big = np.zeros((v * v, v * v))
    for a in range(v):
        for b in range(v):
            big[a * v + b, b * v : (b + 1) * v] = p[a, b]
    return big


def stationary(p: np.ndarray) -> np.ndarray:
    """The stationary distribution over states, shaped like ``p`` without its last axis: the
    solution of :math:`\\pi P = \\pi`, :math:`\\sum \\pi = 1`, by LU in 50-digit arithmetic
    (mpmath), then rounded to float64: the same bits on every machine, where an eigen-solver's
    or BLAS's last bits are not. Order 2 (1,024 states) takes the float64 eigenvector instead."""
    big = _state_matrix(p)
    n = big.shape[0]
    if n > 256:
        w, vec = np.linalg.eig(big.T)
        pi = np.abs(np.real(vec[:, np.argmin(np.abs(w - 1))]))
        return (pi / pi.sum()).reshape(p.shape[:-1])
    import mpmath

    with mpmath.workdps(50):
        a = mpmath.matrix(n, n)
        for i in range(n - 1):
            for j in range(n):
                a[i, j] = mpmath.mpf(float(big[j, i])) - (1 if i == j else 0)
        for j in range(n):
            a[n - 1, j] = 1
        b = mpmath.matrix(n, 1)
        b[n - 1] = 1
        x = mpmath.lu_solve(a, b)
        return np.array([float(v) for v in x]).reshape(p.shape[:-1])


def _row_entropy(p: np.ndarray) -> np.ndarray:
    """Each row's entropy (nats), with libm's log and exact sums (no SIMD log, no summation
    order): the same bits on every machine."""
    rows = np.asarray(p, dtype=np.float64).reshape(-1, p.shape[-1])
    out = [math.fsum(-x * math.log(x) for x in row.tolist() if x > 0) for row in rows]
    return np.array(out).reshape(p.shape[:-1])


def entropy_rate(chain: Chain = CHAIN) -> float:
    """Nats per symbol a perfect predictor of the chain pays: :math:`\\sum_s \\pi(s) H(P[s])`."""
    p = transitions(chain)
    return math.fsum((stationary(p) * _row_entropy(p)).ravel())


def unigram_entropy(chain: Chain = CHAIN) -> float:
    """The entropy of one symbol under the stationary distribution (nats): a model that has
    learnt only the symbols' frequencies pays this."""
    pi = stationary(transitions(chain))
    marg = pi if pi.ndim == 1 else pi.sum(axis=1)
    return float(_row_entropy(marg[None])[0])


def first_step_entropy(chain: Chain = CHAIN) -> float:
    """:math:`H(X_1 \\mid X_0)` under the stationary distribution (nats)."""
    if chain.order == 1:
        return entropy_rate(chain)
    pi = stationary(transitions(chain))
    return float(_row_entropy(pi.ravel()[None])[0]) - unigram_entropy(chain)


def loss_floor(context: int, chain: Chain = CHAIN) -> float:
    """The smallest mean cross-entropy over a window of ``context`` predictions: for order 2 the
    first sees one symbol (:func:`first_step_entropy`), the others two or more
    (:func:`entropy_rate`); for order 1 every one pays the entropy rate."""
    return (first_step_entropy(chain) + (context - 1) * entropy_rate(chain)) / context


def held_out_loss(stream: np.ndarray, context: int = 64, chain: Chain = CHAIN) -> float:
    r"""The chain's own mean cross-entropy (nats) on the held-out windows of ``stream`` (those the
    runs are evaluated on, :func:`.recipe.eval_offsets`): :math:`-\frac1N\sum \log P[x_t,
    x_{t+1}]` over every prediction of every window (order 1). The lowest held-out loss any model
    can reach on those windows; it differs from :func:`entropy_rate` by the windows' sampling.
    Float64, libm's log, summed by :func:`math.fsum` (no dependence on the machine's SIMD log
    or summation order)."""

    from .recipe import eval_offsets

    if chain.order != 1:
        raise ValueError("held_out_loss is written for order 1")
    p = transitions(chain)
    s = np.asarray(stream, dtype=np.int64)
    starts = eval_offsets(context, len(s))
    idx = starts[:, None] + np.arange(context + 1)
    w = s[idx]
    x, y = w[:, :-1].ravel(), w[:, 1:].ravel()
    return math.fsum(-math.log(v) for v in p[x, y]) / len(x)


def generate(chain: Chain = CHAIN) -> np.ndarray:
    """The token stream, uint8, length ``chain.length``: the first state from the stationary
    distribution, each later symbol by inverse-CDF sampling of its row with one uniform
    (float64) per symbol, all from one seeded generator after the transition rows."""
    rng = _rng(chain)
    v, k = chain.vocab, chain.order
    p = _draw_rows(rng, chain)  # the same draws as transitions()
    pi = stationary(p).ravel()
    u = rng.random(chain.length)
    cdf = np.cumsum(p, axis=-1).reshape(-1, v)
    cdf[:, -1] = 1.0
    rows = [list(r) for r in cdf]  # bisect_right on a list == np.searchsorted(side="right")
    state = min(int(np.searchsorted(np.cumsum(pi), u[0], side="right")), v**k - 1)
    out = list(divmod(state, v)) if k == 2 else [state]
    mod = v ** (k - 1)
    for x in u[k:].tolist():
        c = min(bisect.bisect_right(rows[state], x), v - 1)
        out.append(c)
        state = (state % mod) * v + c
    return np.asarray(out, dtype=np.uint8)


def digest(stream: np.ndarray) -> str:
    """SHA-256 of the stream's bytes, the identity stored with every run."""
    return hashlib.sha256(np.ascontiguousarray(stream, dtype=np.uint8).tobytes()).hexdigest()


def describe(chain: Chain = CHAIN, context: int = 64) -> dict:
    """The generator's parameters with its exact entropies, as stored in corpus.json."""
    return {
        **chain.as_dict(),
        "entropy_rate_nats": entropy_rate(chain),
        "first_step_entropy_nats": first_step_entropy(chain),
        "unigram_entropy_nats": unigram_entropy(chain),
        "context": context,
        "loss_floor_nats": loss_floor(context, chain),
    }
