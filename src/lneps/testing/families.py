"""The input families that break low-precision kernels."""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from .._checks import check_float_dtype, check_positive_int
from ..formats import format_of
from ..ulp import ulp
from ._arrays import _FORMATS, _NAMES

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
    f = format_of(dt)
    p, emin, emax = f.p, f.emin, f.emax

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
