"""The per-row floor under the derived bound, and the deferred exact grading near it: which rows of
a block measured against the kernel's estimate can need their bound at all, those rows graded
together against it, the rows whose error lies within the estimate's distance of the bound
measured exactly, and the tally of the elements beyond it."""

from __future__ import annotations

import numpy as np

from ...formats import ulp
from .arguments import reduced_axes
from .exact_errors import measure
from .exact_errors import row_index
from .forward_error import abs_mean_max, prepare
from .kernel_classes import ACC, KERNEL_CLASSES, row_stats
from .grade_report import as_bound, over_bound


def floor_applies(gr, metric):
    """Whether :func:`floored` may spare the bound on this block: layer_norm or
    rms_norm measured against the kernel's estimate, in the scaled metric with the op's own
    scale, each index of axis 0 normalized on its own, gain and bias finite and the same for
    every one."""
    a = gr.a
    if (
        getattr(gr, "delta", None) is None
        or metric != "scaled"
        or gr.scale is not None
        or a.ndim < 2
    ):
        return False
    if 0 in reduced_axes(-1 if gr.axis is None else gr.axis, a.ndim):
        return False
    return all(
        p is None or ((p.ndim < a.ndim or p.shape[0] == 1) and bool(np.isfinite(p).all()))
        for p in (gr.gamma, gr.beta)
    )


def floored(gr, kernels, test=None, probabilistic=False):
    r"""The rows (indices into the block's axis 0) whose derived bound can matter: an element
    equal to its correctly rounded value, or within :math:`|\gamma| F` of the exact value
    (:func:`lneps.testing._private.deferred_bound.bound_floor`, after the estimate's own distance), is within any
    correct kernel's bound; :func:`lneps.testing.forward_bound` is needed on the rows holding
    any other element, alone (:func:`grade_pending`)."""
    from .deferred_bound import bound_floor
    from .kernel_classes import KERNEL_CLASSES

    kernels = KERNEL_CLASSES if kernels is None else kernels
    a, ax = gr.a, -1 if gr.axis is None else gr.axis
    abs_stats = None
    if (
        test is not None and gr.op == "layer_norm" and a.ndim == 2 and ax in (-1, 1)
    ):  # rows as the test's
        abs_stats = (test.rows["M"], test.rows["X"])
    floor = bound_floor(
        gr.op,
        x=gr.x,
        gamma=gr.gamma,
        beta=gr.beta,
        eps=gr.call_eps,
        dtype=gr.dt,
        axis=ax,
        exact=gr.e,
        stats=gr.stats,
        kernels=kernels,
        abs_stats=abs_stats,
        probabilistic=probabilistic,
    )
    lim = floor * gr.s  # gr.s: |gamma| placed as the op applies it (1 without a gain)
    with np.errstate(invalid="ignore"):
        bad = (
            gr.diff > lim - gr.delta
        )  # lim is finite: the floor is, and so is gamma (floor_applies)
    neq = gr.a64 != gr.r
    gr.not_same = int(np.count_nonzero(neq))  # Summary.add counts the correctly rounded ones
    bad &= neq
    if bad.any():
        # The output's rounding: the bound's E is at least |gamma| F + min(ulp(|e|)/2, 2 |gamma| F)
        # (its last term, max(lower, t) in kernel_classes.finish, is at least t). A 16-bit kernel's
        # elements that are not correctly rounded are rare and about half an ulp off: most pass here.
        I = np.unravel_index(np.flatnonzero(bad), bad.shape)  # np.nonzero's, a tenth the cost
        lim_i = np.broadcast_to(lim, a.shape)[I]
        half = ulp(gr.e[I], gr.dt)
        half *= 0.5
        lim_i = lim_i + np.fmin(half, 2 * lim_i)
        with np.errstate(invalid="ignore"):
            bad[I] = ~(
                (gr.diff[I] + np.broadcast_to(gr.delta, a.shape)[I]) <= lim_i * (1 - 2.0**-40)
            )
    return np.flatnonzero(bad.reshape(a.shape[0], -1).any(axis=1))


def grade_pending(call, idx, metric, tolerance, tally):
    """The rows ``idx`` (of the whole output) that the floor left: measured again (a few rows),
    graded against the derived bound (``tolerance``: a measured block's), computed for all of
    them at once."""
    gr = measure(call, idx, exact=False)
    err = gr.scaled if metric == "scaled" else gr.err
    bound = as_bound(tolerance(gr), err.shape)
    if getattr(gr, "delta", None) is not None:
        err, bound = exact_near_bound(call, gr, err, bound, metric, None, tolerance)
    tally.add(
        gr, over_bound(gr.a64, gr.r, err, bound, finite=getattr(gr, "finite", False)), err, bound
    )


class Tally:
    """How many elements exceed their bound, and the worst of them (furthest beyond, by ratio)."""

    def __init__(self):
        self.count, self.worst = 0, None

    def add(self, gr, over, err, bound):
        n_over = int(over.sum())
        if not n_over:
            return
        self.count += n_over
        with np.errstate(divide="ignore", invalid="ignore"):
            badness = np.where(over, err / bound if np.ndim(bound) else err, -1.0)
        badness = np.where(np.isnan(badness), np.inf, badness)
        i = int(np.argmax(badness))
        if self.worst is None or badness.flat[i] > self.worst[0]:
            self.worst = (float(badness.flat[i]), gr, over, err, bound)


def exact_near_bound(call, gr, err, bound, metric, given, tolerance):
    """A block measured against the kernel's estimate (``gr.delta``: how far each e may be from
    the exact value): the rows holding an element whose error lies within that distance of its
    bound (with 2^-20 of the bound for the bound's own dependence on e) are measured exactly,
    and their errors and bounds (``given``, else ``tolerance``'s: a measured block's derived
    bound) replace the estimated ones in place. Returns ``(err, bound)``."""
    base = gr.e if metric == "ulp" else np.fmax(np.abs(gr.e), gr.s)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        window = gr.delta / ulp(base, gr.dt)
        window = window + np.multiply(bound, 2.0**-20)
        near = np.abs(err - bound) <= window
        near &= np.isfinite(
            bound
        )  # an infinite bound (no bound for the row) has no edge to be near
    if not near.any():
        return err, bound
    a = gr.a
    if a.ndim < 2:
        idx = None
    else:
        idx = np.flatnonzero(near.reshape(a.shape[0], -1).any(axis=1))
    ex = measure(call, gr.rows if idx is None else row_index(gr.rows, a.shape[0])[idx], exact=True)
    sel = slice(None) if idx is None else idx
    for name in ("e", "r", "diff", "err", "scaled"):
        getattr(gr, name)[sel] = getattr(ex, name)
    gr.delta[sel] = 0.0
    bound = np.array(bound, dtype=np.float64) if np.ndim(bound) else bound
    if np.ndim(bound):
        bound[sel] = as_bound(tolerance(ex), ex.a.shape) if given is None else given[ex.rows]
    return (gr.scaled if metric == "scaled" else gr.err), bound


def bound_floor(
    op,
    *,
    x,
    gamma=None,
    beta=None,
    eps,
    dtype=None,
    axis=-1,
    exact,
    stats,
    kernels=KERNEL_CLASSES,
    abs_stats=None,
    probabilistic=False,
) -> np.ndarray:
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
    1-D in the order of the rows, where they are known already (a :class:`ScaleTest` has them).
    ``probabilistic``: the floor under :func:`forward_bound`'s probabilistic bound."""
    classes = (kernels,) if isinstance(kernels, str) else tuple(kernels)
    P = prepare(op, x, gamma, beta, eps, dtype, axis, exact, stats)
    d, acc, x2 = P["d"], P["acc"], P["x2"]
    rstd = P["rstd"]
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if op == "layer_norm" and abs_stats is not None:
            M, X = (np.asarray(v, dtype=np.float64).reshape(-1, 1) for v in abs_stats)
            with_x = (M, X, P["mean"], np.zeros_like(M))
        elif op == "layer_norm":
            M, X = abs_mean_max(x2)
            with_x = (M, X, P["mean"], np.zeros_like(M))
        else:
            with_x = None
        # probabilistic on every row: below the bound that keeps the worst case on some rows
        rand = probabilistic
        lines, _ = row_stats(
            op, rstd, d, acc, P["eps_hat"], with_x, classes, u_in=P["u_in"], eta_in=P["eta_in"],
            probabilistic=rand
        )
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
            floor[~np.isfinite(M) | (d * M > ACC[acc]["big"] * 2.0**-4)] = 0.0
    axes, nd = P["axes"], P["xa"].ndim
    back_shape = tuple(s for k, s in enumerate(P["xa"].shape) if k not in axes) + (1,) * len(axes)
    return np.moveaxis(floor.reshape(back_shape), tuple(range(nd - len(axes), nd)), axes)
