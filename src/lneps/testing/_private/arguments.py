"""What a call of :func:`lneps.testing.compare` or :func:`lneps.testing.assert_close` says: the
ops, their keywords, and the op as a function of x.

The conventions (exact value, correctly rounded value, ulp and scaled errors) are in
:mod:`lneps.testing`. This module reads the call: the kernel's output is the only positional
argument, everything else is a keyword, and a keyword nobody knows is a ``TypeError`` that
names it, so that ``assert_close(out, ref)`` written the NumPy or torch way, or a misspelt
``max_ulps=``, fails loudly instead of grading the wrong thing.
"""

from __future__ import annotations

import difflib
import functools
import inspect

import ml_dtypes
import numpy as np

from ... import norms
from ..._checks import as_float_array
from ...formats import DTYPES

OPS = (
    "layer_norm",
    "rms_norm",
    "group_norm",
    "batch_norm",
    "layer_norm_backward",
    "rms_norm_backward",
)
#: The gradients each backward op has, by ``wrt=``.
WRT = {"layer_norm_backward": ("x", "gamma", "beta"), "rms_norm_backward": ("x", "gamma")}


class _Default:
    def __repr__(self):
        return "<op's default>"


#: ``eps`` or ``axis`` left to the op: its own signature's default (``rms_norm``'s ``eps=None``
#: is torch's rule for x's dtype; ``batch_norm`` reduces axis 0; ``group_norm`` takes no axis; a
#: callable gets ``axis=-1`` and no eps). ``eps`` must be given, so this is how to ask for it.
DEFAULT = _Default()
MISSING = object()

# What users of numpy.testing and torch.testing reach for, and what it is called here.
_HINTS = {
    "rtol": "lneps.testing measures errors in ulp: pass max_ulp= (the default is derived for the op and format)",
    "atol": "lneps.testing measures errors in ulp: pass max_ulp= (the default is derived for the op and format)",
    "expected": "lneps computes the expected values itself from the kernel's input: pass x=",
    "desired": "lneps computes the expected values itself from the kernel's input: pass x=",
    "equal_nan": "a NaN where the exact value is finite always fails, and a finite value where it is NaN too",
    "check_dtype": "pass dtype=, the output format the kernel must store",
    "expected_dtype": "pass dtype=, the output format the kernel must store",
    "grad": "the upstream gradient is dy=",
    "grad_output": "the upstream gradient is dy=",
    "input": "the kernel's input is x=",
    "inputs": "the kernel's input is x=",
    "epsilon": "it is eps=",
    "weight": "the gain is gamma=",
    "bias": "the bias is beta=",
    "msg": "the extra message is err_msg=",
}


def call_error(fname: str, args: tuple) -> TypeError:
    return TypeError(
        f"{fname}() takes the kernel's output as its only positional argument, and {len(args)} more "
        f"were given; pass the kernel's input by keyword: {fname}(actual, x=x, eps=...). "
        f"lneps computes the expected values itself, so a second argument is not an expected output "
        f"as in numpy.testing or torch.testing."
    )


def keyword_call(func):
    """``func`` as a test's entry point: its own signature (``func(actual, /, *, x, eps, ...,
    **op_kwargs)``, which :func:`inspect.signature`, ``help()`` and an editor show), with the
    mistakes users of numpy.testing and torch.testing make explained rather than reported as
    Python's bare ``TypeError``: a second positional argument (an expected output: lneps
    computes its own from x), and x or eps left out. An unknown keyword reaches
    ``**op_kwargs``, where :func:`check_keywords` names it."""
    fname = func.__name__

    @functools.wraps(func)
    def call(*args, **kwargs):
        __tracebackhide__ = True
        if len(args) > 1:
            raise call_error(fname, args[1:])
        if not args:
            raise TypeError(
                f"{fname}() needs the kernel's output as its one positional argument: "
                f"{fname}(actual, x=x, eps=...)"
            )
        if "x" not in kwargs:
            raise TypeError(f"{fname}() needs the kernel's input: {fname}(actual, x=x, eps=...)")
        if "eps" not in kwargs:
            raise TypeError(
                f"{fname}() needs eps=, the epsilon the kernel used (or "
                f"eps=lneps.testing.DEFAULT for the op's own default)"
            )
        return func(args[0], **kwargs)

    return call


def own_keywords(func) -> tuple:
    """The keyword-only parameters of ``func`` (the keywords :func:`check_keywords` suggests)."""
    params = inspect.signature(func).parameters.values()
    return tuple(p.name for p in params if p.kind is p.KEYWORD_ONLY)


def check_op(op, wrt, dy, fname):
    """``op``, ``wrt`` and ``dy`` checked before any array is read: ``ValueError`` for an op
    lneps does not know or a ``wrt`` the op has not, ``TypeError`` for a missing dy or a wrt=
    or dy= given to a forward op."""
    if not callable(op) and (not isinstance(op, str) or op not in OPS):
        raise ValueError(f"op must be one of {', '.join(OPS)} or a callable; got {op!r}")
    if isinstance(op, str) and op in WRT:
        if wrt not in WRT[op]:
            raise ValueError(
                f"wrt must be one of {', '.join(map(repr, WRT[op]))} for {op}; got {wrt!r}"
            )
        if dy is None:
            raise TypeError(f"{fname}(op={op!r}) needs dy=, the upstream gradient")
        return
    for v, name in ((dy, "dy"), (wrt, "wrt")):
        if v is not None:
            raise TypeError(
                f"{name}= is for the backward ops (layer_norm_backward, rms_norm_backward); "
                f"op is {op!r}"
            )


def _op_keywords(op) -> tuple[set, bool]:
    """The extra keywords ``op`` itself takes (``num_groups``, ``training``...), and whether it
    takes any (a callable with ``**kwargs``)."""
    if callable(op):
        try:
            params = inspect.signature(op).parameters
        except (TypeError, ValueError):
            return set(), True
        any_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
        return {
            n for n, p in params.items() if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
        }, any_kw
    if isinstance(op, str) and op in ("layer_norm", "rms_norm", "group_norm", "batch_norm"):
        names = set(inspect.signature(getattr(norms, op)).parameters)
        return names - {"x", "gamma", "beta", "eps", "axis"}, False
    return set(), False


def check_keywords(fname: str, op, kwargs: dict, own: tuple) -> dict:
    """The op's own keywords from ``kwargs``, after naming any keyword nobody takes."""
    extra, any_kw = _op_keywords(op)
    unknown = [k for k in kwargs if k not in extra]
    if unknown and not any_kw:
        k = unknown[0]
        hint = _HINTS.get(k) or "".join(
            f"did you mean {m}=?" for m in difflib.get_close_matches(k, [*own, *extra], n=1)
        )
        opname = op if isinstance(op, str) else getattr(op, "__name__", "the op")
        takes = ", ".join(n + "=" for n in own)
        ops = sorted(extra - {"compute_dtype", "return_stats"})
        raise TypeError(
            f"{fname}() got an unexpected keyword argument {k!r}"
            + (f" ({hint})" if hint else "")
            + f"; it takes {takes}"
            + (f", and {opname}'s " + ", ".join(n + "=" for n in ops) if ops else "")
        )
    return kwargs


def op_caller(op, x, g, b, eps, axis, kw):
    """``(f, axis, name)``: f(z, stats) is the op on z with everything else fixed (with
    ``stats=True`` it also returns the op's statistics, where it has them); axis as resolved."""
    bad = sorted({"compute_dtype", "return_stats"} & set(kw))
    if bad:
        raise ValueError(
            f"{bad} would change the reference; lneps.testing compares with the default"
        )
    if callable(op):
        ax, extra = (-1 if axis is DEFAULT else axis), ({} if eps is DEFAULT else {"eps": eps})
        return (
            (lambda z, stats=False: op(z, g, b, axis=ax, **extra, **kw)),
            ax,
            getattr(op, "__name__", repr(op)),
        )
    fn = getattr(norms, op)  # check_op has refused any other op
    params = inspect.signature(fn).parameters
    call = dict(kw, **({} if g is None else {"gamma": g}))
    if b is not None:
        if "beta" not in params:
            raise ValueError(f"{op} has no beta; got beta")
        call["beta"] = b
    ax = None
    if "axis" in params:
        ax = call["axis"] = params["axis"].default if axis is DEFAULT else axis
    elif axis is not DEFAULT:
        raise ValueError(
            f"{op} takes no axis (it normalizes each group of channels); got axis={axis!r}"
        )
    default = params["eps"].default
    call["eps"] = (
        eps
        if eps is not DEFAULT
        else (norms.rms_norm_default_eps(x.dtype) if default is None else default)
    )

    def f(z, stats=False):
        return fn(z, **call, return_stats=True) if stats else fn(z, **call)

    if op in ("layer_norm", "rms_norm") and not kw:
        kind = "layer" if op == "layer_norm" else "rms"
        f.estimate = lambda z: norms.normalize_with_estimate(
            kind, z, call.get("gamma"), call.get("beta"), eps=call["eps"], axis=call["axis"]
        )
    return f, ax, op


class Graded:
    """What one grading computed, for compare's report and assert_close's message."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


FORMATS = DTYPES  # lneps.formats.REGISTRY
FORMAT_NAMES = "float16, bfloat16, float32 or float64"


def as_numpy(a, name: str) -> np.ndarray:
    """A NumPy array of one of the four formats from NumPy, PyTorch, JAX, DLPack or Python input."""
    mod = type(a).__module__
    if mod.startswith("torch"):
        import torch  # only ever for a torch tensor

        t = a.detach().cpu()
        arr = (
            t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
            if t.dtype == torch.bfloat16
            else t.numpy()
        )
    elif isinstance(a, np.ndarray) or mod.startswith("jax") or hasattr(a, "__array__"):
        arr = np.asarray(a)
    elif hasattr(a, "__dlpack__"):
        arr = np.from_dlpack(a)
    else:  # Python numbers and lists: integers become float64 (refused beyond 2**53)
        arr = np.asarray(a)
        arr = as_float_array(arr, name)[0] if arr.dtype.kind in "iu" else arr
    if arr.dtype not in FORMATS:
        raise TypeError(f"{name} has dtype {arr.dtype}; lneps.testing takes {FORMAT_NAMES}")
    return arr


def reduced_axes(axis, nd: int) -> tuple:
    return tuple(a % nd for a in (axis if isinstance(axis, (tuple, list)) else (axis,)))


def is_array(a) -> bool:
    """Whether ``a`` carries its own format: a NumPy, PyTorch or JAX array, or an ``__array__``
    or DLPack object (a Python list or number does not: NumPy would make it float64)."""
    mod = type(a).__module__
    return (
        isinstance(a, (np.ndarray, np.generic))
        or mod.startswith(("torch", "jax"))
        or hasattr(a, "__array__")
        or hasattr(a, "__dlpack__")
    )


def output_array(actual, x, dtype, fname: str) -> np.ndarray:
    """The kernel's output as an array of its own format. A Python list or number has none: for
    an input x that is an array too, a ``TypeError`` naming the fix unless ``dtype=`` says which
    it is (with x given as Python numbers as well, both are float64)."""
    if not is_array(actual):
        if dtype is None and is_array(x):
            kind = type(actual).__name__
            raise TypeError(
                f"{fname}(): actual is a Python {kind}, not an array, so its format is unknown "
                f"(NumPy would read it as float64): pass the kernel's output as the array it "
                f"returned, or say its format with dtype= (e.g. dtype=np.float16)"
            )
        if dtype is not None:
            return as_numpy(np.asarray(actual, dtype=dtype_of(dtype)), "actual")
    return as_numpy(actual, "actual")


def dtype_of(dtype) -> np.dtype:
    """``dtype=`` as a NumPy dtype of one of the four formats ("bfloat16" and torch dtypes too)."""
    if type(dtype).__module__.startswith("torch"):
        dtype = str(dtype).removeprefix("torch.")
    try:
        dt = np.dtype(ml_dtypes.bfloat16) if str(dtype) == "bfloat16" else np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype must be one of {FORMAT_NAMES}; got {dtype!r}") from None
    if dt not in FORMATS:
        raise TypeError(f"dtype must be one of {FORMAT_NAMES}; got {dtype!r}")
    return dt


def input_in_output_format(xa: np.ndarray, dt: np.dtype) -> np.ndarray:
    """x as the kernel read it. A float64 x whose every value is a number of the output format
    (``x.double()`` on a 16- or 32-bit input, a common habit) is that format's input: graded
    as float64 it would make the bound assume float64 accumulation. Any other x is as given."""
    if xa.dtype != np.float64 or dt == np.float64 or not xa.size:
        return xa
    narrow = xa.astype(dt)
    with np.errstate(invalid="ignore"):
        fits = np.array_equal(narrow.astype(np.float64), xa, equal_nan=True)
    return narrow if fits else xa
