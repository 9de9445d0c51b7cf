"""`workbench polysemanticity-sweep`: the tree paper's polysemanticity of features, from a rule-cap sweep.

    workbench polysemanticity-sweep --store S --sae ID --features 0-49 --rule-caps 1,2,3,4,5
    workbench polysemanticity-sweep --store S --sae ID --features 0-49 --preset paper --llm-model gpt-4o-mini

Each feature is explained by the tree explainer (or, with --explainer oneshot, the one-shot structured prompt) at every
rule cap (resumable), each explanation's test third is scored by the simulation scorer, and a feature's
polysemanticity is the smallest cap whose best test score reaches 0.9 of its best over all caps (Ma et al. NeurIPS
2025). Prints one line per feature and the SAE's (one layer's) mean with its t confidence interval.
"""

from __future__ import annotations

import typer

from sae_workbench import defaults
from sae_workbench.cli import llm_options, options


def polysemanticity_sweep(
    store: options.Store,
    sae: options.SaeId,
    features: options.Features = "all",
    rule_caps: str = typer.Option("1,2,3,4,5", help="Rule caps to explain with (tree paper: 1..5)."),
    explainer: str = typer.Option(
        "tree", help="tree, or oneshot (the spec's one-shot structured explanations; needs an LLM)."
    ),
    preset: options.Preset = defaults.PRESET,
    negatives: options.Negatives = defaults.NEGATIVES,
    seed: options.Seed = 0,
    record_len: options.RecordLen = defaults.RECORD_LEN,
    confidence: float = typer.Option(0.95, help="Level of the mean's t CI (ref's figure: 0.8)."),
    llm_model: options.LlmModel = None,
    llm_base_url: options.LlmBaseUrl = None,
    api_key_env: options.ApiKeyEnv = defaults.LLM_API_KEY_ENV,
    concurrency: options.Concurrency = defaults.LLM_CONCURRENCY,
    llm_timeout: llm_options.LlmTimeout = None,
    llm_max_tokens: llm_options.LlmMaxTokens = None,
    llm_context: llm_options.LlmContext = None,
    progress: options.Progress = True,
) -> None:
    """Explain features at each rule cap (tree or one-shot), score them, and report polysemanticity."""
    from sae_workbench.evaluation.reproductions.rule_cap_sweep import rule_cap_sweep
    from sae_workbench.evaluation.scorers.base import ScoreBackends, ScoreConfigError
    from sae_workbench.explainers.base import ExplainConfig
    from sae_workbench.explainers.simulate import LLMSimulator
    from sae_workbench.store import Store

    try:
        caps = [int(c) for c in rule_caps.split(",") if c.strip()]
    except ValueError:
        raise ScoreConfigError(f"bad --rule-caps {rule_caps!r}: use a list like 1,2,3,4,5") from None
    status = llm_options.llm_endpoint(
        llm_model, llm_base_url, api_key_env, concurrency, llm_timeout, llm_max_tokens, llm_context
    )
    st = Store.open(store)
    d_sae = st.get_sae(sae).d_sae
    backends = ScoreBackends()
    llm = status.config if status.configured else None
    if llm is not None:
        from sae_workbench.llm.cache import StoreCache
        from sae_workbench.llm.client import LLMClient

        backends.simulator = LLMSimulator(LLMClient(llm, cache=StoreCache(st)), tag="score")
    else:
        typer.secho(
            f"notice: {status.notice} (the lexical proposer and simulator run offline)", fg="yellow", err=True
        )
    config = ExplainConfig(explainer, negatives=negatives, seed=seed, record_len=record_len)
    result = rule_cap_sweep(
        st, sae, options.parse_features(features, d_sae), caps, explain=config, method=explainer, preset=preset,
        llm=llm, backends=backends, confidence=confidence,
        concurrency=concurrency, progress=progress,
    )  # fmt: skip
    header = "feature\t" + "\t".join(f"cap{c}" for c in result.caps) + "\tpolysemanticity"
    typer.echo(header)
    for f, by_cap in result.scores.items():
        cells = "\t".join("nan" if v != v else f"{v:.3f}" for v in by_cap.values())
        typer.echo(
            f"{f}\t{cells}\t{result.polysemanticity[f] if result.polysemanticity[f] is not None else '-'}"
        )
    s = result.summary
    typer.echo(
        f"{sae} ({st.get_sae(sae).hook}): mean polysemanticity {s.mean:.2f} "
        f"[{s.low:.2f}, {s.high:.2f}] ({confidence:.0%} t CI) over {s.n} features "
        f"({len(result.polysemanticity) - s.n} skipped: best score <= 0 or none)"
    )
