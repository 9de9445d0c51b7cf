"""`workbench index`: index an SAE over a corpus into the DuckDB feature store, then compute feature statistics.

    workbench index --store runs/store.duckdb --sae runs/topk-8x --tokens 1000000
    workbench index --model tiny --hook blocks.0.hook_resid_post --sae my-sae --corpus my.jsonl --top-k 32

Without --hook the SAE is applied to the hook its cfg records (`metadata.hook_name`), else the default hook.

Rerunning resumes a killed run; rerunning a finished one adds nothing; a larger --tokens extends the index.
`--backend ray [--ray-address ADDR]` runs the forward passes on Ray actors (sae/ray_index.py) with the same result.
"""

from __future__ import annotations

from pathlib import Path

import typer

from sae_workbench import defaults
from sae_workbench.cli import loaders, options


def index(
    sae: options.SaePath,
    store: options.Store = defaults.STORE_PATH,
    model: options.SaeModel = None,
    hook: options.SaeHook = None,
    corpus: options.Corpus = defaults.DEFAULT_CORPUS,
    tokens: int = typer.Option(
        defaults.INDEX_TOKENS, min=1, help="Tokens to index (whole windows, BOS included)."
    ),
    context_size: options.ContextSize = defaults.CONTEXT_SIZE,
    batch_size: options.ForwardBatch = defaults.FORWARD_BATCH_WINDOWS,
    top_k: int | None = typer.Option(
        None, min=1, help="Keep only the k largest activations per token (default: all)."
    ),
    device: options.Device = defaults.DEFAULT_DEVICE,
    force_model: options.ForceModel = False,
    progress: options.Progress = True,
    backend: options.Backend = defaults.DEFAULT_BACKEND,
    ray_address: options.RayAddress = None,
    workers: int | None = typer.Option(
        None, help="--backend ray: indexer actors (default: one per GPU on cuda, else one per CPU)."
    ),
    partition_root: str | None = typer.Option(
        None,
        help="--backend ray: write the activations as feature-partitioned Parquet under this root (local or s3://) "
        "with one reduce task per bucket (default: the root of the store's partitioned SAEs, if any).",
    ),
) -> None:
    """Run the model + SAE over a corpus and store sparse activations, windows and per-feature statistics."""
    from sae_workbench.raycluster import check_backend
    from sae_workbench.sae.index_request import IndexArgumentError
    from sae_workbench.store.connection import require_writable

    check_backend(backend)
    # Bad arguments are refused before the SAE, the model or the store is touched (exit 2).
    if tokens < context_size:
        raise IndexArgumentError(
            f"--tokens {tokens} is less than one window of --context-size {context_size}; nothing would be indexed."
        )
    require_writable(Path(store))
    step = loaders.step_lines(progress)
    step(f"loading SAE {sae}")
    from sae_workbench.corpus import resolve_corpus
    from sae_workbench.model_identity import check_model_identity
    from sae_workbench.models import load_model
    from sae_workbench.sae.index_loop import index_sae
    from sae_workbench.sae.index_request import IndexConfig, IndexRequest
    from sae_workbench.sae.io import (
        load_sae,
        recorded_fingerprint,
        recorded_hook,
        recorded_model,
        resolve_hook,
    )
    from sae_workbench.sae.metrics import read_metrics
    from sae_workbench.store import Store

    loaded_sae = load_sae(sae, device=device, hook=hook)
    model = loaders.model_for_sae(loaded_sae, model, step)
    step(f"loading model {model}")
    loaded_model = load_model(model, device=device)
    if hook is None:
        hook = resolve_hook(loaded_sae, hook)  # the hook the SAE's cfg records (else the default)
        step(
            f"hook {hook} (from the SAE's cfg)" if recorded_hook(loaded_sae) else f"hook {hook} (the default)"
        )
    identified = check_model_identity(
        recorded_model(loaded_sae),
        loaded_model,
        sae_d_in=int(loaded_sae.cfg.d_in),
        hook=hook,
        fingerprint=recorded_fingerprint(loaded_sae),
        force=force_model,
    )
    if not identified.by_name and identified.sae_model is not None and identified.risk is None:
        typer.echo(
            identified.message(), err=True
        )  # what identified a model the SAE names another way (a risk is logged)
    cfg = IndexConfig(context_size=context_size, top_k=top_k, batch_size=batch_size)
    sae_dir = Path(sae).expanduser()
    # index_sae checks the hook and window size against the model and the SAE (once), and reads the SAE's id back
    # from its training record when the folder has one.
    step(f"indexing {tokens:,} tokens of {corpus} into {store}, then feature statistics")
    opened, corpus_ = Store.open(store), resolve_corpus(corpus)
    request = IndexRequest(
        loaded_model,
        loaded_sae,
        hook,
        corpus_,
        tokens,
        cfg,
        model_name=model,
        sae_path=str(sae_dir.resolve()) if sae_dir.exists() else sae,
        sae_metrics=read_metrics(sae_dir) if sae_dir.is_dir() else None,
    )
    if backend == "ray":
        from sae_workbench.raycluster import RayConfig
        from sae_workbench.sae.ray_index import RayIndexConfig, index_sae_ray

        ray_index = RayIndexConfig(workers=workers, device=device, partition_root=partition_root)
        ray_config = RayConfig(address=ray_address)
        result = index_sae_ray(opened, request, ray_index, ray_config=ray_config)
    else:
        result = index_sae(opened, request)
    typer.echo(
        f"sae {result.sae_id}: {result.new_windows} new windows, {result.new_rows:,} activation rows "
        f"({result.tokens_per_s:,.0f} tok/s) → {store}"
    )
