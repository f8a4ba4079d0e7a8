"""A kernel's output measured exactly against lneps: the exact values e (the op's correctly
rounded float64 result), the correctly rounded values r in the output format, and each
element's ulp and scaled errors (conventions: :mod:`lneps.testing`), for the forward ops
(:func:`_measure_exact`) and for one gradient of a backward op (:func:`_grade_backward`).
"""

from __future__ import annotations

import numpy as np

from ..oracle import round_float64
from ..formats import ulp
from ._arrays import _as_numpy, _axes
from .arguments import DEFAULT, _Graded


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
    exact = _as_numpy(redo(xd), "the op's result")
    exact = exact.astype(np.float64) if exact.dtype == dt else round_float64(exact.astype(np.float64), dt)
    return np.where(mid, exact, r), np.zeros(e.shape, dtype=bool)


def _scale(scale, g, op, axis, shape):
    if scale is not None:
        s = _as_numpy(scale, "scale").astype(np.float64)
        if not np.all(np.isfinite(s) & (s >= 0)):
            raise ValueError("scale must be finite and >= 0")
    elif g is None:
        return 1.0
    else:
        s, nd = np.abs(g.astype(np.float64)), len(shape)
        axes = (1,) if op == "group_norm" else _axes(-1 if axis is None else axis, nd)
        if op == "batch_norm":
            axes = tuple(a for a in range(nd) if a not in axes)
        if s.ndim and s.shape == tuple(shape[a] for a in axes):  # placed as the op applies gamma
            s = s.reshape([shape[a] if a in axes else 1 for a in range(nd)])
    try:
        return np.broadcast_to(s, shape)
    except ValueError:
        raise ValueError(f"{'scale' if scale is not None else '|gamma|'} of shape {s.shape} does not "
                         f"broadcast to actual's shape {shape}; pass scale=") from None


def _compact(s):
    """A scale broadcast to the output's shape (np.broadcast_to), as the array it was made from:
    length 1 along each axis it repeats along."""
    if np.ndim(s) == 0:
        return s
    return s[tuple(slice(0, 1) if st == 0 else slice(None) for st in s.strides)]


def _errors(a64, e, r, s, dt, r_finite=False):
    """``(diff, ulp error, scaled error, finite)``: float64 arrays (a NaN or infinity counts 0
    where it equals r and infinitely far otherwise), and whether a64 and r are all finite
    (``r_finite``: r is known to be)."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        diff = np.subtract(a64, e)
        np.abs(diff, out=diff)
        if np.isfinite(diff).all() and (r_finite or np.isfinite(r).all()):  # the usual case, in fewer passes
            ue = ulp(e, dt)
            # ulp is monotone in |v|: ulp(max(|e|, s)) = max(ulp(e), ulp(s)), s's ulp on s's own shape
            scaled = np.maximum(ue, ulp(_compact(s), dt))
            np.divide(diff, scaled, out=scaled)
            err = np.divide(diff, ue, out=ue)
            return diff, err, scaled, True
        finite = np.isfinite(a64) & np.isfinite(r)
        same = (a64 == r) | (np.isnan(a64) & np.isnan(r))
        diff = np.where(finite, diff, np.where(same, 0.0, np.inf))
        err = np.where(finite, diff / ulp(e, dt), diff)
        scaled = np.where(finite, diff / ulp(np.fmax(np.abs(e), s), dt), diff)
    return diff, err, scaled, False


def _blocks(call, elements):
    """Slices of axis 0 of about ``elements`` elements each, when the op normalizes each index
    of axis 0 on its own (layer_norm and rms_norm over other axes, gamma and beta the same for
    every row, no per-element scale); otherwise the whole array as one block."""
    a = call.a
    whole = [slice(None)]
    if call.name not in ("layer_norm", "rms_norm") or a.ndim < 2 or call.scale is not None:
        return whole
    if 0 in _axes(-1 if call.axis is None else call.axis, a.ndim):
        return whole
    for p in (call.gamma, call.beta):
        if p is not None and p.ndim == a.ndim and p.shape[0] != 1:
            return whole
    per_row = a.size // a.shape[0] if a.shape[0] else 1
    step = max(1, elements // max(per_row, 1))
    return [slice(i, i + step) for i in range(0, a.shape[0], step)] or whole


def _measure_exact(call, rows=slice(None), xa=None, a=None):
    """The exact and correctly rounded values and the errors of ``call``'s output on the slice
    ``rows`` of axis 0 (all of it by default): a :class:`_Graded` for that slice. ``xa``, ``a``:
    x and actual on ``rows``, where the caller has taken them already."""
    if xa is None:
        xa, a = call.x[rows], call.a[rows]
    f, name, dt = call.f, call.name, call.dt
    stats = None
    with np.errstate(over="ignore", invalid="ignore"):
        if name in ("layer_norm", "rms_norm"):
            out = f(xa.astype(np.float64), stats=True)
            e, stats = _as_numpy(out[0], "the op's result").astype(np.float64), out[1:]
        else:
            e = _as_numpy(f(xa.astype(np.float64)), "the op's result").astype(np.float64)
        if e.shape != a.shape:
            raise ValueError(f"actual has shape {call.a.shape} but the reference ({name} of x) has shape "
                             f"{call.f(call.x.astype(np.float64)).shape if rows != slice(None) else e.shape}")
        r, uncertain = _reference(e, f, xa, dt)
    s = _scale(call.scale, call.gamma, call.op, call.axis, a.shape)
    a64 = a.astype(np.float64)
    diff, err, scaled, finite = _errors(a64, e, r, s, dt)
    return _Graded(**{**call.__dict__, "a": a, "a64": a64, "e": e, "r": r, "uncertain": uncertain, "diff": diff,
                      "err": err, "scaled": scaled, "x": xa, "stats": stats, "rows": rows, "delta": None,
                      "finite": finite})


def _row_index(rows, n):
    """The indices into axis 0 of the whole output of a block's ``rows`` (a slice of n rows, or
    an index array), as an array."""
    if isinstance(rows, np.ndarray):
        return rows
    return np.arange(n) + (rows.start or 0)


def _grade_backward(op, wrt, a, xa, dy, g, b, eps, axis, scale, dt):
    from .. import backward

    if eps is DEFAULT:
        eps = 1e-5 if op == "layer_norm_backward" else None
    ax = -1 if axis is DEFAULT else axis
    fn = backward.layer_norm_backward if op == "layer_norm_backward" else backward.rms_norm_backward
    if b is not None and op == "rms_norm_backward":
        raise ValueError("rms_norm_backward has no beta; got beta")

    def f(z, grad):
        return getattr(fn(z, grad, g, eps=eps, axis=ax), wrt)

    with np.errstate(over="ignore", invalid="ignore"):
        e = _as_numpy(f(xa.astype(np.float64), dy.astype(np.float64)), "the op's result").astype(np.float64)
        if e.shape != a.shape:
            raise ValueError(f"actual has shape {a.shape} but the reference ({op}, wrt={wrt!r}) has shape {e.shape}")
        r, uncertain = _reference(e, lambda z: f(z, dy.astype(dt)), xa, dt)
    if scale is None:
        from .backward_error import backward_scale

        s = backward_scale(op.removesuffix("_backward"), wrt, x=xa, dy=dy, gamma=g, eps=eps, axis=ax)
    else:
        s = _scale(scale, None, op, ax, a.shape)
    a64 = a.astype(np.float64)
    diff, err, scaled, finite = _errors(a64, e, r, np.broadcast_to(s, a.shape), dt)
    return _Graded(name=f"{op} (wrt={wrt})", op=op, a=a, a64=a64, e=e, r=r, uncertain=uncertain, diff=diff,
                   finite=finite,
                   err=err, scaled=scaled, dt=dt, x=xa, gamma=g, beta=b, eps=eps, axis=ax, kw={}, stats=None,
                   call_eps=eps, wrt=wrt, dy=dy, rows=None, scale=scale)
