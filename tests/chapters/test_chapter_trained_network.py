"""The trained-network chapter: every quoted number recomputed from the activations (measured
afresh here) with code independent of lneps.book.activations."""

import numpy as np
import pytest

from network_data import measurements, model, reference, sentences, unpack
from notebooks import glued
from float16_sums import naive_f16_sumsq

NB = "trained_network.ipynb"


@pytest.fixture(scope="module")
def g():
    return glued(NB)


@pytest.fixture(scope="module")
def m():
    return measurements()


def _q(x):
    x = x.astype(np.float64)
    return ((x - x.mean(1, keepdims=True)) ** 2).mean(1)


def test_sample_and_sites(g, m):
    assert g["n_sentences"] == len(sentences()) and g["n_tokens"] == int(m.lengths.sum())
    assert g["n_sites"] == 13 and g["torch_norms"] == 13 and g["model_eps"] == 1e-12
    assert g["n_subset"] == len(m.subset) and g["subset_step"] == 10
    assert m.subset.tolist() == reference()["sentence_indices"]


def test_parity(g, m):
    ref = reference()
    ours = m.embeddings[ref["sentence_indices"]].astype(np.float64)
    theirs = unpack(ref["embeddings"])
    diff = np.abs(ours - theirs).max()
    assert g["parity_max_diff"] == pytest.approx(diff, rel=0.06) and diff < 4e-7
    cos = np.sum(ours * theirs, 1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(theirs, axis=1)
    assert g["parity_one_minus_cos"] <= 3e-7 and 1 - cos.min() <= 3e-7
    assert g["parity_q_err"] <= 1e-5


def test_smallest_q_over_eps(g, m):
    per_site = {n: _q(x).min() for n, x in m.sites.items()}
    name = min(per_site, key=per_site.get)
    assert name == "embeddings.LayerNorm" and g["closest_site"] == "emb"
    assert g["min_q_over_eps"] == pytest.approx(per_site[name] / 1e-12, rel=5e-3)
    assert 1e9 < g["min_q_over_eps"] < 1e11
    assert g["eps_effect_max"] == pytest.approx(1e-12 / (2 * per_site[name]), rel=0.05)
    assert g["eps_effect_max"] < g["f32_half_ulp"]
    q_emb = _q(m.sites[name])
    assert g["emb_median_q"] == pytest.approx(np.median(q_emb), rel=0.05)
    others = [np.median(_q(x)) for n, x in m.sites.items() if n != name]
    assert g["other_median_min"] == pytest.approx(min(others), rel=0.05)
    assert g["other_median_max"] == pytest.approx(max(others), rel=0.05)
    assert min(others) > 30 * np.median(q_emb)


def test_float16_headroom(g, m):
    best = (0.0, None, None)
    for n, x in m.sites.items():
        exact = 384 * _q(x.astype(np.float16))
        # a float16 pairwise sum of 384 terms is within 9 * 2**-11 < 0.5 % of the exact sum
        for t in np.flatnonzero(exact >= 0.98 * exact.max()):
            s = naive_f16_sumsq(x[t])
            if s > best[0]:
                best = (s, n, t)
    total, site, token = best
    assert g["f16_sumsq"] == total and site == "encoder.layer.0.output.LayerNorm" and g["f16_worst_site"] == "L1 FFN"
    assert g["f16_share"] == pytest.approx(total / 65504, rel=1e-9) and 0.5 < g["f16_share"] < 1
    k = int(np.searchsorted(np.cumsum(m.lengths), token, side="right"))
    pos = token - int(np.r_[0, np.cumsum(m.lengths)][k])
    ids = model().tokenizer.encode(sentences()[k]).ids
    assert model().tokenizer.id_to_token(ids[pos]) == g["f16_token"] == "[CLS]"
    row = m.sites[site][token].astype(np.float64)
    assert g["f16_feature"] == int(np.argmax(np.abs(row)))
    v = m.sites[site].astype(np.float64)
    v = v - v.mean(1, keepdims=True)
    assert g["f16_sq_margin"] == pytest.approx(np.sqrt(65504) / np.abs(v).max(), rel=1e-3)
    assert g["f16_sum_margin"] == pytest.approx(np.sqrt(65504 / total), rel=1e-3)
    assert 1 < g["f16_sum_margin"] < 1.2 and abs(g["f16_sq_margin"] - g["f16_sum_margin"]) < 0.01
    assert g["f16_outlier_only"] is True


def _compare(m, name):
    e, base = m.runs[name].astype(np.float64), m.runs["float32"].astype(np.float64)
    cos = np.sum(e * base, 1) / np.linalg.norm(e, axis=1) / np.linalg.norm(base, axis=1)
    return np.abs(e - base).max(), 1 - cos.min()


def test_low_precision_end_to_end(g, m):
    for key, name in (("f16n", "float16 naive"), ("f16e", "float16, exact LayerNorm"), ("bf16n", "bfloat16 naive")):
        diff, one_minus = _compare(m, name)
        assert g[f"{key}_diff"] == pytest.approx(diff, rel=0.06)
        assert g[f"{key}_cos"] == pytest.approx(one_minus, rel=0.06)
    assert g["low_nonfinite"] == 0
    assert g["f16e_diff"] < g["f16n_diff"] < g["bf16n_diff"]
    f16n, f16e, bf16n = (_compare(m, k)[0] for k in ("float16 naive", "float16, exact LayerNorm", "bfloat16 naive"))
    assert g["f16_ln_share"] == pytest.approx(1 - f16e / f16n, abs=0.01)
    assert g["bf16_over_f16"] == pytest.approx(bf16n / f16n, abs=0.5)


def test_eps_swap(g, m):
    diffs = {e: _compare(m, f"eps={e:g}") for e in (1e-6, 1e-5, 1e-3, 1e-1)}
    assert g["swap_1e6_diff"] == pytest.approx(diffs[1e-6][0], rel=0.06)
    assert g["swap_1e5_diff"] == pytest.approx(diffs[1e-5][0], rel=0.06)
    assert g["swap_1e3_diff"] == pytest.approx(diffs[1e-3][0], rel=0.06)
    assert g["swap_1e1_cos"] == pytest.approx(1 - diffs[1e-1][1], abs=0.01)
    assert g["swap_first"] == 1e-6 and diffs[1e-6][0] > 10 * g["parity_max_diff"]
    q = _q(m.sites["embeddings.LayerNorm"])
    assert g["swap_1e5_emb"] == pytest.approx(np.max(1 - np.sqrt((q + 1e-12) / (q + 1e-5))), rel=0.06)
    assert g["swap_1e1_emb"] == pytest.approx(np.min(np.sqrt((q + 1e-12) / (q + 1e-1))), abs=0.01)
    assert g["swap_closed_ok"] is True


def test_backward_gains(g, m):
    gains = {n: (_q(x).min() + 1e-12) ** -0.5 for n, x in m.sites.items()}
    name = max(gains, key=gains.get)
    assert name == "embeddings.LayerNorm" and g["gain_site"] == "emb"
    assert g["gain_max"] == pytest.approx(gains[name], abs=0.06)
    assert g["gain_bound"] == 1e6 and g["gain_max"] < 1e-4 * g["gain_bound"]
    assert g["gain_others_max"] == pytest.approx(max(v for n, v in gains.items() if n != name), abs=0.06)
    assert g["gain_measured_ok"] is True


def test_the_q_figure_alt_text_says_where_the_boxes_and_whiskers_lie(m):
    """Figure 9.1's alt text: its ranges of log10(q/eps), to the half-unit it states."""
    import json

    from notebooks import BOOK

    cells = json.loads((BOOK / NB).read_text())["cells"]
    (alt,) = [line for c in cells for line in "".join(c["source"]).splitlines()
              if line.startswith(":alt: Box plot of log10 of q over epsilon")]
    logs = {n: np.log10(_q(x) / 1e-12) for n, x in m.sites.items()}
    emb = logs.pop("embeddings.LayerNorm")
    assert "between about 9.5 and 10.5" in alt
    assert emb.min() == pytest.approx(9.5, abs=0.25) and emb.max() == pytest.approx(10.5, abs=0.25)
    low, high = min(v.min() for v in logs.values()), max(v.max() for v in logs.values())
    assert "between about 11 and 14" in alt and "reaching up to about 14" in alt
    assert low == pytest.approx(11, abs=0.25) and high == pytest.approx(14, abs=0.25)
    boxes = [np.percentile(v, q) for v in logs.values() for q in (25, 75)]
    assert "boxes between about 11.3 and 12.3" in alt
    assert min(boxes) == pytest.approx(11.3, abs=0.1) and max(boxes) == pytest.approx(12.3, abs=0.1)
