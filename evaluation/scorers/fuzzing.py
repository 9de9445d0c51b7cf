"""Fuzzing scorer, delphi-style (Paulo et al. 2024, "Automatically Interpreting Millions of Features in Large Language
Models", github.com/EleutherAI/delphi).

A classifier (`evaluation.scorers.detection`: LLM or lexical rule matching) sees windows with some tokens highlighted
and says whether every highlighted token is one the feature fires on. As in delphi, three kinds of item: each positive
highlighted on its truly active tokens (label 1); the same positive mis-highlighted on as many tokens where the
feature does NOT fire (label 0); each negative of the chosen source highlighted on as many random tokens as a randomly
drawn positive has active (label 0). The mis-highlighted positives are what separates a correct explanation from an
over-broad one: both call the true highlights correct, but only the over-broad one also calls wrong tokens of the
same window correct. delphi gives mis-highlighted items ceil(mean active count over the test positives) highlights;
we give each one its own positive's count, so the number of highlights never tells the label apart. All random
choices come from `seed`. Metrics: accuracy, F1, balanced accuracy (evaluation.scorers.metrics).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from sae_workbench.evaluation.scorers.base import TestRecords
from sae_workbench.evaluation.scorers.detection import (
    ClassificationItem,
    Classifier,
    DetectionScorer,
    Task,
    detection_items,
    score_items,
)
from sae_workbench.evaluation.scorers.metrics import ClassificationMetrics
from sae_workbench.evaluation.scorers.simulation import ScorableExplanation
from sae_workbench.examples.records import Record

# v2: adds mis-highlighted positives (delphi) and judges highlights correct only when every one is predicted active.
FUZZING_SCORER_VERSION = "fuzzing-v2"


def _random_marks(n_tokens: int, candidates_K: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """(n_tokens,) bool with `k` of `candidates_K` marked, drawn without replacement."""
    marked = np.zeros(n_tokens, dtype=bool)
    if k:
        marked[rng.choice(candidates_K, size=k, replace=False)] = True
    return marked


def fuzzing_items(
    positives: Sequence[Record], negatives: Sequence[Record], seed: int
) -> list[ClassificationItem]:
    """delphi's fuzzing items, in this order: positives highlighted on their active tokens (label 1); the same
    positives highlighted on as many tokens where the feature does not fire (label 0; a positive with no active or
    no inactive token gets no such copy; capped at its inactive tokens); negatives highlighted on as many random
    tokens as a positive drawn at random has active (label 0). Seeded: the mis-highlights are drawn first, so they
    do not depend on the negatives, and the same negatives get the same highlights."""
    rng = np.random.default_rng(seed)
    items = [ClassificationItem(r, True, r.acts > 0) for r in positives]
    for r in positives:
        active = r.acts > 0
        idle_K = np.flatnonzero(~active)
        k = min(int(active.sum()), len(idle_K))
        if k:
            items.append(
                ClassificationItem(r, False, _random_marks(len(r), idle_K, k, rng), "mis_highlighted")
            )
    counts = [int(np.sum(r.acts > 0)) for r in positives if np.any(r.acts > 0)] or [1]
    for r in negatives:
        k = min(len(r), int(rng.choice(counts)))
        items.append(
            ClassificationItem(r, False, _random_marks(len(r), np.arange(len(r)), k, rng), "negative")
        )
    return items


def classification_items(
    task: Task, positives: Sequence[Record], negatives: Sequence[Record], seed: int = 0
) -> list[ClassificationItem]:
    """The task's items (detection: whole windows; fuzzing: highlighted windows, seeded)."""
    if task == "detection":
        return detection_items(positives, negatives)
    return fuzzing_items(positives, negatives, seed)


async def score_classification(
    classifier: Classifier,
    task: Task,
    explanation: ScorableExplanation,
    positives: Sequence[Record],
    negatives: Sequence[Record],
    seed: int = 0,
) -> ClassificationMetrics:
    """Build the task's items (either task), classify them, and compute accuracy / F1 / balanced accuracy."""
    items = classification_items(task, positives, negatives, seed)
    return await score_items(classifier, task, explanation, items)


class FuzzingScorer(DetectionScorer):
    """Balanced accuracy of judging highlighted tokens (delphi's fuzzing; see the module docstring)."""

    name: ClassVar[str] = "fuzzing"
    version: ClassVar[str] = FUZZING_SCORER_VERSION
    task: ClassVar[Task] = "fuzzing"
    needs_negatives: ClassVar[bool] = False  # mis-highlighted positives are its negative class

    def items(self, tests: TestRecords) -> list[ClassificationItem]:
        """delphi's fuzzing items of the test records, drawn from the scorer's seed."""
        return fuzzing_items(tests.positives, tests.negatives, self.seed)

    def item_counts(self, items: Sequence[ClassificationItem]) -> dict[str, Any]:
        """delphi's mis-highlighted positives (label 0) next to the correctly highlighted ones and the negatives."""
        return {"n_mis_highlighted": sum(it.kind == "mis_highlighted" for it in items)}
