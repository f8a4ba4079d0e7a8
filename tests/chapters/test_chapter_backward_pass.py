"""The backward-pass chapter: its glued numbers against independent computations, and a toy
training step written out here without lneps."""

import re

import numpy as np
import pytest

from notebooks import glued, read

NB = "backward_pass.ipynb"
FORBIDDEN = ["seed", "issue", "glue", "nbval", "tests/", "committed", "browser test", "NBVAL_", "myst-nb"]


@pytest.fixture(scope="module")
def g():
    return glued(NB)


def test_derivations_hold(g):
    assert g["vjp_claim_holds"] is True and g["vjp_proved"] is True and g["vjp_wrong_rejected"] is True
    assert g["params_ok"] is True and g["deps_ok"] is True and g["rms_ok"] is True
    assert g["vjp_d_max"] >= 6


def test_numerical_checks(g):
    assert g["cs_within"] is True and g["cs_bound"] <= 1e-14
    assert g["cd_random_below"] <= 1e-9 and g["cd_const_below"] <= 1e-4


def test_gains_are_eps_to_the_minus_half(g):
    assert g["gain_1e5"] == pytest.approx(1e-5**-0.5, rel=1e-7)
    assert g["gain_1e12"] == pytest.approx(1e6, rel=1e-7)
    assert g["gain_1e3"] == pytest.approx(1e-3**-0.5, rel=1e-7)
    assert g["gains_match"] is True


def test_float16_thresholds(g):
    f16max = float(np.finfo(np.float16).max)
    assert g["rstd_threshold"] == pytest.approx(1 / f16max**2, rel=1e-12)
    grid = [1e-3, 1e-5, 1e-6, 1e-8, 1e-9, 1e-10, 1e-12]
    # naive: eps must survive rounding to float16 (then q + eps > 0 and rho <= 4096)
    assert g["safe_f16_all"] == min(e for e in grid if np.float16(e) != 0)
    # rho stored in float16: eps^-1/2, rounded from float32, must stay below 65504 + 16
    rho = lambda e: float(np.float32(np.float32(1) / np.sqrt(np.float32(e))))
    assert g["safe_f16_rho"] == min(e for e in grid if rho(e) < f16max + 16)
    assert g["f16_1e12_rho"] == "NaN" and g["f16_1e12_all"] == "NaN" and g["bf16_all_finite"] is True
    assert g["f16_eps_1e8"] == 0.0
    for key, eps in (("gmax_1e5", 1e-5), ("gmax_1e12", 1e-12), ("gmax_1e3", 1e-3)):
        assert g[key] == pytest.approx((f16max + 16) * np.sqrt(eps), rel=1e-4)
    assert g["gmax_match"] is True


def test_float16_backward_accuracy(g):
    assert g["mixed_worst"] <= 1.0
    assert g["naive_n01"] > 100 and g["naive_n01_row"] <= 4
    assert g["naive_offset"] > 10 * g["naive_n01_row"]
    assert g["naive_6e4_fate"] in ("NaN", "inf")
    assert g["sd300_zero_share"] == 1.0
    # independently: sd-300 rows have squares far above 65504, so a float16 variance is inf
    rng = np.random.default_rng(0)
    v = (rng.normal(size=(50, 64)) * 300).astype(np.float16)
    with np.errstate(over="ignore"):
        assert np.isinf((v * v).astype(np.float32).max()) or (v.astype(np.float32) ** 2).max() > 65504


def _layer_norm(h, gamma, beta, eps):
    mu = h.mean(1, keepdims=True)
    v = h - mu
    s = np.sqrt((v * v).mean(1, keepdims=True) + eps)
    return gamma * v / s + beta, v / s, s


def _toy_start():
    """The chapter's toy network at its start: inputs (row 0 all zero), targets, and the
    weights W1, gamma, beta, W2."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=(64, 12))
    x[0] = 0.0
    target = rng.normal(size=(64, 4))
    return x, target, (rng.normal(size=(12, 16)) / 4, np.ones(16), np.zeros(16), rng.normal(size=(16, 4)) / 4)


def _toy_losses(eps, steps=3):
    """The chapter's training run, written out here (forward and backward by hand)."""
    x, target, (W1, gamma, beta, W2) = _toy_start()
    losses = []
    for _ in range(steps):
        h = x @ W1
        with np.errstate(invalid="ignore", divide="ignore"):
            y, u, s = _layer_norm(h, gamma, beta, eps)
        out = y @ W2
        losses.append(np.mean((out - target) ** 2))
        d_out = 2 * (out - target) / out.size
        dW2, dy = y.T @ d_out, d_out @ W2.T
        gh = dy * gamma
        with np.errstate(invalid="ignore"):
            dh = (gh - gh.mean(1, keepdims=True) - u * (gh * u).mean(1, keepdims=True)) / s
        dgamma, dbeta = (dy * u).sum(0), dy.sum(0)
        W1, gamma, beta, W2 = W1 - 0.1 * (x.T @ dh), gamma - 0.1 * dgamma, beta - 0.1 * dbeta, W2 - 0.1 * dW2
    return losses


def test_training_step_claims(g):
    assert g["dead_dh_rows"] == 1 and g["dead_param_nan"] is True and g["dead_dW2_nan"] == 1.0
    assert g["dead_loss_nan"] is True and all(np.isnan(_toy_losses(0.0)))
    losses = _toy_losses(1e-5)
    assert g["eps5_finite"] is True
    assert g["eps5_loss_first"] == pytest.approx(losses[0], abs=1e-4)
    assert g["eps5_loss_last"] == pytest.approx(losses[-1], abs=1e-4)
    assert losses[-1] < losses[0]
    assert g["f16_dead"] is True and np.float16(1e-12) == 0  # eps rounds to 0 in float16


def _rendered_text(name):
    nb = read(name)
    parts = []
    for cell in nb.cells:
        tags = cell.metadata.get("tags", [])
        if cell.cell_type == "markdown":
            parts.append(cell.source)
        elif "remove-cell" not in tags:
            if "remove-input" not in tags:
                parts.append(cell.source)
            parts.extend(o.get("text", "") for o in cell.get("outputs", []))
    return "\n".join(parts)


@pytest.mark.parametrize("name", [NB, "trained_network.ipynb"])
def test_no_bookkeeping_words_in_the_rendered_chapter(name):
    text = _rendered_text(name)
    text = re.sub(r"(?m)^```\{glue:figure\}.*$", "", text)   # directives and roles render as values
    text = re.sub(r"\{(glue:[a-z]+|cite|doc|ref|numref|eq)\}`[^`]*`", "", text)
    for word in FORBIDDEN:
        assert word.lower() not in text.lower(), f"{name}: {word!r} in the rendered text"


@pytest.mark.parametrize("name", [NB, "trained_network.ipynb"])
def test_chapter_structure(name):
    text = "\n".join(c.source for c in read(name).cells if c.cell_type == "markdown")
    assert "In this chapter" in text and "## Summary" in text and "## Exercises" in text
    assert 2 <= text.count("```{dropdown} Solution") <= 5
    for fig in re.findall(r"```\{glue:figure\}[^`]*```", text, flags=re.S):
        assert ":name:" in fig and ":alt:" in fig
    for cell in read(name).cells:
        if cell.cell_type == "code" and "glue(" in cell.source:
            assert "remove-cell" in cell.metadata.get("tags", []), cell.source[:80]


def test_exercise_3_solution():
    """Only the saved 1/sqrt(q + eps) in float16: eps = 1e-12 dies after the first update,
    eps = 1e-9 trains (the exercise's answer), run here with lneps's backward in the toy."""
    import lneps

    def losses(eps):
        x, target, (W1, gamma, beta, W2) = _toy_start()
        out_losses = []
        for _ in range(3):
            h = x @ W1
            y = np.asarray(lneps.layer_norm(h, gamma, beta, eps=eps, compute_dtype=np.float32), dtype=np.float64)
            out = y @ W2
            out_losses.append(np.mean((out - target) ** 2))
            d_out = 2 * (out - target) / out.size
            grads = lneps.layer_norm_backward(h, d_out @ W2.T, gamma, eps=eps, compute_dtype=np.float32,
                                              stats_dtype=np.float16)
            dh, dgamma, dbeta = (np.asarray(a, dtype=np.float64) for a in grads)
            W1, gamma = W1 - 0.1 * (x.T @ dh), gamma - 0.1 * dgamma
            beta, W2 = beta - 0.1 * dbeta, W2 - 0.1 * (y.T @ d_out)
        return out_losses

    dead = losses(1e-12)
    assert np.isfinite(dead[0]) and np.isnan(dead[1:]).all()
    assert np.isfinite(losses(1e-9)).all()
