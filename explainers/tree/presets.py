"""The tree search's settings: `TreeConfig` and its presets (`default`: the spec's; `paper`: the reference's paper
runs, docs/deviations-tree.md)."""

from __future__ import annotations

from dataclasses import dataclass

from sae_workbench.errors import WorkbenchError
from sae_workbench.examples.rules import DEFAULT_RULE_CAP


@dataclass(frozen=True)
class TreeConfig:
    """Search settings. The defaults are the spec's (tree-explainer.md, from ref `complementary_sentences.py`);
    `TreeConfig.paper()` sets every parameter to the reference's paper runs (fidelity audit §2.1-2.2)."""

    roots: int = 3
    """Root explanations sampled from the train positives (paper: 3)."""
    branching: int = 2
    """Children proposed per node (paper: 2)."""
    width: int = 3
    """Children kept per level, by train score (spec: 3; ref's paper runs: 2)."""
    depth: int = 3
    """Rounds of revision after the roots (spec: 3; ref's paper runs: 2)."""
    stop_score: float = 0.9
    """Stop when the best train score reaches this (paper: 0.9)."""
    temperature: float = 1.2
    """Proposer sampling temperature of the revisions (paper: 1.2)."""
    rule_cap: int = DEFAULT_RULE_CAP
    """Most rules per explanation (paper: 5)."""
    root_temperature: float | None = None
    """Sampling temperature of the roots (None: `temperature`; ref: 1.0, `OneShotExplainerParams`)."""
    root_few_shot: bool = False
    """Show the roots' prompt 5 worked examples first (ref: yes, `RecordExampleSet.ORIGINAL`; ours are our own)."""
    train_negatives: bool = True
    """The train split holds its negatives too (ref's `--include_train_negatives` variant; ref default: no)."""
    score_discretised: bool = False
    """Score train and valid against the discretised 0..5 values, as ref does (`format_records` before scoring);
    False: raw activations, as the test scores are."""
    stop_on_roots: bool = True
    """Check the stop rule on the roots too (ref checks only after each level's pruning)."""
    preset: str = "default"
    """Name of the preset these settings came from (provenance and config key)."""

    @classmethod
    def paper(cls, rule_cap: int = DEFAULT_RULE_CAP) -> TreeConfig:
        """The reference's paper runs (ref `explainer_comparison.py:145-158`, `explainer.py:210,294-309,450`,
        `experiment.py:234-244`): depth 2, width 2, 3 roots at temperature 1.0 with 5 few-shot examples, children at
        1.2, rule cap 5, train positives only, train/valid scored on the 0..5 values, stop rule after pruning."""
        return cls(roots=3, branching=2, width=2, depth=2, stop_score=0.9, temperature=1.2, rule_cap=rule_cap,
                   root_temperature=1.0, root_few_shot=True, train_negatives=False, score_discretised=True,
                   stop_on_roots=False, preset="paper")  # fmt: skip

    @classmethod
    def smoke(cls, rule_cap: int = DEFAULT_RULE_CAP) -> TreeConfig:
        """The smallest search (1 root, 1 child per node, width 1, depth 1): checks that the tree runs end to end on a
        real LLM in a few calls per feature (the demo's LLM stage); not a setting to report results with."""
        return cls(roots=1, branching=1, width=1, depth=1, rule_cap=rule_cap, preset="smoke")

    @property
    def roots_temperature(self) -> float:
        """The temperature roots are sampled at."""
        return self.temperature if self.root_temperature is None else self.root_temperature


TREE_PRESETS = ("default", "paper", "smoke")
"""Names `tree_preset` accepts."""


def tree_preset(name: str, rule_cap: int = DEFAULT_RULE_CAP) -> TreeConfig:
    """The search settings a preset names ('default': the spec's; 'paper': the reference's paper runs; 'smoke': the
    smallest search)."""
    if name == "paper":
        return TreeConfig.paper(rule_cap)
    if name == "default":
        return TreeConfig(rule_cap=rule_cap)
    if name == "smoke":
        return TreeConfig.smoke(rule_cap)
    raise TreePresetError(f"unknown tree preset {name!r}; choose one of {', '.join(TREE_PRESETS)}")


class TreePresetError(WorkbenchError):
    """A preset name that does not exist."""
