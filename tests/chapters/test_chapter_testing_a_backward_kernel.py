"""The chapter "Testing a backward kernel": its glued numbers, recomputed here.

The exact gradient is computed by hand (exact sums with fractions, float64 far below the digits
shown); the stored PyTorch data are read with json as well as through
lneps.book.frameworks.torch_backward.
"""

import json
import math
from fractions import Fraction as F
from pathlib import Path

import numpy as np
import pytest

from lneps.book.printing import sci
from notebooks import glued, read

NB = "testing_a_backward_kernel.ipynb"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def g():
    return glued(NB)


def test_it_follows_the_forward_chapter_in_part_three():
    toc = (ROOT / "_toc.yml").read_text()
    part = toc.split('"Part III. In the wild"')[1].split("- caption")[0]
    files = [line.split("file:")[1].strip() for line in part.splitlines() if "file:" in line]
    i = files.index("book/testing_a_backward_kernel")
    assert files[i - 1] == "book/testing_a_kernel"


def test_no_framework_is_imported():
    import re

    code = "\n".join(c.source for c in read(NB).cells if c.cell_type == "code")
    # (lneps.book.frameworks.torch_backward is stored data, read without torch)
    assert not re.search(r"^\s*(import|from)\s+(torch|jax|flax|onnx)", code, re.M)


def test_the_wrong_sign(g):
    import lneps
    import lneps.testing as lt

    rng = np.random.default_rng(7)
    x, dy = rng.normal(size=(2, 16, 64)).astype(np.float32)
    gam = rng.uniform(0.5, 2, size=64).astype(np.float32)
    gh = dy * gam
    t = x - x.mean(axis=-1, keepdims=True)
    r = np.float32(1) / np.sqrt((t * t).mean(axis=-1, keepdims=True) + np.float32(1e-5))
    u = t * r
    term = u * (gh * u).mean(axis=-1, keepdims=True)
    wrong = (gh - gh.mean(axis=-1, keepdims=True) + term) * r
    exact = lneps.layer_norm_backward(x.astype(np.float64), dy.astype(np.float64),
                                      gam.astype(np.float64), eps=1e-5).x
    # the prose: the error is twice the wrong-signed term (times r), up to float32 rounding
    err = wrong.astype(np.float64) - exact
    twice = 2 * (term * r).astype(np.float64)
    assert np.abs(err - twice).max() < 1e-5 * np.abs(twice).max()
    assert g["bwd_n"] == x.size
    bound = lt.backward_bound("layer_norm", "x", x=x, dy=dy, gamma=gam, eps=1e-5)
    rep = lt.compare(wrong, x=x, dy=dy, gamma=gam, eps=1e-5, op="layer_norm_backward", wrt="x")
    assert g["bwd_over"] == int(rep.exceeding(bound).sum()) > 0


def _stored():
    with (ROOT / "src/lneps/book/data/frameworks/torch_backward.json").open() as f:
        return json.load(f)


def test_torch_rms_norm_backward_on_wide_range_rows(g):
    from lneps.book.frameworks import torch_backward as TB

    c = TB.load()["cases"]["rms_norm|float32|64|wide_range"]
    x, dy = c["x"].astype(np.float64), c["dy"].astype(np.float64)
    # the exact gradient by hand: r = 1/sqrt(mean(x^2) + eps), dx = r (dy - x r^2 mean(dy x))
    exact = []
    for xr, dr in zip(x.tolist(), dy.tolist()):
        q = sum(F(v) * F(v) for v in xr) / len(xr) + F(c["eps"])
        r = 1 / math.sqrt(q)  # float64, far below the digits shown
        m = float(sum(F(a) * F(b) for a, b in zip(xr, dr)) / len(xr))
        exact.append([r * (b - a * r * r * m) for a, b in zip(xr, dr)])
    exact = np.array(exact)
    assert np.abs(exact).max() < 1e-5  # below torch.testing's float32 atol: it passes anything
    stored = _stored()["cases"]["rms_norm|float32|64|wide_range"]["torch_testing"]["dx"]
    assert stored["passed"] and stored["atol"] == 1e-5 and g["tt_atol32"] == "10⁻⁵"
    over = int(g["rms_over"])
    assert 0 < over < g["rms_n"] == x.size
    # the worst element shown: torch's value and the exact one, far apart
    dx = c["dx"].astype(np.float64)
    shown = [i for i in np.ndindex(dx.shape)
             if sci(exact[i], 1) == g["rms_exact"] and sci(dx[i], 1) == g["rms_torch"]]
    assert shown and all(abs(dx[i] - exact[i]) > 10 * abs(exact[i]) for i in shown)


def test_torch_layer_norm_backward_against_its_class(g):
    stored = _stored()["cases"]
    layer = [c for c in stored.values() if c["op"] == "layer_norm"]
    assert g["tb_cases"] == len(layer) == 28 and g["tb_saved"] == "float16"
    assert 0 < g["tb_x_default"] <= 28 and 0 < g["tb_beta_own"] <= 28
    assert g["tb_tt"] == sum(not c["torch_testing"]["dx"]["passed"] for c in layer)
    assert g["tb_suspect"].startswith("dβ accumulated in float16")
