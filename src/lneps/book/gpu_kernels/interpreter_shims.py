"""The patches Triton's interpreter (``TRITON_INTERPRET=1``, triton 3.9) needs to run Liger's
unmodified kernels on a CPU. Each is the smallest change that makes the interpreter do what the
compiler does; none edits a kernel's source.

* :func:`float_scalars_as_float32`: the compiler passes a Python float argument as an fp32
  scalar, so a kernel may call ``eps.to(tl.float32)`` on it (Liger does). The interpreter keeps
  the Python float, which has no ``.to``: the call fails. The shim passes it as a float32
  scalar, as the compiler does.
* :func:`libdevice_rsqrt`: ``triton.language.extra.libdevice.rsqrt`` is a stub that the
  compiler replaces by the device's function; the interpreter calls the stub, which returns
  None. The shim rebinds the name in the kernel's module to ``tl.math.rsqrt``, looked up at call
  time (the interpreter patches ``tl.math`` only while a kernel runs). The interpreter computes
  it as ``1/np.sqrt`` in the operand's format (two roundings); a GPU's ``rsqrt.approx`` is
  within 2 ulp, which lneps's bound allows.
Liger's backward sizes its grid of float32 partial sums by the device's multiprocessor count and
falls back to one program on a CPU tensor: its dγ is then one sequential float32 sum, where a GPU
sums one partial per multiprocessor (an order lneps's bound allows).

Triton's interpreter stores bfloat16 as uint16 and computes on the bit patterns (triton issue
11585), so bfloat16 is not graded for Triton kernels here; Pallas's interpreter computes
bfloat16 natively and is graded in it.

>>> import os
>>> _ = os.environ.setdefault("TRITON_INTERPRET", "1")
>>> import triton.language as tl
>>> with float_scalars_as_float32():
...     import triton.runtime.interpreter as interp
...     interp._implicit_cvt(1e-5).dtype == tl.float32
True
"""

from __future__ import annotations

import contextlib
import os

__all__ = ["float_scalars_as_float32", "libdevice_rsqrt", "interpreted", "check_interpreter"]


def check_interpreter():
    """``RuntimeError`` unless ``TRITON_INTERPRET=1`` was set before triton was imported (the
    interpreter is chosen at import: set later, triton compiles for a GPU that is not here)."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("set TRITON_INTERPRET=1 before importing triton: the kernels run in "
                           "Triton's interpreter on the CPU")


@contextlib.contextmanager
def float_scalars_as_float32():
    """Within the block, the interpreter passes a Python float kernel argument as a float32
    scalar tensor, as the compiler does (``eps.to(tl.float32)`` then works). Restored after."""
    import numpy as np
    import triton.language as tl
    import triton.runtime.interpreter as interp

    original = interp._implicit_cvt

    def cvt(arg):
        # bool is not a float; ints keep the interpreter's own handling
        if isinstance(arg, float):
            handle = interp.TensorHandle(np.array([arg], dtype=np.float32), tl.float32)
            return tl.tensor(handle, tl.float32)
        return original(arg)

    interp._implicit_cvt = cvt
    try:
        yield
    finally:
        interp._implicit_cvt = original


def _rsqrt(v):
    import triton.language as tl

    # looked up when the kernel runs: only then has the interpreter patched tl.math
    return tl.math.rsqrt(v)


@contextlib.contextmanager
def libdevice_rsqrt(*modules):
    """Within the block, each module's global ``rsqrt`` (libdevice's stub) is ``tl.math.rsqrt``
    as the interpreter computes it. Restored after."""
    saved = [(m, m.rsqrt) for m in modules]
    for m in modules:
        m.rsqrt = _rsqrt
    try:
        yield
    finally:
        for m, f in saved:
            m.rsqrt = f


@contextlib.contextmanager
def interpreted():
    """Every shim Liger's kernels need, for the duration of the block (after
    :func:`check_interpreter`)."""
    check_interpreter()
    import liger_kernel.ops.layer_norm as ln
    import liger_kernel.ops.rms_norm as rms

    with float_scalars_as_float32(), libdevice_rsqrt(ln, rms):
        yield
