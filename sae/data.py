"""Activation data for SAE training: chunk sources (streaming model forward, activation cache, in-memory tensors)
and a deterministic, resumable shuffling batcher that feeds sae-lens's SAETrainer.

A *source* is a function `start_chunk -> Iterator[Chunk]`; chunk i is always the same activations, so a run can
restart at any chunk. The batcher groups `chunks_per_block` chunks into a block, shuffles each block with a generator
seeded by (seed, block index), and cuts the concatenated stream into batches of exactly `batch_size` rows. Its state
for resuming is (block index, stream position of the block start, tokens consumed).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from transformer_lens import HookedTransformer

from sae_workbench import defaults
from sae_workbench.errors import WorkbenchError
from sae_workbench.models import forward_to_hooks

log = logging.getLogger(__name__)

NanPolicy = Literal["stop", "skip"]
STREAM_WINDOWS_PER_CHUNK = 32
"""Corpus windows per chunk of a streaming source (one forward pass each)."""
# Masked special tokens a streaming run skips, as a fraction of its training tokens (a generous bound).
MASKED_TOKEN_MARGIN = 0.05


class NonFiniteActivationsError(WorkbenchError):
    """Activations contain NaN or inf (raised under nan_policy='stop')."""


class TrainingDataExhaustedError(WorkbenchError):
    """The source ran out of activations before the requested number of training tokens."""


@dataclass(frozen=True)
class Chunk:
    """A piece of a source: activation rows already masked (BOS/special positions removed)."""

    acts_ND: torch.Tensor
    """(N, d_in) float32 activations."""
    label: str
    """Where the rows came from (shard file and batch, or window ids), for error reports."""


ChunkSource = Callable[[int], Iterator[Chunk]]


def tensor_source(chunks: Sequence[torch.Tensor], repeat: bool = False) -> ChunkSource:
    """A source over in-memory activation tensors (each (N, d_in)); `repeat` cycles them for ever."""

    def chunks_from(start: int) -> Iterator[Chunk]:
        i = start
        while repeat or i < len(chunks):
            yield Chunk(chunks[i % len(chunks)].float(), f"tensor {i % len(chunks)}")
            i += 1

    return chunks_from


def streaming_source(
    model: HookedTransformer,
    hook: str,
    corpus: Any,
    *,
    context_size: int = defaults.CONTEXT_SIZE,
    windows_per_chunk: int = STREAM_WINDOWS_PER_CHUNK,
    bos_id: int | None = None,
    mask_policy: Any = None,
) -> ChunkSource:
    """A source that runs the model over corpus windows (stopping right after `hook`) and keeps unmasked positions."""
    from sae_workbench.corpus import iter_windows

    device = next(model.parameters()).device

    def chunks_from(start: int) -> Iterator[Chunk]:
        windows = iter_windows(
            corpus,
            model.tokenizer,
            context_size,
            bos_id=bos_id,
            batch_size=windows_per_chunk,
            start_window=start * windows_per_chunk,
            mask_policy=mask_policy,
            decode=False,
        )
        for batch in windows:
            tokens_BT = torch.from_numpy(batch.tokens_BT).long().to(device)
            acts_BTD = forward_to_hooks(model, tokens_BT, [hook])[hook]
            mask_BT = torch.from_numpy(batch.mask_BT).to(device)
            # Stays on the model's device: the SAE trains there too.
            acts_ND = acts_BTD[mask_BT].float()
            first, last = int(batch.window_ids[0]), int(batch.window_ids[-1])
            yield Chunk(acts_ND, f"windows {first}-{last}")

    return chunks_from


def cache_source(folder: Path, hook: str) -> ChunkSource:
    """A source over an activation cache folder written by `workbench cache`: chunk i is shard i with its masked
    positions (BOS, specials, outliers) dropped. NaN/inf are left for the batcher to report by shard."""
    from sae_workbench.activation_cache.reader import ActivationCache
    from sae_workbench.errors import CacheMismatchError

    cache = ActivationCache(folder)
    if hook not in cache.manifest.hooks:
        raise CacheMismatchError(
            f"hook {hook!r} is not in the cache {folder}; it holds {list(cache.manifest.hooks)}."
        )
    width = cache.manifest.hook_dims[hook]

    def chunks_from(start: int) -> Iterator[Chunk]:
        for index in range(start, cache.n_shards):
            shard = cache.load_shard(index, check_finite=False)
            rows_ND = shard.acts[hook].reshape(-1, width)[shard.mask_WT.reshape(-1)].float()
            yield Chunk(rows_ND, f"shard {index} ({cache.manifest.shards[index].file})")

    return chunks_from


class ShuffledBatches:
    """Deterministic shuffled batches of exactly `batch_size` rows, resumable from `state()`."""

    def __init__(
        self,
        source: ChunkSource,
        batch_size: int,
        seed: int,
        chunks_per_block: int = 16,
        nan_policy: NanPolicy = "stop",
        resume: dict[str, int] | None = None,
        limit: int | None = None,
    ) -> None:
        self.batch_size = batch_size
        self.limit = limit
        self.seed = seed
        self.chunks_per_block = chunks_per_block
        self.nan_policy = nan_policy
        self.skipped_rows = 0
        self.skipped_labels: list[str] = []
        start_block = resume["block"] if resume else 0
        self.consumed = resume["consumed"] if resume else 0
        self._block_starts: deque[tuple[int, int]] = deque(maxlen=64)
        self._chunks = source(start_block * chunks_per_block)
        self._next_block = start_block
        self._stream_pos = resume["block_start"] if resume else 0
        self._buffer: list[torch.Tensor] = []
        self._buffered = 0
        self._skip = self.consumed - self._stream_pos

    def _clean(self, chunk: Chunk) -> torch.Tensor:
        """Drop or refuse rows with NaN/inf, reporting where they came from."""
        finite_N = torch.isfinite(chunk.acts_ND).all(dim=-1)
        if bool(finite_N.all()):
            return chunk.acts_ND
        bad = int((~finite_N).sum())
        if self.nan_policy == "stop":
            raise NonFiniteActivationsError(
                f"{bad} activation rows with NaN/inf in {chunk.label}; fix the source (model dtype overflow? "
                "corrupt cache shard?) or pass --nan-policy skip to drop them."
            )
        log.warning("skipping %d activation rows with NaN/inf in %s", bad, chunk.label)
        self.skipped_rows += bad
        self.skipped_labels.append(chunk.label)
        return chunk.acts_ND[finite_N]

    def _load_block(self) -> bool:
        """Append the next shuffled block to the buffer; False when the source is exhausted."""
        rows: list[torch.Tensor] = []
        n_rows = 0
        for _ in range(self.chunks_per_block):
            # Stop reading once the stream holds every row the run will train on: the last block would otherwise
            # make the source produce (streaming: run the model over) up to a whole block nobody uses.
            if self.limit is not None and self._stream_pos + n_rows >= self.limit:
                break
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            rows.append(self._clean(chunk))
            n_rows += rows[-1].shape[0]
        if not rows:
            return False
        block = torch.cat(rows)
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self._next_block)
        block = block[torch.randperm(block.shape[0], generator=gen)]
        self._block_starts.append((self._next_block, self._stream_pos))
        self._next_block += 1
        self._stream_pos += block.shape[0]
        if self._skip > 0:  # resuming: drop what the interrupted run already trained on
            drop = min(self._skip, block.shape[0])
            block, self._skip = block[drop:], self._skip - drop
        self._buffer.append(block)
        self._buffered += block.shape[0]
        return True

    def __iter__(self) -> ShuffledBatches:
        return self

    def __next__(self) -> torch.Tensor:
        while self._buffered < self.batch_size:
            if not self._load_block():
                raise TrainingDataExhaustedError(
                    f"the activation source ran out after {self.consumed + self._buffered} tokens; "
                    "train on fewer tokens (--tokens) or use a larger corpus/cache."
                )
        data = torch.cat(self._buffer)
        batch, rest = data[: self.batch_size], data[self.batch_size :]
        self._buffer, self._buffered = [rest], rest.shape[0]
        self.consumed += self.batch_size
        return batch

    def peek(self, n_rows: int) -> torch.Tensor:
        """The next `n_rows` rows (fewer if the source runs out) without consuming them: the run still trains on them."""
        while self._buffered < n_rows and self._load_block():
            pass
        if not self._buffer:
            return torch.empty(0)
        self._buffer = [torch.cat(self._buffer)]
        return self._buffer[0][:n_rows]

    def state(self) -> dict[str, int]:
        """Where to restart so the next batch is exactly the one this batcher would yield next."""
        block, start = next((b, s) for b, s in reversed(self._block_starts) if s <= self.consumed)
        return {"block": block, "block_start": start, "consumed": self.consumed}


def first_held_out_window(
    n_tokens: int,
    context_size: int,
    shuffle_chunks: int,
    *,
    cache: Path | None = None,
    windows_per_chunk: int = STREAM_WINDOWS_PER_CHUNK,
) -> int:
    """The first corpus window no training run of `n_tokens` tokens read: the window after the cache it trained on,
    or, streaming, after the windows those tokens fill plus 5% for masked special tokens plus one shuffle block
    (the batcher stops within a block of its budget). Held-out metrics start there."""
    if cache is not None:
        from sae_workbench.activation_cache.reader import ActivationCache

        return ActivationCache(cache).manifest.n_windows
    filled = n_tokens / (context_size - 1) * (1 + MASKED_TOKEN_MARGIN)
    return int(filled) + windows_per_chunk * shuffle_chunks
