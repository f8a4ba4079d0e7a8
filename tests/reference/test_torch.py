"""lneps.torch: the q/eps probe, on tiny models whose q is known in closed form (skips without
torch, the frameworks extra), and site_report without torch."""

import importlib.util
import subprocess
import sys

import numpy as np
import pytest

from lneps.torch import THRESHOLDS, site_report

HAVE_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(
    not HAVE_TORCH, reason="torch (the frameworks extra) not installed"
)


def test_thresholds_are_two_to_the_p_minus_one():
    assert THRESHOLDS == {"float16": 1024.0, "bfloat16": 128.0, "float32": 8388608.0}


def test_site_report_counts_rows_below_each_threshold_exactly():
    eps = 1e-5
    # q/eps = 10, 200, 2000, 1e7: below float16's 1024 twice, bfloat16's 128 once, float32's 2^23 thrice
    s = site_report("s", "LayerNorm", eps, np.array([10, 200, 2000, 1e7]) * eps)
    assert s.share_acts == {"float16": 0.5, "bfloat16": 0.25, "float32": 0.75}
    assert s.q_min == pytest.approx(1e-4) and s.q_median == pytest.approx(1100 * eps)
    assert s.acts("float16") and s.zero_rows == 0
    # epsilon = 0 acts nowhere, and a zero row is counted
    z = site_report("z", "RMSNorm", 0.0, [0.0, 1.0])
    assert z.share_acts == {"float16": 0.0, "bfloat16": 0.0, "float32": 0.0} and z.zero_rows == 1


def test_site_report_bad_input():
    with pytest.raises(ValueError, match="non-finite q"):
        site_report("s", "LayerNorm", 1e-5, [1.0, np.nan])
    with pytest.raises(ValueError, match="no rows"):
        site_report("s", "LayerNorm", 1e-5, [])
    with pytest.raises(ValueError, match="eps must be finite"):
        site_report("s", "LayerNorm", -1.0, [1.0])


def test_importing_lneps_does_not_import_torch():
    code = "import sys, lneps, lneps.torch; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.fixture
def torch():
    if not HAVE_TORCH:
        pytest.skip("torch (the frameworks extra) not installed")
    import torch

    return torch


def _rows(torch, scales, d=8):
    """Rows of +-s alternating: variance and mean square both s^2."""
    sign = torch.tensor([1.0, -1.0] * (d // 2))
    return torch.stack([s * sign for s in scales])


@needs_torch
def test_probe_finds_every_kind_and_measures_known_q(torch):
    from lneps.torch import norm_sites, probe

    class HFRMSNorm(torch.nn.Module):  # Hugging Face's pattern: weight and variance_epsilon
        def __init__(self, d, eps):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(d))
            self.variance_epsilon = eps

        def forward(self, x):
            v = x.pow(2).mean(-1, keepdim=True)
            return self.weight * x * torch.rsqrt(v + self.variance_epsilon)

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln = torch.nn.LayerNorm(8, eps=1e-5)
            self.rms = torch.nn.RMSNorm(8, eps=1e-6)
            self.hf = HFRMSNorm(8, 1e-6)
            self.gn = torch.nn.GroupNorm(2, 4, eps=1e-5)

        def forward(self, x):
            y = self.hf(self.rms(self.ln(x)))
            return self.gn(y.reshape(-1, 4, 2))

    m = Tiny()
    assert set(norm_sites(m)) == {"ln", "rms", "hf", "gn"}
    x = _rows(torch, [1.0, 0.01, 2**-6])
    sites = probe(m, x)
    ln = sites["ln"]
    assert ln.rows == 3 and ln.kind == "LayerNorm" and ln.eps == 1e-5
    assert ln.q_min == pytest.approx(1e-4, rel=1e-6) and ln.q_median == 2.0**-12
    # q/eps = 1e5, 10, 24.4: float16 (1024) acts on two rows, float32 on all three
    assert ln.share_acts["float16"] == pytest.approx(2 / 3) and ln.share_acts["float32"] == 1.0
    # after the layer norm a row's mean square is q/(q + eps): the smallest is 1e-4/1.1e-4
    assert sites["rms"].q_min == pytest.approx(1e-4 / 1.1e-4, rel=1e-6)
    assert not sites["rms"].acts("bfloat16")
    assert sites["hf"].kind == "RMSNorm" and sites["hf"].eps == 1e-6
    g = sites["gn"]
    assert g.kind == "GroupNorm" and g.rows == 3 * 2


@needs_torch
def test_rmsnorm_without_eps_uses_the_inputs_machine_epsilon(torch):
    from lneps.torch import probe

    s = probe(torch.nn.RMSNorm(4), _rows(torch, [1.0], 4))[""]
    assert s.eps == torch.finfo(torch.float32).eps


@needs_torch
def test_monitor_records_during_training_and_detaches(torch):
    from lneps.torch import QMonitor

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8, eps=1e-5))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x = torch.randn(16, 8)
    with QMonitor(m, every=2) as mon:
        for _ in range(5):
            opt.zero_grad()
            m(x).pow(2).sum().backward()
            opt.step()
    assert [c for c, _ in mon.history] == [0, 2, 4]
    assert all(set(s) == {"1"} and s["1"].rows == 16 for _, s in mon.history)
    n = len(mon.history)
    m(x)
    assert len(mon.history) == n  # closed: no hooks left
    with pytest.raises(ValueError, match="every must be"):
        QMonitor(m, every=0)


@needs_torch
def test_a_model_without_norms_is_refused(torch):
    from lneps.torch import probe

    with pytest.raises(ValueError, match="no normalization"):
        probe(torch.nn.Linear(2, 2), torch.ones(1, 2))
