"""Explanation stability across matched features: do two SAEs' explanations of a matched pair say the same thing, and
does SAE A's explanation still score on SAE B's feature?

    rows = explanation_pairs(store, run, explainer="lexical")
    stored = record_stability(store, run, rows)          # text similarity + A's text stored as B's "transfer" explanation
    # then: workbench score --store S --sae <B> --explainer transfer --scorer detection   (the normal scorers and split)
    table = stability_table(store, run)                  # B's own score next to the transferred one, per scorer

(a) Similarity of the two texts: cosine of the project's embedding model (workbench.embeddings, all-MiniLM-L6-v2 by
default). (b) Transfer: A's explanation is stored on B's matched feature as explainer `transfer` (its source in
`extra`), so `workbench score --explainer transfer` scores it with the normal scorers on B's own test split, and the
table puts that score next to B's own explanation's score under the same scorer and negatives.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from sae_workbench.embeddings import DEFAULT_EMBEDDING_MODEL, embed_texts
from sae_workbench.evaluation.scorers.registry import headline_metric
from sae_workbench.status import Status
from sae_workbench.store import ExplanationRecord, Store
from sae_workbench.store.families import MatchRun
from sae_workbench.store.sql import pa

TRANSFER_EXPLAINER = "transfer"
"""Explainer name of an explanation carried over from a matched feature of another SAE."""
TRANSFER_VERSION = "transfer-v1"


@dataclass(frozen=True)
class ExplanationPair:
    """A matched pair whose two features both have an explanation by the same explainer."""

    feature_a: int
    feature_b: int
    explanation_a: ExplanationRecord
    explanation_b: ExplanationRecord


def newest_explanations(store: Store, sae_id: str, explainer: str) -> dict[int, ExplanationRecord]:
    """feature -> the newest live explanation of `sae_id` by `explainer`."""
    out: dict[int, ExplanationRecord] = {}
    for e in store.explanations(sae_id=sae_id, explainer=explainer):
        if e.status is not Status.DEAD and e.id is not None:
            out[e.feature] = e  # explanations() is oldest first: the last one wins
    return out


def explanation_pairs(store: Store, run: MatchRun, explainer: str) -> list[ExplanationPair]:
    """The run's pairs where both features have an explanation by `explainer`."""
    ex_a = newest_explanations(store, run.sae_a, explainer)
    ex_b = newest_explanations(store, run.sae_b, explainer)
    pairs = store.feature_matches(run.match_key)
    out: list[ExplanationPair] = []
    for fa, fb in zip(
        pairs.column("feature_a").to_pylist(), pairs.column("feature_b").to_pylist(), strict=True
    ):
        if fa in ex_a and fb in ex_b:
            out.append(ExplanationPair(int(fa), int(fb), ex_a[fa], ex_b[fb]))
    return out


def transfer_record(run: MatchRun, pair: ExplanationPair) -> ExplanationRecord:
    """A's explanation as an explanation of B's matched feature (explainer `transfer`, its source in `extra`)."""
    src = pair.explanation_a
    key = hashlib.sha256(
        f"{TRANSFER_VERSION}|{run.match_key}|{src.id}|{run.sae_b}|{pair.feature_b}".encode()
    ).hexdigest()[:32]
    return ExplanationRecord(
        sae_id=run.sae_b,
        feature=pair.feature_b,
        explainer=TRANSFER_EXPLAINER,
        explainer_version=TRANSFER_VERSION,
        prompt_version="",
        llm_model="",
        llm_params={},
        sampling={},
        example_ids=[],
        negative_ids=[],
        text=src.text,
        config_key=key,
        rules=src.rules,
        extra={
            "source_sae": run.sae_a,
            "source_feature": pair.feature_a,
            "source_explanation": src.id,
            "source_explainer": src.explainer,
            "match_key": run.match_key,
        },
    )


def record_stability(
    store: Store, run: MatchRun, pairs: list[ExplanationPair], embedding_model: str = DEFAULT_EMBEDDING_MODEL
) -> int:
    """Embed both texts of every pair, store A's explanation on B as `transfer`, and store the stability rows
    (pairs already stored are skipped); return the rows added."""
    if not pairs:
        return 0
    texts_a = [p.explanation_a.text for p in pairs]
    texts_b = [p.explanation_b.text for p in pairs]
    emb = embed_texts(texts_a + texts_b, embedding_model)
    sims = np.sum(emb[: len(pairs)] * emb[len(pairs) :], axis=1)
    transfer_ids = store.add_explanations([transfer_record(run, p) for p in pairs])
    table = pa.table(
        {
            "match_key": pa.array([run.match_key] * len(pairs), pa.string()),
            "feature_a": pa.array([p.feature_a for p in pairs], pa.int32()),
            "feature_b": pa.array([p.feature_b for p in pairs], pa.int32()),
            "explanation_a": pa.array([int(p.explanation_a.id or 0) for p in pairs], pa.int64()),
            "explanation_b": pa.array([int(p.explanation_b.id or 0) for p in pairs], pa.int64()),
            "explainer": pa.array([p.explanation_a.explainer for p in pairs], pa.string()),
            "embedding_model": pa.array([embedding_model] * len(pairs), pa.string()),
            "text_similarity": pa.array(sims.astype(np.float32)),
            "transfer_explanation": pa.array([int(i) for i in transfer_ids], pa.int64()),
        }
    )
    return store.add_stability(table)


@dataclass(frozen=True)
class StabilityRow:
    """One matched pair under one scorer: both texts, their similarity, B's own score and the transferred one."""

    feature_a: int
    feature_b: int
    sim: float
    """Weight similarity of the pair."""
    text_a: str
    text_b: str
    text_similarity: float
    scorer: str
    """'' when neither explanation is scored yet."""
    negative_source: str
    metric: str
    own_score: float | None
    """B's own explanation's headline score."""
    transfer_score: float | None
    """A's explanation scored on B's feature (same scorer, negatives and test split)."""


def _headlines(store: Store, explanation_id: int) -> dict[tuple[str, str], tuple[str, float]]:
    """(scorer, negative source) -> (headline metric, value) of an explanation's OK scores."""
    out: dict[tuple[str, str], tuple[str, float]] = {}
    for s in store.scores(explanation_id=explanation_id):
        metric = headline_metric(s.scorer)
        value: Any = s.metrics.get(metric) if metric else None
        if s.status is Status.OK and metric and isinstance(value, int | float):
            out[(s.scorer, s.negative_source)] = (metric, float(value))
    return out


def stability_table(store: Store, run: MatchRun) -> list[StabilityRow]:
    """Every stored stability pair of the run, one row per scorer × negatives scoring B's own or the transferred
    explanation (one row with no scores when neither is scored yet)."""
    rows: list[StabilityRow] = []
    table = store.stability(run.match_key).to_pylist()
    with store.session():
        for r in table:
            own = _headlines(store, int(r["explanation_b"]))
            moved = (
                {} if r["transfer_explanation"] is None else _headlines(store, int(r["transfer_explanation"]))
            )
            base = (int(r["feature_a"]), int(r["feature_b"]), float(r["sim"]), str(r["text_a"]), str(r["text_b"]),
                    float(r["text_similarity"]))  # fmt: skip
            keys = sorted(set(own) | set(moved))
            if not keys:
                rows.append(StabilityRow(*base, "", "", "", None, None))
            for key in keys:
                metric = (own.get(key) or moved[key])[0]
                rows.append(
                    StabilityRow(
                        *base, key[0], key[1], metric,
                        own[key][1] if key in own else None, moved[key][1] if key in moved else None,
                    )
                )  # fmt: skip
    return rows
