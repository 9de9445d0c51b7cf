"""`workbench explain`: explain many features of an SAE into the store, resumably.

    workbench explain --store runs/store.duckdb --sae <SAE_ID> --explainer lexical --features 0-49
    workbench explain --store S --sae ID --explainer tree --features all --llm-model gpt-4o-mini
    workbench explain --store S --sae ID --explainer oneshot --features 0-9 \\
        --llm-model qwen2.5 --llm-base-url http://localhost:8000/v1 --api-key-env MY_KEY --concurrency 32
    workbench explain --store S --sae ID --explainer oneshot --features all --llm-model M \\
        --backend ray --ray-workers 8 --llm-qps 50            # Ray workers, one global rate limit, same rows
"""

from __future__ import annotations

import typer

from sae_workbench import defaults
from sae_workbench.cli import options


def explain(
    store: options.Store,
    sae: options.SaeId,
    explainer: str = typer.Option(
        "", help="lexical, oneshot, tree or prism (default: oneshot with an LLM endpoint, else lexical)."
    ),
    features: options.Features = "all",
    llm_model: options.LlmModel = None,
    llm_base_url: options.LlmBaseUrl = None,
    api_key_env: options.ApiKeyEnv = defaults.LLM_API_KEY_ENV,
    concurrency: options.Concurrency = defaults.LLM_CONCURRENCY,
    negatives: str = typer.Option(
        "SIMILAR_NEGATIVE", help="Tree negatives: RANDOM[_NEGATIVE] or SIMILAR[_NEGATIVE]."
    ),
    seed: options.Seed = defaults.DEFAULT_SEED,
    rule_cap: int = typer.Option(5, help="Most rules per structured explanation (tree paper: 5)."),
    record_len: int = typer.Option(
        32, help="Tokens per record shown or simulated, around each peak (tree paper: 32)."
    ),
    preset: str = typer.Option(
        "default",
        help="Tree search settings: 'default' (spec: depth 3, width 3) or 'paper' (the reference's paper runs: depth "
        "2, width 2, roots at temperature 1.0 with 5 few-shot examples, train positives only, train/valid scored on "
        "0..5 values, stop rule after pruning). PRISM: 'paper' = the reference's settings (p99, 1000 texts, k 5, "
        "gte-Qwen2-1.5B-instruct embeddings, seed 42). Recorded in each explanation's sampling.",
    ),
    embedding_model: str = typer.Option(
        "",
        help="PRISM: sentence-transformers model embedding the texts (default: the preset's; 'default' uses "
        "all-MiniLM-L6-v2 offline in place of the paper's Alibaba-NLP/gte-Qwen2-1.5B-instruct).",
    ),
    backend: options.Backend = defaults.DEFAULT_BACKEND,
    ray_address: options.RayAddress = None,
    ray_workers: options.RayWorkers = None,
    llm_qps: options.LlmQps = None,
) -> None:
    """Explain features with the lexical (offline), one-shot, tree or PRISM explainer; rerun to resume."""
    from sae_workbench.explainers.job import ExplainConfig, ExplainJob
    from sae_workbench.llm.config import LLMNotConfiguredError, endpoint_status
    from sae_workbench.raycluster import RayConfig, check_backend
    from sae_workbench.store import Store

    check_backend(backend)
    if llm_qps is not None and backend != "ray":
        raise typer.BadParameter("--llm-qps is the Ray workers' shared limit: pass it with --backend ray")
    status = endpoint_status(
        llm_model or None, llm_base_url or None, api_key_env=api_key_env, concurrency=max(1, concurrency)
    )
    name = explainer or ("oneshot" if status.configured else "lexical")
    if not status.configured:
        if llm_model or name == "oneshot":
            raise LLMNotConfiguredError(
                f"--explainer {name} needs an LLM endpoint: {status.notice.split(';')[0]}. "
                "Pass --llm-model (and --llm-base-url for a local server) or use --explainer lexical."
            )
        typer.secho(
            f"notice: {status.notice} "
            + ("" if name == "lexical" else f"({name} runs offline with the lexical proposer/describer.)"),
            fg="yellow",
            err=True,
        )
    else:
        typer.echo(status.notice, err=True)
    st = Store.open(store)
    sae_row = st.get_sae(sae)
    config = ExplainConfig(
        name, negatives=negatives, seed=seed, rule_cap=rule_cap, record_len=record_len, preset=preset,
        embedding_model=embedding_model,
    )  # fmt: skip
    remote = None
    if backend == "ray":
        from sae_workbench.explainers.ray_workers import RayExplainBackend

        remote = RayExplainBackend(ray_workers, qps=llm_qps, ray_config=RayConfig(address=ray_address))
    job = ExplainJob(st, sae, config, status.config, concurrency=concurrency, remote=remote)
    summary = job.run(options.parse_features(features, sae_row.d_sae))
    typer.echo(
        f"explain {name}: {summary.explained} explained, {summary.dead} dead, {summary.skipped} already stored "
        f"(of {summary.requested}) in {summary.seconds:.1f}s; LLM calls {summary.usage.calls}, "
        f"tokens {summary.usage.total_tokens}"
    )
