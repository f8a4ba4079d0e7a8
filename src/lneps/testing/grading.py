""":func:`lneps.testing.compare`: a call read (:mod:`lneps.testing.arguments`), the kernel's
output measured exactly (:mod:`lneps.testing.exact_errors`), and the :class:`Report`
(:mod:`lneps.testing.report`).
"""

from __future__ import annotations

from ._arrays import _as_numpy
from .arguments import _KEYWORDS, _MISSING, DEFAULT, WRT, _call_error, _caller, _check_keywords, _Graded
from .exact_errors import _grade_backward, _measure_exact
from .report import Report, _report


def _grade(fname, actual, kwargs, own):
    """Read the call and measure the whole output (:func:`_parse`, then :func:`_measure_exact`)."""
    call = _parse(fname, actual, kwargs, own)
    return call if call.wrt is not None else _measure_exact(call)


def _parse(fname, actual, kwargs, own):
    """Read the call: the arrays, the op as a function of x, and what the message and the default
    tolerance need. The backward ops are measured here, whole (their sums run across rows)."""
    op = kwargs.pop("op", "layer_norm")
    x = kwargs.pop("x", _MISSING)
    eps = kwargs.pop("eps", _MISSING)
    gamma, beta = kwargs.pop("gamma", None), kwargs.pop("beta", None)
    axis, scale = kwargs.pop("axis", DEFAULT), kwargs.pop("scale", None)
    dy, wrt = kwargs.pop("dy", None), kwargs.pop("wrt", None)
    kw = _check_keywords(fname, op, kwargs, own)
    if x is _MISSING:
        raise TypeError(f"{fname}() needs the kernel's input: {fname}(actual, x=x, eps=...)")
    if eps is _MISSING:
        raise TypeError(f"{fname}() needs eps=, the epsilon the kernel used (or eps=lneps.testing.DEFAULT "
                        f"for the op's own default)")
    a = _as_numpy(actual, "actual")
    xa = _as_numpy(x, "x")
    g = None if gamma is None else _as_numpy(gamma, "gamma")
    b = None if beta is None else _as_numpy(beta, "beta")
    kw = {k: _as_numpy(v, k) if type(v).__module__.startswith(("torch", "jax")) else v for k, v in kw.items()}
    dt = a.dtype
    if isinstance(op, str) and op in WRT:
        if dy is None:
            raise TypeError(f"{fname}(op={op!r}) needs dy=, the upstream gradient")
        if wrt not in WRT[op]:
            raise ValueError(f"wrt must be one of {', '.join(map(repr, WRT[op]))} for {op}; got {wrt!r}")
        return _grade_backward(op, wrt, a, xa, _as_numpy(dy, "dy"), g, b, eps, axis, scale, dt)
    for v, name in ((dy, "dy"), (wrt, "wrt")):
        if v is not None:
            raise TypeError(f"{name}= is for the backward ops (layer_norm_backward, rms_norm_backward); op is {op!r}")
    f, ax, name = _caller(op, xa, g, b, eps, axis, kw)
    return _Graded(name=name, op=op, a=a, x=xa, gamma=g, beta=b, eps=eps, axis=ax, kw=kw, f=f, scale=scale,
                   dt=dt, call_eps=None if eps is DEFAULT else eps, wrt=None, dy=None, rows=None)


def compare(actual, *args, **kwargs) -> Report:
    """Measure ``actual``, a kernel's output, against lneps: a :class:`Report`.

    ``compare(actual, *, x, eps, op="layer_norm", gamma=None, beta=None, axis=DEFAULT,
    scale=None, dy=None, wrt=None, **op_kwargs)``. ``actual`` is the only positional
    argument; a second one is a ``TypeError`` that asks for ``x=`` (lneps computes the
    expected values itself), and so is an unknown keyword, named. The output format is
    actual's dtype.

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
    if args:
        raise _call_error("compare", args)
    gr = _grade("compare", actual, dict(kwargs), _KEYWORDS)
    return _report(gr.name, gr.a64, gr.e, gr.r, gr.uncertain, gr.err, gr.scaled, gr.diff, gr.dt)
