"""Float16 sums written out one addition at a time, independently of lneps.book: the checks of
the network's naive float16 statistics (tests of activations and of chapter 9) share them."""

import numpy as np


def pairwise_f16(values):
    """Pairwise sum of float16 numbers, every addition rounded to float16 (zero-padded to a
    power of two, like lneps.book.finite_precision.rounded_sum), one row at a time."""
    vals = [np.float16(v) for v in values]
    width = 1
    while width < len(vals):
        width *= 2
    vals += [np.float16(0)] * (width - len(vals))
    with np.errstate(over="ignore"):
        while len(vals) > 1:
            half = len(vals) // 2
            vals = [np.float16(vals[i] + vals[i + half]) for i in range(half)]
    return float(vals[0])


def naive_f16_sumsq(row):
    r = row.astype(np.float16)
    mu = np.float16(pairwise_f16(r) / r.size)
    with np.errstate(over="ignore"):
        v = [np.float16(a - mu) for a in r]
        return pairwise_f16([np.float16(a * a) for a in v])
