"""lneps.book.activations: the per-site statistics against independent computations, the naive
float16 sum against a pairwise float16 sum written out here, and the cache."""

import numpy as np
from threadpoolctl import threadpool_limits
import pytest

from lneps.book import activations as A
from float16_sums import naive_f16_sumsq
from network_data import measurements, model, sentences


def test_float16_sum_of_squares_matches_a_written_out_pairwise_sum():
    rng = np.random.default_rng(3)
    rows = np.vstack([rng.normal(size=(4, 384)) * 5, rng.normal(size=(1, 384)) * 30 + 7])
    got = A.float16_sum_of_squares(rows)
    want = [naive_f16_sumsq(r) for r in rows]
    np.testing.assert_array_equal(got, want)
    big = np.full((1, 384), 0.0)
    big[0, ::2] = 20.0   # sum of squares 192 * 100 * ... overflows
    big[0, 1::2] = -20.0
    assert np.isinf(A.float16_sum_of_squares(big * 1.0)).all() == (naive_f16_sumsq(big[0]) == np.inf)


def test_site_summary_against_plain_numpy():
    rng = np.random.default_rng(5)
    x = (rng.normal(size=(300, 384)) * rng.uniform(0.01, 3, size=(300, 1)) + rng.normal(size=(300, 1))).astype(
        np.float32
    )
    s = A.site_summary(x, 1e-12)
    x64 = x.astype(np.float64)
    q = ((x64 - x64.mean(1, keepdims=True)) ** 2).mean(1)
    assert s["q_min"] == pytest.approx(q.min(), rel=1e-12) and s["argmin"] == int(np.argmin(q))
    assert s["q_over_eps_min"] == pytest.approx(q.min() / 1e-12, rel=1e-12)
    assert s["abs_x_max"] == np.abs(x64).max()
    assert s["abs_v_max"] == pytest.approx(np.abs(x64 - x64.mean(1, keepdims=True)).max(), rel=1e-12)
    assert s["sumsq_max"] == pytest.approx(384 * q.max(), rel=1e-12)
    assert s["gain_max"] == pytest.approx((q.min() + 1e-12) ** -0.5, rel=1e-12)
    every = A.float16_sum_of_squares(x)  # all tokens, not only the candidates
    assert s["sumsq_f16_max"] == every.max() and s["sumsq_f16_argmax"] == int(np.argmax(every))
    with pytest.raises(ValueError, match="tokens, d"):
        A.site_summary(np.ones(3), 1e-5)


def test_site_labels():
    assert A.site_label("embeddings.LayerNorm") == "emb"
    assert A.site_label("encoder.layer.0.attention.output.LayerNorm") == "L1 attn"
    assert A.site_label("encoder.layer.5.output.LayerNorm") == "L6 FFN"


def test_measurements_cover_every_sentence_and_site():
    m = measurements()
    assert len(m.sites) == 13 and m.eps == 1e-12
    assert m.lengths.size == len(sentences()) and all(x.shape == (m.lengths.sum(), 384) for x in m.sites.values())
    assert m.subset.tolist() == list(range(0, len(sentences()), 10))
    assert set(m.runs) == {
        "float32",
        "eps=1e-06",
        "eps=1e-05",
        "eps=0.001",
        "eps=0.1",
        "float16 naive",
        "float16, exact LayerNorm",
        "bfloat16 naive",
    }
    np.testing.assert_array_equal(m.runs["float32"], m.embeddings[m.subset])


def test_cache_round_trip(tmp_path):
    few = sentences()[:2]
    assert not A.measure(few, model=model(), cache_dir=tmp_path, subset_step=2, write=False).from_cache
    assert not any(tmp_path.iterdir())
    first = A.measure(few, model=model(), cache_dir=tmp_path, subset_step=2)
    again = A.measure(few, model=model(), cache_dir=tmp_path, subset_step=2)
    assert not first.from_cache and again.from_cache
    for name in first.sites:
        np.testing.assert_array_equal(first.sites[name], again.sites[name])
    for name in first.runs:
        np.testing.assert_array_equal(first.runs[name], again.runs[name])
    assert first.nonfinite == again.nonfinite
    (entry,) = [p for p in tmp_path.iterdir() if p.name.startswith("minilm-")]
    assert len(list(entry.glob("*.npy"))) == 13 + 8 + 3
    sha = first.model_sha256
    keys = {A._key(sha, few, 2), A._key(sha, few[:1], 2), A._key(sha, few, 3), A._key("0" * 64, few, 2)}
    assert len(keys) == 4 and entry.name == "minilm-" + A._key(sha, few, 2)


def test_measure_checks_its_arguments():
    with pytest.raises(TypeError):
        A.measure("one string")
    with pytest.raises(ValueError):
        A.measure([])
    with pytest.raises(ValueError):
        A.measure(["a"], subset_step=0)


def test_the_forward_pass_does_not_depend_on_the_blas_thread_count():
    # Guaranteed by the defined arithmetic (every matrix product the exact sum rounded once),
    # whatever order the threads add in; a plain float32 BLAS product would not be.
    from lneps.book import minilm

    m = model()
    ids = minilm.encode(m, sentences()[:3])
    with threadpool_limits(2, user_api="blas"):
        two = minilm.forward(m, ids, keep_sites=True)
    with A._one_blas_thread():
        one = minilm.forward(m, ids, keep_sites=True)
    np.testing.assert_array_equal(two.embeddings, one.embeddings)
    for name in two.sites:
        np.testing.assert_array_equal(two.sites[name], one.sites[name])


def test_cache_folder_comes_from_the_environment(tmp_path, monkeypatch):
    few = sentences()[:2]
    monkeypatch.setenv("LNEPS_CACHE_DIR", str(tmp_path))
    A.measure(few, model=model(), subset_step=2)
    assert [p.name.startswith("minilm-") for p in tmp_path.iterdir()] == [True]
    monkeypatch.setenv("LNEPS_CACHE_DIR", "")
    assert not A.measure(few, model=model(), subset_step=2).from_cache
