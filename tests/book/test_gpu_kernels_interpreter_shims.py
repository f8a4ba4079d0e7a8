"""lneps.book.gpu_kernels.interpreter_shims: each shim is needed (the kernel fails without it)
and sufficient (it runs, and its output is graded correct where the kernel is correct)."""

import doctest

import numpy as np
import pytest

from gpu_extra import require_extra

require_extra()

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.runtime.errors import InterpreterError  # noqa: E402

from lneps.book.gpu_kernels import interpreter_shims as shims  # noqa: E402
from lneps.testing import assert_close  # noqa: E402


@triton.jit
def _scale_by_eps(X, Y, eps, N: tl.constexpr):
    # what Liger does with its eps argument
    cols = tl.arange(0, N)
    tl.store(Y + cols, tl.load(X + cols) * eps.to(tl.float32))


def _rows():
    rng = np.random.default_rng(31)
    x = rng.normal(size=(4, 64)).astype(np.float16)
    g = rng.normal(size=64).astype(np.float16)
    return x, g


def test_a_float_argument_needs_the_float32_shim():
    x = torch.ones(8)
    y = torch.empty(8)
    with pytest.raises(InterpreterError, match="to"):
        _scale_by_eps[(1,)](x, y, 0.5, N=8)
    with shims.float_scalars_as_float32():
        _scale_by_eps[(1,)](x, y, 0.5, N=8)
    assert y.tolist() == [0.5] * 8
    # restored after the block
    with pytest.raises(InterpreterError):
        _scale_by_eps[(1,)](x, y, 0.5, N=8)


def test_liger_rms_norm_needs_both_shims():
    from liger_kernel.ops import rms_norm as rms

    x, g = _rows()
    tx, tg = torch.from_numpy(x), torch.from_numpy(g)
    with pytest.raises(InterpreterError):  # eps.to on a Python float
        rms.LigerRMSNormFunction.apply(tx, tg, 1e-6, 0.0, "gemma", False)
    with shims.float_scalars_as_float32(), pytest.raises(InterpreterError):  # rsqrt is a stub
        rms.LigerRMSNormFunction.apply(tx, tg, 1e-6, 0.0, "gemma", False)
    with shims.interpreted():
        y = rms.LigerRMSNormFunction.apply(tx, tg, 1e-6, 0.0, "gemma", False)
    assert_close(y.numpy(), op="rms_norm", x=x, gamma=g, eps=1e-6)


def test_the_rsqrt_shim_is_restored():
    from liger_kernel.ops import rms_norm as rms

    stub = rms.rsqrt
    with shims.libdevice_rsqrt(rms):
        assert rms.rsqrt is not stub
    assert rms.rsqrt is stub


def test_check_interpreter_names_the_setting(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        shims.check_interpreter()


def test_docstring_examples_run():
    assert doctest.testmod(shims).failed == 0


@triton.jit
def _add(X, Y, Z):
    tl.store(Z, tl.load(X) + tl.load(Y))


def test_bfloat16_is_not_computed_by_the_interpreter():
    """Why Triton kernels are not graded in bfloat16 (the chapter says so): the interpreter adds
    bfloat16 bit patterns as integers. If a Triton release fixes it, this fails: grade them."""
    x, y = torch.tensor([2.5], dtype=torch.bfloat16), torch.tensor([2.0], dtype=torch.bfloat16)
    z = torch.empty(1, dtype=torch.bfloat16)
    _add[(1,)](x, y, z)
    assert z.item() != 4.5
    z32 = torch.empty(1)
    _add[(1,)](x.float(), y.float(), z32)
    assert z32.item() == 4.5
