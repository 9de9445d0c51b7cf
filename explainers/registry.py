"""The explainers a run can name: adding one is its own file plus one line here.

explainer = make_explainer(ExplainConfig("tree", negatives="RANDOM_NEGATIVE"))
"""

from __future__ import annotations

from typing import Any

from sae_workbench.explainers.base import ExplainConfig, Explainer, ExplainJobError
from sae_workbench.explainers.lexical import LexicalExplainer
from sae_workbench.explainers.oneshot import OneShotExplainer
from sae_workbench.explainers.prism import PrismExplainer
from sae_workbench.explainers.tree import TreeExplainer

EXPLAINERS: dict[str, type[Explainer[Any]]] = {
    "lexical": LexicalExplainer,
    "oneshot": OneShotExplainer,
    "tree": TreeExplainer,
    "prism": PrismExplainer,
}


def make_explainer(config: ExplainConfig) -> Explainer[Any]:
    """The explainer `config` names, built from its options."""
    cls = EXPLAINERS.get(config.explainer)
    if cls is None:
        raise ExplainJobError(
            f"unknown explainer {config.explainer!r}; choose one of {', '.join(EXPLAINERS)}"
        )
    return cls.from_config(config)
