r"""Error-free transformations of float64 arithmetic, as the kernel uses them, for code outside
the reference that needs exact sums and products (the book's exactly rounded network):
:func:`two_sum` (Knuth: :math:`a + b = s + e` exactly), :func:`split` (Veltkamp: a float64
number as two halves of 26 bits) and :func:`two_prod` (Dekker: :math:`ab = p + e` exactly),
elementwise on float64 arrays, exact barring overflow and underflow.

>>> import numpy as np
>>> s, e = two_sum(np.array([1.0]), np.array([2.0**-60]))
>>> float(s[0]), float(e[0]) == 2.0**-60
(1.0, True)
"""

from .kernel.expansions import split, two_prod, two_sum

__all__ = ["two_sum", "split", "two_prod"]
