"""assert_close: a kernel's output graded against lneps with a derived tolerance, and a failure
message that shows the worst element and names the defect where its pattern is known."""

from __future__ import annotations

import numpy as np

from ..ulp import ulp
from ._arrays import _axes
from .arguments import _ASSERT_KEYWORDS, _KEYWORDS, WRT, _call_error
from .estimated_errors import _measure
from .exact_errors import _blocks, _row_index
from .grading import _parse
from .report import _bound, _exceeding, _Summary

# Rows per block when grading large layer_norm / rms_norm outputs: the per-element arrays of a
# block (errors, bound) stay a few MB whatever the input, as torch.testing's own temporaries do.
_BLOCK_ELEMENTS = 1 << 18


def default_tolerance(op, *, x, actual_dtype, gamma=None, beta=None, eps, axis=-1, dy=None, wrt=None,
                      exact=None, stats=None, kernels=None):
    """The per-element bound, in the scaled metric, that every correct kernel of ``op`` with
    output format ``actual_dtype`` meets: :func:`lneps.testing.forward_bound` for the forward
    ops, :func:`lneps.testing.backward_bound` for the backward ones. ``ValueError`` for an op
    with no derived bound (group_norm, batch_norm, a callable): pass ``max_ulp=`` there.
    ``kernels`` narrows the forward bound to some classes of
    :data:`lneps.testing.KERNEL_CLASSES` (default: all of them)."""
    if op in ("layer_norm", "rms_norm"):
        from .forward_error import forward_bound
        from .kernel_classes import KERNEL_CLASSES

        return forward_bound(op, x=x, gamma=gamma, beta=beta, eps=eps, dtype=actual_dtype, axis=axis,
                             exact=exact, stats=stats, kernels=KERNEL_CLASSES if kernels is None else kernels)
    if op in WRT:
        from .backward_bound import backward_bound

        return backward_bound(op.removesuffix("_backward"), wrt, x=x, dy=dy, gamma=gamma, eps=eps,
                              dtype=actual_dtype, axis=axis)
    name = op if isinstance(op, str) else getattr(op, "__name__", "a callable op")
    raise ValueError(f"no derived tolerance for {name}: pass max_ulp= (a number, or one bound per element)")


def _row_of(gr, idx, shown):
    """``(text, row)``: where the worst element's input row is (``shown``: its index in the whole
    of actual), and its numbers (``idx``: its index in the block graded)."""
    xa = gr.x
    if gr.name == "group_norm":  # the (sample, group) slice the element was normalized with
        width = xa.shape[1] // gr.kw["num_groups"]
        lo = idx[1] // width * width
        return f"x[{shown[0]}, {lo}:{lo + width}, ...]", xa[idx[0], lo:lo + width].ravel()
    if gr.wrt in ("gamma", "beta"):
        return "x (every row contributes)", None
    from ._arrays import _axes

    if gr.name == "batch_norm":
        axes = _axes(0 if gr.axis is None else gr.axis, xa.ndim)
        where = "x[" + ", ".join(":" if k in axes else str(i) for k, i in enumerate(shown)) + "]"
        return where, xa[tuple(slice(None) if k in axes else i for k, i in enumerate(idx))]
    axes = _axes(-1 if gr.axis is None else gr.axis, xa.ndim)
    where = "x[" + ", ".join(":" if k in axes else str(i) for k, i in enumerate(shown)) + "]"
    return where, xa[tuple(slice(None) if k in axes else i for k, i in enumerate(idx))]


def _at(v, idx, shape):
    """v (None, a scalar or an array broadcasting to shape) at idx."""
    if v is None:
        return None
    return float(np.broadcast_to(np.asarray(v, dtype=np.float64), shape)[idx]) if np.ndim(v) else float(v)


def _placed(p, gr):
    """gamma or beta broadcast to x's shape as the op places it (per channel for group_norm)."""
    if p is None:
        return None
    p = np.asarray(p.astype(np.float64))
    shape, nd = gr.x.shape, gr.x.ndim
    if gr.name == "group_norm" and p.ndim == 1:
        return p.reshape([shape[1] if a == 1 else 1 for a in range(nd)])
    if p.ndim and gr.name in ("layer_norm", "rms_norm") and gr.axis is not None:
        from ._arrays import _axes

        axes = _axes(gr.axis, nd)
        if p.shape == tuple(shape[a] for a in axes):
            return p.reshape([shape[a] if a in axes else 1 for a in range(nd)])
    return p


def _suspects(gr, idx, row, over_rows_constant_nan, constant_far, systematic):
    """Known patterns, each named with its cause."""
    found = []
    if over_rows_constant_nan:
        found.append("NaN on a constant row: epsilon missing (a constant row has variance 0, and "
                     "(x - mean)/sqrt(0) is 0/0 without epsilon)")
    if constant_far:
        found.append("a constant row's output far from beta: its normalized value is exactly 0, so the "
                     "statistics were merged inexactly (a mean that is not exactly the row's constant, as a "
                     "Welford or Chan merge or a fused multiply-add residue leaves it)")
    if systematic is not None and getattr(systematic, "suspect", None):
        found.append(systematic.suspect)
    return found


def _message(gr, over, err, bound, metric, max_ulp_given, systematic, err_msg, over_count, n):
    shape = gr.a64.shape
    with np.errstate(divide="ignore", invalid="ignore"):
        badness = np.where(over, err / bound if np.ndim(bound) else err, -1.0)
    badness = np.where(np.isnan(badness), np.inf, badness)
    idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(badness)), shape))
    if isinstance(gr.rows, np.ndarray):  # some rows of the output, by index
        shown = (int(gr.rows[idx[0]]), *idx[1:])
    else:
        off = (gr.rows.start or 0) if isinstance(gr.rows, slice) else 0
        shown = (idx[0] + off, *idx[1:]) if idx else idx  # the index into the whole of actual
    b_at = float(bound[idx]) if np.ndim(bound) else float(bound)
    limit = (f"{max_ulp_given} ulp" if max_ulp_given is not None and not np.ndim(max_ulp_given)
             else f"their bound (here {b_at:.6g} ulp)")
    where, row = _row_of(gr, idx, shown)

    def show(v):
        v = float(v)
        return f"{v!r} ({v.hex()})"

    ratio = float(err[idx]) / b_at if b_at > 0 else np.inf
    if over_count:
        lines = [f"{over_count} of {n} elements exceed {limit} ({metric} metric; {gr.name}, {gr.dt})",
                 f"worst at index {shown}:"]
    else:
        lines = [f"every element is within its bound, but the rows share a scale error that a correct "
                 f"kernel's rounding cannot produce ({gr.name}, {gr.dt})", f"largest error at index {shown}:"]
    if row is not None:
        lines.append(f"  input row {where} = {np.array2string(row, threshold=16, edgeitems=4, max_line_width=100)}")
    if gr.stats is not None and gr.wrt is None:
        st = [np.broadcast_to(s, shape)[idx] for s in gr.stats]
        names = ("mean", "rstd") if len(st) == 2 else ("rstd",)
        lines.append("  row's " + ", ".join(f"{n} {float(v):.10g}" for n, v in zip(names, st))
                     + " (exact to the digits shown)")
    ga, be = _at(_placed(gr.gamma, gr), idx, shape), _at(_placed(gr.beta, gr), idx, shape)
    if ga is not None or be is not None:
        lines.append("  " + ", ".join(f"{n} here {v!r}" for n, v in (("gamma", ga), ("beta", be)) if v is not None))
    lines += [f"  exact             {show(gr.e[idx])}",
              f"  correctly rounded {show(gr.r[idx])}",
              f"  actual            {show(gr.a64[idx])}",
              f"  error             {gr.err[idx]:.6g} ulp, {gr.scaled[idx]:.6g} ulp scaled, "
              f"abs {abs(gr.a64[idx] - gr.e[idx]):.6g}; {ratio:.3g} times the bound"]
    # the known patterns
    nan_const = far_const = False
    if gr.wrt is None and gr.name in ("layer_norm", "rms_norm", "group_norm") and row is not None:
        constant = row.size > 1 and np.all(row == row.ravel()[0])
        if constant and np.isnan(gr.a64[idx]) and np.isfinite(gr.e[idx]):
            nan_const = True
        elif constant and gr.name != "rms_norm" and np.isfinite(gr.a64[idx]):
            far_const = True
    found = _suspects(gr, idx, row, nan_const, far_const, systematic)
    if systematic is not None and not getattr(systematic, "passed", True):
        lines.append(f"  across rows: {systematic}")
    for s in found:
        lines.append(f"suspect: {s}")
    if err_msg:
        lines.append(str(err_msg))
    return "\n".join(lines)


def assert_close(actual, *args, **kwargs):
    """Raise ``AssertionError`` unless ``actual``, a kernel's output, is as close to lneps as a
    correct kernel is; return the :class:`Report` otherwise.

    ``assert_close(actual, *, x, eps, op="layer_norm", gamma=None, beta=None, max_ulp=None,
    kernels=None, metric="scaled", err_msg="", axis=DEFAULT, scale=None, dy=None, wrt=None,
    **op_kwargs)``,
    with the keywords of :func:`compare` (``x`` is keyword-only; an unknown keyword is a
    ``TypeError`` that names it).

    Tolerance. ``max_ulp=None`` (the default) is the derived bound of a correct kernel of that
    op in actual's format (:func:`default_tolerance`): per element, the largest scaled error
    any correct kernel can make (two-pass, Welford or Chan-merged statistics accumulated in
    float32, or one pass in float64; a reciprocal square root within 2 ulp; the affine step in
    any order), plus, for layer_norm and rms_norm over enough rows, a test across rows for a
    scale error every row shares (:func:`lneps.testing.scale_bias`), which catches the d - 1
    variance and epsilon added after the square root where no per-element bound can.
    ``kernels=("two_pass",)`` (or other classes of :data:`lneps.testing.KERNEL_CLASSES`)
    narrows the bound to the classes your kernel belongs to: sharper, since a Welford kernel's
    merged mean may be off on a constant row, which a tiny epsilon amplifies. Pass
    ``max_ulp`` (a number, or one bound per element) to grade against another tolerance
    instead: then only that bound is applied. Whatever the bound, a NaN or infinity where the
    correctly rounded value is another number, or a finite value where it is NaN, fails.

    Cost. Output is graded in blocks of 2^18 elements, so the extra memory
    is a few tens of MB whatever the size. Layer norm and RMS norm in 16- and 32-bit formats
    are measured against the kernel's float64 estimate (see :mod:`lneps.testing`; the
    decisions stay exact); an element equal to its correctly rounded value, or within a
    per-row floor under the bound (``lneps.testing.bound_floor.bound_floor``), passes without
    its bound being computed; the test across rows reads every block up to 2^22 elements and
    1024 rows, and beyond that blocks spread evenly over the output to that size.

    The message shows the worst element (the one furthest beyond its bound): its index, its
    input row, the row's mean and 1/std, gamma and beta there, the exact, correctly rounded and
    actual values, its errors and their ratio to the bound, how many elements exceed, and a
    suspect where the pattern is known: the d - 1 variance, epsilon after the square root,
    epsilon missing (NaN on a constant row), statistics merged inexactly (a constant row's
    output far from beta). ``err_msg`` is appended.

    >>> import numpy as np, lneps, lneps.testing
    >>> x = np.random.default_rng(0).normal(size=(4, 64)).astype(np.float16)
    >>> y = lneps.layer_norm(x, eps=1e-5)  # correctly rounded: passes
    >>> lneps.testing.assert_close(y, x=x, eps=1e-5).correctly_rounded
    1.0
    >>> lneps.testing.assert_close(y, x)
    Traceback (most recent call last):
    ...
    TypeError: assert_close() takes the kernel's output as its only positional argument, ...
    """
    __tracebackhide__ = True
    if args:
        raise _call_error("assert_close", args)
    kwargs = dict(kwargs)
    max_ulp = kwargs.pop("max_ulp", None)
    metric = kwargs.pop("metric", "scaled")
    err_msg = kwargs.pop("err_msg", "")
    kernels = kwargs.pop("kernels", None)
    if kernels is not None and max_ulp is not None:
        raise TypeError("kernels= narrows the derived tolerance; it has no meaning with max_ulp=")
    if metric not in ("scaled", "ulp"):
        raise ValueError(f"metric must be 'scaled' or 'ulp'; got {metric!r}")
    if max_ulp is None and metric != "scaled":
        raise ValueError("the derived tolerance is in the scaled metric; pass max_ulp= with metric='ulp'")
    call = _parse("assert_close", actual, kwargs, _KEYWORDS + _ASSERT_KEYWORDS)
    given = None if max_ulp is None else _bound(max_ulp, call.a.shape)
    blocks = [None] if call.wrt is not None else _blocks(call, _BLOCK_ELEMENTS)
    summary, rows_stats = _Summary(), []
    tally = _Tally()
    pending, waiting = [], 0  # rows the floor did not clear: their bound is computed together
    tested = _tested_blocks(call, blocks)
    for k, rows in enumerate(blocks):
        gr = call if rows is None else _measure(call, rows, exact=False)
        err = gr.scaled if metric == "scaled" else gr.err
        test = None
        if given is None and gr.wrt is None and gr.name in ("layer_norm", "rms_norm") and k in tested:
            test = _row_statistics(gr)
            rows_stats.append(test)
        need = None
        if given is None and _floor_applies(gr, metric):
            bound, need = np.inf, _floored(gr, kernels, test)
        elif given is None:
            bound = _bound(_tolerance(gr, kernels), err.shape)
        else:
            bound = given if rows is None or not np.ndim(given) else given[rows]
        if getattr(gr, "delta", None) is not None and need is None:
            err, bound = _exact_near_bound(call, gr, err, bound, metric, given, kernels)
        over = _exceeding(gr.a64, gr.r, err, bound, finite=getattr(gr, "finite", False))
        summary.add(gr)
        if need is not None and need.size:
            over[need] = False  # graded with the other rows the floor left, below
            pending.append(_row_index(gr.rows, gr.a.shape[0])[need])
            waiting += need.size
        tally.add(gr, over, err, bound)
        if waiting and (waiting * gr.a[0].size >= _BLOCK_ELEMENTS or rows is blocks[-1]):
            _grade_pending(call, np.concatenate(pending), metric, kernels, tally)
            pending, waiting = [], 0
    over_count, worst = tally.count, tally.worst
    systematic = _decide(call, rows_stats) if rows_stats else None
    summary.exact(call)
    report = summary.report(call.name, call.dt, lambda: _arrays_of(call))
    if not over_count and (systematic is None or systematic.passed):
        return report
    if worst is None:  # only the test across rows failed: show the largest error of the block
        gr = _measure(call)
        err = gr.scaled if metric == "scaled" else gr.err
        bound = _bound(_tolerance(gr, kernels), err.shape)
        worst = (0.0, gr, err >= np.max(err), err, bound)
    _, gr, over, err, bound = worst
    if getattr(gr, "delta", None) is not None:  # the message shows exact values: measure the block so
        gr = _measure(call, gr.rows, exact=True)
        err = gr.scaled if metric == "scaled" else gr.err
        if given is None:
            bound = _bound(_tolerance(gr, kernels), err.shape)
        over = _exceeding(gr.a64, gr.r, err, bound, finite=gr.finite)
    raise AssertionError(_message(gr, over, err, bound, metric, max_ulp, systematic, err_msg, over_count,
                                  summary.n))


#: The test across rows reads at least this many elements, and this many rows, where the output
#: has them: blocks evenly spread over the output beyond that (a scale error every row shares
#: shows in any of them; the d - 1 variance and eps after the square root at d = 4096 show in
#: 64 rows, tests/book/test_kernel_zoo.py).
_TEST_ELEMENTS, _TEST_ROWS = 1 << 22, 1024


def _tested_blocks(call, blocks):
    """The indices of the blocks the test across rows reads: all of them, or as many, evenly
    spread, as cover :data:`_TEST_ELEMENTS` elements and :data:`_TEST_ROWS` rows."""
    n = len(blocks)
    if n <= 1 or blocks[0] is None:
        return set(range(n))
    rows_per_block = blocks[0].stop - (blocks[0].start or 0)
    per_row = call.a[0].size
    need = max(-(-_TEST_ELEMENTS // max(rows_per_block * per_row, 1)), -(-_TEST_ROWS // rows_per_block))
    if need >= n:
        return set(range(n))
    return set(int(i) for i in np.unique(np.round(np.linspace(0, n - 1, need))))


def _tolerance(gr, kernels):
    return default_tolerance(gr.op, x=gr.x, actual_dtype=gr.dt, gamma=gr.gamma, beta=gr.beta, eps=gr.call_eps,
                             axis=-1 if gr.axis is None else gr.axis, dy=gr.dy, wrt=gr.wrt, exact=gr.e,
                             stats=gr.stats, kernels=kernels)


def _floor_applies(gr, metric):
    """Whether :func:`_floored` may spare the bound on this block: layer_norm or
    rms_norm measured against the kernel's estimate, in the scaled metric with the op's own
    scale, each index of axis 0 normalized on its own, gain and bias finite and the same for
    every one."""
    a = gr.a
    if getattr(gr, "delta", None) is None or metric != "scaled" or gr.scale is not None or a.ndim < 2:
        return False
    if 0 in _axes(-1 if gr.axis is None else gr.axis, a.ndim):
        return False
    return all(p is None or ((p.ndim < a.ndim or p.shape[0] == 1) and bool(np.isfinite(p).all()))
               for p in (gr.gamma, gr.beta))


def _floored(gr, kernels, test=None):
    r"""The rows (indices into the block's axis 0) whose derived bound can matter: an element
    equal to its correctly rounded value, or within :math:`|\gamma| F` of the exact value
    (:func:`lneps.testing.bound_floor.bound_floor`, after the estimate's own distance), is within any
    correct kernel's bound; :func:`lneps.testing.forward_bound` is needed on the rows holding
    any other element, alone (:func:`_grade_pending`)."""
    from .bound_floor import bound_floor
    from .kernel_classes import KERNEL_CLASSES

    kernels = KERNEL_CLASSES if kernels is None else kernels
    a, ax = gr.a, -1 if gr.axis is None else gr.axis
    abs_stats = None
    if test is not None and gr.op == "layer_norm" and a.ndim == 2 and ax in (-1, 1):  # rows as the test's
        abs_stats = (test.rows["M"], test.rows["X"])
    floor = bound_floor(gr.op, x=gr.x, gamma=gr.gamma, beta=gr.beta, eps=gr.call_eps, dtype=gr.dt, axis=ax,
                        exact=gr.e, stats=gr.stats, kernels=kernels, abs_stats=abs_stats)
    lim = floor * gr.s  # gr.s: |gamma| placed as the op applies it (1 without a gain)
    with np.errstate(invalid="ignore"):
        bad = gr.diff > lim - gr.delta  # lim is finite: the floor is, and so is gamma (_floor_applies)
    bad &= gr.a64 != gr.r
    if bad.any():
        # The output's rounding: the bound's E is at least |gamma| F + min(ulp(|e|)/2, 2 |gamma| F)
        # (its last term, max(lower, t) in kernel_classes._finish, is at least t). A 16-bit kernel's
        # elements that are not correctly rounded are rare and about half an ulp off: most pass here.
        I = np.nonzero(bad)
        lim_i = np.broadcast_to(lim, a.shape)[I]
        half = ulp(gr.e[I], gr.dt)
        half *= 0.5
        lim_i = lim_i + np.fmin(half, 2 * lim_i)
        with np.errstate(invalid="ignore"):
            bad[I] = ~((gr.diff[I] + np.broadcast_to(gr.delta, a.shape)[I]) <= lim_i * (1 - 2.0**-40))
    return np.flatnonzero(bad.reshape(a.shape[0], -1).any(axis=1))


def _grade_pending(call, idx, metric, kernels, tally):
    """The rows ``idx`` (of the whole output) that the floor left: measured again (a few rows),
    graded against the derived bound, computed for all of them at once."""
    gr = _measure(call, idx, exact=False)
    err = gr.scaled if metric == "scaled" else gr.err
    bound = _bound(_tolerance(gr, kernels), err.shape)
    if getattr(gr, "delta", None) is not None:
        err, bound = _exact_near_bound(call, gr, err, bound, metric, None, kernels)
    tally.add(gr, _exceeding(gr.a64, gr.r, err, bound, finite=getattr(gr, "finite", False)), err, bound)


class _Tally:
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


def _exact_near_bound(call, gr, err, bound, metric, given, kernels):
    """A block measured against the kernel's estimate (``gr.delta``: how far each e may be from
    the exact value): the rows holding an element whose error lies within that distance of its
    bound (with 2^-20 of the bound for the bound's own dependence on e) are measured exactly,
    and their errors and bounds replace the estimated ones in place. Returns ``(err, bound)``."""
    base = gr.e if metric == "ulp" else np.fmax(np.abs(gr.e), gr.s)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        window = gr.delta / ulp(base, gr.dt)
        window = window + np.multiply(bound, 2.0**-20)
        near = np.abs(err - bound) <= window
        near &= np.isfinite(bound)  # an infinite bound (no bound for the row) has no edge to be near
    if not near.any():
        return err, bound
    a = gr.a
    if a.ndim < 2:
        idx = None
    else:
        idx = np.flatnonzero(near.reshape(a.shape[0], -1).any(axis=1))
    ex = _measure(call, gr.rows if idx is None else _row_index(gr.rows, a.shape[0])[idx], exact=True)
    sel = slice(None) if idx is None else idx
    for name in ("e", "r", "diff", "err", "scaled"):
        getattr(gr, name)[sel] = getattr(ex, name)
    gr.delta[sel] = 0.0
    bound = np.array(bound, dtype=np.float64) if np.ndim(bound) else bound
    if np.ndim(bound):
        bound[sel] = _bound(_tolerance(ex, kernels), ex.a.shape) if given is None else given[ex.rows]
    return (gr.scaled if metric == "scaled" else gr.err), bound


def _arrays_of(call):
    gr = call if call.wrt is not None else _measure(call)
    return gr.a64, gr.e, gr.r, gr.err, gr.scaled


def _row_statistics(gr):
    """The test across rows on one block: a :class:`lneps.testing.ScaleTest`."""
    from .systematic import ScaleTest

    test = ScaleTest(gr.name, x=gr.x, gamma=gr.gamma, beta=gr.beta, eps=gr.call_eps,
                     axis=-1 if gr.axis is None else gr.axis, dtype=gr.dt, exact=gr.e, stats=gr.stats, actual=gr.a64,
                     block=max(gr.a.size, 1))
    test._P = test._w = None  # only the per-row numbers are combined: keep no block's arrays
    return test


def _decide(call, tests):
    from .systematic import combine

    return combine(tests)
