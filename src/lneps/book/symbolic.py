r"""SymPy derivations of the layer-normalization core, built from its definition.

Every result starts from the definition for explicit symbols :math:`z_1, \dots, z_d`,

.. math::

    \mu = \frac1d \sum_i z_i, \qquad v = z - \mu\mathbf 1, \qquad
    q = \frac1d \sum_i v_i^2, \qquad u_\varepsilon(z) = \frac{v}{\sqrt{q + \varepsilon}},

and SymPy derives the rest; no closed form below is typed in except as the *claim* that a
function compares SymPy's result with. Results that hold for every d (the Jacobian along a
direction, its eigenvalues, the norm bound) are derived in the invariants :math:`v\cdot v`,
:math:`v\cdot h` and :math:`h^{\mathsf T}Ph`, using only :math:`Pv = v`,
:math:`P^{\mathsf T} = P` and :math:`\mathbf 1^{\mathsf T}v = 0`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

import sympy as sp

__all__ = [
    "EPS",
    "Q",
    "LayerNormDefinition",
    "definition",
    "core_mean",
    "core_mean_square",
    "mean_square_facts",
    "exact_core",
    "shift_invariance",
    "scaling_factor",
    "scaling_equality_solutions",
    "scaling_factor_at_eps_zero",
    "jacobian_entries",
    "closed_form_entry",
    "check_jacobian",
    "directional_derivative",
    "eigen_predictions",
    "norm_bound_facts",
]

EPS = sp.Symbol("varepsilon", positive=True)
Q = sp.Symbol("q", nonnegative=True)
# sqrt(q + eps) as one positive symbol: after differentiating, every square root of the
# (long) expression q(z) + eps is renamed S, which turns each entry into a rational function.
S = sp.Symbol("s", positive=True)


@dataclass(frozen=True)
class LayerNormDefinition:
    """The definition for explicit d: symbols ``z`` and the expressions mu, v, q, u."""

    z: tuple
    mu: sp.Expr
    v: tuple
    q: sp.Expr
    u: tuple


def definition(d: int, eps=EPS, z=None) -> LayerNormDefinition:
    r"""The layer-norm core of d real symbols (or of the given d entries ``z``), from its definition.

    Raises ValueError when d is not a positive integer or ``z`` does not have d entries.
    """
    d = _check_d(d)
    if z is None:
        z = sp.symbols(f"z_1:{d + 1}", real=True)
    z = tuple(sp.sympify(zi) for zi in z)
    if len(z) != d:
        raise ValueError(f"z must have d = {d} entries; got {len(z)}")
    mu = sp.Add(*z) / d
    v = tuple(zi - mu for zi in z)
    q = sp.Add(*[vi**2 for vi in v]) / d
    u = tuple(vi / sp.sqrt(q + eps) for vi in v)
    return LayerNormDefinition(z, mu, v, q, u)


def _check_d(d) -> int:
    if isinstance(d, bool) or not isinstance(d, int) or d < 1:
        raise ValueError(f"d must be a positive integer; got {d!r}")
    return d


def _rename_q(expr, ln: LayerNormDefinition, q=Q):
    """Write the polynomial q(z) of ``ln`` as ``q`` (default: the symbol q) inside ``expr``."""
    return expr.xreplace({ln.q + EPS: q + EPS})


def core_mean(d: int) -> sp.Expr:
    r""":math:`\frac1d\sum_i u_{\varepsilon,i}`, simplified: 0 for every explicit d."""
    ln = definition(d)
    return sp.simplify(sp.Add(*ln.u) / d)


def core_mean_square(d: int) -> sp.Expr:
    r""":math:`\frac1d\sum_i u_{\varepsilon,i}^2` in the symbol q: SymPy gives :math:`q/(q+\varepsilon)`.

    The sum of squares is computed from z; the numerator's polynomial equals d q(z), so it is
    renamed d q after SymPy checked that identity (expanded, the two agree term by term).
    """
    ln = definition(d)
    ms = _rename_q(sp.Add(*[ui**2 for ui in ln.u]) / d, ln)
    numerator = sp.cancel(ms * (Q + EPS))  # the sum of squares over d, a polynomial in z
    ratio = sp.cancel(numerator / ln.q)
    if ratio.free_symbols:
        raise AssertionError("the numerator is not a constant multiple of q(z)")
    return sp.simplify(ratio * Q / (Q + EPS))


def mean_square_facts() -> dict:
    r"""Values of :math:`m(q) = q/(q+\varepsilon)` (SymPy's own result for d = 3): at
    :math:`q = \varepsilon`, and the limits :math:`q\to 0^+` and :math:`q\to\infty`."""
    m = core_mean_square(3)
    return {
        "at_q_eq_eps": sp.simplify(m.subs(Q, EPS)),
        "limit_q_to_0": sp.limit(m, Q, 0, "+"),
        "limit_q_to_oo": sp.limit(m, Q, sp.oo),
    }


def exact_core(z, eps) -> tuple:
    r""":math:`u_\varepsilon(z)` in exact arithmetic for rational ``z`` and ``eps``."""
    ln = definition(len(z), eps=sp.nsimplify(eps), z=[sp.nsimplify(zi) for zi in z])
    return tuple(sp.radsimp(sp.simplify(ui)) for ui in ln.u)


def shift_invariance(d: int) -> tuple:
    r""":math:`u_\varepsilon(z + c\mathbf 1) - u_\varepsilon(z)` for a symbol c: all zeros."""
    ln = definition(d)
    c = sp.Symbol("c", real=True)
    shifted = definition(d, z=[zi + c for zi in ln.z])
    return tuple(sp.simplify(a - b) for a, b in zip(shifted.u, ln.u))


def scaling_factor(d: int = 3, a=None) -> sp.Expr:
    r"""The ratio :math:`u_\varepsilon(az)_i/u_\varepsilon(z)_i` derived from the definition, in q.

    SymPy finds :math:`a\sqrt{q+\varepsilon}/\sqrt{a^2q+\varepsilon}`, the same for every i;
    for a > 0 this is :math:`\sqrt{q+\varepsilon}/\sqrt{q+\varepsilon/a^2}`.
    """
    a = sp.Symbol("a", positive=True) if a is None else a
    ln = definition(d)
    scaled = definition(d, z=[a * zi for zi in ln.z])
    # q(az) = a^2 q(z): proved by expansion, then renamed so the ratio reads in q.
    if sp.expand(scaled.q - a**2 * ln.q) != 0:
        raise AssertionError("q(az) != a^2 q(z)")
    ratios = set()
    for su, uu in zip(scaled.u, ln.u):
        su = _rename_q(su, scaled, a**2 * Q)
        uu = _rename_q(uu, ln)
        ratios.add(sp.simplify(sp.cancel(su / uu)))
    if len(ratios) != 1:
        raise AssertionError(f"the ratio depends on the coordinate: {ratios}")
    return ratios.pop()


def scaling_equality_solutions(d: int = 3) -> list:
    r"""The a > 0 (for q > 0, ε > 0) where :math:`u_\varepsilon(az) = u_\varepsilon(z)`: [1]."""
    a = sp.Symbol("a", positive=True)
    qp = sp.Symbol("q", positive=True)
    ratio = scaling_factor(d, a).subs(Q, qp)
    # ratio = 1 with both sides positive is equivalent to ratio^2 = 1.
    return sorted(sp.solve(sp.Eq(ratio**2, 1), a))


def scaling_factor_at_eps_zero(d: int = 3) -> sp.Expr:
    r"""The scaling ratio at ε = 0 for a > 0, q > 0: exactly 1."""
    a = sp.Symbol("a", positive=True)
    qp = sp.Symbol("q", positive=True)
    return sp.simplify(scaling_factor(d, a).subs(Q, qp).subs(EPS, 0))


# --- The Jacobian for explicit d -------------------------------------------------------------

def closed_form_entry(i: int, j: int, v, d: int, s=S) -> sp.Expr:
    r"""Entry (i, j) of :math:`P/\sqrt{q+\varepsilon} - vv^{\mathsf T}/(d(q+\varepsilon)^{3/2})`,
    with :math:`s = \sqrt{q+\varepsilon}`. This is the claim :func:`check_jacobian` tests."""
    p_ij = sp.Integer(1 if i == j else 0) - sp.Rational(1, d)
    return p_ij / s - v[i] * v[j] / (d * s**3)


@lru_cache(maxsize=None)
def _chain_rule_parts(d: int):
    """Partial derivatives of u = g(v(z), q(v)) with g_i(V, q) = V_i / sqrt(q + eps).

    Returns (V, dv_dz, dq_dz, dg_dV, dg_dq, last): V are symbols for the centered
    coordinates, last = -(V_1 + ... + V_{d-1}) is V_d on the hyperplane 1^T v = 0. Each piece
    is differentiated by SymPy from the definition.
    """
    ln = definition(d)
    V = sp.symbols(f"v_1:{d + 1}", real=True)
    # dv_k/dz_j: v_k(z) is linear, so its derivative is its coefficient of z_j.
    dv_dz = []
    for vk in ln.v:
        coeffs = sp.expand(vk).as_coefficients_dict()
        if not set(coeffs) <= set(ln.z):
            raise AssertionError("v(z) is not linear in z")
        dv_dz.append([coeffs.get(zj, sp.Integer(0)) for zj in ln.z])
    # q as a function of the centered coordinates, then dq/dz_j by the chain rule.
    q_of_v = sp.Add(*[Vk**2 for Vk in V]) / d
    # Substituting v(z) back gives q(z) exactly as the definition built it (same tree).
    if q_of_v.xreplace(dict(zip(V, ln.v))) != ln.q:
        raise AssertionError("q(v(z)) != q(z)")
    dq_dV = [sp.diff(q_of_v, Vk) for Vk in V]
    dq_dz = [sp.Add(*[dq_dV[k] * dv_dz[k][j] for k in range(d) if dv_dz[k][j] != 0])
             for j in range(d)]
    qs = sp.Symbol("q_", nonnegative=True)
    g = [V[i] / sp.sqrt(qs + EPS) for i in range(d)]
    dg_dV = [[sp.diff(g[i], V[k]) for k in range(d)] for i in range(d)]
    dg_dq = [sp.diff(g[i], qs) for i in range(d)]
    # Rename sqrt(q + eps) -> s (so (q+eps)^(-3/2) -> s^-3): a positive symbol with s^2 = q+eps.
    rename = {sp.sqrt(qs + EPS): S, (qs + EPS) ** sp.Rational(-1, 2): 1 / S,
              (qs + EPS) ** sp.Rational(-3, 2): S**-3}
    dg_dV = [[e.xreplace(rename) for e in row] for row in dg_dV]
    dg_dq = [e.xreplace(rename) for e in dg_dq]
    # 1^T v = 0 follows from the definition of mu; SymPy checks it and we use it to
    # eliminate the last centered coordinate (the V's are not independent).
    if sp.expand(sp.Add(*ln.v)) != 0:
        raise AssertionError("1^T v != 0")
    last = -sp.Add(*V[:-1])
    return V, dv_dz, dq_dz, dg_dV, dg_dq, last


def jacobian_entries(d: int):
    r"""SymPy's :math:`\partial u_i/\partial z_j` for explicit d as a Matrix in v_1..v_d and
    :math:`s=\sqrt{q+\varepsilon}`, by the chain rule through v(z) and q(v)."""
    V, dv_dz, dq_dz, dg_dV, dg_dq, _ = _chain_rule_parts(_check_d(d))
    sparse = _nonzero(dg_dV)
    return sp.Matrix(d, d, lambda i, j: _entry(i, j, sparse, dv_dz, dg_dq, dq_dz))


def _nonzero(dg_dV):
    """Per row i, the pairs (k, dg_i/dV_k) with a nonzero derivative (SymPy finds only k = i)."""
    return [[(k, e) for k, e in enumerate(row) if e != 0] for row in dg_dV]


def _entry(i, j, sparse, dv_dz, dg_dq, dq_dz):
    """The chain rule for one entry: sum_k dg_i/dV_k dv_k/dz_j + dg_i/dq dq/dz_j."""
    return sp.Add(*[g_ik * dv_dz[k][j] for k, g_ik in sparse[i]]) + dg_dq[i] * dq_dz[j]


def _reduce_mod_sum(linear, V):
    """A linear form in V rewritten modulo 1^T V = 0: subtract c (1^T V) with c its most
    common coefficient, so a form like 2 v_j/d - 2 (v_1+...+v_d)/d^2 shrinks to 2 v_j/d."""
    coeffs = linear.as_coefficients_dict()
    if not set(coeffs) <= set(V):
        raise AssertionError(f"not a linear form in v: {linear}")
    a = [coeffs.get(Vk, sp.Integer(0)) for Vk in V]
    c = Counter(a).most_common(1)[0][0]
    return sp.Add(*[(ak - c) * Vk for ak, Vk in zip(a, V) if ak != c])


def check_jacobian(d: int, closed_form=closed_form_entry) -> bool:
    r"""True when SymPy proves :math:`Du_\varepsilon = P/\sqrt{q+\varepsilon} -
    vv^{\mathsf T}/(d(q+\varepsilon)^{3/2})` entry by entry for this d.

    ``closed_form(i, j, v, d, s)`` gives the claimed entry (default: the formula above), so a
    wrong formula can be passed to see the check fail.

    How it proves each of the d^2 entries cheaply: the derivative comes from the chain rule
    through v(z) and q(v) (:func:`jacobian_entries`), with :math:`\sqrt{q+\varepsilon}` named
    s, so every entry is a rational function of v_1..v_d and s. The centered coordinates obey
    :math:`\mathbf 1^{\mathsf T}v = 0` (checked from the definition), so each linear form
    :math:`\partial q/\partial z_j` may be reduced modulo :math:`\mathbf 1^{\mathsf T}v` once
    per column; it becomes :math:`2v_j/d`. Then each entry of the derivative is the same
    canonical SymPy expression as the claim, or their difference cancels term by term. Any
    entry that does not cancel at once is multiplied by :math:`s^3`, has
    :math:`v_d = -(v_1+\dots+v_{d-1})` substituted, and must expand to 0; otherwise the
    claim is false. The cost is O(d^2) SymPy operations.
    """
    V, dv_dz, dq_dz, dg_dV, dg_dq, last = _chain_rule_parts(_check_d(d))
    dq_r = [_reduce_mod_sum(e, V) for e in dq_dz]
    sparse = _nonzero(dg_dV)
    elim = {V[-1]: last}
    for i in range(d):
        for j in range(d):
            entry = _entry(i, j, sparse, dv_dz, dg_dq, dq_r)
            claim = closed_form(i, j, V, d, S)
            # Same canonical SymPy tree: equal. Otherwise the difference must vanish.
            if entry == claim:
                continue
            diff = entry - claim
            if diff == 0:
                continue
            # Not cancelled as built: decide exactly on the hyperplane 1^T v = 0.
            if sp.expand((diff * S**3).xreplace(elim)) != 0:
                return False
    return True


# --- Results for every d, in invariants -------------------------------------------------------

def directional_derivative():
    r"""The derivative of :math:`u_\varepsilon(z + th)` at t = 0 for every d.

    Along the line, :math:`v(z+th) = v + tPh` and, with :math:`P^{\mathsf T}=P`, :math:`Pv=v`,
    :math:`q(z+th) = (v\cdot v + 2t\,v\cdot h + t^2\,h^{\mathsf T}Ph)/d`. So
    :math:`u(z+th) = a(t)\,v + b(t)\,Ph` with scalar a, b, and SymPy differentiates a and b.
    Returns ``{"v": a'(0), "Ph": b'(0), "d": d, "vh": vh}`` in the symbols q (= v·v/d),
    ``vh`` (= v·h) and d.
    """
    t = sp.Symbol("t", real=True)
    d = sp.Symbol("d", positive=True, integer=True)
    vv, vh, hPh = sp.symbols("vv vh hPh", real=True)
    q_line = (vv + 2 * t * vh + t**2 * hPh) / d
    a = 1 / sp.sqrt(q_line + EPS)
    b = t * a
    coeff_v = sp.diff(a, t).subs(t, 0).subs(vv, d * Q)
    coeff_Ph = sp.diff(b, t).subs(t, 0).subs(vv, d * Q)
    return {"v": sp.simplify(coeff_v), "Ph": sp.simplify(coeff_Ph), "d": d, "vh": vh}


def eigen_predictions(d: int = 4, entries=None) -> dict:
    r"""Eigenvalues of the Jacobian for explicit d (>= 3), derived by applying it to vectors.

    ``entries`` is the d x d Jacobian in the symbols v_1..v_d and :math:`s=\sqrt{q+\varepsilon}`
    (default: SymPy's :func:`jacobian_entries`; pass another matrix to see what it implies).
    On the hyperplane :math:`\mathbf 1^{\mathsf T}v = 0` (v_d replaced by
    :math:`-(v_1+\dots+v_{d-1})`) it is applied to

    * :math:`\mathbf 1` (key ``"one"``),
    * v itself (``"radial"``),
    * :math:`w = e_1 - \mathbf 1/d - (v_1/v\cdot v)\,v`, orthogonal to :math:`\mathbf 1` and
      v by construction (``"tangential"``),
    * at v = 0 (so q = 0, :math:`s = \sqrt\varepsilon`), a generic centered vector
      (``"constant_input"``).

    For each x, :math:`\lambda = (Jx)_k/x_k` at the first nonzero :math:`x_k`, and
    :math:`Jx - \lambda x` must cancel to the zero vector (else AssertionError: x is no
    eigenvector). :math:`\lambda` is then written in :math:`q = v\cdot v/d` by polynomial
    division and :math:`s = \sqrt{q+\varepsilon}`; any v left over raises AssertionError.
    """
    d = _check_d(d)
    if d < 3:
        raise ValueError(f"d must be >= 3 (a direction orthogonal to 1 and v); got {d}")
    V, *_, last = _chain_rule_parts(d)
    J = jacobian_entries(d) if entries is None else sp.Matrix(entries)
    if J.shape != (d, d):
        raise ValueError(f"entries must be a {d} x {d} matrix; got shape {J.shape}")
    on_plane = {V[-1]: last}
    J = J.xreplace(on_plane)
    v = sp.Matrix([Vk.xreplace(on_plane) for Vk in V])
    ones = sp.ones(d, 1)
    vv = sp.expand((v.T * v)[0])
    w = sp.eye(d)[:, 0] - ones / d - (v[0] / vv) * v
    if sp.cancel((ones.T * w)[0]) != 0 or sp.cancel((v.T * w)[0]) != 0:
        raise AssertionError("w is not orthogonal to 1 and v")
    result = {
        "one": _in_q(_eigenvalue(J, ones), vv, d, V),
        "radial": _in_q(_eigenvalue(J, v), vv, d, V),
        "tangential": _in_q(_eigenvalue(J, w), vv, d, V),
    }
    # Constant input: v = 0, hence q = 0 and s = sqrt(eps); x is any centered vector.
    J0 = J.xreplace({Vk: 0 for Vk in V}).subs(S, sp.sqrt(EPS))
    result["constant_input"] = sp.simplify(_eigenvalue(J0, v))
    return result


def _eigenvalue(J, x) -> sp.Expr:
    """The lambda with J x = lambda x, read off one coordinate and checked on all of them."""
    Jx = J * x
    k = next(k for k in range(len(x)) if sp.cancel(x[k]) != 0)
    lam = sp.cancel(Jx[k] / x[k])
    if any(sp.cancel(e) != 0 for e in Jx - lam * x):
        raise AssertionError("the vector is not an eigenvector of the matrix")
    return lam


def _in_q(lam, vv, d, V) -> sp.Expr:
    """``lam`` (rational in v and s) in the symbol q: the numerator is divided by
    v.v - d q in v_1, whose remainder must be free of v; then s = sqrt(q + eps)."""
    num, den = sp.fraction(sp.cancel(lam))
    parts = []
    for poly in (num, den):
        rem = sp.rem(sp.expand(poly), sp.expand(vv - d * Q), V[0])
        if rem.free_symbols & set(V):
            raise AssertionError(f"the eigenvalue depends on v beyond q: {lam}")
        parts.append(rem)
    return sp.simplify((parts[0] / parts[1]).subs(S, sp.sqrt(Q + EPS)))


def norm_bound_facts() -> dict:
    r"""With :math:`q = r\varepsilon` (r ≥ 0): :math:`\sqrt\varepsilon\,\lambda` for the radial and
    tangential eigenvalues, their derivatives in r (negative, so both fall from their r = 0
    value 1), hence :math:`\|Du_\varepsilon\|_2 \le \varepsilon^{-1/2}` with equality at r = 0."""
    r = sp.Symbol("r", nonnegative=True)
    ev = eigen_predictions()
    scaled = {k: sp.simplify(sp.sqrt(EPS) * ev[k].subs(Q, r * EPS)) for k in ("radial", "tangential")}
    slopes = {k: sp.simplify(sp.diff(e, r)) for k, e in scaled.items()}
    return {
        "scaled": scaled,
        "slopes": slopes,
        "slopes_negative": all(s.is_negative for s in slopes.values()),
        "at_r0": {k: e.subs(r, 0) for k, e in scaled.items()},
        "constant_input_times_sqrt_eps": sp.simplify(sp.sqrt(EPS) * ev["constant_input"]),
    }
