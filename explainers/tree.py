"""Tree-based iterative explainer (Ma, Pfrommer, Sojoudi, "Revising and Falsifying Sparse Autoencoder Feature
Explanations", NeurIPS 2025; search adapted from tree-of-attacks).

Roots are sampled structured explanations; every node is scored on the train split AND on its own valid split (the
reference code reuses train for valid — a bug we do not copy); each node gets feedback ("Overall score: X.XX" plus
the train record whose removal would raise the pooled correlation most, token by token); each node gets `branching`
children; children are pruned to the top `width` by train score; the search stops early when the best train score
reaches `stop_score`; the result is the node with the best VALIDATION score over the whole tree, which is kept.

The proposer is an LLM (`LLMProposer`) or, offline, `LexicalEditor`, a rule editor that adds, removes, narrows or
re-weights rules from the worst record — so the search itself runs and is tested without an LLM. The LLM proposer's
revisions continue their branch's conversation, as the reference does: every train record, then each earlier
explanation of the branch with its answer and feedback (`explainers.prompts.tree`).

`TreeConfig()` holds the spec's settings; `TreeConfig.paper()` (`--preset paper`) the reference's paper runs: depth 2,
width 2, roots at temperature 1.0 after 5 few-shot examples, train without negatives, train/valid scored on the 0..5
values, the stop rule checked only after a level's pruning (docs/deviations-tree.md).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np

from sae_workbench.errors import WorkbenchError
from sae_workbench.examples.records import Record, discretise
from sae_workbench.examples.rules import DEFAULT_RULE_CAP, Rule, rules_to_text
from sae_workbench.examples.testsets import FeatureSplit, SplitConfig, Third, prepare_split
from sae_workbench.explainers.base import (
    ExplainConfig,
    ExplainContext,
    ExplainJobError,
    Explanation,
    FeatureReader,
    split_extra,
)
from sae_workbench.explainers.lexical import (
    LEXICAL_VERSION,
    LexicalConfig,
    LexicalSimulator,
    LexicalStats,
    match_rule_text,
    norm,
    select_candidates,
)
from sae_workbench.explainers.simulate import (
    LLMSimulator,
    MemoSimulator,
    PooledTruth,
    Simulator,
    TokenFeedback,
    simulate_rules_flat,
    token_feedback,
)
from sae_workbench.store import Store

log = logging.getLogger(__name__)

TREE_VERSION = "tree-v2"


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

    @property
    def roots_temperature(self) -> float:
        """The temperature roots are sampled at."""
        return self.temperature if self.root_temperature is None else self.root_temperature


TREE_PRESETS = ("default", "paper")
"""Names `tree_preset` accepts."""


def tree_preset(name: str, rule_cap: int = DEFAULT_RULE_CAP) -> TreeConfig:
    """The search settings a preset names ('default': the spec's; 'paper': the reference's paper runs)."""
    if name == "paper":
        return TreeConfig.paper(rule_cap)
    if name == "default":
        return TreeConfig(rule_cap=rule_cap)
    raise TreePresetError(f"unknown tree preset {name!r}; choose one of {', '.join(TREE_PRESETS)}")


class TreePresetError(WorkbenchError):
    """A preset name that does not exist."""


@dataclass(frozen=True)
class Split:
    """Records of one split: positives then negatives."""

    positives: tuple[Record, ...]
    """Top-activating records."""
    negatives: tuple[Record, ...]
    """Non-activating (close) negatives."""

    @property
    def records(self) -> tuple[Record, ...]:
        """Positives followed by negatives (the pooled score runs over all of them)."""
        return self.positives + self.negatives


@dataclass(frozen=True)
class TreeSplits:
    """Train, valid and test splits (paper: 10 positives + 10 negatives each)."""

    train: Split
    """Used for proposals, feedback and pruning."""
    valid: Split
    """Held out; picks the returned node."""
    test: Split
    """Held out for the scorer; never seen by the search."""


@dataclass
class TreeNode:
    """One explanation in the tree."""

    id: int
    """Creation order."""
    parent: int | None
    """Parent's id (None for roots)."""
    depth: int
    """0 for roots."""
    rules: tuple[Rule, ...]
    """The explanation."""
    improvement: str
    """The proposer's stated change ('' for roots)."""
    train_score: float = math.nan
    """Pooled correlation on the train split."""
    valid_score: float = math.nan
    """Pooled correlation on the valid split."""
    feedback: list[TokenFeedback] = field(default_factory=list)
    """Worst train record, token by token."""
    worst_window: int | None = None
    """Window id of that record."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form (NaN scores become null)."""

        def num(x: float) -> float | None:
            return None if math.isnan(x) else round(x, 6)

        return {
            "id": self.id,
            "parent": self.parent,
            "depth": self.depth,
            "rules": [r.to_dict() for r in self.rules],
            "improvement": self.improvement,
            "train_score": num(self.train_score),
            "valid_score": num(self.valid_score),
            "worst_window": self.worst_window,
        }


@dataclass(frozen=True)
class TreeResult:
    """The chosen node and the whole tree."""

    best: TreeNode
    """Node with the best validation score."""
    nodes: tuple[TreeNode, ...]
    """Every node, in creation order."""
    stopped_early: bool
    """True when a train score reached stop_score before the last level."""

    def tree_json(self) -> list[dict[str, Any]]:
        """Every node as JSON (for the store)."""
        return [n.to_dict() for n in self.nodes]


class Proposer(Protocol):
    """Proposes root explanations and revisions."""

    async def roots(self, train: Split, n: int, global_max: float) -> list[tuple[Rule, ...]]:
        """`n` (or fewer, if some failed) root explanations from the train split."""
        ...

    async def children(
        self, branch: Sequence[TreeNode], train: Split, n: int, global_max: float
    ) -> list[tuple[str, tuple[Rule, ...]]]:
        """Up to `n` (improvement, rules) revisions of the branch's last node (`branch`: root first) given its
        feedback, the train records and the branch's history."""
        ...


def _key(x: float) -> float:
    """Sort key putting NaN last."""
    return -math.inf if math.isnan(x) else x


@dataclass(frozen=True)
class _Truth:
    """A search's train + valid records and their true activations, concatenated once per search."""

    records: tuple[Record, ...]
    """Train records, then valid records (what every rule is simulated on)."""
    train: PooledTruth
    """True activations of the train records (scores and the worst record)."""
    valid: PooledTruth
    """True activations of the valid records."""

    @property
    def n_train(self) -> int:
        """Train tokens (the split point of a concatenated prediction)."""
        return self.train.t.size

    @classmethod
    def of(cls, splits: TreeSplits, global_max: float | None = None) -> _Truth:
        """Concatenate the splits' records (their values discretised to 0..5 against `global_max` when given)."""
        train, valid = splits.train.records, splits.valid.records

        def values(records: tuple[Record, ...]) -> np.ndarray:
            if not records:
                return np.zeros(0)
            acts = np.concatenate([r.acts for r in records])
            return (acts if global_max is None else discretise(acts, global_max)).astype(np.float64)

        t_train, t_valid = values(train), values(valid)
        sizes = np.asarray([len(r) for r in train], dtype=np.int64)
        return cls(
            (*train, *valid),
            PooledTruth(t_train, sizes),
            PooledTruth(t_valid, np.asarray([t_valid.size], dtype=np.int64)),
        )


async def _score(
    node: TreeNode, splits: TreeSplits, truth: _Truth, simulator: Simulator, global_max: float
) -> None:
    """Score a node on train and valid and attach the worst-record feedback.

    Each rule is simulated once over the train and valid records together and the predictions are split again:
    the simulator predicts every record from its tokens alone (it never sees activations), so the scores are those
    of two separate simulations, at half the calls (and one copy of the prompt's instructions instead of two).
    """
    pred = await simulate_rules_flat(simulator, node.rules, truth.records)
    p_train, p_valid = pred[: truth.n_train], pred[truth.n_train :]
    node.train_score = truth.train.correlation(p_train)
    node.valid_score = truth.valid.correlation(p_valid)
    train = splits.train.records
    if not train:
        raise ValueError("no records")
    worst = truth.train.worst(p_train, node.train_score)
    start = int(truth.train.sizes[:worst].sum())
    node.feedback = token_feedback(p_train[start : start + len(train[worst])], train[worst], global_max)
    node.worst_window = train[worst].window_id


async def tree_search(
    proposer: Proposer, simulator: Simulator, splits: TreeSplits, config: TreeConfig, global_max: float
) -> TreeResult:
    """Run the tree search and return the best-validation node and the whole tree."""
    # Nodes share rules with their parents and siblings: simulate each (rule, split) once per search.
    simulator = MemoSimulator(simulator)
    truth = _Truth.of(splits, global_max if config.score_discretised else None)
    nodes: list[TreeNode] = []
    root_rules = await proposer.roots(splits.train, config.roots, global_max)
    if not root_rules:
        raise ValueError("the proposer returned no root explanation")
    frontier = [TreeNode(len(nodes) + i, None, 0, r, "") for i, r in enumerate(root_rules)]
    nodes.extend(frontier)
    await asyncio.gather(*(_score(n, splits, truth, simulator, global_max) for n in frontier))
    stopped = False
    for level in range(1, config.depth + 1):
        # The stop rule: ref checks it after each level's pruning only (not on the roots; `stop_on_roots=False`).
        if (level > 1 or config.stop_on_roots) and max(
            _key(n.train_score) for n in frontier
        ) >= config.stop_score:
            stopped = True
            break
        proposals = await asyncio.gather(
            *(
                proposer.children(_branch(nodes, n), splits.train, config.branching, global_max)
                for n in frontier
            )
        )
        children: list[TreeNode] = []
        for parent, revs in zip(frontier, proposals, strict=True):
            for improvement, rules in revs:
                children.append(TreeNode(len(nodes) + len(children), parent.id, level, rules, improvement))
        if not children:
            break
        nodes.extend(children)
        await asyncio.gather(*(_score(n, splits, truth, simulator, global_max) for n in children))
        # Prune: keep the top `width` children by train score (ties: creation order).
        frontier = sorted(children, key=lambda n: (-_key(n.train_score), n.id))[: config.width]
    best = max(nodes, key=lambda n: (_key(n.valid_score), -n.id))
    return TreeResult(best, tuple(nodes), stopped)


def _branch(nodes: Sequence[TreeNode], node: TreeNode) -> list[TreeNode]:
    """The nodes from the root down to `node` (ids are positions in `nodes`)."""
    path = [node]
    while path[-1].parent is not None:
        path.append(nodes[path[-1].parent])
    return path[::-1]


# ---------------------------------------------------------------------------------------------- proposers


class LexicalEditor:
    """Offline proposer (not an LLM): roots are sampled lexical rule sets, revisions are rule edits.

    Roots: one or two rules drawn from the lexical explainer's candidate list with probabilities softmax(−rank /
    temperature). Revisions, from the node's worst record: add a rule for the most under-predicted token, narrow a
    rule that over-fires to its typical left context, change a strength toward the actual values, or remove the
    most recent over-firing rule.
    """

    def __init__(self, config: TreeConfig, seed: int = 0, lexical: LexicalConfig | None = None) -> None:
        """Edit with the tree's settings and a seeded rng."""
        self.config = config
        self.rng = np.random.default_rng(seed)
        self.lexical = lexical or LexicalConfig(rule_cap=10, min_count=1, min_gain=0.0)
        self.stats: LexicalStats | None = None

    async def roots(self, train: Split, n: int, global_max: float) -> list[tuple[Rule, ...]]:
        """`n` distinct root rule sets sampled from the train split's lexical candidates."""
        self.stats = LexicalStats(train.records)
        cands = select_candidates(self.stats, self.lexical)
        if not cands:
            return [
                (
                    Rule(
                        json.dumps(norm(train.positives[0].tokens[int(np.argmax(train.positives[0].acts))])),
                        5,
                    ),
                )
            ]
        weights = np.exp(-np.arange(len(cands)) / max(self.config.temperature, 1e-6))
        out: list[tuple[Rule, ...]] = []
        for _ in range(4 * n):
            k = int(self.rng.integers(1, min(2, len(cands), self.config.rule_cap) + 1))  # never over the cap
            idx = self.rng.choice(len(cands), size=k, replace=False, p=weights / weights.sum())
            rules = tuple(Rule(cands[i].rule_text(), cands[i].strength(global_max)) for i in sorted(idx))
            if rules not in out:
                out.append(rules)
            if len(out) == n:
                break
        return out

    async def children(
        self, branch: Sequence[TreeNode], train: Split, n: int, global_max: float
    ) -> list[tuple[str, tuple[Rule, ...]]]:
        """Up to `n` distinct edits of the last node's rules driven by its worst record (no history)."""
        node = branch[-1]
        fb = node.feedback
        tokens = [f.token for f in fb]
        edits: list[tuple[str, tuple[Rule, ...]]] = []
        rules = list(node.rules)
        texts = {r.activates_on for r in rules}
        low = sorted(
            (i for i, f in enumerate(fb) if f.verdict == "too low"),
            key=lambda i: fb[i].predicted - fb[i].actual,
        )
        high = sorted(
            (i for i, f in enumerate(fb) if f.verdict == "too high"),
            key=lambda i: fb[i].actual - fb[i].predicted,
        )
        for i in low:
            text = json.dumps(norm(tokens[i]), ensure_ascii=False)
            if norm(tokens[i]) and text not in texts and len(rules) < self.config.rule_cap:
                edits.append((f"add a rule for {text}", (*rules, Rule(text, max(1, fb[i].actual)))))
                break
        for i in high:
            firing = [j for j, r in enumerate(rules) if match_rule_text(r.activates_on, tokens)[i]]
            for j in firing:
                narrowed = self._narrow(rules[j], tokens[i])
                if narrowed is not None and narrowed.activates_on not in texts:
                    new = [*rules[:j], narrowed, *rules[j + 1 :]]
                    edits.append((f"require context for {rules[j].activates_on}", tuple(new)))
                    break
            if firing and len(rules) > 1:
                j = max(firing)
                edits.append((f"remove the rule {rules[j].activates_on}", tuple(rules[:j] + rules[j + 1 :])))
            break
        for j, r in enumerate(rules):
            hit = match_rule_text(r.activates_on, tokens)
            if hit.any():
                target = int(
                    np.clip(round(float(np.mean([fb[i].actual for i in np.flatnonzero(hit)]))), 1, 5)
                )
                if target != r.strength:
                    new = [*rules[:j], Rule(r.activates_on, target), *rules[j + 1 :]]
                    edits.append((f"change the strength of {r.activates_on} to {target}", tuple(new)))
                    break
        unique: list[tuple[str, tuple[Rule, ...]]] = []
        for imp, rs in edits:
            if rs != node.rules and all(rs != u[1] for u in unique):
                unique.append((imp, rs))
        return unique[:n]

    def _narrow(self, rule: Rule, token: str) -> Rule | None:
        """The rule restricted to the token's most common left context among active train occurrences."""
        if self.stats is None or " after " in rule.activates_on:
            return None
        typical = self.stats.typical_context(norm(token))
        if typical is None:
            return None
        return Rule(f"{rule.activates_on} after {json.dumps(typical[0], ensure_ascii=False)}", rule.strength)


class LLMProposer:
    """Proposes roots with the one-shot structured prompt (few-shot when configured) and revisions by continuing the
    branch's conversation (`explainers.prompts.tree.revision_messages`)."""

    def __init__(self, client: Any, config: TreeConfig, tag: str = "") -> None:
        """Use `client` (an LLMClient); usage is accounted under `tag`."""
        self.client = client
        self.config = config
        self.tag = tag

    async def roots(self, train: Split, n: int, global_max: float) -> list[tuple[Rule, ...]]:
        """`n` samples of the one-shot structured prompt at the roots' temperature, from the train positives."""
        from sae_workbench.examples.rules import parse_rules
        from sae_workbench.explainers.prompts.oneshot import structured_messages
        from sae_workbench.llm.client import LLMMalformedOutputError, LLMRequest
        from sae_workbench.llm.jsonparse import parse_json_strict

        cfg = self.config
        messages = structured_messages(train.positives, global_max, cfg.rule_cap, few_shot=cfg.root_few_shot)
        reqs = [
            LLMRequest(messages, tag=self.tag, temperature=cfg.roots_temperature, sample=i) for i in range(n)
        ]
        results = await self.client.parse_samples_settled(
            reqs, lambda t: parse_rules(parse_json_strict(t), cfg.rule_cap)
        )
        return [r.value for r in results if not isinstance(r, LLMMalformedOutputError)]

    async def children(
        self, branch: Sequence[TreeNode], train: Split, n: int, global_max: float
    ) -> list[tuple[str, tuple[Rule, ...]]]:
        """`n` samples continuing the branch's conversation (every train record, every earlier explanation and its
        feedback)."""
        from sae_workbench.explainers.prompts.tree import Turn, parse_revision, revision_messages
        from sae_workbench.llm.client import LLMMalformedOutputError, LLMRequest

        cap = self.config.rule_cap
        turns = [Turn(b.improvement, b.rules, b.train_score, b.feedback) for b in branch]
        messages = revision_messages(train.records, global_max, turns, cap)
        reqs = [
            LLMRequest(messages, tag=self.tag, temperature=self.config.temperature, sample=i)
            for i in range(n)
        ]
        results = await self.client.parse_samples_settled(reqs, lambda t: parse_revision(t, cap))
        return [r.value for r in results if not isinstance(r, LLMMalformedOutputError)]


# ---------------------------------------------------------------------------------------------- the explainer


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
    record_len: int | None = 32
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
        shown = inputs.split.train.positives + inputs.split.valid.positives
        negatives = (
            inputs.split.train.negatives if self.search.train_negatives else ()
        ) + inputs.split.valid.negatives
        return Explanation(text, result.best.rules, list(shown), list(negatives), extra)


def _num(x: float) -> float | None:
    """JSON-safe float (NaN → None)."""
    return None if math.isnan(x) else float(x)


__all__ = [
    "TREE_PRESETS",
    "TREE_VERSION",
    "LLMProposer",
    "LexicalEditor",
    "Split",
    "TreeConfig",
    "TreeExplainer",
    "TreeNode",
    "TreePresetError",
    "TreeResult",
    "TreeSplits",
    "tree_preset",
    "tree_search",
]
