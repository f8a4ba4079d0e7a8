r"""A floor under :func:`lneps.testing.forward_bound`, per row, that costs no per-element
arithmetic: :func:`lneps.testing.assert_close` computes the bound itself only on the rows
holding an element above the floor.
"""

from __future__ import annotations

import numpy as np

from .forward_error import _prepare
from .kernel_classes import _ACC, KERNEL_CLASSES, _row_stats

__all__ = ["bound_floor"]


def bound_floor(op, *, x, gamma=None, beta=None, eps, dtype=None, axis=-1, exact, stats,
                kernels=KERNEL_CLASSES, abs_stats=None) -> np.ndarray:
    r"""Per row, a floor F under :func:`forward_bound` that costs no per-element arithmetic
    beyond :math:`\operatorname{mean}|x|` and :math:`\max|x|`: every element's bound, in the
    scaled metric, is at least :math:`|\gamma_i| F` (F without a gain) divided by the ulp
    the scaled error divides by. So an element with :math:`|a_i - y_i| \le |\gamma_i| F`
    is within its bound, and only the rows holding other elements need the bound itself
    (:func:`lneps.testing.assert_close` computes it there alone).

    Why it is a floor: the bound is :math:`E_i/\mathrm{ulp}` with
    :math:`E_i \ge |\gamma_i| \max_c \min_l (a_l|z_i| + b_l)`, every slope :math:`a_l \ge 0`,
    so :math:`E_i \ge |\gamma_i| \max_c \min_l b_l`; each intercept grows with the row's
    :math:`q = \operatorname{mean} z^2`, so taking q = 0 keeps it a floor, and
    :math:`1 - 2^{-30}` covers the rounding of mean|x| here. Rows where the bound is infinite
    or the statistics are not finite get F = 0. Returns float64 of x's shape with the
    normalized axes of length 1 (as ``stats``). ``abs_stats``: (mean |x|, max |x|) per row,
    1-D in the order of the rows, where they are known already (a :class:`ScaleTest` has them)."""
    classes = (kernels,) if isinstance(kernels, str) else tuple(kernels)
    P = _prepare(op, x, gamma, beta, eps, dtype, axis, exact, stats)
    d, acc, x2 = P["d"], P["acc"], P["x2"]
    rstd = P["rstd"]
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if op == "layer_norm" and abs_stats is not None:
            M, X = (np.asarray(v, dtype=np.float64).reshape(-1, 1) for v in abs_stats)
            with_x = (M, X, P["mean"], np.zeros_like(M))
        elif op == "layer_norm":
            ax = x2.astype(np.float64)  # NumPy's float16 arithmetic is slow: float64 at once
            np.abs(ax, out=ax)
            M = ax.mean(axis=1, keepdims=True)
            X = ax.max(axis=1, keepdims=True)
            del ax
            with_x = (M, X, P["mean"], np.zeros_like(M))
        else:
            with_x = None
        lines, _ = _row_stats(op, rstd, d, acc, P["eps_hat"], with_x, classes)
        floor = None
        for cls in lines:
            low = None
            for _, b in cls:
                b = np.broadcast_to(b, rstd.shape)
                low = b if low is None else np.fmin(low, b)
            floor = low if floor is None else np.fmax(floor, low)
        if floor is None:  # no class applies to these formats: no floor
            floor = np.zeros(rstd.shape)
        floor = np.where(np.isfinite(floor) & np.isfinite(rstd), floor * (1 - 2.0**-30), 0.0)
        if op == "layer_norm":
            floor[~np.isfinite(M) | (d * M > _ACC[acc]["big"] * 2.0**-4)] = 0.0
    axes, nd = P["axes"], P["xa"].ndim
    back_shape = tuple(s for k, s in enumerate(P["xa"].shape) if k not in axes) + (1,) * len(axes)
    return np.moveaxis(floor.reshape(back_shape), tuple(range(nd - len(axes), nd)), axes)
