"""A kernel's output measured exactly against lneps: the exact values e (the op's correctly
rounded float64 result), the correctly rounded values r in the output format, and each
element's ulp and scaled errors (conventions: :mod:`lneps.testing`), for the forward ops
(:func:`measure_exact`) and for one gradient of a backward op (:func:`grade_backward`).
"""

from __future__ import annotations

import numpy as np

from ...formats import format_of, to_format, ulp
from ...kernel.rounding import FAST_FORMATS, near_boundary
from ...oracle import round_float64
from .arguments import as_numpy, reduced_axes
from .arguments import DEFAULT, Graded
from .kernel_classes import Fmt


def _is_midpoint(e, dt):
    """Where the float64 value e lies exactly halfway between two numbers of ``dt``."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.isfinite(e) & (np.abs(e) / ulp(e, dt) % 1 == 0.5)


def _reference(e, redo, x, dt):
    """``(r, uncertain)``: the correctly rounded values in ``dt`` from e, the correctly rounded
    float64 values. Rounding e once more is exact except where e itself is a midpoint of dt
    (the exact value may lie on either side of it): those elements are recomputed by ``redo``
    on x stored in dt, when x's values fit dt, and are ``uncertain`` otherwise."""
    if dt == np.float64:
        return e, np.zeros(e.shape, dtype=bool)
    r = round_float64(e, dt)
    mid = _is_midpoint(e, dt)
    if not mid.any():
        return r, mid
    xd = x.astype(dt)
    if not np.array_equal(xd.astype(np.float64), x.astype(np.float64), equal_nan=True):
        return r, mid
    exact = as_numpy(redo(xd), "the op's result")
    exact = (
        exact.astype(np.float64)
        if exact.dtype == dt
        else round_float64(exact.astype(np.float64), dt)
    )
    return np.where(mid, exact, r), np.zeros(e.shape, dtype=bool)


def _scale(scale, g, op, axis, shape):
    if scale is not None:
        s = as_numpy(scale, "scale").astype(np.float64)
        if not np.all(np.isfinite(s) & (s >= 0)):
            raise ValueError("scale must be finite and >= 0")
    elif g is None:
        return 1.0
    else:
        s, nd = np.abs(g.astype(np.float64)), len(shape)
        axes = (1,) if op == "group_norm" else reduced_axes(-1 if axis is None else axis, nd)
        if op == "batch_norm":
            axes = tuple(a for a in range(nd) if a not in axes)
        if s.ndim and s.shape == tuple(shape[a] for a in axes):  # placed as the op applies gamma
            s = s.reshape([shape[a] if a in axes else 1 for a in range(nd)])
    try:
        return np.broadcast_to(s, shape)
    except ValueError:
        raise ValueError(
            f"{'scale' if scale is not None else '|gamma|'} of shape {s.shape} does not "
            f"broadcast to actual's shape {shape}; pass scale="
        ) from None


def _compact(s):
    """A scale broadcast to the output's shape (np.broadcast_to), as the array it was made from:
    length 1 along each axis it repeats along."""
    if np.ndim(s) == 0:
        return s
    return s[tuple(slice(0, 1) if st == 0 else slice(None) for st in s.strides)]


def scratch(workspace, name, shape, dtype=np.float64):
    """An uninitialized array of ``shape``: a view of the buffer ``name`` of ``workspace`` (a
    dict that one :func:`lneps.testing.assert_close` call keeps across its blocks, grown as
    needed), or a new array where ``workspace`` is None. A fresh array of a block's size costs
    its page faults again block after block (the allocator hands such arrays back to the system
    when they are freed); a buffer is faulted in once. Whatever a block keeps must be copied
    before the next block reuses the buffer."""
    if workspace is None:
        return np.empty(shape, dtype=dtype)
    n = int(np.prod(shape))
    buf = workspace.get(name)
    if buf is None or buf.size < n or buf.dtype != dtype:
        buf = workspace[name] = np.empty(n, dtype=dtype)
    return buf[:n].reshape(shape)


def errors_of(a64, e, r, s, dt, r_finite=False, workspace=None):
    """``(diff, ulp error, scaled error, finite)``: float64 arrays (a NaN or infinity counts 0
    where it equals r and infinitely far otherwise), and whether a64 and r are all finite
    (``r_finite``: r is known to be). ``workspace``: :func:`scratch`'s, for the three arrays."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        diff = np.subtract(a64, e, out=scratch(workspace, "diff", np.shape(e)))
        np.abs(diff, out=diff)
        # the largest |a - e| is finite only if every one is (a NaN propagates): one pass
        if np.isfinite(diff.max(initial=0.0)) and (
            r_finite or np.isfinite(r).all()
        ):  # the usual case, in fewer passes
            fmt = Fmt(dt)
            # e is finite here: lneps.formats.ulp in 3 passes (the sign bit masked)
            ue = fmt.ulp(e, out=scratch(workspace, "err", np.shape(e)))
            # ulp is monotone in |v|: ulp(max(|e|, s)) = max(ulp(e), ulp(s)), s's ulp on s's own shape
            scaled = np.maximum(
                ue, ulp(_compact(s), dt), out=scratch(workspace, "scaled", np.shape(e))
            )
            np.divide(diff, scaled, out=scaled)
            err = np.divide(diff, ue, out=ue)
            return diff, err, scaled, True
        finite = np.isfinite(a64) & np.isfinite(r)
        same = (a64 == r) | (np.isnan(a64) & np.isnan(r))
        diff = np.where(finite, diff, np.where(same, 0.0, np.inf))
        err = np.where(finite, diff / ulp(e, dt), diff)
        scaled = np.where(finite, diff / ulp(np.fmax(np.abs(e), s), dt), diff)
    return diff, err, scaled, False


def blocks_of(call, elements):
    """Slices of axis 0 of about ``elements`` elements each, when the op normalizes each index
    of axis 0 on its own (layer_norm and rms_norm over other axes, gamma and beta the same for
    every row, no per-element scale); otherwise the whole array as one block."""
    a = call.a
    whole = [slice(None)]
    if call.name not in ("layer_norm", "rms_norm") or a.ndim < 2 or call.scale is not None:
        return whole
    if 0 in reduced_axes(-1 if call.axis is None else call.axis, a.ndim):
        return whole
    for p in (call.gamma, call.beta):
        if p is not None and p.ndim == a.ndim and p.shape[0] != 1:
            return whole
    per_row = a.size // a.shape[0] if a.shape[0] else 1
    step = max(1, elements // max(per_row, 1))
    return [slice(i, i + step) for i in range(0, a.shape[0], step)] or whole


def measure_exact(call, rows=slice(None), xa=None, a=None):
    """The exact and correctly rounded values and the errors of ``call``'s output on the slice
    ``rows`` of axis 0 (all of it by default): a :class:`Graded` for that slice. ``xa``, ``a``:
    x and actual on ``rows``, where the caller has taken them already."""
    if xa is None:
        xa, a = call.x[rows], call.a[rows]
    f, name, dt = call.f, call.name, call.dt
    stats = None
    with np.errstate(over="ignore", invalid="ignore"):
        if name in ("layer_norm", "rms_norm"):
            out = f(xa.astype(np.float64), stats=True)
            e, stats = as_numpy(out[0], "the op's result").astype(np.float64), out[1:]
        else:
            e = as_numpy(f(xa.astype(np.float64)), "the op's result").astype(np.float64)
        if e.shape != a.shape:
            raise ValueError(
                f"actual has shape {call.a.shape} but the reference ({name} of x) has shape "
                f"{call.f(call.x.astype(np.float64)).shape if rows != slice(None) else e.shape}"
            )
        r, uncertain = _reference(e, f, xa, dt)
    s = _scale(call.scale, call.gamma, call.op, call.axis, a.shape)
    a64 = a.astype(np.float64)
    diff, err, scaled, finite = errors_of(a64, e, r, s, dt)
    return Graded(
        **{
            **call.__dict__,
            "a": a,
            "a64": a64,
            "e": e,
            "r": r,
            "uncertain": uncertain,
            "diff": diff,
            "err": err,
            "scaled": scaled,
            "x": xa,
            "stats": stats,
            "rows": rows,
            "delta": None,
            "finite": finite,
        }
    )


def row_index(rows, n):
    """The indices into axis 0 of the whole output of a block's ``rows`` (a slice of n rows, or
    an index array), as an array."""
    if isinstance(rows, np.ndarray):
        return rows
    return np.arange(n) + (rows.start or 0)


def grade_backward(op, wrt, a, xa, dy, g, b, eps, axis, scale, dt):
    from ... import backward

    if eps is DEFAULT:
        eps = 1e-5 if op == "layer_norm_backward" else None
    ax = -1 if axis is DEFAULT else axis
    fn = backward.layer_norm_backward if op == "layer_norm_backward" else backward.rms_norm_backward
    if b is not None and op == "rms_norm_backward":
        raise ValueError("rms_norm_backward has no beta; got beta")

    def f(z, grad):
        return getattr(fn(z, grad, g, eps=eps, axis=ax), wrt)

    with np.errstate(over="ignore", invalid="ignore"):
        e = as_numpy(f(xa.astype(np.float64), dy.astype(np.float64)), "the op's result").astype(
            np.float64
        )
        if e.shape != a.shape:
            raise ValueError(
                f"actual has shape {a.shape} but the reference ({op}, wrt={wrt!r}) has shape {e.shape}"
            )
        r, uncertain = _reference(e, lambda z: f(z, dy.astype(dt)), xa, dt)
    if scale is None:
        from .backward_error import backward_scale

        s = backward_scale(
            op.removesuffix("_backward"), wrt, x=xa, dy=dy, gamma=g, eps=eps, axis=ax
        )
    else:
        s = _scale(scale, None, op, ax, a.shape)
    a64 = a.astype(np.float64)
    diff, err, scaled, finite = errors_of(a64, e, r, np.broadcast_to(s, a.shape), dt)
    return Graded(
        name=f"{op} (wrt={wrt})",
        op=op,
        a=a,
        a64=a64,
        e=e,
        r=r,
        uncertain=uncertain,
        diff=diff,
        finite=finite,
        err=err,
        scaled=scaled,
        dt=dt,
        x=xa,
        gamma=g,
        beta=b,
        eps=eps,
        axis=ax,
        kw={},
        stats=None,
        call_eps=eps,
        wrt=wrt,
        dy=dy,
        rows=None,
        scale=scale,
    )


_U = format_of(np.float64).u  # the estimate is float64


def measure(call, rows=slice(None), exact=True):
    """The exact and correctly rounded values and the errors of ``call``'s output on the slice
    ``rows`` of axis 0 (all of it by default): a :class:`Graded` for that slice.

    ``exact=False`` (assert_close's blocks): layer_norm and rms_norm of float16, bfloat16 or
    float32 input, graded in one of those formats, are measured against the kernel's float64
    estimate (:func:`_estimated`) rather than the correctly rounded float64 value: e within
    about :math:`2^{-40}` relative, r still exact. ``gr.delta`` then bounds each element's
    distance to the exact value (0 where it is exact)."""
    xa, a = call.x[rows], call.a[rows]
    if (
        not exact
        and getattr(call.f, "estimate", None) is not None
        and xa.dtype in FAST_FORMATS
        and call.dt in FAST_FORMATS
        and xa.size
    ):
        return _estimated(call, rows, xa, a)
    return measure_exact(call, rows, xa, a)


def _estimated(call, rows, xa, a):
    r""":func:`measure` against the kernel's float64 estimate :math:`\hat e` of each exact
    value (:func:`lneps.norms.normalize_with_estimate`), within
    :math:`\delta = 2(E|\hat e - \beta| + u|\hat e|)` of it. The correctly rounded r is the
    kernel's own result when actual has x's format, and otherwise :math:`\hat e` rounded where
    no rounding boundary of actual's format lies within δ. The rows holding an element whose r
    or ulp that distance could change (a boundary within δ, a power of two within δ, or no
    estimate: a gain beyond :math:`2^{\pm 600}`, or a row holding inf or NaN) are measured
    exactly instead, and get δ = 0."""
    dt = call.dt
    call_ws = getattr(call, "workspace", None)  # assert_close's buffers (scratch)
    with np.errstate(over="ignore", invalid="ignore"):
        y, e, mean, rstd, E = call.f.estimate(xa)
        if e.shape != a.shape:  # the exact path says what is wrong
            return measure_exact(call, rows)
        # delta per normalized slice: 2 (E |e - beta| + u |e|) at its largest
        axes = reduced_axes(-1 if call.axis is None else call.axis, a.ndim)
        # max |e| per slice, without a temporary |e| (a NaN propagates through both)
        emax = np.maximum(
            np.max(e, axis=axes, keepdims=True), -np.min(e, axis=axes, keepdims=True)
        )
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
        r = scratch(call_ws, "r", rd.shape)
        r[...] = rd
        # ulp(e) differs from ulp(e^) only if a power of two lies between them: r is one, and e^ is
        # within delta of it (read off r's bits in its own format: the fraction field is 0)
        fraction = (1 << (format_of(dt).p - 1)) - 1  # the fraction field's bits
        pow2 = (rd.view(f"u{dt.itemsize}") & fraction) == 0
        if pow2.any():
            P = np.unravel_index(np.flatnonzero(pow2), a.shape)  # np.nonzero's, far cheaper
            undecided[P] |= (
                np.abs(np.abs(e[P]) - np.abs(r[P])) <= np.broadcast_to(delta, a.shape)[P]
            )
    stats = (rstd,) if mean is None else (mean, rstd)
    if undecided.any():
        if a.ndim < 2 or 0 in reduced_axes(-1 if call.axis is None else call.axis, a.ndim):
            return measure_exact(call, rows)
        redo = np.flatnonzero(undecided.reshape(a.shape[0], -1).any(axis=1))
        ex = measure_exact(call, row_index(rows, a.shape[0])[redo])
        e[redo], r[redo] = ex.e, ex.r
        delta = np.array(np.broadcast_to(delta, (a.shape[0],) + delta.shape[1:]))
        delta[redo] = 0.0
    s = _scale(call.scale, call.gamma, call.op, call.axis, a.shape)
    a64 = scratch(call_ws, "a64", a.shape)
    a64[...] = a
    # every r is finite when every |e| is below the format's largest number (ties round down to it)
    r_finite = bool(np.max(emax, initial=0.0) <= format_of(dt).largest)
    diff, err, scaled, finite = errors_of(a64, e, r, s, dt, r_finite=r_finite, workspace=call_ws)
    return Graded(
        **{
            **call.__dict__,
            "a": a,
            "a64": a64,
            "e": e,
            "r": r,
            "uncertain": np.zeros((), dtype=bool),
            "diff": diff,
            "err": err,
            "scaled": scaled,
            "x": xa,
            "stats": stats,
            "rows": rows,
            "delta": delta,
            "s": s,
            "finite": finite,
        }
    )


def scaled_error(actual, *, exact, gamma=None, dtype=None):
    r"""The scaled metric of :func:`lneps.testing.compare` against an exact result already at
    hand: :math:`|a_i - e_i|` in ulp of :math:`\max(|e_i|, |\gamma_i|)` (of
    :math:`\max(|e_i|, 1)` without a gain) in ``dtype`` (actual's format by default), float64
    of actual's shape. ``exact`` is the float64 exact result (``lneps.layer_norm`` of x upcast to
    float64, say), ``gamma`` broadcasts against the last axis. A NaN or infinity counts 0 where
    it equals the correctly rounded value and infinitely far otherwise, as in ``compare``; the
    same function computes both. For grading many kernels on one input without computing its
    exact result again for each.

    >>> import numpy as np, lneps, lneps.testing
    >>> x = np.array([[1.0, 2.0, 4.0]], dtype=np.float16)
    >>> y = lneps.layer_norm(x, eps=1e-5)
    >>> exact = lneps.layer_norm(x.astype(np.float64), eps=1e-5)
    >>> bool(np.array_equal(lneps.testing.scaled_error(y, exact=exact),
    ...                     lneps.testing.compare(y, x=x, eps=1e-5).scaled_error))
    True
    """
    a = as_numpy(actual, "actual")
    dt = a.dtype if dtype is None else np.dtype(dtype)
    e = np.asarray(exact, dtype=np.float64)
    r = e if dt == np.float64 else round_float64(e, dt)
    s = 1.0 if gamma is None else np.abs(as_numpy(gamma, "gamma").astype(np.float64))
    return errors_of(
        a.astype(np.float64), e, r, np.broadcast_to(s, a.shape) if np.ndim(s) else s, dt
    )[2]
