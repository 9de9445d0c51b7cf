"""The tree search (Ma et al. 2025, after tree-of-attacks): roots, scored children, pruning, the best-validation node.

Every node is scored on the train split AND on its own valid split, gets feedback from its worst train record, and
`branching` children from the `Proposer`; each level keeps the top `width` children by train score; the search stops
early when the best train score reaches `stop_score`; the node with the best validation score is returned.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from sae_workbench.examples.records import Record, discretise
from sae_workbench.examples.rules import Rule
from sae_workbench.explainers.simulate import (
    MemoSimulator,
    PooledTruth,
    Simulator,
    TokenFeedback,
    simulate_rules_flat,
    token_feedback,
)
from sae_workbench.explainers.tree.presets import TreeConfig
from sae_workbench.explainers.tree.splits import Split, TreeSplits


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
