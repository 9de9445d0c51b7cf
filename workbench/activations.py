"""Cache a model's activations at one or more hooks to sharded safetensors files, resumably; read them back.

    workbench cache --model smollm2-135m --hook blocks.3.hook_resid_post --tokens 200000

    cache = ActivationCache("runs/cache/…")
    for acts_ND in cache.iter_batches("blocks.3.hook_resid_post", batch_size=4096, shuffle_seed=0): ...

A cache folder holds
    manifest.json             identity (model, hooks, corpus, window size, BOS id, dtype, mask policy) + shard list
    shard-00000.safetensors   acts.<hook> (W, T, d) · tokens (W, T) int32 · mask (W, T) bool · window_ids (W,) int64

A shard counts only when the manifest lists it with a matching size and sha256. Each shard is written to a temp
name, fsynced and renamed before the manifest (itself replaced atomically) lists it, so a process killed at any
point leaves complete listed shards plus, at most, an unlisted file that the next run deletes. Rerunning the same
command resumes after the last listed shard (windows are deterministic, `iter_windows(start_window=…)`); a larger
token count extends the cache. Shards are written by a background thread so the forward pass never waits on disk.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import queue
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from tqdm.auto import tqdm
from transformer_lens import HookedTransformer

import sae_workbench
from sae_workbench import defaults, paths
from sae_workbench.corpus import Corpus, MaskPolicy, default_bos_id, iter_windows
from sae_workbench.errors import CacheCorruptError, CacheMismatchError, WorkbenchError
from sae_workbench.models import check_context_size, forward_to_hooks, validate_hooks

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
FORMAT_VERSION = 1
DTYPES = {"float16": torch.float16, "float32": torch.float32}
# Identity fields: a cache folder written with different values cannot be extended or resumed.
IDENTITY_FIELDS = (
    "model",
    "model_fingerprint",
    "hooks",
    "corpus",
    "corpus_fingerprint",
    "context_size",
    "bos_id",
    "dtype",
    "mask_policy",
)


# Hooks whose activations are (batch, head, query, key) maps rather than one vector per token position.
PER_HEAD_PAIR_HOOKS = ("hook_pattern", "hook_attn_scores")


class CacheWriteError(WorkbenchError):
    """Writing a shard failed (disk full, permissions); earlier shards are intact."""


class CacheNotFoundError(WorkbenchError):
    """The folder holds no activation cache (no manifest.json)."""


class CacheBusyError(WorkbenchError):
    """Another process is writing this cache folder."""


class NonFiniteActivationError(WorkbenchError):
    """A shard contains NaN or infinite activations."""


@dataclass(frozen=True)
class ShardInfo:
    """One complete shard as listed in the manifest."""

    file: str
    """File name inside the cache folder."""
    first_window: int
    """Window id of the shard's first window (windows are contiguous)."""
    n_windows: int
    """Number of windows in the shard."""
    n_tokens: int
    """Token positions in the shard (n_windows × context_size)."""
    n_masked: int
    """Positions whose mask is True (used for training and statistics)."""
    size: int
    """File size in bytes."""
    sha256: str
    """Hex sha256 of the file."""


@dataclass(frozen=True)
class CacheManifest:
    """What a cache folder holds and how it was made."""

    model: str
    """Model name as passed to `load_model`."""
    model_fingerprint: str
    """Hash of the model's config and a sample of every parameter (tells random seeds and dtypes apart)."""
    hooks: tuple[str, ...]
    """Hook names cached, in order."""
    hook_dims: dict[str, int]
    """Width of each hook's activation vector (trailing dimensions flattened)."""
    d_model: int
    """The model's residual width."""
    corpus: str
    """Corpus spec/name."""
    corpus_fingerprint: str
    """Fingerprint of the corpus contents (files' names, sizes, mtimes; or the dataset spec)."""
    context_size: int
    """Window size in tokens, BOS included."""
    bos_id: int
    """Token id at position 0 of every window."""
    dtype: str
    """Storage dtype of activations: float16 or float32."""
    mask_policy: dict[str, Any]
    """`MaskPolicy` used for the mask (as a dict)."""
    shards: tuple[ShardInfo, ...] = ()
    """Complete shards, in window order."""
    created_at: str = ""
    """ISO time the cache folder was created."""
    updated_at: str = ""
    """ISO time of the last shard."""
    workbench_version: str = sae_workbench.__version__
    """Version of the workbench that wrote it."""
    format_version: int = FORMAT_VERSION
    """Layout version of the cache folder."""

    @property
    def n_tokens(self) -> int:
        """Token positions cached (all shards)."""
        return sum(s.n_tokens for s in self.shards)

    @property
    def n_windows(self) -> int:
        """Windows cached (all shards)."""
        return sum(s.n_windows for s in self.shards)

    def identity(self) -> dict[str, Any]:
        """The fields that must match for a run to resume or extend this cache."""
        d = self.to_dict()
        return {k: d[k] for k in IDENTITY_FIELDS}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (includes the derived token count)."""
        d = asdict(self)
        d["hooks"] = list(self.hooks)
        d["shards"] = [asdict(s) for s in self.shards]
        d["n_tokens"] = self.n_tokens
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CacheManifest:
        """Inverse of `to_dict`."""
        d = {k: v for k, v in d.items() if k != "n_tokens"}
        d["hooks"] = tuple(d["hooks"])
        d["shards"] = tuple(ShardInfo(**s) for s in d.get("shards", []))
        return cls(**d)


@dataclass(frozen=True)
class Shard:
    """The contents of one shard."""

    index: int
    """Position of the shard in the manifest."""
    acts: dict[str, torch.Tensor]
    """hook → (W, T, d) activations in the storage dtype."""
    tokens_WT: torch.Tensor
    """(W, T) int32 token ids."""
    mask_WT: torch.Tensor
    """(W, T) bool — True where the position counts for training and statistics."""
    window_ids_W: torch.Tensor
    """(W,) int64 window ids."""


@dataclass(frozen=True)
class CacheRunStats:
    """What one `cache_activations` call did."""

    folder: Path
    """The cache folder."""
    manifest: CacheManifest
    """The manifest after the run."""
    new_tokens: int
    """Token positions written by this call (0 when the cache was already complete)."""
    seconds: float
    """Wall time of the forward + write loop."""

    @property
    def tokens_per_s(self) -> float:
        """Throughput of this call."""
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass
class _Pending:
    """Windows computed but not yet handed to the writer."""

    acts: dict[str, list[torch.Tensor]] = field(default_factory=dict)
    tokens: list[torch.Tensor] = field(default_factory=list)
    mask: list[torch.Tensor] = field(default_factory=list)
    window_ids: list[torch.Tensor] = field(default_factory=list)
    n_windows: int = 0


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def cache_model_fingerprint(model: HookedTransformer) -> str:
    """The activation cache's key for a model (its manifest's `model_fingerprint`): a hash of the shape config and
    dtype plus the first values of every parameter (cheap; tells seeds and dtypes apart). Not the SAE-facing
    `sae_workbench.model_identity.model_fingerprint`, which hashes embedding rows only and ignores the dtype."""
    h = hashlib.sha256()
    cfg = model.cfg
    h.update(
        json.dumps([cfg.n_layers, cfg.d_model, cfg.d_vocab, cfg.n_ctx, cfg.n_heads, str(cfg.dtype)]).encode()
    )
    for name, param in model.named_parameters():
        h.update(name.encode())
        h.update(param.detach().flatten()[:64].float().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def _forward(
    model: HookedTransformer, tokens_BT: torch.Tensor, hooks: list[str], dtype: torch.dtype
) -> dict[str, torch.Tensor]:
    """Run the model up to the last needed layer and return hook → (B, T, d) activations on CPU in `dtype`."""
    acts = forward_to_hooks(model, tokens_BT, hooks)
    return {h: a.reshape(*a.shape[:2], -1).to("cpu", dtype) for h, a in acts.items()}


def outlier_mask(acts: dict[str, torch.Tensor], mask_BT: torch.Tensor, factor: float) -> torch.Tensor:
    """(B, T) bool: positions whose norm at any hook exceeds `factor` × the median norm of its window's masked
    positions. The median is per window (not per batch) so the mask does not depend on batching or resuming."""
    out = torch.zeros_like(mask_BT)
    for acts_BTD in acts.values():
        norms_BT = acts_BTD.float().norm(dim=-1)
        masked = norms_BT.masked_fill(~mask_BT, float("nan"))
        median_B = masked.nanquantile(0.5, dim=1)  # NaN (never exceeded) for windows with no masked position
        out |= mask_BT & (norms_BT > factor * median_B[:, None])
    return out


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _write_file(path: Path, data: bytes) -> None:
    """Write bytes and fsync them (one function so tests can simulate a full disk)."""
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _read_manifest(folder: Path) -> CacheManifest | None:
    path = folder / MANIFEST
    if not path.exists():
        return None
    try:
        return CacheManifest.from_dict(json.loads(path.read_text()))
    except (json.JSONDecodeError, TypeError, KeyError) as err:
        raise CacheCorruptError(
            f"{path} is not a valid cache manifest ({err}); delete the folder {folder} and rerun."
        ) from err


def _write_manifest(folder: Path, manifest: CacheManifest) -> None:
    paths.atomic_write_bytes(folder / MANIFEST, json.dumps(manifest.to_dict(), indent=1).encode())


class _ShardWriter:
    """Background thread that serialises, checksums and writes shards, then lists them in the manifest."""

    def __init__(self, folder: Path, manifest: CacheManifest) -> None:
        self.folder = folder
        self.manifest = manifest
        self.error: BaseException | None = None
        self._queue: queue.Queue[tuple[dict[str, torch.Tensor], int, int, int, int] | None] = queue.Queue(2)
        self._thread = threading.Thread(target=self._run, name="shard-writer", daemon=True)
        self._thread.start()

    def submit(
        self, tensors: dict[str, torch.Tensor], first_window: int, n_windows: int, n_tokens: int
    ) -> None:
        """Queue a shard (blocks while two are pending); raises the writer's error if it failed."""
        self.raise_if_failed()
        n_masked = int(tensors["mask"].sum())
        self._queue.put((tensors, first_window, n_windows, n_tokens, n_masked))

    def raise_if_failed(self) -> None:
        """Re-raise an error from the writer thread in the caller's thread."""
        if self.error is not None:
            raise self.error

    def close(self) -> CacheManifest:
        """Write everything queued, stop the thread, and return the final manifest."""
        self._queue.put(None)
        self._thread.join()
        self.raise_if_failed()
        return self.manifest

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            if self.error is not None:
                continue  # drain after a failure; nothing more is written
            try:
                self._write(*item)
            except BaseException as err:
                self.error = err

    def _write(
        self,
        tensors: dict[str, torch.Tensor],
        first_window: int,
        n_windows: int,
        n_tokens: int,
        n_masked: int,
    ) -> None:
        index = len(self.manifest.shards)
        name = f"shard-{index:05d}.safetensors"
        final = self.folder / name
        tmp = self.folder / f".{name}.tmp-{os.getpid()}"
        data = st_save(tensors)
        try:
            _write_file(tmp, data)
            os.replace(tmp, final)
        except OSError as err:
            with contextlib.suppress(OSError):
                tmp.unlink()
            hint = (
                "free disk space or pass --out on a larger disk"
                if err.errno == errno.ENOSPC
                else "check --out"
            )
            raise CacheWriteError(
                f"could not write shard {index} to {final} ({err.strerror or err}); {hint}, then rerun the same "
                f"command to resume — the {index} shard(s) listed in {self.folder / MANIFEST} are intact."
            ) from err
        _fsync_dir(self.folder)
        info = ShardInfo(
            file=name,
            first_window=first_window,
            n_windows=n_windows,
            n_tokens=n_tokens,
            n_masked=n_masked,
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
        )
        self.manifest = _replace(self.manifest, shards=(*self.manifest.shards, info), updated_at=_now())
        _write_manifest(self.folder, self.manifest)


def _replace(manifest: CacheManifest, **changes: Any) -> CacheManifest:
    from dataclasses import replace

    return replace(manifest, **changes)


@contextlib.contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """Exclusive lock on a cache folder for the life of one writing process (released by the OS on kill)."""
    fh = open(folder / ".lock", "w")
    try:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            raise CacheBusyError(
                f"another process is writing the cache in {folder}; wait for it or pass a different --out."
            ) from err
        yield
    finally:
        fh.close()


def _clean_unlisted(folder: Path, manifest: CacheManifest) -> None:
    """Delete temp files and shard files the manifest does not list (left by a killed run)."""
    listed = {s.file for s in manifest.shards}
    for p in folder.iterdir():
        stray_tmp = p.name.startswith(".shard-") and ".tmp" in p.name
        stray_shard = p.name.startswith("shard-") and p.name not in listed
        if stray_tmp or stray_shard:
            log.info("removing %s left by an interrupted run", p)
            p.unlink()


def _check_identity(folder: Path, existing: CacheManifest, wanted: CacheManifest) -> None:
    old, new = existing.identity(), wanted.identity()
    diffs = [
        f"{k}: cache has {old[k]!r}, this run wants {new[k]!r}" for k in IDENTITY_FIELDS if old[k] != new[k]
    ]
    if diffs:
        raise CacheMismatchError(
            f"the cache in {folder} was written with different settings — "
            + "; ".join(diffs)
            + ". Pass a different --out (or delete that folder) to cache with these settings."
        )


def _check_disk_space(folder: Path, n_tokens: int, bytes_per_token: int) -> None:
    need = n_tokens * bytes_per_token
    free = shutil.disk_usage(folder).free
    if need > free:
        raise CacheWriteError(
            f"caching {n_tokens:,} more tokens needs ~{need / 2**30:.2f} GiB but {folder} has "
            f"{free / 2**30:.2f} GiB free; pass fewer --tokens, --dtype float16, or --out on a larger disk."
        )


def cache_activations(
    model: HookedTransformer,
    hooks: list[str],
    corpus: Corpus,
    out_dir: Path | str,
    n_tokens: int,
    context_size: int = defaults.CONTEXT_SIZE,
    batch_size: int = defaults.FORWARD_BATCH_WINDOWS,
    dtype: str = defaults.CACHE_DTYPE,
    shard_tokens: int = defaults.CACHE_SHARD_TOKENS,
    mask_policy: MaskPolicy | None = None,
    *,
    bos_id: int | None = None,
    progress: bool = True,
) -> CacheRunStats:
    """Cache `hooks` activations over the first `n_tokens` tokens (whole windows) of `corpus` into `out_dir`.

    Resumes after the last complete shard of an existing cache with the same identity; raises CacheMismatchError
    for a folder written with other settings. `shard_tokens` is rounded to a whole number of batches so a resumed
    run computes exactly the same batches as an uninterrupted one.
    """
    if dtype not in DTYPES:
        raise WorkbenchError(f"dtype {dtype!r} not supported; use one of {sorted(DTYPES)}.")
    hooks = validate_hooks(model, list(hooks))
    per_head = [h for h in hooks if h.endswith(PER_HEAD_PAIR_HOOKS)]
    if per_head:
        raise WorkbenchError(
            f"hooks {per_head} hold (head, query, key) attention maps, not one vector per token; cache a per-token "
            "hook instead (hook_resid_post, hook_mlp_out, hook_attn_out, attn.hook_z, …)."
        )
    check_context_size(model, context_size)
    if batch_size < 1 or n_tokens < context_size:
        raise WorkbenchError(
            f"need batch_size ≥ 1 and n_tokens ≥ context_size (got {batch_size}, {n_tokens} < {context_size})."
        )
    assert model.tokenizer is not None, "the model needs a tokenizer to cut windows"
    policy = mask_policy or MaskPolicy()
    bos = default_bos_id(model.tokenizer) if bos_id is None else bos_id
    store_dtype = DTYPES[dtype]
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    device = next(model.parameters()).device

    probe = _forward(model, torch.tensor([[bos, bos]], device=device), hooks, store_dtype)
    wanted = CacheManifest(
        model=model.cfg.model_name,
        model_fingerprint=cache_model_fingerprint(model),
        hooks=tuple(hooks),
        hook_dims={h: int(probe[h].shape[-1]) for h in hooks},
        d_model=model.cfg.d_model,
        corpus=corpus.name,
        corpus_fingerprint=corpus.fingerprint,
        context_size=context_size,
        bos_id=bos,
        dtype=dtype,
        mask_policy=policy.to_dict(),
        created_at=_now(),
    )
    windows_per_batch = batch_size
    windows_per_shard = max(1, round(shard_tokens / context_size / batch_size)) * batch_size
    target_windows = n_tokens // context_size

    with _folder_lock(folder):
        existing = _read_manifest(folder)
        if existing is not None:
            _check_identity(folder, existing, wanted)
            manifest = existing
        else:
            manifest = wanted
            _write_manifest(folder, manifest)
        _clean_unlisted(folder, manifest)
        start_window = manifest.n_windows
        if start_window >= target_windows:
            log.info(
                "cache in %s already holds %d tokens (asked for %d)", folder, manifest.n_tokens, n_tokens
            )
            return CacheRunStats(folder, manifest, 0, 0.0)
        remaining = (target_windows - start_window) * context_size
        bytes_per_token = sum(wanted.hook_dims.values()) * store_dtype.itemsize + 4 + 1
        _check_disk_space(folder, remaining, bytes_per_token)

        writer = _ShardWriter(folder, manifest)
        pending = _Pending(acts={h: [] for h in hooks})
        bar = tqdm(
            total=target_windows * context_size,
            initial=start_window * context_size,
            unit="tok",
            unit_scale=True,
            desc="caching",
            disable=not progress,
        )
        started = time.perf_counter()
        nonfinite = 0
        try:
            for batch in iter_windows(
                corpus,
                model.tokenizer,
                context_size,
                bos_id=bos,
                n_tokens=target_windows * context_size,
                batch_size=windows_per_batch,
                start_window=start_window,
                mask_policy=policy,
                decode=False,
            ):
                tokens_BT = torch.from_numpy(batch.tokens_BT)
                acts = _forward(model, tokens_BT.to(device=device, dtype=torch.long), hooks, store_dtype)
                mask_BT = torch.from_numpy(batch.mask_BT)
                if policy.outlier_norm_factor is not None:
                    mask_BT = mask_BT & ~outlier_mask(acts, mask_BT, policy.outlier_norm_factor)
                nonfinite += sum(int((~torch.isfinite(a)).sum()) for a in acts.values())
                for h in hooks:
                    pending.acts[h].append(acts[h])
                pending.tokens.append(tokens_BT)
                pending.mask.append(mask_BT)
                pending.window_ids.append(torch.from_numpy(batch.window_ids))
                pending.n_windows += len(batch.window_ids)
                while pending.n_windows >= windows_per_shard:
                    _flush(writer, pending, context_size, windows_per_shard)
                bar.update(len(batch.window_ids) * context_size)
            while pending.n_windows:
                _flush(writer, pending, context_size, windows_per_shard)
        finally:
            bar.close()
            manifest = writer.close()
        seconds = time.perf_counter() - started
    if manifest.n_windows < target_windows:
        log.warning(
            "corpus %r ran out after %d tokens (asked for %d); pass a larger corpus for more",
            corpus.name,
            manifest.n_tokens,
            target_windows * context_size,
        )
    if nonfinite:
        log.warning("%d non-finite activation values were cached in %s (fp16 overflow?)", nonfinite, folder)
    new_tokens = (manifest.n_windows - start_window) * context_size
    return CacheRunStats(folder, manifest, new_tokens, seconds)


def _flush(writer: _ShardWriter, pending: _Pending, context_size: int, windows_per_shard: int) -> None:
    """Hand the first `windows_per_shard` pending windows (or all, at the end) to the writer."""
    acts = {h: torch.cat(parts) for h, parts in pending.acts.items()}
    tokens, mask, ids = torch.cat(pending.tokens), torch.cat(pending.mask), torch.cat(pending.window_ids)
    n = min(windows_per_shard, len(ids))
    tensors = {f"acts.{h}": a[:n].contiguous() for h, a in acts.items()}
    tensors.update(
        tokens=tokens[:n].contiguous(), mask=mask[:n].contiguous(), window_ids=ids[:n].contiguous()
    )
    writer.submit(tensors, int(ids[0]), n, n * context_size)
    for h, a in acts.items():
        pending.acts[h] = [a[n:]] if n < len(ids) else []
    pending.tokens = [tokens[n:]] if n < len(ids) else []
    pending.mask = [mask[n:]] if n < len(ids) else []
    pending.window_ids = [ids[n:]] if n < len(ids) else []
    pending.n_windows = len(ids) - n


class ActivationCache:
    """Read-only access to a cache folder written by `cache_activations`."""

    def __init__(self, folder: Path | str) -> None:
        self.folder = Path(folder)
        manifest = _read_manifest(self.folder)
        if manifest is None:
            raise CacheNotFoundError(
                f"{self.folder} holds no activation cache ({MANIFEST} missing); create one with `workbench cache`."
            )
        self.manifest: CacheManifest = manifest

    @property
    def n_tokens(self) -> int:
        """Token positions cached."""
        return self.manifest.n_tokens

    @property
    def n_shards(self) -> int:
        """Number of complete shards."""
        return len(self.manifest.shards)

    def verify(self) -> None:
        """Check every shard's size and sha256 against the manifest; raise CacheCorruptError naming the first bad one."""
        for i in range(self.n_shards):
            self._read_verified(i)

    def _read_verified(self, index: int) -> bytes:
        info = self.manifest.shards[index]
        path = self.folder / info.file
        hint = f"delete {self.folder} (or restore the file) and rerun `workbench cache` to rebuild it."
        if not path.exists():
            raise CacheCorruptError(f"shard {index} ({path}) is missing; {hint}")
        data = path.read_bytes()
        if len(data) != info.size:
            raise CacheCorruptError(
                f"shard {index} ({path}) has {len(data)} bytes, the manifest says {info.size} (truncated?); {hint}"
            )
        if hashlib.sha256(data).hexdigest() != info.sha256:
            raise CacheCorruptError(f"shard {index} ({path}) fails its sha256 checksum; {hint}")
        return data

    def load_shard(self, index: int, *, check_finite: bool = True) -> Shard:
        """Load and verify shard `index`; raises NonFiniteActivationError if it holds NaN/inf (unless unchecked)."""
        if not 0 <= index < self.n_shards:
            raise IndexError(f"shard {index} out of range: the cache has {self.n_shards} shards.")
        try:
            tensors = st_load(self._read_verified(index))
        except CacheCorruptError:
            raise
        except Exception as err:  # safetensors raises its own error types on malformed bytes
            raise CacheCorruptError(f"shard {index} in {self.folder} cannot be parsed ({err}).") from err
        acts = {h: tensors[f"acts.{h}"] for h in self.manifest.hooks}
        if check_finite:
            for h, a in acts.items():
                bad = int((~torch.isfinite(a)).sum())
                if bad:
                    raise NonFiniteActivationError(
                        f"shard {index} ({self.manifest.shards[index].file}) has {bad} NaN/inf values at {h}; "
                        "recache with --dtype float32 (fp16 overflows above 65504) or read with skip_nonfinite=True."
                    )
        return Shard(index, acts, tensors["tokens"], tensors["mask"], tensors["window_ids"])

    def iter_batches(
        self,
        hook: str,
        batch_size: int,
        shuffle_seed: int | None = None,
        masked_only: bool = True,
        *,
        dtype: torch.dtype = torch.float32,
        skip_nonfinite: bool = False,
        drop_last: bool = False,
    ) -> Iterator[torch.Tensor]:
        """Yield (N, d) activation rows of `hook`, N = batch_size except maybe the last.

        With `shuffle_seed`, shards come in a seeded random order and rows are shuffled within each shard (rows
        carried over between shards stay in the next batch). `masked_only` drops positions whose mask is False
        (BOS, specials, outliers). `skip_nonfinite` drops rows with NaN/inf instead of raising.
        """
        if hook not in self.manifest.hooks:
            raise CacheMismatchError(
                f"hook {hook!r} is not in the cache {self.folder}; it holds {list(self.manifest.hooks)}."
            )
        gen = torch.Generator().manual_seed(shuffle_seed) if shuffle_seed is not None else None
        order = torch.randperm(self.n_shards, generator=gen).tolist() if gen else list(range(self.n_shards))
        carry = torch.empty(0, self.manifest.hook_dims[hook], dtype=dtype)
        for index in order:
            shard = self.load_shard(index, check_finite=not skip_nonfinite)
            rows_ND = shard.acts[hook].reshape(-1, self.manifest.hook_dims[hook])
            keep_N = shard.mask_WT.reshape(-1) if masked_only else torch.ones(len(rows_ND), dtype=torch.bool)
            if skip_nonfinite:
                finite_N = torch.isfinite(rows_ND).all(dim=1)
                if not finite_N.all():
                    log.warning("skipping %d non-finite rows of shard %d", int((~finite_N).sum()), index)
                keep_N = keep_N & finite_N
            rows_ND = rows_ND[keep_N].to(dtype)
            if gen is not None:
                rows_ND = rows_ND[torch.randperm(len(rows_ND), generator=gen)]
            rows_ND = torch.cat([carry, rows_ND])
            n_full = len(rows_ND) // batch_size * batch_size
            for start in range(0, n_full, batch_size):
                yield rows_ND[start : start + batch_size]
            carry = rows_ND[n_full:]
        if len(carry) and not drop_last:
            yield carry
