"""Chapter 3 (seed 000): the Jacobian proofs, the error table, the cancellation and the
Lipschitz ratios that the book glues, checked against independent computations."""

import numpy as np
import pytest

import lneps
from lneps import symbolic as sym
from notebooks import glued, read

NB = "jacobian_lipschitz.ipynb"


@pytest.fixture(scope="module")
def g():
    return glued(NB)


def test_proofs_and_rejections(g):
    assert g["proved_all"] is True
    assert (g["proved_d_min"], g["proved_d_max"]) == (2, 16)
    assert all(sym.check_jacobian(d) for d in (2, 7, 16))
    assert g["wrong_rejected"] is True
    assert g["slopes_negative"] is True
    assert g["eig_d"] == 4


def _core(a, eps):
    """u_eps row by row, written out here (not lneps) as the independent reference."""
    a = np.atleast_2d(a)
    v = a - a.mean(axis=1, keepdims=True)
    return v / np.sqrt((v * v).mean(axis=1, keepdims=True) + eps)


def _jacobian_by_hand(z, eps):
    d = z.size
    v = z - z.mean()
    s2 = v @ v / d + eps
    return (np.eye(d) - 1 / d) / np.sqrt(s2) - np.outer(v, v) / (d * s2**1.5)


def _eigenvalues_by_hand(z, eps):
    d = z.size
    v = z - z.mean()
    s2 = v @ v / d + eps
    if not np.any(v):
        return np.r_[0.0, np.full(d - 1, eps**-0.5)]
    return np.sort(np.r_[0.0, eps / s2**1.5, np.full(d - 2, s2**-0.5)])


def _table_inputs():
    # The notebook's seed and draws (cell "SEED = 20260303").
    rng = np.random.default_rng(20260303)
    d, eps, n = 8, 1e-5, 20
    return d, eps, n, {
        "random": rng.normal(size=(n, d)),
        "constant": np.repeat(rng.normal(size=(n, 1)), d, axis=1),
        "near_constant": rng.normal(size=(n, 1)) + 1e-3 * np.sqrt(eps) * rng.normal(size=(n, d)),
    }


def test_error_table(g):
    d, eps, n, kinds = _table_inputs()
    assert (g["table_d"], g["table_eps"], g["table_n"], g["table_noise"]) == (d, eps, n, 1e-3)
    f = lambda x: _core(x, eps)[0]  # noqa: E731
    central, steps = {}, []
    for kind, zs in kinds.items():
        worst = 0.0
        for z in zs:
            J = _jacobian_by_hand(z, eps)
            scale = np.max(np.abs(np.linalg.eigvalsh(J)))
            h = np.finfo(float).eps ** (1 / 3) * max(1.0, np.abs(z).max())
            N = np.stack([(f(z + h * e) - f(z - h * e)) / (2 * h) for e in np.eye(d)], axis=1)
            worst = max(worst, np.max(np.abs(N - J)) / scale)
            C = lneps.numerical_jacobian(lambda x: lneps.layer_norm(x, eps=eps), z,
                                         method="complex-step")
            assert np.max(np.abs(C - J)) / scale < g["complex_step_bound"]
            eig_err = np.max(np.abs(np.linalg.eigvalsh(J) - _eigenvalues_by_hand(z, eps)))
            assert eig_err / scale < g["eigvalsh_bound"]
            if kind != "random":
                steps.append(h)
        central[kind] = worst
    assert g["complex_step_bound"] == 1e-15 and g["complex_step_within"] is True
    assert g["eigvalsh_bound"] == 1e-14 and g["eigvalsh_within"] is True
    assert g["err_random_central_below"] == 1e-10
    assert central["random"] < 1e-10
    for kind in ("constant", "near_constant"):
        assert g[f"err_{kind}_central"] == pytest.approx(central[kind], rel=0.2)
    # Near a constant input the step is no longer small against sqrt(eps).
    assert g["err_constant_central"] > 1000 * central["random"]
    assert g["central_balance"] == pytest.approx(np.finfo(float).eps ** (2 / 3), rel=0.2)
    assert g["h_const_min"] == pytest.approx(min(steps), rel=0.3)
    assert g["h_const_max"] == pytest.approx(max(steps), rel=0.3)
    assert g["sqrt_eps"] == pytest.approx(np.sqrt(1e-5), rel=1e-15)


def _first_decade(rel_err, ratios, threshold):
    return 10.0 ** round(float(np.log10(ratios[np.argmax(rel_err >= threshold)])))


def test_cancellation_of_the_radial_eigenvalue(g):
    # Relative error ~ u (q + eps)/eps: 1e-6 is passed near q/eps ~ 1e-6/u ~ 1e10, and the
    # eigenvalue is lost (relative error 1) near 1/u ~ 1e16.
    for key in ("cancel_1e6_ratio", "cancel_lost_ratio"):
        assert np.log10(g[key]) == round(np.log10(g[key]))  # a power of ten
    assert 1e9 <= g["cancel_1e6_ratio"] <= 1e11
    assert 1e15 <= g["cancel_lost_ratio"] <= 1e17
    # Independently: the radial eigenvalue of the hand-written closed form, d = 2.
    eps, ratios = 1e-5, np.logspace(-2, 18, 81)
    rel = []
    for r in ratios:
        t = np.sqrt(r * eps)
        s2 = t * t + eps
        entry = 1 / (2 * np.sqrt(s2)) - t * t / (2 * s2**1.5)   # J = entry * [[1, -1], [-1, 1]]
        rel.append(abs(2 * entry - eps / s2**1.5) / (eps / s2**1.5))
    rel = np.array(rel)
    assert abs(np.log10(_first_decade(rel, ratios, 1e-6) / g["cancel_1e6_ratio"])) <= 1
    assert abs(np.log10(_first_decade(rel, ratios, 1.0) / g["cancel_lost_ratio"])) <= 1


def test_lipschitz_ratios(g):
    # The notebook's draws (cell "rng = np.random.default_rng(SEED + 1)"), recomputed here.
    rng = np.random.default_rng(20260303 + 1)
    d, eps, n = 8, 1e-5, 20000
    bound = eps**-0.5
    scales = rng.choice([1e-4, 1e-3, 1e-2, 1e-1, 1.0], size=(n, 1))
    x = rng.normal(size=(n, d)) * scales
    y = x + rng.normal(size=(n, d)) * scales * rng.uniform(0.01, 1, size=(n, 1))
    c = rng.normal(size=(200, 1))
    h = rng.normal(size=(200, d))
    h -= h.mean(axis=1, keepdims=True)
    gamma = rng.uniform(-3, 3, size=d)
    gap = np.linalg.norm(x - y, axis=1)
    ratio = np.linalg.norm(_core(x, eps) - _core(y, eps), axis=1) / gap / bound
    assert g["lip_eps"] == eps and g["lip_bound"] == pytest.approx(bound, rel=1e-15)
    assert g["lip_random_max"] == pytest.approx(ratio.max(), abs=2e-6)
    assert 0.99 < g["lip_random_max"] <= 1.0
    widest = ratio[scales[:, 0] == 1.0].max()
    assert g["lip_widest_spread"] == 1.0
    assert g["lip_widest_factor"] == round(1 / widest) == 77
    # Pairs c +- t h with centered h: v = +-t h and q = t^2 |h|^2 / d exactly, so the ratio
    # is 1/sqrt(1 + t^2 |h|^2 / (d eps)) of the bound.
    t = 1e-6
    exact = 1 / np.sqrt(1 + t**2 * np.sum(h * h, axis=1) / (d * eps))
    assert g["lip_near_gap"] == float(f"{1 - exact.min():.0e}")
    assert g["lip_near_min"] == pytest.approx(exact.min(), abs=1e-8)
    full = np.linalg.norm(gamma * (_core(x, eps) - _core(y, eps)), axis=1) / gap
    assert g["lip_full_max"] == pytest.approx(full.max() / (np.abs(gamma).max() * bound), abs=1e-3)
    assert 0.5 < g["lip_full_max"] <= 1.0
    assert g["lip_gain"] == 3.0


def test_timing_cell_is_the_only_unchecked_one():
    code = [c.source for c in read(NB).cells if c.cell_type == "code"]
    ignored = [src for src in code if "NBVAL_IGNORE_OUTPUT" in src]
    assert len(ignored) == 1
    assert ignored[0].splitlines()[0] == "# NBVAL_IGNORE_OUTPUT"
    # It only prints the times the compared proof cell took (d = 2..16), so nothing it
    # computes goes unchecked.
    assert "print" in ignored[0] and "times.items()" in ignored[0]
    assert "check_jacobian" not in ignored[0]
    prover = next(src for src in code if "proved[d] = sym.check_jacobian(d)" in src)
    assert "range(2, 17)" in prover and "perf_counter" in prover


def test_labels_for_other_chapters():
    text = "\n".join(c.source for c in read(NB).cells if c.cell_type == "markdown")
    assert text.startswith("(ch3)=\n# The Jacobian and the Lipschitz bound")
    for label in ("(eq-jacobian)", "(eq-lipschitz)"):
        assert label in text
    assert "{eq}`eq-core`" in text
