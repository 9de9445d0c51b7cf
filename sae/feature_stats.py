"""Per-feature statistics of an indexed SAE: activation statistics (SQL, in the store), logit-lens tokens,
decoder-cosine and co-occurrence neighbours (vectorised numpy, no per-feature Python loops over the data).

`compute_feature_stats` is the one entry point; `sae.index_loop.finish_index` calls it after the rows are finalized.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pyarrow as pa
import scipy.sparse as sp
from sae_lens import SAE
from transformer_lens import HookedTransformer

from sae_workbench.faults import fail_point
from sae_workbench.sae.index_request import IndexConfig
from sae_workbench.sae.vocab import vocab_strings
from sae_workbench.store import Store

log = logging.getLogger(__name__)


def _top_k_rows(scores_FX: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices and values of the k largest entries of each row, sorted descending."""
    k = min(k, scores_FX.shape[1])
    idx = np.argpartition(-scores_FX, k - 1, axis=1)[:, :k]
    vals = np.take_along_axis(scores_FX, idx, axis=1)
    order = np.argsort(-vals, axis=1, kind="stable")
    return np.take_along_axis(idx, order, axis=1), np.take_along_axis(vals, order, axis=1)


def logit_lens(W_dec_FD: np.ndarray, W_U_DV: np.ndarray, k: int, chunk: int = 512) -> dict[str, np.ndarray]:
    """Top/bottom-k unembedding logits of each decoder row (decoder row × W_U, no final norm), in feature chunks."""
    n = W_dec_FD.shape[0]
    top_i, top_v, bot_i, bot_v = [], [], [], []
    for start in range(0, n, chunk):
        logits_CV = W_dec_FD[start : start + chunk] @ W_U_DV
        i, v = _top_k_rows(logits_CV, k)
        top_i.append(i)
        top_v.append(v)
        i, v = _top_k_rows(-logits_CV, k)
        bot_i.append(i)
        bot_v.append(-v)
    return {
        "top_ids": np.concatenate(top_i),
        "top_values": np.concatenate(top_v),
        "bottom_ids": np.concatenate(bot_i),
        "bottom_values": np.concatenate(bot_v),
    }


def decoder_neighbours(W_dec_FD: np.ndarray, k: int, chunk: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """Each feature's k most cosine-similar decoder rows (itself excluded)."""
    unit_FD = W_dec_FD / np.maximum(np.linalg.norm(W_dec_FD, axis=1, keepdims=True), 1e-12)
    ids, vals = [], []
    for start in range(0, len(unit_FD), chunk):
        cos_CF = unit_FD[start : start + chunk] @ unit_FD.T
        rows = np.arange(cos_CF.shape[0])
        cos_CF[rows, rows + start] = -np.inf
        i, v = _top_k_rows(cos_CF, k)
        ids.append(i)
        vals.append(v)
    return np.concatenate(ids), np.concatenate(vals)


COOC_BLOCK_PAIRS = 1 << 22
"""Co-occurring (feature, feature) pairs formed per block of X^T X: bounds the step's memory beyond its rows
(about 60 B per pair in the product, its COO copy and the sort: ~250 MB)."""


def cooccurrence_neighbours(
    features: np.ndarray, token_keys: np.ndarray, d_sae: int, k: int, block_pairs: int = COOC_BLOCK_PAIRS
) -> tuple[list[list[int]], list[list[float]]]:
    """Each feature's k neighbours by Jaccard index over the tokens where both are active (sparse X^T X).

    X^T X is formed a block of features (rows of it) at a time, each block cut to its top k before the next, the
    blocks sized so that each forms at most `block_pairs` pairs (a feature's row has at most min(sum of the active
    counts of its tokens, d_sae) entries; a block is one feature at least): memory holds the token x feature matrix
    twice plus one block, however the density is spread over features. The counts are small integers, exact in
    float32, so any blocking gives the same result.
    """
    _, token_idx = np.unique(token_keys, return_inverse=True)
    n_tok = int(token_idx.max()) + 1 if len(token_idx) else 0
    X_TF = sp.csr_matrix((np.ones(len(features), np.float32), (token_idx, features)), shape=(n_tok, d_sae))
    del token_idx
    X_FT = X_TF.T.tocsr()
    counts_F = np.asarray(X_TF.sum(axis=0)).ravel()
    active_T = np.diff(X_TF.indptr).astype(np.float64)
    pairs_F = np.minimum(X_FT @ active_T, d_sae)  # upper bound on the entries of each feature's row of X^T X
    cum_pairs_F = np.cumsum(pairs_F)
    ids: list[list[int]] = []
    vals: list[list[float]] = []
    start = 0
    while start < d_sae:
        before = cum_pairs_F[start - 1] if start else 0.0
        stop = max(int(np.searchsorted(cum_pairs_F, before + block_pairs, side="right")), start + 1)
        C = (X_FT[start:stop] @ X_TF).tocoo()  # (stop - start, d_sae): pair counts of this block's features
        rows, cols, inter = C.row.astype(np.int64) + start, C.col, C.data
        del C
        off_diag = rows != cols
        rows, cols, inter = rows[off_diag], cols[off_diag], inter[off_diag]
        jaccard = inter / (counts_F[rows] + counts_F[cols] - inter)
        order = np.lexsort((cols, -jaccard, rows))
        rows, cols, jaccard = rows[order], cols[order], jaccard[order]
        block = np.arange(start, stop)
        starts = np.searchsorted(rows, block)
        ends = np.searchsorted(rows, block, side="right")
        ids += [cols[s : min(e, s + k)].tolist() for s, e in zip(starts, ends, strict=True)]
        vals += [jaccard[s : min(e, s + k)].astype(float).tolist() for s, e in zip(starts, ends, strict=True)]
        start = stop
    return ids, vals


def budgeted_cooccurrence(
    store: Store, sae_id: str, d_sae: int, context_size: int, k: int, max_rows: int
) -> tuple[list[list[int]], list[list[float]]]:
    """`cooccurrence_neighbours` of `sae_id` over at most `max_rows` stored rows: all of them when they fit, else
    those of the longest prefix of windows that fits (recorded in the index run's config under `cooc_sample`)."""
    if store.activation_count(sae_id) <= max_rows:
        coords = store.activation_coordinates(sae_id)
        store.record_cooccurrence_sample(sae_id, None)
    else:
        prefix = store.window_prefix(sae_id, max_rows)
        assert prefix.window_end is not None  # more rows than max_rows, so some window is left out
        coords = store.activation_coordinates(sae_id, window_end=prefix.window_end)
        sample = {
            "window_end": prefix.window_end,
            "n_windows": prefix.n_windows,
            "n_rows": coords.num_rows,
            "total_windows": prefix.total_windows,
            "total_rows": prefix.total_rows,
            "max_rows": max_rows,
        }
        store.record_cooccurrence_sample(sae_id, sample)
        log.warning(
            "co-occurrence neighbours of %s estimated on its first %d of %d windows (ids < %d): %d of %d rows "
            "(IndexConfig.cooc_max_rows = %d)",
            sae_id, prefix.n_windows, prefix.total_windows, prefix.window_end, coords.num_rows, prefix.total_rows,
            max_rows,
        )  # fmt: skip
    keys = coords.column("window_id").to_numpy() * context_size + coords.column("position").to_numpy()
    return cooccurrence_neighbours(coords.column("feature").to_numpy(), keys, d_sae, k)


def compute_feature_stats(
    store: Store, sae_id: str, sae: SAE[Any], model: HookedTransformer, config: IndexConfig | None = None
) -> None:
    """Activation statistics (SQL), logit-lens tokens, decoder-cosine and co-occurrence neighbours of every feature.

    The co-occurrence neighbours hold their rows in memory, so they read at most `config.cooc_max_rows` of them:
    an SAE with no more rows than that gets them from every row (exactly as without a budget); a larger one gets
    them estimated on the prefix of its windows (smallest ids first) whose rows fit (`Store.window_prefix`), and
    only those rows are read. Which windows and rows were used is recorded in the index run's config under
    `cooc_sample` (window_end, n_windows, n_rows, total_windows, total_rows; absent when every row was used) and
    logged as a warning.
    """
    store.compute_activation_stats(sae_id)
    compute_feature_neighbours(store, sae_id, sae, model, config)


def compute_feature_neighbours(
    store: Store, sae_id: str, sae: SAE[Any], model: HookedTransformer, config: IndexConfig | None = None
) -> None:
    """The `neighbours` step of `compute_feature_stats`: logit-lens tokens, decoder-cosine and co-occurrence
    neighbours of every feature, written (with the step's completion record) in one transaction."""
    cfg = config or IndexConfig()
    progress = store.index_progress(sae_id)
    assert progress is not None
    W_dec_FD = sae.W_dec.detach().float().cpu().numpy()
    W_U_DV = model.W_U.detach().float().cpu().numpy()
    strings_V = vocab_strings(model.tokenizer)
    lens = logit_lens(W_dec_FD, W_U_DV, cfg.n_logit_tokens)
    dec_ids, dec_cos = decoder_neighbours(W_dec_FD, cfg.n_neighbours)
    cooc_ids, cooc_vals = budgeted_cooccurrence(
        store, sae_id, sae.cfg.d_sae, progress.context_size, cfg.n_neighbours, cfg.cooc_max_rows
    )
    f32 = pa.list_(pa.float32())
    table = pa.table(
        {
            "feature": pa.array(np.arange(sae.cfg.d_sae, dtype=np.int32)),
            "logit_top_tokens": pa.array(strings_V[lens["top_ids"]].tolist(), pa.list_(pa.string())),
            "logit_top_values": pa.array(lens["top_values"].tolist(), f32),
            "logit_bottom_tokens": pa.array(strings_V[lens["bottom_ids"]].tolist(), pa.list_(pa.string())),
            "logit_bottom_values": pa.array(lens["bottom_values"].tolist(), f32),
            "decoder_neighbours": pa.array(dec_ids.tolist(), pa.list_(pa.int32())),
            "decoder_cosines": pa.array(dec_cos.tolist(), f32),
            "cooc_neighbours": pa.array(cooc_ids, pa.list_(pa.int32())),
            "cooc_jaccard": pa.array(cooc_vals, f32),
        }
    )
    fail_point("index-neighbours")  # computed, not written: a kill here leaves the step to the rerun
    store.put_feature_neighbours(
        sae_id, table, {"n_logit_tokens": cfg.n_logit_tokens, "n_neighbours": cfg.n_neighbours}
    )
