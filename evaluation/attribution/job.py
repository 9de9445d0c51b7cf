"""Batch attribution of stored features: DePass on each feature's top examples, ablation and steering, into the store.

    summary = run_attribution(store, model, sae, sae_id, features=[0, 1, 2], config=AttributeConfig())

Every result is keyed by a hash of what determines it (SAE, feature, window, position, level, method, rule,
temperature, the config's effect settings and this module's version), so a rerun skips what is stored and an
interrupted run resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from sae_lens import SAE
from tqdm import tqdm
from transformer_lens import HookedTransformer

from sae_workbench.evaluation.attribution.baselines import grad_x_input, integrated_gradients
from sae_workbench.evaluation.attribution.depass import depass_components, depass_tokens, depass_upstream
from sae_workbench.evaluation.attribution.effects import DEFAULT_ALPHAS, ablate_feature, steer_feature
from sae_workbench.evaluation.attribution.errors import AttributionError
from sae_workbench.evaluation.attribution.propagate import MLP_RULES, SOFTMAX_TEMPERATURE, MlpRule
from sae_workbench.store import Store
from sae_workbench.store.attributions import AttributionRecord, EffectRecord

log = logging.getLogger(__name__)

# 2: the index's window separator counts as BOS (c7059de) and the softmax rule masks an ungated MLP's zero bias
# share, so results stored under 1 are recomputed on a rerun instead of skipped.
JOB_VERSION = "2"
LEVELS = ("tokens", "components", "upstream")
DEFAULT_LEVELS = ("tokens", "components")
"""What a run attributes unless told otherwise; `upstream` also needs an upstream SAE (`Upstream`)."""
BASELINES = ("grad_x_input", "integrated_gradients")


class AttributeConfigError(AttributionError):
    """The batch attribution was asked for something it does not do."""


@dataclass(frozen=True)
class AttributeConfig:
    """What `run_attribution` computes per feature."""

    examples: int = 3
    """Top examples (highest max activation) attributed per feature, each at its peak position."""
    rule: MlpRule = "softmax"
    """DePass's MLP rule."""
    temperature: float = SOFTMAX_TEMPERATURE
    """Softmax-rule temperature (arXiv 2510.18462: 0.1)."""
    levels: tuple[str, ...] = DEFAULT_LEVELS
    """tokens, components and/or upstream (the last needs an `Upstream` SAE at a lower hook)."""
    baselines: tuple[str, ...] = ()
    """Token baselines also stored: grad_x_input, integrated_gradients."""
    effects: bool = True
    """Zero- and mean-ablation over the examples, and steering from the top example's prefix."""
    alphas: tuple[float, ...] = DEFAULT_ALPHAS
    """Steering strengths, in the feature's activation units."""
    steer_tokens: int = 12
    """Greedy continuation length when steering."""

    def check(self) -> None:
        """Raise AttributeConfigError for unknown levels, baselines or rules."""
        bad = [x for x in self.levels if x not in LEVELS] + [x for x in self.baselines if x not in BASELINES]
        if self.rule not in MLP_RULES:
            bad.append(self.rule)
        if bad or self.examples < 1:
            raise AttributeConfigError(
                f"unknown {bad or 'examples < 1'}: levels are {LEVELS}, baselines {BASELINES}, rules {MLP_RULES}, "
                "and at least 1 example per feature."
            )


@dataclass(frozen=True)
class Upstream:
    """An SAE at a lower residual hook whose features the `upstream` level credits."""

    sae: SAE[Any]
    hook: str
    sae_id: str


@dataclass
class JobSummary:
    """What a per-feature batch job over stored top examples did (attribution, interactions)."""

    features: int = 0
    skipped: int = 0
    """Results already stored (resumed)."""
    no_examples: list[int] = field(default_factory=lambda: list[int]())
    """Features with no activating window in the index."""

    def no_examples_note(self) -> str:
        """ "; no activating window for N features" when there were some, else ""."""
        return f"; no activating window for {len(self.no_examples)} features" if self.no_examples else ""


@dataclass
class AttributeSummary(JobSummary):
    """What a run did."""

    attributions: int = 0
    """New attribution rows stored."""
    effects: int = 0
    """New effect rows stored."""


def top_examples_of(
    store: Store, sae_id: str, features: list[int], n: int, summary: JobSummary, desc: str, progress: bool
) -> Iterator[tuple[int, list[Any], list[Any]]]:
    """(feature, its top `n` examples, their windows) of each feature with examples, under a progress bar;
    counts features and those without an activating window in `summary`."""
    corpus = store.index_progress(sae_id)
    if corpus is None:
        raise AttributionError(f"SAE {sae_id} is not indexed in {store.path}: run `workbench index` first.")
    for feature in tqdm(features, desc=desc, unit="feature", disable=not progress):
        summary.features += 1
        examples = store.top_examples(sae_id, feature, n)
        if not examples:
            summary.no_examples.append(feature)
            continue
        yield feature, examples, store.get_windows(corpus.corpus, [e.window_id for e in examples])


def config_key(**parts: Any) -> str:
    """A stable hash of everything that determines one stored result."""
    text = json.dumps({**parts, "job_version": JOB_VERSION}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _token_methods(config: AttributeConfig) -> list[tuple[str, str, str]]:
    """(level, method, rule) of every attribution stored per example."""
    out = [(level, "depass", config.rule) for level in config.levels]
    return out + [("tokens", b, "") for b in config.baselines]


def _attribute(
    model: HookedTransformer, sae: SAE[Any], hook: str, tokens_N: torch.Tensor, feature: int, position: int,
    level: str, method: str, config: AttributeConfig, upstream: Upstream | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One result's JSON document."""
    if method == "depass" and level == "tokens":
        return depass_tokens(
            model, sae, hook, tokens_N, feature, position, config.rule, config.temperature
        ).to_dict()
    if method == "depass" and level == "upstream" and upstream is not None:
        result = depass_upstream(
            model, sae, hook, tokens_N, feature, upstream.sae, upstream.hook, position, config.rule,
            config.temperature,
        ).to_dict()  # fmt: skip
        return {**result, "upstream_sae_id": upstream.sae_id}
    if method == "depass":
        return depass_components(
            model, sae, hook, tokens_N, feature, position, config.rule, config.temperature
        ).to_dict()
    if method == "grad_x_input":
        return grad_x_input(model, sae, hook, tokens_N, feature, position).to_dict()
    return integrated_gradients(model, sae, hook, tokens_N, feature, position).to_dict()


def run_attribution(
    store: Store,
    model: HookedTransformer,
    sae: SAE[Any],
    sae_id: str,
    features: list[int],
    config: AttributeConfig | None = None,
    progress: bool = True,
    upstream: Upstream | None = None,
) -> AttributeSummary:
    """Attribute each feature's top examples and measure its effects; store everything; skip what is stored."""
    config = config or AttributeConfig()
    config.check()
    if ("upstream" in config.levels) != (upstream is not None):
        raise AttributeConfigError(
            "the upstream level needs an upstream SAE (--upstream-sae), and an upstream SAE needs the upstream level"
        )
    hook = store.get_sae(sae_id).hook
    stored = store.stored_attribution_keys(sae_id)
    summary = AttributeSummary()
    settings = {k: v for k, v in asdict(config).items() if k not in ("examples", "levels", "baselines")}
    for feature, examples, windows in top_examples_of(
        store, sae_id, features, config.examples, summary, "attribute", progress
    ):
        rows: list[AttributionRecord] = []
        for ex, window in zip(examples, windows, strict=True):
            tokens_N = torch.as_tensor(window.tokens, dtype=torch.long)
            for level, method, rule in _token_methods(config):
                extra = (
                    {"upstream": [upstream.sae_id, upstream.hook]}
                    if level == "upstream" and upstream is not None
                    else {}
                )
                key = config_key(
                    sae_id=sae_id, feature=feature, window=ex.window_id, position=ex.max_position, level=level,
                    method=method, rule=rule, temperature=config.temperature if method == "depass" else None, **extra,
                )  # fmt: skip
                if key in stored:
                    summary.skipped += 1
                    continue
                result = _attribute(
                    model, sae, hook, tokens_N, feature, ex.max_position, level, method, config, upstream
                )
                rows.append(
                    AttributionRecord(
                        sae_id, feature, ex.window_id, ex.max_position, level, method, rule, result, key
                    )
                )
        summary.attributions += store.add_attributions(rows)
        if config.effects:
            summary.effects += _effects(store, model, sae, sae_id, hook, feature, examples, windows, config,
                                        settings, stored, summary)  # fmt: skip
    return summary


def _effects(
    store: Store, model: HookedTransformer, sae: SAE[Any], sae_id: str, hook: str, feature: int,
    examples: list[Any], windows: list[Any], config: AttributeConfig, settings: dict[str, Any], stored: set[str],
    summary: AttributeSummary,
) -> int:  # fmt: skip
    """Zero/mean ablation over the example windows and steering from the top example's prefix; stored."""
    ids = [e.window_id for e in examples]
    tokens_BN = torch.stack([torch.as_tensor(w.tokens, dtype=torch.long) for w in windows])
    rows: list[EffectRecord] = []
    for kind in ("zero_ablation", "mean_ablation", "steering"):
        key = config_key(sae_id=sae_id, feature=feature, kind=kind, windows=ids, settings=settings)
        if key in stored:
            summary.skipped += 1
            continue
        if kind == "steering":
            prefix = tokens_BN[0, : examples[0].max_position + 1]
            if prefix.numel() < 2:
                continue
            result = steer_feature(
                model, sae, hook, prefix, feature, config.alphas, config.steer_tokens
            ).to_dict()
        else:
            # Mean-ablation writes the feature's corpus mean (density × mean over active tokens, from the index).
            stats = store.feature_stats(sae_id, feature)
            mode = "zero" if kind == "zero_ablation" else "mean"
            mean = stats.density * stats.mean_value
            result = ablate_feature(
                model, sae, hook, tokens_BN, feature, mode=mode, mean_value=mean
            ).to_dict()
        rows.append(EffectRecord(sae_id, feature, kind, result, key, window_ids=ids))
    return store.add_effects(rows)
