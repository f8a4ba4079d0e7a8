"""What the tests of lneps.book.gpu_kernels that run kernels share: the gpu extra, or a skip.

Triton picks its interpreter when a kernel is decorated, from TRITON_INTERPRET: it is set here,
before anything imports a kernel. The extra (requirements-gpu.txt) is not part of the slim
install nor of CI, so without it these tests skip; the stored-data tests run everywhere.
"""

import os

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")


def require_extra():
    """Skip the calling module unless triton, liger-kernel, torch and JAX are installed and the
    interpreter is selected."""
    for name in ("torch", "triton", "liger_kernel", "jax"):
        pytest.importorskip(name, reason="the gpu extra (requirements-gpu.txt) is not installed")
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("TRITON_INTERPRET is set to something other than 1", allow_module_level=True)
