"""Read-only access to a cache folder: verified shards (size + sha256 against the manifest) and batches of rows."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load as st_load

from sae_workbench.activation_cache.errors import CacheNotFoundError, NonFiniteActivationError
from sae_workbench.activation_cache.manifest import MANIFEST, CacheManifest, read_manifest
from sae_workbench.errors import CacheCorruptError, CacheMismatchError

log = logging.getLogger(__name__)


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


class ActivationCache:
    """Read-only access to a cache folder written by `cache_activations`."""

    def __init__(self, folder: Path | str) -> None:
        self.folder = Path(folder)
        manifest = read_manifest(self.folder)
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
