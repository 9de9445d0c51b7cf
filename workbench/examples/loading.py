"""Loading records from the store: window tokens + one feature's per-token activations (BOS and padding dropped)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sae_workbench.examples.records import Record, crop_record, make_record
from sae_workbench.store import Store


def load_records(
    store: Store,
    sae_id: str,
    corpus: str,
    feature: int,
    window_ids: Sequence[int],
    record_len: int | None = None,
) -> list[Record]:
    """Records of `feature` on `window_ids` (in that order), cropped to `record_len` tokens around each peak."""
    ids = [int(i) for i in window_ids]
    if not ids:
        return []
    acts_NT = store.window_activations(sae_id, feature, ids)
    windows = store.window_tokens(corpus, ids)
    out: list[Record] = []
    for row, wid in enumerate(ids):
        strings, mask = windows[wid]
        nz = np.flatnonzero(acts_NT[row])
        rec = make_record(wid, strings, nz, acts_NT[row, nz], mask=mask)
        out.append(crop_record(rec, record_len))
    return out
