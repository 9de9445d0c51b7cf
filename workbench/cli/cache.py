"""`workbench cache`: cache a model's activations at one or more hooks over a corpus.

    workbench cache --tokens 200000                      # SmolLM2-135M, blocks.3.hook_resid_post, default corpus
    workbench cache --model tiny --hook blocks.0.hook_resid_post --corpus my.jsonl --out runs/cache/mine

Rerunning the same command resumes after the last complete shard; a larger --tokens extends the cache.
"""

from __future__ import annotations

import re
from pathlib import Path

import typer

from sae_workbench.defaults import DEFAULT_HOOK, DEFAULT_MODEL

DEFAULT_CACHE_ROOT = Path("runs") / "cache"


def _slug(text: str) -> str:
    """File-name-safe form of a model, hook or corpus name."""
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-")[-48:] or "x"


def default_cache_dir(model: str, hooks: list[str], corpus: str, context_size: int) -> Path:
    """Folder a cache goes to when --out is not given: one per (model, hooks, corpus, window size)."""
    hook_part = "+".join(_slug(h) for h in hooks)
    model_part = _slug(Path(model).name or model)
    return DEFAULT_CACHE_ROOT / f"{model_part}__{hook_part}__{_slug(Path(corpus).name)}__ctx{context_size}"


def cache(
    model: str = typer.Option(
        DEFAULT_MODEL,
        help="Model: smollm2-135m (embedded), tiny (random, for tests), a local HF dir, or a TL name.",
    ),
    hook: list[str] = typer.Option(
        [DEFAULT_HOOK], "--hook", help="Hook to cache; repeat for several (the forward stops after the last)."
    ),
    corpus: str = typer.Option(
        "default", help="'default' (embedded), a .txt/.jsonl/.parquet file or folder, or hf:<dataset>."
    ),
    tokens: int = typer.Option(200_000, help="Tokens to cache in total (whole windows, BOS included)."),
    context_size: int = typer.Option(128, help="Window size in tokens, BOS included."),
    batch_size: int = typer.Option(32, help="Windows per forward pass."),
    dtype: str = typer.Option("float16", help="Storage dtype of activations: float16 or float32."),
    out: Path | None = typer.Option(
        None, help="Cache folder (default: runs/cache/<model>__<hooks>__<corpus>__ctx<N>)."
    ),
    shard_tokens: int = typer.Option(65_536, help="Tokens per shard (rounded to whole batches)."),
    exclude_outliers: float | None = typer.Option(
        None, help="Also mask positions whose norm exceeds this factor × their window's median norm (e.g. 5)."
    ),
    device: str = typer.Option("cpu", help="Torch device for the forward pass (cpu, cuda, mps)."),
    progress: bool = typer.Option(True, help="Show a progress bar with tokens/s."),
) -> None:
    """Cache activations of a model at one or more hooks over a corpus into resumable safetensors shards."""
    from sae_workbench.activations import cache_activations
    from sae_workbench.corpus import MaskPolicy, resolve_corpus
    from sae_workbench.models import check_context_size, load_model, validate_hooks

    loaded = load_model(model, device=device)
    hooks = validate_hooks(loaded, list(hook))
    check_context_size(loaded, context_size)
    folder = out or default_cache_dir(model, hooks, corpus, context_size)
    stats = cache_activations(
        loaded,
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
