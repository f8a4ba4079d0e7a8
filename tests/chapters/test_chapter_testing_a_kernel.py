"""The chapter "Testing a kernel against the exact answer": its glued numbers, recomputed here.

Errors are measured by hand (the exact value from lneps's float64 path, the ulp from the
format's exponent) rather than through lneps.testing.compare; the stored PyTorch data are read
with json, not through lneps.book.frameworks.
"""

import json
import math
import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import lneps
from lneps.book import kernel_zoo as kz
from lneps.book.printing import sci
from lneps.testing import families, forward_bound
from notebooks import glued, glued_rich, read

NB = "testing_a_kernel.ipynb"
ROOT = Path(__file__).resolve().parents[2]
BF16 = np.dtype(ml_dtypes.bfloat16)


def _ulp(v, dtype):
    fi = ml_dtypes.finfo(dtype)
    m = np.abs(np.asarray(v, dtype=np.float64))
    e = np.floor(np.log2(np.where(m > 0, m, 1.0)))
    e = np.maximum(np.where(m > 0, e, fi.minexp), fi.minexp)
    return 2.0 ** (e - fi.nmant)


def _scaled(y, x, gamma=None, beta=None, eps=1e-5):
    x64 = x.astype(np.float64)
    e = lneps.layer_norm(x64, gamma, beta, eps=eps)
    s = 1.0 if gamma is None else np.abs(gamma.astype(np.float64))
    return np.abs(y.astype(np.float64) - e) / _ulp(np.fmax(np.abs(e), s), y.dtype)


@pytest.fixture(scope="module")
def g():
    return glued(NB)


def _glued_html(key, mime="text/html"):
    return glued_rich(NB, key, mime)


def _num(v):
    """A number as the chapter prints it: 3 significant digits, whole from 100 on, × 10ⁿ from
    10⁴ on and below 10⁻³."""
    if abs(v) >= 1e4 or abs(v) < 1e-3:
        return sci(v, 2)
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def test_it_follows_the_trained_network_in_part_three():
    # Then come the backward chapter (tests/chapters/test_chapter_testing_a_backward_kernel.py), the
    # GPU chapter and the training chapter (tests/chapters/test_chapter_training.py), the last.
    toc = (ROOT / "_toc.yml").read_text()
    part = toc.split('"Part III. In the wild"')[1].split("- caption")[0]
    files = [line.split("file:")[1].strip() for line in part.splitlines() if "file:" in line]
    assert files[-5:-3] == ["book/trained_network", "book/testing_a_kernel"]


def test_the_naive_float16_layer(g):
    x = families(np.float16, 768)["normal"].x
    y = lneps.layer_norm(x, compute_dtype=np.float16)
    err = _scaled(y, x)
    bound = forward_bound("layer_norm", x=x, eps=1e-5)
    assert g["naive_n"] == x.size
    assert g["naive_over"] == int((err > bound).sum())
    assert g["naive_worst"] == round(float(err.max()), 1)
    assert (
        g["b16_768"] == _num(float(bound.max())) and bound.max() < 1
    )  # the table's, on the same rows
    r = lneps.layer_norm(x)
    assert g["naive_correct"] == round(100 * float(np.mean(y == r)), 1)
    ratio = np.where(err > bound, err / bound, -1)
    worst = np.unravel_index(np.argmax(ratio), err.shape)
    assert g["naive_row"] == int(worst[0])
    assert g["naive_bound_at"] == f"{bound[worst]:.6g}"  # as the failure message prints it


def test_the_torch_probes(g):
    data = json.loads((ROOT / "src/lneps/book/data/frameworks/torch.json").read_text())
    assert g["torch_version"] == data["versions"]["torch"]
    probes = [p for p in data["probes"].values() if p["op"] == "layer_norm"]
    assert g["n_probes"] == len(probes)
    assert (
        g["probe_out"]
        == data["probes"]["layer_norm | float16 | constant_60000 | 1e-12"]["output"][0]
        == -2048
    )
    fail_1, fail_bound, fail_all = 0, [], 0
    for key, p in data["probes"].items():
        if p["op"] != "layer_norm":
            continue
        dt = BF16 if p["dtype"] == "bfloat16" else np.dtype(p["dtype"])
        x, y = np.array([p["input"]]).astype(dt), np.array([p["output"]]).astype(dt)
        err = _scaled(y, x, eps=p["eps"])
        fail_1 += bool((err > 1).any())
        if (err > forward_bound("layer_norm", x=x, eps=p["eps"], kernels="two_pass")).any():
            fail_bound.append(key)
        fail_all += bool((err > forward_bound("layer_norm", x=x, eps=p["eps"])).any())
        # every stored reference is the correctly rounded output
        np.testing.assert_array_equal(
            lneps.layer_norm(x, eps=p["eps"])[0].astype(np.float64), p["reference"]
        )
    assert (fail_1, len(fail_bound), fail_all) == (4, 1, 0)
    assert g["probes_failed_1_phrase"] == "4 fail"
    assert g["probes_failed_bound_phrase"] == "only this one exceeds it"
    # the one beyond the bound: -2048 where a normalized value of 8 numbers is at most sqrt(8)
    assert fail_bound == ["layer_norm | float16 | constant_60000 | 1e-12"]
    assert np.sqrt(8) * 1024 < g["probe_bound_value"] < np.sqrt(8) * 1024 * 1.001


def test_a_two_pass_kernel_gives_beta_on_constant_float16_rows():
    for d in (8, 768, 2**13):
        x = np.full((3, d), 60000.0, np.float16)
        x[1], x[2] = np.float16(-3.5e-3), np.float16(1000.5)
        beta = np.full(d, 0.25, np.float16)
        y = kz.two_pass_pairwise(x, np.ones(d, np.float16), beta, 1e-12)
        assert np.all(y == beta)


def test_the_summary_verdicts(g):
    from lneps.book import frameworks as fw

    data = json.loads((ROOT / "src/lneps/book/data/frameworks/torch.json").read_text())
    rows = [
        r
        for r in data["results"]
        if r["op"] == "layer_norm"
        and r["d"] == 768
        and r["eps"] == 1e-5
        and lneps.families.get(r["family"]).kind != "hand"
    ]
    within = 0
    for r in rows:
        dt = BF16 if r["dtype"] == "bfloat16" else np.dtype(r["dtype"])
        x = fw.measurement_rows(r["dtype"], 768)[r["family"]]
        estimate = r["worst_abs"] / float(_ulp(1.0, dt)) + 0.5
        ok = estimate <= forward_bound("layer_norm", x=x, eps=1e-5).min()
        within += ok
        if r["dtype"] == "float32":
            assert ok, r["family"]
    assert (g["torch_cells"], g["torch_within"]) == (len(rows), within)


def test_the_bounds_quoted(g):
    def top(dtype, family, d):  # the 64 rows of the chapter's examples
        return float(forward_bound("layer_norm", x=families(dtype, d)[family].x, eps=1e-5).max())

    tops = {
        k: top(*k)
        for k in (
            (np.float16, "normal", 768),
            (BF16, "normal", 768),
            (np.float16, "normal", 4096),
            (np.float32, "normal", 768),
            (np.float16, "offset", 768),
            (np.float32, "offset", 768),
        )
    }
    names = ("b16_768", "bbf_768", "b16_4096", "b32_768", "b16off_768", "b32off_768")
    for name, v in zip(names, tops.values()):
        assert g[name] == _num(v), name
    assert "×" in g["b32off_768"] and "e+" not in g["b32off_768"]
    v = list(tops.values())
    # the prose: below one ulp in float16 and bfloat16 at d = 768, hundreds in float32
    assert 0.5 < v[1] < v[0] < 1 < v[2] < 100 < v[3]
    # exercise 2: D = gamma_{d+1} M r for offset float16 rows (M about 2^7, r about 1)
    d, u = 768, 2.0**-24
    assert (d + 1) * u * 2**7 == pytest.approx(0.006, rel=0.03)
    assert math.sqrt(2 / math.pi) == pytest.approx(0.8, abs=0.01)  # E|N(0,1)|


def _share(kernel, dtype, d, family, rows=16):
    x, gm, b = families(dtype, d, rows=rows)[family]
    with np.errstate(all="ignore"):
        y = kernel(x, gm, b, 1e-5)
    return float(
        np.mean(_scaled(y, x, gm, b) > forward_bound("layer_norm", x=x, gamma=gm, beta=b, eps=1e-5))
    )


def test_the_defect_table(g):
    for name in families(np.float16, 768):
        assert _share(kz.two_pass_pairwise, np.float16, 768, name) == 0
    assert g["onepass_near"] == round(
        100 * _share(kz.one_pass_float32, np.float16, 768, "near_constant")
    )
    assert (
        g["onepass_offset16"]
        == round(100 * _share(kz.one_pass_float32, np.float16, 768, "offset"))
        == 0
    )
    assert g["onepass_offset32"] == round(
        100 * _share(kz.one_pass_float32, np.float32, 768, "offset")
    )
    assert g["affine_cancel"] == round(
        100 * _share(kz.affine_in_input_format, np.float16, 768, "cancelling_beta")
    )
    assert g["affine_only"] == "cancelling_beta"
    assert g["eps10_near"] == round(100 * _share(kz.eps_tenth, np.float16, 768, "near_constant"))
    assert g["unbiased_normal"] == round(
        100 * _share(kz.unbiased_variance, np.float16, 768, "normal")
    )
    assert g["unbiased_bf64"] == round(100 * _share(kz.unbiased_variance, BF16, 64, "normal"))
    assert g["unbiased_bf768"] == round(100 * _share(kz.unbiased_variance, BF16, 768, "normal"))
    caught = {
        n: sum(
            _share(k, np.float16, 768, n) > 0 for k in [kz.by_name(n).fn for n in kz.CHAPTER[1:]]
        )
        for n in families(np.float16, 768)
    }
    assert g["constant_catches"] == caught["constant"]
    assert g["best_family_n"] == max(caught.values()) == caught[g["best_family"]]
    assert sorted(caught.values())[-2] < max(caught.values())  # one family catches the most


def test_the_test_across_rows(g):
    from lneps.testing._private import systematic

    d = 4096
    assert g["unb_expected"] == g["unb_stat"]  # the statistic is -1/(2d) to the digits shown
    assert g["unb_expected"].startswith("−1.22 × 10⁻⁴") and 1 / (2 * d) == pytest.approx(
        1.22e-4, rel=1e-3
    )
    assert float(g["unb_ratio"]) < 1 and g["false_alarm"] == "3 × 10⁻⁸"
    assert "test across rows not applied: 4 eligible distinct rows of 4" in _glued_html(
        "few_summary"
    )
    assert (
        systematic.FALSE_ALARM == pytest.approx(2 * math.exp(-18))
        and g["min_rows"] == systematic.MIN_ROWS
    )
    assert (
        g["unb_ulp"] == round(2.0**23 / (2 * d)) == 1024
        and g["eps_ulp"] == round(1e-5 * 2**23) == 84
    )


def test_the_zoo(g):
    from lneps.book import kernel_zoo

    assert g["zoo_correct"] == len(kernel_zoo.kernels("correct")) == 15
    assert g["zoo_defects"] == len(kernel_zoo.kernels("defective")) == 14
    assert g["zoo_designs"] == len(kernel_zoo.kernels("design")) == 2
    assert 0 < float(g["zoo_worst_f32"]) < 1


def test_no_framework_is_imported():
    code = "\n".join(c.source for c in read(NB).cells if c.cell_type == "code")
    # (lneps.book.frameworks.torch_backward is stored data, read without torch)
    assert not re.search(r"^\s*(import|from)\s+(torch|jax|flax|onnx)", code, re.M)
