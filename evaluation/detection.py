"""Detection and fuzzing scorers, delphi-style (Paulo et al. 2024, "Automatically Interpreting Millions of Features
in Large Language Models", github.com/EleutherAI/delphi).

- Detection: a classifier sees whole windows (positives and negatives of one source) and says which ones activate
  the feature according to the explanation.
- Fuzzing: it sees windows with some tokens highlighted and says whether the highlights are the tokens the
  feature fires on. Positives are highlighted on their truly active tokens (label 1); negatives get the same number
  of highlights at random positions (label 0). delphi additionally mis-highlights some positives; we do not.
Metrics: accuracy, F1, balanced accuracy (evaluation.scoring.classification_metrics).

Classifiers: `LLMClassifier` (delphi-style prompts, several windows per call, answers a strict JSON 0/1 array) or,
offline, `LexicalRuleClassifier` — lexical rule matching through a simulator, named as such in every score.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

from evaluation.prompts.detection import (
    DETECTION_PROMPT_VERSION,
    FUZZING_PROMPT_VERSION,
    detection_messages,
    fuzzing_messages,
    highlight,
)
from evaluation.scoring import ClassificationMetrics, classification_metrics
from evaluation.simulation import FALSE_POSITIVE_LEVEL, ScorableExplanation, simulate_explanation
from explainers.jsonparse import as_int_list, parse_json_strict
from explainers.llm import LLMClient, LLMRequest
from explainers.records import Record
from explainers.simulate import Simulator

DETECTION_SCORER_VERSION = "detection-v1"
FUZZING_SCORER_VERSION = "fuzzing-v1"

Task = Literal["detection", "fuzzing"]


@dataclass(frozen=True)
class ClassificationItem:
    """One window to classify."""

    record: Record
    """The window's tokens and true activations."""
    label: bool
    """True when the window activates (detection) or the highlights are correct (fuzzing)."""
    highlighted: np.ndarray | None = None
    """(T,) bool highlighted tokens (fuzzing only)."""


def detection_items(positives: Sequence[Record], negatives: Sequence[Record]) -> list[ClassificationItem]:
    """Positives labelled 1, negatives labelled 0, whole windows."""
    return [ClassificationItem(r, True) for r in positives] + [
        ClassificationItem(r, False) for r in negatives
    ]


def fuzzing_items(
    positives: Sequence[Record], negatives: Sequence[Record], seed: int
) -> list[ClassificationItem]:
    """Positives highlighted on their active tokens (label 1); each negative highlighted on as many random tokens
    as a positive drawn at random has (label 0). Seeded, so the same negatives get the same highlights."""
    rng = np.random.default_rng(seed)
    items = [ClassificationItem(r, True, r.acts > 0) for r in positives]
    counts = [int(np.sum(r.acts > 0)) for r in positives if np.any(r.acts > 0)] or [1]
    for r in negatives:
        k = min(len(r), int(rng.choice(counts)))
        marked = np.zeros(len(r), dtype=bool)
        if k:
            marked[rng.choice(len(r), size=k, replace=False)] = True
        items.append(ClassificationItem(r, False, marked))
    return items


class Classifier(Protocol):
    """Says, per item, whether the explanation predicts it activates (detection) / is correctly highlighted."""

    name: str
    """Recorded as provenance: 'lexical-rule-match' or 'llm:<model>'."""

    async def classify(
        self, task: Task, explanation: ScorableExplanation, items: Sequence[ClassificationItem]
    ) -> np.ndarray:
        """(N,) bool predictions."""
        ...


class LexicalRuleClassifier:
    """Offline classifier: lexical rule matching through a simulator (not an LLM).

    Detection: a window is predicted positive when some token's simulated activation exceeds 1 (the same level the
    simulation scorer counts as a false positive). Fuzzing: highlights are judged correct when at least half of the
    highlighted tokens are simulated above 1.
    """

    def __init__(self, simulator: Simulator) -> None:
        """Match with `simulator` (the lexical simulator offline)."""
        self.simulator = simulator
        self.name = f"{simulator.name}-rule-match"

    async def classify(
        self, task: Task, explanation: ScorableExplanation, items: Sequence[ClassificationItem]
    ) -> np.ndarray:
        """(N,) bool predictions from simulated activations."""
        preds = await simulate_explanation(self.simulator, explanation, [it.record for it in items])
        out = np.zeros(len(items), dtype=bool)
        for i, (it, p) in enumerate(zip(items, preds, strict=True)):
            fires = np.asarray(p) > FALSE_POSITIVE_LEVEL
            if task == "detection":
                out[i] = bool(fires.any())
            else:
                marked = it.highlighted if it.highlighted is not None else np.zeros(len(fires), dtype=bool)
                out[i] = bool(marked.any()) and float(fires[marked].mean()) >= 0.5
        return out


def _parse_binary(n: int):
    """A parser accepting exactly `n` integers 0/1 as a JSON array (ValueError → re-ask)."""

    def parse(text: str) -> list[int]:
        return as_int_list(parse_json_strict(text), length=n, lo=0, hi=1)

    return parse


class LLMClassifier:
    """delphi-style LLM classifier: `batch_size` windows per call, answers a JSON array of 0/1."""

    def __init__(self, client: LLMClient, batch_size: int = 5, tag: str = "classify") -> None:
        """Use `client`; delphi shows several examples per prompt (default 5 here)."""
        self.client = client
        self.batch_size = batch_size
        self.tag = tag
        self.name = f"llm:{client.config.model}"

    @staticmethod
    def prompt_version(task: Task) -> str:
        """Prompt version of a task."""
        return DETECTION_PROMPT_VERSION if task == "detection" else FUZZING_PROMPT_VERSION

    async def classify(
        self, task: Task, explanation: ScorableExplanation, items: Sequence[ClassificationItem]
    ) -> np.ndarray:
        """(N,) bool predictions, batch by batch, in item order."""
        import asyncio

        batches = [items[i : i + self.batch_size] for i in range(0, len(items), self.batch_size)]
        calls = []
        for batch in batches:
            if task == "detection":
                messages = detection_messages(explanation.text, ["".join(it.record.tokens) for it in batch])
            else:
                texts = [
                    highlight(it.record.tokens, list(it.highlighted if it.highlighted is not None else []))
                    for it in batch
                ]
                messages = fuzzing_messages(explanation.text, texts)
            calls.append(
                self.client.complete_parsed(LLMRequest(messages, tag=self.tag), _parse_binary(len(batch)))
            )
        answers = await asyncio.gather(*calls)
        return np.array([bool(v) for a in answers for v in a.value], dtype=bool)


async def score_classification(
    classifier: Classifier,
    task: Task,
    explanation: ScorableExplanation,
    positives: Sequence[Record],
    negatives: Sequence[Record],
    seed: int = 0,
) -> ClassificationMetrics:
    """Build the task's items, classify them, and compute accuracy / F1 / balanced accuracy."""
    items = (
        detection_items(positives, negatives)
        if task == "detection"
        else fuzzing_items(positives, negatives, seed)
    )
    preds = await classifier.classify(task, explanation, items)
    return classification_metrics(preds, np.array([it.label for it in items], dtype=bool))
