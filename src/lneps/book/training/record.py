r"""What the lab records at a norm site: the distribution of :math:`q/\varepsilon` over its rows.

:math:`q` is the statistic the kernel adds :math:`\varepsilon` to: a row's mean square after
centring (the biased variance) for layer norm, before it for RMS norm. It is computed in
float64 from the values the kernel receives (after any cast to the computing format), so a
low-precision run is seen as its kernel sees it. The lab stores :math:`q` itself (its minimum,
quantiles and maximum), from which :math:`q/\varepsilon` follows by one division, also for
:math:`\varepsilon = 0` (:func:`q_over_eps` gives :math:`+\infty`, or NaN for :math:`q = 0`).

The thresholds are the book's: :math:`q/\varepsilon \ge 2^{p-1}` (1024 for float16, 128 for
bfloat16, 8,388,608 for float32, :math:`p` the format's precision in bits) means that
:math:`q + \varepsilon` rounds to :math:`q` in that format: the epsilon does nothing there.
``share_below_*`` is the share of rows where it still does something.

NumPy only: the functions here read stored runs without torch.
"""

from __future__ import annotations

import numpy as np

__all__ = ["THRESHOLDS", "QUANTILES", "STATS", "FULL_STEPS", "EVERY", "record_steps",
           "q_of_rows", "q_stats", "q_over_eps"]

#: :math:`2^{p-1}` per format: above it, adding epsilon to q changes nothing in that format.
THRESHOLDS = {"float16": 1024.0, "bfloat16": 128.0, "float32": 8388608.0}
#: The quantiles of q stored at every recorded step (0.1 %, 1 %, 10 %, 50 %).
QUANTILES = (0.001, 0.01, 0.1, 0.5)
#: The columns of a site's record, in order.
STATS = ("q_min", "q_p0.1", "q_p1", "q_p10", "q_p50", "q_max",
         "share_below_float16", "share_below_bfloat16", "share_below_float32",
         "zero_rows", "nonfinite_in_rows", "nonfinite_out_rows")
#: Steps 0 .. FULL_STEPS - 1 are all recorded; after them every EVERY-th step and the last.
FULL_STEPS = 20
EVERY = 10


def record_steps(steps: int, full: int = FULL_STEPS, every: int = EVERY) -> np.ndarray:
    """The steps at which the q statistics are recorded in a run of ``steps`` steps."""
    s = [i for i in range(steps) if i < full or i % every == 0 or i == steps - 1]
    return np.asarray(s, dtype=np.int32)


def q_of_rows(x: np.ndarray, kind: str) -> np.ndarray:
    """q per row of ``x`` (last axis), in float64: the biased variance (``"LayerNorm"``, two-pass)
    or the mean square (``"RMSNorm"``)."""
    x = np.asarray(x, dtype=np.float64).reshape(-1, np.shape(x)[-1])
    if kind == "LayerNorm":
        c = x - x.mean(axis=-1, keepdims=True)
        return (c * c).mean(axis=-1)
    if kind == "RMSNorm":
        return (x * x).mean(axis=-1)
    raise ValueError(kind)


def q_stats(q: np.ndarray, eps: float, nonfinite_out_rows: int = 0) -> np.ndarray:
    """One site's record (the columns of :data:`STATS`) from its rows' q (float64).

    Rows whose input was not finite have q NaN or inf: they are counted
    (``nonfinite_in_rows``) and left out of the quantiles and shares. A share below a threshold
    t is the share of the finite rows with :math:`q < t\\,\\varepsilon` (0 for
    :math:`\\varepsilon = 0`: no row has q < 0)."""
    q = np.asarray(q, dtype=np.float64).ravel()
    ok = np.isfinite(q)
    fin = q[ok]
    n = max(len(fin), 1)
    if len(fin):
        qs = np.quantile(fin, QUANTILES)
        head = [fin.min(), *qs, fin.max()]
    else:
        head = [np.nan] * (2 + len(QUANTILES))
    shares = [np.count_nonzero(fin < t * eps) / n for t in THRESHOLDS.values()]
    return np.array(head + shares + [np.count_nonzero(fin == 0), np.count_nonzero(~ok), nonfinite_out_rows],
                    dtype=np.float64)


def q_over_eps(q, eps: float) -> np.ndarray:
    """:math:`q/\\varepsilon` in float64; for :math:`\\varepsilon = 0`, :math:`+\\infty` where
    q > 0 and NaN where q = 0 (the 0/0 of a zero row with no epsilon)."""
    q = np.asarray(q, dtype=np.float64)
    if eps == 0:
        return np.where(q > 0, np.inf, np.nan)
    return q / eps
