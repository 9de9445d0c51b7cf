"""`TreeExplainer`: the tree search as an `Explainer` (what it loads, which proposer and simulator it runs, what it
stores)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from sae_workbench import defaults
from sae_workbench.examples.rules import rules_to_text
from sae_workbench.examples.testsets import FeatureSplit, SplitConfig, Third, prepare_split
from sae_workbench.explainers.base import (
    ExplainConfig,
    ExplainContext,
    ExplainJobError,
    Explanation,
    FeatureReader,
    split_extra,
)
from sae_workbench.explainers.lexical import LEXICAL_VERSION
from sae_workbench.explainers.lexical_simulator import LexicalSimulator
from sae_workbench.explainers.simulate import LLMSimulator, Simulator
from sae_workbench.explainers.tree.lexical_editor import LexicalEditor
from sae_workbench.explainers.tree.llm_proposer import LLMProposer
from sae_workbench.explainers.tree.presets import TreeConfig, tree_preset
from sae_workbench.explainers.tree.search import Proposer, tree_search
from sae_workbench.explainers.tree.splits import Split, TreeSplits
from sae_workbench.store import Store

TREE_VERSION = "tree-v2"


@dataclass(frozen=True)
class TreeInputs:
    """The split's train and valid records (the test third is never loaded)."""

    split: FeatureSplit
    """Which windows are train / valid / test."""
    splits: TreeSplits
    """Train and valid records; an empty test split."""


@dataclass(frozen=True)
class TreeExplainer:
    """Tree search over the split's train and valid thirds: LLM proposer + LLM simulator, or offline the lexical
    rule editor + lexical simulator."""

    name: ClassVar[str] = "tree"
    requires_llm: ClassVar[bool] = False
    split: SplitConfig = field(default_factory=SplitConfig)
    """The shared split."""
    record_len: int | None = defaults.RECORD_LEN
    """Tokens per record (tree paper: 32)."""
    search: TreeConfig = field(default_factory=TreeConfig)
    """Search settings (rule cap included)."""

    @classmethod
    def from_config(cls, config: ExplainConfig) -> TreeExplainer:
        """Build from the run's options: the preset's search settings (`tree_preset`) with the run's rule cap."""
        if config.embedding_model:
            raise ExplainJobError(f"--embedding-model applies to the prism explainer only, not {cls.name!r}")
        return cls(config.split(), config.record_len, tree_preset(config.preset, config.rule_cap))

    def version(self, llm: bool) -> str:
        """Code version (the offline variant runs the lexical editor and simulator)."""
        return TREE_VERSION if llm else f"{TREE_VERSION}+{LEXICAL_VERSION}"

    def prompt_version(self, llm: bool) -> str:
        """Versions of the root, revision and simulation prompts."""
        from sae_workbench.explainers.prompts import oneshot, simulate, tree

        if not llm:
            return ""
        roots = oneshot.PROMPT_VERSION + (f"+{oneshot.FEW_SHOT_VERSION}" if self.search.root_few_shot else "")
        return f"{roots}+{tree.PROMPT_VERSION}+{simulate.PROMPT_VERSION}"

    def sampling(self) -> dict[str, Any]:
        """Provenance of what it reads (the preset's name included)."""
        examples = "SPLIT_TRAIN+VALID" if self.search.train_negatives else "SPLIT_TRAIN_POSITIVES+VALID"
        return {"examples": examples, "record_len": self.record_len, "split": self.split.params(),
                "preset": self.search.preset, "tree": asdict(self.search)}  # fmt: skip

    def prepare(self, store: Store, sae_id: str) -> None:
        """Embed the corpus once when the split's negatives are SIMILAR ones."""
        prepare_split(store, sae_id, self.split)

    def load(self, reader: FeatureReader) -> TreeInputs:
        """Records of the train and valid thirds (train without its negatives unless `search.train_negatives`)."""
        split = reader.split(self.split)
        train_ids = split.train.ids if self.search.train_negatives else split.train.positives
        # a SIMILAR negative may repeat a positive
        by_id = {
            r.window_id: r
            for r in reader.records(list(dict.fromkeys(train_ids + split.valid.ids)), self.record_len)
        }

        def part(third: Third, negatives: bool = True) -> Split:
            neg = tuple(by_id[i] for i in third.negatives) if negatives else ()
            return Split(tuple(by_id[i] for i in third.positives), neg)

        train = part(split.train, self.search.train_negatives)
        return TreeInputs(split, TreeSplits(train, part(split.valid), Split((), ())))

    async def explain(self, inputs: TreeInputs, ctx: ExplainContext) -> Explanation:
        """Run the search; the best-validation node is the explanation."""
        if ctx.client is None:
            proposer: Proposer = LexicalEditor(self.search, seed=self.split.seed + ctx.feature)
            simulator: Simulator = LexicalSimulator()
        else:
            proposer, simulator = (
                LLMProposer(ctx.client, self.search, ctx.tag),
                LLMSimulator(ctx.client, ctx.tag),
            )
        result = await tree_search(proposer, simulator, inputs.splits, self.search, ctx.peak)
        text = rules_to_text(result.best.rules)
        if ctx.client is None:
            text = f"Lexical tree search (activation statistics, not an LLM): fires on {text}."
        extra = {
            "tree": result.tree_json(), "best_node": result.best.id, "stopped_early": result.stopped_early,
            "train_score": _num(result.best.train_score), "valid_score": _num(result.best.valid_score),
            "proposer": "llm" if ctx.client is not None else "lexical-editor", "simulator": simulator.name,
            "splits": split_extra(inputs.split),
        }  # fmt: skip
        if isinstance(proposer, LLMProposer) and proposer.trims:
            extra["prompt_trims"] = proposer.trims  # what revision prompts left out to fit (explainers.fit)
        shown = inputs.split.train.positives + inputs.split.valid.positives
        negatives = (
            inputs.split.train.negatives if self.search.train_negatives else ()
        ) + inputs.split.valid.negatives
        return Explanation(text, result.best.rules, list(shown), list(negatives), extra)


def _num(x: float) -> float | None:
    """JSON-safe float (NaN → None)."""
    return None if math.isnan(x) else float(x)
