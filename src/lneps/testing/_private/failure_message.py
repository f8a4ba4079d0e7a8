"""The failure message of assert_close: the worst element (the one furthest beyond its bound)
with its input row, the row's statistics, gamma and beta there and its errors, and the defect
named where its pattern is known."""

from __future__ import annotations

import numpy as np


def _row_of(gr, idx, shown):
    """``(text, row)``: where the worst element's input row is (``shown``: its index in the whole
    of actual), and its numbers (``idx``: its index in the block graded)."""
    xa = gr.x
    if gr.name == "group_norm":  # the (sample, group) slice the element was normalized with
        width = xa.shape[1] // gr.kw["num_groups"]
        lo = idx[1] // width * width
        return f"x[{shown[0]}, {lo}:{lo + width}, ...]", xa[idx[0], lo : lo + width].ravel()
    if gr.wrt in ("gamma", "beta"):
        return "x (every row contributes)", None
    from .arguments import reduced_axes

    if gr.name == "batch_norm":
        axes = reduced_axes(0 if gr.axis is None else gr.axis, xa.ndim)
        where = "x[" + ", ".join(":" if k in axes else str(i) for k, i in enumerate(shown)) + "]"
        return where, xa[tuple(slice(None) if k in axes else i for k, i in enumerate(idx))]
    axes = reduced_axes(-1 if gr.axis is None else gr.axis, xa.ndim)
    where = "x[" + ", ".join(":" if k in axes else str(i) for k, i in enumerate(shown)) + "]"
    return where, xa[tuple(slice(None) if k in axes else i for k, i in enumerate(idx))]


def _at(v, idx, shape):
    """v (None, a scalar or an array broadcasting to shape) at idx."""
    if v is None:
        return None
    return (
        float(np.broadcast_to(np.asarray(v, dtype=np.float64), shape)[idx])
        if np.ndim(v)
        else float(v)
    )


def _placed(p, gr):
    """gamma or beta broadcast to x's shape as the op places it (per channel for group_norm)."""
    if p is None:
        return None
    p = np.asarray(p.astype(np.float64))
    shape, nd = gr.x.shape, gr.x.ndim
    if gr.name == "group_norm" and p.ndim == 1:
        return p.reshape([shape[1] if a == 1 else 1 for a in range(nd)])
    if p.ndim and gr.name in ("layer_norm", "rms_norm") and gr.axis is not None:
        from .arguments import reduced_axes

        axes = reduced_axes(gr.axis, nd)
        if p.shape == tuple(shape[a] for a in axes):
            return p.reshape([shape[a] if a in axes else 1 for a in range(nd)])
    return p


def _suspects(gr, idx, row, over_rows_constant_nan, constant_far, systematic):
    """Known patterns, each named with its cause."""
    found = []
    if over_rows_constant_nan:
        found.append(
            "NaN on a constant row: epsilon missing (a constant row has variance 0, and "
            "(x - mean)/sqrt(0) is 0/0 without epsilon)"
        )
    if constant_far:
        found.append(
            "a constant row's output far from beta: its normalized value is exactly 0, so the "
            "statistics were merged inexactly (a mean that is not exactly the row's constant, as a "
            "Welford or Chan merge or a fused multiply-add residue leaves it)"
        )
    if systematic is not None and getattr(systematic, "suspect", None):
        found.append(systematic.suspect)
    return found


def _row_stats64(gr, i):
    """(mean or None, rstd) of row i of x, in float64 (lneps's correctly rounded statistics)."""
    from ... import norms

    z = gr.x[i : i + 1].astype(np.float64)
    eps = 1e-5 if gr.call_eps is None else gr.call_eps
    if gr.op == "layer_norm_backward":
        _, mean, rstd = norms.layer_norm(z, eps=eps, return_stats=True)
        return float(np.ravel(mean)[0]), float(np.ravel(rstd)[0])
    _, rstd = norms.rms_norm(z, eps=eps, return_stats=True)
    return None, float(np.ravel(rstd)[0])


def _backward_dx(gr, i, mean, rstd):
    """``(lines, suspects)`` for a dx failure in row i: the row's dy and statistics, and the
    defects whose pattern the row's error follows: rstd stored in a 16-bit format (every dx of
    the row off by the same factor, rstd's rounding) or the term u * mean(g * u) with the wrong
    sign (the error twice that term)."""
    dy = gr.dy[i].astype(np.float64)
    lines = [
        f"  dy row = {np.array2string(dy, threshold=16, edgeitems=4, max_line_width=96)}",
        "  row's "
        + (f"mean {mean:.10g}, " if mean is not None else "")
        + f"rstd {rstd:.10g}"
        + " (float64, exact to the digits shown)",
    ]
    a, e = gr.a64[i], gr.e[i]
    diff = a - e
    found = []
    with np.errstate(all="ignore"):
        ee = float(np.dot(e, e))
        if ee > 0 and np.isfinite(diff).all():
            s = float(np.dot(diff, e)) / ee  # the row's least-squares relative scale error
            resid = float(np.linalg.norm(diff - s * e)) / np.sqrt(ee)
            import ml_dtypes

            for name, fmt in (("bfloat16", ml_dtypes.bfloat16), ("float16", np.float16)):
                moved = float(np.asarray(rstd, dtype=fmt)) / rstd - 1
                if moved != 0 and abs(s - moved) <= 0.1 * abs(moved) and resid <= 0.1 * abs(moved):
                    found.append(
                        f"rstd stored in {name}: every dx of the row is off by the factor "
                        f"{1 + s:.6g}, rstd's rounding to {name} ({1 + moved:.6g})"
                    )
                    break
            z = gr.x[i].astype(np.float64)
            g = (
                dy
                if gr.gamma is None
                else dy * np.broadcast_to(gr.gamma.astype(np.float64), dy.shape)
            )
            u = ((z - mean) if mean is not None else z) * rstd
            term = rstd * u * float(np.mean(g * u))
            tt = float(np.dot(term, term))
            if tt > 0:
                c = float(np.dot(diff, term)) / tt
                rest = float(np.linalg.norm(diff - c * term)) / np.sqrt(tt)
                if abs(abs(c) - 2) <= 0.1 and rest <= 0.1:
                    found.append(
                        "the term u * mean(dy * gamma * u) with the wrong sign (the error is "
                        "twice that term)"
                    )
    return lines, found


def _backward_dbeta(gr):
    """Suspect for a dβ failure: the column sums of dy accumulated in a 16-bit format."""
    import ml_dtypes

    dy = gr.dy.reshape(-1, gr.dy.shape[-1])
    for name, fmt in (("float16", np.float16), ("bfloat16", ml_dtypes.bfloat16)):
        acc = np.zeros(dy.shape[-1], dtype=fmt)
        with np.errstate(all="ignore"):
            for row in dy.astype(fmt):
                acc = (acc + row).astype(fmt)
        same = np.mean(acc.astype(np.float64) == gr.a64.ravel())
        if same >= 0.5 and not np.array_equal(gr.a64.ravel(), gr.r.ravel()):
            return [
                f"dβ accumulated in {name}: {same:.0%} of its columns equal the row-by-row sum in {name}"
            ]
    return []


def failure_text(gr, over, err, bound, metric, max_ulp_given, systematic, err_msg, over_count, n):
    shape = gr.a64.shape
    with np.errstate(divide="ignore", invalid="ignore"):
        badness = np.where(over, err / bound if np.ndim(bound) else err, -1.0)
    badness = np.where(np.isnan(badness), np.inf, badness)
    idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(badness)), shape))
    if isinstance(gr.rows, np.ndarray):  # some rows of the output, by index
        shown = (int(gr.rows[idx[0]]), *idx[1:])
    else:
        off = (gr.rows.start or 0) if isinstance(gr.rows, slice) else 0
        shown = (idx[0] + off, *idx[1:]) if idx else idx  # the index into the whole of actual
    b_at = float(bound[idx]) if np.ndim(bound) else float(bound)
    limit = (
        f"{max_ulp_given} ulp"
        if max_ulp_given is not None and not np.ndim(max_ulp_given)
        else f"their bound (here {b_at:.6g} ulp)"
    )
    where, row = _row_of(gr, idx, shown)

    def show(v):
        v = float(v)
        return f"{v!r} ({v.hex()})"

    ratio = float(err[idx]) / b_at if b_at > 0 else np.inf
    if over_count:
        lines = [
            f"{over_count} of {n} elements exceed {limit} ({metric} metric; {gr.name}, {gr.dt})",
            f"worst at index {shown}:",
        ]
    else:
        lines = [
            f"every element is within its bound, but the rows share a scale error that a correct "
            f"kernel's rounding cannot produce ({gr.name}, {gr.dt})",
            f"largest error at index {shown}:",
        ]
    if row is not None:
        lines.append(
            f"  input row {where} = {np.array2string(row, threshold=16, edgeitems=4, max_line_width=100)}"
        )
    if gr.stats is not None and gr.wrt is None:
        st = [np.broadcast_to(s, shape)[idx] for s in gr.stats]
        names = ("mean", "rstd") if len(st) == 2 else ("rstd",)
        lines.append(
            "  row's "
            + ", ".join(f"{n} {float(v):.10g}" for n, v in zip(names, st))
            + " (exact to the digits shown)"
        )
    ga, be = _at(_placed(gr.gamma, gr), idx, shape), _at(_placed(gr.beta, gr), idx, shape)
    if ga is not None or be is not None:
        shown_p = (("gamma", ga), ("beta", be)) if gr.wrt != "beta" else ()  # dβ involves neither
        if shown_p and any(v is not None for _, v in shown_p):
            lines.append("  " + ", ".join(f"{n} here {v!r}" for n, v in shown_p if v is not None))
    lines += [
        f"  exact             {show(gr.e[idx])}",
        f"  correctly rounded {show(gr.r[idx])}",
        f"  actual            {show(gr.a64[idx])}",
        f"  error             {gr.err[idx]:.6g} ulp, {gr.scaled[idx]:.6g} ulp scaled, "
        f"abs {abs(gr.a64[idx] - gr.e[idx]):.6g}; {ratio:.3g} times the bound",
    ]
    # the known patterns
    nan_const = far_const = zero_eps = False
    if gr.wrt is None and gr.name in ("layer_norm", "rms_norm", "group_norm") and row is not None:
        constant = row.size > 1 and np.all(row == row.ravel()[0])
        if constant and np.isnan(gr.a64[idx]) and np.isfinite(gr.e[idx]):
            nan_const = True
        elif (
            constant
            and gr.name != "rms_norm"
            and np.isfinite(gr.a64[idx])
            and np.isfinite(gr.e[idx])
        ):
            far_const = True  # (where the exact answer is NaN, eps = 0, no merge is to blame)
        elif constant and np.isnan(gr.e[idx]) and np.isfinite(gr.a64[idx]):
            zero_eps = True
    found = _suspects(gr, idx, row, nan_const, far_const, systematic)
    if gr.wrt == "x" and getattr(gr, "dy", None) is not None and gr.x.ndim == 2:
        mean, rstd = _row_stats64(gr, idx[0])
        extra, more = _backward_dx(gr, idx[0], mean, rstd)
        at = next((k + 1 for k, line in enumerate(lines) if line.startswith("  input row")), 2)
        lines[at:at] = extra  # after the input row
        found += more
    elif gr.wrt == "beta" and getattr(gr, "dy", None) is not None:
        found += _backward_dbeta(gr)
    if zero_eps:
        found.append(
            "a number where the exact answer is NaN: a constant row with eps = 0 is 0/0, and "
            "the kernel hides the division by zero (or was graded with the wrong eps=)"
        )
    if systematic is not None and not getattr(systematic, "passed", True):
        lines.append(f"  across rows: {systematic}")
    for s in found:
        lines.append(f"suspect: {s}")
    nd = gr.x.ndim
    if (
        not getattr(gr, "axis_given", True)
        and nd > 2
        and gr.name in ("layer_norm", "rms_norm")
        and over_count * 2 > n
    ):
        # most elements off on an N-D input graded over its last axis alone: the likeliest cause
        lines.append(
            f"note: x is {nd}-D and axis= was not given, so each slice along the last axis was "
            f"normalized on its own; a kernel that normalizes over more axes (torch's "
            f"normalized_shape of several dimensions) is graded with axis=, e.g. "
            f"axis={tuple(range(1, nd))}"
        )
    if err_msg:
        lines.append(str(err_msg))
    return "\n".join(lines)
