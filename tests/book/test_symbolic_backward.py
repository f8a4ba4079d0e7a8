"""lneps.book.symbolic_backward: SymPy's derivatives of the backward pass against the closed forms,
and wrong formulas rejected."""

import pytest
import sympy as sp

from lneps.book import symbolic_backward as sb
from lneps.book.symbolic import EPS, Q


def test_vjp_coefficients_in_invariants():
    r = sb.vjp_in_invariants()
    s = sp.sqrt(Q + EPS)
    assert sp.simplify(r["Pg"] - 1 / s) == 0
    assert sp.simplify(r["v"] + r["gv"] / (r["d"] * s**3)) == 0
    assert sb.vjp_claim_holds(r) is True
    wrong = dict(r, v=r["v"] / 2)
    assert sb.vjp_claim_holds(wrong) is False


@pytest.mark.parametrize("d", range(2, 9))
def test_check_vjp_proves_the_formula_for_explicit_d(d):
    assert sb.check_vjp(d) is True


def _no_radial(j, G, V, d, s):
    return (G[j] - sp.Add(*G) / d) / s


def _no_centering(j, G, V, d, s):
    mean_gu = sp.Add(*[g * v for g, v in zip(G, V)]) / (d * s)
    return (G[j] - (V[j] / s) * mean_gu) / s


def _wrong_power(j, G, V, d, s):
    return sb.vjp_claim_entry(j, G, V, d, s) * s / s**2


@pytest.mark.parametrize("claim", [_no_radial, _no_centering, _wrong_power])
@pytest.mark.parametrize("d", [2, 3, 5])
def test_wrong_formulas_are_rejected(claim, d):
    assert sb.check_vjp(d, claim) is False


def test_parameter_gradients_and_eps_derivative():
    p = sb.parameter_gradients(d=3, tokens=2)
    assert p["gamma_ok"] is True and p["beta_ok"] is True
    e = sb.eps_derivative(d=3)
    assert e["ok"] is True
    z = sp.symbols("z_1:4", real=True)
    assert sp.simplify(e["first"] - (-(2 * z[0] - z[1] - z[2]) / 3) / (2 * (Q + EPS) ** sp.Rational(3, 2))) == 0


def test_rms_vjp():
    r = sb.rms_vjp_in_invariants()
    assert r["ok"] is True
    m = sp.Symbol("m", nonnegative=True)
    assert sp.simplify(r["g"] * sp.sqrt(m + EPS) - 1) == 0
