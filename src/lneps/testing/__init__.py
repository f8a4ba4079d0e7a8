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
  2^{E+1}`, never below the smallest subnormal (:func:`lneps.formats.ulp`); an exact 0 has the
  smallest subnormal as its ulp. ``ulp`` error: :math:`|a-e|` in ulp of :math:`e`;
  ``scaled`` error: :math:`|a-e|` in ulp of :math:`\max(|e|, s)`, with s = ``scale``
  (broadcast against ``actual``), else :math:`|\gamma|` where the op applies it, else 1: an
  error relative to the size of :math:`\gamma u` rather than of a result that cancelled.
* equal to r: equal as numbers (+0 and -0 alike, everything else bitwise) or both NaN. Where a
  or r is NaN or infinite the error is 0 if a equals r and infinite otherwise.

:func:`compare` computes e as above, for every element. :func:`assert_close` grades layer_norm
and rms_norm of float16, bfloat16 or float32 input in one of those formats against the
kernel's float64 estimate instead (within :math:`((d+5)/2+7)\,u` of the exact value, about
:math:`2^{-40}` relative at d = 4096, ``lneps.kernel.estimate_error``), which costs a
fraction of a correctly rounded float64 value: r is still exact, every element whose r or ulp
that distance could change, or whose error lies within it of the bound, is measured exactly,
and the largest errors of the returned :class:`Report` are measured exactly. So every pass or
fail is the exact one; only the Report's arrays, computed on demand, take the exact path.
"""

from ._private.arguments import DEFAULT, OPS, WRT
from ._private.assertions import assert_close, default_tolerance
from ._private.backward_error import backward_bound, backward_scale
from ._private.hard_inputs import Family, families
from ._private.exact_errors import scaled_error
from ._private.forward_error import forward_bound
from ._private.grading import compare
from ._private.kernel_classes import DESIGN_CLASSES, KERNEL_CLASSES
from ._private.grade_report import Report
from ._private.systematic import ScaleBias, ScaleTest, scale_bias
from ._private.two_pass import two_pass_bound

#: The ops :func:`compare` and :func:`assert_close` grade: lneps's four normalizations and the
#: backward passes of layer and RMS norm.
OPS = OPS
#: For each backward op, the gradients ``wrt=`` may name.
WRT = WRT
#: ``eps=DEFAULT`` or ``axis=DEFAULT``: the op's own default, asked for explicitly.
DEFAULT = DEFAULT
#: The classes of correct kernels :func:`forward_bound` covers, each with its own error analysis.
KERNEL_CLASSES = KERNEL_CLASSES
#: Real designs that round inside the kernel to the input format, each with its derived bound:
#: opt in with ``kernels=`` (statistics stored in the input format; the normalized value cast
#: to it, then weighted there). Never part of the default tolerance.
DESIGN_CLASSES = DESIGN_CLASSES

__all__ = [
    "OPS",
    "WRT",
    "DEFAULT",
    "Report",
    "compare",
    "assert_close",
    "default_tolerance",
    "scaled_error",
    "forward_bound",
    "KERNEL_CLASSES",
    "DESIGN_CLASSES",
    "scale_bias",
    "ScaleBias",
    "ScaleTest",
    "two_pass_bound",
    "backward_bound",
    "backward_scale",
    "Family",
    "families",
]
