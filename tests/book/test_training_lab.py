"""The training lab's parts (lneps.book.training), fast: the model, its norms in each precision
mode, the recorder, the recipe, the determinism of a run, the zero-row probe.

Without torch these tests skip, except under CI=1, where they fail: CI installs the extra
(requirements-frameworks.txt), so a skip there would hide a broken install.
"""

import importlib.util
import os

import numpy as np
import pytest

from lneps.book.training import config, corpus, grid, recipe, record
from lneps.book.training.precision import PRECISIONS, effective_eps

HAVE_TORCH = importlib.util.find_spec("torch") is not None
if not HAVE_TORCH and os.environ.get("CI"):
    pytest.fail("CI must install requirements-frameworks.txt; missing torch", pytrace=False)
pytestmark = pytest.mark.skipif(not HAVE_TORCH, reason="torch (the frameworks extra) not installed")

if HAVE_TORCH:
    import torch

    from lneps.book.training import model as M
    from lneps.book.training import run


@pytest.fixture(autouse=True)
def fixed_arithmetic():
    """The lab's arithmetic (one thread, deterministic kernels), restored afterwards."""
    threads, det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    run.configure(1)
    yield
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(det)


@pytest.fixture(scope="module")
def stream():
    return corpus.generate()


def test_model_is_the_specified_size():
    m = M.TinyGPT(M.ModelSpec())
    s = m.spec
    assert (s.width, s.heads, s.layers, s.context, s.vocab) == (64, 4, 2, 64, corpus.CHAIN.vocab)
    assert 100_000 < m.n_params() < 120_000
    x = torch.zeros(2, 64, dtype=torch.long)
    assert m(x).shape == (2, 64, corpus.CHAIN.vocab)


@pytest.mark.parametrize("placement, sites", [
    ("pre", ["0.attn.in", "0.mlp.in", "1.attn.in", "1.mlp.in", "final"]),
    ("post", ["0.attn.post", "0.mlp.post", "1.attn.post", "1.mlp.post"]),
    ("sandwich", ["0.attn.in", "0.mlp.in", "0.attn.out", "0.mlp.out", "1.attn.in", "1.mlp.in", "1.attn.out",
                  "1.mlp.out", "final"]),
    ("none", []),
])
def test_sites_follow_the_placement(placement, sites):
    assert M.TinyGPT(M.ModelSpec(placement=placement)).sites == sites


def test_inits():
    torch.manual_seed(0)
    normal = M.TinyGPT(M.ModelSpec(init="normal"))
    torch.manual_seed(0)
    small = M.TinyGPT(M.ModelSpec(init="small"))
    torch.manual_seed(0)
    zero = M.TinyGPT(M.ModelSpec(init="zero_resid"))
    assert normal.tok.weight.std().item() == pytest.approx(0.02, rel=0.1)
    assert small.tok.weight.std().item() == pytest.approx(1e-4, rel=0.1)
    for blk_n, blk_z in zip(normal.blocks, zero.blocks):
        assert torch.count_nonzero(blk_z.attn.out.weight) == 0 and torch.count_nonzero(blk_z.mlp.down.weight) == 0
        assert torch.equal(blk_n.attn.qkv.weight, blk_z.attn.qkv.weight)  # same draws otherwise
    assert all(torch.all(n.weight == 1) for n in normal.modules() if isinstance(n, M.SiteNorm))


@pytest.mark.parametrize("precision, out_dtype", [
    ("fp32", "float32"), ("bf16_norm32", "float32"), ("bf16_norm16", "bfloat16"), ("fp16_norm32", "float32"),
    ("fp16_eps16", "float16"), ("fp16_var16", "float16"),
])
def test_each_mode_computes_its_norm_in_its_format(precision, out_dtype):
    out_dtype = getattr(torch, out_dtype)
    spec = M.ModelSpec(precision=precision, eps=1e-12)
    norm = M.SiteNorm(spec, "s", None)
    x = torch.randn(4, 64)
    low = PRECISIONS[precision].autocast
    ctx = torch.autocast("cpu", dtype=getattr(torch, low)) if low else torch.autocast("cpu", enabled=False)
    with ctx:
        y = norm(x.to(getattr(torch, low)) if low else x)
    assert y.dtype == out_dtype
    assert norm.eps == (0.0 if precision in ("fp16_eps16", "fp16_var16") else 1e-12)


def test_under_cpu_autocast_the_pre_norm_stream_is_float32():
    # embeddings (float32) plus bfloat16 sublayer outputs promote to float32: plain CPU autocast would run
    # these norms in float32; mode (c) casts to bfloat16 to model a bfloat16 stream
    seen = {}

    def look(mod, args):
        seen[mod.site] = args[0].dtype  # returns None: the input is left as it is

    m = M.TinyGPT(M.ModelSpec(precision="bf16_norm16"))
    for mod in m.modules():
        if isinstance(mod, M.SiteNorm):
            mod.register_forward_pre_hook(look)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        m(torch.zeros(1, 64, dtype=torch.long))
    assert set(seen.values()) == {torch.float32} and len(seen) == 5


def test_effective_eps_rounds_only_in_modes_e_and_f():
    for m in ("fp16_eps16", "fp16_var16"):
        assert effective_eps(1e-12, m) == 0.0 and effective_eps(1e-8, m) == 0.0
        assert effective_eps(1e-5, m) == float(np.float16(1e-5)) != 1e-5
    rounded = ("fp16_eps16", "fp16_var16")
    assert all(effective_eps(1e-12, p) == 1e-12 for p in PRECISIONS if p not in rounded)
    assert [p for p, v in PRECISIONS.items() if v.kernel == "half"] == ["fp16_var16"]


def _tree16(x: np.ndarray) -> np.ndarray:
    """The float16 tree sum over the last axis, each addition exact in float64 (two float16
    values sum to at most 51 significant bits) and then rounded once to float16."""
    x = x.astype(np.float16)
    while x.shape[-1] > 1:
        h = x.shape[-1] // 2
        x = (x[..., :h].astype(np.float64) + x[..., h:].astype(np.float64)).astype(np.float16)
    return x


def test_the_float16_tree_sum_rounds_each_addition_once():
    g = np.random.default_rng(3)
    x = np.concatenate([g.normal(0, s, (50, 64)) for s in (1e-4, 1e-2, 1.0, 300.0)])
    got = M._sum16(torch.from_numpy(x).to(torch.float16)).numpy()
    assert got.dtype == np.float16 and np.array_equal(got, _tree16(x))
    with pytest.raises(ValueError, match="power-of-two"):
        M._sum16(torch.zeros(2, 48, dtype=torch.float16))


def test_the_float16_kernel_computes_every_statistic_in_float16():
    g = np.random.default_rng(4)
    x16 = g.normal(0, 1, (64, 64)).astype(np.float16)
    # the float16 steps, each rounded once (numpy's float16 operations round their exact result
    # for +, -, *; rsqrt from float64 of the float16 value, rounded once)
    mean = (_tree16(x16).astype(np.float64) / 64).astype(np.float16)
    d = (x16.astype(np.float64) - mean).astype(np.float16)
    v = (_tree16((d.astype(np.float64) ** 2).astype(np.float16)).astype(np.float64) / 64
         ).astype(np.float16)
    e16 = np.float16(1e-5)
    r = (1 / np.sqrt((v.astype(np.float64) + e16).astype(np.float16).astype(np.float64))
         ).astype(np.float16)
    want = (d.astype(np.float64) * r).astype(np.float16)
    got = M.half_norm(torch.from_numpy(x16), "LayerNorm", torch.ones(64), torch.zeros(64), 1e-5)
    assert got.dtype == torch.float16
    # torch's float16 rsqrt may differ from the once-rounded one by an ulp
    ulp = np.spacing(np.abs(want)).astype(np.float64)
    assert np.all(np.abs(got.numpy().astype(np.float64) - want) <= ulp)


@pytest.mark.parametrize("kind", ["LayerNorm", "RMSNorm"])
def test_the_float16_kernels_backward_is_the_norms_gradient(kind):
    # against float64 autograd through torch's own norm: float16's relative precision, 2^-11,
    # a few times over (the means of the backward are float16 sums of 64 terms)
    g = torch.Generator().manual_seed(5)
    x = torch.randn(8, 64, generator=g, dtype=torch.float64) * 0.5 + 0.1
    w, b, up = (torch.randn(*s, generator=g, dtype=torch.float64) for s in ((64,), (64,), (8, 64)))
    xr = x.clone().requires_grad_()
    if kind == "LayerNorm":
        torch.nn.functional.layer_norm(xr, (64,), w, b, 1e-5).backward(up)
    else:
        torch.nn.functional.rms_norm(xr, (64,), w, 1e-5).backward(up)
    xh = x.float().requires_grad_()
    y = M.half_norm(xh, kind, w.float(), b.float() if kind == "LayerNorm" else None, 1e-5)
    y.backward(up.half())
    assert y.dtype == torch.float16
    err = float((xh.grad.double() - xr.grad).abs().max() / xr.grad.abs().max())
    assert err < 8 * 2.0**-11, err


def test_the_float16_kernels_backward_does_not_overflow_where_autograd_would():
    # at q = 2e-8 and eps = 1e-5 the float16 variance is 0 and r = 1/sqrt(eps) ~ 316: autograd
    # through rsqrt would form -r^3/2 ~ 1.6e7, beyond float16's 65504; the kernel's formula has r
    x = torch.tensor([1.414e-4, -1.414e-4] * 32).reshape(1, 64).requires_grad_()
    y = M.half_norm(x, "LayerNorm", torch.ones(64), torch.zeros(64), 1e-5)
    y.backward(torch.linspace(-1, 1, 64).reshape(1, 64).half())
    assert torch.all(torch.isfinite(x.grad))
    r = 1 / np.sqrt(float(np.float16(1e-5)))
    assert 0.5 * r**3 > float(np.finfo(np.float16).max)


def test_in_the_float16_kernel_a_variance_below_float16s_range_is_zero():
    # q = 2e-8 (the small init's q0): every centred square is at most one float16 subnormal, and
    # their mean rounds to 0; torch's own kernel (float32 statistics) keeps q
    x = torch.tensor([1.414e-4, -1.414e-4] * 32).reshape(1, 64)
    w, b = torch.ones(64), torch.zeros(64)
    assert np.float16(2e-8) == 0 and np.float16(1e-8) == 0 and np.float16(1e-12) == 0
    y0 = M.half_norm(x, "LayerNorm", w, b, 1e-8)
    assert torch.all(torch.isinf(y0))  # v = 0 and eps = 0: (0 + 0)^(-1/2)
    y5 = M.half_norm(x, "LayerNorm", w, b, 1e-5).double()
    # v = 0: epsilon alone sets the scale, x / sqrt(float16(1e-5))
    want = x.double() / np.sqrt(float(np.float16(1e-5)))
    assert torch.allclose(y5, want, rtol=2e-3)
    ref = torch.nn.functional.layer_norm(x.half(), (64,), eps=0.0)
    assert torch.all(torch.isfinite(ref)) and abs(float(ref.float().pow(2).mean()) - 1) < 0.01


def test_cpu_autocast_leaves_layer_norm_in_its_input_type():
    from lneps.book.training.precision import measure_autocast
    m = measure_autocast()
    got = m["output_dtype"]
    assert got["autocast bfloat16, input bfloat16"]["layer_norm"] == "bfloat16"
    assert got["autocast bfloat16, input float32"]["layer_norm"] == "float32"
    assert got["autocast bfloat16, input float32"]["linear"] == "bfloat16"
    assert m["float16_of"]["1e-12"] == 0.0
    assert all(v["layer_norm_rows_near_300_finite"] for v in m["low_precision_kernels"].values())
    assert m["adamw_half_eps_1e-8"]["param_after_one_step"] == ["-inf", "-inf", "nan"]


@pytest.mark.parametrize("kind", ["LayerNorm", "RMSNorm"])
def test_recorder_q_is_numpy_q(kind):
    rec = M.Recorder()
    x = torch.randn(3, 5, 64, dtype=torch.float32) * 0.1 + 0.3
    y = torch.nn.functional.layer_norm(x, (64,))
    rec.add("s", kind, x, y, 1e-5)
    want = record.q_stats(record.q_of_rows(x.numpy(), kind), 1e-5)
    np.testing.assert_allclose(rec.rows["s"], want, rtol=1e-12)


def test_eps_zero_on_a_zero_row_is_nan_and_tiny_eps_is_zero():
    f = torch.nn.functional.layer_norm
    z = torch.zeros(1, 64)
    assert torch.isnan(f(z, (64,), eps=0.0)).all()
    assert torch.equal(f(z, (64,), eps=1e-12), torch.zeros(1, 64))


def test_a_run_is_the_same_bit_for_bit_and_a_prefix_of_a_longer_one(stream):
    cfg = config.RunConfig(steps=6)
    a = run.run_job([cfg], stream)[config.run_id(cfg)]
    b = run.run_job([cfg], stream)[config.run_id(cfg)]
    longer = config.RunConfig(steps=8)
    c = run.run_job([longer], stream)[config.run_id(longer)]
    assert np.array_equal(a["loss"], b["loss"]) and np.array_equal(a["q"], b["q"], equal_nan=True)
    assert np.array_equal(a["loss"], c["loss"][:6]) and np.array_equal(a["grad_norm"], c["grad_norm"][:6])
    assert a["first_nonfinite_step"] is None and a["stopped_at"] is None
    assert a["q"].shape == (6, 5, len(record.STATS))


def test_a_zero_row_with_eps_zero_kills_a_sandwich_at_step_0(stream):
    cfg = config.RunConfig(placement="sandwich", init="zero_resid", eps=0.0, steps=3)
    r = run.run_job([cfg], stream)[config.run_id(cfg)]
    assert r["first_nonfinite_step"] == 0 and r["stopped_at"] == 0
    zero = r["q"][0, :, record.STATS.index("zero_rows")]
    assert {s for s, z in zip(r["sites"], zero) if z > 0} == {"0.attn.out"}  # the first; NaN after it


def test_pure_half_dies_of_adams_eps(stream):
    cfg = config.RunConfig(precision="fp16_pure", steps=5)
    r = run.run_job([cfg], stream)[config.run_id(cfg)]
    assert r["first_nonfinite_param_step"] == 0 and r["first_nonfinite_step"] == 1


def test_probe_one_zero_row():
    fp32 = run.zero_row_probe(0, "fp32", 0.0)
    assert fp32["zero_rows"] == 1 and not fp32["loss_finite"] and fp32["nonfinite_param_share"] == 1.0
    guarded = run.zero_row_probe(0, "fp16_norm32", 0.0)
    assert guarded["step_skipped"] and guarded["nonfinite_param_share"] == 0.0
    tiny = run.zero_row_probe(0, "fp32", 1e-12)
    assert tiny["loss_finite"] and tiny["nonfinite_param_share"] == 0.0


def test_finetune_control_starts_where_pretraining_ended(stream):
    cfg = config.RunConfig(steps=4, ft_eps=1e-5, ft_precision="fp32", ft_steps=2)
    out = run.run_job([cfg.base(), cfg], stream)
    ft = out[config.run_id(cfg)]
    assert ft["eval_before_swap"] == ft["eval_loss"][0] == out[config.run_id(cfg.base())]["eval_loss"][-1]


def test_grid_runs_are_unique_and_seeded():
    cs = grid.all_configs()
    assert len(cs) == len({config.run_id(c) for c in cs})
    by = {}
    for c in cs:
        by.setdefault(c.key(), set()).add(c.seed)
    # three seeds for every configuration of the first grid, ten where ten_seeds extends it,
    # four in the generality slices
    first = {c.key() for n in grid.FIRST_SLICES for c in grid.configs(n)}
    ten = {c.key() for c in grid.configs("ten_seeds")}
    ten |= {c.key() for c in grid.configs("half_kernel")}
    assert ten - {c.key() for c in grid.configs("half_kernel")} <= first
    assert set(grid.SEEDS) == set(grid.FIRST_SEEDS) and len(grid.SEEDS) >= 3
    for k, v in by.items():
        want = set(grid.FIRST_SEEDS) | set(grid.MORE_SEEDS) if k in ten else (
            set(grid.FIRST_SEEDS) if k in first else set(grid.FEW_SEEDS))
        assert v == want, k
    assert set(grid.EPS_SWEEP) >= {0.0, 1e-12, 1e-8, 1e-6, 1e-5, 1e-3, 1e-1, 1.0}
    assert all(len(j) == len({c.base() for c in j}) or len({c.base() for c in j}) == 1 for j in grid.jobs())


def test_recipe_schedule_and_batches():
    r = recipe.RECIPE
    lrs = [recipe.lr_at(s, r["steps"], r["lr"], r["warmup"], r["final_lr_fraction"]) for s in range(r["steps"])]
    assert lrs[r["warmup"] - 1] == pytest.approx(r["lr"]) and lrs[-1] == pytest.approx(r["lr"] * r["final_lr_fraction"])
    a = recipe.batch_offsets(0, 300, 8, 64, corpus.CHAIN.length)
    assert np.array_equal(a[:20], recipe.batch_offsets(0, 20, 8, 64, corpus.CHAIN.length))
    assert a.max() + 65 <= corpus.CHAIN.length - recipe.HELD_OUT  # never reads the held-out tail


def test_the_generality_slices_change_only_what_they_name():
    from lneps.book.training import run

    c = config.RunConfig(layers=4, width=128)
    spec = run.spec_of(c)
    assert (spec.layers, spec.width, spec.mlp) == (4, 128, 512)
    assert run.spec_of(config.RunConfig()) == run.spec_of(config.RunConfig(lr=1e-2, warmup=0))
    assert config.run_id(config.RunConfig(lr=3e-2)).endswith("-lr3e-02")
    assert config.run_id(config.RunConfig(layers=8, warmup=0)).endswith("-L8-wu0")
    # the recipe's own runs keep their names: a field left None is not in the id
    assert config.run_id(config.RunConfig()) == "LayerNorm-pre-normal-eps1e-05-fp32-s0-n300"
    assert {c.lr for c in grid.configs("lr")} == set(grid.LRS)
