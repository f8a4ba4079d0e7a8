r"""The kernel's undecided elements: gathered from the float64 and double-double tiers and
taken through the exact tier (:mod:`lneps.kernel.exact`).

:class:`UndecidedElements` collects the elements a call's blocks leave undecided, so that the
rows' statistics are computed together, vectorized, and decides them in batches; it never holds
more than a few megabytes, whatever the shape (a long row's statistics are computed once and
reused while its chunks come back).
"""

from __future__ import annotations

import numpy as np

from . import expansions as dd
from .double_double import TILE, DDRows, extreme, finish_rows, finish_values
from .exact import ExactRows, round_by_fractions, round_where_exact
from .triple import TripleRows
from ..formats import to_format
from .rounding import FAST_FORMATS

__all__ = ["UndecidedElements"]


class UndecidedElements:
    """The undecided elements of a whole call, gathered across blocks (so that their rows'
    statistics are computed together, vectorized) and decided in batches, rows in groups of
    about ``block`` elements: exactly where the row's statistics allow it
    (:func:`~lneps.kernel.exact.round_where_exact`), else, for elements from tier A, in
    double-double (element by element, or tile by tile for a row left with many), else in
    triple precision, else by rational arithmetic
    (:func:`~lneps.kernel.exact.round_by_fractions`). ``stage``
    of :meth:`add` says which tier an element comes from ("A" or "B")."""

    BATCH = 1 << 14  # elements gathered before they are decided

    def __init__(self, x2d, yout, chunks, kind, eps, g, b, counts, block, sum_exact=None):
        self.x2d, self.yout, self.chunks, self.kind, self.eps = x2d, yout, chunks, kind, eps
        self.block = block  # rows are decided in groups of about this many elements
        self.sum_exact = sum_exact  # rows -> which have exact float64 sums (16- and 32-bit input)
        self.g, self.b, self.counts = g, b, counts
        self.dt = x2d.dtype
        self.fast = self.dt in FAST_FORMATS
        self.queue, self.size = [], 0
        self._exact = self._dd = self._triple = None

    def add(self, I, J, stage):
        self.queue.append((I, J, stage))
        self.size += I.size
        if self.size >= self.BATCH:
            self.flush()

    def flush(self):
        """Decide the queue, its rows in groups of about ``block`` elements (memory)."""
        per_group = max(1, self.block // self.x2d.shape[1])
        for stage in ("A", "B"):
            parts = [(I, J) for I, J, st in self.queue if st == stage]
            if not parts:
                continue
            I, J = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
            order = np.argsort(I, kind="stable")
            I, J = I[order], J[order]
            rows = _unique(I)
            for g0 in range(0, rows.size, per_group):
                group = rows[g0:g0 + per_group]
                lo, hi = np.searchsorted(I, group[0], side="left"), np.searchsorted(I, group[-1], side="right")
                self._decide_group(I[lo:hi], J[lo:hi], stage)
        self.queue, self.size = [], 0

    def _decide_group(self, I, J, stage):
        """One group of rows: each tier's row statistics once, its elements tile by tile."""
        I, J = self._tiles(I, J, "_exact", self._exact_rows, self._exact_step)
        if I.size and stage == "A":
            I, J = self._whole_rows(I, J)
            I, J = self._tiles(I, J, "_dd", self._dd_rows, self._dd_step)
        if I.size:  # what double-double left: triple precision
            I, J = self._tiles(I, J, "_triple", self._triple_rows, self._triple_step)
        if I.size:
            self.counts["exact_elements"] += I.size
            self.counts["fraction_elements"] += I.size
            values = round_by_fractions(self.x2d, self.chunks, self.kind, self.eps, I, J,
                                        self.g.at(I, J), self.b.at(I, J), self.dt)
            self._put(I, J, values)

    def _tiles(self, I, J, attr, factory, step):
        """Statistics of the rows of I (kept while a long row's chunks come back), then
        ``step(stats, positions, I, J)`` on TILE elements at a time (cache); returns the
        elements ``step`` left undecided."""
        if not I.size:
            return I, J
        rows = _unique(I)
        cached = getattr(self, attr)
        if cached is None or not np.isin(rows, cached[0]).all():
            cached = (rows, factory(rows))
            setattr(self, attr, cached)
        stats, pos = cached[1], np.searchsorted(cached[0], I)
        left = np.zeros(I.size, dtype=bool)
        with np.errstate(invalid="ignore", over="ignore", divide="ignore", under="ignore"):
            for e0 in range(0, I.size, TILE):
                t = slice(e0, e0 + TILE)
                left[t] = step(stats, pos[t], I[t], J[t])
        return I[left], J[left]

    def _exact_rows(self, rows):
        return ExactRows(_take(self.x2d, rows), self.chunks, self.kind, self.eps)

    def _exact_step(self, ex, k, I, J):
        values, done = round_where_exact(ex, k, self.x2d[I, J].astype(np.float64), self.g.at(I, J), self.b.at(I, J),
                                         self.dt)
        self._put(I[done], J[done], values[done])
        self.counts["exact_elements"] += int(done.sum())
        return ~done

    def _dd_rows(self, rows, xr=None):
        self.counts["double_double_rows"] += int(rows.size)
        xr = _take(self.x2d, rows) if xr is None else xr
        exact = None if self.sum_exact is None else self.sum_exact(xr)
        return DDRows(xr, self.chunks, self.kind, self.eps, self.fast, sum_exact=exact)

    def _dd_step(self, st, k, I, J):
        g, b = self.g.at(I, J), self.b.at(I, J)
        parts = st.parts_of(self.x2d[I, J].astype(np.float64), rows=k)
        y, flags = finish_values(parts, st.per_row(k), g, None if g is None else dd.split(g), b, self.dt, self.fast)
        if g is not None and self.g.extreme:
            flags |= extreme(g)
        self.counts["double_double_elements"] += I.size
        keep = ~flags
        self._put(I[keep], J[keep], (to_format(y, self.dt) if self.fast else y)[keep].astype(np.float64))
        return flags

    def _triple_rows(self, rows):
        return TripleRows(np.asarray(_take(self.x2d, rows), dtype=np.float64), self.chunks, self.kind, self.eps)

    def _triple_step(self, tr, k, I, J):
        g = self.g.at(I, J)
        y, flags = tr.values(k, self.x2d[I, J].astype(np.float64), g, self.b.at(I, J), self.dt)
        flags |= ~tr.ok[k]
        if g is not None and self.g.extreme:
            flags |= extreme(g)
        keep = ~flags
        self._put(I[keep], J[keep], y[keep])
        self.counts["triple_elements"] += I.size
        return flags

    def _whole_rows(self, I, J):
        """Rows left with many undecided elements (a bias cancelling most of each value) go
        through tier B whole, tile by tile, cheaper than element by element; returns the
        elements still undecided, and those of the other rows."""
        if len(self.chunks) > 1:  # a long row comes back chunk by chunk: element by element
            return I, J
        rows, first = np.unique(I, return_index=True)
        many = np.diff(np.append(first, I.size)) >= max(16, self.x2d.shape[1] // 16)
        if not many.any():
            return I, J
        heavy = rows[many]
        xr = _take(self.x2d, heavy)
        gp, bp = (None if p.p is None else (p.p if p.p.shape[0] == 1 else p.p[heavy]) for p in (self.g, self.b))

        def part(p):
            def get(r, c0, c1):
                if p is None:
                    return None
                q = p if p.shape[0] == 1 else p[r]
                return q if q.shape[1] == 1 else q[:, c0:c1]
            return get

        left = np.zeros(xr.shape, dtype=bool)
        with np.errstate(invalid="ignore", over="ignore", divide="ignore", under="ignore"):
            st = self._dd_rows(heavy, xr)
            for r, c0, c1, y, flags in finish_rows(st, xr, part(gp), part(bp), self.dt, self.fast):
                out = to_format(y, self.dt) if self.fast else y
                # every unflagged value is correctly rounded (those decided already agree)
                target = self.yout[heavy[r], c0:c1]
                self.yout[heavy[r], c0:c1] = np.where(flags, target, out)
                left[r, c0:c1] = flags
        self.counts["double_double_elements"] += int(xr.size)
        inside = np.isin(I, heavy)
        still = np.zeros(I.shape, dtype=bool)
        still[inside] = left[np.searchsorted(heavy, I[inside]), J[inside]]
        keep = ~inside | still
        return I[keep], J[keep]

    def _put(self, I, J, values):
        if I.size:
            self.yout[I, J] = to_format(values, self.dt) if self.fast else values


def _take(x2d, rows):
    """x2d[rows], a view when the rows are consecutive (a long row is not copied)."""
    if rows.size and rows[-1] - rows[0] == rows.size - 1:
        return x2d[rows[0]:rows[-1] + 1]
    return x2d[rows]


def _unique(I):
    """np.unique, quicker for the sorted indices blocks produce."""
    if I.size and np.all(I[1:] >= I[:-1]):
        return I[np.concatenate(([True], I[1:] != I[:-1]))]
    return np.unique(I)
