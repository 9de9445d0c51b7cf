"""Detection scorer and the classifiers it shares with fuzzing, delphi-style (Paulo et al. 2024, "Automatically
Interpreting Millions of Features in Large Language Models", github.com/EleutherAI/delphi).

Detection: a classifier sees whole windows (positives and negatives of one source) and says which ones activate the
feature according to the explanation. Fuzzing (`evaluation.scorers.fuzzing`) asks the same classifiers about
highlighted tokens. Metrics: accuracy, F1, balanced accuracy (evaluation.scorers.metrics.classification_metrics).

Classifiers: `LLMClassifier` (delphi-style prompts, several windows per call, answers a strict JSON 0/1 array) or,
offline, `LexicalRuleClassifier` — lexical rule matching through a simulator, named as such in every score.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol, Self

import numpy as np

from sae_workbench.evaluation.scorers.base import (
    ScoreBackends,
    ScoreConfig,
    ScoreOutcome,
    ScorerDefaults,
    TestRecords,
)
from sae_workbench.evaluation.scorers.metrics import ClassificationMetrics, classification_metrics
from sae_workbench.evaluation.scorers.prompts.detection import (
    DETECTION_PROMPT_VERSION,
    FUZZING_PROMPT_VERSION,
    binary_schema,
    detection_messages,
    fuzzing_messages,
    highlight,
)
from sae_workbench.evaluation.scorers.simulation import (
    FALSE_POSITIVE_LEVEL,
    ScorableExplanation,
    scorable_explanation,
    simulate_explanation,
)
from sae_workbench.examples.records import Record
from sae_workbench.explainers.lexical_simulator import LexicalSimulator
from sae_workbench.explainers.simulate import Simulator
from sae_workbench.llm.client import LLMClient, LLMRequest
from sae_workbench.llm.jsonparse import as_int_list, parse_json_strict
from sae_workbench.status import Status
from sae_workbench.store import ExplanationRecord

DETECTION_SCORER_VERSION = "detection-v1"

Task = Literal["detection", "fuzzing"]
ItemKind = Literal["positive", "mis_highlighted", "negative"]


@dataclass(frozen=True)
class ClassificationItem:
    """One window to classify."""

    record: Record
    """The window's tokens and true activations."""
    label: bool
    """True when the window activates (detection) or the highlights are correct (fuzzing)."""
    highlighted: np.ndarray | None = None
    """(T,) bool highlighted tokens (fuzzing only)."""
    kind: ItemKind = "positive"
    """positive (whole window or true highlights), mis_highlighted (a positive highlighted where the feature does
    not fire; fuzzing only) or negative."""


def detection_items(positives: Sequence[Record], negatives: Sequence[Record]) -> list[ClassificationItem]:
    """Positives labelled 1, negatives labelled 0, whole windows."""
    return [ClassificationItem(r, True) for r in positives] + [
        ClassificationItem(r, False, kind="negative") for r in negatives
    ]


class Classifier(Protocol):
    """Says, per item, whether the explanation predicts it activates (detection) / is correctly highlighted."""

    name: str
    """Recorded as provenance: 'lexical-rule-match' or 'llm:<model>'."""

    def prompt_version(self, task: Task) -> str:
        """Version of the prompt it sends for `task` ('' without one)."""
        ...

    async def classify(
        self, task: Task, explanation: ScorableExplanation, items: Sequence[ClassificationItem]
    ) -> np.ndarray:
        """(N,) bool predictions."""
        ...


class LexicalRuleClassifier:
    """Offline classifier: lexical rule matching through a simulator (not an LLM).

    A token is predicted active when its simulated activation exceeds 1 (the level the simulation scorer counts as
    a false positive). Detection: a window is predicted positive when some token is predicted active. Fuzzing:
    highlights are judged correct when every highlighted token is predicted active and at least one is highlighted
    — delphi's own rule ("an example is only correct if every marked token is representative of the feature"), which
    the fuzzing prompt asks the LLM classifier too.
    """

    def __init__(self, simulator: Simulator) -> None:
        """Match with `simulator` (the lexical simulator offline)."""
        self.simulator = simulator
        self.name = f"{simulator.name}-rule-match"

    def prompt_version(self, task: Task) -> str:
        """The simulator's prompt version (lexical matching has none)."""
        return str(getattr(self.simulator, "prompt_version", ""))

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
                out[i] = bool(marked.any()) and bool(fires[marked].all())
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

    def prompt_version(self, task: Task) -> str:
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
                self.client.complete_parsed(
                    LLMRequest(
                        messages, tag=self.tag, schema=binary_schema(len(batch)), schema_name="labels"
                    ),
                    _parse_binary(len(batch)),
                )
            )
        answers = await asyncio.gather(*calls)
        return np.array([bool(v) for a in answers for v in a.value], dtype=bool)


async def score_items(
    classifier: Classifier, task: Task, explanation: ScorableExplanation, items: Sequence[ClassificationItem]
) -> ClassificationMetrics:
    """Classify built items and compute accuracy / F1 / balanced accuracy against their labels."""
    preds = await classifier.classify(task, explanation, items)
    return classification_metrics(preds, np.array([it.label for it in items], dtype=bool))


class DetectionScorer(ScorerDefaults):
    """Balanced accuracy of telling test positives from test negatives by the explanation (delphi's detection)."""

    name: ClassVar[str] = "detection"
    version: ClassVar[str] = DETECTION_SCORER_VERSION
    headline: ClassVar[str] = "balanced_accuracy"
    uses_test_set: ClassVar[bool] = True
    uses_negatives: ClassVar[bool] = True
    needs_negatives: ClassVar[bool] = True  # balanced accuracy over positives alone is recall
    task: ClassVar[Task] = "detection"

    def __init__(self, classifier: Classifier, seed: int = 0) -> None:
        """Classify with `classifier`; `seed` draws fuzzing's highlights (unused by detection)."""
        self.classifier = classifier
        self.seed = seed

    @classmethod
    def from_backends(cls, config: ScoreConfig, backends: ScoreBackends) -> Self:
        """The backends' classifier, or lexical rule matching through their simulator."""
        clf = backends.classifier or LexicalRuleClassifier(backends.simulator or LexicalSimulator())
        return cls(clf, config.seed)

    def backend(self) -> str:
        """The classifier's name."""
        return self.classifier.name

    def prompt_version(self) -> str:
        """The classifier's prompt version for this task ('' for lexical rule matching)."""
        return self.classifier.prompt_version(self.task)

    def items(self, tests: TestRecords) -> list[ClassificationItem]:
        """The windows to classify: the test positives (label 1) and negatives (label 0), whole."""
        return detection_items(tests.positives, tests.negatives)

    def item_counts(self, items: Sequence[ClassificationItem]) -> dict[str, Any]:
        """Counts of item kinds recorded beside the metrics (none for detection)."""
        return {}

    async def score(self, explanation: ExplanationRecord, tests: TestRecords | None) -> ScoreOutcome:
        """Classify the task's items and compute the metrics."""
        assert tests is not None
        scorable = scorable_explanation(explanation.text, explanation.rules)
        items = self.items(tests)
        metrics: dict[str, Any] = dict(
            (await score_items(self.classifier, self.task, scorable, items)).to_dict()
        )
        metrics.update(self.item_counts(items))
        return ScoreOutcome(Status.OK, metrics, self.headline)
