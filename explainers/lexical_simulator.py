"""The offline lexical simulator: predicts an explanation's activations by matching its rule text (not an LLM).

A documented baseline for the simulation-based scorers and the tree explainer's offline search: 5 on every token the
explanation's quoted tokens (or content words) match (`examples.rule_language`), 0 elsewhere.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sae_workbench.examples.records import MAX_LEVEL, Record
from sae_workbench.examples.rule_language import left_codes, match_codes
from sae_workbench.examples.rules import Rule


class LexicalSimulator:
    """Predicts 5 on tokens an explanation's quoted tokens (or content words) match and 0 elsewhere."""

    name = "lexical"

    async def simulate(self, explanation: str, records: Sequence[Record]) -> list[np.ndarray]:
        """One (T,) prediction array (0 or 5) per record."""
        return self.simulate_sync(explanation, records)

    def simulate_sync(self, explanation: str, records: Sequence[Record]) -> list[np.ndarray]:
        """Synchronous form of `simulate` (it does no I/O); all records are matched at once."""
        if not records:
            return []
        clauses = [c for c in explanation.split(";") if c.strip()]
        codes = np.concatenate([r.key_codes for r in records])
        folded = np.concatenate([r.fold_codes for r in records])
        bounds = np.cumsum([len(r) for r in records])
        left = left_codes(codes, np.concatenate(([0], bounds[:-1])))
        hit = np.zeros(codes.shape, dtype=bool)
        for clause in clauses:
            hit |= match_codes(clause, codes, folded, left)
        return np.split(hit.astype(np.float64) * MAX_LEVEL, bounds[:-1])


def simulate_rules_sync(rules: Sequence[Rule], records: Sequence[Record]) -> list[np.ndarray]:
    """Lexical structured simulation without an event loop: max over rules of match × strength."""
    sim = LexicalSimulator()
    out = [np.zeros(len(r), dtype=np.float64) for r in records]
    for rule in rules:
        for i, p in enumerate(sim.simulate_sync(rule.activates_on, records)):
            out[i] = np.maximum(out[i], p * (rule.strength / MAX_LEVEL))
    return out


__all__ = ["LexicalSimulator", "simulate_rules_sync"]
