"""What a cache folder holds (`manifest.json`): its identity and the list of complete shards; reading, atomically
replacing and checking it, and deleting files it does not list."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sae_workbench
from sae_workbench import paths
from sae_workbench.errors import CacheCorruptError, CacheMismatchError

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
FORMAT_VERSION = 1
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


def now() -> str:
    """The current UTC time as the manifest records it (ISO, seconds)."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def read_manifest(folder: Path) -> CacheManifest | None:
    """The folder's manifest, None if it has none; CacheCorruptError if it cannot be parsed."""
    path = folder / MANIFEST
    if not path.exists():
        return None
    try:
        return CacheManifest.from_dict(json.loads(path.read_text()))
    except (json.JSONDecodeError, TypeError, KeyError) as err:
        raise CacheCorruptError(
            f"{path} is not a valid cache manifest ({err}); delete the folder {folder} and rerun."
        ) from err


def write_manifest(folder: Path, manifest: CacheManifest) -> None:
    """Replace the folder's manifest atomically."""
    paths.atomic_write_bytes(folder / MANIFEST, json.dumps(manifest.to_dict(), indent=1).encode())


def clean_unlisted(folder: Path, manifest: CacheManifest) -> None:
    """Delete temp files and shard files the manifest does not list (left by a killed run)."""
    listed = {s.file for s in manifest.shards}
    for p in folder.iterdir():
        stray_tmp = p.name.startswith(".shard-") and ".tmp" in p.name
        stray_shard = p.name.startswith("shard-") and p.name not in listed
        if stray_tmp or stray_shard:
            log.info("removing %s left by an interrupted run", p)
            p.unlink()


def check_identity(folder: Path, existing: CacheManifest, wanted: CacheManifest) -> None:
    """Raise CacheMismatchError naming every identity field where `existing` and `wanted` differ."""
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
