"""compare, assert_close and the Report: a kernel's output measured against lneps.

The conventions (exact value, correctly rounded value, ulp and scaled errors) are in
:mod:`lneps.testing`. This module reads the call: the kernel's output is the only positional
argument, everything else is a keyword, and a keyword nobody knows is a ``TypeError`` that
names it, so that ``assert_close(out, ref)`` written the NumPy or torch way, or a misspelt
``max_ulps=``, fails loudly instead of grading the wrong thing.
"""

from __future__ import annotations

import difflib
import inspect
from dataclasses import dataclass, field

import numpy as np

from .. import norms
from .._checks import check_real
from ..formats import format_of
from ..kernel.rounding import FAST_FORMATS, near_boundary, to_format
from ..oracle import round_float64
from ..ulp import ulp
from ._arrays import _as_numpy, _axes

OPS = ("layer_norm", "rms_norm", "group_norm", "batch_norm", "layer_norm_backward", "rms_norm_backward")
#: The gradients each backward op has, by ``wrt=``.
WRT = {"layer_norm_backward": ("x", "gamma", "beta"), "rms_norm_backward": ("x", "gamma")}


class _Default:
    def __repr__(self):
        return "<op's default>"


#: ``eps`` or ``axis`` left to the op: its own signature's default (``rms_norm``'s ``eps=None``
#: is torch's rule for x's dtype; ``batch_norm`` reduces axis 0; ``group_norm`` takes no axis; a
#: callable gets ``axis=-1`` and no eps). ``eps`` must be given, so this is how to ask for it.
DEFAULT = _Default()
_MISSING = object()

# compare's keywords; assert_close adds _ASSERT_KEYWORDS.
_KEYWORDS = ("x", "op", "gamma", "beta", "eps", "axis", "scale", "dy", "wrt")
_ASSERT_KEYWORDS = ("max_ulp", "kernels", "metric", "err_msg")
# What users of numpy.testing and torch.testing reach for, and what it is called here.
_HINTS = {
    "rtol": "lneps.testing measures errors in ulp: pass max_ulp= (the default is derived for the op and format)",
    "atol": "lneps.testing measures errors in ulp: pass max_ulp= (the default is derived for the op and format)",
    "expected": "lneps computes the expected values itself from the kernel's input: pass x=",
    "desired": "lneps computes the expected values itself from the kernel's input: pass x=",
    "equal_nan": "a NaN where the exact value is finite always fails, and a finite value where it is NaN too",
    "dtype": "the output format is read from actual",
    "check_dtype": "the output format is read from actual",
    "grad": "the upstream gradient is dy=",
    "grad_output": "the upstream gradient is dy=",
    "input": "the kernel's input is x=",
    "inputs": "the kernel's input is x=",
    "epsilon": "it is eps=",
    "weight": "the gain is gamma=",
    "bias": "the bias is beta=",
    "msg": "the extra message is err_msg=",
}


def _call_error(fname: str, args: tuple) -> TypeError:
    return TypeError(
        f"{fname}() takes the kernel's output as its only positional argument, and {len(args)} more "
        f"were given; pass the kernel's input by keyword: {fname}(actual, x=x, eps=...). "
        f"lneps computes the expected values itself, so a second argument is not an expected output "
        f"as in numpy.testing or torch.testing.")


def _op_keywords(op) -> tuple[set, bool]:
    """The extra keywords ``op`` itself takes (``num_groups``, ``training``...), and whether it
    takes any (a callable with ``**kwargs``)."""
    if callable(op):
        try:
            params = inspect.signature(op).parameters
        except (TypeError, ValueError):
            return set(), True
        any_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
        return {n for n, p in params.items() if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}, any_kw
    if isinstance(op, str) and op in ("layer_norm", "rms_norm", "group_norm", "batch_norm"):
        names = set(inspect.signature(getattr(norms, op)).parameters)
        return names - {"x", "gamma", "beta", "eps", "axis"}, False
    return set(), False


def _check_keywords(fname: str, op, kwargs: dict, own: tuple) -> dict:
    """The op's own keywords from ``kwargs``, after naming any keyword nobody takes."""
    extra, any_kw = _op_keywords(op)
    unknown = [k for k in kwargs if k not in extra]
    if unknown and not any_kw:
        k = unknown[0]
        hint = _HINTS.get(k) or "".join(f"did you mean {m}=?" for m in
                                         difflib.get_close_matches(k, [*own, *extra], n=1))
        opname = op if isinstance(op, str) else getattr(op, "__name__", "the op")
        takes = ", ".join(n + "=" for n in own)
        ops = sorted(extra - {"compute_dtype", "return_stats"})
        raise TypeError(f"{fname}() got an unexpected keyword argument {k!r}" + (f" ({hint})" if hint else "")
                        + f"; it takes {takes}" + (f", and {opname}'s " + ", ".join(n + "=" for n in ops) if ops else ""))
    return kwargs


def _caller(op, x, g, b, eps, axis, kw):
    """``(f, axis, name)``: f(z, stats) is the op on z with everything else fixed (with
    ``stats=True`` it also returns the op's statistics, where it has them); axis as resolved."""
    bad = sorted({"compute_dtype", "return_stats"} & set(kw))
    if bad:
        raise ValueError(f"{bad} would change the reference; lneps.testing compares with the default")
    if callable(op):
        ax, extra = (-1 if axis is DEFAULT else axis), ({} if eps is DEFAULT else {"eps": eps})
        return (lambda z, stats=False: op(z, g, b, axis=ax, **extra, **kw)), ax, getattr(op, "__name__", repr(op))
    if not isinstance(op, str) or op not in OPS:
        raise ValueError(f"op must be one of {', '.join(OPS)} or a callable; got {op!r}")
    fn = getattr(norms, op)
    params = inspect.signature(fn).parameters
    call = dict(kw, **({} if g is None else {"gamma": g}))
    if b is not None:
        if "beta" not in params:
            raise ValueError(f"{op} has no beta; got beta")
        call["beta"] = b
    ax = None
    if "axis" in params:
        ax = call["axis"] = params["axis"].default if axis is DEFAULT else axis
    elif axis is not DEFAULT:
        raise ValueError(f"{op} takes no axis (it normalizes each group of channels); got axis={axis!r}")
    default = params["eps"].default
    call["eps"] = eps if eps is not DEFAULT else (norms.rms_norm_default_eps(x.dtype) if default is None else default)

    def f(z, stats=False):
        return fn(z, **call, return_stats=True) if stats else fn(z, **call)

    if op in ("layer_norm", "rms_norm") and not kw:
        kind = "layer" if op == "layer_norm" else "rms"
        f.estimate = lambda z: norms._with_estimate(kind, z, call.get("gamma"), call.get("beta"), eps=call["eps"],
                                                    axis=call["axis"])
    return f, ax, op


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


def _bound(max_ulp, shape):
    """``max_ulp`` checked: a float, or a float64 array broadcast to ``shape``."""
    if np.ndim(max_ulp) == 0 and not isinstance(max_ulp, np.ndarray):
        bound = check_real(max_ulp, "max_ulp")
        if not bound >= 0:
            raise ValueError(f"max_ulp must be >= 0; got {max_ulp!r}")
        return bound
    arr = _as_numpy(max_ulp, "max_ulp").astype(np.float64)
    if not np.all(arr >= 0):
        raise ValueError("max_ulp must be >= 0 everywhere (NaN is not a bound)")
    try:
        return np.broadcast_to(arr, shape)
    except ValueError:
        raise ValueError(f"max_ulp of shape {arr.shape} does not broadcast to actual's shape {shape}") from None


def _exceeding(actual, reference, err, bound, finite=False):
    """The elements beyond ``bound``: error greater than it, or at ``bound == 0.5`` equal to it
    without being the correctly rounded value; and, whatever the bound, a NaN or infinity where
    the correctly rounded value is another number, or a number where it is NaN or infinite.
    ``finite``: actual and reference are known to be finite everywhere (fewer passes)."""
    if finite:
        over = err > bound
        eq = err == bound
        if eq.any():
            over |= eq & (np.asarray(bound) == 0.5) & (actual != reference)
        return over
    same = (actual == reference) | (np.isnan(actual) & np.isnan(reference))
    nonfinite = ~same & ~(np.isfinite(actual) & np.isfinite(reference))
    return nonfinite | (err > bound) | ((err == bound) & (np.asarray(bound) == 0.5) & ~same)


@dataclass(frozen=True)
class Report:
    """How ``actual`` compares with lneps, element by element (conventions: :mod:`lneps.testing`).

    ``max_ulp`` and ``max_ulp_scaled`` are the largest ulp and scaled errors (``worst_ulp_index``
    and ``worst_index`` say where, as index tuples into ``actual``; None if n = 0), ``max_abs``
    the largest :math:`|a-e|`, ``correctly_rounded`` the fraction of elements equal to r,
    ``exact_zero`` how many e are 0, ``uncertain`` how many r may be off (see
    :mod:`lneps.testing`). The float64 arrays ``actual``, ``exact``, ``reference``,
    ``ulp_error`` and ``scaled_error`` have actual's shape.
    """

    op: str
    dtype: np.dtype
    n: int
    max_ulp: float
    max_ulp_scaled: float
    max_abs: float
    correctly_rounded: float
    exact_zero: int
    uncertain: int
    worst_index: tuple | None
    worst_ulp_index: tuple | None
    # the five arrays, or a function that computes them on first use (assert_close grades in
    # blocks and keeps none of them, so a passing test costs no memory for them)
    _arrays: object = field(repr=False, compare=False)

    def _get(self, i):
        arrays = self._arrays
        if callable(arrays):
            arrays = arrays()
            object.__setattr__(self, "_arrays", arrays)
        return arrays[i]

    actual = property(lambda self: self._get(0), doc="actual as float64")
    exact = property(lambda self: self._get(1), doc="the exact values e (float64)")
    reference = property(lambda self: self._get(2), doc="the correctly rounded values r (float64)")
    ulp_error = property(lambda self: self._get(3), doc="|a - e| in ulp of e")
    scaled_error = property(lambda self: self._get(4), doc="|a - e| in ulp of max(|e|, s)")

    def exceeding(self, max_ulp=1.0, metric="scaled") -> np.ndarray:
        """Boolean mask of the elements whose error in ``metric`` exceeds ``max_ulp``: greater
        than it, or, at ``max_ulp=0.5`` exactly, equal to 0.5 without being r (a tie's odd
        neighbour, or the number just below a power of two whose exact value it is). So
        ``max_ulp=0.5, metric="ulp"`` passes exactly the correctly rounded elements. A NaN or
        infinity where r is another number, or a number where r is NaN or infinite, always
        exceeds, whatever ``max_ulp``. ``max_ulp`` is a number or an array broadcast against
        ``actual`` (one bound per element)."""
        bound = _bound(max_ulp, self.actual.shape)
        if metric not in ("scaled", "ulp"):
            raise ValueError(f"metric must be 'scaled' or 'ulp'; got {metric!r}")
        err = self.scaled_error if metric == "scaled" else self.ulp_error
        return _exceeding(self.actual, self.reference, err, bound)

    def _same(self):
        return (self.actual == self.reference) | (np.isnan(self.actual) & np.isnan(self.reference))

    def __str__(self):
        wrong = int((~self._same()).sum())
        lines = [f"{self.op}, {self.dtype}, {self.n} elements: {self.correctly_rounded:.2%} correctly "
                 f"rounded ({wrong} not)",
                 f"  worst {self.max_ulp:.4g} ulp at {self.worst_ulp_index}; scaled {self.max_ulp_scaled:.4g} "
                 f"ulp at {self.worst_index}; abs {self.max_abs:.4g}",
                 f"  exact zeros: {self.exact_zero}"]
        if self.uncertain:
            lines.append(f"  {self.uncertain} correctly rounded values uncertain (x does not fit {self.dtype})")
        return "\n".join(lines)


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


def _report(name, a64, e, r, uncertain, err, scaled, diff, dt) -> Report:
    n = a64.size

    def worst(v):
        return tuple(int(i) for i in np.unravel_index(int(np.argmax(v)), v.shape)) if n else None

    same = (a64 == r) | (np.isnan(a64) & np.isnan(r))
    return Report(op=name, dtype=dt, n=n, max_ulp=float(err.max()) if n else 0.0,
                  max_ulp_scaled=float(scaled.max()) if n else 0.0, max_abs=float(diff.max()) if n else 0.0,
                  correctly_rounded=float(same.mean()) if n else 1.0, exact_zero=int((e == 0).sum()),
                  uncertain=int(uncertain.sum()), worst_index=worst(scaled), worst_ulp_index=worst(err),
                  _arrays=(a64, e, r, err, scaled))


class _Summary:
    """A :class:`Report`'s numbers, gathered block by block."""

    def __init__(self):
        self.n = self.same = self.zero = self.uncertain = 0
        self.worst = {"err": (-1.0, None, False), "scaled": (-1.0, None, False), "diff": (-1.0, None, False)}

    def add(self, gr):
        off = gr.rows.start or 0 if isinstance(gr.rows, slice) else 0
        n = gr.a64.size
        if not n:
            return
        self.n += n
        if getattr(gr, "finite", False):
            self.same += int(np.count_nonzero(gr.a64 == gr.r))
        else:
            self.same += int(((gr.a64 == gr.r) | (np.isnan(gr.a64) & np.isnan(gr.r))).sum())
        self.zero += int(np.count_nonzero(gr.e == 0))
        self.uncertain += int(np.count_nonzero(gr.uncertain))
        estimated = getattr(gr, "delta", None) is not None
        for key in ("err", "scaled", "diff"):
            v = getattr(gr, key)
            i = int(np.argmax(v))
            if v.flat[i] > self.worst[key][0]:
                idx = np.unravel_index(i, v.shape)
                self.worst[key] = (float(v.flat[i]), (int(idx[0]) + off, *(int(j) for j in idx[1:])), estimated)

    def exact(self, call):
        """Re-measure exactly the elements found largest on the kernel's estimate."""
        measured = {}
        for key, (v, idx, estimated) in list(self.worst.items()):
            if not estimated or idx is None:
                continue
            a = call.a
            whole = a.ndim < 2 or 0 in _axes(-1 if call.axis is None else call.axis, a.ndim)
            row = None if whole else idx[0]
            if row not in measured:
                measured[row] = _measure(call, slice(None) if whole else np.array([row]))
            at = idx if whole else (0, *idx[1:])
            self.worst[key] = (float(getattr(measured[row], key)[at]), idx, False)

    def report(self, name, dt, arrays) -> Report:
        n = self.n
        return Report(op=name, dtype=dt, n=n, max_ulp=max(self.worst["err"][0], 0.0),
                      max_ulp_scaled=max(self.worst["scaled"][0], 0.0), max_abs=max(self.worst["diff"][0], 0.0),
                      correctly_rounded=self.same / n if n else 1.0, exact_zero=self.zero,
                      uncertain=self.uncertain, worst_index=self.worst["scaled"][1],
                      worst_ulp_index=self.worst["err"][1], _arrays=arrays)


class _Graded:
    """What one grading computed, for compare's report and assert_close's message."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


def _grade(fname, actual, kwargs, own):
    """Read the call and measure the whole output (:func:`_parse`, then :func:`_measure`)."""
    call = _parse(fname, actual, kwargs, own)
    return call if call.wrt is not None else _measure(call)


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
            return _measure(call, rows, exact=True)
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
            return _measure(call, rows, exact=True)
        redo = np.flatnonzero(undecided.reshape(a.shape[0], -1).any(axis=1))
        ex = _measure(call, _row_index(rows, a.shape[0])[redo], exact=True)
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


_U = format_of(np.float64).u  # the estimate is float64
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
        from .backward_bound import backward_scale

        s = backward_scale(op.removesuffix("_backward"), wrt, x=xa, dy=dy, gamma=g, eps=eps, axis=ax)
    else:
        s = _scale(scale, None, op, ax, a.shape)
    a64 = a.astype(np.float64)
    diff, err, scaled, finite = _errors(a64, e, r, np.broadcast_to(s, a.shape), dt)
    return _Graded(name=f"{op} (wrt={wrt})", op=op, a=a, a64=a64, e=e, r=r, uncertain=uncertain, diff=diff,
                   finite=finite,
                   err=err, scaled=scaled, dt=dt, x=xa, gamma=g, beta=b, eps=eps, axis=ax, kw={}, stats=None,
                   call_eps=eps, wrt=wrt, dy=dy, rows=None, scale=scale)


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
