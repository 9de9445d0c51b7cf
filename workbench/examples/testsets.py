"""The ONE train/valid/test split per feature that every explainer and every scorer uses.

Tree paper (Ma, Pfrommer & Sojoudi, NeurIPS 2025; ref `scripts/experiment.py:234-244`, `record.py:158-177`): 30
positives are sampled from the feature's top chunk (top 0.1% of windows by max activation, here at least 30) and 30
negatives come from one source; both are dealt round-robin into train / valid / test (10 + 10 each). Explainers see at
most train and valid (the one-shot and lexical explainers: train only, as ref's one-shot and tree share the same 10
train positives); scorers score the test third, so no scored window was ever shown to the explainer.

    split = draw_split(store, sae_id, feature, SplitConfig(negatives=NegativeSource.SIMILAR_NEGATIVE, seed=0))
    split.train.positives, split.valid.negatives, split.test.positives          # window ids
    test = scored_windows(split, seen=explanation_shown_ids)                   # what a scorer scores

Draws are deterministic in (SAE, feature, config): positives from `default_rng([seed, feature])` in random order
(ref: randperm), negatives from `examples.sampling.draw_negatives` with the same seed pair, stored as a sample (its
id goes into the provenance). Each draw has a spare part of n/3 beyond the 30: a scorer that scores with another
negative source than the explainer was shown, or an explainer that drew extra windows of its own (the lexical
explainer's quantile sample), may find a test window among the explanation's inputs — `scored_windows` drops those and
tops the test third up from the spares, so a scored test window is never one the explainer saw.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sae_workbench import defaults
from sae_workbench.embeddings import DEFAULT_EMBEDDING_MODEL
from sae_workbench.examples.sampling import (
    EMBED_CROP,
    MissingEmbeddingsError,
    NegativeConfig,
    NegativeSource,
    draw_negatives,
    ensure_window_embeddings,
    negative_params,
)
from sae_workbench.store import NotIndexedError, Sample, Store

# Tree paper: the top chunk is 0.1% of windows (ref uses len // 1000 with no minimum; we keep at least 30 so a small
# corpus still yields 30 distinct positives).
TOP_FRACTION = 0.001
MIN_CHUNK = 30
# Tree paper: 30 positives and 30 negatives, 10/10/10.
PER_SPLIT = defaults.PER_SPLIT


def top_chunk_size(n_windows: int, fraction: float = TOP_FRACTION, minimum: int = MIN_CHUNK) -> int:
    """Size of the top chunk positives are sampled from (paper: top 0.1% of windows, here at least 30)."""
    return max(minimum, math.ceil(fraction * n_windows))


def deal(ids: Sequence[int]) -> tuple[list[int], list[int], list[int]]:
    """Round-robin thirds (train = [0::3], valid = [1::3], test = [2::3]), as the tree paper deals its records."""
    items = [int(i) for i in ids]
    return items[0::3], items[1::3], items[2::3]


@dataclass(frozen=True)
class SplitConfig:
    """How a feature's split is drawn and what its records show; explainers and scorers that share it share their
    windows' roles. The CLI builds one (`cli.options.split_config`) and nests it in the explain and the score
    configuration; an explanation records it (`params()` in its sampling) and `score` reads it back from there
    (`from_params`) unless told otherwise."""

    negatives: NegativeSource = NegativeSource.SIMILAR_NEGATIVE
    """Source of the negatives (tree paper default: SIMILAR_NEGATIVE)."""
    per_split: int = PER_SPLIT
    """Positives and negatives per third (tree paper: 10)."""
    seed: int = 0
    """Seed of the positive and negative draws (combined with the feature index)."""
    threshold: float = 0.0
    """A window is non-activating when its max activation is ≤ this (tree paper: 0)."""
    reference_size: int = 400
    """Highest-activating windows that define similarity for close negatives (tree paper: 400)."""
    embedding_model: str = DEFAULT_EMBEDDING_MODEL
    """sentence-transformers model of the window embeddings behind SIMILAR negatives."""
    embed_crop: int | None = EMBED_CROP
    """Record length the SIMILAR negatives' similarity is measured on: each window's first `embed_crop` tokens and
    the reference windows' crops around the peak, i.e. what explainers and scorers show and simulate (tree paper:
    32; None: whole windows). Explainers and scorers that share a split share this."""
    record_length: int | None = defaults.RECORD_LEN
    """Tokens per record shown, simulated and scored, around each peak (tree paper: 32; None: whole windows)."""

    def __post_init__(self) -> None:
        """Accept the source by name too."""
        object.__setattr__(self, "negatives", NegativeSource(self.negatives))

    def params(self) -> dict[str, object]:
        """JSON-able form (provenance and config keys)."""
        return {"negatives": self.negatives.value, "per_split": self.per_split, "seed": self.seed,
                "threshold": self.threshold, "reference_size": self.reference_size,
                "embedding_model": self.embedding_model if self.similar else "",
                **({"embed_crop": self.embed_crop} if self.similar else {}),
                "top_fraction": TOP_FRACTION, "min_chunk": MIN_CHUNK,
                "record_length": self.record_length}  # fmt: skip

    @classmethod
    def from_params(
        cls, params: Mapping[str, Any], record_length: int | None = defaults.RECORD_LEN
    ) -> SplitConfig:
        """The config `params()` recorded (an explanation's `sampling["split"]`); `record_length` where the record
        predates the field (the explainer's own `record_len` then)."""
        return cls(
            negatives=NegativeSource(str(params.get("negatives", defaults.NEGATIVES))),
            per_split=int(params.get("per_split", PER_SPLIT)),  # type: ignore[call-overload]
            seed=int(params.get("seed", defaults.DEFAULT_SEED)),  # type: ignore[call-overload]
            threshold=float(params.get("threshold", 0.0)),  # type: ignore[arg-type]
            reference_size=int(params.get("reference_size", 400)),  # type: ignore[call-overload]
            embedding_model=str(params.get("embedding_model") or DEFAULT_EMBEDDING_MODEL),
            embed_crop=params.get("embed_crop", EMBED_CROP),  # type: ignore[arg-type]
            record_length=params.get("record_length", record_length),  # type: ignore[arg-type]
        )

    @property
    def similar(self) -> bool:
        """True when the negatives are similarity-based (they need window embeddings)."""
        return self.negatives.value.startswith("SIMILAR")


@dataclass(frozen=True)
class Third:
    """One third of a split: window ids of its positives and negatives."""

    positives: tuple[int, ...]
    """Top-chunk windows."""
    negatives: tuple[int, ...]
    """Windows from the negative source."""

    @property
    def ids(self) -> tuple[int, ...]:
        """Positives then negatives."""
        return self.positives + self.negatives


@dataclass(frozen=True)
class FeatureSplit:
    """A feature's windows dealt into train / valid / test, plus spares for topping up a test third."""

    feature: int
    """Feature index."""
    train: Third
    """What explainers learn from."""
    valid: Third
    """What the tree search selects its node on."""
    test: Third
    """What scorers score."""
    spare: Third
    """Drawn beyond the 3 × per_split, in draw order: replacements for test windows an explainer saw."""
    top_chunk: int
    """Size of the top chunk the positives were drawn from."""
    negative_sample_id: int | None
    """Store id of the negative sample (None when there were no positives to contrast)."""
    config: SplitConfig
    """How it was drawn."""

    def provenance(self) -> dict[str, object]:
        """What a stored explanation or score records about its split."""
        return {**self.config.params(), "top_chunk": self.top_chunk,
                "negative_sample_id": self.negative_sample_id}  # fmt: skip


def _rng(config: SplitConfig, feature: int) -> np.random.Generator:
    """The positives' generator: one stream per (seed, feature)."""
    return np.random.default_rng([config.seed, int(feature)])


def positive_ids(store: Store, sae_id: str, feature: int, config: SplitConfig) -> tuple[list[int], int]:
    """(up to 4 × per_split window ids from the top chunk in random order, chunk size); the first 3 × per_split
    are dealt into thirds, the rest are spares."""
    progress = store.index_progress(sae_id)
    if progress is None:
        raise NotIndexedError(
            f"SAE {sae_id} has no activations in {store.path}; run `workbench index` first."
        )
    maxima = store.window_maxima(sae_id, feature)
    order = maxima.by_peak()
    active = order[maxima.values[order] > config.threshold]
    chunk = min(len(active), top_chunk_size(progress.next_window))
    candidates = maxima.window_ids[active[:chunk]]
    n = min(len(candidates), 4 * config.per_split)
    return [int(i) for i in _rng(config, feature).choice(candidates, size=n, replace=False)], chunk


def negative_sample(
    store: Store, sae_id: str, feature: int, config: SplitConfig, positives: Sequence[int]
) -> Sample:
    """4 × per_split negatives from the configured source, never a sampled positive; drawn once and stored (a
    later draw with the same settings reuses the stored sample)."""
    k, seed = 4 * config.per_split, config.seed
    neg_cfg = NegativeConfig(
        config.reference_size, config.threshold, config.embedding_model, config.embed_crop
    )
    excluded = np.asarray(sorted(positives), dtype=np.int64)
    params = negative_params(k, neg_cfg, excluded)
    source = config.negatives
    for stored in store.samples(sae_id, feature, source.value):
        if stored.seed == seed and stored.config == params:
            return stored
    try:  # close negatives check that every indexed window has its embedding (no anti-join per feature)
        return draw_negatives(
            store, sae_id, feature, source, k=k, seed=seed, config=neg_cfg, exclude=excluded
        )
    except MissingEmbeddingsError:
        prepare_split(store, sae_id, config)  # embeds what is missing, once per corpus and crop
        return draw_negatives(
            store, sae_id, feature, source, k=k, seed=seed, config=neg_cfg, exclude=excluded
        )


def prepare_split(store: Store, sae_id: str, config: SplitConfig) -> None:
    """What drawing splits under `config` needs once per SAE: SIMILAR negatives need every window embedded."""
    if config.similar:
        ensure_window_embeddings(store, sae_id, config.embedding_model, crop=config.embed_crop)


def draw_split(store: Store, sae_id: str, feature: int, config: SplitConfig) -> FeatureSplit:
    """The feature's split under `config` (see the module docstring)."""
    with store.session():  # one connection for the reads of both draws
        pos, chunk = positive_ids(store, sae_id, feature, config)
        sample = negative_sample(store, sae_id, feature, config, pos) if pos else None
    neg = list(sample.window_ids) if sample is not None else []
    n = 3 * config.per_split
    (p_train, p_valid, p_test), (n_train, n_valid, n_test) = deal(pos[:n]), deal(neg[:n])
    return FeatureSplit(
        feature=int(feature),
        train=Third(tuple(p_train), tuple(n_train)),
        valid=Third(tuple(p_valid), tuple(n_valid)),
        test=Third(tuple(p_test), tuple(n_test)),
        spare=Third(tuple(pos[n:]), tuple(neg[n:])),
        top_chunk=chunk,
        negative_sample_id=sample.id if sample is not None else None,
        config=config,
    )


def scored_windows(split: FeatureSplit, seen: Collection[int] = ()) -> Third:
    """The test third without any window in `seen` (what the explainer was shown), topped up from the spares."""
    shown = {int(i) for i in seen}

    def fill(test: Sequence[int], spare: Sequence[int]) -> tuple[int, ...]:
        kept = [i for i in test if i not in shown]
        extra = [i for i in spare if i not in shown]
        return tuple(kept + extra[: len(test) - len(kept)])

    return Third(
        fill(split.test.positives, split.spare.positives), fill(split.test.negatives, split.spare.negatives)
    )


# Issue 33: what an explanation's author was shown is held out by window, text, document, adjacency and near-duplicate
# runs; a test window that fails any of these is replaced from the spares, then from the feature's next active windows.
NEAR_DUPLICATE_TOKENS = 16
"""Windows sharing this many consecutive identical tokens are near-duplicates (boilerplate); never on both sides."""
RESERVE = 500
"""Active windows beyond the drawn positives (in peak order) a test third may be topped up from."""


@dataclass(frozen=True)
class Shown:
    """What an explanation's author was shown: window ids, their documents, texts and token runs."""

    ids: frozenset[int]
    """Window ids."""
    documents: frozenset[str]
    """Documents (the corpus's `source`) those windows start in."""
    texts: frozenset[str]
    """Their texts."""
    runs: frozenset[tuple[int, ...]]
    """Every run of NEAR_DUPLICATE_TOKENS consecutive tokens (BOS dropped) in them."""


def _runs(tokens: np.ndarray) -> set[tuple[int, ...]]:
    """The windows' NEAR_DUPLICATE_TOKENS-token runs (BOS dropped)."""
    toks = [int(t) for t in tokens[1:]]
    n = NEAR_DUPLICATE_TOKENS
    return {tuple(toks[i : i + n]) for i in range(len(toks) - n + 1)}


def shown_of(store: Store, corpus: str, window_ids: Collection[int]) -> Shown:
    """The `Shown` of these windows (stored window ids: an unknown one raises the store's error)."""
    ids = frozenset(int(i) for i in window_ids)
    windows = store.get_windows(corpus, sorted(ids)) if ids else []
    runs: set[tuple[int, ...]] = set()
    for w in windows:
        runs |= _runs(w.tokens)
    return Shown(
        ids, frozenset(w.source for w in windows), frozenset(w.text for w in windows), frozenset(runs)
    )


@dataclass(frozen=True)
class HeldOutTest:
    """The test windows an explanation is scored on, none of them related to what its author was shown."""

    third: Third
    """Positives and negatives scored."""
    seen: int
    """Windows of the split's test third the author was shown (by id or identical text): replaced."""
    excluded: dict[str, int]
    """Candidate windows skipped, by reason: shown, same_text, same_document, adjacent, near_duplicate."""
    short_positives: int
    """Positives fewer than per_split (too few held-out windows: the corpus has too few documents)."""
    short_negatives: int
    """Negatives fewer than per_split."""
    beyond_top_chunk: int
    """Positives taken from active windows beyond the top chunk (its windows were all shown or related)."""

    def metrics(self) -> dict[str, float]:
        """What a score records about its held-out test third."""
        return {"test_windows_seen": float(self.seen), "test_positives_short": float(self.short_positives),
                "test_negatives_short": float(self.short_negatives),
                "test_positives_beyond_top_chunk": float(self.beyond_top_chunk),
                **{f"held_out_{k}": float(v) for k, v in self.excluded.items()}}  # fmt: skip


def _reason(window: Any, shown: Shown) -> str:
    """Why a candidate test window is not held out from `shown` ('' when it is)."""
    wid = int(window.window_id)
    if wid in shown.ids:
        return "shown"
    if window.text in shown.texts:
        return "same_text"
    if window.source in shown.documents:
        return "same_document"
    if wid - 1 in shown.ids or wid + 1 in shown.ids:
        return "adjacent"
    if shown.runs and not shown.runs.isdisjoint(_runs(window.tokens)):
        return "near_duplicate"
    return ""


def held_out_test(
    store: Store, sae_id: str, corpus: str, split: FeatureSplit, shown_ids: Collection[int]
) -> HeldOutTest:
    """The split's test third with every window related to `shown_ids` (same window, text or document, adjacent, or
    a NEAR_DUPLICATE_TOKENS-token run in common) replaced from the spares, then (positives) from the feature's next
    active windows in peak order; what could not be replaced is reported short, never filled with a related window."""
    shown = shown_of(store, corpus, shown_ids)
    reasons: tuple[str, ...] = ("shown", "same_text", "same_document", "adjacent", "near_duplicate")
    excluded: dict[str, int] = dict.fromkeys(reasons, 0)
    n = split.config.per_split
    seen = 0

    def pick(candidates: Sequence[int], test: set[int], want: int, kept: list[int]) -> None:
        nonlocal seen
        todo = [int(i) for i in candidates if int(i) not in kept]
        for start in range(0, len(todo), 64):
            if len(kept) >= want:
                return
            part = todo[start : start + 64]
            for w in store.get_windows(corpus, part):
                if len(kept) >= want:
                    return
                why = _reason(w, shown)
                if not why:
                    kept.append(int(w.window_id))
                    continue
                excluded[why] += 1
                seen += int(w.window_id in test and why in ("shown", "same_text"))

    positives: list[int] = []
    negatives: list[int] = []
    pos_test, neg_test = set(split.test.positives), set(split.test.negatives)
    want_pos = min(n, len(split.test.positives))
    want_neg = min(n, len(split.test.negatives))
    with store.session():
        pick([*split.test.positives, *split.spare.positives], pos_test, want_pos, positives)
        beyond = 0
        if len(positives) < want_pos:
            drawn = {*split.train.positives, *split.valid.positives, *pos_test, *split.spare.positives}
            maxima = store.window_maxima(sae_id, split.feature)
            order = maxima.by_peak()
            active = maxima.window_ids[order[maxima.values[order] > split.config.threshold]]
            reserve = [int(i) for i in active if int(i) not in drawn][:RESERVE]
            before = len(positives)
            pick(reserve, pos_test, want_pos, positives)
            beyond = len(positives) - before
        pick([*split.test.negatives, *split.spare.negatives], neg_test, want_neg, negatives)
    # a test window excluded for its own id/text counts as seen even when the pick stopped before reaching it
    seen_ids = {i for i in (*pos_test, *neg_test) if i in shown.ids}
    seen = max(seen, len(seen_ids))
    return HeldOutTest(
        Third(tuple(positives), tuple(negatives)), seen, excluded,
        max(0, want_pos - len(positives)), max(0, want_neg - len(negatives)), beyond,
    )  # fmt: skip
