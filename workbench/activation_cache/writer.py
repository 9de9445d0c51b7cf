"""The background shard writer: serialises, checksums and fsyncs each shard, renames it into place, then lists it
in the manifest — so the forward pass never waits on disk and a kill leaves only complete, listed shards."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import queue
import threading
from dataclasses import replace
from pathlib import Path

import torch
from safetensors.torch import save as st_save

from sae_workbench.activation_cache.errors import CacheWriteError
from sae_workbench.activation_cache.manifest import MANIFEST, CacheManifest, ShardInfo, now, write_manifest


def _write_file(path: Path, data: bytes) -> None:
    """Write bytes and fsync them (one function so tests can simulate a full disk)."""
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _fsync_dir(folder: Path) -> None:
    """fsync a folder so a rename in it survives a crash (best effort: some filesystems refuse)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class ShardWriter:
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
        self.manifest = replace(self.manifest, shards=(*self.manifest.shards, info), updated_at=now())
        write_manifest(self.folder, self.manifest)
