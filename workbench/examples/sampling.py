"""Example and negative sampling for explainers and scorers: top-k, per-quantile, random examples; random,
random non-activating and similarity-based close negatives.

Close negatives follow Ma, Pfrommer & Sojoudi, "Revising and Falsifying Sparse Autoencoder Feature Explanations"
(NeurIPS 2025), see shared/specs/tree-explainer.md: every window is embedded once (stored in the store); the
reference set is the feature's 400 highest-activating windows; a window's similarity is the cosine to the mean of the
reference set's normalised embeddings (the same ranking as its mean cosine to the reference set); positives are
excluded, and SIMILAR_NEGATIVE keeps windows whose max activation ≤ threshold (0); exact top-k over the whole indexed
corpus (30 by default, which the tree explainer splits 10/10/10). The reference code's retriever stops after the
first ~192 windows of its dataset (ref `similarity_retriever.py:48,178`, fidelity audit §0 #3); we do the paper's
global top-k.

What is embedded is what is shown (ref embeds exactly the 32-token sequence it shows; fidelity audit §0 #4): with
`crop` = 32 (the default), each window's first 32 tokens, BOS dropped — the record a non-activating window is shown
and simulated as (`records.crop_record` crops a record without a peak from its start) — and, for the reference set,
each top window's 32-token crop around the feature's peak, embedded per draw (what a positive is shown as).
`crop=None` embeds whole windows (the stored embeddings of both are keyed apart, `store.window_embeddings.embedding_key`).

    ensure_window_embeddings(store, sae_id)                   # once per corpus and crop (writes)
    sample = draw_negatives(store, sae_id, feature, NegativeSource.SIMILAR_NEGATIVE, k=30, seed=0)
    sample.window_ids, sample.id                              # stored with its seed and config
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from sae_workbench import defaults
from sae_workbench.embeddings import DEFAULT_EMBEDDING_MODEL, embed_texts
from sae_workbench.errors import WorkbenchError
from sae_workbench.examples.loading import load_records
from sae_workbench.examples.records import crop_record, crop_start, make_record
from sae_workbench.progress import bars_enabled
from sae_workbench.store import Example, Sample, Store, WindowEmbeddings
from sae_workbench.store.window_embeddings import embedding_key

log = logging.getLogger(__name__)

# Paper constants (Ma et al. 2025, §close negatives): 400 reference windows, 30 negatives split 10/10/10.
REFERENCE_SIZE = 400
CLOSE_NEGATIVES = 30
# Tree paper: records (and the texts embedded for similarity) are 32 tokens (the one literal: defaults.RECORD_LEN).
EMBED_CROP = defaults.RECORD_LEN


class NegativeSource(StrEnum):
    """Where negatives come from (Ma et al. 2025); SIMILAR_NEGATIVE is the default."""

    RANDOM = "RANDOM"
    """Any indexed window, uniformly."""
    RANDOM_NEGATIVE = "RANDOM_NEGATIVE"
    """Uniform over windows whose max activation ≤ threshold."""
    SIMILAR = "SIMILAR"
    """Most similar windows to the reference set, any activation (positives excluded)."""
    SIMILAR_NEGATIVE = "SIMILAR_NEGATIVE"
    """Most similar windows whose max activation ≤ threshold (positives excluded)."""


class ExampleSource(StrEnum):
    """How activating examples are drawn."""

    TOP = "TOP"
    """The k highest-activating windows."""
    QUANTILE = "QUANTILE"
    """Equal-count activation quantile bins, a few per bin."""
    RANDOM_ACTIVATING = "RANDOM_ACTIVATING"
    """Uniform over activating windows."""


class MissingEmbeddingsError(WorkbenchError):
    """Similarity-based negatives need embeddings of every indexed window."""


@dataclass(frozen=True)
class NegativeConfig:
    """Parameters of negative sampling."""

    reference_size: int = REFERENCE_SIZE
    """Top-activating windows forming the reference set (paper: 400)."""
    threshold: float = 0.0
    """A negative's max activation must be ≤ this (paper: 0)."""
    embedding_model: str = DEFAULT_EMBEDDING_MODEL
    """sentence-transformers model of the stored window embeddings."""
    crop: int | None = EMBED_CROP
    """Tokens embedded per window: what a record of it shows (tree paper: 32); None: whole windows."""


def crop_texts(
    store: Store, corpus: str, window_ids: Sequence[int] | np.ndarray, crop: int | None
) -> list[str]:
    """The text of each window's first `crop` tokens, BOS and padding dropped (what a record of a non-activating
    window shows); whole decoded windows when `crop` is None."""
    if crop is None:
        return store.window_texts(corpus, window_ids)
    windows = store.window_tokens(corpus, window_ids)
    out: list[str] = []
    for wid in (int(i) for i in window_ids):
        strings, mask = windows[wid]
        out.append("".join(crop_record(make_record(wid, strings, [], [], mask=mask), crop).tokens))
    return out


def ensure_window_embeddings(
    store: Store, sae_id: str, model: str = DEFAULT_EMBEDDING_MODEL, chunk: int = 1024,
    crop: int | None = EMBED_CROP,
) -> int:  # fmt: skip
    """Embed (once) every stored window of the SAE's corpus that lacks an embedding of its `crop` (None: whole
    window); return how many were added.

    The texts are read first (cheap), then embedded shortest first across all of them, so each of the encoder's
    batches pads to nearly its own length, and a text many windows share is embedded once; vectors are written every
    `chunk` texts (a killed run keeps them). bench/embed_bench.py compares this with a plain batched
    `SentenceTransformer.encode` of the same texts."""
    progress = store.index_progress(sae_id)
    if progress is None:
        raise MissingEmbeddingsError(f"SAE {sae_id} is not indexed; run `workbench index` first.")
    key = embedding_key(model, crop)
    missing = store.windows_missing_embeddings(progress.corpus, key)
    if not len(missing):
        return 0
    windows_of: dict[str, list[int]] = {}  # text → rows of `missing` that show it
    for start in range(0, len(missing), chunk):
        texts = crop_texts(store, progress.corpus, missing[start : start + chunk], crop)
        for row, text in enumerate(texts, start):
            windows_of.setdefault(text, []).append(row)
    unique = sorted(windows_of, key=len)
    small = len(missing) <= chunk
    bar = tqdm(total=len(missing), desc="embed windows", unit="win", disable=small or not bars_enabled())
    for start in range(0, len(unique), chunk):
        part = unique[start : start + chunk]
        vectors_ND = embed_texts(part, model)
        rows = np.fromiter((r for text in part for r in windows_of[text]), np.int64)
        repeats = np.fromiter((len(windows_of[text]) for text in part), np.int64, len(part))
        store.add_window_embeddings(
            progress.corpus, key, missing[rows], np.repeat(vectors_ND, repeats, axis=0)
        )
        bar.update(len(rows))
    bar.close()
    cached_window_embeddings(store, progress.corpus, key)  # writes the memory-mapped copy for later processes
    return len(missing)


# Embeddings are append-only per (store, corpus, model): a cached copy is valid while the row count is unchanged.
_EMBEDDING_CACHE: dict[tuple[str, str, str], tuple[int, WindowEmbeddings]] = {}


def cached_window_embeddings(store: Store, corpus: str, model: str) -> WindowEmbeddings:
    """store.window_embeddings (memory-mapped once a copy exists), cached per process while the row count holds
    (`model`: the stored embedding key, `embedding_key`)."""
    key = (str(store.path.resolve()), corpus, model)
    count = store.embedding_count(corpus, model)
    hit = _EMBEDDING_CACHE.get(key)
    if hit is not None and hit[0] == count:
        return hit[1]
    embeddings = store.window_embeddings(corpus, model)
    _EMBEDDING_CACHE.clear()  # keep one corpus in memory (100k × 384 float32 ≈ 150 MB)
    _EMBEDDING_CACHE[key] = (len(embeddings.window_ids), embeddings)
    return embeddings


def reference_similarity(embeddings_ND: np.ndarray, reference_rows: np.ndarray) -> np.ndarray:
    """(N,) float32 cosine of each (unit-norm) embedding to the mean of the reference rows' unit-norm embeddings."""
    return similarity_to(embeddings_ND, np.asarray(embeddings_ND[np.sort(reference_rows)]))


def similarity_to(embeddings_ND: np.ndarray, reference_KD: np.ndarray) -> np.ndarray:
    """(N,) float32 cosine of each (unit-norm) embedding to the mean of the (unit-norm) reference embeddings."""
    mean_D = np.asarray(reference_KD, dtype=np.float32).mean(axis=0, dtype=np.float32)
    norm = float(np.linalg.norm(mean_D))
    if norm == 0:
        return np.zeros(len(embeddings_ND), np.float32)
    return np.asarray(embeddings_ND @ (mean_D / norm).astype(np.float32), dtype=np.float32)


def top_k_by_score(ids: np.ndarray, scores: np.ndarray, k: int) -> np.ndarray:
    """The k ids with the highest scores, ordered by decreasing score then increasing id (exact, ties included).

    argpartition finds the k-th best score in O(N); only the candidates at least that good are sorted.
    """
    if k <= 0 or len(ids) == 0:
        return ids[:0]
    if len(ids) > k:
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        sel = np.flatnonzero(scores >= kth)
        ids, scores = ids[sel], scores[sel]
    return ids[np.lexsort((ids, -scores))[:k]]


def close_negatives(
    store: Store, sae_id: str, feature: int, k: int = CLOSE_NEGATIVES, config: NegativeConfig | None = None,
    require_negative: bool = True, exclude: Sequence[int] | np.ndarray = (),
) -> list[int]:  # fmt: skip
    """Exact top-k most similar windows to the feature's top activating windows (non-activating unless
    `require_negative` is False; never a window in `exclude`), ordered by decreasing similarity, ties by window id."""
    with store.session():  # one connection for the five reads below
        return _close_negatives(
            store, sae_id, feature, k, config or NegativeConfig(), require_negative, exclude
        )


def _close_negatives(
    store: Store, sae_id: str, feature: int, k: int, cfg: NegativeConfig, require_negative: bool,
    extra_exclude: Sequence[int] | np.ndarray = (),
) -> list[int]:  # fmt: skip
    """close_negatives inside an open session."""
    progress = store.index_progress(sae_id)
    if progress is None:
        raise MissingEmbeddingsError(f"SAE {sae_id} is not indexed; run `workbench index` first.")
    indexed = store.indexed_window_ids(sae_id)
    key = embedding_key(cfg.embedding_model, cfg.crop)
    emb = cached_window_embeddings(store, progress.corpus, key)
    rows = np.searchsorted(emb.window_ids, indexed)
    rows = np.minimum(rows, max(len(emb.window_ids) - 1, 0))
    if len(emb.window_ids) == 0 or not np.array_equal(emb.window_ids[rows], indexed):
        raise MissingEmbeddingsError(
            f"windows of corpus {progress.corpus!r} lack {key} embeddings; run "
            f"examples.sampling.ensure_window_embeddings(store, sae_id, crop={cfg.crop}) once (it embeds every "
            "window)."
        )
    positives = store.top_examples(sae_id, feature, cfg.reference_size)
    if not positives:
        return []
    pos_ids = np.array([p.window_id for p in positives], dtype=np.int64)
    # Similarity of every embedded window (one float32 mat-vec over the whole, possibly memory-mapped, matrix —
    # no gathered copy of it), then read off the indexed ones.
    if cfg.crop is None:
        similarity_N = reference_similarity(emb.embeddings_ND, rows[np.searchsorted(indexed, pos_ids)])[rows]
    else:  # the reference windows as their positives are shown: cropped around this feature's peak
        ref_KD = _peak_crop_embeddings(store, sae_id, progress.corpus, feature, np.sort(pos_ids), cfg, emb)
        similarity_N = similarity_to(emb.embeddings_ND, ref_KD)[rows]
    # Only the caller's exclusions (a split's sampled positives), not the whole reference set: tree-explainer spec and
    # ref `generate_records.py:372` (fidelity audit §2.2, "SIMILAR exclusions").
    exclude = np.zeros(0, np.int64)
    if require_negative:
        maxima = store.window_maxima(sae_id, feature)
        exclude = maxima.window_ids[maxima.values > cfg.threshold]
    if len(extra_exclude):
        exclude = np.union1d(exclude, np.asarray(extra_exclude, dtype=np.int64))
    keep_N = ~np.isin(indexed, exclude, assume_unique=True)
    return [int(i) for i in top_k_by_score(indexed[keep_N], similarity_N[keep_N], k)]


def _peak_crop_embeddings(
    store: Store, sae_id: str, corpus: str, feature: int, window_ids: np.ndarray, cfg: NegativeConfig,
    stored: WindowEmbeddings,
) -> np.ndarray:  # fmt: skip
    """(K, D) embeddings of the windows' `cfg.crop`-token crops around the feature's peak: the stored first-crop
    embedding where the peak crop is the first crop (a peak early in the window, or a window no longer than the
    crop, or a later crop with the same text), a fresh embedding otherwise.

    Which crops moved is decided from the activations and the windows' masks alone; token strings are read only for
    the windows whose crop moved."""
    ids = [int(i) for i in window_ids]
    acts_NT = store.window_activations(sae_id, feature, ids)
    masks = store.window_masks(corpus, ids)
    moved: list[int] = []
    for row, wid in enumerate(ids):
        keep = masks[wid].copy()
        if keep.size:
            keep[0] = False  # BOS, as make_record drops it
        if crop_start(acts_NT[row, : keep.size][keep], cfg.crop) > 0:
            moved.append(row)
    rows = np.searchsorted(stored.window_ids, np.asarray(ids, dtype=np.int64))
    out = np.asarray(stored.embeddings_ND[rows], dtype=np.float32).copy()
    if not moved:
        return out
    records = load_records(store, sae_id, corpus, feature, [ids[r] for r in moved])
    shown = ["".join(crop_record(r, cfg.crop).tokens) for r in records]
    first = ["".join(r.tokens[: cfg.crop]) for r in records]
    fresh = [row for row, a, b in zip(moved, shown, first, strict=True) if a != b]
    if fresh:
        # Seconds of MiniLM per feature on a CPU: done with the file left free, or a job's store thread would keep
        # every other process (`workbench sql`, the app) out for as long (issue 34).
        with store.released():
            out[fresh] = embed_texts(
                [s for s, f in zip(shown, first, strict=True) if s != f], cfg.embedding_model
            )
    return out


def draw_negatives(
    store: Store,
    sae_id: str,
    feature: int,
    source: NegativeSource = NegativeSource.SIMILAR_NEGATIVE,
    k: int = CLOSE_NEGATIVES,
    seed: int = 0,
    config: NegativeConfig | None = None,
    exclude: Sequence[int] | np.ndarray = (),
) -> Sample:
    """Draw negatives from `source` (never a window in `exclude`, e.g. a scorer's positives), store the sample
    (ids, seed, config) and return it."""
    cfg = config or NegativeConfig()
    rng = np.random.default_rng(seed)
    excluded = np.unique(np.asarray(exclude, dtype=np.int64))
    if source is NegativeSource.RANDOM:
        indexed = np.setdiff1d(store.indexed_window_ids(sae_id), excluded, assume_unique=True)
        ids = [int(i) for i in rng.choice(indexed, size=min(k, len(indexed)), replace=False)]
    elif source is NegativeSource.RANDOM_NEGATIVE:
        # A uniform random order minus the excluded ids is a uniform random order of the rest.
        drawn = random_negatives(
            store, sae_id, feature, k + len(excluded), seed=seed, threshold=cfg.threshold
        )
        skip = set(excluded.tolist())
        ids = [i for i in drawn if i not in skip][:k]
    else:
        ids = close_negatives(
            store, sae_id, feature, k, cfg, require_negative=source is NegativeSource.SIMILAR_NEGATIVE,
            exclude=excluded,
        )  # fmt: skip
    sample = Sample(sae_id, int(feature), source.value, seed, negative_params(k, cfg, excluded), ids)
    return replace(sample, id=store.add_sample(sample))


def negative_params(
    k: int, config: NegativeConfig, exclude: Sequence[int] | np.ndarray = ()
) -> dict[str, Any]:
    """The config a negative sample is stored with (k, NegativeConfig, and a digest of the excluded ids)."""
    params: dict[str, Any] = {"k": k, **asdict(config)}
    excluded = np.unique(np.asarray(exclude, dtype=np.int64))
    if len(excluded):
        digest = hashlib.sha256(excluded.tobytes()).hexdigest()[:16]
        params.update(n_excluded=len(excluded), excluded_sha256=digest)
    return params


def draw_examples(
    store: Store,
    sae_id: str,
    feature: int,
    source: ExampleSource = ExampleSource.TOP,
    k: int = 20,
    seed: int = 0,
    n_quantiles: int = 10,
) -> Sample:
    """Draw activating examples (top / per-quantile / random), store the sample and return it."""
    if source is ExampleSource.TOP:
        examples = store.top_examples(sae_id, feature, k)
    elif source is ExampleSource.QUANTILE:
        examples = quantile_examples(store, sae_id, feature, n_quantiles, max(1, k // n_quantiles), seed)
    else:
        examples = random_examples(store, sae_id, feature, k, seed)
    config = {"k": k, "n_quantiles": n_quantiles} if source is ExampleSource.QUANTILE else {"k": k}
    sample = Sample(sae_id, int(feature), source.value, seed, config, [e.window_id for e in examples])
    return replace(sample, id=store.add_sample(sample))


def split_sample(window_ids: list[int], n_parts: int = 3) -> list[list[int]]:
    """Split ids into `n_parts` consecutive, near-equal parts (the paper's 10/10/10 split of 30 negatives)."""
    return [part.tolist() for part in np.array_split(np.asarray(window_ids, dtype=np.int64), n_parts)]


# ---------------------------------------------------------------------------------------------- sampling policy
# (over the store's raw reads: window maxima and the indexed window ids)


def quantile_examples(
    store: Store, sae_id: str, feature: int, n_quantiles: int = 10, per_quantile: int = 5, seed: int = 0
) -> list[Example]:
    """Activating windows split into `n_quantiles` equal-count bins by max activation (bin 0 = highest);
    `per_quantile` drawn uniformly per bin with `seed` (delphi-style quantile sampling)."""
    maxima = store.window_maxima(sae_id, feature)
    order = maxima.by_peak()
    rng = np.random.default_rng(seed)
    out: list[Example] = []
    for q, idx in enumerate(np.array_split(order, n_quantiles)):
        if len(idx) == 0:
            continue
        chosen = np.sort(rng.choice(idx, size=min(per_quantile, len(idx)), replace=False))
        out.extend(
            Example(int(maxima.window_ids[i]), float(maxima.values[i]), int(maxima.positions[i]), q)
            for i in chosen
        )
    return out


def random_examples(store: Store, sae_id: str, feature: int, k: int, seed: int = 0) -> list[Example]:
    """`k` activating windows drawn uniformly with `seed` (all of them if fewer)."""
    maxima = store.window_maxima(sae_id, feature)
    rng = np.random.default_rng(seed)
    chosen = rng.choice(len(maxima.window_ids), size=min(k, len(maxima.window_ids)), replace=False)
    return [
        Example(int(maxima.window_ids[i]), float(maxima.values[i]), int(maxima.positions[i])) for i in chosen
    ]


def random_negatives(
    store: Store, sae_id: str, feature: int, k: int, seed: int = 0, threshold: float = 0.0
) -> list[int]:
    """`k` indexed windows whose max activation of `feature` is ≤ `threshold`, drawn uniformly with `seed`."""
    maxima = store.window_maxima(sae_id, feature)
    active = maxima.window_ids[maxima.values > threshold]
    candidates = np.setdiff1d(store.indexed_window_ids(sae_id), active, assume_unique=True)
    rng = np.random.default_rng(seed)
    chosen = rng.choice(candidates, size=min(k, len(candidates)), replace=False)
    return [int(i) for i in chosen]
