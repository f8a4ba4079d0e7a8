"""lneps.book.gpu_kernels.gpu_like: the GPU-like summation order adds in the stated order with
every addition rounded (checked against the order written out by hand in Python floats rounded
one by one), the perturbed rsqrt stays within its ulps, and both patches are undone."""

import doctest

import numpy as np
import pytest

from gpu_extra import require_extra

require_extra()

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
import triton.runtime.interpreter as interp  # noqa: E402

from lneps.book.gpu_kernels import gpu_like  # noqa: E402


def _by_hand(values, threads):
    """Thread i mod T adds its elements in turn, then halving; float16 after every addition."""
    f16 = np.float16
    acc = [f16(0)] * threads
    seen = [False] * threads
    for i, v in enumerate(values):
        k = i % threads
        acc[k] = f16(v) if not seen[k] else f16(float(acc[k]) + float(v))
        seen[k] = True
    while len(acc) > 1:
        h = len(acc) // 2
        acc = [f16(float(acc[j]) + float(acc[j + h])) for j in range(h)]
    return acc[0]


@triton.jit
def _row_sum(X, Y, N: tl.constexpr):
    tl.store(Y, tl.sum(tl.load(X + tl.arange(0, N)), axis=0))


def test_warp_order_is_the_stated_order():
    x = np.random.default_rng(0).uniform(0, 4, size=1024).astype(np.float16)
    assert gpu_like._warp_order(x[None], np.float16, threads=128)[0] == _by_hand(x, 128)
    assert gpu_like._warp_order(x[None], np.float16, threads=8)[0] == _by_hand(x, 8)


def test_warp_order_sum_patches_tl_sum_and_restores_it():
    x = torch.from_numpy(np.full(4096, 0.1, np.float16))
    y = torch.empty(1, dtype=torch.float16)
    _row_sum[(1,)](x, y, N=4096)
    interpreted = float(y[0])
    with gpu_like.warp_order_sum():
        _row_sum[(1,)](x, y, N=4096)
    assert float(y[0]) == float(_by_hand(x.numpy(), 128)) != interpreted
    _row_sum[(1,)](x, y, N=4096)
    assert float(y[0]) == interpreted


@triton.jit
def _rsqrt(X, Y, N: tl.constexpr):
    cols = tl.arange(0, N)
    tl.store(Y + cols, tl.math.rsqrt(tl.load(X + cols)))


@pytest.mark.parametrize("ulps", [1, 2])
def test_rsqrt_off_by_moves_at_most_ulps(ulps):
    x = torch.from_numpy(np.random.default_rng(1).uniform(0.1, 10, 512).astype(np.float32))
    y0, y1 = torch.empty(512), torch.empty(512)
    _rsqrt[(1,)](x, y0, N=512)
    with gpu_like.rsqrt_off_by(ulps):
        _rsqrt[(1,)](x, y1, N=512)
    a, b = y0.numpy(), y1.numpy()
    steps = np.abs(a.view(np.int32).astype(np.int64) - b.view(np.int32).astype(np.int64))
    assert steps.max() == ulps and (steps > 0).mean() > 0.3
    assert type(interp.interpreter_builder).create_rsqrt is not None
    _rsqrt[(1,)](x, y1, N=512)
    assert np.array_equal(y1.numpy(), a)


def test_docstring_examples_run():
    assert doctest.testmod(gpu_like).failed == 0
