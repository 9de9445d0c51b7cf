"""The caching loop: run the model over a corpus's windows and hand the hooks' activations to the shard writer,
resuming after the last listed shard of a folder with the same identity (`cache_activations`)."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformer_lens import HookedTransformer

from sae_workbench import defaults
from sae_workbench.activation_cache.disk import check_disk_space
from sae_workbench.activation_cache.lock import folder_lock
from sae_workbench.activation_cache.manifest import (
    CacheManifest,
    check_identity,
    clean_unlisted,
    now,
    read_manifest,
    write_manifest,
)
from sae_workbench.activation_cache.writer import ShardWriter
from sae_workbench.corpus import Corpus, MaskPolicy, default_bos_id, iter_windows
from sae_workbench.errors import WorkbenchError
from sae_workbench.models import check_context_size, forward_to_hooks, validate_hooks

log = logging.getLogger(__name__)

DTYPES = {"float16": torch.float16, "float32": torch.float32}


# Hooks whose activations are (batch, head, query, key) maps rather than one vector per token position.
PER_HEAD_PAIR_HOOKS = ("hook_pattern", "hook_attn_scores")


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
        created_at=now(),
    )
    windows_per_batch = batch_size
    windows_per_shard = max(1, round(shard_tokens / context_size / batch_size)) * batch_size
    target_windows = n_tokens // context_size

    with folder_lock(folder):
        existing = read_manifest(folder)
        if existing is not None:
            check_identity(folder, existing, wanted)
            manifest = existing
        else:
            manifest = wanted
            write_manifest(folder, manifest)
        clean_unlisted(folder, manifest)
        start_window = manifest.n_windows
        if start_window >= target_windows:
            log.info(
                "cache in %s already holds %d tokens (asked for %d)", folder, manifest.n_tokens, n_tokens
            )
            return CacheRunStats(folder, manifest, 0, 0.0)
        remaining = (target_windows - start_window) * context_size
        bytes_per_token = sum(wanted.hook_dims.values()) * store_dtype.itemsize + 4 + 1
        check_disk_space(folder, remaining, bytes_per_token)

        writer = ShardWriter(folder, manifest)
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


def _flush(writer: ShardWriter, pending: _Pending, context_size: int, windows_per_shard: int) -> None:
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
