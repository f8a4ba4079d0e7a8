r"""The derived tolerance for a backward kernel: the largest error a correct kernel can make.

:func:`backward_bound` gives, per element of one gradient of layer norm or RMS norm
(``wrt`` = ``"x"``, ``"gamma"`` or ``"beta"``), the largest :math:`|\text{kernel} - \text{exact}|`
a correct kernel can make, in ulp (of the output format) of :math:`\max(|\text{exact}|, s)`,
where s (:func:`backward_scale`) is the size of the terms that cancel:

* dx: :math:`s_i = r(|\hat g_i| + \operatorname{mean}|\hat g| + |u_i|\operatorname{mean}|\hat g\odot u|)`
  (RMS norm: :math:`r(|\hat g_i| + |u_i|\operatorname{mean}|\hat g\odot u|)`, u = n);
* dγ: :math:`s_j = \sum_{\text{rows}} |g_j u_j|`; dβ: :math:`s_j = \sum_{\text{rows}} |g_j|`.

Notation: per row of d numbers, exact mean m, biased variance :math:`\sigma^2` (RMS: the mean
square, m = 0), :math:`r = (\sigma^2+\varepsilon)^{-1/2}`, :math:`u_i = (x_i - m)r`,
:math:`\hat g = \gamma\odot g`, :math:`A = \operatorname{mean}(\hat g)`,
:math:`B = \operatorname{mean}(\hat g\odot u)`, and
:math:`\partial x_i = r(\hat g_i - A - u_i B)` (RMS: :math:`r(\hat g_i - u_i B)`); n rows.

**Model.** Every operation rounded to nearest in the accumulation format, float32
(:math:`\mathsf u = 2^{-24}`), or float64 (:math:`\mathsf u = 2^{-53}`) when the output is
float64; x, g, γ are exact in it; underflow allowed (:math:`\eta` = half the smallest
subnormal), no overflow. A correct kernel computes

1. :math:`\hat\mu` = a sum of the x in any order divided by d (or times fl(1/d)); RMS: none;
2. :math:`\hat v_i = \mathrm{fl}(x_i - \hat\mu)`, :math:`\hat\sigma^2` = a sum of
   :math:`\mathrm{fl}(\hat v_i^2)` in any order (fused or not) over d,
   :math:`w = \mathrm{fl}(\hat\sigma^2 + \hat\varepsilon)`;
3. :math:`\hat r` within 2 ulp of :math:`1/\sqrt w` (relative error :math:`\psi = 4\mathsf u`):
   a correctly rounded or approximate rsqrt, or a rounded sqrt and a rounded division;
4. :math:`\hat u_i = \mathrm{fl}(\hat v_i\hat r)` (recomputed, or saved by the forward pass in the
   accumulation format), :math:`\tilde g_i = \mathrm{fl}(\gamma_i g_i)`;
5. :math:`\hat A`, :math:`\hat B` = sums of :math:`\tilde g_i` and :math:`\mathrm{fl}(\tilde g_i\hat u_i)`
   in any order, over d (or the sums themselves, the final scaling then taking 1/d);
6. :math:`\hat c_i` = :math:`\tilde g_i - \hat A - \hat u_i\hat B` combined with at most 4
   roundings on any term's path (any order, :math:`d\tilde g_i - \hat A` forms included), and
   :math:`\widehat{\partial x}_i = \hat r\hat c_i` with at most 2 roundings (times :math:`\hat r`,
   or times fl(:math:`\hat r/d`));
7. dγ = a sum over the rows of :math:`\mathrm{fl}(g\hat u)`, dβ = a sum of g, any order;
8. for float16 or bfloat16 output, the accumulation-format result rounded once to it.

**Forward error analysis** (Higham's :math:`\gamma_k = k\mathsf u/(1-k\mathsf u)`;
:math:`M = \operatorname{mean}|x|`):

* :math:`|\hat\mu - m| \le \gamma_{d+1}M + \eta`; in the output's units :math:`D = (\gamma_{d+1}M+\eta)r`
  (0 for RMS norm);
* since :math:`\sum(x_i - m) = 0`, :math:`\sum(x_i-\hat\mu)^2 = d(\sigma^2 + (\hat\mu-m)^2)`, so
  :math:`w = (\sigma^2+\varepsilon)(1+\rho)`, :math:`-\rho_- \le \rho \le \rho_+`,
  :math:`\rho_- = \gamma_{d+5} + \nu r^2`, :math:`\rho_+ = \rho_- + (1+\gamma_{d+5})D^2`
  (:math:`\nu = 2^{-147}`, float64 :math:`2^{-1072}`: the squares' underflow);
* :math:`|\hat r/r - 1| \le R = \max\big((1+\psi)(1-\rho_-)^{-1/2} - 1,\ 1 - (1-\psi)(1+\rho_+)^{-1/2}\big)`;
* :math:`|\hat u_i - u_i| \le E_i = |u_i|((1+R)(1+\mathsf u)^2 - 1) + D(1+R)(1+\mathsf u)^2 + \eta`;
* :math:`|\hat A - A| \le \Delta_A = (\gamma_{d+1}(1+\mathsf u) + \mathsf u)\operatorname{mean}|\hat g|`;
  :math:`|\hat B - B| \le \Delta_B = \operatorname{mean}(|\hat g|((1+\mathsf u)E + \mathsf u|u|))
  + \gamma_{d+2}(1+\mathsf u)\operatorname{mean}(|\hat g|(|u| + E))`;
* with :math:`|A| \le \operatorname{mean}|\hat g|` and :math:`|B| \le \operatorname{mean}|\hat g u|`,
  :math:`|\hat c_i - c_i| \le \Delta_i = \mathsf u|\hat g_i| + \Delta_A + E_i(|B| + \Delta_B) + |u_i|\Delta_B
  + \gamma_4\big((1+\mathsf u)|\hat g_i| + |A| + \Delta_A + (|u_i|+E_i)(|B|+\Delta_B)\big)`
  (RMS norm: without A and :math:`\Delta_A`);
* :math:`|\widehat{\partial x}_i - \partial x_i|
  \le |\partial x_i|((1+R)(1+\gamma_2) - 1) + r(1+R)(1+\gamma_2)\Delta_i`;
* dγ: :math:`\sum_{\text{rows}} |g|\big((1+\gamma_n)(1+\mathsf u)E + ((1+\mathsf u)(1+\gamma_n) - 1)|u|\big)`;
  dβ: :math:`\gamma_{n-1}\sum_{\text{rows}}|g|`.

Whatever the conditioning, :math:`\hat v_i^2` is one of the squares summed, so
:math:`|\hat u_i| \le N = \sqrt d\,(1+\mathsf u)(1+\psi)/\sqrt{1-\gamma_{d+5}}` (when
:math:`\hat\varepsilon` is far above the squares' underflow, :math:`2^{-140}` in float32); then
:math:`|\widehat{\partial x}_i| \le r(1+R_-)(1+\gamma_2)(1+\gamma_4)(1+\mathsf u)\big(|\hat g_i| +
(1+\gamma_{d+1})\operatorname{mean}|\hat g| + (1+\gamma_{d+2})N^2\operatorname{mean}|\hat g|\big)`
(:math:`R_-` the first term of R) and :math:`|\widehat{d\gamma}| \le (1+\gamma_n)(1+\mathsf u)N\sum|g|`,
and the error is at most that plus the exact value's size: used where smaller (a nearly
constant row with a tiny ε, where the mean's rounding is amplified without limit).

The error E so bounded becomes, for float16 or bfloat16 output (and for float64 output,
measured against its correctly rounded reference), :math:`E + \tfrac12\mathrm{ulp}(|y| + E)`;
then it is divided by :math:`\mathrm{ulp}(\max(|y|, s))` in the output format, with the exact y
and the statistics computed by lneps (their float64 error allowed for) and the whole enlarged
by :math:`2^{-20}` relative. It is a worst case (any summation order, every rounding at its
largest); ``inf`` where the model's arithmetic could overflow, where :math:`\rho_- \ge 1`, or
where an input is NaN or infinite.
"""

from __future__ import annotations

import numpy as np

from ...backward import layer_norm_backward, rms_norm_backward
from ... import norms
from ..._checks import check_axis, check_eps
from ...formats import format_of, ulp
from .arguments import FORMATS, as_numpy
from .kernel_classes import check_kernels

__all__ = ["backward_bound", "backward_scale", "BACKWARD_OPS", "BACKWARD_WRT"]

BACKWARD_OPS = ("layer_norm", "rms_norm")
BACKWARD_WRT = ("x", "gamma", "beta")


def _gamma(k, u):
    """Higham's :math:`\\gamma_k = ku/(1-ku)`."""
    return k * u / (1 - k * u)


class _Rows:
    """The inputs as float64 rows (n, d), and the exact values lneps gives."""

    def __init__(self, op, wrt, x, dy, gamma, eps, axis, dtype):
        if op not in BACKWARD_OPS:
            raise ValueError(f"op must be one of {', '.join(BACKWARD_OPS)}; got {op!r}")
        if wrt not in BACKWARD_WRT or (op == "rms_norm" and wrt == "beta"):
            raise ValueError(
                f"wrt must be 'x', 'gamma'{'' if op == 'rms_norm' else ' or beta'} for {op}; got {wrt!r}"
            )
        xa = as_numpy(x, "x")
        ga = as_numpy(dy, "dy")
        if ga.shape != xa.shape:
            raise ValueError(f"dy must have x's shape {xa.shape}; got {ga.shape}")
        self.dt = xa.dtype if dtype is None else np.dtype(dtype)
        if self.dt not in FORMATS:
            raise TypeError(f"dtype must be float16, bfloat16, float32 or float64; got {self.dt}")
        self.wide = self.dt == np.float64
        self.u = 2.0**-53 if self.wide else 2.0**-24
        self.eta = 2.0**-1075 if self.wide else 2.0**-150
        self.nu = 2.0**-1072 if self.wide else 2.0**-147
        self.eps = check_eps(eps)
        self.axis = check_axis(xa, axis)
        self.shape = xa.shape
        acc = np.float64 if self.wide else np.float32
        gam = None if gamma is None else as_numpy(gamma, "gamma").astype(np.float64)
        X = np.moveaxis(xa.astype(np.float64), self.axis, -1)
        G = np.moveaxis(ga.astype(np.float64), self.axis, -1)
        self.moved = X.shape
        self.d = X.shape[-1]
        self.X, self.G = X.reshape(-1, self.d), G.reshape(-1, self.d)
        if gam is not None:
            gam = gam.reshape(-1) if gam.size != 1 else np.full(self.d, gam.reshape(-1)[0])
            if gam.shape != (self.d,):
                raise ValueError(
                    f"gamma must be a scalar or hold d = {self.d} gains; got shape {np.shape(gamma)}"
                )
        self.gam = gam
        if not self.wide:
            for a, name in ((self.X, "x"), (self.G, "dy"), (gam, "gamma")):
                if a is not None:
                    with np.errstate(over="ignore", invalid="ignore"):
                        same = np.array_equal(a.astype(acc).astype(np.float64), a, equal_nan=True)
                    if not same:
                        raise ValueError(
                            f"{name} has values that float32 cannot hold; the model accumulates in float32"
                        )
        self.op, self.wrt = op, wrt
        self.layer = op == "layer_norm"
        self.ghat = (
            self.G if gam is None else self.G * gam[None, :]
        )  # exact: 24-bit products in float64
        with np.errstate(all="ignore"):
            if self.layer:
                z, _, rstd = norms.layer_norm(self.X, eps=self.eps, axis=-1, return_stats=True)
            else:
                z, rstd = norms.rms_norm(self.X, eps=self.eps, axis=-1, return_stats=True)
        self.z = np.asarray(z, dtype=np.float64)
        slack = 1 + (self.d + 16) * 2.0**-52  # lneps's float64 statistics and values
        self.r = np.asarray(rstd, dtype=np.float64).reshape(-1, 1) * slack
        self.slack = slack

    def exact(self):
        """The gradient wrt, correctly rounded to float64 by lneps: (n, d) or (d,)."""
        with np.errstate(all="ignore"):
            if self.layer:
                grads = layer_norm_backward(self.X, self.G, self.gam, eps=self.eps)
            else:
                grads = rms_norm_backward(self.X, self.G, self.gam, eps=self.eps)
        return np.asarray(getattr(grads, self.wrt), dtype=np.float64)

    def back(self, a):
        """(n, d) rows to x's shape."""
        return np.moveaxis(a.reshape(self.moved), -1, self.axis)


def _scale(rows):
    """s as in the module docstring, for rows' wrt."""
    with np.errstate(all="ignore"):
        if rows.wrt == "x":
            ag = np.abs(rows.ghat)
            s = ag + np.abs(rows.z) * (ag * np.abs(rows.z)).mean(axis=1, keepdims=True)
            if rows.layer:
                s = s + ag.mean(axis=1, keepdims=True)
            return s * rows.r
        if rows.wrt == "gamma":
            return np.abs(rows.G * rows.z).sum(axis=0)
        return np.abs(rows.G).sum(axis=0)


def backward_scale(op, wrt, *, x, dy, gamma=None, eps, axis=-1) -> np.ndarray:
    r"""The size s of the terms that cancel in one gradient (module docstring): float64, of x's
    shape for ``wrt="x"`` and of shape (d,) for ``"gamma"`` and ``"beta"``."""
    rows = _Rows(op, wrt, x, dy, gamma, eps, axis, np.float64)  # (no format to check)
    s = _scale(rows) * rows.slack
    return rows.back(s) if wrt == "x" else s


def backward_bound(
    op, wrt, *, x, dy, gamma=None, eps, dtype=None, axis=-1, kernels=None
) -> np.ndarray:
    r"""Per element of the gradient ``wrt`` (``"x"``, ``"gamma"`` or ``"beta"``) of ``op``
    (``"layer_norm"`` or ``"rms_norm"``) for input ``x``, upstream gradient ``dy`` and gain
    ``gamma``, the largest error, in ulp of :math:`\max(|\text{exact}|, s)` in ``dtype``
    (default x's: float16, bfloat16, float32 or float64), that a correct kernel accumulating
    in float32 (float64 for float64 output) can make (the model and the derivation: module
    docstring). s is :func:`backward_scale`'s. x, dy and gamma must be exact in the
    accumulation format; ``axis`` is the normalized axis. Returns a float64 array of x's
    shape (``"x"``) or of shape (d,). ``kernels=("stats_in_input_format",)``
    (:data:`lneps.testing.DESIGN_CLASSES`): the statistics the forward pass saved are stored in
    x's format, as torch's CPU kernels keep them, so rstd is off by a further factor within
    :math:`1 + u_{in}` and the mean by :math:`u_{in}|\mu|` (the other classes name forward
    kernels and change nothing here).

    >>> import numpy as np
    >>> x = np.array([[0.5, -1.0, 2.0, 0.25]], dtype=np.float32)
    >>> dy = np.array([[1.0, 0.5, -0.25, 2.0]], dtype=np.float32)
    >>> b = backward_bound("layer_norm", "x", x=x, dy=dy, eps=1e-5)
    >>> b.shape, bool(np.all((b > 0.5) & (b < 40)))
    ((1, 4), True)
    """
    stored = kernels is not None and "stats_in_input_format" in check_kernels(kernels)
    x_dt = as_numpy(x, "x").dtype
    u_in = format_of(x_dt).u if stored and x_dt != np.float64 else 0.0
    rows = _Rows(op, wrt, x, dy, gamma, eps, axis, dtype)
    u, eta, n, d = rows.u, rows.eta, rows.X.shape[0], rows.d
    gm = lambda k: _gamma(k, u)  # noqa: E731
    dt = rows.dt
    fmax = format_of(np.float64 if rows.wide else np.float32).largest * (1 - 2.0**-20)
    with np.errstate(all="ignore"):
        X, r = rows.X, rows.r
        sl = rows.slack
        au = np.abs(rows.z) * sl
        ag = np.abs(rows.ghat)
        M = np.abs(X).mean(axis=1, keepdims=True) * sl
        D = (gm(d + 1) * M + eta) * r if rows.layer else np.zeros_like(r)
        rho_lo = gm(d + 5) + rows.nu * r * r
        rho_hi = rho_lo + (1 + gm(d + 5)) * D * D
        psi = 4 * u
        R_lo = (1 + psi) / np.sqrt(np.where(rho_lo < 1, 1 - rho_lo, np.nan)) - 1
        R = np.maximum(R_lo, 1 - (1 - psi) / np.sqrt(1 + rho_hi))
        R = np.where(np.isnan(R), np.inf, R)
        R_lo = np.where(np.isnan(R_lo), np.inf, R_lo)
        if u_in:  # statistics stored in the input format: rstd rounded, the mean rounded
            R, R_lo = (1 + R) * (1 + u_in) - 1, (1 + R_lo) * (1 + u_in) - 1
            if rows.layer:
                D = D + u_in * (np.abs(X.mean(axis=1, keepdims=True)) * r + D) * (1 + 2.0**-40)
        E = au * ((1 + R) * (1 + u) ** 2 - 1) + D * (1 + R) * (1 + u) ** 2 + eta  # |u^ - u|
        N = np.sqrt(d) * (1 + u) * (1 + psi) / np.sqrt(1 - gm(d + 5))
        eps_acc = float(np.float64(rows.eps).astype(np.float64 if rows.wide else np.float32))
        capped = eps_acc >= (2.0**-1000 if rows.wide else 2.0**-140)
        if rows.wrt == "x":
            mg = ag.mean(axis=1, keepdims=True) * sl
            mgu = (ag * au).mean(axis=1, keepdims=True) * sl
            dA = (gm(d + 1) * (1 + u) + u) * mg if rows.layer else 0.0
            dB = (
                (ag * ((1 + u) * E + u * au)).mean(axis=1, keepdims=True)
                + gm(d + 2) * (1 + u) * (ag * (au + E)).mean(axis=1, keepdims=True)
            ) * sl
            A = mg if rows.layer else 0.0
            delta = (
                u * ag
                + dA
                + E * (mgu + dB)
                + au * dB
                + gm(4) * ((1 + u) * ag + A + dA + (au + E) * (mgu + dB))
            )
            y = np.abs(rows.exact())
            err = (
                y * ((1 + R) * (1 + gm(2)) - 1)
                + r * (1 + R) * (1 + gm(2)) * delta
                + 8 * eta * (1 + r)
            )
            if capped:
                big = (1 + u) * ag + (
                    N * N * (1 + gm(d + 2)) + ((1 + gm(d + 1)) if rows.layer else 0.0)
                ) * (1 + u) * mg
                cap = y + r * (1 + R_lo) * (1 + gm(2)) * (1 + gm(4)) * big + 8 * eta * (1 + r)
                err = np.fmin(err, cap)
            risky = (
                (d * M > fmax)
                | (d * (1 / (r * r) + D * D / (r * r)) * 2 > fmax)
                | (r > fmax)
                | (d * ag.max(axis=1, keepdims=True) * N > fmax)
            )
        else:
            G = np.abs(rows.G)
            if rows.wrt == "gamma":
                y = np.abs(rows.exact())
                err = (G * ((1 + gm(n)) * (1 + u) * E + ((1 + u) * (1 + gm(n)) - 1) * au)).sum(
                    axis=0
                ) * sl
                err = err + 8 * eta * n
                if capped:
                    err = np.fmin(
                        err, y + (1 + gm(n)) * (1 + u) * N * G.sum(axis=0) * sl + 8 * eta * n
                    )
                risky = (n * N * G.max(axis=0, initial=0.0) > fmax) | np.any(
                    (d * M > fmax) | (r > fmax), axis=0
                )
            else:
                y = np.abs(rows.exact())
                err = gm(max(n - 1, 0)) * G.sum(axis=0) * sl
                risky = n * G.max(axis=0, initial=0.0) > fmax
        s = _scale(rows) * sl
        y = y * (1 + 2.0**-50)
        if dt in (np.float16, FORMATS[1], np.float64):
            err = err + 0.5 * ulp((y + err) * (1 + 2.0**-50), dt)
        out = err / ulp(np.fmax(y, s), dt) * (1 + 2.0**-20)
        finite = np.isfinite(rows.X).all(axis=1, keepdims=True) & np.isfinite(rows.G).all(
            axis=1, keepdims=True
        )
        if rows.gam is not None:
            finite = finite & bool(np.isfinite(rows.gam).all())
        if rows.wrt != "x":
            finite = (
                np.broadcast_to(finite.all(axis=0), out.shape)
                if n
                else np.ones(out.shape, dtype=bool)
            )
        out = np.where(
            risky | ~finite | ~np.isfinite(out) | (y + err > format_of(dt).largest), np.inf, out
        )
    out = np.asarray(out, dtype=np.float64)
    return rows.back(np.broadcast_to(out, (n, d)).copy()) if wrt == "x" else out
