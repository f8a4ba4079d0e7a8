r"""The correctly rounded kernel behind :func:`lneps.layer_norm` and :func:`lneps.rms_norm`.

For a row of d numbers the exact result is :math:`y_i = \gamma_i\,t_i/\sqrt{s} + \beta_i` with

* layer norm: :math:`t_i = d\,x_i - \sum_j x_j` and :math:`s = \frac1d\sum_j t_j^2 + d^2\varepsilon`
  (that is :math:`(x_i-\mu)/\sqrt{q+\varepsilon}` with no rounded division by d before it);
* RMS norm: :math:`t_i = x_i` and :math:`s = \frac1d\sum_j x_j^2 + \varepsilon`.

It is evaluated in tiers, each with a proven error bound (Ziv's strategy):

A. float64 (16- and 32-bit input). A float16, bfloat16 or float32 row is a set of multiples
   of its smallest spacing Q; when :math:`2d\max|x| < 2^{53}Q` the float64 sum and every
   :math:`t_i` are exact (one rounding-free subtraction each), and rows with a few tiny
   elements are split into a high and a low part whose sums are exact, giving each
   :math:`t_i` rounded once. Then :math:`\sum t_j^2` (over a chunk of at most
   :data:`BLOCK_ELEMENTS` columns, chunks added in double-double) has relative error at most
   :math:`\gamma_n` (n the chunk's length), and the estimate :math:`\hat y` is within
   :math:`E|\gamma_i t_i/\sqrt s|` (plus the rounding of the sum with beta) with
   :math:`E = ((n+5)/2 + 6)\,u`. An element is final when no rounding boundary of the output
   format, and not 0, lies within that bound (:func:`lneps.kernel.rounding.near_boundary`).
B. double-double (float64 input, rows tier A cannot prove, and the elements tier A leaves
   undecided): :mod:`lneps.kernel.double_double`, every quantity to about :math:`2^{-100}` relative with
   a bound carried along; the same boundary test decides. A float64 result it cannot decide
   (a bias cancelling :math:`\gamma u` to its last bits, an element at its row's mean) is
   tried in triple precision (:mod:`lneps.kernel.triple`).
C. exact (:mod:`lneps.kernel.exact`). An element still undecided lies on or within a hair of
   a boundary: exact ties and exact cancellation, recognized and rounded exactly with
   error-free float64 operations, vectorized; what remains (rare) by rational arithmetic,
   rounded exactly by the kernel's own :func:`lneps.kernel.surd.round_surd` (the kernel
   never imports :mod:`lneps.oracle`, which judges it).
   :mod:`lneps.kernel.undecided` gathers the undecided elements of all blocks and takes them
   through these tiers.

So the result is the output format's nearest number to the exact value, ties to even, for
every finite input: float16, bfloat16, float32 and float64 alike. An exact zero is +0; a
nonzero value that rounds to zero keeps its sign. Rows holding NaN or inf follow the plain
float64 formula (NaN or 0 in that row only), and a constant row with ε = 0 is 0/0 = NaN.

Rows are processed in blocks of about :data:`BLOCK_ELEMENTS` elements, and a longer row in
chunks of that many columns (each pass over a row reads it chunk by chunk), so the working
memory is a few megabytes beyond the output, whatever the shape.
"""


from .driver import BLOCK_ELEMENTS, estimate_error, normalize
from .with_stats import normalize_with

__all__ = ["normalize", "normalize_with", "estimate_error", "BLOCK_ELEMENTS"]
