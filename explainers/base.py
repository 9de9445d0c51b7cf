"""What an explainer is: the `Explainer` protocol, its typed output, and what it reads the store through.

    class MyExplainer:                          # one file: its config, its loading, its algorithm
        name = "mine"
        requires_llm = False
        def version(self, llm: bool) -> str: ...
        def prompt_version(self, llm: bool) -> str: ...
        def sampling(self) -> dict[str, object]: ...          # provenance + part of the config key
        def prepare(self, store, sae_id) -> None: ...          # once per job, before any feature (may write)
        def load(self, reader: FeatureReader) -> MyInputs: ...        # store thread, ahead of time
        async def explain(self, inputs: MyInputs, ctx: ExplainContext) -> Explanation: ...

plus one line in `explainers/registry.py`. The job (`explainers/job.py`) keeps scheduling, the store lease, batching,
dead features and the stored record; an explainer never sees the store from its async part.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Self, TypeVar

from sae_workbench import defaults
from sae_workbench.errors import WorkbenchError
from sae_workbench.examples.loading import load_records
from sae_workbench.examples.records import Record
from sae_workbench.examples.rules import DEFAULT_RULE_CAP, Rule
from sae_workbench.examples.testsets import FeatureSplit, SplitConfig, draw_split
from sae_workbench.store import Store, WindowMaxima

if TYPE_CHECKING:
    from sae_workbench.llm.client import LLMClient


class ExplainJobError(WorkbenchError):
    """The explain job stopped or was misconfigured; everything stored before the stop is kept and a rerun resumes."""


@dataclass(frozen=True)
class ExplainConfig:
    """The options a user picks for an explain run (the CLI's); each explainer reads what applies to it. Settings
    of one method (tree search, PRISM) live in that explainer's own config: build it directly for those, e.g.
    `PrismExplainer(PrismConfig(percentile=90.0))`."""

    explainer: str = "lexical"
    """A name in `explainers.registry.EXPLAINERS` (lexical, oneshot, tree, prism)."""
    negatives: str = "SIMILAR_NEGATIVE"
    """Negative source of the feature's split: RANDOM, RANDOM_NEGATIVE, SIMILAR or SIMILAR_NEGATIVE (tree paper
    default). The scorer scores the test third of the same split."""
    per_split: int = 10
    """Positives and negatives per third of the split (tree paper: 10 + 10 each of train/valid/test)."""
    record_len: int | None = defaults.RECORD_LEN
    """Tokens per record shown or simulated, around each peak (tree paper: 32); None = whole windows."""
    rule_cap: int = DEFAULT_RULE_CAP
    """Most rules per structured explanation (tree paper: 5)."""
    seed: int = 0
    """Seed of every random choice (combined with the feature index)."""
    preset: str = "default"
    """Method settings: 'default', or 'paper' (the reference's values; explainers without a paper preset refuse it).
    Recorded in each explanation's sampling."""
    embedding_model: str = ""
    """Sentence-transformers model of an explainer that embeds texts (PRISM); '' = its preset's."""

    split_config: SplitConfig | None = None
    """The run's split (record length, negatives, seed, embedding crop, sizes), as the CLI built it; None: built
    from the fields above. When given, it wins: `negatives`, `per_split`, `seed` and `record_len` are set from it."""

    def __post_init__(self) -> None:
        """Keep the flat fields and the nested split one configuration."""
        cfg = self.split_config
        if cfg is None:
            cfg = SplitConfig(negatives=self.negatives, per_split=self.per_split, seed=self.seed,  # type: ignore[arg-type]
                              embed_crop=self.record_len, record_length=self.record_len)  # fmt: skip
            object.__setattr__(self, "split_config", cfg)
        for name, value in (("negatives", cfg.negatives.value), ("per_split", cfg.per_split), ("seed", cfg.seed),
                            ("record_len", cfg.record_length)):  # fmt: skip
            object.__setattr__(self, name, value)

    def split(self) -> SplitConfig:
        """The split every explainer and scorer of this run shares."""
        assert self.split_config is not None  # set in __post_init__
        return self.split_config


def no_method_options(config: ExplainConfig, name: str) -> None:
    """Refuse run options that only other explainers read (a preset, an embedding model)."""
    if config.preset != "default":
        raise ExplainJobError(
            f"--preset {config.preset} exists for the tree and prism explainers, not {name!r}"
        )
    if config.embedding_model:
        raise ExplainJobError(f"--embedding-model applies to the prism explainer only, not {name!r}")


@dataclass(frozen=True)
class Explanation:
    """What one explainer produced for one feature."""

    text: str
    """Free-text explanation."""
    rules: tuple[Rule, ...] | None
    """Structured rules, or None for a free-text-only explainer (stored as `Rule.to_dict()` each)."""
    example_ids: list[int]
    """Windows shown as activating examples."""
    negative_ids: list[int]
    """Windows shown as negatives / background."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Explainer-specific JSON payload (the tree, PRISM's clusters, ...)."""


@dataclass
class FeatureReader:
    """One feature's view of the store for an explainer's `load` (runs on the job's store thread)."""

    store: Store
    """The store (the job's store-thread session is open while `load` runs)."""
    sae_id: str
    """The SAE."""
    corpus: str
    """The indexed corpus."""
    n_windows: int
    """Windows indexed."""
    feature: int
    """The feature."""
    maxima: WindowMaxima
    """Max activation per activating window."""
    _split: dict[SplitConfig, FeatureSplit] = field(default_factory=dict, repr=False)

    def records(self, window_ids: Sequence[int], record_len: int | None) -> list[Record]:
        """Records of this feature on `window_ids`, in that order, cropped around each peak."""
        return load_records(self.store, self.sae_id, self.corpus, self.feature, window_ids, record_len)

    def split(self, config: SplitConfig) -> FeatureSplit:
        """The feature's shared train/valid/test split (`examples.testsets`)."""
        if config not in self._split:
            self._split[config] = draw_split(self.store, self.sae_id, self.feature, config)
        return self._split[config]


@dataclass(frozen=True)
class ExplainContext:
    """What an explainer's async part gets besides its inputs."""

    feature: int
    """The feature."""
    peak: float
    """The feature's largest activation over the indexed corpus (records are discretised against it)."""
    client: LLMClient | None
    """The LLM, or None offline."""
    tag: str
    """Usage-ledger tag of this feature's LLM calls."""
    pause: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext
    """Leaves the store file to other processes meanwhile (wrap long model compute in it)."""


InputsT = TypeVar("InputsT")


class Explainer(Protocol[InputsT]):
    """One explanation method (see the module docstring)."""

    name: ClassVar[str]
    """Registry name, stored with every explanation."""
    requires_llm: ClassVar[bool]
    """True when there is no offline variant."""

    @classmethod
    def from_config(cls, config: ExplainConfig) -> Self:
        """Build from the run's options."""
        ...

    def version(self, llm: bool) -> str:
        """Code version of the variant that runs (with or without an LLM)."""
        ...

    def prompt_version(self, llm: bool) -> str:
        """Version of the prompts it sends ('' offline)."""
        ...

    def sampling(self) -> dict[str, Any]:
        """JSON-able sampling settings (provenance; part of the config key)."""
        ...

    def prepare(self, store: Store, sae_id: str) -> None:
        """Once per job before any feature runs (e.g. embed the corpus's windows); may write to the store."""
        ...

    def load(self, reader: FeatureReader) -> InputsT:
        """Everything it needs from the store for one feature (runs on the store thread, ahead of time)."""
        ...

    async def explain(self, inputs: InputsT, ctx: ExplainContext) -> Explanation:
        """Explain one (live) feature from its inputs."""
        ...


def split_extra(split: FeatureSplit) -> dict[str, Any]:
    """The split's roles as stored in an explanation's extra (which windows were train / valid / test)."""

    def third(ids: Any) -> dict[str, list[int]]:
        return {"positives": list(ids.positives), "negatives": list(ids.negatives)}

    return {"train": third(split.train), "valid": third(split.valid), "test": third(split.test),
            **split.provenance()}  # fmt: skip
