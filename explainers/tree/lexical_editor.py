"""The tree search's offline proposer: a lexical rule editor (not an LLM), so the search runs and is tested offline."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

from sae_workbench.examples.records import norm
from sae_workbench.examples.rule_language import match_rule_text
from sae_workbench.examples.rules import Rule
from sae_workbench.explainers.lexical import LexicalConfig, LexicalStats, select_candidates
from sae_workbench.explainers.tree.presets import TreeConfig
from sae_workbench.explainers.tree.search import TreeNode
from sae_workbench.explainers.tree.splits import Split


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
