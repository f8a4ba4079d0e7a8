"""Chapter 2 (the article, and the stability note's claims on a large epsilon and a constant
input): what the book glues is what SymPy and lneps compute, recomputed here."""

import math
from fractions import Fraction

import numpy as np
import pytest
import sympy as sp

import lneps
from lneps.book import symbolic as sym
from notebooks import glued, read, stream_text

NB = "what_epsilon_does.ipynb"


@pytest.fixture(scope="module")
def g():
    return glued(NB)


def test_mean_square_facts_are_glued(g):
    facts = sym.mean_square_facts()
    assert g["ms_at_eps"] == str(facts["at_q_eq_eps"]) == "1/2"
    assert g["ms_lim0"] == "0" and g["ms_limoo"] == "1"


def test_measured_curve_lies_on_the_formula(g):
    ratio = np.logspace(-6, 6, 25)
    t = np.sqrt(1.5 * ratio * 1e-5)
    measured = lneps.normalized_variance(np.stack([-t, 0 * t, t], axis=1), eps=1e-5)
    assert np.allclose(measured, ratio / (ratio + 1), rtol=1e-13, atol=0)
    assert 0 <= g["curve_error"] < 1e-14


def test_seed_004_eps_too_large(g):
    assert round(np.sqrt(0.001 + 0.1), 3) == 0.318  # the seed's "~0.3", to three digits
    assert g["big_divisor"] == pytest.approx(np.sqrt(0.101), rel=1e-15)
    assert g["big_divisor_data"] == pytest.approx(np.sqrt(0.001), rel=1e-15)
    assert g["big_divisor_flat"] == pytest.approx(np.sqrt(0.1), rel=1e-15)
    assert g["big_shrink"] == pytest.approx(0.001 / 0.101, rel=1e-12)


def test_constant_input(g):
    assert g["flat_core"] == str(sym.exact_core([5, 5, 5], sp.Rational(1, 10**5))) == "(0, 0, 0)"
    assert g["flat_is_beta"] is True


def test_z_123_exact(g):
    assert g["core_third"] == "(-1, 0, 1)"
    four_thirds = [sp.sympify(e) for e in g["core_four_thirds"].strip("()").split(",")]
    assert [sp.simplify(e * sp.sqrt(2)) for e in four_thirds] == [-1, 0, 1]
    assert 0 <= g["float_gap_123"] < 1e-15


def test_shift_and_scaling(g):
    assert g["shift_diff"] == "(0, 0, 0)"
    assert 0 <= g["shift_err"] < 1e-12
    assert g["scale_check"] == "0"
    assert g["scale_solutions"] == "[1]" and g["scale_solution"] == "1"
    assert g["scale_eps_zero"] == "1"


def test_z_123_is_shown_as_typeset_math(g):
    # the exact core for eps = 4/3, as LaTeX for the prose (not Python's sqrt(2)/2)
    (tex,) = [o["data"]["application/papermill.record/text/markdown"]
              for c in read(NB).cells if c.cell_type == "code" for o in c.outputs
              if o.get("metadata", {}).get("scrapbook", {}).get("name") == "core_four_thirds_tex"]
    assert tex.startswith("$") and tex.endswith("$") and "\\sqrt{2}" in tex and "sqrt(" not in tex


def test_a_large_eps_keeps_the_size_a_small_eps_erases_it(g):
    # The stability note: with a large eps "the network can no longer distinguish high-variance
    # from low-variance representations". The core's size is sqrt(q / (q + eps)).
    size = lambda q, eps: math.sqrt(q / (q + eps))  # noqa: E731
    assert g["size_large_lo"] == pytest.approx(size(1e-4, 0.1), rel=1e-12)
    assert g["size_large_hi"] == pytest.approx(size(1e-2, 0.1), rel=1e-12)
    assert g["size_small_lo"] == pytest.approx(size(1e-4, 1e-5), rel=1e-12)
    assert g["size_small_hi"] == pytest.approx(size(1e-2, 1e-5), rel=1e-12)
    assert g["size_ratio_large"] == pytest.approx(size(1e-2, 0.1) / size(1e-4, 0.1), rel=1e-12)
    assert g["size_ratio_small"] == pytest.approx(size(1e-2, 1e-5) / size(1e-4, 1e-5), rel=1e-12)
    # large eps: the hundredfold variance shows (nearly the factor 10 of the spreads) ...
    assert 9 < g["size_ratio_large"] < 10
    # ... small eps: both normalized to about 1
    assert 1 < g["size_ratio_small"] < 1.1


def test_exercise_sizes_with_eps_1e3(g):
    sizes = [math.sqrt(q / (q + 1e-3)) for q in (1e-4, 1e-3, 1e-2)]
    assert g["ex3_sizes"] == ", ".join(f"{s:.3f}" for s in sizes)
    assert g["ex3_mid"] == pytest.approx(math.sqrt(0.5), rel=1e-12)


def test_unequal_gains_and_biases_move_the_mean_and_variance(g):
    core = [Fraction(-1), Fraction(0), Fraction(1)]  # z = (1, 2, 3), eps = 1/3: q + eps = 1

    def stats(gamma, beta):
        y = [gi * ui + bi for gi, ui, bi in zip(gamma, core, beta)]
        m = sum(y) / 3
        return m, sum((yi - m) ** 2 for yi in y) / 3

    assert g["gb_plain"] == "2/3"  # q / (q + eps) with q = 2/3
    assert (g["gb_equal_mean"], g["gb_equal_var"]) == tuple(map(str, stats([2] * 3, [1] * 3)))
    assert g["gb_equal_var"] == str(4 * Fraction(2, 3))  # g^2 q / (q + eps)
    assert (g["gb_gamma_mean"], g["gb_gamma_var"]) == tuple(map(str, stats([1, 2, 3], [0] * 3)))
    assert (g["gb_gamma_mean"], g["gb_gamma_var"]) == ("2/3", "26/9")
    assert (g["gb_beta_mean"], g["gb_beta_var"]) == tuple(map(str, stats([1] * 3, [0, 0, 3])))


def test_the_scaling_table_shows_eps_breaking_invariance():
    text = next(t for t in stream_text(NB) if "largest change of the core" in t)
    assert "a = 1: largest change of the core 0.0e+00" in text
    change = np.max(np.abs(lneps.layer_norm([1e-3, 2e-3, 3e-3]) - lneps.layer_norm([1.0, 2.0, 3.0])))
    assert f"a = 0.001: largest change of the core {change:.1e}" in text


def test_prose_labels_and_citations():
    text = "\n".join(c.source for c in read(NB).cells if c.cell_type == "markdown")
    assert text.startswith("(ch2)=\n# What epsilon does to the normalization")
    for label in ("(eq-core)", "(eq-mean-square)", "(eq-scaling)"):
        assert label in text
    for key in ("seed000", "seed004", "ba2016layer"):
        assert "{cite}`" + key + "`" in text


def test_seed_004_constant_input_divides_by_sqrt_eps_not_eps(g):
    # Seed 004: "the denominator is at least eps ... division by eps is large but finite".
    # The divisor is sqrt(q + eps) >= sqrt(eps), the output of a constant token is 0, and
    # only the slope is large: eps^(-1/2), the bound of chapter 3.
    eps = 1e-5
    assert g["min_divisor"] == pytest.approx(np.sqrt(eps), rel=1e-15)
    assert lneps.layer_norm(np.full(3, 5.0), eps=eps).tolist() == [0.0, 0.0, 0.0]
    slope = lneps.layer_norm(5.0 + 1e-9 * np.array([-1.0, 0.0, 1.0]), eps=eps)[2] / 1e-9
    assert g["nudge_gain"] == pytest.approx(slope, rel=1e-12)
    assert g["nudge_gain"] == pytest.approx(eps**-0.5, rel=1e-4)
    assert g["nudge_bound"] == pytest.approx(eps**-0.5, rel=1e-15)


def test_counts_and_answers_quoted_in_the_prose(g):
    assert g["sweep_decades"] == 12  # logspace(-6, 6): twelve decades of q/eps
    assert g["big_ratio"] == pytest.approx(0.001 / 0.1, rel=1e-15)
    # Check yourself 1: q = 3 eps gives a core variance of 3/4, from the SymPy formula.
    assert sp.sympify(g["ms_at_3eps"]) == sp.Rational(3, 4)
    assert sp.simplify(sym.core_mean_square(3).subs(sym.Q, 3 * sym.EPS) - sp.Rational(3, 4)) == 0


def test_mean_and_mean_square_hold_for_the_quoted_range_of_d(g):
    assert (g["ms_d_min"], g["ms_d_max"]) == (2, 6)
    for d in range(g["ms_d_min"], g["ms_d_max"] + 1):
        assert sym.core_mean(d) == 0
        assert sp.simplify(sym.core_mean_square(d) - sym.Q / (sym.Q + sym.EPS)) == 0
