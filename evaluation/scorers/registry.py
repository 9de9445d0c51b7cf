"""The scorers a run can name: adding one is its own file plus one line here.

scorer = make_scorer(ScoreConfig("simulation", "SIMILAR_NEGATIVE"), ScoreBackends())
"""

from __future__ import annotations

from sae_workbench.evaluation.scorers.base import ScoreBackends, ScoreConfig, ScoreConfigError, Scorer
from sae_workbench.evaluation.scorers.complexity import ComplexityScorer
from sae_workbench.evaluation.scorers.cosy import CosyScorer
from sae_workbench.evaluation.scorers.detection import DetectionScorer
from sae_workbench.evaluation.scorers.embedding import EmbeddingScorer
from sae_workbench.evaluation.scorers.fuzzing import FuzzingScorer
from sae_workbench.evaluation.scorers.polysemanticity import PolysemanticityScorer
from sae_workbench.evaluation.scorers.simulation import SimulationScorer

SCORERS: dict[str, type[Scorer]] = {
    "simulation": SimulationScorer,
    "detection": DetectionScorer,
    "fuzzing": FuzzingScorer,
    "embedding": EmbeddingScorer,
    "cosy": CosyScorer,
    "polysemanticity": PolysemanticityScorer,
    "complexity": ComplexityScorer,
}


def scorer_class(name: str) -> type[Scorer]:
    """The scorer class registered under `name`."""
    cls = SCORERS.get(name)
    if cls is None:
        raise ScoreConfigError(f"unknown scorer {name!r}; choose one of {', '.join(SCORERS)}")
    return cls


def make_scorer(config: ScoreConfig, backends: ScoreBackends) -> Scorer:
    """The scorer `config` names, built from the run's components."""
    return scorer_class(config.scorer).from_backends(config, backends)


def headline_metric(scorer: str) -> str | None:
    """The headline metric a registered scorer reports (None for an unknown scorer name)."""
    cls = SCORERS.get(scorer)
    return None if cls is None else cls.headline
