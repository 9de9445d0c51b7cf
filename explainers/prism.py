"""PRISM multi-concept feature descriptions (Kopf et al., "Capturing Polysemanticity with PRISM", NeurIPS 2025,
arXiv 2506.15538).

Per feature: score every text by the feature's mean activation over its tokens (BOS and padding excluded — the
reference code averages over padding, a bug we do not copy); keep texts at or above the 99th percentile; pick up to
`n_texts` evenly spaced by percentile; highlight tokens > 0 and above the text's 90th percentile, merging runs into
"[ … ]" spans; embed the highlighted texts; cluster (KMeans k=5 with a fixed seed, or HDBSCAN min_cluster_size=2);
describe each cluster from its ≤20 highest-scoring texts in ONE call (an LLM, or offline the lexical describer).

Embeddings: all-MiniLM-L6-v2 by default (offline); the paper embeds with gte-Qwen2-1.5B-instruct, which
`PrismConfig.paper()` names (`workbench explain --explainer prism --preset paper`, or `--embedding-model`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, ClassVar

import numpy as np

from sae_workbench.embeddings import DEFAULT_EMBEDDING_MODEL
from sae_workbench.examples.records import Record
from sae_workbench.explainers.base import (
    ExplainConfig,
    ExplainContext,
    ExplainJobError,
    Explanation,
    FeatureReader,
)
from sae_workbench.explainers.lexical import LEXICAL_VERSION, LexicalConfig, lexical_explain

PRISM_VERSION = "prism-v2"  # v2: clusters carry the texts the describer saw

PAPER_EMBEDDING_MODEL = "Alibaba-NLP/gte-Qwen2-1.5B-instruct"
"""The reference's CLUSTER_EMBEDDING_MODEL_NAME (lkopf/prism src/utils/config.py), used for clustering and for the
polysemanticity score (meta_evaluation.py)."""

PRISM_PRESETS = ("default", "paper", "smoke")
"""Names `PrismConfig.preset` takes (`workbench explain --preset`)."""


class PrismConfigError(ExplainJobError):
    """Unknown PRISM preset or clustering method."""


@dataclass(frozen=True)
class PrismConfig:
    """PRISM settings; defaults are the paper's where it gives them."""

    percentile: float = 99.0
    """Texts at or above this percentile of text scores are kept (paper: 99)."""
    n_texts: int = 1000
    """Most texts picked, evenly spaced by percentile between p99 and p100 (paper: ~1,000)."""
    highlight_percentile: float = 90.0
    """Tokens above this percentile of their text (and > 0) are highlighted (paper: 90)."""
    k: int = 5
    """Clusters (paper: 5)."""
    method: str = "kmeans"
    """'kmeans' (seeded) or 'hdbscan' (min_cluster_size=2)."""
    per_cluster: int = 20
    """Texts per cluster shown to the describer (paper: ≤ 20, highest mean activation)."""
    seed: int = 0
    """KMeans seed."""
    embedding_model: str = DEFAULT_EMBEDDING_MODEL
    """sentence-transformers model that embeds the highlighted texts (offline default all-MiniLM-L6-v2; the paper:
    gte-Qwen2-1.5B-instruct, `PAPER_EMBEDDING_MODEL`)."""
    preset: str = "default"
    """Which preset these settings come from ('default' or 'paper'); part of the provenance and config key."""

    @classmethod
    def paper(cls) -> PrismConfig:
        """The reference's settings (lkopf/prism src/utils/config.py): texts in [p99, p100] (START_INTERVAL 0.99),
        CLUSTER_N_SAMPLES = 1,000 picks, ACTIVATION_PERCENTILE = 90, KMeans N_CLUSTERS = 5, MAX_CLUSTER_SIZE = 20,
        gte-Qwen2-1.5B-instruct embeddings, and its global seed 42 (set_seed(42)) for KMeans."""
        return cls(
            percentile=99.0, n_texts=1000, highlight_percentile=90.0, k=5, method="kmeans", per_cluster=20,
            seed=42, embedding_model=PAPER_EMBEDDING_MODEL, preset="paper",
        )  # fmt: skip

    @classmethod
    def smoke(cls) -> PrismConfig:
        """Two clusters of the top 10 texts (texts at or above p90): checks that PRISM runs end to end on a real LLM
        in two describer calls per feature (the demo's LLM stage); not a setting to report results with."""
        return cls(percentile=90.0, n_texts=10, k=2, preset="smoke")

    @classmethod
    def named(cls, preset: str) -> PrismConfig:
        """The settings of a preset by name (PrismConfigError for an unknown one)."""
        if preset == "default":
            return cls()
        if preset == "paper":
            return cls.paper()
        if preset == "smoke":
            return cls.smoke()
        raise PrismConfigError(f"unknown PRISM preset {preset!r}; choose one of {', '.join(PRISM_PRESETS)}")


@dataclass(frozen=True)
class SentenceEmbedder:
    """A named sentence-transformers embedder (`embeddings.embed_texts` with `model`); its `name` is recorded."""

    model: str = DEFAULT_EMBEDDING_MODEL
    """sentence-transformers model name or path."""

    @property
    def name(self) -> str:
        """The model's name, as recorded in provenance and score keys."""
        return self.model

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        """(N, D) unit-norm embeddings."""
        from sae_workbench.embeddings import embed_texts

        return embed_texts(texts, model=self.model)


@dataclass(frozen=True)
class HighlightedText:
    """One text with its highlighted spans."""

    record: Record
    """The text's tokens and activations."""
    score: float
    """Mean activation over its tokens."""
    text: str
    """Text with highlighted spans in [ … ]."""
    summary: str
    """Each span's first token and its activation, e.g. 'dog (3.20), cat (2.10)'."""


@dataclass(frozen=True)
class PrismCluster:
    """One cluster and its description."""

    description: str
    """The describer's description of the cluster (a short phrase)."""
    window_ids: tuple[int, ...]
    """Every text of the cluster, by score descending."""
    shown_ids: tuple[int, ...]
    """The ≤ per_cluster texts the describer saw."""
    mean_score: float
    """Mean text score of the cluster."""
    texts: tuple[str, ...] = ()
    """The highlighted texts the describer saw, in `shown_ids` order."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form, the one stored format (`extra["clusters"]`, read by the app and the CoSy/polysemanticity
        scorers): description, window_ids, shown_ids, texts (aligned with shown_ids), mean_score."""
        return {
            "description": self.description,
            "window_ids": list(self.window_ids),
            "shown_ids": list(self.shown_ids),
            "texts": list(self.texts),
            "mean_score": round(self.mean_score, 6),
        }


def cluster_descriptions(extra: dict[str, Any]) -> list[str]:
    """The non-empty descriptions stored in a PRISM explanation's `extra["clusters"]` (empty for other rows)."""
    clusters = extra.get("clusters")
    if not isinstance(clusters, list):
        return []
    out = []
    for c in clusters:
        desc = c.get("description") if isinstance(c, dict) else None
        if isinstance(desc, str) and desc.strip():
            out.append(desc)
    return out


def text_score(record: Record) -> float:
    """Mean activation over the record's tokens (records already exclude BOS and padding)."""
    return float(record.acts.mean()) if len(record) else 0.0


def select_texts(scores: np.ndarray, percentile: float, n: int) -> np.ndarray:
    """Indices of texts with score ≥ the percentile (and > 0), up to `n` evenly spaced by rank, highest first."""
    if scores.size == 0:
        return np.zeros(0, dtype=np.int64)
    threshold = float(np.percentile(scores, percentile))
    kept = np.flatnonzero((scores >= threshold) & (scores > 0))
    kept = kept[np.lexsort((kept, -scores[kept]))]
    if len(kept) <= n:
        return kept
    picks = np.unique(np.round(np.linspace(0, len(kept) - 1, n)).astype(np.int64))
    return kept[picks]


def highlight(record: Record, percentile: float = 90.0) -> HighlightedText:
    """Wrap runs of tokens with activation > 0 and > the text's `percentile` in [ … ]; summarise each span."""
    acts = record.acts
    thr = float(np.percentile(acts, percentile)) if len(acts) else 0.0
    on = (acts > 0) & (acts > thr)
    parts: list[str] = []
    spans: list[str] = []
    for i, tok in enumerate(record.tokens):
        if on[i] and (i == 0 or not on[i - 1]):
            parts.append("[")
            spans.append(f"{tok.strip()} ({float(acts[i]):.2f})")
        parts.append(tok)
        if on[i] and (i == len(acts) - 1 or not on[i + 1]):
            parts.append("]")
    return HighlightedText(record, text_score(record), "".join(parts).strip(), ", ".join(spans))


def cluster_labels(embeddings_ND: np.ndarray, config: PrismConfig) -> np.ndarray:
    """Cluster label per text (KMeans seeded; HDBSCAN noise points form their own group −1)."""
    n = embeddings_ND.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if config.method == "hdbscan":
        from sklearn.cluster import HDBSCAN

        if n < 2:
            return np.zeros(n, dtype=np.int64)
        return HDBSCAN(min_cluster_size=2).fit_predict(embeddings_ND).astype(np.int64)
    if config.method != "kmeans":
        raise PrismConfigError(f"unknown clustering method {config.method!r}; use 'kmeans' or 'hdbscan'")
    from sae_workbench.explainers.kmeans import kmeans_labels

    # sklearn's KMeans algorithm (k-means++, 10 restarts keep clusters stable) without its per-call overhead.
    return kmeans_labels(embeddings_ND, min(config.k, n), config.seed, n_init=10)


def lexical_describe(texts: Sequence[HighlightedText]) -> str:
    """Offline describer (not an LLM): the lexical explainer's rendering of the cluster's records."""
    return lexical_explain([t.record for t in texts], LexicalConfig(min_count=1)).text


async def llm_describe(client: Any, texts: Sequence[HighlightedText], tag: str = "") -> str:
    """One LLM call with PRISM's labelling prompt for one cluster."""
    from sae_workbench.explainers.prompts.prism import LABEL_MAX_TOKENS, label_prompt, parse_description
    from sae_workbench.llm.client import LLMRequest, chat

    prompt = label_prompt([t.text for t in texts], [t.summary for t in texts])
    req = LLMRequest(chat(prompt), tag=tag, max_tokens=LABEL_MAX_TOKENS)
    parsed = await client.complete_parsed(req, parse_description)
    return parsed.value


async def prism_describe(
    records: Sequence[Record],
    embed: Callable[[list[str]], np.ndarray],
    config: PrismConfig,
    describe: Callable[[Sequence[HighlightedText]], Any] | None = None,
    n_other: int = 0,
) -> list[PrismCluster]:
    """Run PRISM on candidate texts: select, highlight, embed, cluster and describe each cluster.

    `describe` maps a cluster's texts to a description (sync or async); None = the offline lexical describer.
    `n_other` counts further texts of the corpus that score 0 (windows where the feature never fires): they enter
    the percentile but are never picked.
    """
    scores = np.array([text_score(r) for r in records] + [0.0] * max(0, n_other), dtype=np.float64)
    chosen = select_texts(scores, config.percentile, config.n_texts)
    return await prism_describe_selected(
        [records[int(i)] for i in chosen if i < len(records)], embed, config, describe
    )


async def prism_describe_selected(
    records: Sequence[Record],
    embed: Callable[[list[str]], np.ndarray],
    config: PrismConfig,
    describe: Callable[[Sequence[HighlightedText]], Any] | None = None,
) -> list[PrismCluster]:
    """PRISM from its step 3 on: highlight, embed, cluster and describe already selected texts (see
    `prism_describe`; `select_texts` picks them from text scores)."""
    texts = [highlight(r, config.highlight_percentile) for r in records]
    if not texts:
        return []
    labels = cluster_labels(np.asarray(embed([t.text for t in texts]), dtype=np.float32), config)
    groups: list[list[HighlightedText]] = []
    for lab in sorted(set(labels.tolist())):
        members = [texts[i] for i in np.flatnonzero(labels == lab)]
        groups.append(sorted(members, key=lambda t: (-t.score, t.record.window_id)))
    describer = describe or lexical_describe
    outs = await asyncio.gather(*(_maybe_await(describer(g[: config.per_cluster])) for g in groups))
    clusters = [
        PrismCluster(
            description=str(desc),
            window_ids=tuple(t.record.window_id for t in g),
            shown_ids=tuple(t.record.window_id for t in g[: config.per_cluster]),
            mean_score=float(np.mean([t.score for t in g])),
            texts=tuple(t.text for t in g[: config.per_cluster]),
        )
        for g, desc in zip(groups, outs, strict=True)
    ]
    return sorted(clusters, key=lambda c: -c.mean_score)


async def _maybe_await(value: Any) -> Any:
    """Await coroutines, pass plain values through."""
    if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
        return await value
    return value


@dataclass(frozen=True)
class PrismInputs:
    """The records of the texts PRISM describes."""

    records: list[Record]
    """Selected texts (whole windows), by text score."""


@dataclass(frozen=True)
class PrismExplainer:
    """PRISM over the whole indexed corpus: select, highlight, embed, cluster, describe (an LLM, or offline the
    lexical describer). It reads texts by percentile, not the shared split; a scorer that tests a PRISM explanation
    drops the texts PRISM was shown from its test windows (`examples.testsets.scored_windows`)."""

    name: ClassVar[str] = "prism"
    requires_llm: ClassVar[bool] = False
    config: PrismConfig = field(default_factory=PrismConfig)
    """PRISM settings."""
    embed: Callable[[list[str]], Any] | None = None
    """Text embedder (None: `config.embedding_model` through sentence-transformers); an injected one is recorded
    by its `name` attribute."""

    @classmethod
    def from_config(cls, config: ExplainConfig) -> PrismExplainer:
        """The preset's settings, with the run's embedding model when given (PRISM reads no split option)."""
        prism = PrismConfig.named(config.preset)
        return cls(
            replace(prism, embedding_model=config.embedding_model) if config.embedding_model else prism
        )

    def embedding_model_name(self) -> str:
        """The embedder actually used: an injected one's `name`, else `config.embedding_model`."""
        if self.embed is None:
            return self.config.embedding_model
        return str(getattr(self.embed, "name", "custom-embedder"))

    def version(self, llm: bool) -> str:
        """Code version (offline: the lexical describer)."""
        return PRISM_VERSION if llm else f"{PRISM_VERSION}+{LEXICAL_VERSION}"

    def prompt_version(self, llm: bool) -> str:
        """Version of the labelling prompt."""
        from sae_workbench.explainers.prompts import prism

        return prism.PROMPT_VERSION if llm else ""

    def sampling(self) -> dict[str, Any]:
        """PRISM's settings."""
        return {"prism": asdict(self.config) | {"embedding_model": self.embedding_model_name()}}

    def prepare(self, store: Any, sae_id: str) -> None:
        """Nothing to prepare."""

    def load(self, reader: FeatureReader) -> PrismInputs:
        """Every activating window is scored from the store; windows that never fire score 0 and count toward the
        percentile. Only the selected texts are loaded."""
        active, scores = reader.store.window_text_scores(reader.sae_id, reader.feature)
        padded = np.concatenate([scores, np.zeros(max(0, reader.n_windows - len(active)))])
        chosen = [
            int(i)
            for i in select_texts(padded, self.config.percentile, self.config.n_texts)
            if i < len(active)
        ]
        return PrismInputs(reader.records([int(active[i]) for i in chosen], None))

    async def explain(self, inputs: PrismInputs, ctx: ExplainContext) -> Explanation:
        """Embed, cluster and describe each cluster."""
        client = ctx.client
        describe = None if client is None else (lambda texts: llm_describe(client, texts, ctx.tag))
        inner = self.embed or SentenceEmbedder(self.config.embedding_model)

        def embed(texts: list[str]) -> np.ndarray:
            """The embedding model's pass, with the store file left to other processes meanwhile."""
            with ctx.pause():
                return np.asarray(inner(texts))

        clusters = await prism_describe_selected(inputs.records, embed, self.config, describe)
        text = "\n".join(f"{i + 1}. {c.description}" for i, c in enumerate(clusters))
        # what the describer was sent (≤ per_cluster per cluster), not every clustered window (issue 33)
        shown = sorted({w for c in clusters for w in c.shown_ids})
        extra = {"clusters": [c.to_dict() for c in clusters], "embedding_model": self.embedding_model_name(),
                 "preset": self.config.preset, "describer": "llm" if client is not None else "lexical"}  # fmt: skip
        return Explanation(text, None, shown, [], extra)
