"""lneps.book.symbolic: the SymPy results themselves, compared with the seed's closed forms."""

import numpy as np
import pytest
import sympy as sp

import lneps
from lneps.book import symbolic as sym

EPS, Q = sym.EPS, sym.Q
A = sp.Symbol("a", positive=True)


def is_zero(expr) -> bool:
    return sp.simplify(expr) == 0


@pytest.mark.parametrize("d", range(2, 7))
def test_core_has_mean_zero_and_mean_square_q_over_q_plus_eps(d):
    assert sym.core_mean(d) == 0
    assert is_zero(sym.core_mean_square(d) - Q / (Q + EPS))


def test_mean_square_half_at_q_eq_eps_and_its_limits():
    facts = sym.mean_square_facts()
    assert facts == {"at_q_eq_eps": sp.Rational(1, 2), "limit_q_to_0": 0, "limit_q_to_oo": 1}


def test_z_123_in_rational_arithmetic():
    third = sym.exact_core([1, 2, 3], sp.Rational(1, 3))
    four_thirds = sym.exact_core([1, 2, 3], sp.Rational(4, 3))
    assert third == (-1, 0, 1)
    assert all(isinstance(e, sp.Integer) for e in third)
    expected = [sp.Integer(k) / sp.sqrt(2) for k in (-1, 0, 1)]
    assert all(is_zero(got - want) for got, want in zip(four_thirds, expected))
    assert not any(e.has(sp.Float) for e in four_thirds)


def test_constant_input_core_is_exactly_zero():
    assert sym.exact_core([5, 5, 5, 5], sp.Rational(1, 10**5)) == (0, 0, 0, 0)


@pytest.mark.parametrize("d", [2, 3, 4])
def test_shift_invariance_is_exact(d):
    assert sym.shift_invariance(d) == (0,) * d


@pytest.mark.parametrize("d", [2, 3, 4])
def test_scaling_factor_derived_from_the_definition(d):
    f = sym.scaling_factor(d, A)
    assert is_zero(f - A * sp.sqrt(Q + EPS) / sp.sqrt(A**2 * Q + EPS))
    assert is_zero(f - sp.sqrt(Q + EPS) / sp.sqrt(Q + EPS / A**2))  # the seed's form
    assert not is_zero(f - 1)


def test_scaling_equality_only_at_a_equal_1_and_exact_at_eps_0():
    assert sym.scaling_equality_solutions(3) == [1]
    assert sym.scaling_factor_at_eps_zero(3) == 1


@pytest.mark.parametrize("d", range(2, 17))
def test_check_jacobian_proves_the_closed_form(d):
    assert sym.check_jacobian(d) is True


def _without_vvT(i, j, v, d, s):
    return (sp.Integer(i == j) - sp.Rational(1, d)) / s


def _halved(i, j, v, d, s):
    return (sp.Integer(i == j) - sp.Rational(1, d)) / s - v[i] * v[j] / (2 * d * s**3)


def _one_entry_off(i, j, v, d, s):
    base = sym.closed_form_entry(i, j, v, d, s)
    return base + (v[0] * v[1] / s**5 if (i, j) == (d - 1, 0) else 0)


def _wrong_power(i, j, v, d, s):
    return (sp.Integer(i == j) - sp.Rational(1, d)) / s - v[i] * v[j] / (d * s**2)


@pytest.mark.parametrize("wrong", [_without_vvT, _halved, _one_entry_off, _wrong_power])
@pytest.mark.parametrize("d", [2, 3, 5, 9])
def test_check_jacobian_rejects_wrong_formulas(wrong, d):
    assert sym.check_jacobian(d, wrong) is False


def test_check_jacobian_decides_on_the_hyperplane():
    # Adding v_i (v_1 + ... + v_d) / s^3 changes nothing, since 1^T v = 0: still proved.
    def same_on_hyperplane(i, j, v, d, s):
        return sym.closed_form_entry(i, j, v, d, s) + v[i] * sp.Add(*v) / s**3

    assert sym.check_jacobian(5, same_on_hyperplane) is True


def test_symbolic_entries_match_direct_differentiation_and_numpy():
    # Independent route for d = 3: SymPy differentiates u(z) written out in z.
    ln = sym.definition(3)
    point = {ln.z[0]: sp.Rational(3, 10), ln.z[1]: sp.Rational(-7, 5), ln.z[2]: 2, EPS: sp.Rational(1, 7)}
    direct = sp.Matrix(3, 3, lambda i, j: sp.diff(ln.u[i], ln.z[j])).subs(point)
    v_at = [vi.subs(point) for vi in ln.v]
    s_at = sp.sqrt(ln.q.subs(point) + point[EPS])
    J = sym.jacobian_entries(3).subs({**dict(zip(sp.symbols("v_1:4", real=True), v_at)), sym.S: s_at})
    assert (direct - J).applyfunc(sp.simplify) == sp.zeros(3, 3)
    numeric = lneps.jacobian([0.3, -1.4, 2.0], eps=1 / 7)
    assert np.allclose(np.array(direct, dtype=float), numeric, rtol=1e-13, atol=1e-15)


def test_directional_derivative_for_every_d():
    dd = sym.directional_derivative()
    d, vh = dd["d"], dd["vh"]
    assert is_zero(dd["Ph"] - 1 / sp.sqrt(Q + EPS))
    assert is_zero(dd["v"] + vh / (d * (Q + EPS) ** sp.Rational(3, 2)))


EXPECTED_EIGENVALUES = {
    "one": sp.Integer(0),
    "radial": EPS / (Q + EPS) ** sp.Rational(3, 2),
    "tangential": 1 / sp.sqrt(Q + EPS),
    "constant_input": 1 / sp.sqrt(EPS),
}


@pytest.mark.parametrize("d", [3, 4])
def test_eigenvalues_derived_from_the_symbolic_jacobian(d):
    ev = sym.eigen_predictions(d)
    assert set(ev) == set(EXPECTED_EIGENVALUES)
    for key, want in EXPECTED_EIGENVALUES.items():
        assert is_zero(ev[key] - want), key


def _matrix(entry, d):
    return sp.Matrix(d, d, lambda i, j: entry(i, j, sp.symbols(f"v_1:{d + 1}", real=True), d, sym.S))


def test_eigenvalues_of_the_closed_form_agree():
    ev = sym.eigen_predictions(4, _matrix(sym.closed_form_entry, 4))
    assert all(is_zero(ev[k] - want) for k, want in EXPECTED_EIGENVALUES.items())


@pytest.mark.parametrize("d", [3, 4])
def test_a_wrong_jacobian_gives_wrong_eigenvalues(d):
    # Without the v v^T term, v is an eigenvector with eigenvalue 1/s, not eps/s^3.
    ev = sym.eigen_predictions(d, _matrix(_without_vvT, d))
    assert is_zero(ev["radial"] - 1 / sp.sqrt(Q + EPS))
    assert not is_zero(ev["radial"] - EXPECTED_EIGENVALUES["radial"])
    halved = sym.eigen_predictions(d, _matrix(_halved, d))["radial"]
    assert is_zero(halved - (Q / 2 + EPS) / (Q + EPS) ** sp.Rational(3, 2))
    # s^2 in place of s^3: 1/s - q/s^2, not eps/s^3.
    wrong = sym.eigen_predictions(d, _matrix(_wrong_power, d))["radial"]
    assert is_zero(wrong - (1 / sp.sqrt(Q + EPS) - Q / (Q + EPS)))
    assert not is_zero(wrong - EXPECTED_EIGENVALUES["radial"])


def test_a_non_symmetric_perturbation_breaks_the_eigenvectors():
    with pytest.raises(AssertionError, match="not an eigenvector"):
        sym.eigen_predictions(4, _matrix(_one_entry_off, 4))


def test_eigen_predictions_needs_a_direction_orthogonal_to_1_and_v():
    with pytest.raises(ValueError, match="d must be >= 3"):
        sym.eigen_predictions(2)
    with pytest.raises(ValueError, match="4 x 4"):
        sym.eigen_predictions(4, sp.eye(3))


def test_definition_rejects_z_of_the_wrong_length():
    with pytest.raises(ValueError, match="z must have d = 3 entries; got 2"):
        sym.definition(3, z=[1, 2])
    assert sym.definition(3, z=[1, 2, 3]).mu == 2


def test_norm_bound_eps_to_the_minus_half_attained_at_constant_input():
    facts = sym.norm_bound_facts()
    assert facts["slopes_negative"] is True
    assert facts["at_r0"] == {"radial": 1, "tangential": 1}
    assert facts["constant_input_times_sqrt_eps"] == 1


@pytest.mark.parametrize("bad", [0, -2, 2.5, True, "3"])
def test_bad_d_is_rejected(bad):
    with pytest.raises(ValueError, match="d must be a positive integer"):
        sym.check_jacobian(bad)
