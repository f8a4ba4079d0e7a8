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
import inspect

from .. import norms

OPS = ("layer_norm", "rms_norm", "group_norm", "batch_norm", "layer_norm_backward", "rms_norm_backward")
#: The gradients each backward op has, by ``wrt=``.
WRT = {"layer_norm_backward": ("x", "gamma", "beta"), "rms_norm_backward": ("x", "gamma")}


class _Default:
    def __repr__(self):
        return "<op's default>"


#: ``eps`` or ``axis`` left to the op: its own signature's default (``rms_norm``'s ``eps=None``
#: is torch's rule for x's dtype; ``batch_norm`` reduces axis 0; ``group_norm`` takes no axis; a
#: callable gets ``axis=-1`` and no eps). ``eps`` must be given, so this is how to ask for it.
DEFAULT = _Default()
_MISSING = object()

# compare's keywords; assert_close adds _ASSERT_KEYWORDS.
_KEYWORDS = ("x", "op", "gamma", "beta", "eps", "axis", "scale", "dy", "wrt")
_ASSERT_KEYWORDS = ("max_ulp", "kernels", "metric", "err_msg")
# What users of numpy.testing and torch.testing reach for, and what it is called here.
_HINTS = {
    "rtol": "lneps.testing measures errors in ulp: pass max_ulp= (the default is derived for the op and format)",
    "atol": "lneps.testing measures errors in ulp: pass max_ulp= (the default is derived for the op and format)",
    "expected": "lneps computes the expected values itself from the kernel's input: pass x=",
    "desired": "lneps computes the expected values itself from the kernel's input: pass x=",
    "equal_nan": "a NaN where the exact value is finite always fails, and a finite value where it is NaN too",
    "dtype": "the output format is read from actual",
    "check_dtype": "the output format is read from actual",
    "grad": "the upstream gradient is dy=",
    "grad_output": "the upstream gradient is dy=",
    "input": "the kernel's input is x=",
    "inputs": "the kernel's input is x=",
    "epsilon": "it is eps=",
    "weight": "the gain is gamma=",
    "bias": "the bias is beta=",
    "msg": "the extra message is err_msg=",
}


def _call_error(fname: str, args: tuple) -> TypeError:
    return TypeError(
        f"{fname}() takes the kernel's output as its only positional argument, and {len(args)} more "
        f"were given; pass the kernel's input by keyword: {fname}(actual, x=x, eps=...). "
        f"lneps computes the expected values itself, so a second argument is not an expected output "
        f"as in numpy.testing or torch.testing.")


def _op_keywords(op) -> tuple[set, bool]:
    """The extra keywords ``op`` itself takes (``num_groups``, ``training``...), and whether it
    takes any (a callable with ``**kwargs``)."""
    if callable(op):
        try:
            params = inspect.signature(op).parameters
        except (TypeError, ValueError):
            return set(), True
        any_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
        return {n for n, p in params.items() if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}, any_kw
    if isinstance(op, str) and op in ("layer_norm", "rms_norm", "group_norm", "batch_norm"):
        names = set(inspect.signature(getattr(norms, op)).parameters)
        return names - {"x", "gamma", "beta", "eps", "axis"}, False
    return set(), False


def _check_keywords(fname: str, op, kwargs: dict, own: tuple) -> dict:
    """The op's own keywords from ``kwargs``, after naming any keyword nobody takes."""
    extra, any_kw = _op_keywords(op)
    unknown = [k for k in kwargs if k not in extra]
    if unknown and not any_kw:
        k = unknown[0]
        hint = _HINTS.get(k) or "".join(f"did you mean {m}=?" for m in
                                         difflib.get_close_matches(k, [*own, *extra], n=1))
        opname = op if isinstance(op, str) else getattr(op, "__name__", "the op")
        takes = ", ".join(n + "=" for n in own)
        ops = sorted(extra - {"compute_dtype", "return_stats"})
        raise TypeError(f"{fname}() got an unexpected keyword argument {k!r}" + (f" ({hint})" if hint else "")
                        + f"; it takes {takes}" + (f", and {opname}'s " + ", ".join(n + "=" for n in ops) if ops else ""))
    return kwargs


def _caller(op, x, g, b, eps, axis, kw):
    """``(f, axis, name)``: f(z, stats) is the op on z with everything else fixed (with
    ``stats=True`` it also returns the op's statistics, where it has them); axis as resolved."""
    bad = sorted({"compute_dtype", "return_stats"} & set(kw))
    if bad:
        raise ValueError(f"{bad} would change the reference; lneps.testing compares with the default")
    if callable(op):
        ax, extra = (-1 if axis is DEFAULT else axis), ({} if eps is DEFAULT else {"eps": eps})
        return (lambda z, stats=False: op(z, g, b, axis=ax, **extra, **kw)), ax, getattr(op, "__name__", repr(op))
    if not isinstance(op, str) or op not in OPS:
        raise ValueError(f"op must be one of {', '.join(OPS)} or a callable; got {op!r}")
    fn = getattr(norms, op)
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
        raise ValueError(f"{op} takes no axis (it normalizes each group of channels); got axis={axis!r}")
    default = params["eps"].default
    call["eps"] = eps if eps is not DEFAULT else (norms.rms_norm_default_eps(x.dtype) if default is None else default)

    def f(z, stats=False):
        return fn(z, **call, return_stats=True) if stats else fn(z, **call)

    if op in ("layer_norm", "rms_norm") and not kw:
        kind = "layer" if op == "layer_norm" else "rms"
        f.estimate = lambda z: norms._with_estimate(kind, z, call.get("gamma"), call.get("beta"), eps=call["eps"],
                                                    axis=call["axis"])
    return f, ax, op


class _Graded:
    """What one grading computed, for compare's report and assert_close's message."""

    def __init__(self, **kw):
        self.__dict__.update(kw)
