"""Input validation shared by the public functions.

Every public function funnels its arguments through these helpers, so a bad argument gets the
same clear message wherever it enters: the message names the parameter and what was wrong.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
from numpy.lib.array_utils import normalize_axis_index

__all__ = [
    "as_float_array",
    "as_real_float_array",
    "check_real",
    "check_eps",
    "check_axis",
    "check_axes",
    "check_affine",
    "check_param_shape",
    "check_supported",
    "check_float_dtype",
    "check_positive_int",
]


def _is_float_dtype(dtype: np.dtype) -> bool:
    # ml_dtypes' bfloat16 has kind "V", so np.issubdtype(..., np.floating) misses it;
    # a registered finfo is what marks a real floating format.
    if dtype.kind == "f":
        return True
    try:
        import ml_dtypes

        ml_dtypes.finfo(dtype)
    except (ImportError, TypeError, ValueError):
        return False
    return dtype.kind == "V"


def as_float_array(x, name: str = "x") -> tuple[np.ndarray, np.dtype]:
    """Return ``(array, output_dtype)`` for numeric input ``x``.

    Floating and complex input keep their dtype for the output; integer input is computed and
    returned in float64, and refused (``ValueError``) if it holds a magnitude beyond
    :math:`2^{53}`, which float64 cannot hold exactly (Python integers too large for any
    NumPy integer, which NumPy keeps as objects, are named in the message). Booleans, strings
    and other objects are rejected with ``TypeError``.
    """
    arr = np.asarray(x)
    dtype = arr.dtype
    if _is_float_dtype(dtype) or dtype.kind == "c":
        return arr, dtype
    if dtype.kind in "iu":
        if dtype.itemsize >= 8 and arr.size:
            big = arr[(arr > 2**53) | (arr < -(2**53))] if dtype.kind == "i" else arr[arr > 2**53]
            if big.size:
                raise ValueError(
                    f"{name} holds integers beyond 2**53 (e.g. {int(big.flat[0])}), which float64 "
                    "cannot represent exactly; convert them to floats yourself if rounding is meant"
                )
        return arr.astype(np.float64), np.dtype(np.float64)
    if dtype.kind == "O" and arr.size:
        values = arr.ravel()
        if all(isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_)) for v in values):
            big = next(int(v) for v in values if abs(int(v)) > 2**53)  # why NumPy kept objects
            raise ValueError(
                f"{name} holds the integer {big}, too large for int64 and beyond 2**53, which "
                "float64 cannot represent exactly; convert it to a float yourself if rounding is meant"
            )
    raise TypeError(
        f"{name} must be numeric (integer, floating or complex); got dtype {dtype}"
    )


def check_supported(arr: np.ndarray, name: str = "x") -> np.ndarray:
    """Refuse (``TypeError``) a floating format wider than float64 (``np.longdouble`` where it
    has more than 53 significand bits): computing it in float64 would silently drop bits.
    Returns ``arr``."""
    if arr.dtype.kind in "fc" and arr.dtype.itemsize > (8 if arr.dtype.kind == "f" else 16):
        if np.finfo(arr.dtype).nmant > 52:
            raise TypeError(
                f"{name} has dtype {arr.dtype} (np.longdouble, {np.finfo(arr.dtype).nmant + 1} "
                "significand bits), which is not supported: lneps computes from float64 "
                "numbers, which cannot hold it exactly; convert it to float64 yourself if that "
                "rounding is meant"
            )
    return arr


def as_real_float_array(x, name: str = "x") -> np.ndarray:
    """:func:`as_float_array` for real input only: ``TypeError`` for complex as well.

    For arithmetic rounded to a real format, where dropping the imaginary part would be silent.
    """
    arr, _ = as_float_array(x, name)
    if arr.dtype.kind == "c":
        raise TypeError(f"{name} must be real; got complex dtype {arr.dtype}")
    return arr


def check_positive_int(value, name: str) -> int:
    """Return ``value`` as a Python int after checking that it is an integer >= 1 (not a bool)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a positive integer; got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1; got {value!r}")
    return int(value)


def check_real(value, name: str) -> float:
    """Return ``value`` as a Python float after checking that it is a real number.

    NumPy scalars count; a bool, though Python calls it a number, is refused as a slip.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number; got {type(value).__name__} {value!r}")
    return float(value)


def check_eps(eps) -> float:
    """Return ``eps`` as a Python float after checking that it is real, finite and >= 0."""
    value = check_real(eps, "eps")
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"eps must be finite; got {value!r}")
    if value < 0:
        raise ValueError(f"eps must be >= 0; got {value!r}")
    return value


def check_axis(arr: np.ndarray, axis) -> int:
    """Normalize ``axis`` (numpy's ``AxisError`` if out of range) and reject an empty axis."""
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, numbers.Integral):
        raise TypeError(f"axis must be a single integer; got {axis!r}")
    axis = normalize_axis_index(int(axis), arr.ndim)
    if arr.shape[axis] == 0:
        raise ValueError(
            f"the normalized axis {axis} of x (shape {arr.shape}) is empty: "
            "a mean over no numbers is undefined"
        )
    return axis


def check_axes(arr: np.ndarray, axis) -> tuple[int, ...]:
    """The normalized axes as a tuple of non-negative ints, each non-empty.

    An int names one axis (any axis). A tuple names several, which must be the trailing axes
    in order, as torch's multi-dimensional ``normalized_shape`` and ONNX
    LayerNormalization's ``axis`` (to the end) do.
    """
    if isinstance(axis, (tuple, list)):
        if not axis:
            raise ValueError("axis must name at least one axis; got an empty tuple")
        axes = tuple(check_axis(arr, a) for a in axis)
        trailing = tuple(range(arr.ndim - len(axes), arr.ndim))
        if axes != trailing:
            raise ValueError(
                f"axis as a tuple must name the trailing axes of x in order, {trailing} for "
                f"{len(axes)} of x's {arr.ndim} axes; got {tuple(axis)}"
            )
        return axes
    return (check_axis(arr, axis),)


def check_param_shape(p: np.ndarray, name: str, arr: np.ndarray, axes: tuple[int, ...], what: str):
    """Return a per-feature parameter ``p`` (an array, not a scalar) with the features' shape
    ``tuple(arr.shape[a] for a in axes)``.

    Accepted: that shape exactly, or any shape that broadcasts to x's shape the NumPy way
    (aligned on the right, without enlarging x) and has length 1 on every axis of x that is not
    a feature axis, ``(1, d)`` for x ``(n, d)``. A parameter varying along another axis of x,
    or not broadcasting at all, is a ``ValueError`` naming both shapes.
    """
    feature_shape = tuple(arr.shape[a] for a in axes)
    if p.shape == feature_shape:
        return p
    fits = p.ndim <= arr.ndim and all(ps in (1, xs) for ps, xs in zip(p.shape[::-1], arr.shape[::-1]))
    if fits:
        full = (1,) * (arr.ndim - p.ndim) + p.shape
        varies = [a for a in range(arr.ndim) if full[a] != 1 and a not in axes]
        if not varies:
            kept = p.reshape(full)[tuple(slice(None) if a in axes else 0 for a in range(arr.ndim))]
            return np.broadcast_to(kept, feature_shape)
        raise ValueError(
            f"{name} of shape {p.shape} varies along axis {varies[0]} of x (shape {arr.shape}), "
            f"which is not {what}: a gain or bias applies per feature, shape {feature_shape}"
        )
    expected = f"({feature_shape[0]},)" if len(feature_shape) == 1 else str(feature_shape)
    raise ValueError(
        f"{name} must be a scalar or have shape {expected} to match the {what} axis of x "
        f"(shape {arr.shape}, axis {axes if len(axes) > 1 else axes[0]}), or broadcast to x's "
        f"shape with length 1 on the other axes; got {name} of shape {p.shape}"
    )


def check_affine(param, name: str, arr: np.ndarray, axis) -> np.ndarray | None:
    """Return ``param`` (gamma or beta) shaped to broadcast against x along ``axis``, or None.

    ``axis`` is an int or a tuple of trailing axes (:func:`check_axes`). A scalar applies to
    every feature; otherwise ``param`` must have the shape of the normalized axes, ``(d,)``
    for one axis of length d, or broadcast to x the NumPy way with length 1 on the other axes
    (:func:`check_param_shape`: ``(1, d)`` for x ``(n, d)``).
    """
    if param is None:
        return None
    p, _ = as_float_array(param, name)
    axes = axis if isinstance(axis, tuple) else (axis,)
    if p.ndim == 0:
        return p
    p = check_param_shape(p, name, arr, axes, "normalized")
    shape = [1] * arr.ndim
    for a in axes:
        shape[a] = arr.shape[a]
    return p.reshape(shape)


def check_float_dtype(dtype, name: str = "dtype") -> np.dtype:
    """Return ``dtype`` as a real floating ``np.dtype`` (float16, bfloat16, float32, float64, ...).

    An unknown name is a ``TypeError``, and so is a dtype that is not a real floating format
    (integer, complex, bool): arithmetic "rounded to dtype" means nothing for those.
    """
    if dtype is None:
        raise TypeError(f"{name} must be a floating dtype; got None")
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"{name} must be a floating dtype; {dtype!r} is not a dtype ({exc})") from None
    if not _is_float_dtype(dt):
        raise TypeError(
            f"{name} must be a real floating dtype (e.g. float16, bfloat16, float32); got {dt}"
        )
    return dt
