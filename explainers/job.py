"""The explain batch job: explain many features of one SAE with one explainer, resumably, into the store.

    summary = ExplainJob(store, sae_id, ExplainConfig("tree"), llm=LLMConfig(...)).run(range(50))

Each feature's explanation is keyed by a hash of (SAE, feature, explainer + version, prompt version, LLM model and
sampling parameters, sampling config). Finished features are committed in batches — one transaction per 64
features or per second, whichever comes first (a commit of a few tree explanations costs 10–20 ms; slow LLM-bound
features still get one commit each) — so a killed job loses at most the features in flight plus one second of finished
work, and a rerun skips everything stored (no duplicates, no losses). Features with no activations are stored as
dead (`extra["status"] == "dead"`, empty text), not explained. An LLM error that retries cannot fix (wrong key,
endpoint down) cancels the features in flight — none of them is written, while features already finished are — and
stops the job with one error; rerun the same command to resume.

The store work runs on one thread beside the event loop (explainers/lease.py): each feature's inputs are read there
up to READ_AHEAD features ahead, and finished batches are written there in order, so at concurrency 1 the next
feature's DuckDB queries overlap this feature's LLM calls and Python instead of following them.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from sae_workbench.errors import WorkbenchError
from sae_workbench.examples.loading import load_records
from sae_workbench.examples.rules import DEFAULT_RULE_CAP, rules_to_text
from sae_workbench.explainers.lexical import LEXICAL_VERSION, LexicalConfig, LexicalSimulator, lexical_explain
from sae_workbench.explainers.prism import PRISM_VERSION, PrismConfig
from sae_workbench.explainers.tree import TREE_VERSION, TreeConfig
from sae_workbench.llm.config import LLMConfig
from sae_workbench.llm.usage import Usage, UsageLedger
from sae_workbench.store import ExplanationRecord, Store
from sae_workbench.store.lease import StoreLease, StoreWorker

log = logging.getLogger(__name__)

EXPLAINERS = ("lexical", "oneshot", "tree", "prism")
KEEPER_POLL_S = 0.05
"""How often the job checks, while features await the LLM, whether another process waits for the store."""
READ_AHEAD = 2
"""Features whose store inputs are read ahead of those in flight (on the store thread, beside the event loop)."""
LLM_ONLY = frozenset({"oneshot"})


class ExplainJobError(WorkbenchError):
    """The explain job stopped; everything stored before the stop is kept and a rerun resumes."""


@dataclass(frozen=True)
class ExplainConfig:
    """What to explain with and how examples are sampled."""

    explainer: str = "lexical"
    """lexical, oneshot, tree or prism."""
    n_examples: int = 20
    """Top-activating windows shown to the one-shot explainer and counted by the lexical one."""
    n_background: int = 50
    """Random non-activating windows the lexical explainer contrasts the top windows with."""
    record_len: int | None = 32
    """Tokens per record shown or simulated, around each peak (tree paper: 32); None = whole windows."""
    negatives: str = "SIMILAR_NEGATIVE"
    """Tree negatives: RANDOM, RANDOM_NEGATIVE, SIMILAR or SIMILAR_NEGATIVE (tree paper default)."""
    n_positives: int = 30
    """Tree positives sampled from the top chunk (paper: 30, split 10/10/10)."""
    n_negatives: int = 30
    """Tree negatives (paper: 30, split 10/10/10)."""
    rule_cap: int = DEFAULT_RULE_CAP
    """Most rules per structured explanation (paper: 5)."""
    seed: int = 0
    """Seed of every random choice (combined with the feature index)."""
    tree: TreeConfig = field(default_factory=TreeConfig)
    """Tree search settings."""
    prism: PrismConfig = field(default_factory=PrismConfig)
    """PRISM settings."""

    def __post_init__(self) -> None:
        """Reject unknown explainers and negative sources."""
        if self.explainer not in EXPLAINERS:
            raise ExplainJobError(
                f"unknown explainer {self.explainer!r}; choose one of {', '.join(EXPLAINERS)}"
            )
        if self.negatives not in ("RANDOM", "RANDOM_NEGATIVE", "SIMILAR", "SIMILAR_NEGATIVE"):
            raise ExplainJobError(f"unknown negative source {self.negatives!r}")

    def sampling(self) -> dict[str, Any]:
        """The sampling settings that matter for this explainer (provenance and config key)."""
        if self.explainer == "lexical":
            return {"examples": "TOP+QUANTILE(10x3)", "k": self.n_examples, "background": "RANDOM_NEGATIVE",
                    "n_background": self.n_background, "seed": self.seed}  # fmt: skip
        if self.explainer == "oneshot":
            return {"examples": "TOP", "k": self.n_examples, "record_len": self.record_len,
                    "rule_cap": self.rule_cap}  # fmt: skip
        if self.explainer == "tree":
            return {"examples": "TOP_CHUNK", "top_fraction": 0.001, "min_chunk": 30, "n_positives": self.n_positives,
                    "negatives": self.negatives, "n_negatives": self.n_negatives, "record_len": self.record_len,
                    "seed": self.seed, "tree": asdict(self.tree)}  # fmt: skip
        return {"prism": asdict(self.prism)}


def versions(explainer: str, llm: bool) -> tuple[str, str]:
    """(explainer version, prompt version) of an explainer run with or without an LLM."""
    from sae_workbench.explainers.oneshot import ONESHOT_VERSION
    from sae_workbench.explainers.prompts import oneshot, prism, simulate, tree

    if explainer == "lexical":
        return LEXICAL_VERSION, ""
    if explainer == "oneshot":
        return ONESHOT_VERSION, oneshot.PROMPT_VERSION
    if explainer == "tree":
        prompts = f"{oneshot.PROMPT_VERSION}+{tree.PROMPT_VERSION}+{simulate.PROMPT_VERSION}" if llm else ""
        return f"{TREE_VERSION}+{LEXICAL_VERSION}" if not llm else TREE_VERSION, prompts
    return (
        f"{PRISM_VERSION}+{LEXICAL_VERSION}" if not llm else PRISM_VERSION,
        prism.PROMPT_VERSION if llm else "",
    )


def llm_key_params(llm: LLMConfig | None) -> dict[str, Any]:
    """LLM settings that change answers (model, temperature, max_tokens); the endpoint URL and key never enter."""
    if llm is None:
        return {}
    return {"model": llm.model, "temperature": llm.temperature, "max_tokens": llm.max_tokens}


def config_key(sae_id: str, feature: int, config: ExplainConfig, llm: LLMConfig | None) -> str:
    """Stable key of one feature's explanation under one configuration (what `has_explanation` checks)."""
    version, prompt_version = versions(config.explainer, llm is not None)
    blob = json.dumps(
        {"sae": sae_id, "feature": int(feature), "explainer": config.explainer, "version": version,
         "prompt": prompt_version, "llm": llm_key_params(llm), "sampling": config.sampling()},
        sort_keys=True, separators=(",", ":"),
    )  # fmt: skip
    return f"explain:{hashlib.sha256(blob.encode()).hexdigest()}"


@dataclass(frozen=True)
class FeatureOutput:
    """What one explainer produced for one feature."""

    text: str
    """Free-text explanation."""
    rules: Any
    """Structured rules (JSON) or None."""
    example_ids: list[int]
    """Windows used as examples."""
    negative_ids: list[int]
    """Windows used as negatives / background."""
    extra: dict[str, Any]
    """Explainer-specific payload."""


@dataclass(frozen=True)
class _Inputs:
    """What one feature's explainer read from the store."""

    peak: float
    """The feature's largest activation (0 for a dead feature)."""
    data: dict[str, Any]
    """Explainer-specific: window ids and their records."""
    seconds: float
    """Time the reads took."""


@dataclass(frozen=True)
class JobSummary:
    """What a job did."""

    requested: int
    """Features asked for."""
    skipped: int
    """Already stored (resumed)."""
    explained: int
    """Explained now."""
    dead: int
    """Stored as dead (no activations)."""
    seconds: float
    """Wall time."""
    usage: Usage
    """LLM usage of the job (zeros offline)."""
    ids: dict[int, int] = field(default_factory=dict)
    """Explanation id per feature stored by this run."""


class ExplainJob:
    """Explains features of one SAE into the store (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        sae_id: str,
        config: ExplainConfig,
        llm: LLMConfig | None = None,
        *,
        concurrency: int = 8,
        progress: bool = True,
        env: Mapping[str, str] | None = None,
        embed: Any = None,
        lease_s: float = 0.5,
        use_cache: bool = True,
        batch_size: int = 64,
        flush_s: float = 1.0,
    ) -> None:
        """Set up; `llm=None` runs the offline (lexical) variant, which `oneshot` does not have.

        `use_cache=False` skips the store's LLM response cache (benchmarks; forcing fresh samples). Finished
        features are written in one transaction per `batch_size` features or per `flush_s` seconds, whichever
        comes first, and always before the lease lets other processes in (a commit costs ~10 ms; a kill loses at
        most `flush_s` of finished work).
        """
        if llm is None and config.explainer in LLM_ONLY:
            from sae_workbench.llm.config import LLMNotConfiguredError

            raise LLMNotConfiguredError(
                f"the {config.explainer!r} explainer needs an LLM: pass --llm-model (and --llm-base-url for a local "
                "server), or choose --explainer lexical"
            )
        self.store, self.sae_id, self.config, self.llm = store, sae_id, config, llm
        self.concurrency = max(1, concurrency)
        self.progress = progress
        self.env = env
        self.embed = embed
        self.lease = StoreLease(store, lease_s)
        self.use_cache = use_cache
        self.batch_size = max(1, batch_size)
        self.flush_s = flush_s
        self.ledger = UsageLedger()
        progress_row = store.index_progress(sae_id)
        if progress_row is None:
            store.get_sae(sae_id)
            raise ExplainJobError(
                f"SAE {sae_id} has no activations in {store.path}; run `workbench index` first."
            )
        self.corpus = progress_row.corpus
        self.n_windows = progress_row.next_window
        self._keys: dict[int, str] = {}

    def key(self, feature: int) -> str:
        """Config key of one feature (computed once per job)."""
        key = self._keys.get(feature)
        if key is None:
            key = self._keys[feature] = config_key(self.sae_id, feature, self.config, self.llm)
        return key

    def run(self, features: Iterable[int]) -> JobSummary:
        """Explain every feature not already stored; return what was done."""
        return asyncio.run(self.arun(features))

    async def arun(self, features: Iterable[int]) -> JobSummary:
        """Async form of `run`."""
        t0 = time.perf_counter()
        feats = list(dict.fromkeys(int(f) for f in features))
        keys = {f: self.key(f) for f in feats}
        stored = self.store.stored_explanation_keys(list(keys.values()))
        todo = [f for f in feats if keys[f] not in stored]
        if len(todo) < len(feats):
            log.info("resuming: %d of %d features already explained", len(feats) - len(todo), len(feats))
        if self.config.explainer == "tree" and self.config.negatives.startswith("SIMILAR") and todo:
            from sae_workbench.examples.sampling import ensure_window_embeddings

            ensure_window_embeddings(self.store, self.sae_id)
        from sae_workbench.llm.cache import StoreCache

        client = None
        cache: StoreCache | None = None
        if self.llm is not None:
            from sae_workbench.llm.client import LLMClient

            cache = StoreCache(self.store, write_behind=True) if self.use_cache else None
            client = LLMClient(self.llm, cache=cache, ledger=self.ledger, env=self.env)
        ids: dict[int, int] = {}
        dead = 0
        sem = asyncio.Semaphore(self.concurrency)
        bar = tqdm(total=len(todo), desc=f"explain ({self.config.explainer})", disable=not self.progress)

        finished: list[ExplanationRecord] = []  # done, not yet handed to the store thread
        writes: list[Future[None]] = []  # batches handed to the store thread, not yet checked
        last_flush = time.monotonic()
        worker = StoreWorker(self.store)
        self.lease.workers.append(worker)

        def write(batch: list[ExplanationRecord]) -> None:
            # store thread; one transaction (one commit) per batch
            stored = self.store.add_explanations(batch)
            ids.update({r.feature: i for r, i in zip(batch, stored, strict=True)})

        def settle(wait: bool) -> None:
            """Raise the first failed write (and wait for those in flight if `wait`)."""
            while writes and (wait or writes[0].done()):
                writes.pop(0).result()

        def flush() -> None:
            nonlocal last_flush
            if cache is not None:  # the answers first: a stored explanation's LLM calls are always cached
                cache.flush()
            # written on the store thread, in order; the lease waits for it before stepping aside
            if finished:
                writes.append(worker.submit(write, finished.copy()))
                finished.clear()
            last_flush = time.monotonic()
            settle(wait=False)

        ahead = asyncio.Semaphore(self.concurrency + READ_AHEAD)

        async def one(feature: int) -> None:
            nonlocal dead
            async with ahead:  # held until the feature is done: reads run at most READ_AHEAD features ahead
                inputs = await worker.read(self._load, feature)
                async with sem:
                    record = await self._feature(feature, inputs, client)
                finished.append(record)
                dead += record.extra.get("status") == "dead"
                bar.update(1)
                if len(finished) >= self.batch_size or time.monotonic() - last_flush >= self.flush_s:
                    flush()
                self.lease.renew(before=flush)  # others see every finished feature once they get in

        async def keeper() -> None:
            # This thread's store calls are synchronous, so none is in progress at an await, and the lease lets the
            # store thread finish its queued calls before it closes that session: the lease can step aside here for a
            # waiting process even while every feature in flight awaits a slow LLM (not only between features).
            while True:
                await asyncio.sleep(KEEPER_POLL_S)
                self.lease.renew(before=flush)

        self.lease.acquire()
        tasks = [asyncio.ensure_future(one(f)) for f in todo]
        keeping = asyncio.ensure_future(keeper())
        try:
            if tasks:
                done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
                failed = [t for t in done if not t.cancelled() and t.exception() is not None]
                if failed:
                    for t in pending:
                        t.cancel()
                    await asyncio.gather(*pending, return_exceptions=True)
                    err = failed[0].exception()
                    assert err is not None
                    flush()  # features finished before the stop are complete: keep them
                    settle(wait=True)
                    raise ExplainJobError(
                        f"{type(err).__name__}: {err}. The job stopped after storing {len(ids)} of {len(todo)} "
                        "features (in-flight features were not written); rerun the same command to resume."
                    ) from err
        finally:
            keeping.cancel()
            await asyncio.gather(keeping, return_exceptions=True)
            try:
                flush()  # features finished before a stop are complete: keep them
                settle(wait=True)
            finally:
                self.lease.release()
                worker.shutdown()
                self.lease.workers.remove(worker)
                bar.close()
            if client is not None:
                await client.aclose()
        return JobSummary(len(feats), len(feats) - len(todo), len(ids) - dead, dead,
                          time.perf_counter() - t0, self.ledger.total, ids)  # fmt: skip

    # ------------------------------------------------------------------ one feature

    def _load(self, feature: int) -> _Inputs:
        """Everything one feature's explainer reads from the store (runs on the store thread, ahead of time)."""
        t0 = time.perf_counter()
        # Every explainer reads the feature's window maxima (its samplers do; cached for the store thread's session): the
        # peak and the top windows come from there instead of a separate top-k query.
        maxima = self.store.window_maxima(self.sae_id, feature)
        peak = float(maxima.values.max()) if len(maxima.values) else 0.0
        data: dict[str, Any] = {}
        if peak > 0:
            load = {"lexical": self._load_lexical, "oneshot": self._load_oneshot, "tree": self._load_tree,
                    "prism": self._load_prism}[self.config.explainer]  # fmt: skip
            data = load(feature, maxima)
        return _Inputs(peak, data, time.perf_counter() - t0)

    async def _feature(self, feature: int, inputs: _Inputs, client: Any) -> ExplanationRecord:
        """Explain one feature from its inputs (or record it as dead) and build its store record."""
        t0 = time.perf_counter()
        tag = f"feature:{feature}"
        cfg = self.config
        version, prompt_version = versions(cfg.explainer, client is not None)
        if inputs.peak <= 0:
            out = FeatureOutput(
                "", None, [], [], {"status": "dead", "reason": "no activations in the indexed corpus"}
            )
        else:
            run = {
                "lexical": self._lexical,
                "oneshot": self._oneshot,
                "tree": self._tree,
                "prism": self._prism,
            }
            out = await run[cfg.explainer](feature, inputs.data, inputs.peak, client, tag)
            out.extra.setdefault("status", "explained")
            out.extra["global_max"] = inputs.peak
        usage = self.ledger.for_tag(tag)
        llm_params = self.llm.params() if self.llm is not None else {}
        if self.llm is not None:
            llm_params["api_key_env"] = self.llm.api_key_env  # the variable's name only, never the key
        return ExplanationRecord(
            sae_id=self.sae_id, feature=int(feature), explainer=cfg.explainer, explainer_version=version,
            prompt_version=prompt_version, llm_model=self.llm.model if self.llm is not None else "",
            llm_params=llm_params, sampling=cfg.sampling(), example_ids=out.example_ids,
            negative_ids=out.negative_ids, text=out.text, config_key=self.key(feature), rules=out.rules,
            extra={**out.extra, "usage": usage.to_dict()}, tokens_in=usage.prompt_tokens,
            tokens_out=usage.completion_tokens, seconds=inputs.seconds + time.perf_counter() - t0,
        )  # fmt: skip

    def _records(self, feature: int, ids: list[int], record_len: int | None) -> list[Any]:
        """Records of `feature` on window ids."""
        return load_records(self.store, self.sae_id, self.corpus, feature, ids, record_len)

    def _load_lexical(self, feature: int, maxima: Any) -> dict[str, Any]:
        """The top windows plus a per-quantile sample (so weaker triggers are counted too), and random
        non-activating windows as background."""
        cfg = self.config
        quant = self.store.quantile_examples(self.sae_id, feature, 10, 3, seed=cfg.seed)
        top = maxima.top(max(cfg.n_examples, 1))
        pos = list(dict.fromkeys([e.window_id for e in top] + [e.window_id for e in quant]))
        bg = self.store.random_negatives(self.sae_id, feature, cfg.n_background, seed=cfg.seed)
        return {"pos": pos, "bg": bg, "records": self._records(feature, pos + bg, None)}

    async def _lexical(
        self, feature: int, data: dict[str, Any], gmax: float, client: Any, tag: str
    ) -> FeatureOutput:
        """Lexical rules from the top windows contrasted with random non-activating windows."""
        out = lexical_explain(data["records"], LexicalConfig(rule_cap=self.config.rule_cap), gmax)
        rules = [r.to_dict() for r in out.rules]
        return FeatureOutput(
            out.text, rules, data["pos"], data["bg"], {"coverage": out.coverage, "method": "lexical"}
        )

    def _load_oneshot(self, feature: int, maxima: Any) -> dict[str, Any]:
        """The top windows' records."""
        pos = [e.window_id for e in maxima.top(max(self.config.n_examples, 1))]
        return {"pos": pos, "records": self._records(feature, pos, self.config.record_len)}

    async def _oneshot(
        self, feature: int, data: dict[str, Any], gmax: float, client: Any, tag: str
    ) -> FeatureOutput:
        """Structured + free-text LLM explanations of the top examples."""
        from sae_workbench.explainers.oneshot import explain_oneshot

        out = await explain_oneshot(client, data["records"], gmax, self.config.rule_cap, tag=tag)
        return FeatureOutput(out.text, [r.to_dict() for r in out.rules], data["pos"], [], {})

    def _tree_ids(self, feature: int, maxima: Any) -> tuple[list[int], list[int]]:
        """Positives sampled from the top chunk and negatives from the configured source."""
        from sae_workbench.examples.sampling import close_negatives
        from sae_workbench.explainers.tree import top_chunk_size

        cfg = self.config
        rng = np.random.default_rng([cfg.seed, feature])
        order = maxima.by_peak()
        chunk = maxima.window_ids[order[: top_chunk_size(self.n_windows)]]
        chunk = chunk[maxima.values[order[: len(chunk)]] > 0]
        pos = rng.choice(chunk, size=min(cfg.n_positives, len(chunk)), replace=False).tolist()
        if cfg.negatives == "RANDOM_NEGATIVE":
            neg = self.store.random_negatives(self.sae_id, feature, cfg.n_negatives, seed=cfg.seed)
        elif cfg.negatives == "RANDOM":
            neg = rng.choice(
                self.store.indexed_window_ids(self.sae_id), size=cfg.n_negatives, replace=False
            ).tolist()
        else:
            neg = close_negatives(
                self.store,
                self.sae_id,
                feature,
                cfg.n_negatives,
                require_negative=cfg.negatives == "SIMILAR_NEGATIVE",
            )
        return [int(i) for i in pos], [int(i) for i in neg]

    def _load_tree(self, feature: int, maxima: Any) -> dict[str, Any]:
        """Sampled positives and negatives, and their records."""
        pos_ids, neg_ids = self._tree_ids(feature, maxima)
        # One store read for both (RANDOM / SIMILAR negatives may repeat a positive: load each window once).
        uniq = list(dict.fromkeys(pos_ids + neg_ids))
        by_id = {r.window_id: r for r in self._records(feature, uniq, self.config.record_len)}
        return {"pos_ids": pos_ids, "neg_ids": neg_ids, "by_id": by_id}

    async def _tree(
        self, feature: int, data: dict[str, Any], gmax: float, client: Any, tag: str
    ) -> FeatureOutput:
        """Tree search: LLM proposer + LLM simulator, or offline the lexical editor + lexical simulator."""
        from sae_workbench.explainers.simulate import LLMSimulator
        from sae_workbench.explainers.tree import LexicalEditor, LLMProposer, interleave_splits, tree_search

        cfg = self.config
        pos_ids, neg_ids, by_id = data["pos_ids"], data["neg_ids"], data["by_id"]
        pos, neg = [by_id[i] for i in pos_ids], [by_id[i] for i in neg_ids]
        splits = interleave_splits(pos, neg)
        tc = TreeConfig(**{**asdict(cfg.tree), "rule_cap": cfg.rule_cap})
        if client is None:
            proposer: Any = LexicalEditor(tc, seed=cfg.seed + feature)
            simulator: Any = LexicalSimulator()
        else:
            proposer, simulator = LLMProposer(client, tc, tag), LLMSimulator(client, tag)
        result = await tree_search(proposer, simulator, splits, tc, gmax)
        text = rules_to_text(result.best.rules)
        if client is None:
            text = f"Lexical tree search (activation statistics, not an LLM): fires on {text}."

        def ids(split: Any) -> dict[str, list[int]]:
            return {"positives": [r.window_id for r in split.positives],
                    "negatives": [r.window_id for r in split.negatives]}  # fmt: skip

        extra = {
            "tree": result.tree_json(), "best_node": result.best.id, "stopped_early": result.stopped_early,
            "train_score": _num(result.best.train_score), "valid_score": _num(result.best.valid_score),
            "proposer": "llm" if client is not None else "lexical-editor", "simulator": simulator.name,
            "splits": {"train": ids(splits.train), "valid": ids(splits.valid), "test": ids(splits.test)},
        }  # fmt: skip
        return FeatureOutput(text, [r.to_dict() for r in result.best.rules], pos_ids, neg_ids, extra)

    def _load_prism(self, feature: int, maxima: Any) -> dict[str, Any]:
        """The records of the texts PRISM describes: every activating window is scored from the store; the windows
        that never fire score 0 and count toward the percentile. Only the selected texts are loaded."""
        from sae_workbench.explainers.prism import select_texts

        pc = self.config.prism
        active, scores = self.store.window_text_scores(self.sae_id, feature)
        padded = np.concatenate([scores, np.zeros(max(0, self.n_windows - len(active)))])
        chosen = [int(i) for i in select_texts(padded, pc.percentile, pc.n_texts) if i < len(active)]
        return {"records": self._records(feature, [int(active[i]) for i in chosen], None)}

    async def _prism(
        self, feature: int, data: dict[str, Any], gmax: float, client: Any, tag: str
    ) -> FeatureOutput:
        """PRISM over the selected texts: embed, cluster, describe each cluster."""
        from sae_workbench.embeddings import DEFAULT_EMBEDDING_MODEL, embed_texts
        from sae_workbench.explainers.prism import llm_describe, prism_describe_selected

        describe = None if client is None else (lambda texts: llm_describe(client, texts, tag))
        inner = self.embed or embed_texts

        def embed(texts: list[str]) -> np.ndarray:
            """The embedding model's pass, with the store file left to other processes meanwhile."""
            with self.lease.paused():
                return np.asarray(inner(texts))

        clusters = await prism_describe_selected(data["records"], embed, self.config.prism, describe)
        text = "\n".join(f"{i + 1}. {c.description}" for i, c in enumerate(clusters))
        shown = sorted({w for c in clusters for w in c.window_ids})
        extra = {"clusters": [c.to_dict() for c in clusters], "embedding_model": DEFAULT_EMBEDDING_MODEL,
                 "describer": "llm" if client is not None else "lexical"}  # fmt: skip
        return FeatureOutput(text, None, shown, [], extra)


def _num(x: float) -> float | None:
    """JSON-safe float (NaN → None)."""
    return None if x != x else float(x)


def parse_features(spec: str, d_sae: int) -> list[int]:
    """'all', '0-49', '3,7,9' or a mix like '0-9,20' → sorted feature indices within [0, d_sae)."""
    if spec.strip() == "all":
        return list(range(d_sae))
    out: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                out.update(range(lo, hi + 1))
            else:
                out.add(int(part))
        except ValueError:
            raise ExplainJobError(f"bad --features {spec!r}: use 'all', '0-49' or '3,7,9'") from None
    bad = [f for f in out if not 0 <= f < d_sae]
    if bad:
        raise ExplainJobError(f"features {sorted(bad)[:5]} are outside 0..{d_sae - 1} for this SAE")
    return sorted(out)
