"""`workbench cache`: cache a model's activations at one or more hooks over a corpus.

    workbench cache --tokens 200000                      # SmolLM2-135M, blocks.3.hook_resid_post, default corpus
    workbench cache --model tiny --hook blocks.0.hook_resid_post --corpus my.jsonl --out runs/cache/mine

Rerunning the same command resumes after the last complete shard; a larger --tokens extends the cache.
"""

from __future__ import annotations

import re
from pathlib import Path

import typer

from sae_workbench import defaults
from sae_workbench.cli import options


def _slug(text: str) -> str:
    """File-name-safe form of a model, hook or corpus name."""
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-")[-48:] or "x"


def default_cache_dir(model: str, hooks: list[str], corpus: str, context_size: int) -> Path:
    """Folder a cache goes to when --out is not given: one per (model, hooks, corpus, window size)."""
    hook_part = "+".join(_slug(h) for h in hooks)
    model_part = _slug(Path(model).name or model)
    return defaults.CACHE_ROOT / f"{model_part}__{hook_part}__{_slug(Path(corpus).name)}__ctx{context_size}"


def cache(
    model: options.Model = defaults.DEFAULT_MODEL,
    hook: options.Hooks = [defaults.DEFAULT_HOOK],  # noqa: B006 - typer copies list defaults
    corpus: options.Corpus = defaults.DEFAULT_CORPUS,
    tokens: int = typer.Option(
        defaults.CACHE_TOKENS, help="Tokens to cache in total (whole windows, BOS included)."
    ),
    context_size: options.ContextSize = defaults.CONTEXT_SIZE,
    batch_size: options.ForwardBatch = defaults.FORWARD_BATCH_WINDOWS,
    dtype: str = typer.Option(defaults.CACHE_DTYPE, help="Storage dtype of activations: float16 or float32."),
    out: Path | None = typer.Option(
        None, help="Cache folder (default: runs/cache/<model>__<hooks>__<corpus>__ctx<N>)."
    ),
    shard_tokens: int = typer.Option(
        defaults.CACHE_SHARD_TOKENS, help="Tokens per shard (rounded to whole batches)."
    ),
    exclude_outliers: float | None = typer.Option(
        None, help="Also mask positions whose norm exceeds this factor × their window's median norm (e.g. 5)."
    ),
    device: options.Device = defaults.DEFAULT_DEVICE,
    progress: options.Progress = True,
) -> None:
    """Cache activations of a model at one or more hooks over a corpus into resumable safetensors shards."""
    from sae_workbench.activation_cache.caching import cache_activations
    from sae_workbench.corpus import MaskPolicy, resolve_corpus
    from sae_workbench.models import load_model

    hooks = list(hook)
    folder = out or default_cache_dir(model, hooks, corpus, context_size)
    # cache_activations checks the hooks, window size and dtype against the model (once) before it writes anything.
    stats = cache_activations(
        load_model(model, device=device),
        hooks,
        resolve_corpus(corpus),
        folder,
        n_tokens=tokens,
        context_size=context_size,
        batch_size=batch_size,
        dtype=dtype,
        shard_tokens=shard_tokens,
        mask_policy=MaskPolicy(outlier_norm_factor=exclude_outliers),
        progress=progress,
    )
    m = stats.manifest
    typer.echo(f"cache: {folder.resolve()}")
    typer.echo(
        f"{m.n_tokens:,} tokens ({sum(s.n_masked for s in m.shards):,} unmasked) in {len(m.shards)} shards, "
        f"hooks {', '.join(m.hooks)}, {m.dtype}; this run wrote {stats.new_tokens:,} tokens"
        + (f" at {stats.tokens_per_s:,.0f} tok/s" if stats.new_tokens else " (already complete)")
    )
