"""Chapter 3 (seed 000): the Jacobian proofs, the error table, the cancellation and the
Lipschitz ratios that the book glues, checked against independent computations."""

import numpy as np
import pytest

import lneps
from lneps import symbolic as sym
from notebooks import glued, read

NB = "ch03_jacobian_lipschitz.ipynb"
U = np.finfo(float).eps / 2


@pytest.fixture(scope="module")
def g():
    return glued(NB)


def test_proofs_and_rejections(g):
    assert g["proved_all"] is True
    assert all(sym.check_jacobian(d) for d in (2, 7, 16))
    assert g["wrong_rejected"] is True
    assert g["slopes_negative"] is True


def test_error_table(g):
    for kind in ("random", "constant", "near_constant"):
        assert 0 <= g[f"err_{kind}_complex_step"] < 4 * np.finfo(float).eps
        assert 0 <= g[f"err_{kind}_eigvalsh"] < 1e-14
    assert 1e-12 < g["err_random_central"] < 1e-9
    # Near a constant input the fixed step is no longer small against sqrt(eps).
    assert g["err_constant_central"] > 1000 * g["err_random_central"]
    assert g["err_near_constant_central"] < 1e-5


def test_cancellation_of_the_radial_eigenvalue(g):
    # Relative error ~ u (q + eps)/eps: 1e-6 is passed near q/eps ~ 1e-6/u ~ 1e10.
    assert 1e9 <= g["cancel_1e6_ratio"] <= 1e11
    assert 1e15 <= g["cancel_lost_ratio"] <= 1e17
    z = np.array([-1.0, 1.0]) * np.sqrt(1e8 * 1e-5)
    computed = np.linalg.eigvalsh(lneps.jacobian(z, eps=1e-5))[1]
    exact = lneps.predicted_eigenvalues(z, eps=1e-5)[1]
    assert 1e-12 < abs(computed - exact) / exact < 1e3 * U * 1e8


def test_lipschitz_ratios(g):
    assert g["lip_bound"] == pytest.approx(1e-5**-0.5, rel=1e-15)
    assert 0.99 < g["lip_random_max"] <= 1.0
    assert 0.999999 < g["lip_near_min"] <= 1.0 + 1e-12
    assert g["lip_near_gap"] == pytest.approx(1 - g["lip_near_min"], abs=1e-15)
    assert 0.5 < g["lip_full_max"] <= 1.0


def test_timing_cell_is_the_only_unchecked_one():
    code = [c.source for c in read(NB).cells if c.cell_type == "code"]
    ignored = [src for src in code if "NBVAL_IGNORE_OUTPUT" in src]
    assert len(ignored) == 1
    assert ignored[0].splitlines()[0] == "# NBVAL_IGNORE_OUTPUT"
    assert "check_jacobian(d)" in ignored[0] and "range(2, 17)" in ignored[0]


def test_labels_for_other_chapters():
    text = "\n".join(c.source for c in read(NB).cells if c.cell_type == "markdown")
    assert text.startswith("(ch3)=\n# The Jacobian and the Lipschitz bound")
    for label in ("(eq-jacobian)", "(eq-lipschitz)"):
        assert label in text
    assert "{eq}`eq-core`" in text
