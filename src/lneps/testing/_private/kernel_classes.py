r"""The kernel classes of :func:`lneps.testing.forward_bound`'s model, and each one's terms.

:data:`KERNEL_CLASSES` names them: two passes, each sum in any order; Welford's update,
sequentially or per lane with Chan's merges in any tree; one pass :math:`E[x^2] - E[x]^2` in
float64 for 16- and 32-bit formats. For a block of rows, :func:`row_stats` gives each class's
bound on :math:`|c_i - y_i|` (c the kernel's value in the accumulation format, before the last
rounding) as the minimum of a few lines :math:`|\gamma_i|(a|z_i| + b)` (the forward error
analysis in Higham's :math:`\gamma_k = ku/(1-ku)`, ``_R`` and ``_line``, and the caps where a
class's normalized values cannot grow); the bound is the largest over the classes.
:func:`prune` drops the lines that cannot matter, :func:`evaluate` evaluates the rest per element,
and :func:`finish` adds the last roundings, to the accumulation format and to the output
format. The derivation, term by term, is the section "The derived tolerance" of the book's
appendix "How the reference works".
"""

from __future__ import annotations

import math

import numpy as np

from ...formats import format_of

__all__ = ["KERNEL_CLASSES", "DESIGN_CLASSES"]

#: Per accumulation format: unit roundoff, eta (half the smallest subnormal: an underflow),
#: nu (the squares' underflow, relative to r^-2), the smallest stored eps for the sqrt(d)
#: cap, the largest finite number.
ACC = {
    32: dict(
        u=2.0**-24,
        eta=2.0**-150,
        nu=2.0**-147,
        cap_eps=2.0**-140,
        big=float(np.finfo(np.float32).max),
    ),
    64: dict(
        u=2.0**-53,
        eta=2.0**-1075,
        nu=2.0**-1072,
        cap_eps=2.0**-1065,
        big=float(np.finfo(np.float64).max),
    ),
}
_EXPONENT = np.int64(0x7FF0000000000000)
#: Welford's cap: |t_i| <= _C_W sqrt(M2) + (3.212 + 3.01 levels) u X (sqrt(1.606^2 3 + 8)).
_C_W = 3.968
#: The most levels of merges (a balanced tree over at most 1024 lanes, a CUDA block).
_MERGE_LEVELS = 10


class Fmt:
    """What the bound needs of a format: its ulp at |v| >= 0, fast (the exponent bits)."""

    def __init__(self, dt):
        f = format_of(dt)
        self.dt = np.dtype(dt)
        self.scale = 2.0 ** (1 - f.p)
        self.tiny = f.tiny  # the smallest subnormal
        self.u = f.u
        self.big = f.largest

    def ulp(self, v, out=None):
        """ulp of |v| (float64 array, the sign bit masked out; inf or nan give inf), as
        :func:`lneps.formats.ulp`."""
        out = np.empty_like(v) if out is None else out
        np.bitwise_and(
            v.view(np.int64), _EXPONENT, out=out.view(np.int64)
        )  # 2^floor(log2 v), 0 for 0
        out *= self.scale
        return np.maximum(out, self.tiny, out=out)


def gamma_n(n, u):
    """Higham's :math:`\\gamma_n = nu/(1-nu)`: the worst relative error of n roundings with unit
    roundoff u."""
    return n * u / (1 - n * u)


#: The probabilistic bound's chance of failing, per sum (``probabilistic=True``): 2^-40.
SUM_FAILURE = 2.0**-40


def gamma_tilde(n, u, delta=SUM_FAILURE):
    r"""Higham and Mary's probabilistic :math:`\tilde\gamma_n(\lambda) = \exp(\lambda\sqrt n\,u
    + nu^2/(1-u)) - 1` ("A new approach to probabilistic rounding error analysis", SIAM J. Sci.
    Comput. 41(5), 2019), with :math:`\lambda =
    \sqrt{2\ln(2n/\delta)}/(1-u)`: where the n rounding errors of a computation are independent
    random variables of mean zero (their model), the product of the n factors
    :math:`(1+\delta_k)^{\pm 1}` lies within :math:`1 \pm \tilde\gamma_n` with probability at
    least :math:`1 - 2n\exp(-\lambda^2(1-u)^2/2) = 1 - \delta`. Never above
    :func:`gamma_n`, the worst case, which holds for any rounding errors.

    >>> round(gamma_tilde(4101, 2.0**-24) / 2.0**-24)  # lambda = 8.6, sqrt(n) = 64: not 4101 u
    549
    >>> gamma_tilde(3, 2.0**-24) == gamma_n(3, 2.0**-24)
    True
    """
    lam = math.sqrt(2 * math.log(2 * n / delta)) / (1 - u)
    return min(math.expm1(lam * math.sqrt(n) * u + n * u * u / (1 - u)), gamma_n(n, u))


#: The probabilistic bound applies to a row only where its addends vary by at least this many
#: ulps of the sum's total (:func:`random_rows`).
MODEL_SPREAD = 16


def random_rows(op, d, acc, M, rstd, q, q4):
    r"""Per row (B, 1), whether its sums' roundings may be taken as independent and of mean
    zero (Higham and Mary's model, :func:`gamma_tilde`): the addends must vary by at least
    :data:`MODEL_SPREAD` ulps of the sum's total, about :math:`d u` times their mean size, so
    that the partial sums' last bits do not repeat. For layer norm the sum of x: its standard
    deviation :math:`\sqrt q/r` at least :math:`16\,d u \operatorname{mean}|x|`; for both ops
    the sum of squares: the spread :math:`\sqrt{\operatorname{mean} z^4 - q^2}` of
    :math:`z^2` at least :math:`16\,d u\,q` (q = mean :math:`z^2`, z the normalized row).
    A constant or nearly constant row, a row whose offset dwarfs its spread, a row of values
    of one magnitude (the midpoint family) fails it and keeps the worst case
    :func:`gamma_n`: there a sequential sum's roundings can all lean one way, as the zoo
    measures (the appendix "How the tolerance is derived and checked")."""
    c = MODEL_SPREAD * d * ACC[acc]["u"]
    with np.errstate(invalid="ignore", over="ignore"):
        ok = np.sqrt(np.fmax(q4 - q * q, 0.0)) >= c * q
        if op == "layer_norm":
            ok &= M * rstd * c <= np.sqrt(q)  # the standard deviation is sqrt(q) / r
    return ok & (q > 0)


def _R(rho_lo, rho_hi, psi):
    """|r^/r - 1| <= R given w = (var + eps)(1 + rho), -rho_lo <= rho <= rho_hi, and an rsqrt
    within psi relative."""
    with np.errstate(invalid="ignore", divide="ignore"):
        lo = np.where(
            rho_lo < 1, (1 + psi) / np.sqrt(np.where(rho_lo < 1, 1 - rho_lo, 1.0)) - 1, np.inf
        )
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
#: Real designs that round inside the kernel to the input format, which a test opts into with
#: ``kernels=`` (never in the default: they are looser than a correct kernel must be):
#: "stats_in_input_format", two-pass statistics in float32 stored in the input format (mean
#: and rstd, as torch's CPU kernels keep them), then the rest in float32; "cast_then_weighted",
#: the normalized value computed in float32, cast to the input format, then multiplied by the
#: gain in the input format (Hugging Face's Llama RMSNorm).
DESIGN_CLASSES = ("stats_in_input_format", "cast_then_weighted")


def check_kernels(kernels) -> tuple:
    """``kernels=`` as a tuple of class names, each one of :data:`KERNEL_CLASSES`: ``ValueError``
    naming them otherwise (a misspelt class must fail whether or not a bound is needed)."""
    classes = (kernels,) if isinstance(kernels, str) else tuple(kernels)
    known = KERNEL_CLASSES + DESIGN_CLASSES
    if not classes or any(k not in known for k in classes):
        raise ValueError(f"kernels must name some of {', '.join(known)}; got {kernels!r}")
    return classes


def _design_lines(classes, base, R, D, u, k, eta, u_in, eta_in):
    """The lines of the design classes asked for, from a two-pass class's R and D (``base``:
    its lines). Stored in the input format (unit roundoff ``u_in``), rstd is off by a further
    factor within (1 + u_in) and the mean by u_in |mean| (``D`` includes it); cast to the input
    format and then weighted there, the normalized value takes two more roundings of u_in, the
    cast an absolute ``eta_in`` more where it underflows (the product's own underflow is added
    with the accumulation's, in :func:`lneps.testing.forward_bound`)."""
    out = []
    if "stats_in_input_format" in classes:
        out.append([_line((1 + R) * (1 + u_in) - 1, D, u, k, eta)])
    if "cast_then_weighted" in classes:
        grow = (1 + u_in) ** 2
        out.append([((1 + a) * grow - 1, b * grow + eta_in * (1 + u_in)) for a, b in base])
    return out


def row_stats(
    op,
    rstd,
    d,
    acc,
    eps_hat,
    with_x,
    classes=KERNEL_CLASSES,
    need_lines=True,
    u_in=0.0,
    eta_in=0.0,
    probabilistic=False,
):
    r"""Per-row coefficients (each (B, 1)) of the classes' lines: a list of lists of (a, b), one
    list per class, the bound being max over classes of min over the class's lines; and the
    largest D and rho_+ over the classes (without the lines if not ``need_lines``). ``u_in``:
    the input format's unit roundoff, and ``eta_in`` half its smallest subnormal, for
    :data:`DESIGN_CLASSES`. ``probabilistic``: the
    errors that grow with d (the sums of the mean and of the squares, Welford's running
    updates) take :func:`gamma_tilde` (about :math:`\lambda\sqrt d\,u`) for :func:`gamma_n`
    (:math:`d u`), on every row (True) or on the rows a (B, 1) boolean array marks
    (:func:`random_rows`); the rest, the reciprocal square root's bias and the caps, stay worst
    cases."""
    A = ACC[acc]
    u, eta, nu = A["u"], A["eta"], A["nu"]
    rand = probabilistic  # False, True, or per row (B, 1): where the model is taken to hold

    def either(worst, n):  # the worst case, or the probabilistic bound where the model holds
        if np.ndim(rand) == 0:
            return gamma_tilde(n, u) if rand else worst
        return np.where(rand, gamma_tilde(n, u), worst)

    def g_sum(n, u):  # the sums' error, growing with d
        return either(gamma_n(n, u), n)

    def n_u(n):  # n u, first order (Welford's terms)
        return either(n * u, n)

    psi = gamma_n(5, u)
    r = rstd * (1 + 2.0**-40)
    root_eps = math.sqrt(eps_hat * (1 - u)) if eps_hat > 0 else 0.0

    def eps_cap(dmu, k):  # |n^_i| <= (|z_i|/r + dmu)(1+u)^k (1+psi) / sqrt(eps^): w >= eps^
        if root_eps == 0:
            return None
        f = (1 + u) ** (k + 1) * (1 + psi) / root_eps * (1 + 2.0**-40)
        with np.errstate(divide="ignore", invalid="ignore"):
            return (1 + f / r, f * dmu)

    if op == "rms_norm":
        rho = g_sum(d + 3, u) + nu * r * r
        cls = [_line(_R(rho, rho, psi), 0.0, u, 1, eta)] if need_lines else []
        if eps_hat >= A["cap_eps"]:
            cls.append(
                (
                    1.0,
                    math.sqrt(d) * (1 + u) * (1 + psi) / math.sqrt(1 - gamma_n(d + 3, u)) * (1 + u),
                )
            )
        cap = eps_cap(0.0, 1)
        if cap is not None:
            cls.append(cap)
        out = [cls] if any(c in KERNEL_CLASSES for c in classes) else []
        if need_lines:
            out += _design_lines(classes, cls, _R(rho, rho, psi), 0.0, u, 1, eta, u_in, eta_in)
        return out, dict(rho_max=np.broadcast_to(rho, r.shape), D=np.zeros_like(r))
    M, X, m, q = with_x
    lnd, l2d = math.log(d), math.ceil(math.log2(d)) if d > 1 else 0
    # T: two-pass, any order
    dmu_T = g_sum(d + 1, u) * M + eta
    D_T = dmu_T * r
    rlo_T = g_sum(d + 5, u) + nu * r * r
    rhi_T = rlo_T + (1 + g_sum(d + 5, u)) * D_T * D_T
    cls_T = [_line(_R(rlo_T, rhi_T, psi), D_T, u, 2, eta)] if need_lines else []
    if eps_hat >= A["cap_eps"]:
        cls_T.append(
            (1.0, math.sqrt(d) * (1 + u) * (1 + psi) / math.sqrt(1 - gamma_n(d + 5, u)) * (1 + u))
        )
    cap = eps_cap(dmu_T, 2)
    if cap is not None:
        cls_T.append(cap)
    # W: Welford, Chan's merges
    cX = 3 * (2 + lnd) + 7 * l2d
    # Welford's mean: step k's rounding reaches the end scaled by k/d (a sum of d terms)
    E_W = (n_u(d) * M + u * cX * X + (d + cX) * eta) * (1 + g_sum(2 * d + cX, u))
    D_W = E_W * r
    first = (
        2 * n_u(d - 1) * q
        + 6 * u * math.sqrt(2 * (1 + lnd)) * q
        + (4 / 3) * u * np.abs(m) * r * (d + 1) ** 1.5 / d * np.sqrt(q)
    )
    rlo_W = g_sum(d + 5, u) + (1 + g_sum(d + 5, u)) * first + nu * r * r
    rhi_W = rlo_W + (4 + l2d) * (1 + gamma_n(d + 5, u)) * D_W * D_W
    cls_W = [_line(_R(rlo_W, rhi_W, psi), D_W, u, 2, eta)] if need_lines else []
    # |t_i| <= 3.968 sqrt(M2) + c_abs u X: a running or merged mean moves by at most twice its
    # increment (the old mean is a float), each step's M2 term is at least a third of a_k^2
    c_abs = 3.212 + 3.01 * min(l2d, _MERGE_LEVELS)
    grow_W = (1 + psi) * (1 + gamma_n(d + 12, u)) * (1 + u)
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
        d64 = gamma_n(d + 1, u64) * M
        dmu_O = d64 + u * (np.abs(m) + d64) + eta
        D_O = dmu_O * r
        var = q / (r * r)
        err_v = gamma_n(d + 3, u64) * (var + 2 * m * m + 2 * d64 * d64) + (
            2 * np.abs(m) + d64
        ) * d64 * (1 + 2 * u64)
        rho_O = gamma_n(2, u) + err_v * r * r * (1 + u) + nu * r * r
        cls_O = [_line(_R(rho_O, rho_O, psi), D_O, u, 2, eta)] if need_lines else []
        cap = eps_cap(dmu_O, 2)
        if cap is not None:
            cls_O.append(cap)
        lines.append(cls_O)
        rho_max = np.fmax(rho_max, rho_O)
        D = np.fmax(D, D_O)
    if need_lines and any(c in DESIGN_CLASSES for c in classes):
        # the mean stored in the input format: u_in |mean| more, or half a subnormal step where
        # it rounds to a subnormal (a row of variance near or below eps, near 0 in float16)
        D_S = (dmu_T + u_in * (np.abs(m) + dmu_T) + eta_in) * r
        lines += _design_lines(classes, cls_T, _R(rlo_T, rhi_T, psi), D_S, u, 2, eta, u_in, eta_in)
    return lines, dict(rho_max=rho_max, D=D, D_T=D_T, D_W=D_W)


def prune(lines, zmax):
    """Drop the lines and classes that cannot matter on |z| in [0, zmax] for every row of the
    block: a line that another kept line of its class lies below at both ends (the class is
    their minimum), and a class that another kept class lies above at both ends of one of its
    lines (a minimum of lines is concave: above a line at both ends is above it between)."""
    with np.errstate(invalid="ignore", over="ignore"):
        ends = [
            [
                (np.broadcast_to(b, zmax.shape), np.broadcast_to(a * zmax + b, zmax.shape))
                for a, b in cls
            ]
            for cls in lines
        ]
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
    mins = [
        (np.minimum.reduce([e[0] for e in ce]), np.minimum.reduce([e[1] for e in ce]))
        for _, ce in kept
    ]
    gone = set()
    for c, (_, ce) in enumerate(kept):
        if any(
            o != c and o not in gone and any(below(e, mins[o]) for e in ce)
            for o in range(len(kept))
        ):
            gone.add(c)
    return [kept[c][0] for c in range(len(kept)) if c not in gone]


def evaluate(lines, core):
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


def finish(Ec, ya, fmt, accf):
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
