r"""The derived tolerance: the largest error a correct kernel can make, per element.

:func:`forward_bound` is the default tolerance of :func:`lneps.testing.assert_close`: for layer
norm or RMS norm in an output format, per element, the largest scaled error (``|a - y|`` in ulp
of :math:`\max(|y_i|, |\gamma_i|)`, 1 without a gain) that any correct production kernel can
make, in the worst case over summation orders and rounding errors. :func:`two_pass_bound` is
the older, narrower bound for one kernel class (two-pass float32, reciprocal square root within
one ulp), kept because the book quotes it.

The model: x, gamma and beta stored in their format; every operation of the kernel rounded to
nearest in the accumulation format (float32, or float64 for float64 input or output),
underflow to subnormals allowed, no overflow; any summation order; the classes of kernels in
:data:`KERNEL_CLASSES` (two passes; Welford's update, sequential or with Chan's merges in any
tree; one pass in float64 for 16- and 32-bit input); a reciprocal square root within 2.5 ulp of
the correctly rounded one; the affine step in any fused order; one final rounding to the
output format. The bound is the largest, over the classes, of a forward error analysis in
Higham's :math:`\gamma_k = ku/(1-ku)`, capped where a class's normalized values cannot grow
(at most :math:`\sqrt d` for two passes), evaluated in float64 with its own error allowed for.
The analysis, term by term, is the section "The derived tolerance" of the book's appendix
"How the reference works"; every term is a function of this module.
"""

from __future__ import annotations

import math

import numpy as np

from .. import norms
from .._checks import check_axes, check_float_dtype, check_param_shape, check_real
from ..formats import _finfo, format_of
from ..ulp import ulp
from ._arrays import _FORMATS, _as_numpy, _axes

__all__ = ["U32", "two_pass_bound", "forward_bound", "bound_floor", "FORWARD_OPS", "KERNEL_CLASSES"]

#: Unit roundoff of float32, the accumulation format of :func:`two_pass_bound`'s model.
U32 = 2.0**-24

#: The ops :func:`forward_bound` derives a bound for.
FORWARD_OPS = ("layer_norm", "rms_norm")


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


def _gain(g, axis, shape):
    """|gamma| as layer_norm applies it, broadcast to ``shape`` (1.0 without a gain)."""
    if g is None:
        return 1.0
    s, nd = np.abs(g.astype(np.float64)), len(shape)
    axes = _axes(axis, nd)
    if s.ndim and s.shape == tuple(shape[a] for a in axes):  # placed as the op applies gamma
        s = s.reshape([shape[a] if a in axes else 1 for a in range(nd)])
    return np.broadcast_to(s, shape)


def two_pass_bound(x, gamma=None, beta=None, *, eps=1e-5, axis=-1, dtype=None) -> np.ndarray:
    r"""Per element of layer norm's output, the largest scaled error (the ``metric="scaled"`` of
    :func:`compare`: ulp of :math:`\max(|y|, s)`, s = :math:`|\gamma_i|` or 1) that a correct
    two-pass float32 kernel can make: an error beyond it is a defect, not conditioning.

    Model: x, gamma and beta as given (exact in float32); every operation in float32 rounded
    to nearest; the mean, then the sum of the squares of :math:`t_j = \mathrm{fl}(x_j -
    \hat\mu)`, each in any order, each divided by d (or times fl(1/d)); eps rounded to float32
    and added; a reciprocal square root within one float32 ulp (:math:`\gamma_2`);
    :math:`\gamma\hat n + \beta` in any order of the products; one last rounding to ``dtype``.

    Result: a forward error analysis (module ``lneps.testing.bounds``; derived in the
    appendix "How the reference works"): the mean's error in units of the output,
    :math:`D = \gamma_{d+1} M r` (the offset term, which grows with d and :math:`|m|/\sigma`),
    the reciprocal square root's relative error :math:`R \approx \gamma_{d+5}/2 + \gamma_2 +
    D^2/2`, so :math:`|\hat n_i - z_i| \lesssim |z_i| R + D`, plus the affine step's and the
    output's roundings; capped, where smaller, by the size of a normalized value
    (:math:`|\hat n_i| \le \sqrt d\,(1+O(u))`, since :math:`t_i^2` is one of the squares
    summed, for eps in float32 above :math:`2^{-140}`). It is divided by
    :math:`\mathrm{ulp}(\max(|y_i|, s_i))` in ``dtype`` and enlarged by :math:`2^{-20}`
    relative for this function's float64 arithmetic.

    Guarantee: no correct kernel of the model exceeds it, whatever the summation order and the
    rounding errors (a worst case: about 0.5 ulp on N(0,1) rows in float16 and bfloat16, of
    order d ulp in float32, where the float32 accumulation is as fine as the output).
    :func:`forward_bound` covers more kernels (Welford, Chan's merges, one pass in float64, a
    2-ulp reciprocal square root) and RMS norm.

    x: float16, bfloat16 or float32, normalized over ``axis`` (an int or a tuple of trailing
    axes); gamma, beta: numbers exact in float32, broadcast like :func:`lneps.layer_norm`'s;
    eps >= 0; dtype: the output format (default x's; float16, bfloat16 or float32). Returns a
    float64 array of x's shape; ``inf`` where the model's float32 arithmetic could overflow or
    where :math:`\rho_- \ge 1`.

    >>> import numpy as np
    >>> from lneps.testing import families, two_pass_bound
    >>> x = families(np.float16, 64, rows=4)["normal"].x
    >>> bool((two_pass_bound(x) < 1).all())
    True
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
    ag = 1.0 if g is None else np.abs(_gain(g, axis, xa.shape))
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


# --- forward_bound -----------------------------------------------------------------------

#: Per accumulation format: unit roundoff, eta (half the smallest subnormal: an underflow),
#: nu (the squares' underflow, relative to r^-2), the smallest stored eps for the sqrt(d)
#: cap, the largest finite number.
_ACC = {
    32: dict(u=2.0**-24, eta=2.0**-150, nu=2.0**-147, cap_eps=2.0**-140, big=float(np.finfo(np.float32).max)),
    64: dict(u=2.0**-53, eta=2.0**-1075, nu=2.0**-1072, cap_eps=2.0**-1065, big=float(np.finfo(np.float64).max)),
}
_EXPONENT = np.int64(0x7FF0000000000000)
#: Welford's cap: |t_i| <= _C_W sqrt(M2) + (3.212 + 3.01 levels) u X (sqrt(1.606^2 3 + 8)).
_C_W = 3.968
#: The most levels of merges (a balanced tree over at most 1024 lanes, a CUDA block).
_MERGE_LEVELS = 10


class _Fmt:
    """What the bound needs of a format: its ulp at |v| >= 0, fast (the exponent bits)."""

    def __init__(self, dt):
        f = format_of(dt)
        self.dt = np.dtype(dt)
        self.scale = 2.0 ** (1 - f.p)
        self.tiny = f.tiny  # the smallest subnormal
        self.u = f.u
        self.big = f.largest

    def ulp(self, v, out=None):
        """ulp of v >= 0 (float64 array; inf or nan give inf), as :func:`lneps.ulp.ulp`."""
        out = np.empty_like(v) if out is None else out
        np.bitwise_and(v.view(np.int64), _EXPONENT, out=out.view(np.int64))  # 2^floor(log2 v), 0 for 0
        out *= self.scale
        return np.maximum(out, self.tiny, out=out)


def _g(n, u):
    return n * u / (1 - n * u)


def _R(rho_lo, rho_hi, psi):
    """|r^/r - 1| <= R given w = (var + eps)(1 + rho), -rho_lo <= rho <= rho_hi, and an rsqrt
    within psi relative."""
    with np.errstate(invalid="ignore", divide="ignore"):
        lo = np.where(rho_lo < 1, (1 + psi) / np.sqrt(np.where(rho_lo < 1, 1 - rho_lo, 1.0)) - 1, np.inf)
        return np.fmax(lo, 1 - (1 - psi) / np.sqrt(1 + rho_hi))


def _line(R, D, u, k, eta):
    """(a, b) with |c_i - y_i| <= |gamma_i| (a |z_i| + b) + eta (1 + |gamma_i|): the error
    analysis of the elementwise step, k roundings before the product with r^ (2 with the
    subtraction of the mean, 1 for RMS norm)."""
    grow = (1 + R) * (1 + u) ** k
    A1, B1 = grow - 1, D * grow + eta
    return A1 * (1 + u) + u, B1 * (1 + u)


#: The kernel classes of :func:`forward_bound`'s model (layer norm).
KERNEL_CLASSES = ("two_pass", "welford", "one_pass_float64")


def _row_stats(op, rstd, d, acc, eps_hat, with_x, classes=KERNEL_CLASSES, need_lines=True):
    """Per-row coefficients (each (B, 1)) of the classes' lines: a list of lists of (a, b), one
    list per class, the bound being max over classes of min over the class's lines; and the
    largest D and rho_+ over the classes (without the lines if not ``need_lines``)."""
    A = _ACC[acc]
    u, eta, nu = A["u"], A["eta"], A["nu"]
    psi = _g(5, u)
    r = rstd * (1 + 2.0**-40)
    root_eps = math.sqrt(eps_hat * (1 - u)) if eps_hat > 0 else 0.0

    def eps_cap(dmu, k):  # |n^_i| <= (|z_i|/r + dmu)(1+u)^k (1+psi) / sqrt(eps^): w >= eps^
        if root_eps == 0:
            return None
        f = (1 + u) ** (k + 1) * (1 + psi) / root_eps * (1 + 2.0**-40)
        with np.errstate(divide="ignore", invalid="ignore"):
            return (1 + f / r, f * dmu)

    if op == "rms_norm":
        rho = _g(d + 3, u) + nu * r * r
        cls = [_line(_R(rho, rho, psi), 0.0, u, 1, eta)] if need_lines else []
        if eps_hat >= A["cap_eps"]:
            cls.append((1.0, math.sqrt(d) * (1 + u) * (1 + psi) / math.sqrt(1 - _g(d + 3, u)) * (1 + u)))
        cap = eps_cap(0.0, 1)
        if cap is not None:
            cls.append(cap)
        return [cls], dict(rho_max=np.broadcast_to(rho, r.shape), D=np.zeros_like(r))
    M, X, m, q = with_x
    lnd, l2d = math.log(d), math.ceil(math.log2(d)) if d > 1 else 0
    # T: two-pass, any order
    dmu_T = _g(d + 1, u) * M + eta
    D_T = dmu_T * r
    rlo_T = _g(d + 5, u) + nu * r * r
    rhi_T = rlo_T + (1 + _g(d + 5, u)) * D_T * D_T
    cls_T = [_line(_R(rlo_T, rhi_T, psi), D_T, u, 2, eta)] if need_lines else []
    if eps_hat >= A["cap_eps"]:
        cls_T.append((1.0, math.sqrt(d) * (1 + u) * (1 + psi) / math.sqrt(1 - _g(d + 5, u)) * (1 + u)))
    cap = eps_cap(dmu_T, 2)
    if cap is not None:
        cls_T.append(cap)
    # W: Welford, Chan's merges
    cX = 3 * (2 + lnd) + 7 * l2d
    E_W = (u * (d * M + cX * X) + (d + cX) * eta) * (1 + _g(2 * d + cX, u))
    D_W = E_W * r
    first = 2 * u * (d - 1) * q + 6 * u * math.sqrt(2 * (1 + lnd)) * q \
        + (4 / 3) * u * np.abs(m) * r * (d + 1) ** 1.5 / d * np.sqrt(q)
    rlo_W = _g(d + 5, u) + (1 + _g(d + 5, u)) * first + nu * r * r
    rhi_W = rlo_W + (4 + l2d) * (1 + _g(d + 5, u)) * D_W * D_W
    cls_W = [_line(_R(rlo_W, rhi_W, psi), D_W, u, 2, eta)] if need_lines else []
    # |t_i| <= 3.968 sqrt(M2) + c_abs u X: a running or merged mean moves by at most twice its
    # increment (the old mean is a float), each step's M2 term is at least a third of a_k^2
    c_abs = 3.212 + 3.01 * min(l2d, _MERGE_LEVELS)
    grow_W = (1 + psi) * (1 + _g(d + 12, u)) * (1 + u)
    if root_eps > 0:
        cls_W.append((1.0, (_C_W * math.sqrt(d) + c_abs * u * X / root_eps) * grow_W))
    else:
        cls_W.append((1.0, np.where(X > 0, np.inf, _C_W * math.sqrt(d) * grow_W)))
    cap = eps_cap(E_W, 2)
    if cap is not None:
        cls_W.append(cap)
    lines, rho_max, D = [], np.zeros_like(r), np.zeros_like(r)
    for name, cls, rho_c, D_c in (("two_pass", cls_T, rhi_T, D_T), ("welford", cls_W, rhi_W, D_W)):
        if name in classes:
            lines.append(cls)
            rho_max, D = np.fmax(rho_max, rho_c), np.fmax(D, D_c)
    if acc == 32 and "one_pass_float64" in classes:  # O: one pass in float64, then float32
        u64 = 2.0**-53
        d64 = _g(d + 1, u64) * M
        dmu_O = d64 + u * (np.abs(m) + d64) + eta
        D_O = dmu_O * r
        var = q / (r * r)
        err_v = _g(d + 3, u64) * (var + 2 * m * m + 2 * d64 * d64) + (2 * np.abs(m) + d64) * d64 * (1 + 2 * u64)
        rho_O = _g(2, u) + err_v * r * r * (1 + u) + nu * r * r
        cls_O = [_line(_R(rho_O, rho_O, psi), D_O, u, 2, eta)] if need_lines else []
        cap = eps_cap(dmu_O, 2)
        if cap is not None:
            cls_O.append(cap)
        lines.append(cls_O)
        rho_max = np.fmax(rho_max, rho_O)
        D = np.fmax(D, D_O)
    return lines, dict(rho_max=rho_max, D=D, D_T=D_T, D_W=D_W)


def _prune(lines, zmax):
    """Drop the lines and classes that cannot matter on |z| in [0, zmax] for every row of the
    block: a line that another kept line of its class lies below at both ends (the class is
    their minimum), and a class that another kept class lies above at both ends of one of its
    lines (a minimum of lines is concave: above a line at both ends is above it between)."""
    with np.errstate(invalid="ignore", over="ignore"):
        ends = [[(np.broadcast_to(b, zmax.shape), np.broadcast_to(a * zmax + b, zmax.shape)) for a, b in cls]
                for cls in lines]
    if any(np.isnan(e).any() for cls in ends for pair in cls for e in pair):
        return lines

    def below(p, q):  # p <= q at both ends, on every row
        return bool(np.all(p[0] <= q[0]) and np.all(p[1] <= q[1]))

    kept = []
    for cls, ce in zip(lines, ends):
        gone = set()
        for j in range(len(cls)):
            if any(k != j and k not in gone and below(ce[k], ce[j]) for k in range(len(cls))):
                gone.add(j)
        keep = [j for j in range(len(cls)) if j not in gone]
        kept.append(([cls[j] for j in keep], [ce[j] for j in keep]))
    mins = [(np.minimum.reduce([e[0] for e in ce]), np.minimum.reduce([e[1] for e in ce])) for _, ce in kept]
    gone = set()
    for c, (_, ce) in enumerate(kept):
        if any(o != c and o not in gone and any(below(e, mins[o]) for e in ce) for o in range(len(kept))):
            gone.add(c)
    return [kept[c][0] for c in range(len(kept)) if c not in gone]


def _eval(lines, core):
    """max over classes of min over each class's lines a |z| + b, elementwise (fmin/fmax: a
    NaN line, from 0 * inf, never wins)."""
    out, cur, tmp = None, np.empty_like(core), np.empty_like(core)
    for cls in lines:
        for j, (a, b) in enumerate(cls):
            dst = cur if j == 0 else tmp
            np.multiply(core, a, out=dst)
            dst += b
            if j:
                np.fmin(cur, tmp, out=cur)
        if out is None:
            out, cur = cur, np.empty_like(core)
        else:
            np.fmax(out, cur, out=out)
    return out


def _finish(Ec, ya, fmt, accf):
    """|result - y| given |c - y| <= Ec for c in the accumulation format (in place in Ec): c
    rounded to it first if the output format differs, then once to the output format (y's own
    float64 error allowed for)."""
    E = Ec
    t = np.multiply(ya, 2.0**-52)
    E += t
    if accf.dt != fmt.dt:
        np.multiply(ya, 1 + 2.0**-50, out=t)
        t += Ec
        accf.ulp(t, out=t)
        t *= 0.5
        E += t
    lower = np.subtract(ya, E)
    np.fmax(lower, 0.0, out=lower)
    fmt.ulp(lower, out=lower)
    lower *= 0.5
    np.add(ya, E, out=t)
    t *= 1 + 2.0**-40
    fmt.ulp(t, out=t)
    t *= 0.5
    np.fmin(t, 2 * E, out=t)
    np.fmax(lower, t, out=lower)
    E += lower
    return E


def _prepare(op, x, gamma, beta, eps, dtype, axis, exact, stats):
    """Check and lay out the arguments of forward_bound and scale_bias: rows of d numbers."""
    if op not in FORWARD_OPS:
        raise ValueError(f"op must be one of {', '.join(FORWARD_OPS)}; got {op!r}")
    xa = _as_numpy(x, "x")
    if xa.ndim == 0:
        raise ValueError("x must have at least one axis")
    axes = check_axes(xa, axis)
    dt = xa.dtype if dtype is None else check_float_dtype(dtype)
    if dt not in _FORMATS:
        raise TypeError(f"dtype must be float16, bfloat16, float32 or float64; got {dt}")
    if eps is None:
        if op != "rms_norm":
            raise ValueError("layer_norm needs eps")
        eps = norms.rms_norm_default_eps(xa.dtype)
    e_ = check_real(eps, "eps")
    if not (e_ >= 0 and math.isfinite(e_)):
        raise ValueError(f"eps must be finite and >= 0; got {eps!r}")
    if op == "rms_norm" and beta is not None:
        raise ValueError("rms_norm has no beta; got beta")
    acc = 64 if np.dtype(np.float64) in (xa.dtype, dt) else 32
    accdt = np.float64 if acc == 64 else np.float32
    params = []
    for v, name in ((gamma, "gamma"), (beta, "beta")):
        if v is None:
            params.append(None)
            continue
        p = _as_numpy(v, name).astype(np.float64)
        with np.errstate(over="ignore"):
            if acc == 32 and not np.array_equal(p.astype(np.float32).astype(np.float64), p, equal_nan=True):
                raise ValueError(f"{name} has values that float32 cannot hold; the model stores it in the "
                                 "accumulation format")
        if p.ndim:
            p = check_param_shape(p, name, xa, axes, "normalized")
        params.append(p)
    g, b = params
    last = tuple(range(xa.ndim - len(axes), xa.ndim))
    d = int(np.prod([xa.shape[a] for a in axes]))
    kept = tuple(1 if k in axes else xa.shape[k] for k in range(xa.ndim))

    def rows(a):
        return (a if axes == last else np.moveaxis(a, axes, last)).reshape(-1, d)

    def stat_rows(a):
        a = np.asarray(a, dtype=np.float64)
        if a.shape != kept:
            a = np.broadcast_to(a, kept)
        return (a if axes == last else np.moveaxis(a, axes, last)).reshape(-1, 1)

    x64 = None
    if exact is None or stats is None:
        x64 = xa.astype(np.float64)
        with np.errstate(all="ignore"):
            if op == "layer_norm":
                y, mean, rstd = norms.layer_norm(x64, g, b, eps=e_, axis=axis, return_stats=True)
            else:
                y, rstd = norms.rms_norm(x64, g, eps=e_, axis=axis, return_stats=True)
                mean = None
        exact = y if exact is None else exact
        stats = (mean, rstd) if stats is None else stats
    ex = _as_numpy(exact, "exact")
    if ex.shape != xa.shape:
        raise ValueError(f"exact has shape {ex.shape}; x has shape {xa.shape}")
    if op == "layer_norm":
        if not (isinstance(stats, (tuple, list)) and len(stats) == 2):
            raise ValueError("stats for layer_norm is (mean, rstd), as layer_norm(..., return_stats=True) gives")
        mean, rstd = stats
        mean = stat_rows(mean)
    else:
        rstd = stats[-1] if isinstance(stats, (tuple, list)) else stats
        mean = None
    rstd = stat_rows(rstd)
    grow = None if g is None else (np.full((1, 1), float(g)) if g.ndim == 0 else g.reshape(1, d))
    back_shape = tuple(xa.shape[k] for k in range(xa.ndim) if k not in axes) + tuple(xa.shape[a] for a in axes)

    def back(out2):
        return np.moveaxis(out2.reshape(back_shape), last, axes)

    eps_hat = float(np.asarray(e_, dtype=accdt))
    return dict(xa=xa, x2=rows(xa), y2=rows(ex), rows=rows, mean=mean, rstd=rstd, g=grow, d=d, dt=np.dtype(dt), acc=acc,
                axes=axes, kept=kept,
                eps=e_, eps_hat=eps_hat, back=back, op=op)


def _block_rows(d, block):
    return max(1, int(block) // max(d, 1))


def forward_bound(op, *, x, gamma=None, beta=None, eps, dtype=None, axis=-1, exact=None, stats=None,
                  kernels=KERNEL_CLASSES, block=1 << 16) -> np.ndarray:
    r"""Per element, the largest scaled error a correct kernel of ``op`` can make in ``dtype``:
    the default tolerance of :func:`lneps.testing.assert_close`.

    The scaled error is :math:`|a_i - y_i|` in ulp (of ``dtype``) of
    :math:`\max(|y_i|, |\gamma_i|)` (1 without a gain), y the exact result.

    Model (the accumulation format is float32 for float16, bfloat16 and float32 input and
    output, float64 if x or ``dtype`` is float64; x, gamma, beta exact in it; every operation
    rounded to nearest; no overflow): the kernel may compute the statistics by

    * two passes, each sum in any order (sequential, pairwise, a warp tree of lanes);
    * Welford's running update, sequentially or per lane with Chan's merges in any tree
      (PyTorch's ``WelfordOps``, Apex's ``cuWelfordOnlineSum``/``cuChanOnlineSum``);
    * for 16- and 32-bit formats, one pass :math:`E[x^2] - E[x]^2` in float64, clamped at 0,

    divide by d (or multiply by fl(1/d)), add eps stored in the accumulation format, take a
    reciprocal square root within 2 ulp of the correctly rounded one (CUDA's ``rsqrtf``; any
    bias, e.g. always 2 ulp low), apply gamma and beta in any fused order
    (:math:`\gamma(t\hat r)+\beta`, :math:`(\gamma\hat r)t+\beta`, fused multiply-adds), and
    round once more to ``dtype`` if it differs from the accumulation format. ``rms_norm``:
    the sum of squares in any order, the same rest. ``kernels`` narrows the classes for layer
    norm (a subset of :data:`KERNEL_CLASSES`: "two_pass", "welford", "one_pass_float64"): a
    kernel known to run two passes gets the sharper bound of that class alone.

    Result: per element the largest, over these kernel classes, of a worst-case forward error
    bound (``lneps.testing.bounds`` lists the terms; the appendix "How the reference works"
    derives them): the mean's error :math:`D \approx d u M r` (layer norm), the reciprocal
    square root's :math:`R \approx d u/2` (Welford: :math:`d u`) plus :math:`\gamma_5`, so
    :math:`|\hat n_i - z_i| \lesssim |z_i|R + D`, the affine step's and the output's
    roundings; capped by the size a correct kernel's normalized value can reach
    (:math:`\sqrt d` for two passes, :math:`3.97\sqrt d + O(u\max|x|/\sqrt\varepsilon)` for
    Welford, :math:`(|x_i - m| + |\hat\mu - m|)/\sqrt\varepsilon` for all). Divided by the
    element's ulp and enlarged by :math:`2^{-20}` relative for this function's own float64
    arithmetic.

    Guarantee: no kernel of the model exceeds it, for any summation order and any rounding
    errors, on any finite input. It is a worst case: on N(0,1) rows about 0.5 ulp in float16
    and bfloat16, but of order d ulp in float32 (the float32 accumulation is as fine as the
    output), where it cannot separate a small systematic defect (the unbiased variance, eps
    after the square root) from rounding: :func:`lneps.testing.scale_bias` does.

    Arguments: ``op`` "layer_norm" or "rms_norm"; x float16, bfloat16, float32 or float64,
    normalized over ``axis`` (an int or a tuple of trailing axes); gamma, beta as the op takes
    them (exact in the accumulation format); eps >= 0 (None: RMS norm's default); ``dtype`` the
    output format (default x's). ``exact`` (the op's correctly rounded float64 result on x as
    float64, gamma and beta applied) and ``stats`` ((mean, rstd) for layer norm, rstd for RMS
    norm, float64 as ``return_stats=True`` gives them) spare recomputing them. Rows are
    processed ``block`` elements at a time. Returns a float64 array of x's shape; ``inf``
    where the accumulation could overflow or the analysis gives no bound (eps = 0 on a
    constant row).

    >>> import numpy as np, lneps
    >>> from lneps.testing import families
    >>> from lneps.testing.bounds import forward_bound
    >>> x = families(np.float32, 4096, rows=4)["normal"].x
    >>> bound = forward_bound("layer_norm", x=x, eps=1e-5)
    >>> y = lneps.layer_norm(x, eps=1e-5, compute_dtype=np.float32)  # a naive float32 kernel
    >>> exact = lneps.layer_norm(x.astype(np.float64), eps=1e-5)
    >>> scaled = np.abs(y - exact) / lneps.ulp.ulp(np.fmax(np.abs(exact), 1), np.float32)
    >>> bool((scaled <= bound).all()), round(float(bound.max()), -2)
    (True, 8000.0)
    """
    classes = (kernels,) if isinstance(kernels, str) else tuple(kernels)
    if not classes or any(k not in KERNEL_CLASSES for k in classes):
        raise ValueError(f"kernels must name some of {', '.join(KERNEL_CLASSES)}; got {kernels!r}")
    P = _prepare(op, x, gamma, beta, eps, dtype, axis, exact, stats)
    d, dt, acc, x2, y2, g = P["d"], P["dt"], P["acc"], P["x2"], P["y2"], P["g"]
    A = _ACC[acc]
    u, eta = A["u"], A["eta"]
    fmt, accf = _Fmt(dt), _Fmt(np.float64 if acc == 64 else np.float32)
    nrows = x2.shape[0]
    out = np.empty((nrows, d), dtype=np.float64)
    B = _block_rows(d, block)
    ag = None if g is None else np.abs(g)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for r0 in range(0, nrows, B):
            r1 = min(nrows, r0 + B)
            xb = x2[r0:r1].astype(np.float64)
            rstd = P["rstd"][r0:r1]
            if op == "layer_norm":
                mean = P["mean"][r0:r1]
                t1 = np.abs(xb)
                M = t1.mean(axis=1, keepdims=True) * (1 + 2.0**-40)
                X = t1.max(axis=1, keepdims=True)
                del t1
                xb -= mean
            xb *= rstd
            core = np.abs(xb, out=xb)  # |z|, within 2^-40 relative (folded into the lines)
            q = np.einsum("ij,ij->i", core, core)[:, None] / d * (1 + 2.0**-39)
            q = np.fmin(q, 1.0)
            with_x = (M, X, mean, q) if op == "layer_norm" else None
            lines, info = _row_stats(op, rstd, d, acc, P["eps_hat"], with_x, classes)
            lines = [[(a * (1 + 2.0**-40), b) for a, b in cls] for cls in lines]
            lines = _prune(lines, core.max(axis=1, keepdims=True))
            F = _eval(lines, core)
            ya = np.abs(y2[r0:r1], dtype=np.float64)
            # Ec = |gamma| F + eta (1 + |gamma|)
            if ag is not None:
                F *= ag
                F += eta * (1 + ag)
            else:
                F += 2 * eta
            E = _finish(F, ya, fmt, accf)
            # overflow of the accumulation: partial sums of x (d M), of the squares, the output
            if op == "layer_norm":
                var = q / (rstd * rstd)
                dmu = info["D"] / rstd
                risky = (d * M > A["big"] * (1 - 2.0**-20)) | \
                    (d * (var * (1 + 2.0**-40) + dmu * dmu) * (1 + _g(2 * d + 8, u)) > A["big"] * (1 - 2.0**-20))
            else:
                var = q / (rstd * rstd)
                risky = d * var * (1 + _g(d + 3, u)) > A["big"] * (1 - 2.0**-20)
            # the output could overflow: |y| + E beyond the format's largest (rare; rows first)
            over = (ya.max(axis=1) + E.max(axis=1) > fmt.big)
            if over.any():
                E[over] = np.where(ya[over] + E[over] > fmt.big, np.inf, E[over])
            denom = np.fmax(ya, ag, out=ya) if ag is not None else np.fmax(ya, 1.0, out=ya)
            fmt.ulp(denom, out=denom)
            np.divide(E, denom, out=E)
            E *= 1 + 2.0**-20
            rows_bad = risky[:, 0] | ~np.isfinite(rstd[:, 0])
            if rows_bad.any():
                E[rows_bad] = np.inf
            np.copyto(out[r0:r1], E)
            nan = np.isnan(out[r0:r1])
            if nan.any():
                out[r0:r1][nan] = np.inf
    return P["back"](out)


def bound_floor(op, *, x, gamma=None, beta=None, eps, dtype=None, axis=-1, exact, stats,
                kernels=KERNEL_CLASSES, abs_stats=None) -> np.ndarray:
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
    1-D in the order of the rows, where they are known already (a :class:`ScaleTest` has them)."""
    classes = (kernels,) if isinstance(kernels, str) else tuple(kernels)
    P = _prepare(op, x, gamma, beta, eps, dtype, axis, exact, stats)
    d, acc, x2 = P["d"], P["acc"], P["x2"]
    rstd = P["rstd"]
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if op == "layer_norm" and abs_stats is not None:
            M, X = (np.asarray(v, dtype=np.float64).reshape(-1, 1) for v in abs_stats)
            with_x = (M, X, P["mean"], np.zeros_like(M))
        elif op == "layer_norm":
            ax = x2.astype(np.float64)  # NumPy's float16 arithmetic is slow: float64 at once
            np.abs(ax, out=ax)
            M = ax.mean(axis=1, keepdims=True)
            X = ax.max(axis=1, keepdims=True)
            del ax
            with_x = (M, X, P["mean"], np.zeros_like(M))
        else:
            with_x = None
        lines, _ = _row_stats(op, rstd, d, acc, P["eps_hat"], with_x, classes)
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
            floor[~np.isfinite(M) | (d * M > _ACC[acc]["big"] * 2.0**-4)] = 0.0
    axes, nd = P["axes"], P["xa"].ndim
    back_shape = tuple(s for k, s in enumerate(P["xa"].shape) if k not in axes) + (1,) * len(axes)
    return np.moveaxis(floor.reshape(back_shape), tuple(range(nd - len(axes), nd)), axes)
