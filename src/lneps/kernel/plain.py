"""The plain path of the kernel: the textbook two-pass formula in float64, for rows holding NaN
or inf (their result is the arithmetic's NaN or 0, that row only)."""

from __future__ import annotations

import numpy as np


def plain_rows(xin, P, chunks, kind, eps, g, b, yout):
    """The textbook two-pass formula in float64, for rows holding NaN or inf, chunk by chunk."""
    xr = xin[P]
    n, d = xr.shape
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        mu = np.zeros(n)
        if kind == "layer":
            for c0, c1 in chunks:
                mu += xr[:, c0:c1].astype(np.float64).sum(axis=1)
            mu /= d
        q = np.zeros(n)
        for c0, c1 in chunks:
            v = xr[:, c0:c1].astype(np.float64) - mu[:, None]
            q += (v * v).sum(axis=1)
        r = 1.0 / np.sqrt(q / d + eps)
        for c0, c1 in chunks:
            y = (xr[:, c0:c1].astype(np.float64) - mu[:, None]) * r[:, None]
            gc, bc = g.part(c0, c1, P), b.part(c0, c1, P)
            if gc is not None:
                y = y * gc
            if bc is not None:
                y = y + bc
            yout[P, c0:c1] = y.astype(yout.dtype)
    return (mu if kind == "layer" else None), r
