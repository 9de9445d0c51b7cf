"""Every stored activation of one feature in memory, and what the store derives from it without another query.

DuckDB spends 3–6 ms planning and scheduling any query on this machine, however small, and a feature's window maxima
(GROUP BY + ORDER BY) and its activations on a few windows (IN list) were two such queries per explained feature.
Fetching the feature's rows once (a plain filtered scan, ~1.5 ms) and answering both from numpy removes one query and
makes the other cheaper. Features with more than `ROWS_CAP` rows stay on the aggregate queries (bounded memory).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from sae_workbench.store.rows import WindowMaxima

ROWS_CAP = 1 << 17
"""Most rows held for one feature (~1.8 MB); denser features are aggregated by DuckDB instead."""


@dataclass(frozen=True)
class FeatureRows:
    """One feature's stored activations, sorted by (window id, position)."""

    window_ids: np.ndarray
    """(N,) int64."""
    positions: np.ndarray
    """(N,) int64."""
    values: np.ndarray
    """(N,) float32."""

    @classmethod
    def from_columns(cls, window_ids: np.ndarray, positions: np.ndarray, values: np.ndarray) -> FeatureRows:
        """Rows in any order (as a scan returns them) → sorted rows."""
        wid = np.asarray(window_ids, dtype=np.int64)
        pos = np.asarray(positions, dtype=np.int64)
        val = np.asarray(values, dtype=np.float32)
        key = wid * 65536 + pos  # positions are int16 in the store
        if len(key) > 1 and not bool(np.all(key[1:] >= key[:-1])):
            order = np.argsort(key, kind="stable")
            wid, pos, val = wid[order], pos[order], val[order]
        return cls(wid, pos, val)

    @functools.cached_property
    def _windows(self) -> tuple[np.ndarray, np.ndarray]:
        """(first row of each window, window number of each row) — the rows' grouping by window."""
        wid = self.window_ids
        starts = np.flatnonzero(np.r_[True, wid[1:] != wid[:-1]]) if len(wid) else np.zeros(0, dtype=np.int64)
        return starts, np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(wid)]))

    def maxima(self) -> WindowMaxima:
        """Per-window maximum over windows with rows (ascending window id); ties take the earliest position."""
        wid = self.window_ids
        if len(wid) == 0:
            empty = np.zeros(0, dtype=np.int64)
            return WindowMaxima(empty, np.zeros(0, dtype=np.float32), empty.copy())
        starts, group = self._windows
        peak = np.maximum.reduceat(self.values, starts)
        at_peak = np.flatnonzero(self.values == peak[group])
        # Rows are sorted by position inside a window: the first row at the peak has the earliest position.
        _, first = np.unique(group[at_peak], return_index=True)
        return WindowMaxima(
            wid[starts].copy(), peak.astype(np.float32), self.positions[at_peak[first]].copy()
        )

    def dense(self, window_ids: np.ndarray, context_size: int) -> np.ndarray:
        """(len(window_ids), context_size) float32 activations on the given windows (0 where no row; repeats ok)."""
        ids = np.asarray(window_ids, dtype=np.int64)
        out = np.zeros((len(ids), context_size), dtype=np.float32)
        lo = np.searchsorted(self.window_ids, ids, side="left")
        hi = np.searchsorted(self.window_ids, ids, side="right")
        counts = hi - lo
        total = int(counts.sum())
        if total == 0:
            return out
        row = np.repeat(np.arange(len(ids)), counts)
        src = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(lo, counts)
        out[row, self.positions[src]] = self.values[src]
        return out

    def text_scores(self, all_ids: np.ndarray, n_tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(window ids with rows, ascending; activation summed over positions > 0 / the window's token count) —
        PRISM's text score, given every window's id (ascending) and token count without BOS and padding."""
        wid = self.window_ids
        if len(wid) == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        starts, group = self._windows
        total = np.bincount(group, np.where(self.positions > 0, self.values, 0.0), len(starts))
        ids = wid[starts]
        at = np.searchsorted(all_ids, ids)
        known = at < len(all_ids)
        known[known] = all_ids[at[known]] == ids[known]
        ids, total, n = ids[known], total[known], n_tokens[at[known]].astype(np.float64)
        return ids.copy(), np.divide(total, n, out=np.zeros_like(n), where=n > 0)
