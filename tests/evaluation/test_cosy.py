"""CoSy end to end with the tiny model and a planted SAE feature that fires on the token " def"."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from sae_workbench.evaluation.cosy import (
    CorpusRuleGenerator,
    CorpusSnippet,
    ModelFeatureMeans,
    score_description,
)
from sae_workbench.evaluation.score_job import ScoreBackends, ScoreConfig, run_scoring
from sae_workbench.status import Status
from tests.evaluation.test_scoring_planted import SAE_ID, build_planted_store

HOOK = "hook_embed"  # the token embedding: the planted encoder reads token identity exactly


@pytest.fixture(scope="module")
def planted_means(tiny_model) -> ModelFeatureMeans:
    """Feature 0 fires on the word "def" in any spelling (" def", "def", "Def", …): ReLU(10·(⟨x, e⟩/|e|² − 0.9))
    maxed over those tokens' embeddings; feature 1 is always 0."""
    from sae_workbench.sae.indexing import vocab_strings

    strings_V = vocab_strings(tiny_model.tokenizer)
    ids = [i for i, s in enumerate(strings_V) if s.strip().lower() == "def"]
    dirs_KD = tiny_model.W_E[ids].detach()

    def encode(x_ND: torch.Tensor) -> torch.Tensor:
        proj_NK = x_ND @ dirs_KD.T / (dirs_KD * dirs_KD).sum(dim=1)
        f0 = torch.relu(10 * (proj_NK - 0.9)).max(dim=1).values
        return torch.stack([f0, torch.zeros_like(f0)], dim=1)

    return ModelFeatureMeans(tiny_model, HOOK, encode, bos_id=0)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):
    """The 400-window planted store (same windows and explanations as the scoring tests)."""
    return build_planted_store(tmp_path_factory.mktemp("cosy") / "s.duckdb", 400)


def _snippets_and_control(store) -> tuple[list[CorpusSnippet], list[str]]:
    ids = store.indexed_window_ids(SAE_ID)
    windows = store.get_windows(store.index_progress(SAE_ID).corpus, ids)
    snippets = [CorpusSnippet(w.window_id, tuple(w.token_strings[1:])) for w in windows[:300]]
    control = [w.text for w in windows[300:]]  # held out from the generator's windows
    return snippets, control


def test_correct_description_scores_near_one_random_near_half(
    store, planted_means: ModelFeatureMeans
) -> None:
    snippets, control = _snippets_and_control(store)
    fn = planted_means.for_feature(0)
    a0 = fn(control)
    assert a0.shape == (len(control),) and float(np.median(a0)) == 0.0
    gen = CorpusRuleGenerator(snippets, seed=0)
    good, texts = asyncio.run(score_description(gen, '"def"', fn, a0))
    assert len(texts) == 10 and all("def" in t.lower() for t in texts)
    rand, _ = asyncio.run(score_description(gen, "people", fn, a0))
    assert good.auc > 0.9 and good.mad > 1.0 and good.mannwhitney_p < 0.01
    assert 0.3 < rand.auc < 0.7 and rand.mad < good.mad


def test_cosy_runner_records_descriptions(store, planted_means: ModelFeatureMeans) -> None:
    snippets, control = _snippets_and_control(store)
    backends = ScoreBackends(
        generator=CorpusRuleGenerator(snippets, seed=0),
        activation_fn_for=planted_means.for_feature,
        control_texts=control,
    )
    result = run_scoring(
        store, SAE_ID, ScoreConfig("cosy"), backends, explainer="planted-correct", progress=False
    )
    assert (result.scored, result.failed) == (1, 0)
    (expl,) = store.explanations(sae_id=SAE_ID, explainer="planted-correct", feature=0)
    (score,) = store.scores(explanation_id=expl.id, scorer="cosy")
    assert score.negative_source == "" and score.provenance["backend"] == "corpus-rule-composer"
    # The explanation text (a sentence) is the description; its content words rarely hit " def" windows, so
    # the score is honest about it — but the structured pipeline still records all fields.
    assert {"auc", "mad", "mannwhitney_p", "descriptions"} <= set(score.metrics)


def test_means_exclude_bos_and_padding(tiny_model, planted_means: ModelFeatureMeans) -> None:
    # " def" alone: one counted token, activation a; with " x" appended the mean halves (BOS never counts,
    # padding of the shorter text in the same batch never counts).
    one, two = planted_means([" def", " def x"])[:, 0]
    assert one > 0 and two == pytest.approx(one / 2, rel=1e-5)


def test_cosy_reads_prism_clusters_and_skips_dead_features(store, planted_means: ModelFeatureMeans) -> None:
    from sae_workbench.store import ExplanationRecord

    snippets, control = _snippets_and_control(store)
    base = {"sae_id": SAE_ID, "explainer": "prism", "explainer_version": "t", "prompt_version": "", "llm_model": "",
            "llm_params": {}, "sampling": {}, "example_ids": [], "negative_ids": []}  # fmt: skip
    clusters = [
        {"description": '"def"', "window_ids": [1], "shown_ids": [1], "texts": ["[def] f():"]},
        {"description": "people", "window_ids": [2], "shown_ids": [2], "texts": ["people"]},
    ]
    store.add_explanation(
        ExplanationRecord(**base, feature=0, text="1. x\n2. y", config_key="pc", extra={"clusters": clusters})
    )
    store.add_explanation(
        ExplanationRecord(
            **base, feature=1, text="", config_key="pd", extra={"reason": "none"}, status=Status.DEAD
        )
    )
    backends = ScoreBackends(
        generator=CorpusRuleGenerator(snippets, seed=0),
        activation_fn_for=planted_means.for_feature,
        control_texts=control,
    )
    result = run_scoring(store, SAE_ID, ScoreConfig("cosy"), backends, explainer="prism", progress=False)
    assert (result.scored, result.failed, result.dead) == (1, 0, 1)
    scores = {
        e.feature: store.scores(explanation_id=e.id, scorer="cosy")[0]
        for e in store.explanations(sae_id=SAE_ID, explainer="prism")
    }
    m = scores[0].metrics
    # One CoSy score per cluster description (not the numbered text); PRISM (max) takes the " def" one.
    assert [d["description"] for d in m["descriptions"]] == ['"def"', "people"]
    assert m["n_descriptions"] == 2 and m["auc"] == max(d["auc"] for d in m["descriptions"]) > 0.9
    assert m["auc_mean"] < m["auc"]
    assert scores[1].status is Status.DEAD and "auc" not in scores[1].metrics
