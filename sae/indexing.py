"""Index an SAE over a corpus: model forward (stop_at_layer) + SAE encode → sparse activations in the store,
then per-feature statistics computed in SQL and vectorised numpy (no per-feature Python loops over the data).

    workbench index --store runs/store.duckdb --sae runs/topk-8x --tokens 1000000

Resumable and idempotent: every committed transaction stores windows, activation rows and the progress marker
together, so a killed run resumes at the first uncommitted window, and indexing the same SAE again adds nothing.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import scipy.sparse as sp
import torch
from sae_lens import SAE
from tqdm.auto import tqdm
from transformer_lens import HookedTransformer

from sae_workbench import defaults
from sae_workbench.corpus import Corpus, MaskPolicy, WindowBatch, default_bos_id, iter_windows
from sae_workbench.errors import WorkbenchError
from sae_workbench.models import check_context_size, forward_to_hooks, validate_hooks
from sae_workbench.store import IndexProgress, Store

log = logging.getLogger(__name__)

# Vocabulary display strings are computed once per tokenizer (id → decoded single token). Keyed by the tokenizer
# object itself, weakly: an entry goes when its tokenizer does, so a new tokenizer never reuses a dead one's id().
_VOCAB_STRINGS: weakref.WeakKeyDictionary[Any, np.ndarray] = weakref.WeakKeyDictionary()


class SAEHookMismatchError(WorkbenchError):
    """The SAE was trained on a different hook than the one it is being indexed on."""


class CooccurrenceBudgetError(WorkbenchError, ValueError):
    """IndexConfig.cooc_max_rows is not a positive number of rows."""


@dataclass(frozen=True)
class IndexConfig:
    """Settings of one indexing run (the first three are fixed for an SAE once indexing starts)."""

    context_size: int = defaults.CONTEXT_SIZE
    """Tokens per window, BOS included."""
    top_k: int | None = None
    """Keep only the k largest activations per token (None: every non-zero)."""
    batch_size: int = defaults.FORWARD_BATCH_WINDOWS
    """Windows per forward pass."""
    commit_tokens: int = 65_536
    """Tokens per write transaction (a killed run loses at most this much work)."""
    n_logit_tokens: int = 10
    """Logit-lens tokens kept per feature, top and bottom."""
    n_neighbours: int = 10
    """Decoder-cosine and co-occurrence neighbours kept per feature."""
    compute_stats: bool = True
    """Compute per-feature statistics after indexing."""
    cooc_max_rows: int = 20_000_000
    """Row budget of the co-occurrence neighbours, which hold their rows in memory: an SAE with more activation rows
    gets neighbours estimated on its first windows (smallest ids) whose rows fit. Peak RSS of the step, measured here
    on synthetic rows at 131,072 features and L0 64 (4M and 8M rows): ~0.4 GiB + 65-76 MiB per 1M rows, so ~2 GiB
    at the default; time 10-30 s of one core per 1M rows."""

    def __post_init__(self) -> None:
        if self.cooc_max_rows < 1:
            raise CooccurrenceBudgetError(
                f"cooc_max_rows must be >= 1 (rows read for the co-occurrence neighbours), got {self.cooc_max_rows}."
            )


@dataclass(frozen=True)
class IndexResult:
    """What an indexing call did."""

    sae_id: str
    """The SAE's content id."""
    new_windows: int
    """Windows indexed by this call (0 when everything was already done)."""
    new_tokens: int
    """Tokens of those windows (BOS included)."""
    new_rows: int
    """Activation rows written by this call."""
    seconds: float
    """Wall time of the indexing loop (stats excluded)."""

    @property
    def tokens_per_s(self) -> float:
        """Indexing throughput."""
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0


def check_sae_hook(sae: SAE[Any], model: HookedTransformer, hook: str) -> None:
    """Raise when the SAE records a different hook, or its width does not fit the hook (typed errors)."""
    from sae_workbench.sae.io import check_sae_matches

    validate_hooks(model, [hook])
    recorded = getattr(getattr(sae.cfg, "metadata", None), "hook_name", None)
    if recorded and recorded != hook:
        raise SAEHookMismatchError(
            f"SAE was trained on hook {recorded!r} but is being indexed on {hook!r}; pass --hook {recorded}."
        )
    check_sae_matches(sae, model, hook)


def vocab_strings(tokenizer: Any) -> np.ndarray:
    """Display string of every token id (object array), decoded once per tokenizer."""
    strings = _VOCAB_STRINGS.get(tokenizer)
    if strings is None or len(strings) != len(tokenizer):  # added tokens change the vocabulary
        strings = np.array(tokenizer.batch_decode([[i] for i in range(len(tokenizer))]), dtype=object)
        _VOCAB_STRINGS[tokenizer] = strings
    return strings


def sparse_activations(
    feats_NF: torch.Tensor,
    mask_N: torch.Tensor,
    window_ids_N: np.ndarray,
    positions_N: np.ndarray,
    top_k: int | None,
) -> pa.Table:
    """Turn dense feature activations of N tokens into columnar sparse rows (masked tokens dropped)."""
    feats_NF = feats_NF * mask_N[:, None].to(feats_NF.dtype)
    if top_k is not None:
        values_NK, features_NK = feats_NF.topk(min(top_k, feats_NF.shape[1]), dim=1)
        keep = values_NK > 0
        rows = torch.arange(feats_NF.shape[0])[:, None].expand_as(features_NK)[keep]
        features, values = features_NK[keep], values_NK[keep]
    else:
        rows, features = torch.nonzero(feats_NF, as_tuple=True)
        values = feats_NF[rows, features]
    rows_np = rows.numpy()
    return pa.table(
        {
            "feature": pa.array(features.numpy().astype(np.int32)),
            "window_id": pa.array(window_ids_N[rows_np]),
            "position": pa.array(positions_N[rows_np].astype(np.int16)),
            "value": pa.array(values.float().numpy()),
        }
    )


def encode_batch(
    model: HookedTransformer, sae: SAE[Any], hook: str, batch: WindowBatch, top_k: int | None
) -> pa.Table:
    """Forward one batch to `hook`, encode with the SAE, return sparse rows."""
    tokens_BT = torch.from_numpy(batch.tokens_BT.astype(np.int64))
    b, t = tokens_BT.shape
    acts_BTD = forward_to_hooks(model, tokens_BT, [hook])[hook]
    with torch.no_grad():
        feats_NF = sae.encode(acts_BTD.reshape(b * t, -1).to(sae.dtype))
    return sparse_activations(
        feats_NF,
        torch.from_numpy(batch.mask_BT.reshape(-1)),
        np.repeat(batch.window_ids, t),
        np.tile(np.arange(t), b),
        top_k,
    )


def window_rows(batches: list[WindowBatch], strings_V: np.ndarray) -> dict[str, Any]:
    """add_windows keyword arguments for a list of batches."""
    tokens = np.concatenate([b.tokens_BT for b in batches])
    return {
        "window_ids": np.concatenate([b.window_ids for b in batches]),
        "tokens_BT": tokens,
        "mask_BT": np.concatenate([b.mask_BT for b in batches]),
        "texts": [t for b in batches for t in b.texts],
        "token_strings": strings_V[tokens].tolist(),
        "sources": [s for b in batches for s in b.sources],
        "offsets": np.concatenate([b.offsets for b in batches]),
    }


def start_indexing(
    store: Store,
    model: HookedTransformer,
    sae: SAE[Any],
    hook: str,
    corpus: Corpus,
    cfg: IndexConfig,
    model_name: str | None,
    mask_policy: MaskPolicy | None,
    sae_path: str | None,
    sae_metrics: dict[str, Any] | None,
) -> tuple[str, IndexProgress, dict[str, Any]]:
    """Check the SAE against the model, register it and begin (or resume) its index: (sae_id, progress, run config)."""
    from sae_workbench.sae.io import sae_id_of

    name = model_name or model.cfg.model_name
    check_sae_hook(sae, model, hook)
    check_context_size(model, cfg.context_size)
    sae_id = sae_id_of(sae, name, hook, sae_path)
    sae_cfg = {**sae.cfg.to_dict(), **({"path": sae_path} if sae_path else {})}
    store.register_sae(sae_id, name, hook, sae.cfg.d_in, sae.cfg.d_sae, sae_cfg, sae_metrics)
    run_config = {
        "model": name,
        "hook": hook,
        "corpus_fingerprint": corpus.fingerprint,
        "bos_id": default_bos_id(model.tokenizer),
        "mask_policy": (mask_policy or MaskPolicy()).to_dict(),
        **dataclasses.asdict(cfg),
    }
    progress = store.start_index(sae_id, corpus.name, cfg.context_size, cfg.top_k, run_config)
    return sae_id, progress, run_config


def index_sae(
    store: Store,
    model: HookedTransformer,
    sae: SAE[Any],
    hook: str,
    corpus: Corpus,
    n_tokens: int,
    config: IndexConfig | None = None,
    *,
    model_name: str | None = None,
    mask_policy: MaskPolicy | None = None,
    sae_path: str | None = None,
    sae_metrics: dict[str, Any] | None = None,
) -> IndexResult:
    """Index `sae` over the first `n_tokens` tokens of `corpus` into `store` (resuming any earlier run).

    `sae_path` (where the SAE was loaded from) is recorded in its config so the app's playground can reload it; when
    it is a folder with a training record, the SAE's id is read back from it (`sae.io.sae_id_of`) instead of
    rehashing the weights. `sae_metrics` (e.g. the metrics.json `workbench train` wrote next to the SAE) are stored
    with the SAE.
    """
    cfg = config or IndexConfig()
    sae_id, progress, run_config = start_indexing(
        store, model, sae, hook, corpus, cfg, model_name, mask_policy, sae_path, sae_metrics
    )
    ahead = [r for r in store.index_ranges(sae_id) if r.start > progress.next_window]
    if (
        ahead
    ):  # a Ray run committed ranges past a gap; indexing on from next_window here would store them twice
        raise WorkbenchError(
            f"SAE {sae_id} has window ranges committed by a Ray run past window {progress.next_window} "
            f"(first at {ahead[0].start}); finish it with `workbench index --backend ray`."
        )
    tokenizer = model.tokenizer
    bos_id = int(run_config["bos_id"])
    target_windows = n_tokens // cfg.context_size
    started = time.perf_counter()
    new_windows = new_rows = 0
    if progress.next_window < target_windows:
        strings_V = vocab_strings(tokenizer)
        bar = tqdm(
            total=target_windows * cfg.context_size,
            initial=progress.next_window * cfg.context_size,
            unit="tok",
            unit_scale=True,
            desc=f"index {sae_id[:8]}",
        )
        pending: list[WindowBatch] = []
        pending_acts: list[pa.Table] = []

        def commit() -> None:
            nonlocal new_windows, new_rows
            acts = pa.concat_tables(pending_acts)
            next_window = int(pending[-1].window_ids[-1]) + 1
            counted = int(sum(b.mask_BT.sum() for b in pending))
            store.add_index_batch(
                sae_id, corpus.name, window_rows(pending, strings_V), acts, next_window, counted
            )
            new_windows += sum(len(b.window_ids) for b in pending)
            new_rows += acts.num_rows
            pending.clear()
            pending_acts.clear()

        for batch in iter_windows(
            corpus,
            tokenizer,
            cfg.context_size,
            bos_id=bos_id,
            n_tokens=target_windows * cfg.context_size,
            batch_size=cfg.batch_size,
            start_window=progress.next_window,
            mask_policy=mask_policy,
        ):
            pending.append(batch)
            pending_acts.append(encode_batch(model, sae, hook, batch, cfg.top_k))
            bar.update(batch.tokens_BT.size)
            if sum(b.tokens_BT.size for b in pending) >= cfg.commit_tokens:
                commit()
        if pending:
            commit()
        bar.close()
    seconds = time.perf_counter() - started
    finish_index(store, sae_id, sae, model, cfg)
    result = IndexResult(sae_id, new_windows, new_windows * cfg.context_size, new_rows, seconds)
    log.info(
        "indexed %s: %d windows, %d rows, %.0f tok/s", sae_id, new_windows, new_rows, result.tokens_per_s
    )
    return result


def finish_index(
    store: Store, sae_id: str, sae: SAE[Any], model: HookedTransformer, cfg: IndexConfig
) -> None:
    """Sort the staged rows into the query table and compute feature statistics, unless already finalized."""
    progress = store.index_progress(sae_id)
    assert progress is not None
    if not progress.finalized:
        store.finalize_index(sae_id)
        if cfg.compute_stats:
            compute_feature_stats(store, sae_id, sae, model, cfg)


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
    cfg = config or IndexConfig()
    progress = store.index_progress(sae_id)
    assert progress is not None
    store.compute_activation_stats(sae_id)
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
    store.put_feature_neighbours(sae_id, table)
