"""`workbench index`: index an SAE over a corpus into the DuckDB feature store, then compute feature statistics.

    workbench index --store runs/store.duckdb --sae runs/topk-8x --tokens 1000000
    workbench index --model tiny --hook blocks.0.hook_resid_post --sae my-sae --corpus my.jsonl --top-k 32

Rerunning resumes a killed run; rerunning a finished one adds nothing; a larger --tokens extends the index.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from sae_workbench.defaults import DEFAULT_HOOK, DEFAULT_MODEL

DEFAULT_STORE = Path("runs") / "store.duckdb"


def index(
    sae: str = typer.Option(
        ..., help="SAE: a SAELens folder, sparsify/Gemma Scope folder or file, or registry id."
    ),
    store: Path = typer.Option(DEFAULT_STORE, help="DuckDB store file (created if missing)."),
    model: str = typer.Option(DEFAULT_MODEL, help="Model: smollm2-135m, tiny, a local HF dir, or a TL name."),
    hook: str = typer.Option(DEFAULT_HOOK, help="Hook the SAE reads."),
    corpus: str = typer.Option(
        "default", help="'default', a .txt/.jsonl/.parquet file or folder, or hf:<dataset>."
    ),
    tokens: int = typer.Option(1_000_000, help="Tokens to index (whole windows, BOS included)."),
    context_size: int = typer.Option(128, help="Window size in tokens, BOS included."),
    batch_size: int = typer.Option(32, help="Windows per forward pass."),
    top_k: int | None = typer.Option(
        None, help="Keep only the k largest activations per token (default: all)."
    ),
    device: str = typer.Option("cpu", help="Torch device (cpu, cuda, mps)."),
) -> None:
    """Run the model + SAE over a corpus and store sparse activations, windows and per-feature statistics."""
    from sae_workbench.corpus import resolve_corpus
    from sae_workbench.models import load_model
    from sae_workbench.sae.indexing import IndexConfig, index_sae
    from sae_workbench.sae.io import load_sae
    from sae_workbench.store import Store

    loaded_model = load_model(model, device=device)
    loaded_sae = load_sae(sae, device=device, hook=hook)
    cfg = IndexConfig(context_size=context_size, top_k=top_k, batch_size=batch_size)
    sae_dir = Path(sae)
    metrics_file = sae_dir / "metrics.json"
    metrics = json.loads(metrics_file.read_text()).get("metrics") if metrics_file.is_file() else None
    sae_path = str(sae_dir.resolve()) if sae_dir.exists() else sae
    result = index_sae(
        Store.open(store),
        loaded_model,
        loaded_sae,
        hook,
        resolve_corpus(corpus),
        tokens,
        cfg,
        model_name=model,
        sae_path=sae_path,
        sae_metrics=metrics,
    )
    typer.echo(
        f"sae {result.sae_id}: {result.new_windows} new windows, {result.new_rows:,} activation rows "
        f"({result.tokens_per_s:,.0f} tok/s) → {store}"
    )
