"""lneps.book.gpu_kernels.triton_two_pass, graded the way the chapter "GPU kernels without a GPU"
recommends: a Triton kernel run in Triton's interpreter on the CPU, checked by
lneps.testing.assert_close with its derived bound, forward and backward, on the families that
break kernels. The chapter shows this file as its worked example."""

import numpy as np
import pytest

from gpu_extra import require_extra

require_extra()

import torch  # noqa: E402

from lneps.book.gpu_kernels import triton_two_pass as tp  # noqa: E402
from lneps.book.gpu_kernels.interpreter_shims import float_scalars_as_float32  # noqa: E402
from lneps.testing import assert_close, families  # noqa: E402

EPS = 1e-5


def layer_norm(x, g, b):
    """The kernel under test, called as the model would call it: torch tensors in, out."""
    with float_scalars_as_float32():
        x, g, b = (torch.from_numpy(a) for a in (x, g, b))
        return tp.layer_norm_forward(x, g, b, EPS)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("d", [64, 1000])
def test_forward_is_within_the_two_pass_bound(dtype, d):
    rng = np.random.default_rng(d)
    g0, b0 = rng.normal(size=(2, d)).astype(dtype)
    for name, (x, g, b) in families(dtype, d=d, rows=16).items():   # lneps's hard rows
        g = g0 if g is None else g      # random gamma and beta, unless the family sets them
        b = b0 if b is None else b
        y, _, _ = layer_norm(x, g, b)
        assert_close(y.numpy(), x=x, gamma=g, beta=b, eps=EPS, kernels=("two_pass",),
                     err_msg=f"family {name}")


@pytest.mark.parametrize("partials, passes", [("float32", True), ("input", False)])
def test_dgamma_needs_float32_partials(partials, passes):
    rng = np.random.default_rng(0)
    x, dy = rng.normal(size=(2, 256, 64)).astype(np.float16)
    g, b = rng.normal(size=(2, 64)).astype(np.float16)
    _, mean, rstd = layer_norm(x, g, b)
    with float_scalars_as_float32():
        dx, dg, db = tp.layer_norm_backward(torch.from_numpy(dy), torch.from_numpy(x),
                                            torch.from_numpy(g), mean, rstd, partial_dtype=partials)
    call = {"op": "layer_norm_backward", "x": x, "dy": dy, "gamma": g, "eps": EPS}
    assert_close(dx.numpy(), wrt="x", **call)
    if passes:
        assert_close(dg.numpy(), wrt="gamma", **call)
    else:
        with pytest.raises(AssertionError):
            assert_close(dg.numpy(), wrt="gamma", **call)


def test_a_bad_partial_format_is_named():
    with pytest.raises(ValueError, match="partial_dtype"):
        tp.layer_norm_backward(None, torch.zeros(1, 4), None, None, None, partial_dtype="float16")


def test_docstring_examples_run():
    import doctest

    assert doctest.testmod(tp).failed == 0
