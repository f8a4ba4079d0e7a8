"""lneps.book.minilm.torch_model: all-MiniLM-L6-v2 as a PyTorch module computes what the NumPy
encoder computes, with 13 real nn.LayerNorm(eps=1e-12), and the stored probe of it (probe.json)
is q as the NumPy encoder's layer-norm inputs give it.

The tolerance comes from float32's accumulation bound, not from a fit. The two encoders differ
only in the order and rounding of float32 sums. The longest has k = 1536 terms (the feed-forward's
down-projection), and in any order its error is at most (k - 1) u times the sum of its terms'
magnitudes (u = 2^-24; Higham, "Accuracy and Stability of Numerical Algorithms", 2002, 3.1).
Every LayerNorm rescales its rows to deviation 1, so each site starts afresh from rows of that
scale: every LayerNorm input may differ by k u = 9.2e-5 of its row's standard deviation, q
(quadratic in the row) by 2 k u relative, the unit-length sentence embeddings by k u in distance.
This is a scale argument, not a proof through six layers, so the test also shows it can fail:
measured, the worst input differs by 2.8e-5 of its row's deviation (a factor 3 inside), q by
2.9e-6 relative; the tanh-approximated GELU, a slightly wrong model, is 250 times out (the test asks for 10).
"""

import doctest
import json
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from lneps.book.minilm import encoder, files, torch_model  # noqa: E402
from lneps.book.printing import sci  # noqa: E402
from lneps.torch import norm_sites, probe  # noqa: E402
from network_data import model, sentences  # noqa: E402
from notebooks import BOOK  # noqa: E402

PROBE = BOOK.parent / "src" / "lneps" / "book" / "data" / "training" / "probe.json"
K = 1536
TOL = K * 2.0**-24


@pytest.fixture(scope="module")
def stored():
    return json.loads(PROBE.read_text(encoding="utf-8"))["minilm"]


@pytest.fixture(scope="module")
def tokens(stored):
    """The probe's tokens: the book's first sentences, as tools/train.py --probe takes them."""
    return files.encode(model(), sentences()[: stored["sentences"]])


@pytest.fixture(scope="module")
def numpy_forward(tokens):
    return encoder.forward(model(), tokens, keep_sites=True)


@pytest.fixture(scope="module")
def net():
    torch.set_num_threads(1)
    return torch_model.build(model())


def _run_with_inputs(net, tokens):
    """The torch encoder's embeddings and every LayerNorm's input, by its qualified name."""
    got, handles = {}, []
    for name, m in net.named_modules():
        if isinstance(m, torch.nn.LayerNorm):
            handles.append(m.register_forward_pre_hook(
                lambda mod, args, name=name: got.__setitem__(name, args[0].double().numpy())))
    try:
        with torch.no_grad():
            emb = net(*torch_model.pack(tokens)).double().numpy()
    finally:
        for h in handles:
            h.remove()
    return emb, got


def _worst_site_error(sites, reference) -> float:
    """The largest |difference| of any entry, in units of its row's standard deviation."""
    worst = 0.0
    for name, x in reference.items():
        x = x.astype(np.float64)
        worst = max(worst, float((np.abs(sites[name] - x) / x.std(axis=1, keepdims=True)).max()))
    return worst


def test_thirteen_torch_layer_norms_with_eps_1e12_named_as_the_checkpoint(net):
    norms = {n: m for n, m in net.named_modules() if isinstance(m, torch.nn.LayerNorm)}
    assert list(norms) == list(model().layer_norms)
    assert len(norms) == 13
    assert {(m.eps, m.normalized_shape, m.elementwise_affine) for m in norms.values()} == {
        (1e-12, (384,), True)}
    assert norm_sites(net) == {n: ("LayerNorm", "eps") for n in norms}   # what the probe finds
    # the weights are the file's, every one of them but the unused pooler's
    assert all(torch.equal(p, torch.from_numpy(model().weights[n]))
               for n, p in net.state_dict().items())
    unused = set(model().weights) - set(net.state_dict())
    assert unused == {"embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias"}


def test_output_and_every_layer_norm_input_equal_the_numpy_encoder_s(net, tokens, numpy_forward):
    emb, sites = _run_with_inputs(net, tokens)
    ref = numpy_forward
    assert list(sites) == list(ref.sites)
    for name, x in ref.sites.items():
        assert sites[name].shape == x.shape == (int(ref.lengths.sum()), 384), name
    worst = _worst_site_error(sites, ref.sites)
    assert worst <= TOL, f"a LayerNorm input differs by {worst:.2e} of its row's deviation"
    # the embeddings' sum is the one place the order matches: that site is bit for bit
    np.testing.assert_array_equal(sites["embeddings.LayerNorm"], ref.sites["embeddings.LayerNorm"])
    for name, x in ref.sites.items():
        q_np = x.astype(np.float64).var(axis=1)
        assert np.abs(sites[name].var(axis=1) / q_np - 1).max() <= 2 * TOL, name
    assert np.linalg.norm(emb - ref.embeddings, axis=1).max() <= TOL
    assert np.abs(np.linalg.norm(emb, axis=1) - 1).max() < 1e-6


def test_a_wrong_gelu_fails_the_same_tolerance(net, tokens, numpy_forward, monkeypatch):
    exact = torch.nn.functional.gelu
    monkeypatch.setattr(torch_model.F, "gelu", lambda x: exact(x, approximate="tanh"))
    _, sites = _run_with_inputs(net, tokens[:4])
    rows = int(numpy_forward.lengths[:4].sum())
    assert _worst_site_error(sites, {n: x[:rows] for n, x in numpy_forward.sites.items()}) > 10 * TOL


def test_the_stored_probe_is_q_of_the_numpy_encoder_s_inputs(stored, numpy_forward):
    """Each site's smallest and median q in probe.json (lneps.torch on the torch module) against q
    computed here from the NumPy encoder's inputs: the mean of squared deviations per row, with
    an exactly rounded float64 sum (math.fsum), so its error is far below the digits shown."""
    import math

    assert stored["route"].startswith("lneps.torch.probe on lneps.book.minilm.torch_model")
    assert stored["tokens"] == int(numpy_forward.lengths.sum()) == 417
    assert stored["eps"] == 1e-12 and list(stored["sites"]) == list(numpy_forward.sites)
    for name, x in numpy_forward.sites.items():
        x = x.astype(np.float64)
        mean = [math.fsum(r) / r.size for r in x]
        q = np.array([math.fsum((r - m) ** 2) / r.size for r, m in zip(x, mean)])
        s = stored["sites"][name]
        assert s["rows"] == q.size and s["kind"] == "LayerNorm" and s["eps"] == 1e-12
        for key, mine in (("q_min", q.min()), ("q_median", float(np.median(q)))):
            assert sci(s[key], 1) == sci(mine, 1), (name, key)      # the digits the guide shows
            assert s[key] == pytest.approx(mine, rel=2 * TOL), (name, key)
        # 10^-12 is billions of times below every q: it acts in no row, in no format
        assert s["share_acts"] == {"float16": 0.0, "bfloat16": 0.0, "float32": 0.0}
        assert q.min() / 1e-12 > 2.0**23


def test_the_stored_probe_is_what_lneps_torch_gives_here(stored, net, tokens):
    sites = probe(net, *torch_model.pack(tokens))
    assert list(sites) == list(stored["sites"])
    for name, s in sites.items():
        for key in ("q_min", "q_median", "q_max"):
            assert getattr(s, key) == pytest.approx(stored["sites"][name][key], rel=2 * TOL)


def test_importing_the_numpy_model_does_not_import_torch():
    code = "import sys, lneps.book.minilm; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_bad_input_is_named(net):
    with pytest.raises(ValueError, match="non-empty"):
        torch_model.pack([])
    with pytest.raises(ValueError, match="non-empty"):
        torch_model.pack([[101, 102], []])
    ids, lengths = torch_model.pack([[101, 7592, 102]])
    with pytest.raises(ValueError, match="add up"):
        net.hidden_states(ids, lengths + 1)
    with pytest.raises(ValueError, match="at least one token"):
        net.hidden_states(ids, torch.tensor([3, 0]))


def test_a_checkpoint_lacking_a_weight_is_named():
    m = model()
    weights = {k: m.weights[k] for k in m.weights if k != "encoder.layer.3.output.dense.bias"}
    broken = files.MiniLM(m.directory, m.config, weights, m.tokenizer)
    with pytest.raises(ValueError, match="encoder.layer.3.output.dense.bias"):
        torch_model.build(broken)


def test_docstring_examples_run():
    result = doctest.testmod(torch_model)
    assert result.attempted > 0 and result.failed == 0
