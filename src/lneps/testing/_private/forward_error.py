r"""The derived tolerance: the largest error a correct kernel can make, per element.

:func:`forward_bound` is the default tolerance of :func:`lneps.testing.assert_close`: for layer
norm or RMS norm in an output format, per element, the largest scaled error (``|a - y|`` in ulp
of :math:`\max(|y_i|, |\gamma_i|)`, 1 without a gain) that any correct production kernel can
make, in the worst case over summation orders and rounding errors.
:func:`lneps.testing.two_pass_bound` is the older, narrower bound for one kernel class (two-pass
float32, reciprocal square root within one ulp), kept because the book quotes it.

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
"How the reference works"; every term is a function of :mod:`lneps.testing._private.kernel_classes`
(of :mod:`lneps.testing._private.two_pass` for :func:`lneps.testing.two_pass_bound`). The floor under
the bound that :func:`lneps.testing.assert_close` tries first is
:func:`lneps.testing._private.deferred_bound.bound_floor`.
"""

from __future__ import annotations


import numpy as np

from ... import norms
from ...formats import format_of
from ..._checks import check_axes, check_eps, check_float_dtype, check_param_shape
from .arguments import FORMATS, as_numpy
from .kernel_classes import (
    ACC,
    KERNEL_CLASSES,
    check_kernels,
    evaluate,
    finish,
    Fmt,
    prune,
    random_rows,
    row_stats,
    gamma_n,
)

__all__ = ["forward_bound", "FORWARD_OPS"]

#: The ops :func:`forward_bound` derives a bound for.
FORWARD_OPS = ("layer_norm", "rms_norm")


def prepare(op, x, gamma, beta, eps, dtype, axis, exact, stats):
    """Check and lay out the arguments of forward_bound and scale_bias: rows of d numbers."""
    if op not in FORWARD_OPS:
        raise ValueError(f"op must be one of {', '.join(FORWARD_OPS)}; got {op!r}")
    xa = as_numpy(x, "x")
    if xa.ndim == 0:
        raise ValueError("x must have at least one axis")
    axes = check_axes(xa, axis)
    dt = xa.dtype if dtype is None else check_float_dtype(dtype)
    if dt not in FORMATS:
        raise TypeError(f"dtype must be float16, bfloat16, float32 or float64; got {dt}")
    if eps is None:
        if op != "rms_norm":
            raise ValueError("layer_norm needs eps")
        eps = norms.rms_norm_default_eps(xa.dtype)
    e_ = check_eps(eps)
    if op == "rms_norm" and beta is not None:
        raise ValueError("rms_norm has no beta; got beta")
    acc = 64 if np.dtype(np.float64) in (xa.dtype, dt) else 32
    accdt = np.float64 if acc == 64 else np.float32
    params = []
    for v, name in ((gamma, "gamma"), (beta, "beta")):
        if v is None:
            params.append(None)
            continue
        p = as_numpy(v, name).astype(np.float64)
        with np.errstate(over="ignore"):
            if acc == 32 and not np.array_equal(
                p.astype(np.float32).astype(np.float64), p, equal_nan=True
            ):
                raise ValueError(
                    f"{name} has values that float32 cannot hold; the model stores it in the "
                    "accumulation format"
                )
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
    ex = as_numpy(exact, "exact")
    if ex.shape != xa.shape:
        raise ValueError(f"exact has shape {ex.shape}; x has shape {xa.shape}")
    if op == "layer_norm":
        if not (isinstance(stats, (tuple, list)) and len(stats) == 2):
            raise ValueError(
                "stats for layer_norm is (mean, rstd), as layer_norm(..., return_stats=True) gives"
            )
        mean, rstd = stats
        mean = stat_rows(mean)
    else:
        rstd = stats[-1] if isinstance(stats, (tuple, list)) else stats
        mean = None
    rstd = stat_rows(rstd)
    grow = None if g is None else (np.full((1, 1), float(g)) if g.ndim == 0 else g.reshape(1, d))
    back_shape = tuple(xa.shape[k] for k in range(xa.ndim) if k not in axes) + tuple(
        xa.shape[a] for a in axes
    )

    def back(out2):
        return np.moveaxis(out2.reshape(back_shape), last, axes)

    eps_hat = float(np.asarray(e_, dtype=accdt))
    # for DESIGN_CLASSES: the input format's unit roundoff, and half its smallest subnormal (a
    # statistic stored there, a mean near 0, rounds to a multiple of the smallest subnormal)
    u_in = 0.0 if xa.dtype == np.float64 else format_of(xa.dtype).u
    eta_in = 0.0 if xa.dtype == np.float64 else format_of(xa.dtype).tiny / 2
    return dict(
        u_in=u_in,
        eta_in=eta_in,
        xa=xa,
        x2=rows(xa),
        y2=rows(ex),
        rows=rows,
        mean=mean,
        rstd=rstd,
        g=grow,
        d=d,
        dt=np.dtype(dt),
        acc=acc,
        axes=axes,
        kept=kept,
        eps=e_,
        eps_hat=eps_hat,
        back=back,
        op=op,
    )


def abs_mean_max(x2, x64=None):
    """Per row of ``x2`` (rows, d), mean |x| and max |x| in float64, each (rows, 1): the mean
    summed in float64, pairwise as ``np.mean`` of |x| upcast (exact for float16, whose sums of
    up to 2^24 numbers fit float64's significand). For 16-bit x, |x| by clearing the
    sign bit and max |x| on those bits (sign and magnitude: their order is the magnitudes', a
    NaN above infinity, as ``np.max`` lets NaN win), without a float64 pass for the max.
    ``x64``: x2 in float64, where the caller has it already (not changed)."""
    if x2.dtype.itemsize == 2:
        bits = x2.view(np.uint16) & np.uint16(0x7FFF)
        # summed in float64 as it is read (no float64 copy of the block), pairwise as np.mean
        M = np.add.reduce(bits.view(x2.dtype), axis=1, dtype=np.float64, keepdims=True)
        M /= x2.shape[1]
        X = bits.max(axis=1, keepdims=True).view(x2.dtype).astype(np.float64)
        return M, X
    ax = np.abs(x2.astype(np.float64) if x64 is None else x64)
    return ax.mean(axis=1, keepdims=True), ax.max(axis=1, keepdims=True)


def block_rows(d, block):
    return max(1, int(block) // max(d, 1))


def forward_bound(
    op,
    *,
    x,
    gamma=None,
    beta=None,
    eps,
    dtype=None,
    axis=-1,
    exact=None,
    stats=None,
    kernels=KERNEL_CLASSES,
    block=1 << 16,
    probabilistic=False,
) -> np.ndarray:
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
    bound (``lneps.testing._private.kernel_classes`` lists the terms; the appendix "How the reference works"
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

    ``probabilistic=True``: the bound of Higham and Mary's probabilistic analysis instead of
    the worst case for the errors that grow with d (the sums of the mean and of the squares,
    Welford's updates): :math:`\tilde\gamma_n \approx \lambda\sqrt n\,u` for :math:`\gamma_n
    \approx nu`, with :math:`\lambda = \sqrt{2\ln(2^{41} n)}` (8.6 at n = 4096), so the
    rstd's share is :math:`R \approx 1.5\lambda\sqrt d\,u` rather than :math:`d u`. Model
    assumption: the rounding errors of each sum are independent random variables of mean
    zero. Under it the bound fails with probability at most :math:`2^{-40}` per sum, so at
    most :math:`2^{-39}` per row (two sums: the mean and the squares) and per element, and at
    most rows :math:`\times 2^{-39}` per call. Outside it (sums whose rounding errors share
    a sign: near-constant rows, large offsets) a correct kernel can exceed it, so a row
    whose addends vary by less than 16 ulps of the sum keeps the worst case (the test is
    ``lneps.testing._private.kernel_classes.random_rows``); the appendix "How the tolerance
    is derived and checked" measures the zoo under it.

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
    >>> from lneps.testing import forward_bound
    >>> x = families(np.float32, 4096, rows=4)["normal"].x
    >>> bound = forward_bound("layer_norm", x=x, eps=1e-5)
    >>> y = lneps.layer_norm(x, eps=1e-5, compute_dtype=np.float32)  # a naive float32 kernel
    >>> exact = lneps.layer_norm(x.astype(np.float64), eps=1e-5)
    >>> scaled = np.abs(y - exact) / lneps.formats.ulp(np.fmax(np.abs(exact), 1), np.float32)
    >>> bool((scaled <= bound).all()), round(float(bound.max()), -2)
    (True, 8000.0)
    """
    classes = check_kernels(kernels)
    P = prepare(op, x, gamma, beta, eps, dtype, axis, exact, stats)
    d, dt, acc, x2, y2, g = P["d"], P["dt"], P["acc"], P["x2"], P["y2"], P["g"]
    A = ACC[acc]
    u, eta = A["u"], A["eta"]
    if "cast_then_weighted" in classes:  # gamma times the cast value, rounded in the input
        eta = eta + P["eta_in"]  # format: half a subnormal step where the product underflows
    fmt, accf = Fmt(dt), Fmt(np.float64 if acc == 64 else np.float32)
    nrows = x2.shape[0]
    out = np.empty((nrows, d), dtype=np.float64)
    B = block_rows(d, block)
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
            rand = False
            if probabilistic:  # the rows where the model holds: z^2 spread, offset (random_rows)
                zz = np.square(core)
                q4 = np.einsum("ij,ij->i", zz, zz)[:, None] / d
                del zz
                rand = random_rows(op, d, acc, M if op == "layer_norm" else None, rstd, q, q4)
            q = np.fmin(q, 1.0)
            with_x = (M, X, mean, q) if op == "layer_norm" else None
            lines, info = row_stats(
                op, rstd, d, acc, P["eps_hat"], with_x, classes, u_in=P["u_in"], eta_in=P["eta_in"],
                probabilistic=rand
            )
            lines = [[(a * (1 + 2.0**-40), b) for a, b in cls] for cls in lines]
            lines = prune(lines, core.max(axis=1, keepdims=True))
            F = evaluate(lines, core)
            ya = np.abs(y2[r0:r1], dtype=np.float64)
            # Ec = |gamma| F + eta (1 + |gamma|)
            if ag is not None:
                F *= ag
                F += eta * (1 + ag)
            else:
                F += 2 * eta
            E = finish(F, ya, fmt, accf)
            # overflow of the accumulation: partial sums of x (d M), of the squares, the output
            if op == "layer_norm":
                var = q / (rstd * rstd)
                dmu = info["D"] / rstd
                risky = (d * M > A["big"] * (1 - 2.0**-20)) | (
                    d * (var * (1 + 2.0**-40) + dmu * dmu) * (1 + gamma_n(2 * d + 8, u))
                    > A["big"] * (1 - 2.0**-20)
                )
            else:
                var = q / (rstd * rstd)
                risky = d * var * (1 + gamma_n(d + 3, u)) > A["big"] * (1 - 2.0**-20)
            # the output could overflow: |y| + E beyond the format's largest (rare; rows first)
            over = ya.max(axis=1) + E.max(axis=1) > fmt.big
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
