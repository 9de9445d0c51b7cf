"""`workbench graduate --repair`: rebuild a graduated store's damaged Parquet files from their source.

    actions = repair_partitions(store, device="cpu")            # what `workbench graduate --store S --repair` runs

Per partitioned corpus, then per partitioned SAE (activations are recomputed from the windows, so those come first):
  - a key graduated before file records existed gets its record (when its files' footers add up to the ledger);
  - files the ledger does not record (strays, which every read would count as well) are deleted;
  - a missing, resized or altered window chunk is rebuilt from the corpus: the same windows are cut again with the
    index run's recorded settings (context size, BOS id, mask policy), checked by the corpus fingerprint;
  - a missing, resized or altered activation bucket is rebuilt from the source: the SAE is loaded from the path its
    store record names (or `sae_path`) and must hash to the SAE's id (`compute_sae_id`), the model from the run's
    recorded name (or `model_name`); every indexed window is encoded again and the bucket's rows kept.
A rebuilt file replaces the damaged one only when it holds the row count the ledger recorded (store side:
`Store.replace_partition_file`); otherwise nothing is replaced and the error says to restore it from a backup.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from sae_workbench.corpus import MaskPolicy, WindowBatch, iter_windows, resolve_corpus
from sae_workbench.errors import WorkbenchError
from sae_workbench.store import Store
from sae_workbench.store.partitioned import BUCKET_SIZE, WINDOW_CHUNK, WINDOW_FILE_COLUMNS

log = logging.getLogger(__name__)

REPAIR_BATCH_WINDOWS = 16
"""Windows per forward pass while re-encoding (memory, not results: each window is encoded on its own rows)."""


class RepairSourceError(WorkbenchError):
    """The source a damaged file would be rebuilt from is not the one it was built from (another SAE, corpus)."""


def _bucket_of_file(rel: str) -> int:
    """The partition number in a file path relative to its key's folder (`fb=00003/part-x.parquet` -> 3)."""
    return int(rel.split("/", 1)[0].split("=", 1)[1])


def repair_partitions(
    store: Store,
    *,
    device: str = "cpu",
    sae_path: str | None = None,
    model_name: str | None = None,
    corpus_spec: str | None = None,
    step: Callable[[str], None] = log.info,
) -> list[str]:
    """Repair every partitioned corpus and SAE of `store` (see the module docstring); return what was done."""
    actions: list[str] = []
    for corpus in store.partitioned_corpora():
        actions += _repair_key(store, "windows", corpus, step, lambda rels, c=corpus: _rebuild_windows(store, c, rels, corpus_spec, step))  # fmt: skip
    for sae_id in store.partitioned_saes():
        actions += _repair_key(
            store,
            "activations",
            sae_id,
            step,
            lambda rels, s=sae_id: _rebuild_buckets(store, s, rels, device, sae_path, model_name, step),
        )
    return actions


def _repair_key(
    store: Store, kind: Any, key: str, step: Callable[[str], None], rebuild: Callable[[list[str]], list[str]]
) -> list[str]:
    """Record, drop strays, then rebuild the damaged files of one SAE or corpus."""
    actions: list[str] = []
    if store.record_missing_file_record(kind, key):
        actions.append(f"{kind} of {key}: recorded its files (graduated before file records)")
    for path in store.remove_stray_files(kind, key):
        actions.append(f"{kind} of {key}: removed stray file {path}")
    damaged = sorted({rel for rel, _ in store.damaged_files(kind, key, deep=True)})
    if damaged:
        step(f"{kind} of {key}: rebuilding {len(damaged)} file(s) from the source")
        actions += rebuild(damaged)
    return actions


def _index_run_of(store: Store, corpus: str) -> Any:
    """The index progress of some SAE indexed over `corpus` (its settings cut the windows)."""
    for sae_id in store.partitioned_saes():
        progress = store.index_progress(sae_id)
        if progress is not None and progress.corpus == corpus:
            return progress
    for record in store.list_saes():
        progress = store.index_progress(record.sae_id)
        if progress is not None and progress.corpus == corpus:
            return progress
    raise RepairSourceError(f"no index run of corpus {corpus!r} records how its windows were cut.")


def _rebuild_windows(
    store: Store, corpus_name: str, rels: list[str], corpus_spec: str | None, step: Callable[[str], None]
) -> list[str]:
    """Cut the damaged chunks' windows again from the corpus and replace their files."""
    from sae_workbench.models import load_model
    from sae_workbench.sae.vocab import vocab_strings

    progress = _index_run_of(store, corpus_name)
    config = progress.config
    corpus = resolve_corpus(corpus_spec or corpus_name)
    if corpus.fingerprint != config.get("corpus_fingerprint"):
        raise RepairSourceError(
            f"corpus {corpus_spec or corpus_name!r} is not the one indexed as {corpus_name!r} (fingerprint differs); "
            "pass the indexed corpus with --corpus, or restore the window files from a backup."
        )
    tokenizer = load_model(str(config["model"])).tokenizer
    strings_V = vocab_strings(tokenizer)
    recorded = store.partition_file_record("windows", corpus_name) or {}
    actions: list[str] = []
    for rel in rels:
        chunk = _bucket_of_file(rel)
        start = chunk * WINDOW_CHUNK
        end = min((chunk + 1) * WINDOW_CHUNK, progress.next_window)
        batches = list(
            iter_windows(
                corpus,
                tokenizer,
                progress.context_size,
                bos_id=int(config["bos_id"]),
                n_tokens=end * progress.context_size,
                start_window=start,
                mask_policy=MaskPolicy(**config.get("mask_policy", {})),
            )
        )
        rows = _window_table(batches, strings_V)
        n = store.replace_partition_file("windows", corpus_name, rel, rows)
        step(f"windows of {corpus_name}: rebuilt {rel} ({n} windows)")
        actions.append(f"windows of {corpus_name}: rebuilt {rel} ({n} of {recorded[rel][0]} rows)")
    return actions


def _window_table(batches: list[WindowBatch], strings_V: np.ndarray) -> Any:
    """The window file's columns (WINDOW_FILE_COLUMNS) of some batches."""
    tokens = np.concatenate([b.tokens_BT for b in batches]) if batches else np.zeros((0, 0), np.int32)
    columns: dict[str, Any] = {
        "window_id": pa.array(np.concatenate([b.window_ids for b in batches]).astype(np.int64)),
        "tokens": pa.array(tokens.astype(np.int32).tolist(), pa.list_(pa.int32())),
        "text": pa.array([t for b in batches for t in b.texts], pa.string()),
        "token_strings": pa.array(strings_V[tokens].tolist(), pa.list_(pa.string())),
        "source": pa.array([s for b in batches for s in b.sources], pa.string()),
        "offset": pa.array(np.concatenate([b.offsets for b in batches]).astype(np.int64)),
        "mask": pa.array(np.concatenate([b.mask_BT for b in batches]).tolist(), pa.list_(pa.bool_())),
    }
    return pa.table({c: columns[c] for c in WINDOW_FILE_COLUMNS})


def _rebuild_buckets(
    store: Store,
    sae_id: str,
    rels: list[str],
    device: str,
    sae_path: str | None,
    model_name: str | None,
    step: Callable[[str], None],
) -> list[str]:
    """Encode every indexed window again with the SAE and replace the damaged buckets' files with their rows."""
    from sae_workbench.models import load_model
    from sae_workbench.sae.index_loop import encode_batch
    from sae_workbench.sae.io import compute_sae_id, load_sae

    record = store.get_sae(sae_id)
    progress = store.index_progress(sae_id)
    assert progress is not None
    path = sae_path or record.cfg.get("path")
    if not path:
        raise RepairSourceError(f"SAE {sae_id} records no path to load it from; pass --sae.")
    sae = load_sae(str(path), device=device, hook=record.hook)
    if compute_sae_id(sae, record.model, record.hook) != sae_id:
        raise RepairSourceError(
            f"the SAE at {path} is not SAE {sae_id} (its weights hash to another id); pass the indexed SAE with "
            "--sae, or restore the bucket files from a backup."
        )
    model = load_model(model_name or str(progress.config.get("model") or record.model), device=device)
    wanted = {_bucket_of_file(rel): rel for rel in rels}
    parts: dict[int, list[Any]] = {fb: [] for fb in wanted}
    ids = store.indexed_window_ids(sae_id)
    step(f"activations of {sae_id}: re-encoding {len(ids)} windows for bucket(s) {sorted(wanted)}")
    for start in range(0, len(ids), REPAIR_BATCH_WINDOWS):
        windows = store.get_windows(
            progress.corpus, [int(i) for i in ids[start : start + REPAIR_BATCH_WINDOWS]]
        )
        batch = WindowBatch(
            window_ids=np.array([w.window_id for w in windows], np.int64),
            tokens_BT=np.stack([w.tokens for w in windows]).astype(np.int32),
            mask_BT=np.stack([w.mask for w in windows]).astype(bool),
        )
        rows = encode_batch(model, sae, record.hook, batch, progress.top_k)
        buckets_N = rows.column("feature").to_numpy() // BUCKET_SIZE
        for fb in parts:
            parts[fb].append(rows.filter(pa.array(buckets_N == fb)))
    actions: list[str] = []
    for fb, rel in sorted(wanted.items()):
        table = pa.concat_tables(parts[fb]) if parts[fb] else None
        if table is None:
            raise RepairSourceError(f"SAE {sae_id} has no indexed windows to rebuild bucket {fb} from.")
        n = store.replace_partition_file("activations", sae_id, rel, table)
        step(f"activations of {sae_id}: rebuilt {rel} ({n:,} rows)")
        actions.append(f"activations of {sae_id}: rebuilt {rel} ({n:,} rows)")
    return actions
