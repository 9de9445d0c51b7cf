"""`workbench index --backend ray`: the same index as `sae.index_loop.index_sae`, computed by Ray actors.

    workbench index --sae runs/topk-8x --tokens 100000000 --backend ray [--ray-address ray://head:10001]

Design (specs/scale.md 4.1 index-map, 4.3): `Indexer` actors each load the model and the SAE once (`num_gpus=1` on
cuda, else `num_cpus=1`; Ray restarts a dead one and retries its task: `max_restarts`, `max_task_retries`). The
driver cuts the pending windows into ranges [a, b) aligned to multiples of the range size and feeds them to the
actors. An actor writes a range's windows and sparse activation rows to two deterministic staging Parquet files
(`<staging>/activations/sae_id=<id>/range=<a>-<b>.parquet` and the same under `windows/`; temp name + rename, so a
retry simply overwrites) and returns their sha256 and counts. The driver is the only writer of store.duckdb: it
commits each range once (`Store.commit_index_range`: windows, activation rows, an `index_ranges` ledger row and the
progress marker in one transaction), then deletes the staging files. A killed worker loses its range (Ray reruns
it); a killed driver loses only uncommitted ranges: rerunning the command plans the pending ranges from the ledger
and never reads a staging file it did not just receive a checksum for. When every range is in, the rows are
finalized and the feature statistics computed exactly as the local backend does (`sae.index_loop.finish_index`).

Rows are identical to the local backend's: ranges are multiples of the forward batch, so every batch holds the same
windows as in a single-process run (tests/sae/test_ray_index.py checks `EXCEPT ALL` both ways).

Cluster use: the workers must see the corpus, the SAE folder (or get the SAE shipped through the object store) and
the staging folder (a shared filesystem); the model is loaded by name on each worker.

Partitioned stores (`partition_root`, or a store whose partitioned SAEs share one root): the committed range files
keep the rows (the ledger names them, under `<staging>/committed/`) and, once every range is in, one Ray task per
feature bucket (`reduce_bucket`) writes `<root>/activations/sae_id=<id>/fb=<fb>/part-<hash>.parquet` sorted by
(feature, value desc) with ranks (store/partitioned.py's `write_bucket`); the driver then commits the layout with the
SAE's `activation_partitions` row. The driver records each bucket in the `index_buckets` ledger as its task returns,
so a rerun after a crash reduces only the buckets without a row (same file names: a half-written one is overwritten).
Range files are sorted by feature and written in row groups of `RANGE_ROW_GROUP` rows, so a reduce task's
`feature` filter skips, by the row groups' min/max statistics, all but its bucket's rows of every range file.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from sae_lens import SAE
from transformer_lens import HookedTransformer

from sae_workbench.corpus import Corpus, MaskPolicy, WindowBatch, iter_windows
from sae_workbench.errors import WorkbenchError
from sae_workbench.faults import fail_point, worker_options
from sae_workbench.raycluster import RayConfig, ray_session
from sae_workbench.sae.index_loop import encode_batch, finish_index, start_indexing, window_rows
from sae_workbench.sae.index_request import IndexConfig, IndexRequest, IndexResult
from sae_workbench.sae.vocab import vocab_strings
from sae_workbench.store import Store
from sae_workbench.store.partitioned import (
    BUCKET_SIZE,
    activations_dir,
    config_hash8,
    filesystem,
    fs_path,
    join,
    normalise_root,
    part_name,
    sae_dir,
    sae_segment,
    staging_dir,
)
from sae_workbench.store.ranges import IndexRange, StagedRange, file_sha256
from sae_workbench.store.sql import list_column

log = logging.getLogger(__name__)

DEFAULT_RANGE_TOKENS = 10_000_000
"""Tokens per range: ~5 min of one GPU's work at 31-47k tok/s (specs/scale.md 4.1), so a lost range costs little."""

RANGE_ROW_GROUP = 65_536
"""Rows per row group of a range's activation file (sorted by feature): a 10M-token range at k = 64 has ~10^4 groups,
so one bucket's reduce reads about 1/number-of-buckets of each file."""

_WINDOW_SCHEMA = pa.schema(
    [
        ("corpus", pa.string()),
        ("window_id", pa.int64()),
        ("tokens", pa.list_(pa.int32())),
        ("text", pa.string()),
        ("token_strings", pa.list_(pa.string())),
        ("source", pa.string()),
        ("offset", pa.int64()),
        ("mask", pa.list_(pa.bool_())),
    ]
)
_ACTIVATION_SCHEMA = pa.schema(
    [("feature", pa.int32()), ("window_id", pa.int64()), ("position", pa.int16()), ("value", pa.float32())]
)


@dataclass(frozen=True)
class RayIndexConfig:
    """How `index_sae_ray` spreads the work (the index itself is set by IndexConfig)."""

    workers: int | None = None
    """Indexer actors (None: one per GPU of the cluster on cuda, else one per CPU)."""
    range_tokens: int = DEFAULT_RANGE_TOKENS
    """Tokens per window range (rounded to whole forward batches)."""
    device: str = "cpu"
    """Device of the actors' model and SAE (cuda: each actor takes one GPU)."""
    threads: int = 1
    """Torch threads (and Ray CPUs) per CPU actor."""
    in_flight: int = 2
    """Ranges queued per actor (the next one is ready when one finishes)."""
    max_restarts: int = 3
    """Times Ray restarts a dead actor."""
    max_task_retries: int = 3
    """Times Ray reruns a range whose actor died."""
    staging_root: str | None = None
    """Folder for the workers' staging files (None: `<store folder>/staging`); must be shared on a cluster."""
    partition_root: str | None = None
    """Write the activations as feature-partitioned Parquet under this root (local or s3://) with one reduce task
    per bucket, instead of into the store file (None: the root of the store's partitioned SAEs, if they share one)."""


STATS_ONLY_SETTINGS = frozenset({"n_logit_tokens", "n_neighbours", "compute_stats", "cooc_max_rows"})
"""IndexConfig fields that change only the statistics computed after the rows, not the rows or their files."""


def range_windows(config: IndexConfig, ray_config: RayIndexConfig) -> int:
    """Windows per range: `range_tokens` worth, a whole number (≥ 1) of forward batches."""
    batches = max(1, ray_config.range_tokens // (config.context_size * config.batch_size))
    return batches * config.batch_size


def plan_ranges(
    target_windows: int, size: int, next_window: int, committed: list[IndexRange]
) -> list[tuple[int, int]]:
    """The pending ranges: [0, target) cut at multiples of `size`, minus [0, next_window) and committed ranges."""
    done = sorted([(0, next_window)] + [(r.start, r.end) for r in committed])
    pending: list[tuple[int, int]] = []
    for a in range(0, target_windows, size):
        pieces = [(a, min(a + size, target_windows))]
        for s, e in done:
            pieces = [
                piece
                for lo, hi in pieces
                for piece in ((lo, min(hi, s)), (max(lo, e), hi))
                if piece[0] < piece[1]
            ]
        pending.extend(pieces)
    return pending


def staging_paths(root: str, sae_id: str, start: int, end: int) -> tuple[str, str]:
    """(windows file, activations file) a worker writes for range [start, end) of `sae_id`."""
    name = f"range={start}-{end}.parquet"
    segment = sae_segment(sae_id)
    return (
        os.path.join(root, "windows", segment, name),
        os.path.join(root, "activations", segment, name),
    )


def _write_atomic(table: pa.Table, path: str, row_group_size: int | None = None) -> str:
    """Write a Parquet file under a temporary name, fsync, rename into place; return its sha256."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    pq.write_table(table, tmp, compression="zstd", row_group_size=row_group_size)
    with open(tmp, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    return file_sha256(path)


def windows_table(corpus: str, batches: list[WindowBatch], strings_V: np.ndarray) -> pa.Table:
    """The `windows` rows of some batches, with the store table's columns."""
    if not batches:
        return _WINDOW_SCHEMA.empty_table()
    rows = window_rows(batches, strings_V)
    n = len(rows["window_ids"])
    return pa.table(
        {
            "corpus": pa.array([corpus] * n, pa.string()),
            "window_id": pa.array(np.asarray(rows["window_ids"], dtype=np.int64)),
            "tokens": list_column(np.asarray(rows["tokens_BT"], dtype=np.int32), pa.int32()),
            "text": pa.array(rows["texts"], pa.string()),
            "token_strings": pa.array(rows["token_strings"], pa.list_(pa.string())),
            "source": pa.array(rows["sources"], pa.string()),
            "offset": pa.array(np.asarray(rows["offsets"], dtype=np.int64)),
            "mask": list_column(np.asarray(rows["mask_BT"], dtype=bool), pa.bool_()),
        },
        schema=_WINDOW_SCHEMA,
    )


class Indexer:
    """A Ray actor holding the model and the SAE: indexes window ranges into staging files (see the module doc)."""

    def __init__(
        self,
        model_name: str,
        model_dtype: str,
        sae_source: SAE[Any] | str,
        hook: str,
        corpus: Corpus,
        config: IndexConfig,
        bos_id: int,
        mask_policy: MaskPolicy | None,
        sae_id: str,
        staging_root: str,
        device: str,
        threads: int,
    ) -> None:
        from sae_workbench.models import load_model
        from sae_workbench.sae.io import load_sae

        torch.set_num_threads(threads)
        self.model: HookedTransformer = load_model(model_name, device=device, dtype=model_dtype)
        sae = sae_source if isinstance(sae_source, SAE) else load_sae(sae_source, device=device, hook=hook)
        self.sae: SAE[Any] = sae.to(device)
        self.hook, self.corpus, self.config = hook, corpus, config
        self.bos_id, self.mask_policy, self.sae_id = bos_id, mask_policy, sae_id
        self.staging_root = staging_root
        self.strings_V = vocab_strings(self.model.tokenizer)

    def index_range(self, start: int, end: int) -> StagedRange:
        """Index windows [start, end) into the two staging files; return their checksums and counts."""
        fail_point(f"index-range-{start}")
        cfg = self.config
        batches = list(
            iter_windows(
                self.corpus,
                self.model.tokenizer,
                cfg.context_size,
                bos_id=self.bos_id,
                n_tokens=end * cfg.context_size,
                batch_size=cfg.batch_size,
                start_window=start,
                mask_policy=self.mask_policy,
            )
        )
        parts = [encode_batch(self.model, self.sae, self.hook, b, cfg.top_k) for b in batches]
        acts = pa.concat_tables(parts).cast(_ACTIVATION_SCHEMA) if parts else _ACTIVATION_SCHEMA.empty_table()
        acts = acts.sort_by(
            [("feature", "ascending")]
        )  # row groups by feature: each reduce task reads its own
        windows_file, acts_file = staging_paths(self.staging_root, self.sae_id, start, end)
        windows_sha256 = _write_atomic(windows_table(self.corpus.name, batches, self.strings_V), windows_file)
        # Half-staged: the windows file is in place, the activations file not yet (the crash test's second point).
        fail_point(f"index-range-staged-{start}")
        activations_sha256 = _write_atomic(acts, acts_file, RANGE_ROW_GROUP)
        return StagedRange(
            start=start,
            end=end,
            windows_file=windows_file,
            windows_sha256=windows_sha256,
            activations_file=acts_file,
            activations_sha256=activations_sha256,
            n_tokens=int(sum(int(b.mask_BT.sum()) for b in batches)),
            n_rows=int(acts.num_rows),
            n_windows=int(sum(len(b.window_ids) for b in batches)),
        )


def reduce_bucket(files: list[str], features: tuple[int, int], staged_path: str, final_path: str) -> int:
    """Reduce task: one feature bucket's rows from every committed range file, sorted and ranked, to `final_path`
    (written at `staged_path`, then moved; nothing is placed for an empty bucket); return its row count."""
    from sae_workbench.store.partitioned import move_file, write_bucket_from_files

    n = write_bucket_from_files(files, features, staged_path)
    if n:
        move_file(staged_path, final_path)
    else:
        filesystem(staged_path).rm(fs_path(staged_path))
    return n


def _reduce(
    ray: Any, store: Store, sae_id: str, d_sae: int, root: str, config_hash: str, committed: str
) -> int:
    """Write `sae_id`'s buckets under `root` with one Ray task per bucket not yet in the `index_buckets` ledger,
    record each bucket as its task returns, then commit the layout (the `activation_partitions` row)."""
    files = store.index_range_files(sae_id)
    ranges = [(r.start, r.end) for r in store.index_ranges(sae_id)]
    part = config_hash8({"sae_id": sae_id, "config": config_hash, "ranges": ranges})
    n_buckets = -(-d_sae // BUCKET_SIZE)
    placed = store.index_buckets(sae_id, part)
    task = ray.remote(num_cpus=1, max_retries=3)(reduce_bucket)
    in_flight: dict[Any, tuple[int, str]] = {}
    for fb in range(n_buckets):
        if fb in placed:
            continue
        staged = join(staging_dir(root, f"index-{sae_id}"), f"fb={fb:05d}", part_name(part))
        final = join(activations_dir(root, sae_id, fb), part_name(part))
        in_flight[task.remote(files, (fb * BUCKET_SIZE, (fb + 1) * BUCKET_SIZE), staged, final)] = (fb, final)
    reduced = len(in_flight)
    while in_flight:
        [ref], _ = ray.wait(list(in_flight), num_returns=1)
        fb, final = in_flight.pop(ref)
        n = int(ray.get(ref))
        store.commit_index_bucket(sae_id, part, fb, n, final if n else None)
        fail_point("index-reduce-commit")
    n_rows = sum(store.index_buckets(sae_id, part).values())
    fs = filesystem(root)
    placed_dir = fs_path(sae_dir(root, sae_id))
    for path in fs.find(placed_dir) if fs.exists(placed_dir) else []:  # files of an earlier, different run
        if not str(path).endswith("/" + part_name(part)):
            fs.rm(path)
    staged_dir = fs_path(staging_dir(root, f"index-{sae_id}"))
    if fs.exists(staged_dir):
        fs.rm(staged_dir, recursive=True)
    store.record_partitioned(sae_id, root, n_rows, part)
    shutil.rmtree(committed, ignore_errors=True)
    log.info(
        "reduced %s: %d of %d buckets this run (%d placed before) under %s, %d rows",
        sae_id, reduced, n_buckets, n_buckets - reduced, root, n_rows,
    )  # fmt: skip
    return n_rows


def _partition_root(store: Store, ray_config: RayIndexConfig) -> str | None:
    """Where this index writes Parquet: the configured root, else the one root the store's partitioned SAEs share."""
    if ray_config.partition_root:
        return normalise_root(ray_config.partition_root)
    roots = set(store.partitioned_saes().values())
    return roots.pop() if len(roots) == 1 else None


def _remove_staged(root: str, sae_id: str) -> None:
    """Delete whatever staging files of `sae_id` are left (uncommitted or already committed: never read again)."""
    for kind in ("windows", "activations"):
        shutil.rmtree(os.path.join(root, kind, sae_segment(sae_id)), ignore_errors=True)


def _model_dtype(model: HookedTransformer) -> str:
    """The model's dtype as load_model names it ("float32", "bfloat16", ...)."""
    return str(model.cfg.dtype).removeprefix("torch.")


def _start_indexers(ray: Any, n: int, ray_config: RayIndexConfig, args: tuple[Any, ...]) -> list[Any]:
    """`n` Indexer actors with the placement and restart policy of `ray_config`."""
    gpu = ray_config.device.startswith("cuda")
    options: dict[str, Any] = {
        "num_gpus": 1 if gpu else 0,
        "num_cpus": 1 if gpu else ray_config.threads,
        "max_restarts": ray_config.max_restarts,
        "max_task_retries": ray_config.max_task_retries,
    }
    actor_class = ray.remote(Indexer).options(**options, **worker_options())
    return [actor_class.remote(*args) for _ in range(n)]


def index_sae_ray(
    store: Store,
    request: IndexRequest,
    ray_index: RayIndexConfig | None = None,
    *,
    ray_config: RayConfig | None = None,
    on_commit: Callable[[StagedRange, int], None] | None = None,
) -> IndexResult:
    """`index_sae` on Ray: the same rows, statistics and resume semantics, with the driver the store's sole writer.

    The request's model (loaded here for the checks and the statistics) is reloaded by name on every worker; the SAE
    is loaded there from `sae_path` when that is a folder, else shipped through Ray's object store. `on_commit` is
    called after each range this call commits, with the index of the actor that computed it (progress display,
    benchmarks).
    """
    model, sae, hook, corpus, cfg = request.model, request.sae, request.hook, request.corpus, request.config
    model_name, mask_policy, sae_path = request.model_name, request.mask_policy, request.sae_path
    rcfg = ray_index or RayIndexConfig()
    sae_id, progress, run_config = start_indexing(store, request)
    # The rows' identity: settings that only shape the statistics step (logit lens, neighbours, the co-occurrence
    # budget) would otherwise rename every staging and bucket file when changed.
    config_hash = config_hash8({k: v for k, v in run_config.items() if k not in STATS_ONLY_SETTINGS})
    target_windows = request.n_tokens // cfg.context_size
    size = range_windows(cfg, rcfg)
    pending = plan_ranges(target_windows, size, progress.next_window, store.index_ranges(sae_id))
    staging_root = os.path.abspath(rcfg.staging_root or str(Path(store.path).parent / "staging"))
    partition_root = _partition_root(store, rcfg)
    committed_dir = os.path.join(staging_root, "committed", sae_segment(sae_id))
    if pending and store.activations_root(sae_id) is not None:
        raise WorkbenchError(
            f"SAE {sae_id}'s activations are already partitioned Parquet; index more tokens into a new store."
        )
    started = time.perf_counter()
    new_windows = new_rows = 0
    if pending:
        with ray_session(ray_config) as ray:
            if rcfg.workers is not None:
                n_workers = rcfg.workers
            else:
                resources = ray.cluster_resources()
                per_actor = 1 if rcfg.device.startswith("cuda") else rcfg.threads
                n_workers = (
                    int(resources.get("GPU" if rcfg.device.startswith("cuda") else "CPU", 1)) // per_actor
                )
            n_workers = max(1, min(n_workers, len(pending)))
            sae_dir = Path(sae_path).expanduser() if sae_path else None
            sae_source: SAE[Any] | str = str(sae_dir) if sae_dir is not None and sae_dir.is_dir() else sae
            args = (
                model_name or model.cfg.model_name,
                _model_dtype(model),
                sae_source,
                hook,
                corpus,
                cfg,
                int(run_config["bos_id"]),
                mask_policy,
                sae_id,
                staging_root,
                rcfg.device,
                rcfg.threads,
            )
            actors = _start_indexers(ray, n_workers, rcfg, args)
            queue = deque(pending)
            in_flight: dict[Any, int] = {}

            def submit(actor: int) -> None:
                start, end = queue.popleft()
                in_flight[actors[actor].index_range.remote(start, end)] = actor

            try:
                for _ in range(rcfg.in_flight):
                    for actor in range(n_workers):
                        if queue:
                            submit(actor)
                while in_flight:
                    [ref], _ = ray.wait(list(in_flight), num_returns=1)
                    actor = in_flight.pop(ref)
                    staged: StagedRange = ray.get(ref)
                    if partition_root is not None:  # rows stay in their file until the reduce step
                        kept = os.path.join(committed_dir, os.path.basename(staged.activations_file))
                        os.makedirs(committed_dir, exist_ok=True)
                        shutil.move(staged.activations_file, kept)
                        staged = dataclasses.replace(staged, activations_file=kept)
                    if store.commit_index_range(
                        sae_id, corpus.name, staged, config_hash, rows_in_table=partition_root is None
                    ):
                        new_windows += staged.n_windows
                        new_rows += staged.n_rows
                        log.info("committed range %d-%d: %d rows", staged.start, staged.end, staged.n_rows)
                        if on_commit is not None:
                            on_commit(staged, actor)
                    Path(staged.windows_file).unlink(missing_ok=True)
                    if partition_root is None:  # else the committed range file feeds the reduce step
                        Path(staged.activations_file).unlink(missing_ok=True)
                    if queue:
                        submit(actor)
            finally:
                for handle in actors:
                    ray.kill(handle)
    _remove_staged(staging_root, sae_id)
    progress = store.index_progress(sae_id)
    assert progress is not None
    done = not plan_ranges(target_windows, size, progress.next_window, store.index_ranges(sae_id))
    if done and partition_root is not None and store.activations_root(sae_id) is None:
        with ray_session(ray_config) as ray:
            _reduce(ray, store, sae_id, sae.cfg.d_sae, partition_root, config_hash, committed_dir)
    seconds = time.perf_counter() - started
    if done:
        finish_index(store, sae_id, sae, model, cfg)
    result = IndexResult(sae_id, new_windows, new_windows * cfg.context_size, new_rows, seconds)
    log.info(
        "indexed %s on Ray: %d windows, %d rows, %.0f tok/s",
        sae_id,
        new_windows,
        new_rows,
        result.tokens_per_s,
    )
    return result
