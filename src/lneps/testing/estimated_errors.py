"""A kernel's output measured against the kernel's float64 estimate of each exact value, a
fraction of the cost of the correctly rounded float64 value, with every element that estimate
could misjudge measured exactly instead: how :func:`lneps.testing.assert_close` grades large
outputs (:func:`_measure` with ``exact=False``).
"""

from __future__ import annotations

import numpy as np

from ..formats import format_of, to_format
from ..kernel.rounding import FAST_FORMATS, near_boundary
from ._arrays import _axes
from .arguments import _Graded
from .exact_errors import _errors, _measure_exact, _row_index, _scale

_U = format_of(np.float64).u  # the estimate is float64


def _measure(call, rows=slice(None), exact=True):
    """The exact and correctly rounded values and the errors of ``call``'s output on the slice
    ``rows`` of axis 0 (all of it by default): a :class:`_Graded` for that slice.

    ``exact=False`` (assert_close's blocks): layer_norm and rms_norm of float16, bfloat16 or
    float32 input, graded in one of those formats, are measured against the kernel's float64
    estimate (:func:`_estimated`) rather than the correctly rounded float64 value: e within
    about :math:`2^{-40}` relative, r still exact. ``gr.delta`` then bounds each element's
    distance to the exact value (0 where it is exact)."""
    xa, a = call.x[rows], call.a[rows]
    if not exact and getattr(call.f, "estimate", None) is not None and xa.dtype in FAST_FORMATS \
            and call.dt in FAST_FORMATS and xa.size:
        return _estimated(call, rows, xa, a)
    return _measure_exact(call, rows, xa, a)


def _estimated(call, rows, xa, a):
    r""":func:`_measure` against the kernel's float64 estimate :math:`\hat e` of each exact
    value (:func:`lneps.norms._with_estimate`), within
    :math:`\delta = 2(E|\hat e - \beta| + u|\hat e|)` of it. The correctly rounded r is the
    kernel's own result when actual has x's format, and otherwise :math:`\hat e` rounded where
    no rounding boundary of actual's format lies within δ. The rows holding an element whose r
    or ulp that distance could change (a boundary within δ, a power of two within δ, or no
    estimate: a gain beyond :math:`2^{\pm 600}`, or a row holding inf or NaN) are measured
    exactly instead, and get δ = 0."""
    dt = call.dt
    with np.errstate(over="ignore", invalid="ignore"):
        y, e, mean, rstd, E = call.f.estimate(xa)
        if e.shape != a.shape:  # the exact path says what is wrong
            return _measure_exact(call, rows)
        # delta per normalized slice: 2 (E |e - beta| + u |e|) at its largest
        axes = _axes(-1 if call.axis is None else call.axis, a.ndim)
        emax = np.max(np.abs(e), axis=axes, keepdims=True, initial=0.0)
        delta = emax * (2 * (E + _U))
        if call.beta is not None:
            delta += (2 * E) * float(np.max(np.abs(call.beta), initial=0.0))
        delta += 2.0**-1060
        # NaN where the estimate has no bound (an extreme gain, a row holding inf or NaN): emax shows it
        undecided = np.zeros(a.shape, dtype=bool) if np.isfinite(emax).all() else ~np.isfinite(e)
        if dt == xa.dtype:
            rd = y
        else:
            undecided |= near_boundary(e, dt, delta=delta)
            rd = to_format(e, dt)
        r = rd.astype(np.float64)
        # ulp(e) differs from ulp(e^) only if a power of two lies between them: r is one, and e^ is
        # within delta of it (read off r's bits in its own format: the fraction field is 0)
        fraction = (1 << (format_of(dt).p - 1)) - 1  # the fraction field's bits
        pow2 = (rd.view(f"u{dt.itemsize}") & fraction) == 0
        if pow2.any():
            P = np.nonzero(pow2)
            undecided[P] |= np.abs(np.abs(e[P]) - np.abs(r[P])) <= np.broadcast_to(delta, a.shape)[P]
    stats = (rstd,) if mean is None else (mean, rstd)
    if undecided.any():
        if a.ndim < 2 or 0 in _axes(-1 if call.axis is None else call.axis, a.ndim):
            return _measure_exact(call, rows)
        redo = np.flatnonzero(undecided.reshape(a.shape[0], -1).any(axis=1))
        ex = _measure_exact(call, _row_index(rows, a.shape[0])[redo])
        e[redo], r[redo] = ex.e, ex.r
        delta = np.array(np.broadcast_to(delta, (a.shape[0],) + delta.shape[1:]))
        delta[redo] = 0.0
    s = _scale(call.scale, call.gamma, call.op, call.axis, a.shape)
    a64 = a.astype(np.float64)
    # every r is finite when every |e| is below the format's largest number (ties round down to it)
    r_finite = bool(np.max(emax, initial=0.0) <= format_of(dt).largest)
    diff, err, scaled, finite = _errors(a64, e, r, s, dt, r_finite=r_finite)
    return _Graded(**{**call.__dict__, "a": a, "a64": a64, "e": e, "r": r, "uncertain": np.zeros((), dtype=bool),
                      "diff": diff, "err": err, "scaled": scaled, "x": xa, "stats": stats, "rows": rows,
                      "delta": delta, "s": s, "finite": finite})
