"""Batch scoring: score every stored explanation of an SAE with one scorer (and one negative source), into the store.

    result = run_scoring(store, sae_id, ScoreConfig("simulation", "SIMILAR_NEGATIVE"), ScoreBackends())

One loop serves every scorer (`evaluation.scorers.base.Scorer`, named in `evaluation.scorers.registry`): which explanations, resume,
dead features, test records, provenance and storing are here; what a score is, is the scorer's.

Test records (tree paper, Ma et al. NeurIPS 2025): the TEST third of the feature's shared split
(`examples.testsets`: 30 positives from the top chunk and 30 negatives of the configured source, dealt 10/10/10), the
same split the explainers drew their train (and valid) windows from, so an explanation is never scored on a window it
was shown. A window the explanation was shown anyway (an explainer reading beyond the split, or scoring with another
negative source than the explainer's) is replaced from the split's spares; `test_windows_seen` records how many
test windows that was. Every score records its key, the negative source, the test window ids, the split's seed and
negative sample, the judging component, the prompt version and the LLM usage.

Labels follow activations (the tree paper's reference code labels a record by whether the feature fires on it): a
drawn negative whose record fires (possible under RANDOM and SIMILAR, which draw from every window) is scored as a
positive; `negatives_fired` (metric and provenance) counts them and the report shows their mean.

Explanations already scored under the same key are skipped (resumable; the store refuses a duplicate key). A dead
feature, or an explanation that cannot be scored, is recorded with its `Status` and the batch goes on. So is an LLM
failure of one explanation (`llm.errors.FEATURE_ERRORS`), with a retryable status that the next run scores again;
`JOB_FATAL_ERRORS` (wrong key, endpoint down for good) stop the run. Explanations whose own LLM calls failed are not
scored.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from tqdm.auto import tqdm

from sae_workbench.evaluation.scorers.base import (
    NEGATIVE_SOURCES,
    ScoreBackends,
    ScoreConfig,
    ScoreConfigError,
    ScoreOutcome,
    Scorer,
    ScorerInputs,
    TestRecords,
)
from sae_workbench.evaluation.scorers.registry import SCORERS, make_scorer
from sae_workbench.evaluation.scorers.results import ScoreJobResult
from sae_workbench.evaluation.scorers.simulation import UnscorableExplanationError
from sae_workbench.examples.loading import load_records
from sae_workbench.examples.testsets import (
    FeatureSplit,
    SplitConfig,
    draw_split,
    held_out_test,
    prepare_split,
)
from sae_workbench.explainers.failures import failure_info, llm_failure_status
from sae_workbench.llm.cache import ResponseCache
from sae_workbench.llm.config import LLMConfig, config_provenance
from sae_workbench.llm.errors import FEATURE_ERRORS, JOB_FATAL_ERRORS
from sae_workbench.llm.sync import blocking
from sae_workbench.status import Status
from sae_workbench.store import ExplanationRecord, NotIndexedError, ScoreRecord, Store

log = logging.getLogger(__name__)

__all__ = [
    "NEGATIVE_SOURCES",
    "SCORERS",
    "ScoreBackends",
    "ScoreConfig",
    "ScoreConfigError",
    "ScorePlan",
    "ScoreTally",
    "TestSetBuilder",
    "base_provenance",
    "judge",
    "plan_scoring",
    "run_scoring",
    "run_scoring_async",
    "score_backends",
    "score_key",
    "tests_of",
    "usage_delta",
]  # fmt: skip


def score_backends(
    llm: LLMConfig | None,
    *,
    cache: ResponseCache | None = None,
    embedding_model: str = "",
    inputs: ScorerInputs | None = None,
    env: Mapping[str, str] | None = None,
    gate: Any = None,
) -> ScoreBackends:
    """The components `workbench score` builds scorers from, locally and on Ray workers: offline (lexical) without
    `llm`, else an LLM simulator and classifier on one client; a named sentence-transformers embedder when
    `embedding_model` is given; `inputs` for a scorer that loads more itself (cosy)."""
    backends = ScoreBackends(inputs=inputs or ScorerInputs())
    if embedding_model:
        from sae_workbench.explainers.prism import SentenceEmbedder

        backends.embedder = SentenceEmbedder(embedding_model)
    if llm is not None:
        from sae_workbench.evaluation.scorers.detection import LLMClassifier
        from sae_workbench.explainers.simulate import LLMSimulator
        from sae_workbench.llm.client import LLMClient

        client = LLMClient(llm, cache=cache, env=env, gate=gate)
        backends.simulator = LLMSimulator(client, tag="score")
        backends.classifier = LLMClassifier(client)
        backends.llm_usage = lambda: client.ledger.total.to_dict()
        backends.llm_client = client
    return backends


def score_key(
    explanation_id: int, config: ScoreConfig, scorer: Scorer, split: SplitConfig | None = None
) -> str:
    """Unique key of (explanation, scorer + version, backend, prompt, its parameters, and the test-set settings it
    uses: `split`, the explanation's as `ScoreConfig.split_for` resolves it; default: the run's own)."""
    payload: dict[str, Any] = {
        "explanation_id": int(explanation_id), "scorer": scorer.name, "scorer_version": scorer.version,
        "backend": scorer.backend(), "prompt_version": scorer.prompt_version(), "params": scorer.key_params(),
    }  # fmt: skip
    if scorer.uses_test_set:
        cfg = split or config.split()
        payload["tests"] = {**asdict(config), "scorer": None, "split_config": None,
                            "negatives": cfg.negatives.value, "record_length": cfg.record_length}  # fmt: skip
        if not scorer.uses_negatives:
            payload["tests"]["negatives"] = ""
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32]


def shown_ids(explanation: ExplanationRecord) -> set[int]:
    """Every window the explanation's author was shown, as the explanation records it: its examples and negatives,
    plus `extra["shown_ids"]` (a hypothesis: the windows its feature page showed, or what `--seen` named)."""
    extra = explanation.extra.get("shown_ids", []) if isinstance(explanation.extra, dict) else []
    return {int(i) for i in (*explanation.example_ids, *explanation.negative_ids, *extra)}


class TestSetBuilder:
    """The test records of explanations: the test third of each feature's shared split, drawn once per feature."""

    __test__ = False  # a library type, not a pytest class

    def __init__(self, store: Store, sae_id: str, config: ScoreConfig) -> None:
        """Bind to an indexed SAE."""
        progress = store.index_progress(sae_id)
        if progress is None:
            raise NotIndexedError(
                f"SAE {sae_id} has no activations in {store.path}; run `workbench index` first."
            )
        self.store, self.sae_id, self.config = store, sae_id, config
        self.corpus = progress.corpus
        self.split_config = config.split()
        self._splits: dict[tuple[int, SplitConfig], FeatureSplit] = {}

    def split(self, feature: int, config: SplitConfig | None = None) -> FeatureSplit:
        """The feature's split under `config` (default: the run's; drawn on first use; the negative sample is stored
        and reused)."""
        cfg = config or self.split_config
        if (feature, cfg) not in self._splits:
            with self.store.session():  # one connection for the feature's reads (short: no LLM call inside)
                self._splits[feature, cfg] = draw_split(self.store, self.sae_id, feature, cfg)
        return self._splits[feature, cfg]

    def build(self, explanation: ExplanationRecord) -> TestRecords:
        """Test records of one explanation: its feature's test third (under the explanation's own split unless the
        run was told otherwise) minus any window it was shown."""
        cfg = self.config.split_for(explanation.sampling)
        split = self.split(explanation.feature, cfg)
        held = held_out_test(self.store, self.sae_id, self.corpus, split, shown_ids(explanation))
        test, seen = held.third, held.seen
        length = cfg.record_length
        with self.store.session():
            positives = load_records(
                self.store, self.sae_id, self.corpus, split.feature, test.positives, length
            )
            negatives = load_records(
                self.store, self.sae_id, self.corpus, split.feature, test.negatives, length
            )
        # Labels follow activations (the reference's rule): a drawn negative whose record fires (RANDOM and SIMILAR
        # draw from every window) is scored as a positive, whatever source it came from.
        fired = [r for r in negatives if r.max_act > cfg.threshold]
        negatives = [r for r in negatives if r.max_act <= cfg.threshold]
        provenance: dict[str, Any] = {
            **split.provenance(), "negative_source": cfg.negatives.value, "positive_ids": list(test.positives),
            "negative_ids": list(test.negatives), "test_windows_seen": seen, "negatives_fired": len(fired),
            "fired_negative_ids": [r.window_id for r in fired], "held_out": held.metrics(),
        }  # fmt: skip
        return TestRecords([*positives, *fired], negatives, provenance)


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
    """Score the SAE's explanations (optionally one explainer's, some features') and store each score; one event loop
    for the whole batch, so one LLM client serves it (`run_scoring` is the blocking form)."""
    t0 = time.perf_counter()
    backends = backends or ScoreBackends()
    scorer = make_scorer(config, backends)
    plan = plan_scoring(store, sae_id, config, scorer, explainer, features)
    rows, keys, pending, builder = plan.rows, plan.keys, plan.pending, plan.builder
    if pending:
        await scorer.prepare(rows)
    tally = ScoreTally(scorer, config.negatives)
    desc = f"score {scorer.name}" + (f"/{tally.source}" if tally.source else "")
    for expl in tqdm(pending, desc=desc, disable=not progress):
        started = time.perf_counter()
        usage_before = backends.llm_usage() if backends.llm_usage else {}
        client = backends.llm_client
        llm_params = config_provenance(client.config) if client is not None else None
        provenance = base_provenance(scorer, keys[int(expl.id or 0)], llm_params)
        tests = tests_of(expl, builder, provenance, scorer.needs_negatives)
        if isinstance(tests, ScoreOutcome):  # recorded without a call: the settings as configured
            outcome = tests
        else:
            outcome = await judge(scorer, expl, tests)
            if (
                client is not None
            ):  # the client's provenance after its calls: form, context and its source, counter
                provenance["llm_params"] = client.provenance()
        provenance["seconds"] = time.perf_counter() - started
        if backends.llm_usage:
            provenance["llm_usage"] = usage_delta(usage_before, backends.llm_usage())
        store.add_score(tally.record(expl, outcome, provenance))
    return tally.result(plan.skipped, time.perf_counter() - t0)


run_scoring = blocking(run_scoring_async)
"""Score the SAE's explanations (optionally one explainer's, some features') and store each score: `run_scoring_async`
run to completion."""


def usage_delta(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """The LLM usage between two readings of a ledger's totals (one score's own usage)."""
    return {k: after.get(k, 0) - before.get(k, 0) for k in after}


class ScoreTally:
    """A run's outcome counts and the stored row of each outcome: one place for the local loop and the Ray driver."""

    def __init__(self, scorer: Scorer, negatives: str | None) -> None:
        """Rows of `scorer`; the negative source is recorded only for a scorer that uses negatives: `negatives`, or
        each score's own (its test records' `negative_source`) when None."""
        self.scorer = scorer
        self.uses_negatives = scorer.uses_negatives
        self.source = (negatives or "") if scorer.uses_negatives else ""
        self.counts = {"scored": 0, "failed": 0, "dead": 0}

    def record(
        self, expl: ExplanationRecord, outcome: ScoreOutcome, provenance: dict[str, Any]
    ) -> ScoreRecord:
        """Count `outcome` and return the row that stores it (its key is the provenance's `score_key`)."""
        status = outcome.status
        self.counts["scored" if status is Status.OK else "dead" if status is Status.DEAD else "failed"] += 1
        return ScoreRecord(
            explanation_id=int(expl.id or 0), scorer=self.scorer.name, scorer_version=self.scorer.version,
            negative_source=str(provenance.get("negative_source") or self.source) if self.uses_negatives else "",
            metrics=outcome.stored(), provenance=provenance,
            status=status, score_key=provenance["score_key"],
        )  # fmt: skip

    def result(self, skipped: int, seconds: float) -> ScoreJobResult:
        """What the run did."""
        c = self.counts
        return ScoreJobResult(c["scored"], skipped, c["failed"], seconds, c["dead"])


@dataclass(frozen=True)
class ScorePlan:
    """What a scoring run has to do: its explanations, their score keys, the pending ones and their test source."""

    rows: list[ExplanationRecord]
    """Every explanation of the run (the scorer's `prepare` sees them all, also those already scored)."""
    keys: dict[int, str]
    """Score key per explanation id (of the requested features)."""
    pending: list[ExplanationRecord]
    """Requested explanations not yet scored under their key, in store order."""
    skipped: int
    """Requested explanations already scored."""
    builder: TestSetBuilder | None
    """Test records of live pending explanations (None when the scorer uses none or none is live)."""


def plan_scoring(
    store: Store,
    sae_id: str,
    config: ScoreConfig,
    scorer: Scorer,
    explainer: str | None = None,
    features: Sequence[int] | None = None,
) -> ScorePlan:
    """Which explanations a run scores (pending = requested minus stored score keys); draws the shared split's
    negatives first when test records are needed (a store write)."""
    rows = [
        e
        for e in store.explanations(sae_id=sae_id, explainer=explainer)
        if e.id is not None and not e.status.retryable and (explainer is not None or not scorer.default_explainers
                                 or e.explainer in scorer.default_explainers)
    ]  # fmt: skip
    wanted = None if features is None else {int(f) for f in features}
    todo = [e for e in rows if wanted is None or e.feature in wanted]
    keys = {
        int(e.id or 0): score_key(int(e.id or 0), config, scorer, config.split_for(e.sampling)) for e in todo
    }
    done = store.score_keys(sae_id, scorer.name)
    pending = [e for e in todo if keys[int(e.id or 0)] not in done]
    builder = None
    if scorer.uses_test_set and any(e.status is not Status.DEAD for e in pending):
        builder = TestSetBuilder(store, sae_id, config)
        for cfg in {config.split_for(e.sampling) for e in pending if e.status is not Status.DEAD}:
            prepare_split(store, sae_id, cfg)
    return ScorePlan(rows, keys, pending, len(todo) - len(pending), builder)


def base_provenance(scorer: Scorer, key: str, llm_params: dict[str, Any] | None = None) -> dict[str, Any]:
    """The provenance every score of a run starts with (its key, judge, prompt, parameters, LLM settings)."""
    provenance: dict[str, Any] = {"score_key": key, "backend": scorer.backend(),
                                  "prompt_version": scorer.prompt_version(), **scorer.key_params()}  # fmt: skip
    if llm_params is not None:
        provenance["llm_params"] = llm_params
    return provenance


def tests_of(
    expl: ExplanationRecord,
    builder: TestSetBuilder | None,
    provenance: dict[str, Any],
    needs_negatives: bool = False,
) -> TestRecords | ScoreOutcome | None:
    """An explanation's test records (their provenance added to `provenance`), or the outcome recorded without
    scoring (a dead feature, no positive test record, no negative one when `needs_negatives`); None for a scorer
    without test records. Every score's provenance gets `record_length` (the tokens per test record; None for a
    scorer without test records)."""
    provenance.setdefault("record_length", None)
    if expl.status is Status.DEAD:
        return ScoreOutcome.failed(Status.DEAD, reason=str(expl.extra.get("reason", "dead feature")))
    if builder is None:
        return None
    tests = builder.build(expl)
    provenance.update(tests.provenance)
    if not tests.positives:
        return ScoreOutcome.failed(Status.NO_ACTIVATIONS)
    if needs_negatives and not tests.negatives:
        short = float(tests.provenance.get("held_out", {}).get("test_negatives_short", 0.0))
        return ScoreOutcome.failed(Status.NO_NEGATIVES, test_negatives_short=short)
    return tests


async def judge(scorer: Scorer, expl: ExplanationRecord, tests: TestRecords | None) -> ScoreOutcome:
    """A live explanation's outcome from its scorer (an unscorable explanation is a recorded outcome)."""
    try:
        outcome = await scorer.score(expl, tests)
    except UnscorableExplanationError as err:
        return ScoreOutcome.failed(Status.UNSCORABLE_EXPLANATION, error=str(err))
    except JOB_FATAL_ERRORS:
        raise
    except (
        FEATURE_ERRORS
    ) as err:  # this explanation's LLM failure: stored with its reason, retried on the next run
        log.warning(
            "explanation %s (feature %d) failed: %s: %s", expl.id, expl.feature, type(err).__name__, err
        )
        info = failure_info(err)
        return ScoreOutcome.failed(llm_failure_status(err), error=info["reason"], error_type=info["error"])
    if outcome.status is Status.OK and tests is not None:
        outcome.metrics["test_windows_seen"] = tests.provenance["test_windows_seen"]
        outcome.metrics["negatives_fired"] = tests.provenance["negatives_fired"]
        outcome.metrics.update(tests.provenance["held_out"])
    return outcome
