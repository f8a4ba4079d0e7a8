"""The input families that break low-precision kernels: :mod:`lneps.families`, drawn for a kernel."""

from __future__ import annotations

import numpy as np

from ..._checks import check_float_dtype, check_positive_int
from ...families import FAMILIES, HARD, Family, names
from .arguments import FORMATS, FORMAT_NAMES

__all__ = ["Family", "families"]


def families(dtype, d, *, rows=64, seed=0, kinds=None) -> dict[str, Family]:
    r"""Hard inputs for a kernel in ``dtype`` (float16, bfloat16, float32, float64): a dict of
    :class:`Family`, x of shape (rows, d), deterministic for ``seed`` (family k of
    :data:`lneps.families.FAMILIES` drawn from ``np.random.default_rng([seed, k])``).

    By default the families of :data:`lneps.families.HARD`; with ``kinds`` every family of those
    kinds of :data:`lneps.families.KINDS` (one, a sequence, or ``"all"``): the book's normal
    families (``mean_1000``, ``sd_300``, ...) and its hand-made rows (``zeros``,
    ``constant_60000``, ..., ``rows`` copies of each) too. With p the format's significand bits:

    * ``normal``: N(0,1);
    * ``offset``: N(0,1) plus :math:`\pm 2^{p-4}` per row: the spacing there is 1/8, and
      subtracting the mean cancels all but about the last 4 of each element's p bits;
    * ``near_constant``: a N(0,10) constant c per row plus k ulp(c), k uniform in -3..3;
    * ``constant``: one N(0,10) number per row;
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

    ``midpoint`` (any family needing an even d) is left out for odd d.

    >>> import numpy as np
    >>> fams = families(np.float16, 768, rows=16)
    >>> list(fams)
    ['normal', 'offset', 'near_constant', 'constant', 'wide_range', 'midpoint', 'cancelling_beta']
    >>> x, gamma, beta = fams["midpoint"]
    >>> x.shape, gamma.shape, gamma.dtype
    ((16, 768), (768,), dtype('float16'))
    >>> every = families(np.float16, 8, rows=2, kinds="all")
    >>> len(every), every["mean_6e4"].x.shape, float(every["constant_60000"].x[0, 0])
    (18, (2, 8), 60000.0)
    """
    dt = check_float_dtype(dtype)
    if dt not in FORMATS:
        raise TypeError(f"dtype must be {FORMAT_NAMES}; got {dt}")
    d, rows = check_positive_int(d, "d"), check_positive_int(rows, "rows")
    wanted = HARD if kinds is None else names(kinds)
    index = {name: k for k, name in enumerate(FAMILIES)}  # a family's seed index
    out = {}
    for name in wanted:
        fam = FAMILIES[name]
        if not (fam.even_d and d % 2):
            out[name] = fam.draw(np.random.default_rng([seed, index[name]]), d, rows, dt)
    return out
