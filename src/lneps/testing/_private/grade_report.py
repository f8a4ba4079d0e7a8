"""The :class:`Report` of :func:`lneps.testing.compare`: how a kernel's output compares with
lneps, element by element; which elements exceed a bound; and the Report's numbers gathered
block by block as :func:`lneps.testing.assert_close` grades (:class:`Summary`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..._checks import check_real
from .arguments import as_numpy, reduced_axes
from .exact_errors import measure_exact


def as_bound(max_ulp, shape):
    """``max_ulp`` checked: a float, or a float64 array broadcast to ``shape``."""
    if np.ndim(max_ulp) == 0 and not isinstance(max_ulp, np.ndarray):
        bound = check_real(max_ulp, "max_ulp")
        if not bound >= 0:
            raise ValueError(f"max_ulp must be >= 0; got {max_ulp!r}")
        return bound
    arr = as_numpy(max_ulp, "max_ulp").astype(np.float64)
    if not np.all(arr >= 0):
        raise ValueError("max_ulp must be >= 0 everywhere (NaN is not a bound)")
    try:
        return np.broadcast_to(arr, shape)
    except ValueError:
        raise ValueError(
            f"max_ulp of shape {arr.shape} does not broadcast to actual's shape {shape}"
        ) from None


def over_bound(actual, reference, err, bound, finite=False):
    """The elements beyond ``bound``: error greater than it, or at ``bound == 0.5`` equal to it
    without being the correctly rounded value; and, whatever the bound, a NaN or infinity where
    the correctly rounded value is another number, or a number where it is NaN or infinite.
    ``finite``: actual and reference are known to be finite everywhere (fewer passes)."""
    if finite:
        over = err > bound
        eq = err == bound
        if eq.any():
            over |= eq & (np.asarray(bound) == 0.5) & (actual != reference)
        return over
    same = (actual == reference) | (np.isnan(actual) & np.isnan(reference))
    nonfinite = ~same & ~(np.isfinite(actual) & np.isfinite(reference))
    return nonfinite | (err > bound) | ((err == bound) & (np.asarray(bound) == 0.5) & ~same)


@dataclass(frozen=True)
class Report:
    """How ``actual`` compares with lneps, element by element (conventions: :mod:`lneps.testing`).

    ``max_ulp`` and ``max_ulp_scaled`` are the largest ulp and scaled errors (``worst_ulp_index``
    and ``worst_index`` say where, as index tuples into ``actual``; None if n = 0), ``max_abs``
    the largest :math:`|a-e|`, ``correctly_rounded`` the fraction of elements equal to r,
    ``exact_zero`` how many e are 0, ``uncertain`` how many r may be off (see
    :mod:`lneps.testing`). The float64 arrays ``actual``, ``exact``, ``reference``,
    ``ulp_error`` and ``scaled_error`` have actual's shape. ``scale_test``: the test across
    rows :func:`lneps.testing.assert_close` ran (a :class:`lneps.testing.ScaleBias`), or None
    where it ran none (:func:`lneps.testing.compare`, a given ``max_ulp``, an op other than
    layer_norm and rms_norm). :meth:`summary` says what was checked.
    """

    op: str
    dtype: np.dtype
    n: int
    max_ulp: float
    max_ulp_scaled: float
    max_abs: float
    correctly_rounded: float
    exact_zero: int
    uncertain: int
    worst_index: tuple | None
    worst_ulp_index: tuple | None
    # the five arrays, or a function that computes them on first use (assert_close grades in
    # blocks and keeps none of them, so a passing test costs no memory for them)
    _arrays: object = field(repr=False, compare=False)
    # what was checked (not what was measured: two Reports of one output compare equal)
    scale_test: object = field(default=None, compare=False)
    #: the per-element check: "derived bound", "max_ulp" or None (compare checks nothing)
    checked: str | None = field(default=None, compare=False)

    def _get(self, i):
        arrays = self._arrays
        if callable(arrays):
            arrays = arrays()
            object.__setattr__(self, "_arrays", arrays)
        return arrays[i]

    actual = property(lambda self: self._get(0), doc="actual as float64")
    exact = property(lambda self: self._get(1), doc="the exact values e (float64)")
    reference = property(lambda self: self._get(2), doc="the correctly rounded values r (float64)")
    ulp_error = property(lambda self: self._get(3), doc="|a - e| in ulp of e")
    scaled_error = property(lambda self: self._get(4), doc="|a - e| in ulp of max(|e|, s)")

    def exceeding(self, max_ulp=1.0, metric="scaled") -> np.ndarray:
        """Boolean mask of the elements whose error in ``metric`` exceeds ``max_ulp``: greater
        than it, or, at ``max_ulp=0.5`` exactly, equal to 0.5 without being r (a tie's odd
        neighbour, or the number just below a power of two whose exact value it is). So
        ``max_ulp=0.5, metric="ulp"`` passes exactly the correctly rounded elements. A NaN or
        infinity where r is another number, or a number where r is NaN or infinite, always
        exceeds, whatever ``max_ulp``. ``max_ulp`` is a number or an array broadcast against
        ``actual`` (one bound per element)."""
        bound = as_bound(max_ulp, self.actual.shape)
        if metric not in ("scaled", "ulp"):
            raise ValueError(f"metric must be 'scaled' or 'ulp'; got {metric!r}")
        err = self.scaled_error if metric == "scaled" else self.ulp_error
        return over_bound(self.actual, self.reference, err, bound)

    def summary(self) -> str:
        """What was measured and what was checked, in words: the errors, the per-element check,
        and the test across rows with what it could and could not have caught (a passing
        assert_close says here when that test did not apply, and how many rows would)."""
        lines = [str(self)]
        if self.checked is None:
            lines.append("  checked: nothing (compare measures; assert_close checks)")
            return "\n".join(lines)
        lines.append(f"  checked: every element against the {self.checked}")
        if self.scale_test is None:
            lines.append(
                "  test across rows: not run"
                + (
                    " (max_ulp= given: only that bound applies)"
                    if self.checked == "max_ulp"
                    else ""
                )
            )
        else:
            lines.append("  " + self.scale_test.coverage())
        return "\n".join(lines)

    def _same(self):
        return (self.actual == self.reference) | (np.isnan(self.actual) & np.isnan(self.reference))

    def __str__(self):
        wrong = int((~self._same()).sum())
        lines = [
            f"{self.op}, {self.dtype}, {self.n} elements: {self.correctly_rounded:.2%} correctly "
            f"rounded ({wrong} not)",
            f"  worst {self.max_ulp:.4g} ulp at {self.worst_ulp_index}; scaled {self.max_ulp_scaled:.4g} "
            f"ulp at {self.worst_index}; abs {self.max_abs:.4g}",
            f"  exact zeros: {self.exact_zero}",
        ]
        if self.uncertain:
            lines.append(
                f"  {self.uncertain} correctly rounded values uncertain (x does not fit {self.dtype})"
            )
        return "\n".join(lines)


def make_report(name, a64, e, r, uncertain, err, scaled, diff, dt) -> Report:
    n = a64.size

    def worst(v):
        return tuple(int(i) for i in np.unravel_index(int(np.argmax(v)), v.shape)) if n else None

    same = (a64 == r) | (np.isnan(a64) & np.isnan(r))
    return Report(
        op=name,
        dtype=dt,
        n=n,
        max_ulp=float(err.max()) if n else 0.0,
        max_ulp_scaled=float(scaled.max()) if n else 0.0,
        max_abs=float(diff.max()) if n else 0.0,
        correctly_rounded=float(same.mean()) if n else 1.0,
        exact_zero=int((e == 0).sum()),
        uncertain=int(uncertain.sum()),
        worst_index=worst(scaled),
        worst_ulp_index=worst(err),
        _arrays=(a64, e, r, err, scaled),
    )


class Summary:
    """A :class:`Report`'s numbers, gathered block by block."""

    def __init__(self):
        self.n = self.same = self.zero = self.uncertain = 0
        self.worst = {
            "err": (-1.0, None, False),
            "scaled": (-1.0, None, False),
            "diff": (-1.0, None, False),
        }

    def add(self, gr):
        off = gr.rows.start or 0 if isinstance(gr.rows, slice) else 0
        n = gr.a64.size
        if not n:
            return
        self.n += n
        if getattr(gr, "finite", False):
            not_same = getattr(gr, "not_same", None)  # counted by deferred_bound.floored
            self.same += n - not_same if not_same is not None else int(
                np.count_nonzero(gr.a64 == gr.r)
            )
        else:
            self.same += int(((gr.a64 == gr.r) | (np.isnan(gr.a64) & np.isnan(gr.r))).sum())
        self.zero += int(np.count_nonzero(gr.e == 0))
        self.uncertain += int(np.count_nonzero(gr.uncertain))
        estimated = getattr(gr, "delta", None) is not None
        for key in ("err", "scaled", "diff"):
            v = getattr(gr, key)
            # the largest first (cheaper than its index): a NaN never beats the worst, as before
            if not v.max() > self.worst[key][0]:
                continue
            i = int(np.argmax(v))
            if v.flat[i] > self.worst[key][0]:
                idx = np.unravel_index(i, v.shape)
                self.worst[key] = (
                    float(v.flat[i]),
                    (int(idx[0]) + off, *(int(j) for j in idx[1:])),
                    estimated,
                )

    def exact(self, call):
        """Re-measure exactly the elements found largest on the kernel's estimate."""
        measured = {}
        for key, (v, idx, estimated) in list(self.worst.items()):
            if not estimated or idx is None:
                continue
            a = call.a
            whole = a.ndim < 2 or 0 in reduced_axes(-1 if call.axis is None else call.axis, a.ndim)
            row = None if whole else idx[0]
            if row not in measured:
                measured[row] = measure_exact(call, slice(None) if whole else np.array([row]))
            at = idx if whole else (0, *idx[1:])
            self.worst[key] = (float(getattr(measured[row], key)[at]), idx, False)

    def report(self, name, dt, arrays, scale_test=None, checked=None) -> Report:
        n = self.n
        return Report(
            op=name,
            dtype=dt,
            n=n,
            max_ulp=max(self.worst["err"][0], 0.0),
            max_ulp_scaled=max(self.worst["scaled"][0], 0.0),
            max_abs=max(self.worst["diff"][0], 0.0),
            correctly_rounded=self.same / n if n else 1.0,
            exact_zero=self.zero,
            uncertain=self.uncertain,
            worst_index=self.worst["scaled"][1],
            worst_ulp_index=self.worst["err"][1],
            _arrays=arrays,
            scale_test=scale_test,
            checked=checked,
        )
