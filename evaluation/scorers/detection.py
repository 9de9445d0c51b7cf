"""Detection and fuzzing scorers, delphi-style (Paulo et al. 2024, "Automatically Interpreting Millions of Features
in Large Language Models", github.com/EleutherAI/delphi).

- Detection: a classifier sees whole windows (positives and negatives of one source) and says which ones activate
  the feature according to the explanation.
- Fuzzing: it sees windows with some tokens highlighted and says whether every highlighted token is one the feature
  fires on. As in delphi, three kinds of item: each positive highlighted on its truly active tokens (label 1); the
  same positive mis-highlighted on as many tokens where the feature does NOT fire (label 0); each negative of the
  chosen source highlighted on as many random tokens as a randomly drawn positive has active (label 0). The
  mis-highlighted positives are what separates a correct explanation from an over-broad one: both call the true
  highlights correct, but only the over-broad one also calls wrong tokens of the same window correct. delphi gives
  mis-highlighted items ceil(mean active count over the test positives) highlights; we give each one its own
  positive's count, so the number of highlights never tells the label apart. All random choices come from `seed`.
Metrics: accuracy, F1, balanced accuracy (evaluation.scoring.classification_metrics).

Classifiers: `LLMClassifier` (delphi-style prompts, several windows per call, answers a strict JSON 0/1 array) or,
offline, `LexicalRuleClassifier` — lexical rule matching through a simulator, named as such in every score.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol, Self

import numpy as np

from sae_workbench.evaluation.base import (
    ScoreBackends,
    ScoreConfig,
    ScoreOutcome,
    ScorerDefaults,
    TestRecords,
)
from sae_workbench.evaluation.prompts.detection import (
    DETECTION_PROMPT_VERSION,
    FUZZING_PROMPT_VERSION,
    detection_messages,
    fuzzing_messages,
    highlight,
)
from sae_workbench.evaluation.scoring import ClassificationMetrics, classification_metrics
from sae_workbench.evaluation.simulation import (
    FALSE_POSITIVE_LEVEL,
    ScorableExplanation,
    scorable_explanation,
    simulate_explanation,
)
from sae_workbench.examples.records import Record
from sae_workbench.explainers.lexical import LexicalSimulator
from sae_workbench.explainers.simulate import Simulator
from sae_workbench.llm.client import LLMClient, LLMRequest
from sae_workbench.llm.jsonparse import as_int_list, parse_json_strict
from sae_workbench.status import Status
from sae_workbench.store import ExplanationRecord

DETECTION_SCORER_VERSION = "detection-v1"
# v2: adds mis-highlighted positives (delphi) and judges highlights correct only when every one is predicted active.
FUZZING_SCORER_VERSION = "fuzzing-v2"

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
                self.client.complete_parsed(LLMRequest(messages, tag=self.tag), _parse_binary(len(batch)))
            )
        answers = await asyncio.gather(*calls)
        return np.array([bool(v) for a in answers for v in a.value], dtype=bool)


async def score_items(
    classifier: Classifier, task: Task, explanation: ScorableExplanation, items: Sequence[ClassificationItem]
) -> ClassificationMetrics:
    """Classify built items and compute accuracy / F1 / balanced accuracy against their labels."""
    preds = await classifier.classify(task, explanation, items)
    return classification_metrics(preds, np.array([it.label for it in items], dtype=bool))


async def score_classification(
    classifier: Classifier,
    task: Task,
    explanation: ScorableExplanation,
    positives: Sequence[Record],
    negatives: Sequence[Record],
    seed: int = 0,
) -> ClassificationMetrics:
    """Build the task's items, classify them, and compute accuracy / F1 / balanced accuracy."""
    items = classification_items(task, positives, negatives, seed)
    return await score_items(classifier, task, explanation, items)


class DetectionScorer(ScorerDefaults):
    """Balanced accuracy of telling test positives from test negatives by the explanation (delphi's detection)."""

    name: ClassVar[str] = "detection"
    version: ClassVar[str] = DETECTION_SCORER_VERSION
    headline: ClassVar[str] = "balanced_accuracy"
    uses_test_set: ClassVar[bool] = True
    uses_negatives: ClassVar[bool] = True
    task: ClassVar[Task] = "detection"

    def __init__(self, classifier: Classifier, seed: int = 0) -> None:
        """Classify with `classifier`; `seed` draws fuzzing's highlights."""
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

    async def score(self, explanation: ExplanationRecord, tests: TestRecords | None) -> ScoreOutcome:
        """Classify the task's items and compute the metrics."""
        assert tests is not None
        scorable = scorable_explanation(explanation.text, explanation.rules)
        items = classification_items(self.task, tests.positives, tests.negatives, seed=self.seed)
        metrics: dict[str, Any] = dict(
            (await score_items(self.classifier, self.task, scorable, items)).to_dict()
        )
        if self.task == "fuzzing":
            # delphi's mis-highlighted positives (label 0) next to the correctly highlighted ones and the negatives.
            metrics["n_mis_highlighted"] = sum(it.kind == "mis_highlighted" for it in items)
        return ScoreOutcome(Status.OK, metrics, self.headline)


class FuzzingScorer(DetectionScorer):
    """Balanced accuracy of judging highlighted tokens (delphi's fuzzing; see the module docstring)."""

    name: ClassVar[str] = "fuzzing"
    version: ClassVar[str] = FUZZING_SCORER_VERSION
    task: ClassVar[Task] = "fuzzing"
