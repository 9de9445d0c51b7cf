"""Rule complexity (tree paper, Ma et al. NeurIPS 2025): an LLM rates each rule of a structured explanation 0..5
(abstract concepts and specific required context are more complex than token lists).

    workbench score --store S --sae ID --scorer complexity --llm-model gpt-4o-mini
    workbench score --store S --sae ID --scorer complexity --llm-model M --llm-base-url http://localhost:8000/v1

`run_complexity` rates every stored explanation that has rules (one call per explanation, all its rules at once) and
stores per-rule ratings with their mean and max as a `complexity` score (negative source ''). There is no offline
rating: without an LLM endpoint it raises `LLMNotConfiguredError`. An explanation without rules is recorded as
`no_rules`, unparseable rules as `unscorable_explanation`, an answer still malformed after the client's re-asks as
`llm_malformed_output`; the batch goes on, and a rerun skips what is stored under the same key.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from sae_workbench.evaluation.prompts.complexity import COMPLEXITY_PROMPT_VERSION, complexity_messages
from sae_workbench.evaluation.results import ScoreJobResult
from sae_workbench.examples.rules import parse_rules
from sae_workbench.llm.client import LLMClient, LLMMalformedOutputError, LLMRequest
from sae_workbench.llm.config import LLMNotConfiguredError
from sae_workbench.llm.jsonparse import as_int_list, parse_json_strict
from sae_workbench.store import ScoreRecord, Store

COMPLEXITY_SCORER_VERSION = "complexity-llm-v1"
# Tree paper: ratings are integers 0..5.
MAX_RATING = 5


def _parse_ratings(n: int):
    """A parser accepting exactly `n` integers in 0..5 (ValueError → re-ask)."""

    def parse(text: str) -> list[int]:
        return as_int_list(parse_json_strict(text), length=n, lo=0, hi=MAX_RATING)

    return parse


async def rate_complexity(client: LLMClient, rules: Sequence[str], tag: str = "complexity") -> list[int]:
    """An LLM's 0..5 complexity rating of each rule (tree paper)."""
    if not rules:
        return []
    parsed = await client.complete_parsed(
        LLMRequest(complexity_messages(rules), tag=tag), _parse_ratings(len(rules))
    )
    return parsed.value


def complexity_key(explanation_id: int, model: str) -> str:
    """Score key of one explanation's complexity rating by one LLM (resumable runs skip it)."""
    payload = {"explanation_id": explanation_id, "version": COMPLEXITY_SCORER_VERSION,
               "prompt_version": COMPLEXITY_PROMPT_VERSION, "model": model}  # fmt: skip
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32]


def require_client(client: LLMClient | None) -> LLMClient:
    """The client, or LLMNotConfiguredError saying how to configure one (there is no offline rating)."""
    if client is None:
        raise LLMNotConfiguredError(
            "the complexity scorer asks an LLM to rate each rule 0..5 (tree paper) and has no offline fallback: "
            "pass --llm-model (and --llm-base-url for a local OpenAI-compatible server)"
        )
    return client


async def _rate_one(client: LLMClient, rules: Any) -> dict[str, Any]:
    """Metrics of one explanation's rules (a recorded status when there is nothing to rate or the LLM fails)."""
    if rules in (None, [], ""):
        return {"status": "no_rules"}
    try:
        parsed = parse_rules(rules, rule_cap=len(rules) if isinstance(rules, list) else MAX_RATING)
    except ValueError as err:
        return {
            "status": "unscorable_explanation",
            "error": f"the explanation's rules cannot be parsed: {err}",
        }
    texts = [r.activates_on for r in parsed]
    try:
        ratings = await rate_complexity(client, texts)
    except LLMMalformedOutputError as err:
        return {"status": "llm_malformed_output", "error": str(err), "n_rules": len(texts)}
    return {
        "status": "ok",
        "rules": texts,
        "ratings": ratings,
        "mean": float(np.mean(ratings)),
        "max": int(max(ratings)),
        "n_rules": len(texts),
    }


async def run_complexity(
    store: Store,
    sae_id: str,
    client: LLMClient | None,
    *,
    explainer: str | None = None,
    features: Sequence[int] | None = None,
    progress: bool = True,
) -> ScoreJobResult:
    """Rate the rules of the SAE's explanations (optionally one explainer's, some features') and store each score."""
    llm = require_client(client)
    t0 = time.perf_counter()
    wanted = None if features is None else {int(f) for f in features}
    rows = [
        e
        for e in store.explanations(sae_id=sae_id, explainer=explainer)
        if e.id is not None and (wanted is None or e.feature in wanted)
    ]
    done = {
        str(s.provenance.get("score_key"))
        for s in store.scores(sae_id=sae_id, scorer="complexity")
        if s.provenance.get("score_key")
    }
    model = llm.config.model
    scored = skipped = failed = dead = 0
    # One explanation at a time: each is one short call, and the order of calls stays reproducible.
    for e in tqdm(rows, desc="score complexity", disable=not progress):
        eid = int(e.id or 0)
        key = complexity_key(eid, model)
        if key in done:
            skipped += 1
            continue
        started = time.perf_counter()
        usage_before = llm.ledger.total.to_dict()
        if e.extra.get("status") == "dead":
            metrics: dict[str, Any] = {"status": "dead", "reason": str(e.extra.get("reason", "dead feature"))}
            dead += 1
        else:
            metrics = await _rate_one(llm, e.rules)
            if metrics["status"] == "ok":
                scored += 1
            else:
                failed += 1
        after = llm.ledger.total.to_dict()
        store.add_score(
            ScoreRecord(
                explanation_id=eid,
                scorer="complexity",
                scorer_version=COMPLEXITY_SCORER_VERSION,
                negative_source="",
                metrics=metrics,
                provenance={
                    "score_key": key,
                    "backend": f"llm:{model}",
                    "prompt_version": COMPLEXITY_PROMPT_VERSION,
                    "llm_params": llm.config.params(),
                    "llm_usage": {k: after.get(k, 0) - usage_before.get(k, 0) for k in after},
                    "seconds": time.perf_counter() - started,
                },
            )
        )
        done.add(key)
    return ScoreJobResult(scored, skipped, failed, time.perf_counter() - t0, dead)
