"""Batch scoring: score every stored explanation of an SAE with one scorer and one negative source, into the store.

    result = run_scoring(store, sae_id, ScoreConfig("simulation", "SIMILAR_NEGATIVE"), ScoreBackends())

Test records (tree paper, Ma et al. NeurIPS 2025): positives are 3 × n_positives windows drawn with `seed` from the
top chunk (top 0.1% of windows by max activation, at least 30), dealt round-robin into train/valid/test
(`explainers.tree.interleave_splits`); the TEST third is scored, so explainers that use the same construction never
saw it (how many test windows an explanation was shown is recorded as `test_windows_seen`). Negatives: 3 ×
n_negatives windows from one source, the test third likewise:
- RANDOM: any indexed window that is not a positive; RANDOM_NEGATIVE: windows with max activation ≤ threshold;
- SIMILAR / SIMILAR_NEGATIVE: the windows most similar (mean cosine of MiniLM embeddings to the 400 highest-activating
  windows) excluding the positives (and, for SIMILAR_NEGATIVE, any window activating above the threshold).
Negatives are drawn by `explainers.sampling.draw_negatives` (the one implementation the explainers use too; the top
chunk is excluded) with seed + 1 and stored as a sample; a later run with the same settings reuses that sample.
Every score records the score key, the negative source, the positive and negative window ids, the seed, the
negative sample's id and seed, the simulator/classifier/generator name, the prompt version and the LLM usage.
Two scorers draw no test records: polysemanticity (PRISM, over stored descriptions) and complexity (an LLM rates each
rule 0..5, tree paper; `evaluation.complexity`; needs `ScoreBackends.llm_client`, there is no offline rating).
Explanations already scored under the same key are skipped (resumable). A feature with no activations, or an empty / unparseable explanation, is
recorded with a `status` and the batch goes on.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from sae_workbench.embeddings import DEFAULT_EMBEDDING_MODEL
from sae_workbench.errors import WorkbenchError
from sae_workbench.evaluation.complexity import COMPLEXITY_SCORER_VERSION
from sae_workbench.evaluation.cosy import (
    COSY_SCORER_VERSION,
    ActivationFn,
    CorpusRuleGenerator,
    GeneratorError,
    LLMGenerator,
)
from sae_workbench.evaluation.cosy import score_description as cosy_score_description
from sae_workbench.evaluation.detection import (
    DETECTION_SCORER_VERSION,
    FUZZING_SCORER_VERSION,
    Classifier,
    LexicalRuleClassifier,
    classification_items,
    score_items,
)
from sae_workbench.evaluation.embedding_scorer import EMBEDDING_SCORER_VERSION, Embedder, embedding_auroc
from sae_workbench.evaluation.polysemanticity import POLYSEMANTICITY_SCORER_VERSION
from sae_workbench.evaluation.results import ScoreJobResult
from sae_workbench.evaluation.simulation import (
    SIMULATION_SCORER_VERSION,
    UnscorableExplanationError,
    nan_to_none,
    scorable_explanation,
    score_simulation,
)
from sae_workbench.examples.records import Record, crop_record, make_record
from sae_workbench.examples.sampling import (
    NegativeConfig,
    NegativeSource,
    draw_negatives,
    ensure_window_embeddings,
    negative_params,
)
from sae_workbench.explainers.lexical import LexicalSimulator
from sae_workbench.explainers.prism import cluster_descriptions
from sae_workbench.explainers.simulate import Simulator
from sae_workbench.explainers.tree import top_chunk_size
from sae_workbench.llm.client import LLMClient
from sae_workbench.store import ExplanationRecord, Sample, ScoreRecord, Store

log = logging.getLogger(__name__)

SCORERS = ("simulation", "detection", "fuzzing", "embedding", "cosy", "polysemanticity", "complexity")
NEGATIVE_SOURCES = ("RANDOM", "RANDOM_NEGATIVE", "SIMILAR", "SIMILAR_NEGATIVE")
SCORER_VERSIONS = {
    "simulation": SIMULATION_SCORER_VERSION,
    "detection": DETECTION_SCORER_VERSION,
    "fuzzing": FUZZING_SCORER_VERSION,
    "embedding": EMBEDDING_SCORER_VERSION,
    "cosy": COSY_SCORER_VERSION,
    "polysemanticity": POLYSEMANTICITY_SCORER_VERSION,
    "complexity": COMPLEXITY_SCORER_VERSION,
}
# Embedding model used for close negatives (tree-explainer spec: offline default all-MiniLM-L6-v2).
EMBEDDING_MODEL = DEFAULT_EMBEDDING_MODEL


class ScoreConfigError(WorkbenchError):
    """A scoring option is invalid (unknown scorer or negative source, missing backend)."""


@dataclass(frozen=True)
class ScoreConfig:
    """What to score and how the test records are drawn."""

    scorer: str
    """simulation, detection, fuzzing, embedding, cosy, polysemanticity (PRISM's, over stored descriptions) or
    complexity (an LLM rates each rule 0..5)."""
    negatives: str = "SIMILAR_NEGATIVE"
    """RANDOM, RANDOM_NEGATIVE, SIMILAR or SIMILAR_NEGATIVE (tree paper default: SIMILAR_NEGATIVE). Unused by cosy,
    polysemanticity and complexity."""
    n_positives: int = 10
    """Positive test records (tree paper: 10)."""
    n_negatives: int = 10
    """Negative test records (tree paper: 10)."""
    seed: int = 0
    """Seed of the positive/negative draws (and fuzzing highlights)."""
    threshold: float = 0.0
    """A window is non-activating when its max activation is ≤ this (tree paper: 0)."""
    reference_size: int = 400
    """Highest-activating windows that define similarity for close negatives (tree paper: 400)."""
    record_length: int | None = None
    """Crop records to this many tokens around their peak (None: whole windows; the tree paper uses 32)."""

    def __post_init__(self) -> None:
        """Reject unknown names with the valid choices."""
        if self.scorer not in SCORERS:
            raise ScoreConfigError(f"unknown scorer {self.scorer!r}; choose one of {', '.join(SCORERS)}")
        if self.negatives not in NEGATIVE_SOURCES:
            raise ScoreConfigError(
                f"unknown negative source {self.negatives!r}; choose one of {', '.join(NEGATIVE_SOURCES)}"
            )


@dataclass
class ScoreBackends:
    """The components a scorer runs on (offline defaults: lexical simulator and lexical rule matching)."""

    simulator: Simulator = field(default_factory=LexicalSimulator)
    """Simulator of the simulation scorer."""
    classifier: Classifier | None = None
    """Classifier of detection/fuzzing (None: lexical rule matching through `simulator`)."""
    embedder: Embedder | None = None
    """Text embedder for the embedding scorer and close negatives (None: all-MiniLM-L6-v2)."""
    generator: LLMGenerator | CorpusRuleGenerator | None = None
    """CoSy text generator (LLMGenerator, or offline CorpusRuleGenerator); required by cosy."""
    activation_fn_for: Callable[[int], ActivationFn] | None = None
    """feature → mean-activation-per-text function (model + SAE forward); required by cosy."""
    control_texts: Sequence[str] = ()
    """CoSy control texts (a fixed held-out slice of the corpus); required by cosy."""
    prompt_version: str = ""
    """Prompt version of the LLM component, if any (recorded)."""
    llm_usage: Callable[[], dict[str, Any]] | None = None
    """Returns the LLM usage so far (tokens, seconds), recorded as a per-score delta."""
    llm_client: LLMClient | None = None
    """LLM that rates rule complexity; required by complexity (no offline rating)."""

    _memo: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    """Embeddings computed so far, per text (one batch's explanations share their features' test windows)."""

    def embed(self) -> Embedder:
        """The embedder (loading the default on first use), memoised per text."""
        if self.embedder is None:
            from sae_workbench.evaluation.embedding_scorer import default_embedder

            self.embedder = default_embedder()
        embedder, memo = self.embedder, self._memo

        def embed_memoised(texts: Sequence[str]) -> np.ndarray:
            todo = list(dict.fromkeys(t for t in texts if t not in memo))
            if todo:
                memo.update(zip(todo, np.asarray(embedder(todo), dtype=np.float32), strict=True))
            return np.stack([memo[t] for t in texts]) if texts else np.zeros((0, 0), np.float32)

        return embed_memoised


@dataclass(frozen=True)
class TestSet:
    """Test records of one feature under one negative source."""

    positives: list[Record]
    """Positive test records."""
    negatives: list[Record]
    """Negative test records."""
    provenance: dict[str, Any]
    """Source, ids and seed of what was drawn."""


def score_key(explanation_id: int, config: ScoreConfig, backend_name: str) -> str:
    """Unique key of (explanation, scorer + version, negatives, draw settings, backend)."""
    payload = {
        "explanation_id": explanation_id,
        "scorer_version": SCORER_VERSIONS[config.scorer],
        "backend": backend_name,
        **asdict(config),
    }
    if config.scorer in ("cosy", "polysemanticity"):
        payload["negatives"] = ""
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32]


def backend_name(config: ScoreConfig, backends: ScoreBackends) -> str:
    """Name of the component that does the judging (recorded; part of the score key)."""
    if config.scorer == "simulation":
        return backends.simulator.name
    if config.scorer in ("detection", "fuzzing"):
        return (backends.classifier or LexicalRuleClassifier(backends.simulator)).name
    if config.scorer == "complexity":
        return f"llm:{backends.llm_client.config.model}" if backends.llm_client is not None else "none"
    if config.scorer in ("embedding", "polysemanticity"):
        return (
            EMBEDDING_MODEL
            if backends.embedder is None
            else getattr(backends.embedder, "name", "custom-embedder")
        )
    return backends.generator.name if backends.generator is not None else CorpusRuleGenerator.name


def existing_score_keys(store: Store, sae_id: str, scorer: str) -> set[str]:
    """Score keys already stored for an SAE and scorer."""
    return {
        str(s.provenance.get("score_key"))
        for s in store.scores(sae_id=sae_id, scorer=scorer)
        if s.provenance.get("score_key")
    }


# ---------------------------------------------------------------------------------------------- test records


def _records(
    store: Store, sae_id: str, corpus: str, feature: int, ids: Sequence[int], length: int | None
) -> list[Record]:
    """Records of `ids` with the feature's activations (BOS and masked positions dropped)."""
    if not ids:
        return []
    windows = store.get_windows(corpus, ids)
    acts_NT = store.window_activations(sae_id, feature, ids)
    out = []
    for w, acts_T in zip(windows, acts_NT, strict=True):
        pos = np.flatnonzero(acts_T)
        r = make_record(w.window_id, w.token_strings, pos, acts_T[pos], w.mask)
        out.append(crop_record(r, length))
    return out


def _third(ids: Sequence[int], part: int = 2) -> list[int]:
    """The `part`-th of three round-robin splits (2 = test), as interleave_splits deals them."""
    return [int(i) for i in list(ids)[part::3]]


class TestSetBuilder:
    """Draws and caches test sets per (feature, negative source); negatives come from `explainers.sampling`."""

    def __init__(self, store: Store, sae_id: str, config: ScoreConfig, backends: ScoreBackends) -> None:
        """Bind to an indexed SAE."""
        self.store = store
        self.sae_id = sae_id
        self.config = config
        self.backends = backends
        progress = store.index_progress(sae_id)
        if progress is None:
            from sae_workbench.store import NotIndexedError

            raise NotIndexedError(
                f"SAE {sae_id} has no activations in {store.path}; run `workbench index` first."
            )
        self.corpus = progress.corpus
        self.all_ids = store.indexed_window_ids(sae_id)
        self._embedded = False

    def positives(self, feature: int) -> tuple[list[int], int]:
        """(3 × n_positives window ids sorted by activation, top-chunk size) drawn with the seed."""
        maxima = self.store.window_maxima(self.sae_id, feature)
        active = maxima.values > self.config.threshold
        ids, vals = maxima.window_ids[active], maxima.values[active]
        chunk = min(len(ids), top_chunk_size(len(self.all_ids)))
        order = np.lexsort((ids, -vals))[:chunk]
        rng = np.random.default_rng(self.config.seed)
        take = rng.choice(order, size=min(chunk, 3 * self.config.n_positives), replace=False)
        take = take[np.lexsort((ids[take], -vals[take]))]
        return [int(i) for i in ids[take]], chunk

    def negatives(self, feature: int, exclude: np.ndarray) -> Sample:
        """3 × n_negatives window ids from the configured source (most similar first for SIMILAR*), as a stored
        sample: `explainers.sampling.draw_negatives` draws it once with seed + 1, later runs reuse it."""
        cfg = self.config
        source = NegativeSource(cfg.negatives)
        k, seed = 3 * cfg.n_negatives, cfg.seed + 1
        neg_cfg = NegativeConfig(
            reference_size=cfg.reference_size, threshold=cfg.threshold, embedding_model=EMBEDDING_MODEL
        )
        params = negative_params(k, neg_cfg, exclude)
        for stored in self.store.samples(self.sae_id, feature, source.value):
            if stored.seed == seed and stored.config == params:
                return stored
        if source.value.startswith("SIMILAR") and not self._embedded:
            ensure_window_embeddings(self.store, self.sae_id, EMBEDDING_MODEL)  # once; a no-op when embedded
            self._embedded = True
        return draw_negatives(
            self.store, self.sae_id, feature, source, k=k, seed=seed, config=neg_cfg, exclude=exclude
        )

    def build(self, feature: int) -> TestSet:
        """Test positives and negatives of a feature (the test third of each draw)."""
        pos_ids, chunk = self.positives(feature)
        # Exclude the whole top chunk from negatives so no positive candidate becomes a negative.
        maxima = self.store.window_maxima(self.sae_id, feature)
        top_chunk = maxima.window_ids[maxima.by_peak()[:chunk]]
        sample = None
        if self.config.scorer != "cosy" and pos_ids:
            sample = self.negatives(feature, np.union1d(top_chunk, pos_ids))
        neg_ids = sample.window_ids if sample is not None else []
        test_pos, test_neg = _third(pos_ids), _third(neg_ids)
        length = self.config.record_length
        positives = _records(self.store, self.sae_id, self.corpus, feature, test_pos, length)
        negatives = _records(self.store, self.sae_id, self.corpus, feature, test_neg, length)
        return TestSet(
            positives,
            negatives,
            {
                "negative_source": self.config.negatives if self.config.scorer != "cosy" else "",
                "seed": self.config.seed,
                "positive_ids": test_pos,
                "negative_ids": test_neg,
                "negative_sample_id": sample.id if sample is not None else None,
                "negative_seed": sample.seed if sample is not None else None,
                "top_chunk": int(chunk),
                "threshold": self.config.threshold,
                "reference_size": self.config.reference_size,
                "embedding_model": EMBEDDING_MODEL if self.config.negatives.startswith("SIMILAR") else "",
            },
        )


# ---------------------------------------------------------------------------------------------- scoring one


async def _score_one(
    expl: ExplanationRecord, tests: TestSet, config: ScoreConfig, backends: ScoreBackends
) -> dict[str, Any]:
    """Metrics of one explanation (raises UnscorableExplanationError / GeneratorError for recorded failures)."""
    scorable = scorable_explanation(expl.text, expl.rules)
    if config.scorer == "simulation":
        return (
            await score_simulation(backends.simulator, scorable, tests.positives, tests.negatives)
        ).to_dict()
    if config.scorer in ("detection", "fuzzing"):
        clf = backends.classifier or LexicalRuleClassifier(backends.simulator)
        task = "detection" if config.scorer == "detection" else "fuzzing"
        items = classification_items(task, tests.positives, tests.negatives, seed=config.seed)
        m = (await score_items(clf, task, scorable, items)).to_dict()
        if task == "fuzzing":
            # delphi's mis-highlighted positives (label 0) next to the correctly highlighted ones and the negatives.
            m["n_mis_highlighted"] = sum(it.kind == "mis_highlighted" for it in items)
        return m
    if config.scorer == "embedding":
        pos = ["".join(r.tokens) for r in tests.positives]
        neg = ["".join(r.tokens) for r in tests.negatives]
        return embedding_auroc(backends.embed(), scorable.text, pos, neg).to_dict()
    return await _score_cosy(expl, scorable.text, config, backends)


async def _score_cosy(
    expl: ExplanationRecord, text: str, config: ScoreConfig, backends: ScoreBackends
) -> dict[str, Any]:
    """CoSy metrics of each description (PRISM explanations carry one per cluster in extra['clusters'])."""
    if backends.activation_fn_for is None or not backends.control_texts or backends.generator is None:
        raise ScoreConfigError(
            "cosy needs a generator, an activation function (model + SAE) and control texts; "
            "`workbench score --scorer cosy` builds them from --sae-path"
        )
    fn = backends.activation_fn_for(expl.feature)
    control = fn(list(backends.control_texts))
    descriptions = cluster_descriptions(expl.extra) or [text]
    per: list[dict[str, Any]] = []
    for d in descriptions:
        s, texts = await cosy_score_description(backends.generator, d, fn, control)
        per.append({"description": d, **s.to_dict(), "texts": texts})
    aucs = [p["auc"] for p in per]
    mads = [p["mad"] for p in per]
    return {
        "auc": float(np.nanmax(aucs)),
        "mad": float(np.nanmax(mads)),
        "auc_mean": float(np.nanmean(aucs)),
        "mad_mean": float(np.nanmean(mads)),
        "mannwhitney_p": float(np.nanmin([p["mannwhitney_p"] for p in per])),
        "n_descriptions": len(per),
        "descriptions": per,
    }


def run_scoring(
    store: Store,
    sae_id: str,
    config: ScoreConfig,
    backends: ScoreBackends | None = None,
    *,
    explainer: str | None = None,
    features: Sequence[int] | None = None,
    progress: bool = True,
) -> ScoreJobResult:
    """Score the SAE's explanations (optionally one explainer's, some features') and store each score."""
    return asyncio.run(
        run_scoring_async(
            store, sae_id, config, backends, explainer=explainer, features=features, progress=progress
        )
    )


async def run_scoring_async(
    store: Store,
    sae_id: str,
    config: ScoreConfig,
    backends: ScoreBackends | None = None,
    *,
    explainer: str | None = None,
    features: Sequence[int] | None = None,
    progress: bool = True,
) -> ScoreJobResult:
    """Async form of `run_scoring` (one event loop for the whole batch, so one LLM client serves it)."""
    backends = backends or ScoreBackends()
    if config.scorer == "polysemanticity":
        from sae_workbench.evaluation.polysemanticity import run_prism_polysemanticity

        return run_prism_polysemanticity(
            store,
            sae_id,
            backends.embed(),
            embedding_model=backend_name(config, backends),
            explainer=explainer,
            features=features,
            seed=config.seed,
            progress=progress,
        )
    if config.scorer == "complexity":
        from sae_workbench.evaluation.complexity import run_complexity

        return await run_complexity(
            store, sae_id, backends.llm_client, explainer=explainer, features=features, progress=progress
        )
    t0 = time.perf_counter()
    explanations = store.explanations(sae_id=sae_id, explainer=explainer)
    if features is not None:
        wanted = set(int(f) for f in features)
        explanations = [e for e in explanations if e.feature in wanted]
    name = backend_name(config, backends)
    done = existing_score_keys(store, sae_id, config.scorer)
    builder = TestSetBuilder(store, sae_id, config, backends)
    cache: dict[int, TestSet] = {}
    scored = skipped = failed = dead = 0
    for expl in tqdm(explanations, desc=f"score {config.scorer}/{config.negatives}", disable=not progress):
        assert expl.id is not None
        key = score_key(expl.id, config, name)
        if key in done:
            skipped += 1
            continue
        started = time.perf_counter()
        usage_before = backends.llm_usage() if backends.llm_usage else {}
        provenance: dict[str, Any] = {
            "score_key": key,
            "backend": name,
            "prompt_version": backends.prompt_version,
        }
        if is_dead(expl):
            store.add_score(
                ScoreRecord(
                    explanation_id=expl.id,
                    scorer=config.scorer,
                    scorer_version=SCORER_VERSIONS[config.scorer],
                    negative_source=config.negatives if config.scorer != "cosy" else "",
                    metrics={"status": "dead", "reason": str(expl.extra.get("reason", "dead feature"))},
                    provenance={**provenance, "seconds": 0.0},
                )
            )
            done.add(key)
            dead += 1
            continue
        try:
            if expl.feature not in cache:
                # One connection for the feature's reads (short: no LLM call inside), not one per query.
                with store.session():
                    cache[expl.feature] = builder.build(expl.feature)
            tests = cache[expl.feature]
            provenance.update(tests.provenance)
            if not tests.positives:
                metrics: dict[str, Any] = {"status": "no_activations"}
                failed += 1
            else:
                metrics = {"status": "ok", **(await _score_one(expl, tests, config, backends))}
                seen = set(expl.example_ids) | set(expl.negative_ids)
                metrics["test_windows_seen"] = len(
                    seen & set(tests.provenance["positive_ids"] + tests.provenance["negative_ids"])
                )
                scored += 1
        except UnscorableExplanationError as err:
            metrics = {"status": "unscorable_explanation", "error": str(err)}
            failed += 1
        except GeneratorError as err:
            metrics = {"status": "generator_failed", "error": str(err)}
            failed += 1
        provenance["seconds"] = time.perf_counter() - started
        if backends.llm_usage:
            after = backends.llm_usage()
            provenance["llm_usage"] = {k: after.get(k, 0) - usage_before.get(k, 0) for k in after}
        store.add_score(
            ScoreRecord(
                explanation_id=expl.id,
                scorer=config.scorer,
                scorer_version=SCORER_VERSIONS[config.scorer],
                negative_source=str(provenance.get("negative_source", config.negatives)),
                metrics=nan_to_none(metrics),
                provenance=provenance,
            )
        )
        done.add(key)
    return ScoreJobResult(scored, skipped, failed, time.perf_counter() - t0, dead)


def is_dead(expl: ExplanationRecord) -> bool:
    """Whether the explainer recorded the feature as dead (no activations; empty text, nothing to score)."""
    return expl.extra.get("status") == "dead"
