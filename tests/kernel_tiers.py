"""What the kernel's tests share: equality to the bit (signed zeros, NaN), and forcing the
kernel onto one of its tiers, so that every tier is judged on the same inputs."""

import numpy as np

from lneps.kernel import double_double as kernel_dd, float64 as kernel_float64, undecided as kernel_undecided
from lneps.kernel import triple as kernel_triple, with_stats as kernel_with_stats

F64 = np.float64


def same(a, b):
    """Equal values, zeros of the same sign, or both NaN."""
    a, b = np.asarray(a, dtype=F64), np.asarray(b, dtype=F64)
    return ((a == b) & (np.signbit(a) == np.signbit(b))) | (np.isnan(a) & np.isnan(b))


def _force(monkeypatch, tier):
    """Send the undecided (or every) element to one tier: "double-double" (16- and 32-bit rows
    skip the float64 tier), "no-vectorized-exact" (the exact tier's float64 settling finds
    nothing), "triple" (nothing is decided before triple precision), "fractions" (nothing
    before rational arithmetic)."""
    if tier in ("double-double", "triple", "fractions"):
        kinds = kernel_float64.row_kinds

        def unproven(xin, chunks=None):
            exact, split, finite, top = kinds(xin, chunks)
            return exact & False, split & False, finite, top

        monkeypatch.setattr(kernel_float64, "row_kinds", unproven)
    if tier in ("no-vectorized-exact", "triple", "fractions"):
        monkeypatch.setattr(kernel_undecided, "round_where_exact",
                            lambda rows, k, x, g, b, dt: (np.zeros(len(k)), np.zeros(len(k), dtype=bool)))
        monkeypatch.setattr(kernel_with_stats, "exact_affine",
                            lambda th, tl, sigma, g, b, dt: (np.zeros(len(th)), np.zeros(len(th), dtype=bool)))
    if tier in ("triple", "fractions"):
        finish = kernel_dd.finish_values

        def undecided(*args):
            y, flags = finish(*args)
            return y, np.ones_like(flags)

        for module in (kernel_undecided, kernel_dd):  # tier B on rows and on elements, normalize_with's
            monkeypatch.setattr(module, "finish_values", undecided)
    if tier == "fractions":
        values = kernel_triple.TripleRows.values

        def nothing(self, *args):
            y, flags = values(self, *args)
            return y, np.ones_like(flags)

        monkeypatch.setattr(kernel_triple.TripleRows, "values", nothing)
