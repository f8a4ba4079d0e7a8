"""The smallest inputs that show each finding of the chapter, searched for, not hand-picked.

* :func:`llama_smallest`: the shortest standard-normal float16 row (d a power of two, the first
  failing seed) on which Liger's RMSNorm in ``casting_mode="llama"`` fails lneps's bound;
* :func:`none_threshold`: for a row length d, the smallest float16 value c such that a constant
  row of c makes ``casting_mode="none"`` fail (its squares, summed in float16, overflow);
* :func:`partials_smallest`: the fewest rows (a power of two, d = 64) on which the tutorial's
  dγ partials stored in float16 fail lneps's bound, while float32 partials pass.

Each returns a dict of plain numbers and lists (stored as JSON); torch's CPU kernel is graded on
the same input. Needs the ``gpu`` extra.
"""

from __future__ import annotations

import numpy as np

from lneps.testing import assert_close, compare, default_tolerance

from .gpu_runs import run

__all__ = ["llama_smallest", "none_threshold", "partials_smallest"]


def _passes(actual, **call):
    try:
        assert_close(actual, **call)
        return True
    except AssertionError:
        return False


def _worst(actual, **call):
    rep = compare(actual, **call)
    s = np.where(np.isnan(rep.scaled_error), np.inf, rep.scaled_error)
    i = np.unravel_index(np.argmax(s), s.shape)
    return {"max_scaled": float(s[i]), "at": [int(k) for k in i],
            "actual": float(rep.actual[i]), "exact": float(rep.exact[i]),
            "rounded": float(rep.reference[i])}


def llama_smallest(max_log2_d=7, seeds=64, eps=1e-6):
    """The first (d, seed) in order of d, then seed, whose row fails in llama mode."""
    for k in range(max_log2_d + 1):
        d = 2 ** k
        for seed in range(seeds):
            rng = np.random.default_rng([seed, d])
            x = rng.normal(size=(1, d)).astype(np.float16)
            g = rng.normal(size=d).astype(np.float16)
            call = {"op": "rms_norm", "x": x, "gamma": g, "eps": eps}
            y = run("liger_rms_norm_llama", x, g, np.zeros_like(g), eps)["y"]
            if _passes(y, **call):
                continue
            out = {"d": d, "seed": seed, "x": x[0].tolist(), "gamma": g.tolist(),
                   "llama": _worst(y, **call)}
            bound = default_tolerance("rms_norm", x=x, actual_dtype=y.dtype, gamma=g, eps=eps)
            at = tuple(out["llama"]["at"])
            out["bound_at_worst"] = float(np.broadcast_to(bound, y.shape)[at])
            for other in ("liger_rms_norm_gemma", "torch_rms_norm"):
                yo = run(other, x, g, np.zeros_like(g), eps)["y"]
                out[other] = {"passed": _passes(yo, **call), **_worst(yo, **call)}
            return out
    return None


def none_threshold(d, eps=1e-6):
    """The smallest positive float16 c whose constant row of length d fails in none mode, found
    by bisection over float16's bit patterns between 1 and 65504 (failing is monotone in c: the
    sum of squares only grows)."""
    def fails(c):
        x = np.full((1, d), c, np.float16)
        g = np.ones(d, np.float16)
        y = run("liger_rms_norm_none", x, g, np.zeros_like(g), eps)["y"]
        return not _passes(y, op="rms_norm", x=x, gamma=g, eps=eps), y

    lo, hi = np.float16(1).view(np.uint16), np.float16(65504).view(np.uint16)
    if not fails(np.uint16(hi).view(np.float16))[0]:
        return None
    while hi - lo > 1:
        mid = np.uint16((int(lo) + int(hi)) // 2)
        if fails(mid.view(np.float16))[0]:
            hi = mid
        else:
            lo = mid
    c = float(np.uint16(hi).view(np.float16))
    x = np.full((1, d), c, np.float16)
    g = np.ones(d, np.float16)
    y = fails(c)[1]
    yt = run("torch_rms_norm", x, g, np.zeros_like(g), eps)["y"]
    return {"d": d, "c": c, "largest_passing": float(np.uint16(lo).view(np.float16)),
            "sum_of_squares": d * c * c, "output": float(y[0, 0]),
            "torch_passes": _passes(yt, op="rms_norm", x=x, gamma=g, eps=eps),
            "torch_output": float(yt[0, 0])}


def partials_smallest(d=64, max_log2_rows=11, eps=1e-5):
    """The fewest rows (powers of two) whose dγ or dβ fails with float16 partials (seed 0)."""
    for k in range(1, max_log2_rows + 1):
        rows = 2 ** k
        rng = np.random.default_rng([rows, d])
        x, dy = (rng.normal(size=(rows, d)).astype(np.float16) for _ in range(2))
        g, b = (rng.normal(size=d).astype(np.float16) for _ in range(2))
        grads = run("two_pass_16bit_partials", x, g, b, eps, dy)
        for wrt in ("gamma", "beta"):
            call = {"op": "layer_norm_backward", "wrt": wrt, "x": x, "dy": dy, "gamma": g,
                    "eps": eps}
            if _passes(grads[wrt], **call):
                continue
            fixed = run("two_pass", x, g, b, eps, dy)[wrt]
            torch_g = run("torch_layer_norm", x, g, b, eps, dy)[wrt]
            return {"rows": rows, "d": d, "wrt": wrt, "partials_16bit": _worst(grads[wrt], **call),
                    "float32_partials": {"passed": _passes(fixed, **call), **_worst(fixed, **call)},
                    "torch": {"passed": _passes(torch_g, **call), **_worst(torch_g, **call)}}
    return None
