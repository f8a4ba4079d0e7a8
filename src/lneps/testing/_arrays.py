"""Kernel outputs and inputs as NumPy arrays of one of the four formats, whatever they came as."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ..formats import DTYPES

from .._checks import as_float_array

_FORMATS = DTYPES  # lneps.formats.REGISTRY
_NAMES = "float16, bfloat16, float32 or float64"


def _as_numpy(a, name: str) -> np.ndarray:
    """A NumPy array of one of the four formats from NumPy, PyTorch, JAX, DLPack or Python input."""
    mod = type(a).__module__
    if mod.startswith("torch"):
        import torch  # only ever for a torch tensor

        t = a.detach().cpu()
        arr = t.view(torch.int16).numpy().view(ml_dtypes.bfloat16) if t.dtype == torch.bfloat16 else t.numpy()
    elif isinstance(a, np.ndarray) or mod.startswith("jax") or hasattr(a, "__array__"):
        arr = np.asarray(a)
    elif hasattr(a, "__dlpack__"):
        arr = np.from_dlpack(a)
    else:  # Python numbers and lists: integers become float64 (refused beyond 2**53)
        arr = np.asarray(a)
        arr = as_float_array(arr, name)[0] if arr.dtype.kind in "iu" else arr
    if arr.dtype not in _FORMATS:
        raise TypeError(f"{name} has dtype {arr.dtype}; lneps.testing takes {_NAMES}")
    return arr


def _axes(axis, nd: int) -> tuple:
    return tuple(a % nd for a in (axis if isinstance(axis, (tuple, list)) else (axis,)))
