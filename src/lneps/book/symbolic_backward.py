r"""SymPy derivations of the backward pass of layer normalization (and RMS normalization).

As in :mod:`lneps.book.symbolic`, every result is derived from the definition
:math:`u_\varepsilon(z) = v/\sqrt{q+\varepsilon}`, :math:`v = Pz`, :math:`q = v\cdot v/d`; the
closed forms below are only the *claims* that SymPy's results are compared with.

For every d the derivation works in invariants. Along a line :math:`z + th`,
:math:`u(z+th) = a(t)\,v + b(t)\,Ph` (chapter 3), so for a fixed upstream gradient
:math:`\hat g = \gamma\odot g` the scalar :math:`L = \hat g\cdot u` becomes
:math:`L(t) = a(t)\,(\hat g\cdot v) + b(t)\,(\hat g\cdot Ph)`. Its derivative at t = 0 is
linear in the two numbers :math:`v\cdot h` and :math:`(P\hat g)\cdot h` (P is symmetric), so
the gradient :math:`\partial L/\partial z` is the same combination of v and :math:`P\hat g`.
"""

from __future__ import annotations

import sympy as sp

from . import symbolic as sym
from .symbolic import EPS, Q, S, definition

__all__ = [
    "vjp_in_invariants",
    "vjp_claim_holds",
    "vjp_claim_entry",
    "check_vjp",
    "parameter_gradients",
    "eps_derivative",
    "rms_vjp_in_invariants",
]

_T = sp.Symbol("t", real=True)
_D = sp.Symbol("d", positive=True, integer=True)


def _gradient_of(dL, vectors: dict) -> dict:
    """Split the linear form ``dL`` in the symbols of ``vectors`` (name -> symbol x·h) into its
    coefficients; AssertionError if anything else is left."""
    coeffs = {name: sp.simplify(dL.coeff(symbol)) for name, symbol in vectors.items()}
    rest = sp.simplify(dL - sum(c * vectors[n] for n, c in coeffs.items()))
    if rest != 0:
        raise AssertionError(f"dL/dt is not linear in {list(vectors)}: {rest}")
    return coeffs


def vjp_in_invariants() -> dict:
    r"""SymPy's :math:`\partial L/\partial z = c_v\,v + c_P\,P\hat g` for :math:`L = \hat g\cdot u_\varepsilon(z)`,
    every d. Returns ``{"v": c_v, "Pg": c_P, "gv": symbol for ĝ·v, "d": d}`` in q, ε, d."""
    vv, vh, hPh, gv, gPh = sp.symbols("vv vh hPh gv gPh", real=True)
    a = 1 / sp.sqrt((vv + 2 * _T * vh + _T**2 * hPh) / _D + EPS)
    L = a * gv + _T * a * gPh  # ĝ·(a v + b Ph), b = t a
    dL = sp.diff(L, _T).subs(_T, 0).subs(vv, _D * Q)
    coeffs = _gradient_of(sp.expand(dL), {"v": vh, "Pg": gPh})
    return {**coeffs, "gv": gv, "d": _D}


def vjp_claim_holds(result=None) -> bool:
    r"""Whether SymPy's coefficients equal the claim
    :math:`(\hat g - \operatorname{mean}(\hat g)\mathbf 1 - u\operatorname{mean}(\hat g\odot u))/\sqrt{q+\varepsilon}`,
    i.e. :math:`c_P = 1/s` (since :math:`P\hat g = \hat g - \operatorname{mean}(\hat g)\mathbf 1`)
    and :math:`c_v = -\hat g\cdot v/(d s^3)`
    (since :math:`u\operatorname{mean}(\hat g\odot u) = v\,(\hat g\cdot v)/(d s^2)`)."""
    r = vjp_in_invariants() if result is None else result
    s = sp.sqrt(Q + EPS)
    return (sp.simplify(r["Pg"] - 1 / s) == 0
            and sp.simplify(r["v"] + r["gv"] / (r["d"] * s**3)) == 0)


def vjp_claim_entry(j, G, V, d, s):
    r"""Entry j of the claim :math:`(\hat g - \operatorname{mean}(\hat g) - u\operatorname{mean}(\hat g\odot u))/s`
    with :math:`u = v/s`, in the symbols :math:`\hat g` = G, v = V and s."""
    mean_g = sp.Add(*G) / d
    mean_gu = sp.Add(*[gi * vi for gi, vi in zip(G, V)]) / (d * s)
    return (G[j] - mean_g - (V[j] / s) * mean_gu) / s


def check_vjp(d: int, claim=vjp_claim_entry) -> bool:
    r"""True when, for explicit d, :math:`\sum_i \hat g_i\,\partial u_i/\partial z_j` from SymPy's
    own Jacobian (:func:`lneps.book.symbolic.jacobian_entries`, derived from the definition)
    equals ``claim(j, G, V, d, s)`` (default :func:`vjp_claim_entry`) entry by entry, on the
    hyperplane :math:`\mathbf 1^{\mathsf T}v = 0`: each difference times :math:`s^3`, with
    :math:`v_d = -(v_1+\dots+v_{d-1})`, must expand to 0."""
    J = sym.jacobian_entries(d)
    V = sp.symbols(f"v_1:{d + 1}", real=True)
    G = sp.symbols(f"g_1:{d + 1}", real=True)
    on_plane = {V[-1]: -sp.Add(*V[:-1])}
    for j in range(d):
        got = sp.Add(*[G[i] * J[i, j] for i in range(d)])
        if sp.expand(((got - claim(j, G, V, d, S)) * S**3).xreplace(on_plane)) != 0:
            return False
    return True


def parameter_gradients(d: int = 3, tokens: int = 2) -> dict:
    r"""SymPy's :math:`\partial L/\partial\gamma_i` and :math:`\partial L/\partial\beta_i` for
    :math:`L = \sum_{t,i} g_{ti}\,(\gamma_i u_{ti} + \beta_i)`, with ``tokens`` rows of d symbols,
    and whether they equal :math:`\sum_t g_{ti}u_{ti}` and :math:`\sum_t g_{ti}` (keys
    ``"gamma_ok"``, ``"beta_ok"``; ``"gamma"``, ``"beta"``: the derivatives)."""
    gam = sp.symbols(f"gamma_1:{d + 1}", real=True)
    bet = sp.symbols(f"beta_1:{d + 1}", real=True)
    rows = [definition(d, z=sp.symbols(f"z{t}_1:{d + 1}", real=True)) for t in range(tokens)]
    g = [sp.symbols(f"g{t}_1:{d + 1}", real=True) for t in range(tokens)]
    L = sp.Add(*[g[t][i] * (gam[i] * rows[t].u[i] + bet[i]) for t in range(tokens) for i in range(d)])
    dgam = [sp.diff(L, gi) for gi in gam]
    dbet = [sp.diff(L, bi) for bi in bet]
    want_gam = [sp.Add(*[g[t][i] * rows[t].u[i] for t in range(tokens)]) for i in range(d)]
    want_bet = [sp.Add(*[g[t][i] for t in range(tokens)]) for i in range(d)]
    return {
        "gamma": dgam,
        "beta": dbet,
        "gamma_ok": all(sp.simplify(a - b) == 0 for a, b in zip(dgam, want_gam)),
        "beta_ok": all(sp.simplify(a - b) == 0 for a, b in zip(dbet, want_bet)),
    }


def eps_derivative(d: int = 3) -> dict:
    r""":math:`\partial u_i/\partial\varepsilon` from the definition for explicit d, with q(z)
    renamed q; ``"ok"``: whether every entry is :math:`-v_i/(2(q+\varepsilon)^{3/2})`;
    ``"first"``: SymPy's first entry."""
    ln = definition(d)
    derived = [sp.diff(ui, EPS).xreplace({ln.q + EPS: Q + EPS}) for ui in ln.u]
    claims = [-vi / (2 * (Q + EPS) ** sp.Rational(3, 2)) for vi in ln.v]
    ok = all(sp.simplify(a - b) == 0 for a, b in zip(derived, claims))
    return {"first": sp.simplify(derived[0]), "ok": ok}


def rms_vjp_in_invariants() -> dict:
    r"""RMS norm, every d: :math:`n(z) = z/\sqrt{m+\varepsilon}` with :math:`m = z\cdot z/d`. Along
    :math:`z + th`, :math:`L = \hat g\cdot n = (\hat g\cdot z + t\,\hat g\cdot h)/\sqrt{m(t)+\varepsilon}`.
    Returns SymPy's ``{"z": c_z, "g": c_g}`` (gradient :math:`c_z z + c_g \hat g`, in m, ε, d,
    and the symbol ``gz`` for ĝ·z) and ``"ok"``: whether it is
    :math:`r(\hat g - n\operatorname{mean}(\hat g\odot n))`, :math:`r = (m+\varepsilon)^{-1/2}`."""
    zz, zh, hh, gz, gh = sp.symbols("zz zh hh gz gh", real=True)
    m = sp.Symbol("m", nonnegative=True)
    L = (gz + _T * gh) / sp.sqrt((zz + 2 * _T * zh + _T**2 * hh) / _D + EPS)
    dL = sp.diff(L, _T).subs(_T, 0).subs(zz, _D * m)
    coeffs = _gradient_of(sp.expand(dL), {"z": zh, "g": gh})
    r = 1 / sp.sqrt(m + EPS)
    # n mean(ĝ ⊙ n) = z r (ĝ·z r / d), so the claim is r ĝ - z r^3 (ĝ·z)/d.
    ok = sp.simplify(coeffs["g"] - r) == 0 and sp.simplify(coeffs["z"] + r**3 * gz / _D) == 0
    return {**coeffs, "gz": gz, "ok": ok}
