r"""A test across rows for a systematic scale error: the float32 defects a per-element bound
cannot see.

A worst-case per-element bound for a float32 kernel must allow about :math:`d u` (the
summation order is unknown), thousands of ulp at d = 4096, while two common defects change
every output by less: the unbiased variance scales every row by :math:`1 - 1/(2d)`, eps added
after the square root by about :math:`1 - \varepsilon/\sigma`. But a defect biases every row
alike, and rounding does not. :func:`scale_bias` measures, per row r, the least-squares
relative scale error of the output

.. math::

    s_r = \frac{\sum_i (a_i - y_i) w_i}{\sum_i w_i \gamma_i z_i}, \qquad
    w_i = \gamma_i z_i - \kappa_r \gamma_i,\ \kappa_r = \frac{\sum_i \gamma_i^2 z_i}{\sum_i \gamma_i^2}

(z the exact normalized value, y the exact output; w is :math:`\gamma z` with the direction of
a constant shift, :math:`\gamma`, projected out, so the mean's rounding does not count; without
a gain w = z), and compares their weighted mean over the rows with what a correct kernel can
produce.

Model. For a correct kernel (every kernel of :func:`lneps.testing.forward_bound`'s
model), to first order :math:`s_r` is the relative error of its reciprocal standard deviation
plus the projection of its elementwise roundings. Split it:

* random: the rounding errors of the accumulations (the sum of squares or Welford's M2, the
  squares, the subtractions, Welford's running means), independent and of mean zero (Higham
  and Mary, "A new approach to probabilistic rounding error analysis", SIAM J. Sci. Comput.
  41(5), 2019), each at most u relative. Their sum in :math:`s_r` has Hoeffding scale
  :math:`\sigma_r`, with :math:`\sigma_r^2 = (\tfrac12 u\sqrt{d-1}\,q)^2 +
  (1.5u\sqrt{\textstyle\sum z^4}/d)^2 + (u(1 + |m| r))^2`, q = :math:`\sigma^2 r^2` (every
  partial sum of a sum of squares is at most its total, whatever the order; the last term is
  Welford's running means, for a row whose order is unrelated to its values);
* systematic, bounded: the reciprocal square root's allowed bias (2.5 ulp, :math:`\gamma_5`),
  the roundings of eps, of the division by d and of the addition of eps
  (:math:`\tfrac12 u(\varepsilon r^2 + 3)`), the one-pass float64 variance's error; on the
  negative side the mean's error, which only enlarges the variance
  (:math:`\tfrac12(4 + \log_2 d) D^2`, D the worst-case mean error in units of the output); on
  the positive side the second order (:math:`\tfrac38\rho^2`); on both sides the addends of
  the sum of squares below the ulp of its total, which stagnate rather than round at random
  (error :math:`-b` or :math:`\mathrm{ulp} - b`, at most b: half their share); and every
  elementwise rounding at its largest, projected on w
  (:math:`[(3u + uD)\,\|\gamma z\|\|w\| + c_y\|y\|\|w\| + \tau\sqrt d\,\|w\|]/\sum w\gamma z`,
  :math:`c_y` the last roundings' relative size in the accumulation format).
* random, too: the final rounding to a narrower output format (float16 or bfloat16 output of a
  float32 kernel), to nearest, each element's error at most :math:`u_{out}|y_i|` and of mean
  zero: Hoeffding scale :math:`u_{out}\sqrt{\sum (y_i w_i)^2}/\sum w\gamma z`, about
  :math:`u_{out}/\sqrt d`. Counted as a bias at most (:math:`u_{out}`, the worst case), it
  left the d - 1 variance (:math:`-1/(2d)`) unseen at d = 4096 in 16 bits whatever the rows.

Eligible rows: finite output, :math:`\sum w\gamma z > 0`, D at most 1% (the mean's error far
below :math:`\sigma`), magnitudes that differ (:math:`d\sum z^4/(\sum z^2)^2 \ge 1.25`), at
most a quarter of the squares below :math:`8u` of their total and at most a quarter of the
neighbours equal in the accumulation format. Rows that fail these make rounding errors
systematic (all squares alike: constant rows for RMS norm, the two-valued midpoint rows; runs
of equal addends: a row of numbers far below its mean, whose :math:`x - \hat\mu` all round to
:math:`-\hat\mu`), so they are left out; identical rows (the same exact output) count once.
The model further assumes that the order in which a kernel visits a row is unrelated to its
values (no sorted or periodic rows). With weights :math:`\omega_r = 1/(\sigma_r^2 + A_r^2)` the
statistic is :math:`\bar s = \sum\omega_r s_r/\sum\omega_r`, and a correct kernel gives, with
probability at least :math:`1 - 2e^{-\lambda^2/2}` (Azuma–Hoeffding), :math:`\bar s` within
:math:`[-\bar A_- - \lambda S,\ \bar A_+ + \lambda S]`, the weighted allowances and
:math:`S = \sqrt{\sum\omega_r^2\sigma_r^2}/\sum\omega_r`. :data:`LAMBDA` = 6: a false alarm
has probability at most :data:`FALSE_ALARM` = :math:`3.0\times10^{-8}` per test under the
model (the Hoeffding scale is several times the real spread of the roundings). Fewer than
:data:`MIN_ROWS` = 8 eligible rows: "not applicable" (a single row's structure can mimic a
bias; with 8 distinct rows the d - 1 variance is already caught up to d = 8192 in float32).

Catches (float32, N(0,1) rows, eps = 1e-5): the unbiased variance (:math:`s = -1/(2d)`,
-1.2e-4 at d = 4096, against a threshold near 4e-6 on 16 rows and 2.5e-6 on 64); eps after the
square root (:math:`s \approx -\varepsilon/\sigma + \varepsilon/(2\sigma^2)`, -5e-6; on 16
rows at the edge, on 64 rows clearly); eps ignored or too small (:math:`+\varepsilon/(2\sigma^2)`),
named with the eps the rows imply. The suspects: :func:`scale_bias` names "the d - 1 (unbiased)
variance", "eps added after the square root", "eps ignored" or "eps of about ... used for ...",
when the rows' per-row errors follow that pattern.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

from ...formats import format_of
from .arguments import as_numpy
from .forward_error import abs_mean_max, block_rows, prepare
from .kernel_classes import ACC, DESIGN_CLASSES, Fmt, check_kernels, gamma_n, row_stats

__all__ = ["ScaleBias", "ScaleTest", "scale_bias", "LAMBDA", "FALSE_ALARM", "MIN_ROWS"]

#: Hoeffding's multiple of the scale: the threshold is the allowance plus LAMBDA scales.
LAMBDA = 6.0
#: A bound on the probability that a correct kernel fails the test, under the model.
FALSE_ALARM = 2 * math.exp(-(LAMBDA**2) / 2)
#: The fewest eligible (distinct) rows for a verdict.
MIN_ROWS = 8
_D_MAX = 1e-2
_KURTOSIS_MIN = 1.25

_PATTERNS = ("the d - 1 (unbiased) variance", "eps added after the square root", "eps ignored")


@dataclass(frozen=True)
class ScaleBias:
    """The result of :func:`scale_bias`.

    ``statistic`` is the weighted mean relative scale error :math:`\\bar s` (negative: the
    outputs are too small); a correct kernel keeps it within [``low``, ``high``]; ``threshold``
    is the bound on the side of its sign. ``rows`` eligible distinct rows of ``rows_total``.
    ``false_alarm``: the probability bound for a correct kernel to fail, under the model.
    ``verdict``: "pass", "fail" or "not applicable" (fewer than ``MIN_ROWS`` rows).
    ``suspect`` names the known defect whose pattern the rows match, or is None. ``per_row``
    (:math:`s_r`, NaN where not eligible) and ``eligible`` are arrays over the rows.
    """

    op: str
    dtype: np.dtype
    statistic: float
    low: float
    high: float
    threshold: float
    rows: int
    rows_total: int
    false_alarm: float
    verdict: str
    suspect: str | None
    per_row: np.ndarray = field(repr=False, compare=False)
    eligible: np.ndarray = field(repr=False, compare=False)
    #: the row length, the random part of the threshold (lambda S) and the weighted allowances
    #: on the negative and positive sides (``low = -allowance_low - spread``)
    d: int = 0
    spread: float = float("nan")
    allowance_low: float = float("nan")
    allowance_high: float = float("nan")
    #: the least number of eligible distinct rows the test needs
    min_rows: int = 8

    @property
    def passed(self) -> bool:
        """False only for the verdict "fail"."""
        return self.verdict != "fail"

    def rows_for(self, scale: float) -> int | None:
        r"""About how many rows like these the test needs to catch a systematic relative scale
        error ``scale`` (e.g. :math:`-1/(2d)`, the d - 1 variance): the random part of the
        threshold shrinks as :math:`1/\sqrt{n}`, the allowance does not, so
        :math:`n\,(\lambda S/(|s| - A))^2`, at least ``min_rows``. None where no number
        of rows suffices (:math:`|s|` within the allowance) or the test did not apply."""
        allowance = self.allowance_low if scale < 0 else self.allowance_high
        if self.verdict == "not applicable" or not abs(scale) > allowance:
            return None
        return max(
            self.min_rows, math.ceil(self.rows * (self.spread / (abs(scale) - allowance)) ** 2)
        )

    def coverage(self) -> str:
        """What the test could see on these rows, in words: its verdict, the smallest scale
        error it could have caught, and whether that reaches the d - 1 variance (a relative
        :math:`-1/(2d)`, the defect it exists for); if not, how many rows would."""
        if self.verdict == "not applicable":
            return (
                f"test across rows not applied: {self.rows} eligible distinct rows of {self.rows_total}, "
                f"at least {self.min_rows} needed (rows of distinct values, not repeated or constant); "
                f"a systematic scale error, such as the d - 1 variance, was not looked for"
            )
        text = (
            f"test across rows: {self.verdict} over {self.rows} rows; it catches a systematic relative "
            f"scale error below {self.low:.3g} or above {self.high:.3g}"
        )
        if self.d > 1:
            unbiased = -1 / (2 * self.d)
            if unbiased >= self.low:
                need = self.rows_for(unbiased)
                text += (
                    f"; the d - 1 variance ({unbiased:.3g} at d = {self.d}) is within that, so it could not "
                    f"have been caught: "
                    + (
                        f"about {need} rows like these would catch it"
                        if need
                        else "no number of such rows would"
                    )
                )
        return text

    def __str__(self):
        if self.verdict == "not applicable":
            return (
                f"systematic scale test ({self.op}, {self.dtype}): not applicable, {self.rows} eligible rows "
                f"of {self.rows_total} (at least {MIN_ROWS} needed)"
            )
        text = (
            f"systematic scale test ({self.op}, {self.dtype}): mean relative scale error {self.statistic:.3g} "
            f"over {self.rows} rows, a correct kernel stays within [{self.low:.3g}, {self.high:.3g}] "
            f"(false alarm <= {self.false_alarm:.1g}): {self.verdict}"
        )
        return text + (f"; the pattern of {self.suspect}" if self.suspect else "")


@functools.lru_cache(maxsize=64)
def _probe(d):
    """A fixed random vector: rows with the same exact output have the same fingerprint."""
    return np.random.default_rng(20190101).normal(size=d)


def _q(Z2, d):
    """q = sigma^2 r^2 = sum z^2 / d, at most 1."""
    return np.fmin(Z2 / d, 1.0)


def _fit_eps(sig2, eps, om, stat):
    """The eps' >= 0 whose scale error sqrt((var + eps)/(var + eps')) - 1, weighted, equals the
    statistic (None if eps is 0, or if even eps' = 0 falls short of it)."""
    if eps <= 0 or stat <= 0:
        return None
    tot = om.sum()

    def pred(e):
        with np.errstate(all="ignore"):
            v = np.sqrt((sig2 + eps) / (sig2 + e)) - 1
        return float((om * v).sum() / tot)

    if not pred(0.0) >= stat:
        return None if not np.isfinite(pred(0.0)) or pred(0.0) < 0.9 * stat else 0.0
    lo, hi = 0.0, eps
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if pred(mid) > stat else (lo, mid)
    return 0.5 * (lo + hi)


def _patterns(op, d, sig2, eps):
    """The per-row relative scale error each known defect predicts (NaN where undefined)."""
    with np.errstate(all="ignore"):
        sig = np.sqrt(sig2)
        none = np.full_like(sig2, np.nan)
        return {
            _PATTERNS[0]: np.sqrt((sig2 + eps) / (sig2 * d / (d - 1) + eps)) - 1 if d > 1 else none,
            _PATTERNS[1]: np.sqrt(sig2 + eps) / (sig + eps) - 1,
            _PATTERNS[2]: np.where(sig2 > 0, np.sqrt((sig2 + eps) / sig2) - 1, np.nan)
            if eps > 0
            else none,
        }


def scale_bias(
    op,
    *,
    actual,
    exact=None,
    x,
    gamma=None,
    beta=None,
    eps,
    axis=-1,
    dtype=None,
    stats=None,
    block=1 << 16,
) -> ScaleBias:
    r"""Test ``actual`` (a kernel's output of ``op`` on ``x``) for a scale error common to its
    rows, beyond what a correct kernel's rounding can produce: a :class:`ScaleBias`.

    Model, statistic, threshold and false-alarm probability: the module docstring
    (``lneps.testing._private.systematic``). ``op`` is "layer_norm" or "rms_norm"; ``exact`` the op's
    correctly rounded float64 result on x (gamma and beta applied; computed if None, which
    needs ``beta``); ``stats`` ((mean, rstd) or rstd, float64, as ``return_stats=True``
    gives them) spares recomputing the statistics; ``dtype`` is the output format (default
    actual's). x, gamma, eps and axis as :func:`lneps.testing.forward_bound`.

    >>> import numpy as np, lneps, lneps.testing as lt
    >>> from lneps.testing import scale_bias
    >>> x = lt.families(np.float32, 4096, rows=16)["normal"].x
    >>> exact = lneps.layer_norm(x.astype(np.float64), eps=1e-5)
    >>> good = lneps.layer_norm(x, eps=1e-5)  # correctly rounded: no bias
    >>> scale_bias("layer_norm", actual=good, exact=exact, x=x, eps=1e-5).verdict
    'pass'
    >>> d = x.shape[-1]
    >>> unbiased = lneps.layer_norm(x, eps=1e-5) * np.float32(np.sqrt((d - 1) / d))
    >>> result = scale_bias("layer_norm", actual=unbiased, exact=exact, x=x, eps=1e-5)
    >>> result.verdict, result.suspect
    ('fail', 'the d - 1 (unbiased) variance')
    """
    a_in = as_numpy(actual, "actual")
    test = ScaleTest(
        op,
        x=x,
        gamma=gamma,
        beta=beta,
        eps=eps,
        axis=axis,
        dtype=a_in.dtype if dtype is None else dtype,
        exact=exact,
        stats=stats,
        block=block,
        actual=a_in,
    )
    return test.result


class ScaleTest:
    """:func:`scale_bias`'s work on x, done once: :meth:`check` then grades any number of
    kernels' outputs on the same input (the zoo's grading). Keeps one float64 array of x's
    size; :func:`scale_bias` on one output keeps none. Arguments as :func:`scale_bias`, with
    ``dtype`` the output format.

    >>> import numpy as np, lneps
    >>> from lneps.testing import families
    >>> from lneps.testing import ScaleTest
    >>> x = families(np.float32, 1024, rows=32)["normal"].x
    >>> test = ScaleTest("layer_norm", x=x, eps=1e-5, dtype=np.float32)
    >>> [test.check(lneps.layer_norm(x, eps=e)).verdict for e in (1e-5, 0.0)]
    ['pass', 'fail']
    """

    def __init__(
        self,
        op,
        *,
        x,
        gamma=None,
        beta=None,
        eps,
        axis=-1,
        dtype,
        exact=None,
        stats=None,
        block=1 << 16,
        actual=None,
        kernels=None,
    ):
        P = self._P = prepare(op, x, gamma, beta, eps, dtype, axis, exact, stats)
        # the design classes asked for (kernels=) round inside the kernel: more random error
        P["design"] = set(() if kernels is None else check_kernels(kernels)) & set(DESIGN_CLASSES)
        self.op, self.d, self.eps, self.dtype = op, P["d"], P["eps"], P["dt"]
        a2 = None
        if actual is not None:
            if actual.shape != P["xa"].shape:
                raise ValueError(f"actual has shape {actual.shape}; x has shape {P['xa'].shape}")
            a2 = P["rows"](actual)
        self.rows, self._w = _row_pass(P, a2, keep_w=actual is None, block=block)
        if actual is not None:
            self.result = self._aggregate(self.rows["s"], self.rows["ok"].astype(bool))

    def check(self, actual) -> ScaleBias:
        """The :class:`ScaleBias` of ``actual`` (x's shape, the output format given)."""
        a = as_numpy(actual, "actual")
        if a.shape != self._P["xa"].shape:
            raise ValueError(f"actual has shape {a.shape}; x has shape {self._P['xa'].shape}")
        with np.errstate(all="ignore"):
            diff = self._P["rows"](a).astype(np.float64)
            fin = np.isfinite(diff).all(axis=1)
            diff -= self._P["y2"]
            s = np.einsum("ij,ij->i", diff, self._w) / self.rows["W"]
        return self._aggregate(s, self.rows["ok"].astype(bool) & fin)

    def _aggregate(self, s_all, ok):
        R = self.rows
        nrows = s_all.shape[0]
        ok = ok & np.isfinite(s_all)
        idx = np.nonzero(ok)[0]
        if idx.size:
            _, first = np.unique(R["fp"][idx], return_index=True)
            idx = idx[np.sort(first)]
        eligible = np.zeros(nrows, dtype=bool)
        eligible[idx] = True
        per_row = np.where(eligible, s_all, np.nan)
        n = int(idx.size)
        if n < MIN_ROWS:
            nan = float("nan")
            return ScaleBias(
                self.op,
                self.dtype,
                nan,
                nan,
                nan,
                nan,
                n,
                nrows,
                FALSE_ALARM,
                "not applicable",
                None,
                per_row,
                eligible,
                d=self.d,
                min_rows=MIN_ROWS,
            )
        s = s_all[idx]
        sig = R["sig"][idx]
        A2, An, Ap = R["A2"][idx], R["An"][idx], R["Ap"][idx]
        om = 1 / (sig * sig + (A2 + np.fmax(An, Ap)) ** 2)
        tot = om.sum()
        stat = float((om * s).sum() / tot)
        S = float(np.sqrt((om * om * sig * sig).sum()) / tot)
        low = float(-(om * (A2 + An)).sum() / tot - LAMBDA * S)
        high = float((om * (A2 + Ap)).sum() / tot + LAMBDA * S)
        verdict = "pass" if low <= stat <= high else "fail"
        noise = float(np.sqrt((om * sig * sig).sum() / tot)) * LAMBDA + float(
            (om * (A2 + np.fmax(An, Ap))).sum() / tot
        )
        suspect = (
            _suspect(self.op, self.d, self.eps, R["sig2"][idx], s, om, stat, low, high, noise)
            if verdict == "fail"
            else None
        )
        return ScaleBias(
            self.op,
            self.dtype,
            stat,
            low,
            high,
            high if stat >= 0 else -low,
            n,
            nrows,
            FALSE_ALARM,
            verdict,
            suspect,
            per_row,
            eligible,
            d=self.d,
            spread=LAMBDA * S,
            allowance_low=float((om * (A2 + An)).sum() / tot),
            allowance_high=float((om * (A2 + Ap)).sum() / tot),
            min_rows=MIN_ROWS,
        )


def _row_pass(P, a2, keep_w, block):
    """One pass over the rows: per-row arrays (s if ``a2`` is given, W, sig, the allowances,
    eligibility, fingerprints, variances) and, if ``keep_w``, the weights w (rows, d)."""
    op, d, acc, g, e_ = P["op"], P["d"], P["acc"], P["g"], P["eps"]
    A = ACC[acc]
    u = A["u"]
    fmt = Fmt(P["dt"])
    accf = Fmt(np.float64 if acc == 64 else np.float32)
    c_y = (
        2 * u if acc == 64 else u
    )  # the last roundings in the accumulation format: a bias, at most
    # the rounding to a narrower output format: to nearest, of mean zero, one per element (random)
    u_out = 0.0 if fmt.dt == accf.dt else fmt.u
    tau = 0.5 * fmt.tiny + A["eta"]
    psi = gamma_n(5, u)
    nrows = P["x2"].shape[0]
    keys = ("s", "W", "sig", "A2", "An", "Ap", "ok", "fp", "sig2", "M", "X")
    acc_rows = {k: np.empty(nrows) for k in keys}
    w_store = np.empty((nrows, d)) if keep_w else None
    probe = _probe(d)
    g2sum = None
    if g is not None:
        gg = np.broadcast_to(g, (1, d)).astype(np.float64)
        g2sum = float(np.einsum("ij,ij->", gg, gg))
    # the gain's distinct values by column, for the output rounding's groups (_grouped_norm)
    column = (
        np.zeros(d, dtype=np.int64)
        if g is None
        else np.unique(np.broadcast_to(g, (1, d))[0], return_inverse=True)[1].astype(np.int64)
    )
    B = block_rows(d, block)
    with np.errstate(all="ignore"):
        for r0 in range(0, nrows, B):
            r1 = min(nrows, r0 + B)
            xb = P["x2"][r0:r1].astype(np.float64)
            y = np.asarray(P["y2"][r0:r1], dtype=np.float64)
            rstd = P["rstd"][r0:r1]
            layer = op == "layer_norm"
            if layer:
                mean = P["mean"][r0:r1]
                M, X = abs_mean_max(P["x2"][r0:r1], xb)
                xb -= mean
            xb *= rstd
            z = xb
            if a2 is not None:
                diff = np.subtract(
                    a2[r0:r1], y, dtype=np.float64
                )  # NaN or inf in a row shows in its sums below
            zz = z * z
            Z2 = np.einsum("ij,ij->i", z, z)
            Z4 = np.einsum("ij,ij->i", zz, zz)
            # addends of the sum of squares below the ulp of its total stagnate (error -b, or
            # ulp - b): not random, each at most b; half their share, either way
            T = d * _q(Z2, d) / (rstd[:, 0] * rstd[:, 0])  # the sum of squares, about
            h = (
                accf.ulp(np.fmax(T * (1 + 2 * gamma_n(2 * d + 8, u)), 0.0))
                / np.where(T > 0, T, 1.0)
                * Z2
            )
            small = np.sum(zz, axis=1, where=zz < h[:, None])
            stag = 0.5 * small / np.where(Z2 > 0, Z2, 1.0) * _q(Z2, d)
            # rows where most addends are tiny next to the total (a few elements dominate, the
            # rest alike: their roundings are not random): not eligible
            swamped = np.count_nonzero(zz < 8 * u * Z2[:, None], axis=1) > 0.25 * d
            del small  # zz's buffer is reused for y w below (a block-sized array the fewer)
            # runs of equal addends (many elements far below the mean, so that x - mu rounds
            # to -mu, or a value repeated): their roundings repeat too: not eligible
            zq = z.astype(accf.dt)
            swamped |= np.count_nonzero(zq[:, 1:] == zq[:, :-1], axis=1) > 0.25 * (d - 1)
            del zq
            if g is not None:
                gz = z * gg
                if layer:
                    kappa = (
                        np.einsum("ij,ij->i", gz, np.broadcast_to(gg, gz.shape))[:, None] / g2sum
                    )
                    w = gz - kappa * gg
                else:
                    w = gz
                G2 = np.einsum("ij,ij->i", gz, gz)
            else:
                gz = w = z
                G2 = Z2
            W = Z2 if g is None else np.einsum("ij,ij->i", w, gz)  # w = gz = z: the same sum as Z2
            num = np.einsum("ij,ij->i", diff, w) if a2 is not None else np.zeros(r1 - r0)
            W2 = np.einsum("ij,ij->i", w, w) if w is not z else Z2
            Y2 = np.einsum("ij,ij->i", y, y)
            ok = np.isfinite(Y2) & np.isfinite(Z2) & (np.isfinite(num) if a2 is not None else True)
            fp = y @ probe
            q = np.fmin(Z2 / d, 1.0)[:, None]
            with_x = (M * (1 + 2.0**-40), X, mean, q) if layer else None
            _, info = row_stats(op, rstd, d, acc, P["eps_hat"], with_x, need_lines=False)
            D = np.broadcast_to(info["D"], rstd.shape)[:, 0]
            rho = np.broadcast_to(info["rho_max"], rstd.shape)[:, 0]
            r, qq = rstd[:, 0], q[:, 0]
            two = (
                0.5 * u * (e_ * r * r + 3) + psi + u_out * u_out
            )  # u_out^2: the rounding's bias where
            # the values' density slopes across an output ulp (second order)
            if layer and acc == 32:
                m = mean[:, 0]
                d64 = gamma_n(d + 1, 2.0**-53) * M[:, 0]
                err_v = (
                    gamma_n(d + 3, 2.0**-53) * (qq / (r * r) + 2 * m * m + 2 * d64 * d64)
                    + (2 * np.abs(m) + d64) * d64
                )
                two = two + 0.5 * err_v * r * r
            elem = (
                (3 * u + u * D) * np.sqrt(G2 * W2) + c_y * np.sqrt(Y2 * W2) + tau * np.sqrt(d * W2)
            ) / W
            if g is not None:
                elem = elem + u * D * np.sqrt(g2sum * W2) / W
            sig = np.hypot(
                0.5 * u * math.sqrt(max(d - 1, 0)) * qq * (1 + rho), 1.5 * u * np.sqrt(Z4) / d
            )
            if u_out:
                # elements of one significand and gain round alike: one random error per group
                yw = np.multiply(y, w, out=zz)
                sig = np.hypot(sig, u_out * _grouped_norm(P["x2"][r0:r1], column, yw) / W)
            if "stats_in_input_format" in P["design"]:  # rstd rounded once per row: a scale of
                sig = np.hypot(
                    sig, P["u_in"]
                )  # mean zero within u_in (the mean's is projected out)
            if "cast_then_weighted" in P["design"]:  # the normalized value rounded once more
                yw = np.multiply(y, w, out=zz)
                sig = np.hypot(sig, P["u_in"] * _grouped_norm(P["x2"][r0:r1], column, yw) / W)
            if layer:
                sig = np.hypot(sig, u * (1 + np.abs(mean[:, 0]) * r))
                An = 0.5 * (4 + math.log2(d)) * D * D
            else:
                An = np.zeros_like(sig)
            Ap = 0.375 * rho * rho
            two = two + stag
            ok &= (
                ~swamped
                & (W > 0)
                & (D <= _D_MAX)
                & np.isfinite(r)
                & (d * Z4 >= _KURTOSIS_MIN * Z2 * Z2)
            )
            sl = slice(r0, r1)
            acc_rows["s"][sl] = num / W
            if keep_w:
                w_store[sl] = w
            acc_rows["W"][sl] = W
            acc_rows["sig"][sl] = sig
            acc_rows["A2"][sl] = two + elem
            acc_rows["An"][sl] = An
            acc_rows["Ap"][sl] = Ap
            acc_rows["ok"][sl] = ok
            acc_rows["fp"][sl] = fp
            acc_rows["sig2"][sl] = qq / (r * r)
            if layer:  # mean |x| and max |x|, for lneps.testing._private.deferred_bound.bound_floor
                acc_rows["M"][sl], acc_rows["X"][sl] = M[:, 0], X[:, 0]
    return acc_rows, w_store


def _grouped_norm(x, column, v):
    r"""Per row, :math:`\sqrt{\sum_G (\sum_{i \in G} v_i)^2}` over the groups G of elements
    whose inputs share a significand (sign and exponent aside) and whose gains are equal
    (``column``: the gain's value code by column). Scaled by one number per row, as an RMS
    norm scales x, such elements have the same relative output rounding: one random error,
    not several. With few significands (bfloat16 holds 128) this is several times
    :math:`\|v\|`, and keeps the output rounding's random part honest; a layer norm's
    subtraction of the mean only makes the errors less alike."""
    rows, d = v.shape
    p = format_of(x.dtype).p
    uint = np.dtype(f"u{x.dtype.itemsize}").type
    # the fraction field (the significand), taken in x's own width, then widened once
    key = (np.ascontiguousarray(x).view(uint) & uint((1 << (p - 1)) - 1)).astype(np.int64)
    codes = int(column.max(initial=0)) + 1
    if codes > 1:
        key *= codes
        key += column
    kinds = codes << (p - 1)  # how many keys a row can hold
    if rows * kinds <= 1 << 22:  # few (16-bit inputs, one gain or few): count them, no sort
        key += np.arange(0, rows * kinds, kinds, dtype=np.int64)[:, None]
        sums = np.bincount(key.ravel(), weights=v.ravel(), minlength=rows * kinds)
        sums = sums.reshape(rows, kinds)
        return np.sqrt(np.einsum("ij,ij->i", sums, sums))
    order = np.argsort(key, axis=1, kind="stable")
    ks = np.take_along_axis(key, order, axis=1)
    vs = np.take_along_axis(v, order, axis=1)
    new = np.ones(ks.shape, dtype=bool)
    new[:, 1:] = ks[:, 1:] != ks[:, :-1]
    group = np.cumsum(new.ravel()) - 1
    sums = np.bincount(group, weights=vs.ravel())
    owner = np.repeat(np.arange(rows), d)[new.ravel()]
    return np.sqrt(np.bincount(owner, weights=sums * sums, minlength=rows))


def _eps_pattern(fitted, eps):
    """The name of the eps the rows imply, or None where they imply none or the one given: an
    eps within a factor 2 of ``eps`` names no other eps (a kernel whose rows follow that pattern
    has another defect, a rounded rstd or a 16-bit sum, which only looks like it)."""
    if fitted is None or (eps > 0 and 0.5 <= fitted / eps <= 2):
        return None
    return _PATTERNS[2] if fitted < 0.05 * eps else f"eps of about {fitted:.2g} used for {eps:g}"


def _suspect(op, d, eps, sig2, s, om, stat, low, high, noise):
    """The known defect whose predicted per-row scale error matches the rows, or None: its
    weighted mean lies outside [low, high] (it would show) and within half the test's width of
    the statistic (or 10% of itself), and the rows stray from it by no more than a correct
    kernel's rows stray from 0 (``noise``: LAMBDA per-row scales plus the allowance)."""
    best, best_err = None, None
    tot = om.sum()
    width = high - low
    patterns = _patterns(op, d, sig2, eps)
    fitted = _fit_eps(sig2, eps, om, stat)
    name = _eps_pattern(fitted, eps)
    if name is not None:
        del patterns[_PATTERNS[2]]
        with np.errstate(all="ignore"):
            patterns[name] = np.sqrt((sig2 + eps) / (sig2 + fitted)) - 1
    for name, pred in patterns.items():
        if not np.all(np.isfinite(pred)):
            continue
        p = float((om * pred).sum() / tot)
        if low <= p <= high:
            continue
        err = abs(stat - p)
        resid = float(np.sqrt((om * (s - pred) ** 2).sum() / tot))
        if err <= max(width / 2, 0.1 * abs(p)) and resid <= noise + 0.1 * abs(p):
            if best is None or resid < best_err:  # the pattern that explains the rows best
                best, best_err = name, resid
    return best


def combine(tests) -> ScaleBias:
    """The :class:`ScaleBias` of the rows of several :class:`ScaleTest` made with ``actual``, as
    if they were one: :func:`lneps.testing.assert_close` grades large outputs a block of rows at
    a time, and the test across rows must see every row."""
    tests = list(tests)
    if len(tests) == 1:
        return tests[0].result
    merged = object.__new__(ScaleTest)
    first = tests[0]
    merged.op, merged.d, merged.eps, merged.dtype = first.op, first.d, first.eps, first.dtype
    merged.rows = {k: np.concatenate([t.rows[k] for t in tests]) for k in first.rows}
    return merged._aggregate(merged.rows["s"], merged.rows["ok"].astype(bool))
