"""The index loop: model forward (stop_at_layer) + SAE encode → sparse activations in the store, then the feature
statistics (`sae.feature_stats.compute_feature_stats`).

    workbench index --store runs/store.duckdb --sae runs/topk-8x --tokens 1000000

Resumable and idempotent: every committed transaction stores windows, activation rows and the progress marker
together, so a killed run resumes at the first uncommitted window, and indexing the same SAE again adds nothing.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

import numpy as np
import pyarrow as pa
import torch
from sae_lens import SAE
from tqdm.auto import tqdm
from transformer_lens import HookedTransformer

from sae_workbench.corpus import CorpusError, MaskPolicy, WindowBatch, default_bos_id, iter_windows
from sae_workbench.errors import WorkbenchError
from sae_workbench.faults import fail_point
from sae_workbench.models import check_context_size, forward_to_hooks, validate_hooks
from sae_workbench.progress import bars_enabled
from sae_workbench.sae.feature_stats import compute_feature_neighbours
from sae_workbench.sae.index_request import IndexArgumentError, IndexConfig, IndexRequest, IndexResult
from sae_workbench.sae.vocab import vocab_strings
from sae_workbench.store import IndexProgress, Store

log = logging.getLogger(__name__)


class SAEHookMismatchError(WorkbenchError):
    """The SAE was trained on a different hook than the one it is being indexed on."""


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


def start_indexing(store: Store, request: IndexRequest) -> tuple[str, IndexProgress, dict[str, Any]]:
    """Check the SAE against the model, register it and begin (or resume) its index: (sae_id, progress, run config)."""
    sae_id, run_config = index_identity(request)
    return sae_id, register_index(store, request, sae_id, run_config), run_config


def register_index(
    store: Store, request: IndexRequest, sae_id: str, run_config: dict[str, Any]
) -> IndexProgress:
    """Register the SAE and begin (or resume: IndexConfigError for other settings) its index run."""
    sae, sae_path = request.sae, request.sae_path
    name = request.model_name or request.model.cfg.model_name
    sae_cfg = {**sae.cfg.to_dict(), **({"path": sae_path} if sae_path else {})}
    store.register_sae(sae_id, name, request.hook, sae.cfg.d_in, sae.cfg.d_sae, sae_cfg, request.sae_metrics)
    cfg = request.config
    return store.start_index(sae_id, request.corpus.name, cfg.context_size, cfg.top_k, run_config)


def index_identity(request: IndexRequest) -> tuple[str, dict[str, Any]]:
    """Check the SAE against the model and the request's arguments; its id and run config (nothing written)."""
    from sae_workbench.sae.io import sae_id_of

    model, sae, hook, corpus, cfg = request.model, request.sae, request.hook, request.corpus, request.config
    sae_path, mask_policy = request.sae_path, request.mask_policy
    name = request.model_name or model.cfg.model_name
    check_sae_hook(sae, model, hook)
    check_context_size(model, cfg.context_size)
    if request.n_tokens < cfg.context_size:
        raise IndexArgumentError(
            f"n_tokens {request.n_tokens} is less than one window of {cfg.context_size} tokens; nothing to index."
        )
    sae_id = sae_id_of(sae, name, hook, sae_path)
    run_config = {
        "model": name,
        "hook": hook,
        "corpus_fingerprint": corpus.fingerprint,
        "bos_id": default_bos_id(model.tokenizer),
        "mask_policy": (mask_policy or MaskPolicy()).to_dict(),
        **dataclasses.asdict(cfg),
    }
    return sae_id, run_config


def index_sae(store: Store, request: IndexRequest) -> IndexResult:
    """Index the request's SAE over the first `n_tokens` tokens of its corpus into `store` (resuming any earlier
    run), then finalize the rows and compute the feature statistics."""
    model, sae, hook, corpus, cfg = request.model, request.sae, request.hook, request.corpus, request.config
    mask_policy = request.mask_policy
    sae_id, run_config = index_identity(request)
    # A new SAE is registered only with its first committed batch: a corpus that yields no window (whitespace only)
    # or a batch that fails (non-finite values) leaves the store as it was.
    started = store.index_progress(sae_id) is not None
    progress = register_index(store, request, sae_id, run_config) if started else None
    next_window = 0 if progress is None else progress.next_window
    ahead = [r for r in store.index_ranges(sae_id) if r.start > next_window]
    if (
        ahead
    ):  # a Ray run committed ranges past a gap; indexing on from next_window here would store them twice
        raise WorkbenchError(
            f"SAE {sae_id} has window ranges committed by a Ray run past window {next_window} "
            f"(first at {ahead[0].start}); finish it with `workbench index --backend ray`."
        )
    tokenizer = model.tokenizer
    bos_id = int(run_config["bos_id"])
    target_windows = request.n_tokens // cfg.context_size
    t_start = time.perf_counter()
    new_windows = new_rows = 0
    if next_window < target_windows:
        strings_V = vocab_strings(tokenizer)
        bar = tqdm(
            total=target_windows * cfg.context_size,
            initial=next_window * cfg.context_size,
            unit="tok",
            unit_scale=True,
            desc=f"index {sae_id[:8]}",
            disable=not bars_enabled(),  # off under --no-progress (sae_workbench.progress)
        )
        pending: list[WindowBatch] = []
        pending_acts: list[pa.Table] = []

        def commit() -> None:
            nonlocal new_windows, new_rows, started
            acts = pa.concat_tables(pending_acts)
            if not started:
                register_index(store, request, sae_id, run_config)
                started = True
            next_window = int(pending[-1].window_ids[-1]) + 1
            counted = int(sum(b.mask_BT.sum() for b in pending))
            store.add_index_batch(
                sae_id, corpus.name, window_rows(pending, strings_V), acts, next_window, counted
            )
            fail_point("index-batch-committed")
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
            start_window=next_window,
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
    seconds = time.perf_counter() - t_start
    if not started:
        raise CorpusError(
            f"corpus {corpus.name!r} yields no window of {cfg.context_size} tokens; nothing was stored."
        )
    finish_index(store, sae_id, sae, model, cfg)
    result = IndexResult(sae_id, new_windows, new_windows * cfg.context_size, new_rows, seconds)
    log.info(
        "indexed %s: %d windows, %d rows, %.0f tok/s", sae_id, new_windows, new_rows, result.tokens_per_s
    )
    return result


def finish_index(
    store: Store, sae_id: str, sae: SAE[Any], model: HookedTransformer, cfg: IndexConfig
) -> None:
    """Sort the staged rows into the query table (unless finalized), then run each post-index step (statistics,
    neighbours) that has no completion record in `index_steps`: a kill at any point leaves the rerun exactly what
    is missing (new rows clear the records, so an extended index recomputes them)."""
    progress = store.index_progress(sae_id)
    assert progress is not None
    if not progress.finalized:
        store.finalize_index(sae_id)
        fail_point("index-finalized")
    if not cfg.compute_stats:
        return
    done = store.index_steps(sae_id)
    if "statistics" not in done:
        store.compute_activation_stats(sae_id)  # writes its completion record in the same transaction
        fail_point("index-statistics")
    if "neighbours" not in done:
        compute_feature_neighbours(store, sae_id, sae, model, cfg)
