""":func:`lneps.testing.compare`: a call read (:mod:`.arguments`), the kernel's output measured
exactly (:mod:`.exact_errors`), and the :class:`Report` (:mod:`.grade_report`).
"""

from __future__ import annotations

from .arguments import (
    DEFAULT,
    Graded,
    as_numpy,
    check_keywords,
    check_op,
    dtype_of,
    input_in_output_format,
    keyword_call,
    op_caller,
    output_array,
    own_keywords,
)
from .exact_errors import grade_backward, measure_exact
from .grade_report import Report, make_report


def read_call(
    fname, actual, *, x, eps, op, gamma, beta, axis, scale, dy, wrt, dtype, op_kwargs, own
):
    """Read the call: the arrays, the op as a function of x, and what the message and the default
    tolerance need. ``op``, ``wrt`` and the keywords are checked before any array is read. The
    backward ops are measured here, whole (their sums run across rows). ``dtype``: the output
    format asked for, or None; the :class:`Graded` keeps it as ``dtype_given`` and actual's own
    as ``dt`` (the caller decides what a difference means)."""
    check_op(op, wrt, dy, fname)
    kw = check_keywords(fname, op, dict(op_kwargs), own)
    want = None if dtype is None else dtype_of(dtype)
    a = output_array(actual, x, want, fname)
    dt = a.dtype
    x_given = as_numpy(x, "x")
    xa = input_in_output_format(x_given, dt)
    g = None if gamma is None else as_numpy(gamma, "gamma")
    b = None if beta is None else as_numpy(beta, "beta")
    kw = {
        k: as_numpy(v, k) if type(v).__module__.startswith(("torch", "jax")) else v
        for k, v in kw.items()
    }
    if isinstance(op, str) and op in ("layer_norm_backward", "rms_norm_backward"):
        gr = grade_backward(op, wrt, a, xa, as_numpy(dy, "dy"), g, b, eps, axis, scale, dt)
    else:
        f, ax, name = op_caller(op, xa, g, b, eps, axis, kw)
        gr = Graded(
            name=name,
            op=op,
            a=a,
            x=xa,
            gamma=g,
            beta=b,
            eps=eps,
            axis=ax,
            kw=kw,
            f=f,
            scale=scale,
            dt=dt,
            call_eps=None if eps is DEFAULT else eps,
            wrt=None,
            dy=None,
            rows=None,
        )
    gr.dtype_given, gr.x_dtype, gr.axis_given = want, x_given.dtype, axis is not DEFAULT
    return gr


@keyword_call
def compare(
    actual,
    /,
    *,
    x,
    eps,
    op="layer_norm",
    gamma=None,
    beta=None,
    axis=DEFAULT,
    scale=None,
    dy=None,
    wrt=None,
    dtype=None,
    **op_kwargs,
) -> Report:
    """Measure ``actual``, a kernel's output, against lneps: a :class:`Report`.

    ``actual`` is the only positional argument; a second one is a ``TypeError`` that asks for
    ``x=`` (lneps computes the expected values itself), and so is an unknown keyword, named.
    The output format is actual's dtype; ``dtype=`` (a NumPy, ml_dtypes or torch dtype, or
    its name) states the format the kernel must store, and a ``ValueError`` names the two
    where actual has another. A Python list or number has no format: a ``TypeError`` unless
    ``dtype=`` gives one. A float64 ``x`` whose values are all numbers of the output format
    (``x.double()``, a common habit) is graded as input in that format, the kernel's own.

    ``op`` is one of :data:`OPS` or a callable ``f(x, gamma, beta, eps=..., axis=...,
    **op_kwargs)`` returning its result correctly rounded in x's format, called on NumPy
    arrays. ``op_kwargs`` are the op's own keywords (``num_groups`` for group_norm,
    ``training``, ``running_mean``, ``running_var`` for batch_norm). ``eps`` is required:
    the epsilon the kernel used, or :data:`DEFAULT` for the op's own default. The backward
    ops grade one gradient: ``op="layer_norm_backward"`` or ``"rms_norm_backward"``, with
    ``dy=`` the upstream gradient and ``wrt=`` ``"x"``, ``"gamma"`` or ``"beta"``; their
    scaled metric is in ulp of the size of the terms that cancel
    (:func:`lneps.testing.backward_scale`). Each of ``actual``, ``x``, ``gamma``, ``beta``,
    ``dy`` and ``scale`` may be a NumPy, PyTorch (any device) or JAX array, a DLPack or
    ``__array__`` object, or Python numbers. ``ValueError`` for an unknown op or a shape
    mismatch.

    >>> import numpy as np, lneps, lneps.testing
    >>> x = np.array([[1.0, 2.0, 4.0]], dtype=np.float16)
    >>> naive = ((x - x.mean()) / np.sqrt(x.var() + np.float16(1e-5))).astype(np.float16)
    >>> report = lneps.testing.compare(naive, x=x, eps=1e-5)
    >>> report.n, report.correctly_rounded < 1
    (3, True)
    """
    __tracebackhide__ = True
    gr = read_call(
        "compare",
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
        own=own_keywords(compare),
    )
    if gr.dtype_given is not None and gr.dt != gr.dtype_given:
        raise ValueError(f"compare(): actual is {gr.dt}, and dtype={gr.dtype_given} was asked for")
    if gr.wrt is None:
        gr = measure_exact(gr)
    return make_report(gr.name, gr.a64, gr.e, gr.r, gr.uncertain, gr.err, gr.scaled, gr.diff, gr.dt)
