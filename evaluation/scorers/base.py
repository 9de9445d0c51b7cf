"""What a scorer is: the `Scorer` protocol, its typed outcome, the test records it is handed, and the shared parts.

    class MyScorer:                               # one file: its config, its loading, its algorithm
        name = "mine"; version = "mine-v1"; headline = "auc"; default_explainers = ()
        uses_test_set = True; uses_negatives = True; local_only = ""
        @classmethod
        def check_inputs(cls, inputs: ScorerInputs) -> None: ...   # before any store opens or model loads
        @classmethod
        def from_backends(cls, config: ScoreConfig, backends: ScoreBackends) -> MyScorer: ...  # loads what it needs
        def backend(self) -> str: ...                  # the judging component, recorded and part of the key
        def prompt_version(self) -> str: ...
        def key_params(self) -> dict[str, object]: ...  # what else changes its numbers
        async def prepare(self, explanations) -> None: ...   # once per run (a baseline pool, a client check)
        async def score(self, explanation, tests) -> ScoreOutcome: ...

plus one line in `evaluation/scorers/registry.py`. The score job (`evaluation/scorers/job.py`) keeps the loop: which
explanations, resume by score key, dead features, the test records of the feature's shared split
(`examples.testsets`), provenance and storing. A scorer that needs more than the shared components (CoSy: the model
and the SAE) loads it in `from_backends` from the run's `ScorerInputs`, so `workbench score` and the Ray backend
never switch on a scorer's name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Protocol, Self

import numpy as np

from sae_workbench import defaults
from sae_workbench.errors import WorkbenchError
from sae_workbench.examples.records import Record
from sae_workbench.examples.sampling import NegativeSource
from sae_workbench.examples.testsets import PER_SPLIT, SplitConfig
from sae_workbench.status import Status
from sae_workbench.store import ExplanationRecord, Store

NEGATIVE_SOURCES = tuple(s.value for s in NegativeSource)
SCORE_PRESETS = ("default", "paper")
"""Names `workbench score --preset` takes (a scorer without presets of its own ignores the choice)."""


class ScoreConfigError(WorkbenchError):
    """A scoring option is invalid (unknown scorer or negative source, missing backend)."""


@dataclass(frozen=True)
class ScoreConfig:
    """What to score and how the test records are drawn."""

    scorer: str
    """A name in `evaluation.scorers.registry.SCORERS`: simulation, detection, fuzzing, embedding, cosy, polysemanticity
    (PRISM's, over stored descriptions) or complexity (an LLM rates each rule 0..5)."""
    negatives: str | None = None
    """RANDOM, RANDOM_NEGATIVE, SIMILAR or SIMILAR_NEGATIVE (tree paper default: SIMILAR_NEGATIVE); None: each
    explanation's own (its recorded split), SIMILAR_NEGATIVE where it records none. Unused by scorers without test
    records."""
    per_split: int = PER_SPLIT
    """Positives and negatives per third of the shared split; the test third is scored (tree paper: 10 + 10)."""
    seed: int = defaults.DEFAULT_SEED
    """Seed of the split's draws (the explain run's seed, so both share the split) and of fuzzing's highlights."""
    threshold: float = 0.0
    """A window is non-activating when its max activation is ≤ this (tree paper: 0)."""
    reference_size: int = 400
    """Highest-activating windows that define similarity for close negatives (tree paper: 400)."""
    record_length: int | None = None
    """Crop records to this many tokens around their peak; None: each explanation's own record length (what its
    author was shown; tree paper: 32); WHOLE_WINDOWS (0): whole windows."""
    split_config: SplitConfig | None = None
    """The run's split as the CLI built it (`cli.options.split_config`): its negatives and record length are the
    told values when `negatives` / `record_length` are set, else the fallback for explanations that record no split.
    None: built from the fields above."""

    def __post_init__(self) -> None:
        """Reject unknown negative sources with the valid choices (scorer names are checked by the registry)."""
        if self.negatives is not None and self.negatives not in NEGATIVE_SOURCES:
            raise ScoreConfigError(
                f"unknown negative source {self.negatives!r}; choose one of {', '.join(NEGATIVE_SOURCES)}"
            )
        if self.record_length is not None and self.record_length < 0:
            raise ScoreConfigError(f"record length must be ≥ 0 (0 = whole windows), not {self.record_length}")
        if self.split_config is None:
            length = defaults.RECORD_LEN if self.record_length is None else self.record_length or None
            cfg = SplitConfig(NegativeSource(self.negatives or defaults.NEGATIVES), self.per_split, self.seed,
                              self.threshold, self.reference_size, embed_crop=length,
                              record_length=length)  # fmt: skip
            object.__setattr__(self, "split_config", cfg)

    def split(self) -> SplitConfig:
        """The run's own split (the fallback of `split_for`)."""
        assert self.split_config is not None  # set in __post_init__
        return self.split_config

    def told(self) -> dict[str, object]:
        """The split settings given for this run that override each explanation's own."""
        out: dict[str, object] = {}
        if self.negatives is not None:
            out["negatives"] = self.negatives
        if self.record_length is not None:
            out["record_length"] = self.record_length or None
        return out

    def split_for(self, sampling: Mapping[str, Any]) -> SplitConfig:
        """The split an explanation is scored on: its recorded split (`sampling["split"]`, record length from the
        split or the explainer's `record_len`) with per_split, seed, threshold and reference size of this run, and
        the negatives and record length of this run only where told (`told()`)."""
        run = self.split()
        own = sampling.get("split")
        if isinstance(own, Mapping):
            length = sampling.get("record_len", defaults.RECORD_LEN)
            base = SplitConfig.from_params(own, record_length=length)  # type: ignore[arg-type]
            cfg = replace(run, negatives=base.negatives, record_length=base.record_length,
                          embedding_model=base.embedding_model, embed_crop=base.embed_crop)  # fmt: skip
        else:
            cfg = replace(run, record_length=sampling.get("record_len", run.record_length))  # type: ignore[arg-type]
        told = self.told()
        if "negatives" in told:
            cfg = replace(cfg, negatives=NegativeSource(str(told["negatives"])),
                          embedding_model=run.embedding_model, embed_crop=run.embed_crop)  # fmt: skip
        if "record_length" in told:
            cfg = replace(cfg, record_length=told["record_length"])  # type: ignore[arg-type]
        return cfg


WHOLE_WINDOWS = 0
"""`ScoreConfig.record_length` (and `workbench score --record-length`) value that scores whole windows."""


@dataclass(frozen=True)
class TestRecords:
    """The test records one explanation is scored on."""

    __test__ = False  # a library type, not a pytest class

    positives: list[Record]
    """Positive test records."""
    negatives: list[Record]
    """Negative test records."""
    provenance: dict[str, Any]
    """Source, ids and seed of what was drawn."""


Detail = str | list[Any] | dict[str, Any] | None
"""A non-numeric part of a score (JSON): a text, a list (rules, ratings, per-description rows), an object or null."""


@dataclass(frozen=True)
class ScoreOutcome:
    """One explanation's score: its status, its numeric metrics, which metric is the headline, and what else it
    records that is not a number."""

    status: Status
    """OK, or the recorded reason it could not be scored."""
    metrics: dict[str, float]
    """Metric values (counts included; NaN allowed, stored as null)."""
    headline: str = ""
    """Key of the headline metric in `metrics` ('' when not OK)."""
    details: dict[str, Detail] = field(default_factory=dict)
    """Non-numeric results (the rated rules, per-description rows, an error message), stored beside the metrics."""

    @classmethod
    def failed(cls, status: Status, **values: float | str) -> ScoreOutcome:
        """A recorded failure with what explains it (texts such as `error=` go to the details, numbers to the
        metrics)."""
        metrics: dict[str, float] = {k: v for k, v in values.items() if not isinstance(v, str)}
        return cls(status, metrics, details={k: v for k, v in values.items() if isinstance(v, str)})

    def stored(self) -> dict[str, Any]:
        """The metrics and details as the store's one `metrics` JSON object (NaN becomes null)."""
        merged: dict[str, Any] = {**self.metrics, **self.details}
        return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in merged.items()}


Embedder = Callable[[Sequence[str]], np.ndarray]
"""Maps texts to (N, D) embeddings (normalised or not: similarities are cosines either way)."""


@dataclass(frozen=True)
class ScorerInputs:
    """What a scorer that loads its own components reads (`workbench score` passes its store, SAE and scorer
    options through unchanged; each scorer uses the ones it needs and ignores the rest)."""

    store: Store | None = None
    """The run's store (None: nothing to load from; a scorer then needs its components in the backends)."""
    sae_id: str = ""
    """The SAE being scored."""
    sae_path: Path | None = None
    """The SAE's weights, for a scorer that runs the model and the SAE on new texts (cosy)."""
    preset: str = defaults.PRESET
    """Settings preset of the scorer's own config (cosy: 'default' or 'paper'); one of `SCORE_PRESETS`."""
    control_size: int | None = None
    """Control texts from the held-out corpus slice (cosy; None: the preset's)."""
    step: Callable[[str], None] | None = None
    """Announces each loading step that has no progress bar of its own ('loading model ...'); None: silent."""


@dataclass
class ScoreBackends:
    """The components scorers are built from (offline defaults: lexical simulator and lexical rule matching); each
    scorer's `from_backends` takes the parts it needs and says which are missing."""

    simulator: Any = None
    """Simulator of the simulation scorer and of lexical rule matching (None: the lexical simulator)."""
    classifier: Any = None
    """Classifier of detection/fuzzing (None: lexical rule matching through `simulator`)."""
    embedder: Embedder | None = None
    """Text embedder for the embedding and polysemanticity scorers (None: all-MiniLM-L6-v2)."""
    generator: Any = None
    """CoSy text generator (LLMGenerator, or offline CorpusRuleGenerator); cosy loads one when not given."""
    activation_fn_for: Callable[[int], Any] | None = None
    """feature → mean-activation-per-text function (model + SAE forward); cosy loads one when not given."""
    control_texts: Sequence[str] = ()
    """CoSy control texts (a fixed held-out slice of the corpus); cosy loads them when not given."""
    llm_usage: Callable[[], dict[str, Any]] | None = None
    """Returns the LLM usage so far (tokens, seconds), recorded as a per-score delta."""
    llm_client: Any = None
    """LLM that rates rule complexity; required by complexity (no offline rating); cosy's generator when set."""
    inputs: ScorerInputs = field(default_factory=ScorerInputs)
    """Where a scorer loads components it is not handed (cosy: model, SAE, control texts from the store)."""
    _memo: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    """Embeddings computed so far, per text (a batch's explanations share their features' test windows)."""

    def embed(self) -> Embedder:
        """The embedder (loading the default on first use), memoised per text."""
        if self.embedder is None:
            from sae_workbench.embeddings import embed_texts  # all-MiniLM-L6-v2, offline

            self.embedder = embed_texts
        embedder, memo = self.embedder, self._memo

        def embed_memoised(texts: Sequence[str]) -> np.ndarray:
            todo = list(dict.fromkeys(t for t in texts if t not in memo))
            if todo:
                memo.update(zip(todo, np.asarray(embedder(todo), dtype=np.float32), strict=True))
            return np.stack([memo[t] for t in texts]) if texts else np.zeros((0, 0), np.float32)

        return embed_memoised

    def embedder_name(self) -> str:
        """Name of the embedder (recorded; part of score keys)."""
        from sae_workbench.embeddings import DEFAULT_EMBEDDING_MODEL

        if self.embedder is None:
            return DEFAULT_EMBEDDING_MODEL
        return str(getattr(self.embedder, "name", "custom-embedder"))


class Scorer(Protocol):
    """One scoring method (see the module docstring)."""

    name: ClassVar[str]
    """Registry name, stored with every score."""
    version: ClassVar[str]
    """Code version (part of the score key)."""
    headline: ClassVar[str]
    """Its headline metric (a key of an OK outcome's metrics): what reports and the app show."""
    default_explainers: ClassVar[tuple[str, ...]]
    """Explainers whose explanations it scores when the run names none (empty: all)."""
    uses_test_set: ClassVar[bool]
    """True when it scores the test records of the feature's split."""
    uses_negatives: ClassVar[bool]
    """True when its test records include negatives (the negative source is recorded and keyed)."""
    needs_negatives: ClassVar[bool]
    """True when its headline contrasts positives with negatives (AUROC, balanced accuracy): without a negative test
    record the score is recorded NO_NEGATIVES, not a number that means something else."""
    local_only: ClassVar[str]
    """Why it runs only in the driver's process, as a clause ('' when Ray workers can run it)."""

    @classmethod
    def check_inputs(cls, inputs: ScorerInputs) -> None:
        """Reject inputs it cannot use (ScoreConfigError), before any store opens or model loads."""
        ...

    @classmethod
    def from_backends(cls, config: ScoreConfig, backends: ScoreBackends) -> Self:
        """Build from the run's config and components (loading from `backends.inputs` what it is not handed)."""
        ...

    def backend(self) -> str:
        """Name of the judging component (recorded; part of the score key)."""
        ...

    def prompt_version(self) -> str:
        """Version of its prompt ('' without one)."""
        ...

    def key_params(self) -> dict[str, Any]:
        """Settings beyond the config and backend that change its numbers (part of the score key)."""
        ...

    async def prepare(self, explanations: Sequence[ExplanationRecord]) -> None:
        """Once per run, before any explanation is scored (all of the run's explanations, also those skipped)."""
        ...

    async def score(self, explanation: ExplanationRecord, tests: TestRecords | None) -> ScoreOutcome:
        """Score one explanation of a live feature (`tests` is None unless `uses_test_set`)."""
        ...


class ScorerDefaults:
    """What most scorers share: no prompt, no parameters beyond the config, nothing to prepare, every explainer,
    runs on Ray workers too, no inputs of its own."""

    default_explainers: ClassVar[tuple[str, ...]] = ()
    local_only: ClassVar[str] = ""
    needs_negatives: ClassVar[bool] = False

    @classmethod
    def check_inputs(cls, inputs: ScorerInputs) -> None:
        """Check the preset's name only (it has no presets of its own: either name changes nothing)."""
        if inputs.preset not in SCORE_PRESETS:
            raise ScoreConfigError(
                f"unknown preset {inputs.preset!r}; choose one of {', '.join(SCORE_PRESETS)}"
            )

    def prompt_version(self) -> str:
        """No prompt."""
        return ""

    def key_params(self) -> dict[str, Any]:
        """Nothing beyond the config and backend."""
        return {}

    async def prepare(self, explanations: Sequence[ExplanationRecord]) -> None:
        """Nothing to prepare."""
