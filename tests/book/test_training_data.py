"""The training lab's stored data (src/lneps/book/data/training/), checked without torch: the
corpus is the generator's, bit for bit; the runs are the grid's, complete, consistent and with
their provenance; the spread over machines is stored with its own; and every conclusion the book
draws from them (lneps.book.training.claims) holds on the stored runs.
"""

import math
import re

import numpy as np
import pytest

from lneps.book.training import claims, corpus, grid, recipe, record, spread, stored
from lneps.book.training.config import run_id
from lneps.book.training.precision import PRECISIONS
from lneps.book.training.provenance import ENV_VARS

M = stored.manifest()
RUNS = stored.runs()

# --- the corpus -----------------------------------------------------------------------------------


def test_generator_reproduces_the_stored_stream_bit_for_bit():
    s = stored.corpus()
    assert s.dtype == np.uint8 and s.shape == (corpus.CHAIN.length,)
    assert np.array_equal(corpus.generate(), s)
    assert corpus.digest(s) == stored.corpus_meta()["sha256"]


def test_stored_entropies_are_the_generators():
    meta = stored.corpus_meta()
    assert {k: meta[k] for k in corpus.CHAIN.as_dict()} == corpus.CHAIN.as_dict()
    assert meta["entropy_rate_nats"] == corpus.entropy_rate()
    assert meta["loss_floor_nats"] == corpus.loss_floor(64) == corpus.entropy_rate()  # order 1: the rate itself
    assert 0 < meta["loss_floor_nats"] < meta["unigram_entropy_nats"] < math.log(corpus.CHAIN.vocab)


def test_stationary_distribution_is_stationary():
    p = corpus.transitions()
    pi = corpus.stationary(p)
    np.testing.assert_allclose(pi @ p, pi, atol=1e-15)
    assert abs(pi.sum() - 1) < 1e-14


def test_stream_has_the_chains_statistics():
    # the empirical transition frequencies of 262,144 symbols match the rows within sampling error
    s = stored.corpus().astype(np.int64)
    v = corpus.CHAIN.vocab
    counts = np.zeros((v, v))
    np.add.at(counts, (s[:-1], s[1:]), 1)
    emp = counts / counts.sum(1, keepdims=True)
    p = corpus.transitions()
    se = np.sqrt(p * (1 - p) / counts.sum(1, keepdims=True))
    assert np.all(np.abs(emp - p) <= 6 * se + 1e-12)
    # and the chain's own cross-entropy on the stream is its entropy rate
    own = -np.mean(np.log(p[s[:-1], s[1:]]))
    assert own == pytest.approx(corpus.entropy_rate(), abs=0.01)


def _held_out_floor() -> float:
    """The chain's own cross-entropy on the held-out windows: what a perfect model scores there."""
    s = stored.corpus().astype(np.int64)
    p = corpus.transitions()
    starts = recipe.eval_offsets(64, len(s))
    idx = starts[:, None] + np.arange(64)
    return float(-np.mean(np.log(p[s[idx], s[idx + 1]])))


def test_no_run_beats_the_chain_on_the_held_out_windows():
    hf = _held_out_floor()
    best = min(float(np.nanmin(r.eval_loss)) for r in RUNS.values() if np.isfinite(r.eval_loss).any())
    assert hf <= best, (hf, best)
    assert abs(hf - stored.floor()) < 0.02


# --- the runs: complete, consistent, with provenance ---------------------------------------------


def test_every_grid_run_is_stored_and_nothing_else():
    assert set(RUNS) == {run_id(c) for c in grid.all_configs()}
    assert M["seeds"] == list(grid.SEEDS) and len(grid.SEEDS) >= 3
    assert set(M["slices"]) == set(grid.SLICES)
    for name, sl in M["slices"].items():
        assert sl["runs"] == [run_id(c) for c in grid.configs(name)] and len(sl["why"]) > 50


def test_provenance_is_stored():
    p = M["provenance"]
    assert p["torch"].startswith("2.13.0") and p["numpy"]
    assert p["cpu"]["model"] and "avx2" in p["cpu"]["simd_flags"]
    assert p["cpu_capability"] in ("AVX2", "AVX512", "DEFAULT", "ZVECTOR", "SVE256")
    assert p["threads"] == 1 and p["deterministic_algorithms"] is True
    assert set(p["env"]) == set(ENV_VARS) and p["env"]["OMP_NUM_THREADS"] == "1"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", p["date"])
    assert "tools/train.py" in p["command"]
    assert M["recipe"]["adam_eps"] == 1e-8 and M["recipe"]["steps"] == 300
    assert M["record"]["stats"] == list(record.STATS)


def test_the_machine_of_the_stored_runs_is_avx2_native():
    # This machine (AMD EPYC, AVX2, no AVX-512): "native" is torch's AVX2 kernels.
    p = M["provenance"]
    assert "avx512f" not in p["cpu"]["simd_flags"] and p["cpu_capability"] == "AVX2"
    assert p["env"]["ATEN_CPU_CAPABILITY"] == "unset"


def test_the_grid_fits_the_time_budget():
    t = M["timing"]
    # CPU time of the workers, over 2 cores: what the grid costs on an otherwise idle 2-core machine
    assert t["worker_cpu_seconds"] / 2 <= 25 * 60, t
    assert t["workers"] == 2 and t["threads_per_worker"] == 1


def test_stored_data_is_compact():
    total = sum(f.stat().st_size for f in stored.DATA_DIR.iterdir() if f.is_file())
    assert total <= 5.5e6, total


SITES = {"pre": ["0.attn.in", "0.mlp.in", "1.attn.in", "1.mlp.in", "final"],
         "post": ["0.attn.post", "0.mlp.post", "1.attn.post", "1.mlp.post"],
         "sandwich": ["0.attn.in", "0.mlp.in", "0.attn.out", "0.mlp.out", "1.attn.in", "1.mlp.in", "1.attn.out",
                      "1.mlp.out", "final"],
         "none": []}


@pytest.mark.parametrize("rid", sorted(RUNS))
def test_a_runs_arrays_have_their_shapes(rid):
    r = RUNS[rid]
    assert list(r.sites) == SITES[r.config.placement]
    assert r.loss.shape == r.grad_norm.shape == (r.steps,) and r.loss.dtype == np.float32
    assert r.eval_loss.shape == (len(recipe.eval_steps(r.steps)),)
    assert r.q.shape == (len(r.record_steps), len(r.sites), len(record.STATS))
    prec = r.config.ft_precision if r.config.is_finetune else r.config.precision
    assert (r.scale is not None) == PRECISIONS[prec].scaler
    if r.stopped_at is None:
        assert np.all(np.isfinite(r.eval_loss))
    else:
        assert np.isnan(r.loss[r.stopped_at + 1:]).all()
    if r.first_nonfinite_step is None:
        assert np.isfinite(r.loss).all() and np.isfinite(r.grad_norm).all()
    else:
        k = r.first_nonfinite_step
        assert np.isfinite(r.loss[:k]).all() and not (np.isfinite(r.loss[k]) and np.isfinite(r.grad_norm[k]))
    shares = r.q[..., [record.STATS.index(c) for c in record.STATS if c.startswith("share")]]
    assert np.all((shares[np.isfinite(shares)] >= 0) & (shares[np.isfinite(shares)] <= 1))


def test_fine_tuning_starts_from_the_stored_pretraining():
    # The trained model of a fine-tuning job is its eps_sweep run: same bits, same held-out loss.
    ft = [r for r in RUNS.values() if r.config.is_finetune]
    assert len(ft) == len(grid.configs("finetune"))
    for r in ft:
        base = RUNS[run_id(r.config.base())]
        assert r.meta["eval_before_swap"] == base.eval_loss[-1]
        if (r.config.ft_eps, r.config.ft_precision) == (r.config.eps, "fp32"):
            assert r.eval_loss[0] == r.meta["eval_before_swap"]  # the control: nothing swapped


def test_q_statistics_are_ordered():
    for r in RUNS.values():
        qs = r.q[..., :6]
        ok = np.all(np.isfinite(qs), axis=-1)
        assert np.all(np.diff(qs[ok], axis=-1) >= -1e-12 * np.abs(qs[ok][:, 1:])), r.id


def test_autocast_finding_is_stored():
    a = M["autocast"]
    assert a["torch"].startswith("2.13.0")
    assert a["output_dtype"]["autocast bfloat16, input bfloat16"]["layer_norm"] == "bfloat16"
    assert a["output_dtype"]["autocast bfloat16, input float32"]["layer_norm"] == "float32"
    assert a["output_dtype"]["autocast float16, input float16"]["rms_norm"] == "float16"
    assert a["float16_of"]["1e-12"] == 0.0 and a["float16_of"]["1e-08"] == 0.0
    assert a["adamw_half_eps_1e-8"]["exp_avg_sq"] == [0.0, 0.0, 0.0]
    assert a["adamw_half_eps_1e-8"]["param_after_one_step"] == ["-inf", "-inf", "nan"]


def test_manifests_are_strict_json():
    import json
    for name in ("runs.json", "spread.json", "corpus.json"):
        json.loads((stored.DATA_DIR / name).read_text(encoding="utf-8"),
                   parse_constant=lambda c: pytest.fail(f"{name} holds {c}"))


# --- the spread over machines --------------------------------------------------------------------

SP = stored.spread_manifest()


def test_spread_profiles_and_their_provenance():
    assert set(SP["profiles"]) == set(spread.PROFILES)
    assert SP["configs"] == [run_id(c) for c in grid.SPREAD_CONFIGS]
    for name, prof in SP["profiles"].items():
        p = prof["provenance"]
        assert p["threads"] == spread.PROFILES[name]["threads"]
        want = spread.PROFILES[name]["env"].get("ATEN_CPU_CAPABILITY", "unset")
        assert p["env"]["ATEN_CPU_CAPABILITY"] == want
        assert p["cpu_capability"] == {"unset": M["provenance"]["cpu_capability"], "avx2": "AVX2",
                                       "default": "DEFAULT"}[want]


def test_native_one_thread_reproduces_the_grid_bit_for_bit():
    for rid in SP["configs"]:
        groups = spread.identical_groups(rid)
        assert any({"stored", "native-1t"} <= set(g) for g in groups), (rid, groups)
        # native is AVX2 on this machine: capping at avx2 changes nothing
        assert any({"native-1t", "avx2-1t"} <= set(g) for g in groups), (rid, groups)


# --- the conclusions ---------------------------------------------------------------------------------

CLAIMS = {c.key: c for c in claims.all_claims()}


def _clear(e):
    """An effect the verdict may lean on: beyond both spreads and not marginal."""
    return e.is_effect and not e.marginal


def _none(e):
    return not e.is_effect and not e.marginal


def test_every_claim_has_a_verdict_and_a_finding():
    assert list(CLAIMS) == ["sigma_zero", "fp16_tiny_eps", "sweet_spot", "too_large", "norm_in_float32",
                            "norm_vs_none", "pre_vs_post", "finetune_mismatch"]
    for c in CLAIMS.values():
        assert c.verdict in claims.VERDICTS and len(c.finding) > 200 and c.effects


def test_machine_spread_is_measured_and_small_against_the_seeds():
    from lneps.book.training.effects import machine_spread
    for m in ("final_excess", "mean_excess", "excess_at_50", "excess_at_150"):
        assert 0 < machine_spread(m) < 1e-3, m
    # the largest machine spread of the final loss is the bfloat16 run's; float32 runs move ~1e-5 or less
    per = spread.metric_spread(claims.final_excess)
    assert max(v for k, v in per.items() if "fp32" in k) < 1e-5


def test_sigma_zero():
    c = CLAIMS["sigma_zero"]
    f = c.facts
    assert c.verdict == "qualified"
    # zero rows appear only at the sandwich's output norms under zero-initialized projections ...
    assert f["only_sandwich_zero_resid_outputs"]
    assert {k.split("/")[-1] for k in f["zero_row_sites"]} == {"0.attn.out", "0.mlp.out", "1.attn.out", "1.mlp.out"}
    # ... at step 0 only without loss scaling, for as long as the scaler skips steps with it
    assert f["only_at_step_0_without_loss_scaling"]
    assert 10 <= f["last_zero_row_step_with_loss_scaling"]["sandwich/zero_resid/1e-12/fp16_norm32/0.attn.out"] <= 25
    # epsilon = 0 there: dead at step 0 in every seed; nowhere else
    assert f["eps0_first_nonfinite_step"] == [0, 0, 0] and f["eps0_stopped_at"] == [0, 0, 0]
    assert f["eps0_dead_elsewhere"] == [] and f["eps0_runs"] >= 20
    dead, gn, _ = c.effects
    assert dead.diff == math.inf and dead.is_effect
    # the gradient at step 0 grows as 1/sqrt(eps): 1e-12 against 1e-5 is 10^3.5
    assert gn.diff == pytest.approx(3.5, abs=0.1) and _clear(gn)
    g = f["grad_norm_step0"]
    assert min(g["1e-12"]) > 1e5 and 100 < min(g["1e-05"]) and max(g["pre, normal, 1e-5"]) < 10
    # the small init is poor but gives q ~ 1e-8, not 0
    assert 1e-9 < f["q_min_small_init_step0"] < 1e-7
    # one zero row: kills float32 and bfloat16 in one step; loss scaling skips it; 1e-12 is enough
    assert f["probe_kills_fp32_bf16"] and f["probe_guarded_by_loss_scaling"] and f["probe_1e-12_survives"]
    for p in f["probe"]:
        assert p["zero_rows"] == 1 and p["rows"] == 512
        if p["eps"] == 0:
            assert p["nonfinite_out_rows"] == 1 and p["nonfinite_logit_share"] == 64 / 512  # its whole window


def test_fp16_tiny_eps():
    c = CLAIMS["fp16_tiny_eps"]
    f = c.facts
    assert c.verdict == "qualified"
    assert f["float16_of_1e-12"] == 0.0 and f["float16_of_1e-8"] == 0.0
    pre, sandwich = c.effects
    assert _none(pre) and abs(pre.diff) < 1e-3          # where q > 0: nothing
    assert f["pre_max_share_below_float16_threshold"] == 0 and f["pre_min_q_over_1e-12"] > 1e8
    assert sandwich.diff == math.inf and sandwich.is_effect  # where q = 0: dead
    assert f["sandwich_e_first_nonfinite"] == [0, 0, 0] and all(s is not None for s in f["sandwich_e_stopped_at"])
    assert f["sandwich_d_dead"] == [False] * 3 and all(10 <= n <= 25 for n in f["sandwich_d_skipped_steps"])


def test_sweet_spot():
    c = CLAIMS["sweet_spot"]
    assert c.verdict == "corrected"
    for name, f in c.facts.items():
        assert not any(f["beats_every_smaller_eps"].values()), name
        assert 0.0 in f["plateau"] and 1e-12 in f["plateau"] and 1e-6 in f["plateau"], name
        assert 1e-1 not in f["plateau"] and 1.0 not in f["plateau"], name
        # float32's threshold predicts exactly which runs are epsilon = 0's, bit for bit
        assert f["bit_identical_to_eps0"] == f["never_below_float32_threshold"], name
    assert c.facts["LayerNorm, init normal"]["bit_identical_to_eps0"] == [0.0, 1e-12]
    assert 1e-5 in c.facts["LayerNorm, init normal"]["plateau"]
    # the edge moves with q: at the small init (q ~ 2e-8 at step 0) 1e-5 already costs
    small = c.facts["LayerNorm, init small"]
    assert small["median_q_step0"] < 1e-7 and 1e-5 not in small["plateau"]
    assert 0.01 < small["worse_than_eps0"]["1e-05"] < 0.05
    no_gain = [e for e in c.effects if "normal" in e.a]
    assert all(_none(e) and abs(e.diff) < 1e-4 for e in no_gain)


def test_too_large():
    c = CLAIMS["too_large"]
    assert c.verdict == "qualified"
    costs = [e for e in c.effects if e.a.endswith("eps 1e-5")]
    assert len(costs) == 12 and all(_clear(e) and e.diff > 0 for e in costs)
    normal = c.facts["LayerNorm, init normal"]
    assert 0.02 < normal["final_cost_1e-1"] < 0.06 and 0.04 < normal["final_cost_1"] < 0.12
    assert normal["share_of_gap_learnt_at_1"] > 0.8                 # not destroyed
    assert c.facts["LayerNorm, init small"]["share_of_gap_learnt_at_1"] < 0.6  # most of it lost
    assert c.facts["destroyed"] == {"LayerNorm, init normal": False, "LayerNorm, init small": True,
                                    "RMSNorm, init normal": False}
    # epsilon = 1 trains like no norm at all; the network raises q against a large epsilon
    assert c.facts["eps_1_like_no_norm"]
    assert normal["q_p50_first_site_end"]["1"] > 2 * normal["q_p50_first_site_end"]["1e-05"]


def test_norm_vs_none():
    c = CLAIMS["norm_vs_none"]
    assert c.verdict == "qualified"
    assert all(c.facts["norm_better"].values()) and not any(c.facts["none_better"].values())
    assert not c.facts["unstable_none"] and not c.facts["unstable_pre"]
    loss = [e for e in c.effects if e.metric in ("final_excess", "mean_excess")]
    assert all(_clear(e) and e.diff > 0.05 for e in loss)
    gn = [e for e in c.effects if e.metric == "log10_max_grad_norm"]
    assert all(e.diff < 0 for e in gn)  # without a norm the largest gradient is smaller, not larger


def test_pre_vs_post():
    c = CLAIMS["pre_vs_post"]
    assert c.verdict == "corrected"
    assert all(c.facts["post_better"].values()) and not c.facts["unstable_post"]
    loss = [e for e in c.effects if e.metric in ("final_excess", "mean_excess")]
    assert all(_clear(e) and e.diff < 0 for e in loss)


def test_finetune_mismatch():
    c = CLAIMS["finetune_mismatch"]
    assert c.verdict == "qualified"
    assert len(c.effects) == 24
    for e in c.effects:
        big = e.b.startswith("0.001")
        if big and e.metric.startswith("after_finetune"):
            assert _clear(e) and 1e-4 < e.diff < 1e-3, e
        elif not big:
            assert _none(e) and abs(e.diff) < 1e-4, e
    for key, f in c.facts.items():
        if "0.001" not in key.split("->")[1]:
            assert f["predicted_change_at_median_q"] < 1e-4, key


def test_norm_in_float32():
    c = CLAIMS["norm_in_float32"]
    assert c.verdict == "qualified"
    assert c.facts["kernels_accumulate_in_float32"] and c.facts["cpu_autocast_keeps_input_type"]
    assert all(_none(e) and abs(e.diff) < 1e-3 for e in c.effects)
