r"""Two effects of a real GPU that Triton's interpreter does not model, put into it, so that a
verdict can be re-run with them and shown not to depend on them (or to).

* :func:`warp_order_sum`: ``tl.sum`` as a GPU computes it, not as NumPy does. Element i of the
  reduced axis goes to thread ``i mod T`` (T = 32 lanes x ``warps``; Triton's default is 4
  warps); each thread adds its elements one after another, then the T partial sums are combined
  by halving (a butterfly: thread k adds thread k + T/2), every addition rounded in the
  tensor's format. The interpreter instead calls ``np.sum``: pairwise, and for float16 in a
  float32 accumulator, so a 16-bit ``tl.sum`` is more accurate in the interpreter than on a
  GPU.
* :func:`rsqrt_off_by`: ``tl.math.rsqrt`` off by up to ``ulps`` units in the last place (a GPU's
  ``rsqrt.approx.f32`` is within 2 ulp), by a fixed pseudo-random amount per element.

Both are context managers that patch the interpreter and restore it. They model an order and an
error bound, not a particular GPU's bits.

>>> import numpy as np
>>> x = np.full(4096, 0.1, np.float16)
>>> float(_warp_order(x[None], np.float16)[0]) != float(np.sum(x))   # 16-bit adds lose more
True
"""

from __future__ import annotations

import contextlib

import numpy as np

__all__ = ["warp_order_sum", "rsqrt_off_by"]


def _warp_order(a, dtype, threads=128):
    """Sum ``a`` over its last axis in the GPU-like order, rounding every addition to dtype."""
    n = a.shape[-1]
    t = min(threads, 1 << max(0, (n - 1).bit_length()))
    pad = (-n) % t
    a = np.concatenate([a, np.zeros(a.shape[:-1] + (pad,), a.dtype)], axis=-1) if pad else a
    blocks = a.reshape(a.shape[:-1] + (-1, t)).astype(dtype)
    acc = blocks[..., 0, :].copy()
    for k in range(1, blocks.shape[-2]):        # each thread, sequentially
        acc = (acc + blocks[..., k, :]).astype(dtype)
    while acc.shape[-1] > 1:                     # across the threads, halving
        h = acc.shape[-1] // 2
        acc = (acc[..., :h] + acc[..., h:]).astype(dtype)
    return acc[..., 0]


@contextlib.contextmanager
def warp_order_sum(threads=128):
    """Within the block, the interpreter's ``tl.sum`` adds in the GPU-like order above."""
    import triton.runtime.interpreter as interp

    original = interp.ReduceOps.sum

    def sum_(self, input):
        data = input.handle.data
        data = data.reshape(1, -1) if self.axis is None else np.moveaxis(data, self.axis, -1)
        out = _warp_order(data, data.dtype, threads)
        if self.axis is None:
            out = out.reshape(())
        elif self.keep_dims:
            out = np.expand_dims(out, self.axis)
        return self.to_tensor(out, input.dtype)

    interp.ReduceOps.sum = sum_
    try:
        yield
    finally:
        interp.ReduceOps.sum = original


@contextlib.contextmanager
def rsqrt_off_by(ulps=2, seed=0):
    """Within the block, ``tl.math.rsqrt`` returns the interpreter's value moved by a whole
    number of ulp in [-ulps, ulps], drawn per element from a generator seeded once."""
    import triton.runtime.interpreter as interp

    rng = np.random.default_rng(seed)
    builder = type(interp.interpreter_builder)
    original = builder.create_rsqrt

    def create_rsqrt(self, arg):
        out = original(self, arg)
        v = out.data
        steps = rng.integers(-ulps, ulps + 1, size=v.shape)
        moved = v.copy()
        for _ in range(ulps):
            up, down = steps > 0, steps < 0
            moved = np.where(up, np.nextafter(moved, np.inf).astype(v.dtype), moved)
            moved = np.where(down, np.nextafter(moved, -np.inf).astype(v.dtype), moved)
            steps = steps - up + down
        out.data = moved.astype(v.dtype)
        return out

    builder.create_rsqrt = create_rsqrt
    try:
        yield
    finally:
        builder.create_rsqrt = original
