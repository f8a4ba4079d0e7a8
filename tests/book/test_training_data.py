"""The training lab's stored data (src/lneps/book/data/training/), checked without torch: the
corpus is the generator's, bit for bit; the runs are the grid's, complete, consistent and with
their provenance; the spread over machines is stored with its own; and every conclusion the book
draws from them (lneps.book.training.claims) holds on the stored runs.
"""

import math
import re

import numpy as np
import pytest

from lneps.book.training import claims, corpus, effects, grid, recipe, record, spread, stored
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
    assert (
        meta["loss_floor_nats"] == corpus.loss_floor(64) == corpus.entropy_rate()
    )  # order 1: the rate itself
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


def test_the_excess_is_measured_over_the_chains_own_held_out_loss():
    # stored.held_out_floor sums with math.fsum; here with numpy's mean: the same to 1e-12
    assert stored.held_out_floor() == pytest.approx(_held_out_floor(), rel=1e-12)
    assert stored.held_out_floor() == pytest.approx(2.28793, abs=5e-6)  # the measurement
    assert 0.002 < stored.held_out_floor() - stored.floor() < 0.0025


def test_no_run_beats_the_chain_on_the_held_out_windows():
    hf = _held_out_floor()
    best = min(
        float(np.nanmin(r.eval_loss)) for r in RUNS.values() if np.isfinite(r.eval_loss).any()
    )
    assert hf <= best, (hf, best)
    assert abs(hf - stored.floor()) < 0.02


# --- the runs: complete, consistent, with provenance ---------------------------------------------


def test_every_grid_run_is_stored_and_nothing_else():
    assert set(RUNS) == {run_id(c) for c in grid.all_configs()}
    assert M["seeds"] == list(grid.SEEDS) and len(grid.SEEDS) >= 3
    assert set(M["slices"]) == set(grid.SLICES)
    for name, sl in M["slices"].items():
        assert sl["runs"] == [run_id(c) for c in grid.configs(name)] and len(sl["why"]) > 50


def _check_provenance(p):
    assert p["torch"].startswith("2.13.0") and p["numpy"]
    assert p["cpu"]["model"] and "avx2" in p["cpu"]["simd_flags"]
    assert p["cpu_capability"] in ("AVX2", "AVX512", "DEFAULT", "ZVECTOR", "SVE256")
    assert p["threads"] == 1 and p["deterministic_algorithms"] is True
    assert set(p["env"]) == set(ENV_VARS) and p["env"]["OMP_NUM_THREADS"] == "1"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", p["date"])
    assert "tools/train.py" in p["command"]


def test_provenance_is_stored():
    _check_provenance(M["provenance"])
    assert M["machines"][0] == M["provenance"]
    for p in M["machines"]:
        _check_provenance(p)
    assert M["recipe"]["adam_eps"] == 1e-8 and M["recipe"]["steps"] == 300
    assert M["record"]["stats"] == list(record.STATS)


def test_the_machine_of_the_first_grid_is_avx2_native():
    # The first grid's machine (AMD EPYC, AVX2, no AVX-512): "native" is torch's AVX2 kernels.
    p = M["provenance"]
    assert "avx512f" not in p["cpu"]["simd_flags"] and p["cpu_capability"] == "AVX2"
    assert p["env"]["ATEN_CPU_CAPABILITY"] == "unset"


def test_the_two_runs_of_a_seed_in_a_comparison_come_from_one_machine():
    # seeds 0-2 of the first grid's slices were made on machine 0; every other run on the last
    # machine: so a configuration's seed s and another's seed s share a machine
    first = {
        run_id(c) for n in grid.FIRST_SLICES for c in grid.configs(n) if c.seed in grid.FIRST_SEEDS
    }
    last = len(M["machines"]) - 1
    for rid, r in RUNS.items():
        assert r.machine == (0 if rid in first else last), rid


def test_the_grid_fits_the_time_budget():
    # the CPU time of every stored run, over 2 cores: what `make training` costs on an idle
    # 2-core machine (the first grid's runs were timed on a loaded one, so this is an upper bound)
    cpu = sum(r.meta["cpu_seconds"] for r in RUNS.values() if "cpu_seconds" in r.meta)
    assert cpu / 2 <= 90 * 60, cpu / 2
    t = M["timing"]
    assert t["workers"] == 2 and t["threads_per_worker"] == 1


def test_stored_data_is_compact():
    # about 8 kB a run (float32 losses, gradient norms and q records, compressed)
    total = sum(f.stat().st_size for f in stored.DATA_DIR.iterdir() if f.is_file())
    assert total <= 10e3 * len(RUNS) + 1e6, total


def _sites(placement: str, layers: int) -> list[str]:
    """The norm sites of a model, in the order it records them."""
    per = {"pre": ("attn.in", "mlp.in"), "post": ("attn.post", "mlp.post"),
           "sandwich": ("attn.in", "mlp.in", "attn.out", "mlp.out"), "none": ()}[placement]
    if placement == "sandwich":  # each sublayer's in and out norms
        per = ("attn.in", "mlp.in", "attn.out", "mlp.out")
    out = [f"{i}.{s}" for i in range(layers) for s in per]
    return out + (["final"] if placement in ("pre", "sandwich") else [])


def test_sites_of_the_two_block_model():
    assert _sites("sandwich", 2) == ["0.attn.in", "0.mlp.in", "0.attn.out", "0.mlp.out", "1.attn.in",
                                     "1.mlp.in", "1.attn.out", "1.mlp.out", "final"]
    assert _sites("post", 2) == ["0.attn.post", "0.mlp.post", "1.attn.post", "1.mlp.post"]


@pytest.mark.parametrize("rid", sorted(RUNS))
def test_a_runs_arrays_have_their_shapes(rid):
    r = RUNS[rid]
    assert list(r.sites) == _sites(r.config.placement, r.config.layers or 2)
    assert r.loss.shape == r.grad_norm.shape == (r.steps,) and r.loss.dtype == np.float32
    assert r.eval_loss.shape == (len(recipe.eval_steps(r.steps)),)
    assert r.q.shape == (len(r.record_steps), len(r.sites), len(record.STATS))
    prec = r.config.ft_precision if r.config.is_finetune else r.config.precision
    assert (r.scale is not None) == PRECISIONS[prec].scaler
    if r.stopped_at is None:
        assert np.all(np.isfinite(r.eval_loss))
    else:
        assert np.isnan(r.loss[r.stopped_at + 1 :]).all()
    if r.first_nonfinite_step is None:
        assert np.isfinite(r.loss).all() and np.isfinite(r.grad_norm).all()
    else:
        k = r.first_nonfinite_step
        assert np.isfinite(r.loss[:k]).all() and not (
            np.isfinite(r.loss[k]) and np.isfinite(r.grad_norm[k])
        )
    shares = r.q[..., [record.STATS.index(c) for c in record.STATS if c.startswith("share")]]
    assert np.all((shares[np.isfinite(shares)] >= 0) & (shares[np.isfinite(shares)] <= 1))


def test_fine_tuning_starts_from_the_stored_pretraining():
    # The trained model of a fine-tuning job is its eps_sweep run: same bits, same held-out loss.
    ft = [r for r in RUNS.values() if r.config.is_finetune]
    # the finetune slice's draws 0-2 and ten_seeds' draws 3-9 of its float32 swaps
    listed = {run_id(c) for s in grid.SLICES for c in grid.configs(s) if c.is_finetune}
    assert {r.id for r in ft} == listed and len(listed) > len(grid.configs("finetune"))
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
        json.loads(
            (stored.DATA_DIR / name).read_text(encoding="utf-8"),
            parse_constant=lambda c: pytest.fail(f"{name} holds {c}"),
        )


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
        assert (
            p["cpu_capability"]
            == {"unset": M["provenance"]["cpu_capability"], "avx2": "AVX2", "default": "DEFAULT"}[
                want
            ]
        )


def test_native_one_thread_reproduces_the_grid_bit_for_bit():
    for rid in SP["configs"]:
        groups = spread.identical_groups(rid)
        assert any({"stored", "native-1t"} <= set(g) for g in groups), (rid, groups)
        # native is AVX2 on this machine: capping at avx2 changes nothing
        assert any({"native-1t", "avx2-1t"} <= set(g) for g in groups), (rid, groups)


# --- the conclusions ---------------------------------------------------------------------------------

CLAIMS = {c.key: c for c in claims.all_claims()}


def test_every_claim_has_a_verdict_and_a_finding():
    assert list(CLAIMS) == [
        "sigma_zero",
        "fp16_tiny_eps",
        "sweet_spot",
        "too_large",
        "norm_in_float32",
        "norm_vs_none",
        "pre_vs_post",
        "finetune_mismatch",
    ]
    for c in CLAIMS.values():
        assert c.verdict in claims.VERDICTS and len(c.finding) > 200 and c.effects
        # Holm-adjusted within the verdict: an adjusted p is never below the raw one
        assert all(e.p_adjust is not None and e.p_adjust >= e.p for e in c.effects)


def test_the_arithmetic_floor_is_measured_and_small():
    from lneps.book.training.effects import arithmetic_floor

    for m in ("final_excess", "mean_excess", "excess_at_50", "excess_at_150"):
        assert 0 < arithmetic_floor(m) < 1e-3, m
    # its largest value is the bfloat16 run's; float32 runs move by less than 1e-5
    per = spread.metric_spread(effects.final_excess)
    assert max(v for k, v in per.items() if "fp32" in k) < 1e-5
    assert arithmetic_floor("final_excess") == pytest.approx(6.9e-5, rel=0.01)
    # far below the margin: the floor never decides an outcome at 0.002 nats
    assert arithmetic_floor("final_excess") < effects.MARGINS["final_excess"] / 20


def test_sigma_zero():
    c = CLAIMS["sigma_zero"]
    f = c.facts
    assert c.verdict == "qualified"
    # zero rows appear only at the sandwich's output norms under zero-initialized projections ...
    assert f["only_sandwich_zero_resid_outputs"]
    assert {k.split("/")[-1] for k in f["zero_row_sites"]} == {
        "0.attn.out",
        "0.mlp.out",
        "1.attn.out",
        "1.mlp.out",
    }
    # ... at step 0 only without loss scaling, for as long as the scaler skips steps with it
    assert f["only_at_step_0_without_loss_scaling"]
    assert (
        10
        <= f["last_zero_row_step_with_loss_scaling"][
            "sandwich/zero_resid/1e-12/fp16_norm32/0.attn.out"
        ]
        <= 25
    )
    # epsilon = 0 there: dead at step 0 in every seed; nowhere else
    assert set(f["eps0_first_nonfinite_step"]) == {0} and set(f["eps0_stopped_at"]) == {0}
    assert f["eps0_dead_elsewhere"] == [] and f["eps0_runs"] >= 20
    dead, gn, _ = c.effects
    assert dead.diff == math.inf and dead.is_effect
    # the gradient at step 0 grows as 1/sqrt(eps): 1e-12 against 1e-5 is 10^3.5
    assert gn.diff == pytest.approx(3.5, abs=0.1) and gn.is_effect
    g = f["grad_norm_step0"]
    assert min(g["1e-12"]) > 1e5 and 100 < min(g["1e-05"]) and max(g["pre, normal, 1e-5"]) < 10
    # the small init is poor but gives q ~ 1e-8, not 0
    assert 1e-9 < f["q_min_small_init_step0"] < 1e-7
    # one zero row: kills float32 and bfloat16 in one step; loss scaling skips it; 1e-12 is enough
    assert (
        f["probe_kills_fp32_bf16"]
        and f["probe_guarded_by_loss_scaling"]
        and f["probe_1e-12_survives"]
    )
    for p in f["probe"]:
        assert p["zero_rows"] == 1 and p["rows"] == 512
        if p["eps"] == 0:
            assert (
                p["nonfinite_out_rows"] == 1 and p["nonfinite_logit_share"] == 64 / 512
            )  # its whole window


def test_fp16_tiny_eps():
    c = CLAIMS["fp16_tiny_eps"]
    f = c.facts
    assert c.verdict == "qualified"
    assert f["float16_of_1e-12"] == 0.0 and f["float16_of_1e-8"] == 0.0
    pre, sandwich = c.effects
    assert pre.n == sandwich.n == effects.MIN_DRAWS
    assert pre.is_equivalent and abs(pre.diff) < 1e-4  # where q > 0: nothing
    assert f["pre_max_share_below_float16_threshold"] == 0 and f["pre_min_q_over_1e-12"] > 1e8
    assert sandwich.diff == math.inf and sandwich.is_effect  # where q = 0: dead
    assert sandwich.dead_b == 10 and sandwich.dead_a == 0  # float32 with 1e-12 trains
    assert set(f["sandwich_e_first_nonfinite"]) == {0} and all(
        s is not None for s in f["sandwich_e_stopped_at"]
    )
    # (d) at the sandwich: three draws, a fact (skipped steps), not a comparison
    assert f["sandwich_d_draws"] == 3 and not any(f["sandwich_d_dead"]) and all(
        10 <= n <= 25 for n in f["sandwich_d_skipped_steps"]
    )
    # a variance computed in float16 at q0 ~ 2e-8 is 0: with 1e-12 every draw dies at step 0
    half = f["half_kernel_small_1e-12"]
    assert half["dead"] == half["runs"] == 10 and half["first_nonfinite_step"] == [0]
    assert half["comparison"].diff == math.inf and half["comparison"].is_effect


def test_sweet_spot():
    c = CLAIMS["sweet_spot"]
    assert c.verdict == "corrected"
    for name, f in c.facts.items():
        assert not f["range_beats_eps0"] and f["range_decided"], name
        assert f["better_than_eps0"] == [], name
        # float32's threshold predicts exactly which runs are epsilon = 0's, bit for bit
        assert f["bit_identical_to_eps0"] == f["never_below_float32_threshold"], name
    normal = c.facts["LayerNorm, init normal"]
    assert normal["bit_identical_to_eps0"] == [0.0, 1e-12]
    # where q0 ~ 1e-3 every epsilon up to 1e-5 is equivalent to none, over ten seeds
    assert {1e-6, 1e-5} <= set(normal["plateau"]) and normal["outcome"]["0.001"] == "effect"
    table = claims.eps_against_zero()
    for fam in ("LayerNorm, init normal", "RMSNorm, init normal"):
        for e in (1e-6, 1e-5):
            assert table[fam][e].n >= 10 and table[fam][e].is_equivalent, (fam, e)
    # the edge moves with q: at the small init (q ~ 2e-8 at step 0) 1e-6 and 1e-5 cost, 1e-8 not
    small = c.facts["LayerNorm, init small"]
    assert small["median_q_step0"] < 1e-7
    s = table["LayerNorm, init small"]
    assert all(s[e].n >= 10 for e in (1e-8, 1e-6, 1e-5))
    assert s[1e-8].is_equivalent
    assert s[1e-6].is_effect and 0.005 < s[1e-6].diff < 0.012 and s[1e-6].ci()[0] > 0.004
    assert s[1e-5].is_effect and 0.015 < s[1e-5].diff < 0.04


def test_the_rule_in_q():
    rule = claims.new_model_eps()
    # every epsilon far below q0 (q0/eps >= about 80, or 2 at the recipe's budget) was
    # equivalent to none; every one above q0 (q0/eps < 1) cost, where ten seeds resolve it
    assert rule["equivalent_from_q0_over_eps"] <= 100
    for r in rule["rows"]:
        c = r["comparison"]
        if r["q0_over_eps"] >= rule["equivalent_from_q0_over_eps"]:
            assert c.outcome == "equivalent", r
        if r["q0_over_eps"] < 1 and c.n >= 10:
            assert c.is_effect and c.diff > 0, r
    assert rule["largest_eps_equivalent_everywhere"] in (1e-12, 1e-8)


def test_too_large():
    c = CLAIMS["too_large"]
    assert c.verdict == "qualified"
    costs = [e for e in c.effects if e.a.endswith("eps 1e-5") and e.metric == "final_excess"]
    assert len(costs) == 6 and all(e.is_effect and e.diff > 0 for e in costs)
    normal = c.facts["LayerNorm, init normal"]
    assert 0.02 < normal["final_cost_1e-1"] < 0.06 and 0.04 < normal["final_cost_1"] < 0.12
    assert normal["share_of_gap_learnt_at_1"] > 0.8  # not destroyed
    assert c.facts["LayerNorm, init small"]["share_of_gap_learnt_at_1"] < 0.6  # most of it lost
    assert c.facts["destroyed"] == {
        "LayerNorm, init normal": False,
        "LayerNorm, init small": True,
        "RMSNorm, init normal": False,
    }
    # the network raises q against a large epsilon
    assert normal["q_p50_first_site_end"]["1"] > 2 * normal["q_p50_first_site_end"]["1e-05"]


def test_norm_vs_none():
    c = CLAIMS["norm_vs_none"]
    assert c.verdict == "qualified"
    assert all(c.facts["norm_better"].values()) and not any(c.facts["none_better"].values())
    assert not c.facts["unstable_none"] and not c.facts["unstable_pre"]
    loss = [e for e in c.effects if e.metric in ("final_excess", "mean_excess")]
    assert all(e.is_effect and e.diff > 0.05 for e in loss)
    # at the recipe's learning rate the largest gradient is smaller without a norm
    assert c.facts["normal"]["log10_max_grad_norm"]["diff"] < 0


def test_where_the_placement_verdicts_hold():
    rows = {r["condition"]: r for r in claims.where_it_holds()}
    assert "recipe (2 blocks, lr 3e-3)" in rows and len(rows) >= 3
    base = rows["recipe (2 blocks, lr 3e-3)"]
    assert base["none_minus_pre"].is_effect and base["none_minus_pre"].n >= 10
    # the norm's value shrinks as the learning rate rises
    if "lr 3e-2" in rows:
        assert rows["lr 3e-2"]["none_minus_pre"].diff < base["none_minus_pre"].diff / 2
        g = rows["lr 3e-2"]["max_grad_norm"]
        assert g["none"] > g["pre"]  # at 3e-2 the runs without a norm have the largest gradients


def test_pre_vs_post():
    c = CLAIMS["pre_vs_post"]
    assert c.verdict == "corrected"
    assert all(c.facts["post_better"].values()) and not c.facts["unstable_post"]
    loss = [e for e in c.effects if e.metric in ("final_excess", "mean_excess")]
    assert all(e.is_effect and e.diff < 0 for e in loss)


def test_finetune_mismatch():
    c = CLAIMS["finetune_mismatch"]
    # every swap, of epsilon and of precision, on ten draws
    assert len(c.effects) == 24 and c.facts["tested"] == 24 and c.facts["few_draws"] == []
    assert all(e.n == effects.MIN_DRAWS for e in c.effects)
    # 1e-3 costs a few 1e-4 nats (an effect, well inside the margin); every other swap, of
    # epsilon between 1e-12 and 1e-5 or of the precision, is equivalent to its control
    assert c.verdict == "qualified"
    for e in c.effects:
        if e.b.startswith("0.001"):
            assert e.is_effect and 0 < e.diff < effects.MARGINS[e.metric] / 2, e
        else:
            assert e.is_equivalent, e
    assert {e.b for e in c.effects if not e.b.endswith("fp32")} == {
        "1e-12 bf16_norm16", "1e-12 fp16_eps16", "1e-05 bf16_norm16", "1e-05 fp16_eps16"}
    for key, f in c.facts.items():
        if "->" in key and "0.001" not in key.split("->")[1]:
            assert f["predicted_change_at_median_q"] < 1e-4, key
            assert abs(f["after_finetune"]) < 1e-4, key


def test_norm_in_float32():
    c = CLAIMS["norm_in_float32"]
    assert c.verdict == "qualified"
    assert c.facts["kernels_accumulate_in_float32"] and c.facts["cpu_autocast_keeps_input_type"]
    # the norm's input and output in bfloat16, and bfloat16 autocast: equivalent, ten draws
    cb, ab = c.effects[-2:]
    assert cb.n == ab.n == 10 and cb.is_equivalent and ab.is_equivalent
    assert c.facts["bf16_outcomes"] == ["equivalent", "equivalent"]
    # the float16 kernel: dead where epsilon is 0 in float16 and q0 below float16's range
    assert c.facts["half_dead_small_eps"] == [1e-12, 1e-8]
    assert all(e.n == 10 for e in c.effects)


def test_half_kernel():
    hk = claims.half_kernel()
    rows = {(r["init"], r["eps"]): r for r in hk["rows"]}
    assert list(rows) == list(grid.HALF_KERNEL)
    stop = M["recipe"]["stop_after_nonfinite"]
    for (init, eps), r in rows.items():
        assert r["runs"] == 10 and r["comparison"].n == 10
        assert r["eps_float16"] == float(np.float16(eps))
        runs = stored.select(init=init, eps=eps, precision="fp16_var16", steps=150)
        assert all(x.meta["eps_used"] == r["eps_float16"] for x in runs)
        if init == "small":
            # q0 below half float16's smallest subnormal: the float16 variance is 0 at step 0
            assert r["q0"] < 2.0**-25 and r["q0_min"] > 1e-9
        assert r["control_dead"] == 0  # every control trained
        if r["eps_float16"] == 0 and init == "small":
            # every draw died: the share dying is at least 0.025 ** (1/10) = 0.69 (95 %)
            assert r["dead"] == 10 and r["first_nonfinite_step"] == [0]
            assert r["dead_ci95"] == pytest.approx((0.025**0.1, 1.0), abs=1e-9)
            assert set(r["nonfinite_steps"]) == {stop}
            assert r["comparison"].diff == math.inf and r["comparison"].is_effect
        else:
            assert r["dead"] == 0 and math.isfinite(r["comparison"].diff)
            assert r["dead_ci95"] == pytest.approx((0.0, 1 - 0.025**0.1), abs=1e-9)
    # 1e-6 in float16 (1.01e-6) trains like float32 at 1e-6; at the usual init the float16
    # variance costs nothing; 1e-6 beats 1e-5 in the kernel as it does in float32
    assert rows["small", 1e-6]["comparison"].is_equivalent
    assert rows["normal", 1e-12]["comparison"].is_equivalent
    assert hk["eps_cost"].is_effect and hk["eps_cost"].diff < -0.01
    # where epsilon acts: it exceeds q0, and the median q at the first norm reaches it later
    for e in (1e-6, 1e-5):
        r = rows["small", e]
        assert r["q0_over_eps"] < 0.05 and r["steps_to_q_eps"] > 0
    assert rows["small", 1e-6]["steps_to_q_eps"] < rows["small", 1e-5]["steps_to_q_eps"]
    # at the usual init q0 is far inside float16's range
    assert rows["normal", 1e-12]["q0"] > 1e-4


# --- q at initialization (lneps.torch's probe, stored) -----------------------------------------------


def test_the_probe_is_stored_and_reads_what_the_runs_record():
    rows = {r["model"]: r for r in stored.probe_summary()}
    assert len(rows) == 23
    # the small init puts q near 2e-8 at every norm of a pre-norm model; the usual one near 1e-3
    assert (
        1e-9
        < rows["LayerNorm, pre-norm, init small"]["q_min"]
        < rows["LayerNorm, pre-norm, init small"]["q_median"]
        < 1e-7
    )
    assert 1e-4 < rows["LayerNorm, pre-norm, init normal"]["q_median"] < 1e-2
    assert rows["LayerNorm, sandwich-norm, init zero_resid"]["q_min"] == 0
    # what the probe saw at step 0 of seed 0 is what the stored run of that model recorded there
    pr = stored.probe()
    first = next(
        r
        for r in pr["lab"]
        if r["config"]["init"] == "small"
        and r["seed"] == 0
        and r["config"]["placement"] == "pre"
        and r["config"]["norm"] == "LayerNorm"
        and "layers" not in r["config"]
    )
    run = stored.one(
        norm="LayerNorm",
        placement="pre",
        init="small",
        eps=1e-5,
        precision="fp32",
        steps=300,
        seed=0,
    )
    site = (
        first["sites"]["blocks.0.norms.attn_in"]
        if "blocks.0.norms.attn_in" in first["sites"]
        else None
    )
    assert site is not None
    assert site["q_min"] == pytest.approx(float(run.stat("q_min", "0.attn.in")[0]), rel=1e-6)
    # MiniLM: its smallest q is billions of times its epsilon (1e-12)
    mini = pr["minilm"]
    assert mini["eps"] == 1e-12 and min(s["q_min"] for s in mini["sites"].values()) > 1e-3
