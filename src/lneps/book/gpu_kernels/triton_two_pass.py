r"""This project's own Triton layer norm, in the two-pass design of Triton's layer-norm tutorial,
written here (not copied): one program per row, the row read in blocks of ``BLOCK`` columns.

Forward, per row, in float32 whatever the input format:

.. math:: \mu = \tfrac1d \sum_i x_i,\quad \sigma^2 = \tfrac1d \sum_i (x_i-\mu)^2,\quad
          r = 1/\sqrt{\sigma^2+\varepsilon},\quad y_i = (x_i-\mu)\,r\,\gamma_i + \beta_i,

each sum a float32 block accumulator reduced by ``tl.sum``; y rounded once to the input format.
Accuracy: a two-pass kernel with float32 statistics, a class :func:`lneps.testing.forward_bound`
covers (``kernels=("two_pass",)``).

Backward, per row: :math:`\hat x = (x-\mu) r`, :math:`c_1 = \tfrac1d\sum \hat x\,\gamma\,dy`,
:math:`c_2 = \tfrac1d\sum \gamma\,dy`, :math:`dx = (\gamma\,dy - \hat x c_1 - c_2)\,r`, in float32.
dγ and dβ are sums over rows, made in two stages: row ``i`` adds its :math:`dy\,\hat x` and
:math:`dy` into partial row ``i mod G`` (under a lock, as on a GPU where programs run at once),
then a second kernel sums the G partials per column in float32. ``partial_dtype`` is the
format the partials are stored in: the tutorial stores them in the weight's format (16 bits for
a float16 model), which rounds each row's addition to 16 bits; ``"float32"`` keeps them exact
enough. :func:`layer_norm_backward` takes either, so the chapter can show the difference.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["layer_norm_forward", "layer_norm_backward", "GROUPS"]

#: How many partial rows dγ and dβ are summed into (the tutorial's GROUP_SIZE_M for d <= 1024).
GROUPS = 64


@triton.jit
def _forward_kernel(X, W, B, Y, Mean, Rstd, n, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    X += row * n
    Y += row * n
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(X + cols, mask=cols < n, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / n
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        xc = tl.load(X + cols, mask=cols < n, other=0.0).to(tl.float32) - mean
        acc += tl.where(cols < n, xc * xc, 0.0)  # the padding would add mean^2
    var = tl.sum(acc, axis=0) / n
    rstd = 1.0 / tl.sqrt(var + eps)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        m = cols < n
        x = tl.load(X + cols, mask=m, other=0.0).to(tl.float32)
        w = tl.load(W + cols, mask=m).to(tl.float32)
        b = tl.load(B + cols, mask=m).to(tl.float32)
        tl.store(Y + cols, ((x - mean) * rstd * w + b).to(Y.dtype.element_ty), mask=m)


@triton.jit
def _backward_dx_kernel(X, W, DY, DX, Mean, Rstd, DWp, DBp, Lock, n, G, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < n
    x = tl.load(X + row * n + cols, mask=m, other=0.0).to(tl.float32)
    dy = tl.load(DY + row * n + cols, mask=m, other=0.0).to(tl.float32)
    w = tl.load(W + cols, mask=m, other=0.0).to(tl.float32)
    mean = tl.load(Mean + row)
    rstd = tl.load(Rstd + row)
    xhat = tl.where(m, (x - mean) * rstd, 0.0)
    wdy = w * dy
    c1 = tl.sum(xhat * wdy, axis=0) / n
    c2 = tl.sum(wdy, axis=0) / n
    tl.store(DX + row * n + cols, ((wdy - (xhat * c1 + c2)) * rstd).to(DX.dtype.element_ty), mask=m)
    # the partial sums of dgamma and dbeta: row -> partial row (row mod G), one writer at a time
    group = row % G
    lock = Lock + group
    while tl.atomic_cas(lock, 0, 1) == 1:
        pass
    pw = DWp + group * n + cols
    pb = DBp + group * n + cols
    dw = tl.load(pw, mask=m, other=0.0).to(tl.float32) + dy * xhat
    db = tl.load(pb, mask=m, other=0.0).to(tl.float32) + dy
    # stored in the partials' format: a 16-bit buffer rounds every row's addition
    tl.store(pw, dw.to(DWp.dtype.element_ty), mask=m)
    tl.store(pb, db.to(DBp.dtype.element_ty), mask=m)
    tl.atomic_xchg(lock, 0)


@triton.jit
def _backward_dw_kernel(DWp, DBp, DW, DB, G, n, BLOCK_G: tl.constexpr, BLOCK: tl.constexpr):
    col0 = tl.program_id(0) * BLOCK
    cols = col0 + tl.arange(0, BLOCK)
    dw = tl.zeros([BLOCK_G, BLOCK], dtype=tl.float32)
    db = tl.zeros([BLOCK_G, BLOCK], dtype=tl.float32)
    for g0 in range(0, G, BLOCK_G):
        rows = g0 + tl.arange(0, BLOCK_G)
        mask = (rows[:, None] < G) & (cols[None, :] < n)
        offs = rows[:, None] * n + cols[None, :]
        dw += tl.load(DWp + offs, mask=mask, other=0.0).to(tl.float32)
        db += tl.load(DBp + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(DW + cols, tl.sum(dw, axis=0).to(DW.dtype.element_ty), mask=cols < n)
    tl.store(DB + cols, tl.sum(db, axis=0).to(DB.dtype.element_ty), mask=cols < n)


def _block(n):
    # one block of at most 1024 columns per step: the forward loops, the backward holds a row
    return min(1024, triton.next_power_of_2(n))


def layer_norm_forward(x, w, b, eps):
    """``(y, mean, rstd)`` for x of shape (rows, d), w and b of shape (d,), torch tensors on the
    device (the CPU under ``TRITON_INTERPRET=1``). y has x's dtype; mean and rstd are float32.

    >>> import os, torch
    >>> os.environ.get("TRITON_INTERPRET")
    '1'
    >>> from lneps.book.gpu_kernels.interpreter_shims import float_scalars_as_float32
    >>> x = torch.tensor([[1.0, 2.0, 3.0, 4.0]], dtype=torch.float16)
    >>> with float_scalars_as_float32():
    ...     y, mean, rstd = layer_norm_forward(x, torch.ones(4, dtype=x.dtype),
    ...                                        torch.zeros(4, dtype=x.dtype), 1e-5)
    >>> y
    tensor([[-1.3418, -0.4473,  0.4473,  1.3418]], dtype=torch.float16)
    """
    rows, n = x.shape
    y = torch.empty_like(x)
    mean = torch.empty(rows, dtype=torch.float32, device=x.device)
    rstd = torch.empty(rows, dtype=torch.float32, device=x.device)
    _forward_kernel[(rows,)](x, w, b, y, mean, rstd, n, eps, BLOCK=_block(n))
    return y, mean, rstd


def layer_norm_backward(dy, x, w, mean, rstd, partial_dtype="float32"):
    """``(dx, dw, db)``: the gradients for upstream gradient dy, from the forward's mean and
    rstd. ``partial_dtype``: ``"float32"``, or ``"input"`` for the tutorial's partials stored in
    w's format. The row must fit one block (d <= 65536)."""
    if partial_dtype not in ("float32", "input"):
        raise ValueError(f"partial_dtype must be 'float32' or 'input'; got {partial_dtype!r}")
    rows, n = x.shape
    block = triton.next_power_of_2(n)
    if block > 65536:
        raise ValueError(f"d = {n} does not fit one block of the backward kernel")
    groups = min(GROUPS, rows)
    pdt = torch.float32 if partial_dtype == "float32" else w.dtype
    dwp = torch.zeros((groups, n), dtype=pdt, device=x.device)
    dbp = torch.zeros((groups, n), dtype=pdt, device=x.device)
    lock = torch.zeros(groups, dtype=torch.int32, device=x.device)
    dx = torch.empty_like(x)
    _backward_dx_kernel[(rows,)](x, w, dy, dx, mean, rstd, dwp, dbp, lock, n, groups, BLOCK=block)
    dw = torch.empty_like(w)
    db = torch.empty_like(w)
    cols = min(128, block)
    _backward_dw_kernel[(triton.cdiv(n, cols),)](dwp, dbp, dw, db, groups, n, BLOCK_G=32,
                                                 BLOCK=cols)
    return dx, dw, db
