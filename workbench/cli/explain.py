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
from sae_workbench.cli import llm_options, options
from sae_workbench.cli.backends import check_llm_backend


def explain(
    store: options.Store,
    sae: options.SaeId,
    explainer: options.Explainer = None,
    features: options.Features = "all",
    llm_model: options.LlmModel = None,
    llm_base_url: options.LlmBaseUrl = None,
    api_key_env: options.ApiKeyEnv = defaults.LLM_API_KEY_ENV,
    concurrency: options.Concurrency = defaults.LLM_CONCURRENCY,
    llm_timeout: llm_options.LlmTimeout = None,
    llm_max_tokens: llm_options.LlmMaxTokens = None,
    llm_context: llm_options.LlmContext = None,
    negatives: options.Negatives = defaults.NEGATIVES,
    seed: options.Seed = defaults.DEFAULT_SEED,
    rule_cap: int = typer.Option(
        defaults.RULE_CAP, help="Most rules per structured explanation (tree paper: 5)."
    ),
    record_len: options.RecordLen = defaults.RECORD_LEN,
    preset: options.Preset = defaults.PRESET,
    embedding_model: options.EmbeddingModel = defaults.EMBEDDING_MODEL,
    trust_remote_code: options.TrustRemoteCode = False,
    backend: options.Backend = defaults.DEFAULT_BACKEND,
    ray_address: options.RayAddress = None,
    ray_workers: options.RayWorkers = None,
    llm_qps: options.LlmQps = None,
    progress: options.Progress = True,
) -> None:
    """Explain features with the lexical (offline), one-shot, tree or PRISM explainer; rerun to resume."""
    from sae_workbench.explainers.job import ExplainConfig, ExplainJob
    from sae_workbench.llm.config import LLMNotConfiguredError
    from sae_workbench.raycluster import RayConfig
    from sae_workbench.store import Store

    check_llm_backend(backend, llm_qps)
    if trust_remote_code:
        from sae_workbench.embeddings import trust_remote_code as allow_remote_code

        allow_remote_code()
    status = llm_options.llm_endpoint(
        llm_model, llm_base_url, api_key_env, max(1, concurrency), llm_timeout, llm_max_tokens, llm_context
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
    split = options.split_config(
        negatives, seed, record_len
    )  # the one split config, recorded with each explanation
    config = ExplainConfig(
        name, split_config=split, rule_cap=rule_cap, preset=preset, embedding_model=embedding_model
    )
    remote = None
    if backend == "ray":
        from sae_workbench.explainers.ray_backend import RayExplainBackend

        remote = RayExplainBackend(ray_workers, qps=llm_qps, ray_config=RayConfig(address=ray_address))
    job = ExplainJob(
        st, sae, config, status.config, concurrency=concurrency, remote=remote, progress=progress
    )
    summary = job.run(options.parse_features(features, sae_row.d_sae))
    failed = f", {summary.failed} failed (LLM; rerun to retry them)" if summary.failed else ""
    typer.echo(
        f"explain {name}: {summary.explained} explained, {summary.dead} dead{failed}, {summary.skipped} already "
        f"stored (of {summary.requested}) in {summary.seconds:.1f}s; LLM calls {summary.usage.calls}, "
        f"tokens {summary.usage.total_tokens}"
    )
