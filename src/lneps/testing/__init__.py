r"""Testing a normalization kernel against lneps, shaped like ``numpy.testing``.

:func:`compare` measures a kernel's output ``actual`` for input ``x`` (and ``gamma``, ``beta``,
``eps``) against lneps, :func:`assert_close` fails a test with the worst element spelled out,
and :func:`families` draws the inputs that break low-precision kernels.

Conventions, for each element of ``actual`` (its dtype is the output format: float16,
bfloat16, float32 or float64; p significand bits):

* exact value e: the op's formula, e.g. :math:`\gamma_i (x_i-\mu)/\sqrt{\sigma^2+\varepsilon}
  + \beta_i` with the biased variance, on x, gamma, beta and eps as the binary numbers they
  store. It is lneps's result for x upcast to float64 (exact), correctly rounded to float64:
  within :math:`2^{-53}` relative of the real value, far below a 16- or 32-bit ulp. For
  float64 ``actual`` nothing finer is at hand: e is the correctly rounded float64 value, so
  float64 errors are measured against it (exact up to 0.5 ulp; a correct element measures 0).
* correctly rounded value r: the format's nearest number to the exact value, ties to even:
  lneps's default output for x stored in actual's format (exact when x's values fit it, the
  usual case). When they do not (float32 x, bfloat16 ``actual``) r is e rounded once more,
  which differs from the true r only if e lies exactly on a midpoint of the format while
  the real value does not; ``Report.uncertain`` counts the elements where e is a midpoint.
* ulp: the format's spacing at :math:`|e|`, :math:`2^{E-p+1}` for :math:`2^E \le |e| <
  2^{E+1}`, never below the smallest subnormal (:func:`lneps.ulp.ulp`); an exact 0 has the
  smallest subnormal as its ulp. ``ulp`` error: :math:`|a-e|` in ulp of :math:`e`;
  ``scaled`` error: :math:`|a-e|` in ulp of :math:`\max(|e|, s)`, with s = ``scale``
  (broadcast against ``actual``), else :math:`|\gamma|` where the op applies it, else 1: an
  error relative to the size of :math:`\gamma u` rather than of a result that cancelled.
* equal to r: equal as numbers (+0 and -0 alike, everything else bitwise) or both NaN. Where a
  or r is NaN or infinite the error is 0 if a equals r and infinite otherwise.
"""

from __future__ import annotations

import inspect
from collections import namedtuple
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

from . import norms
from .formats import _finfo
from ._checks import as_float_array, check_float_dtype, check_positive_int, check_real
from .oracle import round_float64
from .ulp import ulp

__all__ = ["OPS", "DEFAULT", "Report", "compare", "assert_close", "two_pass_bound", "Family", "families"]

OPS = ("layer_norm", "rms_norm", "group_norm", "batch_norm")
_FORMATS = tuple(np.dtype(t) for t in (np.float16, ml_dtypes.bfloat16, np.float32, np.float64))
_NAMES = "float16, bfloat16, float32 or float64"


class _Default:
    def __repr__(self):
        return "<op's default>"


#: ``eps`` and ``axis`` left to the op: its own signature's default (``rms_norm``'s
#: ``eps=None`` is torch's rule for x's dtype; ``batch_norm`` reduces axis 0; ``group_norm``
#: takes no axis; a callable gets ``axis=-1`` and no eps).
DEFAULT = _Default()


def _as_numpy(a, name: str) -> np.ndarray:
    """A NumPy array of one of the four formats from NumPy, PyTorch, JAX, DLPack or Python input."""
    mod = type(a).__module__
    if mod.startswith("torch"):
        import torch  # only ever for a torch tensor

        t = a.detach().cpu()
        arr = t.view(torch.int16).numpy().view(ml_dtypes.bfloat16) if t.dtype == torch.bfloat16 else t.numpy()
    elif isinstance(a, np.ndarray) or mod.startswith("jax") or hasattr(a, "__array__"):
        arr = np.asarray(a)
    elif hasattr(a, "__dlpack__"):
        arr = np.from_dlpack(a)
    else:  # Python numbers and lists: integers become float64 (refused beyond 2**53)
        arr = np.asarray(a)
        arr = as_float_array(arr, name)[0] if arr.dtype.kind in "iu" else arr
    if arr.dtype not in _FORMATS:
        raise TypeError(f"{name} has dtype {arr.dtype}; lneps.testing takes {_NAMES}")
    return arr


def _axes(axis, nd: int) -> tuple:
    return tuple(a % nd for a in (axis if isinstance(axis, (tuple, list)) else (axis,)))


def _caller(op, x, g, b, eps, axis, kw):
    """``(f, axis, name)``: f(z) is the op on z with everything else fixed; axis as resolved."""
    bad = sorted({"compute_dtype", "return_stats"} & set(kw))
    if bad:
        raise ValueError(f"{bad} would change the reference; lneps.testing compares with the default")
    if callable(op):
        ax, extra = (-1 if axis is DEFAULT else axis), ({} if eps is DEFAULT else {"eps": eps})
        return (lambda z: op(z, g, b, axis=ax, **extra, **kw)), ax, getattr(op, "__name__", repr(op))
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
    return (lambda z: fn(z, **call)), ax, op


def _outputs(f, x, dt):
    """``(e, r, uncertain)``: exact and correctly rounded values (float64 arrays), and where r
    came from rounding e to a midpoint of ``dt``."""
    with np.errstate(over="ignore", invalid="ignore"):
        e = _as_numpy(f(x.astype(np.float64)), "the op's result").astype(np.float64)
        if dt == np.float64:
            return e, e, np.zeros(e.shape, dtype=bool)
        xd = x.astype(dt)
        if np.array_equal(xd.astype(np.float64), x.astype(np.float64), equal_nan=True):
            r = _as_numpy(f(xd), "the op's result")
            r = r.astype(np.float64) if r.dtype == dt else round_float64(r.astype(np.float64), dt)
            return e, r, np.zeros(e.shape, dtype=bool)
        return e, round_float64(e, dt), np.isfinite(e) & (np.abs(e) / ulp(e, dt) % 1 == 0.5)


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


@dataclass(frozen=True)
class Report:
    """How ``actual`` compares with lneps, element by element (conventions: module docstring).

    ``max_ulp`` and ``max_ulp_scaled`` are the largest ulp and scaled errors (``worst_ulp_index``
    and ``worst_index`` say where, as index tuples into ``actual``; None if n = 0), ``max_abs``
    the largest :math:`|a-e|`, ``correctly_rounded`` the fraction of elements equal to r,
    ``exact_zero`` how many e are 0, ``uncertain`` how many r may be off (module docstring).
    The float64 arrays ``actual``, ``exact``, ``reference``, ``ulp_error`` and
    ``scaled_error`` have actual's shape.
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
    actual: np.ndarray = field(repr=False, compare=False)
    exact: np.ndarray = field(repr=False, compare=False)
    reference: np.ndarray = field(repr=False, compare=False)
    ulp_error: np.ndarray = field(repr=False, compare=False)
    scaled_error: np.ndarray = field(repr=False, compare=False)

    def exceeding(self, max_ulp=1.0, metric="scaled") -> np.ndarray:
        """Boolean mask of the elements whose error in ``metric`` exceeds ``max_ulp``: greater
        than it, or, at ``max_ulp=0.5`` exactly, equal to 0.5 without being r (a tie's odd
        neighbour, or the number just below a power of two whose exact value it is). So
        ``max_ulp=0.5, metric="ulp"`` passes exactly the correctly rounded elements.
        ``max_ulp`` is a number or an array broadcast against ``actual`` (one bound per
        element, such as :func:`two_pass_bound`'s)."""
        bound = _bound(max_ulp, self.actual.shape)
        if metric not in ("scaled", "ulp"):
            raise ValueError(f"metric must be 'scaled' or 'ulp'; got {metric!r}")
        err = self.scaled_error if metric == "scaled" else self.ulp_error
        return (err > bound) | ((err == bound) & (bound == 0.5) & ~self._same())

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


def compare(actual, x, *, op="layer_norm", gamma=None, beta=None, eps=DEFAULT, axis=DEFAULT, scale=None,
            **op_kwargs) -> Report:
    """Measure ``actual`` against lneps's ``op`` on ``x``: a :class:`Report`.

    ``op`` is one of :data:`OPS` (lneps's correctly rounded functions; ``op_kwargs`` such as
    ``num_groups`` or ``training`` go to them) or a callable ``f(x, gamma, beta, eps=...,
    axis=..., **op_kwargs)`` returning its result correctly rounded in x's format, called on
    NumPy arrays. ``eps`` and ``axis`` default to the op's own (:data:`DEFAULT`); a callable
    whose default eps depends on the dtype should be given eps, as it also sees float64 x.
    Each of ``actual``, ``x``, ``gamma``, ``beta`` and ``scale`` may be a NumPy, PyTorch
    (any device) or JAX array, a DLPack or ``__array__`` object, or Python numbers.
    ``ValueError`` for an unknown op or a shape mismatch, ``TypeError`` for other dtypes.
    """
    return _compare(actual, x, op, gamma, beta, eps, axis, scale, op_kwargs)[0]


def _compare(actual, x, op, gamma, beta, eps, axis, scale, kw):
    a = _as_numpy(actual, "actual")
    xa = _as_numpy(x, "x")
    g = None if gamma is None else _as_numpy(gamma, "gamma")
    b = None if beta is None else _as_numpy(beta, "beta")
    kw = {k: _as_numpy(v, k) if type(v).__module__.startswith(("torch", "jax")) else v for k, v in kw.items()}
    f, ax, name = _caller(op, xa, g, b, eps, axis, kw)
    e, r, uncertain = _outputs(f, xa, a.dtype)
    if e.shape != a.shape:
        raise ValueError(f"actual has shape {a.shape} but the reference ({name} of x) has shape {e.shape}")
    s = _scale(scale, g, op, ax, a.shape)
    a64 = a.astype(np.float64)
    finite = np.isfinite(a64) & np.isfinite(r)
    same = (a64 == r) | (np.isnan(a64) & np.isnan(r))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        diff = np.where(finite, np.abs(a64 - e), np.where(same, 0.0, np.inf))
        err = np.where(finite, diff / ulp(e, a.dtype), diff)
        scaled = np.where(finite, diff / ulp(np.fmax(np.abs(e), s), a.dtype), diff)
    n = a.size

    def worst(v):
        return tuple(int(i) for i in np.unravel_index(int(np.argmax(v)), v.shape)) if n else None

    report = Report(op=name, dtype=a.dtype, n=n, max_ulp=float(err.max()) if n else 0.0,
                    max_ulp_scaled=float(scaled.max()) if n else 0.0, max_abs=float(diff.max()) if n else 0.0,
                    correctly_rounded=float(same.mean()) if n else 1.0, exact_zero=int((e == 0).sum()),
                    uncertain=int(uncertain.sum()), worst_index=worst(scaled), worst_ulp_index=worst(err),
                    actual=a64, exact=e, reference=r, ulp_error=err, scaled_error=scaled)
    return report, xa, ax, kw


def assert_close(actual, x, *, op="layer_norm", max_ulp=1.0, metric="scaled", gamma=None, beta=None, eps=DEFAULT,
                 axis=DEFAULT, scale=None, **op_kwargs) -> Report:
    """Raise ``AssertionError`` if any element's error in ``metric`` ("scaled" or "ulp")
    exceeds ``max_ulp`` (:meth:`Report.exceeding`: ``max_ulp=0.5, metric="ulp"`` demands
    every element correctly rounded); return the :class:`Report` otherwise.

    ``max_ulp`` is a number or an array of per-element bounds broadcast against ``actual``:
    ``max_ulp=two_pass_bound(x, gamma, beta, eps=eps)`` (scaled metric) passes every correct
    two-pass float32 kernel. The message names the worst element in that metric (with an
    array, the one furthest beyond its own bound, by ratio): its index, its input row, the
    exact, correctly rounded and actual values, its errors, and how many of the n elements
    exceed. Arguments as :func:`compare`.
    """
    report, xa, ax, kw = _compare(actual, x, op, gamma, beta, eps, axis, scale, op_kwargs)
    over = report.exceeding(max_ulp, metric)
    if not over.any():
        return report
    err = report.scaled_error if metric == "scaled" else report.ulp_error
    bound = _bound(max_ulp, err.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        badness = err / bound if np.ndim(bound) else err
    idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(np.where(over, badness, -1.0))), err.shape))
    limit = f"{max_ulp} ulp" if not np.ndim(bound) else f"their bound (here {float(bound[idx]):.6g} ulp)"
    if report.op == "group_norm":  # the (sample, group) slice the element was normalized with
        width = xa.shape[1] // kw["num_groups"]
        lo = idx[1] // width * width
        where, row = f"x[{idx[0]}, {lo}:{lo + width}, ...]", xa[idx[0], lo:lo + width].ravel()
    else:
        axes = _axes(-1 if ax is None else ax, xa.ndim)
        where = "x[" + ", ".join(":" if k in axes else str(i) for k, i in enumerate(idx)) + "]"
        row = xa[tuple(slice(None) if k in axes else i for k, i in enumerate(idx))]

    def show(v):
        v = float(v)
        return f"{v!r} ({v.hex()})"

    rowtext = np.array2string(row, threshold=16, edgeitems=4, max_line_width=100)
    raise AssertionError(
        f"{int(over.sum())} of {report.n} elements exceed {limit} ({metric} metric; {report.op}, "
        f"{report.dtype})\nworst at index {idx}:\n"
        f"  input row {where} = {rowtext}\n"
        f"  exact             {show(report.exact[idx])}\n"
        f"  correctly rounded {show(report.reference[idx])}\n"
        f"  actual            {show(report.actual[idx])}\n"
        f"  error             {report.ulp_error[idx]:.6g} ulp, {report.scaled_error[idx]:.6g} ulp scaled, "
        f"abs {abs(report.actual[idx] - report.exact[idx]):.6g}")


#: Unit roundoff of float32, the accumulation format of :func:`two_pass_bound`'s model.
U32 = 2.0**-24


def _gamma_n(n):
    """Higham's :math:`\\gamma_n = nu/(1-nu)` for float32: n roundings' worst relative error."""
    return n * U32 / (1 - n * U32)


def _two_pass_error(d, mean_abs, r, core, y, gain, dt):
    """:func:`two_pass_bound`'s analysis, term by term: a bound on |kernel - y| (absolute),
    from d, mean|x|, r = 1/sqrt(var + eps), the core |x - mu| r, |y| and |gamma| (1 without a gain)."""
    u32, eta = U32, 2.0**-150
    D = (_gamma_n(d + 1) * mean_abs + eta) * r  # |mu^ - mu| r: the mean's error in units of the output
    rho_lo = _gamma_n(d + 5) + 2.0**-147 * r * r  # w = (var + eps)(1 + rho)
    rho_hi = rho_lo + (1 + _gamma_n(d + 5)) * D * D
    psi = _gamma_n(2)  # the reciprocal square root
    R = np.maximum((1 + psi) / np.sqrt(np.where(rho_lo < 1, 1 - rho_lo, np.nan)) - 1,
                   1 - (1 - psi) / np.sqrt(1 + rho_hi))
    R = np.where(np.isnan(R), np.inf, R)  # |r^/r - 1| <= R
    En = core * ((1 + R) * (1 + u32) ** 2 - 1) + D * (1 + R) * (1 + u32) ** 2 + eta  # |n^ - core|
    Ec = gain * (En + u32 * (core + En)) + eta * (1 + gain)  # |gamma n^ + beta - y| in float32
    return _rounded_once(Ec, y, dt)


def _two_pass_cap(d, core, gain):
    r"""A bound on |kernel - y| whatever the conditioning: in a two-pass kernel t_i^2 is one of
    the squares it sums, so :math:`|\hat n_i| \le N = \sqrt d\,(1+u)(1+\gamma_2)/\sqrt{1-\gamma_{d+5}}`
    (given eps in float32 above the squares' underflow), and :math:`|\hat c_i - y_i| \le
    |\gamma_i|(N(1+u) + |u_i|)`."""
    N = np.sqrt(d) * (1 + U32) * (1 + _gamma_n(2)) / np.sqrt(1 - _gamma_n(d + 5))
    return gain * (N * (1 + U32) + core) + 2.0**-150 * (1 + gain)


def _rounded_once(Ec, y, dt):
    """|result - y| given |c - y| <= Ec for the float32 value c the kernel rounds to dt (y's
    own float64 error allowed for)."""
    E = Ec + y * 2.0**-52 + (0.5 * ulp(y * (1 + 2.0**-50) + Ec, np.float32) if dt != np.float32 else 0.0)
    lower, upper = np.fmax(y - E, 0.0), (y + E) * (1 + 2.0**-40)  # the last rounding, to dt
    return E + np.fmax(0.5 * ulp(lower, dt), np.fmin(0.5 * ulp(upper, dt), 2 * E))


def two_pass_bound(x, gamma=None, beta=None, *, eps=1e-5, axis=-1, dtype=None) -> np.ndarray:
    r"""Per element of layer norm's output, the largest scaled error (the ``metric="scaled"`` of
    :func:`compare`: ulp of :math:`\max(|y|, s)`, s = :math:`|\gamma_i|` or 1) that a correct
    two-pass float32 kernel can make: an error beyond it is a defect, not conditioning.

    Model. x, gamma and beta are the numbers given (float16, bfloat16 or float32 values, all
    exact in float32). The kernel, with every operation in float32 rounded to nearest
    (u = 2^-24), underflow to subnormals allowed and no overflow:

    1. :math:`\hat\mu` = the sum of the d numbers x_j in any order, divided by d (or times
       fl(1/d));
    2. :math:`t_j = \mathrm{fl}(x_j - \hat\mu)`, :math:`\hat\sigma^2` = the sum of
       :math:`\mathrm{fl}(t_j^2)` (or fused multiply-adds) in any order, divided by d (or times
       fl(1/d));
    3. :math:`w = \mathrm{fl}(\hat\sigma^2 + \hat\varepsilon)`, :math:`\hat\varepsilon` =
       eps rounded to float32;
    4. :math:`\hat r` = 1/sqrt(w) within 1 float32 ulp (a correctly rounded or 1-ulp rsqrt,
       or a rounded sqrt then a rounded division): relative error at most :math:`\gamma_2`;
    5. :math:`c_i = \gamma_i \hat n_i + \beta_i` with :math:`\hat n_i = \mathrm{fl}(t_i \hat r)`,
       its product and sum rounded (or fused), or :math:`t_i\,\mathrm{fl}(\hat r\gamma_i)`,
       or :math:`\mathrm{fl}(t_i/\mathrm{fl}(\sqrt w))` for :math:`\hat n_i`;
    6. the result rounded once to ``dtype`` (for float16 or bfloat16: after the float32
       rounding of c).

    Forward error analysis, with :math:`\gamma_k = ku/(1-ku)`, exact mean m, exact biased
    variance :math:`\sigma^2`, :math:`r = (\sigma^2+\varepsilon)^{-1/2}`,
    :math:`z_i = (x_i-m)r`, :math:`M = \frac1d\sum_j|x_j|` and :math:`\eta = 2^{-150}` (an
    underflow):

    * :math:`|\hat\mu - m| \le \gamma_{d+1} M + \eta`; in units of the output's scale,
      :math:`D = (\gamma_{d+1} M + \eta) r` (the offset term: it grows with :math:`M/\sigma`, so
      with :math:`|m|/\sigma`, and with d);
    * since :math:`\sum_j (x_j - m) = 0`, :math:`w = (\sigma^2+\varepsilon)(1+\rho)` with
      :math:`-\rho_- \le \rho \le \rho_+`, where :math:`\rho_- = \gamma_{d+5} + \nu r^2`,
      :math:`\rho_+ = \rho_- + (1+\gamma_{d+5}) D^2` and :math:`\nu = 2^{-147}`;
    * :math:`|\hat r/r - 1| \le R`, the larger of :math:`(1+\gamma_2)(1-\rho_-)^{-1/2} - 1`
      and :math:`1 - (1-\gamma_2)(1+\rho_+)^{-1/2}`;
    * :math:`|\hat n_i - z_i| \le E_n`, where
      :math:`E_n = |z_i|\,((1+R)(1+u)^2 - 1)` :math:`{} + D(1+R)(1+u)^2 + \eta`
      (it grows with :math:`|z_i|`);
    * :math:`|c_i - y_i| \le E_c`, where :math:`E_c = |\gamma_i|\,(E_n + u(|z_i| + E_n))`
      :math:`{} + \eta(1 + |\gamma_i|)`;
    * for float16 or bfloat16 output, c is first rounded to float32, and
      :math:`E = E_c + \tfrac12\mathrm{ulp}_{32}(|y_i| + E_c)` bounds its distance to
      :math:`y_i` (:math:`E = E_c` for float32 output);
    * the last rounding, to ``dtype``, adds at most the larger of
      :math:`\tfrac12\mathrm{ulp}(|y_i| - E)` and :math:`\min(\tfrac12\mathrm{ulp}(|y_i| + E), 2E)`:
      half an ulp at the value, unless :math:`|y_i| \pm E` straddles a power of two, past
      which the nearest number is that power of two or half an ulp of the binade above.

    Whatever the conditioning, :math:`t_i^2` is one of the squares summed into
    :math:`\hat\sigma^2`, so :math:`|\hat n_i| \le N`, where
    :math:`N = \sqrt d\,(1+u)(1+\gamma_2)` :math:`{}/\sqrt{1-\gamma_{d+5}}`, when
    :math:`\hat\varepsilon \ge 2^{-140}` (far above the squares' underflow); then
    :math:`|c_i - y_i| \le |\gamma_i|(N(1+u) + |z_i|)` :math:`{} + \eta(1+|\gamma_i|)`
    replaces :math:`E_c` where it is smaller: where a mean's rounding is amplified without
    limit (a nearly constant row, a tiny ε), a correct kernel's output still has the size of a
    normalized value, and one far outside it is a defect.

    The bound is their sum divided by :math:`\mathrm{ulp}(\max(|y_i|, s_i))` in ``dtype``,
    with y_i and the statistics computed by lneps (correctly rounded float64, their error allowed for) and the
    whole enlarged by :math:`2^{-20}` relative for the float64 arithmetic of this function. It
    is a worst case: any summation order, every rounding error at its largest. On rows of
    N(0,1) numbers it is near 0.5 + a fraction of an ulp in float16 and bfloat16; in float32
    the offset term D dominates (of order d ulp for N(0,1) rows), because a float32 ulp of the
    output is as fine as the float32 accumulation itself.

    x: float16, bfloat16 or float32, normalized over ``axis`` (an int or a tuple of trailing
    axes); gamma, beta: numbers exact in float32, broadcast like :func:`lneps.layer_norm`'s;
    eps >= 0; dtype: the output format (default x's; float16, bfloat16 or float32). Returns a
    float64 array of x's shape; ``inf`` where the model's float32 arithmetic could overflow or
    where :math:`\rho_- \ge 1`.
    """
    xa = _as_numpy(x, "x")
    small = _FORMATS[:3]
    if xa.dtype not in small:
        raise TypeError(f"x has dtype {xa.dtype}; two_pass_bound models float16, bfloat16 or float32 input")
    dt = xa.dtype if dtype is None else check_float_dtype(dtype)
    if dt not in small:
        raise TypeError(f"dtype must be float16, bfloat16 or float32; got {dt}")
    e_ = check_real(eps, "eps")
    if not e_ >= 0:
        raise ValueError(f"eps must be >= 0; got {eps!r}")
    gb = []
    for v, name in ((gamma, "gamma"), (beta, "beta")):
        if v is None:
            gb.append(None)
            continue
        a = _as_numpy(v, name)
        a64 = a.astype(np.float64)
        with np.errstate(over="ignore"):
            if not np.array_equal(a64.astype(np.float32).astype(np.float64), a64):
                raise ValueError(f"{name} has values that float32 cannot hold; the model stores it in the input format")
        gb.append(a)
    g, b = gb
    x64 = xa.astype(np.float64)
    axes = _axes(axis, xa.ndim)
    d = int(np.prod([xa.shape[a] for a in axes]))
    z, _, rstd = norms.layer_norm(x64, eps=e_, axis=axis, return_stats=True)
    y = norms.layer_norm(x64, g, b, eps=e_, axis=axis)
    # |gamma| placed as layer_norm applies it (1 without a gain)
    ag = 1.0 if g is None else np.abs(_scale(None, g, "layer_norm", axis, xa.shape))
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        r = rstd * (1 + 2.0**-40)  # lneps's statistics and outputs, their float64 error allowed for
        mabs = np.mean(np.abs(x64), axis=axes, keepdims=True) * (1 + 2.0**-40)
        ya = np.abs(y)
        core = np.abs(z) * (1 + 2.0**-50)
        err = _two_pass_error(d, mabs, r, core, ya, ag, dt)
        if float(np.float32(e_)) >= 2.0**-140:  # eps in float32 far above the squares' underflow
            err = np.fmin(err, _rounded_once(_two_pass_cap(d, core, ag), ya, dt))
        out = err / ulp(np.fmax(ya, ag), dt) * (1 + 2.0**-20)
        # overflow of the float32 arithmetic: partial sums of x (at most d M), of the t_j^2 (at
        # most their total, d (sigma^2 + |mu^ - m|^2)(1 + gamma_{d+4})), and the output
        f32max = float(np.finfo(np.float32).max) * (1 - 2.0**-20)
        var = np.mean(np.square(x64 - np.mean(x64, axis=axes, keepdims=True)), axis=axes, keepdims=True)
        dmu = _gamma_n(d + 1) * mabs
        risky = ((d * mabs > f32max) | (d * (var * (1 + 2.0**-40) + dmu * dmu) * (1 + _gamma_n(d + 5)) > f32max)
                 | (ya + err > float(_finfo(dt).max)))
        out = np.where(risky | ~np.isfinite(out), np.inf, out)
    return np.broadcast_to(out, xa.shape).astype(np.float64)


Family = namedtuple("Family", "x gamma beta", defaults=(None, None))
Family.__doc__ = """One input family: rows ``x`` (rows, d) and, where the family needs them,
``gamma`` and ``beta`` of shape (d,) (else None), all in the family's dtype."""


def families(dtype, d, *, rows=64, seed=0) -> dict[str, Family]:
    r"""Hard inputs for a kernel in ``dtype`` (float16, bfloat16, float32, float64): a dict of
    :class:`Family`, x of shape (rows, d), deterministic for ``seed`` (each family its own
    ``np.random.default_rng([seed, k])``). With p the format's significand bits:

    * ``normal``: N(0,1) (the book's family of that name);
    * ``offset``: N(0,1) plus :math:`\pm 2^{p-4}` per row: the spacing there is 1/8, and
      subtracting the mean cancels all but about the last 4 of each element's p bits;
    * ``near_constant``: a N(0,10) constant c per row plus k ulp(c), k uniform in -3..3;
    * ``constant``: one N(0,10) number per row (the book's family of that name);
    * ``wide_range``: :math:`\pm m 2^E`, m uniform in [1, 2), E uniform from the smallest
      normal exponent to :math:`\lfloor (E_{max} - \lceil\log_2 d\rceil)/2\rfloor - 1`, so
      that even :math:`\sum x_j^2` stays finite in the format;
    * ``midpoint`` (even d only): each row half :math:`(k+1)c`, half :math:`(k-1)c`
      (:math:`c = 2^{\lceil p/2\rceil - 5 + j}`, j in 0..2, k in -4..4), so u = ±1 exactly
      with eps = 0; gamma in :math:`[1+2^{1-p}, 2-2^{1-p}]\,2^K` and beta :math:`=\pm 2^{K-p}`,
      half a spacing: every exact output :math:`\pm\gamma + \beta` of layer norm is a
      rounding midpoint of the format; with eps > 0 it lies within :math:`2^{11}\varepsilon`
      half-spacings of one (0.02 for eps = 1e-5), on the side toward :math:`\beta`.
    * ``cancelling_beta``: gamma uniform in [0.5, 2], each row :math:`2^s (z + o)` (row 0 is
      z) for one N(0,1) row z, and beta = -gamma u(z) rounded (u with eps = 0): layer norm's
      outputs nearly cancel, down to the rounding of x and beta and the term
      :math:`\gamma u \varepsilon/(2\sigma^2)`. For ops with beta only.
    """
    dt = check_float_dtype(dtype)
    if dt not in _FORMATS:
        raise TypeError(f"dtype must be {_NAMES}; got {dt}")
    d, rows = check_positive_int(d, "d"), check_positive_int(rows, "rows")
    fi = ml_dtypes.finfo(dt)
    p, emin, emax = int(fi.nmant) + 1, int(fi.minexp), int(fi.maxexp) - 1

    def rng(k):
        return np.random.default_rng([seed, k])

    out = {"normal": Family(rng(0).normal(0.0, 1.0, size=(rows, d)).astype(dt))}
    g = rng(1)
    sign = g.choice([-1.0, 1.0], size=(rows, 1))
    out["offset"] = Family((g.normal(0.0, 1.0, size=(rows, d)) + sign * 2.0 ** (p - 4)).astype(dt))
    g = rng(2)
    c = g.normal(0, 10, size=(rows, 1)).astype(dt).astype(np.float64)
    out["near_constant"] = Family((c + g.integers(-3, 4, size=(rows, d)) * ulp(c, dt)).astype(dt))
    out["constant"] = Family(np.repeat(rng(3).normal(0.0, 10.0, size=(rows, 1)), d, axis=1).astype(dt))
    g = rng(4)
    top = max(emin, (emax - int(d - 1).bit_length()) // 2 - 1)
    m = g.uniform(1, 2, size=(rows, d)) * g.choice([-1.0, 1.0], size=(rows, d))
    out["wide_range"] = Family(np.ldexp(m, g.integers(emin, top + 1, size=(rows, d))).astype(dt))
    if d % 2 == 0:
        g = rng(5)
        c = np.ldexp(1.0, -(-p // 2) - 5 + g.integers(0, 3, size=(rows, 1)))
        k = g.integers(-4, 5, size=(rows, 1))
        high = np.argsort(g.random((rows, d)), axis=1) < d // 2  # exactly half of each row
        K = g.integers(-3, 4, size=d)
        gamma = np.ldexp(1.0 + 2.0 ** (1 - p) * g.integers(1, 2 ** (p - 1), size=d), K)
        beta = g.choice([-1.0, 1.0], size=d) * np.ldexp(1.0, K - p)
        out["midpoint"] = Family(np.where(high, (k + 1) * c, (k - 1) * c).astype(dt), gamma.astype(dt),
                                 beta.astype(dt))
    g = rng(6)
    z = g.normal(size=d).astype(dt).astype(np.float64)
    v = z - z.mean()
    sd = np.sqrt((v * v).mean())
    u = v / sd if sd > 0 else v
    gamma = g.uniform(0.5, 2.0, size=d).astype(dt)
    shift = np.ldexp(1.0, g.integers(-2, 3, size=(rows, 1)))
    o = g.normal(size=(rows, 1))
    shift[0], o[0] = 1.0, 0.0
    out["cancelling_beta"] = Family((shift * (z + o)).astype(dt), gamma, (-gamma.astype(np.float64) * u).astype(dt))
    return out
