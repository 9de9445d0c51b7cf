"""The tree paper's rule-cap sweep (Ma, Pfrommer & Sojoudi, NeurIPS 2025): explain every feature at rule caps
r = 1..5, score each explanation's test third with the simulation scorer, and measure polysemanticity per feature
(`evaluation.scorers.polysemanticity.tree_polysemanticity`: the smallest cap whose best test score over caps ≤ r reaches 0.9 of
the best over all caps) and its mean over the SAE's features (one layer) with a t CI.

    result = rule_cap_sweep(store, sae_id, range(50), (1, 2, 3, 4, 5), preset="paper", llm=LLMConfig(...))
    result.polysemanticity[7], result.summary.mean

`workbench polysemanticity-sweep` is its command line.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sae_workbench.evaluation.scorers.base import ScoreBackends, ScoreConfig, ScoreConfigError
from sae_workbench.evaluation.scorers.job import run_scoring, score_key
from sae_workbench.evaluation.scorers.metrics import MeanCI
from sae_workbench.evaluation.scorers.polysemanticity import (
    tree_polysemanticity,
    tree_polysemanticity_summary,
)
from sae_workbench.evaluation.scorers.registry import make_scorer
from sae_workbench.explainers.base import ExplainConfig
from sae_workbench.explainers.job import ExplainJob, config_key
from sae_workbench.explainers.registry import make_explainer
from sae_workbench.status import Status
from sae_workbench.store import Store

if TYPE_CHECKING:
    from sae_workbench.llm.config import LLMConfig

__all__ = ["RuleCapSweep", "rule_cap_sweep"]


@dataclass(frozen=True)
class RuleCapSweep:
    """What `rule_cap_sweep` measured for one SAE."""

    caps: tuple[int, ...]
    """Rule caps explained with, ascending."""
    scores: dict[int, dict[int, float]]
    """feature → cap → test score (simulation Pearson; NaN where unscored, e.g. a dead feature)."""
    explanation_ids: dict[int, dict[int, int]]
    """feature → cap → stored explanation id."""
    polysemanticity: dict[int, int | None]
    """feature → smallest cap reaching 0.9 of its best score (None: skipped, best ≤ 0 or NaN)."""
    summary: MeanCI
    """Mean polysemanticity over the features not skipped, with its t CI."""
    confidence: float = 0.95
    """Level of the CI."""
    provenance: dict[str, Any] = field(default_factory=dict)
    """Preset, negatives, seed, record length, scorer backend."""


def rule_cap_sweep(
    store: Store,
    sae_id: str,
    features: Sequence[int],
    caps: Sequence[int] = (1, 2, 3, 4, 5),
    *,
    explain: ExplainConfig | None = None,
    method: str = "tree",
    preset: str = "default",
    llm: LLMConfig | None = None,
    backends: ScoreBackends | None = None,
    confidence: float = 0.95,
    concurrency: int = 8,
    progress: bool = True,
) -> RuleCapSweep:
    """Tree paper's polysemanticity: explain every feature at each rule cap with `method` ('tree', with the preset's
    search settings, or 'oneshot', the spec's one-shot structured explanations; LLM only), resumably (the explain job
    skips what is stored), score each explanation's test third with the simulation scorer, and take the smallest cap
    reaching 0.9 of the best test score per feature (`tree_polysemanticity`)."""
    base = explain or ExplainConfig("tree")
    ordered = tuple(sorted({int(c) for c in caps}))
    if not ordered or ordered[0] < 1:
        raise ScoreConfigError(f"rule caps must be positive integers, got {list(caps)}")
    if method not in ("tree", "oneshot") or (method == "oneshot" and preset != "default"):
        raise ScoreConfigError(
            f"the sweep explains with 'tree' (any preset) or 'oneshot' (default preset), not {method!r} "
            f"with preset {preset!r}"
        )
    feats = sorted({int(f) for f in features})
    backends = backends or ScoreBackends()
    keys: dict[int, dict[int, str]] = {}
    for cap in ordered:
        explainer = make_explainer(replace(base, explainer=method, rule_cap=cap, preset=preset))
        ExplainJob(store, sae_id, explainer, llm, concurrency=concurrency, progress=progress).run(feats)
        keys[cap] = {f: config_key(sae_id, f, explainer, llm) for f in feats}
    by_key = {e.config_key: e for e in store.explanations(sae_id=sae_id, explainer=method)}
    ids = {f: {cap: int(by_key[keys[cap][f]].id or 0) for cap in ordered} for f in feats}
    score_cfg = ScoreConfig(
        "simulation", base.negatives, base.per_split, base.seed, record_length=base.record_len
    )
    run_scoring(store, sae_id, score_cfg, backends, explainer=method, features=feats, progress=progress)
    scorer = make_scorer(score_cfg, backends)
    scores: dict[int, dict[int, float]] = {}
    for f in feats:
        scores[f] = {}
        for cap, eid in ids[f].items():
            want = score_key(eid, score_cfg, scorer)
            found = [s for s in store.scores(explanation_id=eid, scorer=scorer.name) if s.score_key == want]
            value = found[0].metrics.get(scorer.headline) if found and found[0].status is Status.OK else None
            scores[f][cap] = math.nan if value is None else float(value)
    poly = {f: tree_polysemanticity(scores[f]) for f in feats}
    provenance = {"method": method, "preset": preset, "negatives": base.negatives, "seed": base.seed, "record_len": base.record_len,
                  "scorer": scorer.name, "backend": scorer.backend(), "llm": llm.model if llm else ""}  # fmt: skip
    return RuleCapSweep(ordered, scores, ids, poly, tree_polysemanticity_summary(list(poly.values()), confidence),
                        confidence, provenance)  # fmt: skip
