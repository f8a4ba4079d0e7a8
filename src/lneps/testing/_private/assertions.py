"""assert_close: a kernel's output graded against lneps with a derived tolerance, block by block,
with the test across rows for a scale error every row shares. The failure message is
failure_message's, the per-row floor and the deferred exact grading deferred_bound's."""

from __future__ import annotations

import functools
import warnings

import numpy as np

from .arguments import DEFAULT, WRT, keyword_call, own_keywords
from .deferred_bound import exact_near_bound, floor_applies, floored, grade_pending, Tally
from .exact_errors import measure
from .exact_errors import blocks_of, row_index
from .failure_message import failure_text
from .grading import read_call
from .kernel_classes import check_kernels
from .grade_report import as_bound, over_bound, Summary

# Rows per block when grading large layer_norm / rms_norm outputs: the per-element arrays of a
# block (errors, bound) stay a few MB whatever the input, as torch.testing's own temporaries do.
_BLOCK_ELEMENTS = 1 << 18


def default_tolerance(
    op,
    *,
    x,
    actual_dtype,
    gamma=None,
    beta=None,
    eps,
    axis=-1,
    dy=None,
    wrt=None,
    exact=None,
    stats=None,
    kernels=None,
    probabilistic=False,
):
    """The per-element bound, in the scaled metric, that every correct kernel of ``op`` with
    output format ``actual_dtype`` meets: :func:`lneps.testing.forward_bound` for the forward
    ops, :func:`lneps.testing.backward_bound` for the backward ones. ``ValueError`` for an op
    with no derived bound (group_norm, batch_norm, a callable): pass ``max_ulp=`` there.
    ``kernels`` narrows the forward bound to some classes of
    :data:`lneps.testing.KERNEL_CLASSES` (default: all of them). ``probabilistic=True``: the
    forward bound of Higham and Mary's probabilistic analysis (:func:`forward_bound`), for
    layer_norm and rms_norm only (``ValueError`` for another op)."""
    if probabilistic and op not in ("layer_norm", "rms_norm"):
        raise ValueError(
            f"probabilistic=True is a bound for layer_norm and rms_norm; op is {op!r}"
        )
    if op in ("layer_norm", "rms_norm"):
        from .forward_error import forward_bound
        from .kernel_classes import KERNEL_CLASSES

        return forward_bound(
            op,
            x=x,
            gamma=gamma,
            beta=beta,
            eps=eps,
            dtype=actual_dtype,
            axis=axis,
            exact=exact,
            stats=stats,
            kernels=KERNEL_CLASSES if kernels is None else kernels,
            probabilistic=probabilistic,
        )
    if op in WRT:
        from .backward_error import backward_bound

        return backward_bound(
            op.removesuffix("_backward"),
            wrt,
            x=x,
            dy=dy,
            gamma=gamma,
            eps=eps,
            dtype=actual_dtype,
            axis=axis,
            kernels=kernels,
        )
    name = op if isinstance(op, str) else getattr(op, "__name__", "a callable op")
    raise ValueError(
        f"no derived tolerance for {name}: pass max_ulp= (a number, or one bound per element)"
    )


@keyword_call
def assert_close(
    actual,
    /,
    *,
    x,
    eps,
    op="layer_norm",
    gamma=None,
    beta=None,
    max_ulp=None,
    kernels=None,
    metric="scaled",
    err_msg="",
    axis=DEFAULT,
    scale=None,
    dy=None,
    wrt=None,
    dtype=None,
    strict_dtype=False,
    probabilistic=False,
    **op_kwargs,
):
    r"""Raise ``AssertionError`` unless ``actual``, a kernel's output, is as close to lneps as a
    correct kernel is; return the :class:`Report` otherwise.

    The keywords of :func:`compare` (``x`` is keyword-only; an unknown keyword is a
    ``TypeError`` that names it), and the tolerance's. ``op``, ``wrt``, ``kernels`` and
    ``metric`` are checked before any array is read.

    Format. ``dtype=`` states the output format the kernel must store: an ``AssertionError``
    where actual has another (a kernel that stores float16 for float32, or forgets its last
    cast). Without it, an output whose format differs from x's gets a ``UserWarning`` naming
    both (an error, ``AssertionError``, with ``strict_dtype=True``): the output is graded in its
    own format, so a float32 kernel that stores float16 would pass as a float16 kernel.

    Tolerance. ``max_ulp=None`` (the default) is the derived bound of a correct kernel of that
    op in actual's format (:func:`default_tolerance`): per element, the largest scaled error
    any correct kernel can make (two-pass, Welford or Chan-merged statistics accumulated in
    float32, or one pass in float64; a reciprocal square root within 2 ulp of the correctly
    rounded one, 2.5 ulp of the exact value; the affine step in
    any order), plus, for layer_norm and rms_norm over enough rows, a test across rows for a
    scale error every row shares (:func:`lneps.testing.scale_bias`), which catches the d - 1
    variance and epsilon added after the square root where no per-element bound can.
    ``kernels=("two_pass",)`` (or other classes of :data:`lneps.testing.KERNEL_CLASSES`)
    narrows the bound to the classes your kernel belongs to: sharper, since a Welford kernel's
    merged mean may be off on a constant row, which a tiny epsilon amplifies. Pass
    ``max_ulp`` (a number, or one bound per element) to grade against another tolerance
    instead: then only that bound is applied. Whatever the bound, a NaN or infinity where the
    correctly rounded value is another number, or a finite value where it is NaN, fails.

    ``probabilistic=True`` (layer_norm and rms_norm, derived tolerance only) replaces the
    worst case of the sums' rounding errors by Higham and Mary's probabilistic bound
    (:func:`lneps.testing.forward_bound`): about :math:`\lambda\sqrt d\,u` for :math:`d u`,
    sharp enough in float16 and bfloat16 at d = 4096 to see the d - 1 variance per element,
    which the worst case cannot. It assumes the rounding errors of each sum are independent
    with mean zero; under that model a correct kernel fails it with probability at most
    :math:`2^{-39}` per row, rows :math:`\times 2^{-39}` per call. Rows that break the
    model (near-constant rows, large offsets: rounding errors of one sign) can fail a correct
    kernel: the appendix "How the tolerance is derived and checked" measures the zoo under it.

    Cost. Output is graded in blocks of 2^18 elements, so the extra memory
    is a few tens of MB whatever the size. Layer norm and RMS norm in 16- and 32-bit formats
    are measured against the kernel's float64 estimate (see :mod:`lneps.testing`; the
    decisions stay exact); an element equal to its correctly rounded value, or within a
    per-row floor under the bound (``lneps.testing._private.deferred_bound.bound_floor``), passes without
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
    if kernels is not None and max_ulp is not None:
        raise TypeError("kernels= narrows the derived tolerance; it has no meaning with max_ulp=")
    if kernels is not None:
        check_kernels(kernels)
    if not isinstance(probabilistic, (bool, np.bool_)):
        raise TypeError(f"probabilistic must be True or False; got {probabilistic!r}")
    if probabilistic and max_ulp is not None:
        raise TypeError(
            "probabilistic= sharpens the derived tolerance; it has no meaning with max_ulp="
        )
    if probabilistic and op not in ("layer_norm", "rms_norm"):
        raise ValueError(
            f"probabilistic=True is a bound for layer_norm and rms_norm; op is {op!r}"
        )
    probabilistic = bool(probabilistic)
    if metric not in ("scaled", "ulp"):
        raise ValueError(f"metric must be 'scaled' or 'ulp'; got {metric!r}")
    if max_ulp is None and metric != "scaled":
        raise ValueError(
            "the derived tolerance is in the scaled metric; pass max_ulp= with metric='ulp'"
        )
    call = read_call(
        "assert_close",
        actual,
        x=x,
        eps=eps,
        op=op,
        gamma=gamma,
        beta=beta,
        axis=axis,
        scale=scale,
        dy=dy,
        wrt=wrt,
        dtype=dtype,
        op_kwargs=op_kwargs,
        own=own_keywords(assert_close),
    )
    _check_format(call, strict_dtype)
    # the blocks' float64 arrays reuse these buffers (exact_errors.scratch): nothing of a block
    # is read after the next one is measured (a failure's worst block is measured again)
    call.workspace = {}
    given = None if max_ulp is None else as_bound(max_ulp, call.a.shape)
    blocks = [None] if call.wrt is not None else blocks_of(call, _BLOCK_ELEMENTS)
    summary, rows_stats = Summary(), []
    tally = Tally()
    # a measured block's derived bound
    tolerance = functools.partial(_tolerance, kernels=kernels, probabilistic=probabilistic)
    pending, waiting = [], 0  # rows the floor did not clear: their bound is computed together
    tested = _tested_blocks(call, blocks)
    for k, rows in enumerate(blocks):
        gr = call if rows is None else measure(call, rows, exact=False)
        err = gr.scaled if metric == "scaled" else gr.err
        test = None
        if (
            given is None
            and gr.wrt is None
            and gr.name in ("layer_norm", "rms_norm")
            and k in tested
        ):
            test = _row_statistics(gr, kernels)
            rows_stats.append(test)
        need = None
        if given is None and floor_applies(gr, metric):
            bound, need = np.inf, floored(gr, kernels, test, probabilistic)
        elif given is None:
            bound = as_bound(tolerance(gr), err.shape)
        else:
            bound = given if rows is None or not np.ndim(given) else given[rows]
        if getattr(gr, "delta", None) is not None and need is None:
            err, bound = exact_near_bound(call, gr, err, bound, metric, given, tolerance)
        finite = getattr(gr, "finite", False)
        if finite and need is not None:  # every element finite, none over an infinite bound
            over = np.zeros(err.shape, dtype=bool)
        else:
            over = over_bound(gr.a64, gr.r, err, bound, finite=finite)
        summary.add(gr)
        if need is not None and need.size:
            over[need] = False  # graded with the other rows the floor left, below
            pending.append(row_index(gr.rows, gr.a.shape[0])[need])
            waiting += need.size
        tally.add(gr, over, err, bound)
        if waiting and (waiting * gr.a[0].size >= _BLOCK_ELEMENTS or rows is blocks[-1]):
            grade_pending(call, np.concatenate(pending), metric, tolerance, tally)
            pending, waiting = [], 0
    over_count, worst = tally.count, tally.worst
    systematic = _decide(call, rows_stats) if rows_stats else None
    summary.exact(call)
    checked = "max_ulp" if given is not None else (
        "derived bound, probabilistic (Higham and Mary, 2^-39 per row)"
        if probabilistic
        else "derived bound"
    )
    report = summary.report(
        call.name, call.dt, lambda: _arrays_of(call), scale_test=systematic, checked=checked
    )
    if not over_count and (systematic is None or systematic.passed):
        return report
    if worst is None:  # only the test across rows failed: show the largest error of the block
        gr = measure(call)
        err = gr.scaled if metric == "scaled" else gr.err
        bound = as_bound(tolerance(gr), err.shape)
        worst = (0.0, gr, err >= np.max(err), err, bound)
    _, gr, over, err, bound = worst
    if (
        getattr(gr, "delta", None) is not None
    ):  # the message shows exact values: measure the block so
        gr = measure(call, gr.rows, exact=True)
        err = gr.scaled if metric == "scaled" else gr.err
        if given is None:
            bound = as_bound(tolerance(gr), err.shape)
        over = over_bound(gr.a64, gr.r, err, bound, finite=gr.finite)
    raise AssertionError(
        failure_text(
            gr, over, err, bound, metric, max_ulp, systematic, err_msg, over_count, summary.n
        )
    )


def _check_format(call, strict):
    """The output format against the one asked for (``dtype=``), or, without it, against x's."""
    __tracebackhide__ = True
    if call.dtype_given is not None:
        if call.dt != call.dtype_given:
            raise AssertionError(
                f"The kernel's output is {call.dt}, and dtype={call.dtype_given} was asked for: "
                f"it stores its result in another format (a missing or extra cast)"
            )
        return
    if call.dt == call.x.dtype:
        return
    text = (
        f"the kernel's output is {call.dt} and its input x is {call.x_dtype}: graded as a {call.dt} output "
        f"(a kernel that should store {call.x_dtype} would pass as a {call.dt} one); pass "
        f"dtype={call.dt.name} to state the format"
    )
    if call.x_dtype == np.float64 and call.dt != np.float64:
        text += (
            " (x holds numbers that are not all "
            + call.dt.name
            + ", so it is graded as a float64 input: "
            "the bound then assumes float64 accumulation; pass x in the format the kernel read)"
        )
    if strict:
        raise AssertionError(text[0].upper() + text[1:])
    warnings.warn(text, UserWarning, stacklevel=4)  # the caller of assert_close


#: The test across rows reads at least this many elements, and this many rows, where the output
#: has them: blocks evenly spread over the output beyond that (a scale error every row shares
#: shows in any of them; the d - 1 variance and eps after the square root at d = 4096 show in
#: 64 rows, tests/book/test_zoo_grades.py).
_TEST_ELEMENTS, _TEST_ROWS = 1 << 22, 1024


def _tested_blocks(call, blocks):
    """The indices of the blocks the test across rows reads: all of them, or as many, evenly
    spread, as cover :data:`_TEST_ELEMENTS` elements and :data:`_TEST_ROWS` rows."""
    n = len(blocks)
    if n <= 1 or blocks[0] is None:
        return set(range(n))
    rows_per_block = blocks[0].stop - (blocks[0].start or 0)
    per_row = call.a[0].size
    need = max(
        -(-_TEST_ELEMENTS // max(rows_per_block * per_row, 1)), -(-_TEST_ROWS // rows_per_block)
    )
    if need >= n:
        return set(range(n))
    return set(int(i) for i in np.unique(np.round(np.linspace(0, n - 1, need))))


# A measured block's derived bound. It stays beside default_tolerance: deferred_bound is handed it
# (its tolerance=) rather than importing it, so that module does not import this one.
def _tolerance(gr, kernels, probabilistic=False):
    return default_tolerance(
        gr.op,
        x=gr.x,
        actual_dtype=gr.dt,
        gamma=gr.gamma,
        beta=gr.beta,
        eps=gr.call_eps,
        axis=-1 if gr.axis is None else gr.axis,
        dy=gr.dy,
        wrt=gr.wrt,
        exact=gr.e,
        stats=gr.stats,
        kernels=kernels,
        probabilistic=probabilistic,
    )


def _arrays_of(call):
    gr = call if call.wrt is not None else measure(call)
    return gr.a64, gr.e, gr.r, gr.err, gr.scaled


def _row_statistics(gr, kernels=None):
    """The test across rows on one block: a :class:`lneps.testing.ScaleTest`."""
    from .systematic import ScaleTest

    test = ScaleTest(
        gr.name,
        x=gr.x,
        gamma=gr.gamma,
        beta=gr.beta,
        eps=gr.call_eps,
        axis=-1 if gr.axis is None else gr.axis,
        dtype=gr.dt,
        exact=gr.e,
        stats=gr.stats,
        actual=gr.a64,
        block=1 << 16,  # temporaries of a few hundred kB, which the allocator keeps for the next
        kernels=kernels,
    )
    test._P = test._w = None  # only the per-row numbers are combined: keep no block's arrays
    return test


def _decide(call, tests):
    from .systematic import combine

    return combine(tests)
