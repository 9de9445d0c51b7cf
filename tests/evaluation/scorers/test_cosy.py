"""CoSy end to end with the tiny model and a planted SAE feature that fires on the token " def": texts written by a
scripted LLM on the fake OpenAI-compatible server that echoes the description's words (new texts, not corpus windows,
written without knowing the feature), the paper preset's prompt and token cut, and the offline corpus-rule composer's
bookkeeping."""

from __future__ import annotations

import asyncio
import re

import numpy as np
import pytest
import torch

from sae_workbench.evaluation.scorers.cosy import (
    CorpusRuleGenerator,
    CorpusSnippet,
    CosyConfig,
    LLMGenerator,
    ModelFeatureMeans,
    cosy_score,
)
from sae_workbench.evaluation.scorers.job import ScoreBackends, ScoreConfig, run_scoring
from sae_workbench.llm.client import LLMClient
from sae_workbench.llm.config import LLMConfig
from sae_workbench.status import Status
from tests.evaluation.scorers.test_scoring_planted import SAE_ID, build_planted_store
from tests.fake_llm import FakeLLM

HOOK = "hook_embed"  # the token embedding: the planted encoder reads token identity exactly


@pytest.fixture(scope="module")
def planted_means(tiny_model) -> ModelFeatureMeans:
    """Feature 0 fires on the word "def" in any spelling (" def", "def", "Def", …): ReLU(10·(⟨x, e⟩/|e|² − 0.9))
    maxed over those tokens' embeddings; feature 1 is always 0."""
    from sae_workbench.sae.vocab import vocab_strings

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


FILLER = " The morning was quiet and the river ran slowly past the old mill near the village."
NAMES = ["Ana", "Ben", "Chloe", "Dev", "Emma", "Farid", "Grace", "Hugo", "Ines", "Jon", "Kai", "Lena"]


def echo_generator(body: dict) -> str:
    """A scripted LLM on the fake server that knows nothing about the feature: each of the n texts it is asked for is
    NEW (a template, never a corpus window) holding the request's description, its words shuffled (seeded by the
    text's number), in a neutral sentence about a person. Whether a text holds a token the planted feature fires on
    therefore follows from the description's words alone, and the AUC from the feature. Asked for a word count (the
    paper's prompt), it writes long texts whose description sits after ~200 tokens of filler."""
    content = body["messages"][-1]["content"]
    n = int(re.search(r"Write (\d+)", content).group(1))  # type: ignore[union-attr]
    long_texts = re.search(r"texts of (\d+) words", content) is not None
    description = content.split("The texts should include:\n")[-1] if long_texts else content.splitlines()[1]
    words = re.findall(r"[A-Za-z]+", description)
    lines = []
    for i in range(n):
        shuffled = " ".join(words[j] for j in np.random.default_rng(i).permutation(len(words)))
        text = f"{NAMES[i]} wrote down: {shuffled}, and then {NAMES[i + 1]} read it twice."
        lines.append(FILLER * 12 + " " + text if long_texts else text)
    return "\n".join(lines)


def _generate(server: FakeLLM, description: str, settings: CosyConfig) -> list[str]:
    async def go() -> list[str]:
        config = LLMConfig(model="scripted", base_url=server.base_url, timeout_s=5, backoff_base_s=0.001)
        async with LLMClient(config) as llm:
            return await LLMGenerator(llm, settings=settings).generate(description)

    return asyncio.run(go())


def _fires_on(tiny_model, text: str) -> bool:
    """Whether the text's tokens hold one the planted feature fires on (the word "def" in any spelling)."""
    ids = tiny_model.tokenizer.encode(text, add_special_tokens=False)
    return any(tiny_model.tokenizer.decode([i]).strip().lower() == "def" for i in ids)


def _auc_by_hand(generated: np.ndarray, control: np.ndarray) -> float:
    """P(a generated text's mean activation > a control text's), ties one half, over all pairs."""
    g, c = np.asarray(generated)[:, None], np.asarray(control)[None, :]
    return float(np.mean((g > c) + 0.5 * (g == c)))


def test_llm_generated_texts_discriminate_a_correct_from_an_unrelated_description(
    store, planted_means: ModelFeatureMeans, tiny_model
) -> None:
    """CoSy's discriminative power with texts the generator wrote itself (none is a corpus window), by a generator
    that does not know the feature: the description naming the token the feature fires on gets AUC near 1; an
    unrelated one, and an on-topic one that never writes that token ("definitions" is not "def"), near 0.5 (spec
    prism.md, "How to validate"). Each AUC is the one the activations give, recomputed pair by pair."""
    snippets, control = _snippets_and_control(store)
    fn = planted_means.for_feature(0)
    a0 = fn(control)
    assert a0.shape == (len(control),) and float(np.median(a0)) == 0.0
    corpus_text = "\n".join("".join(s.tokens) for s in snippets) + "\n".join(control)
    descriptions = {
        "correct": "the Python keyword def that starts a function definition",
        "unrelated": "people chatting at a market",
        "topical": "Python function definitions and their parameters",
    }
    with FakeLLM(responder=echo_generator) as server:
        texts = {k: _generate(server, d, CosyConfig()) for k, d in descriptions.items()}
        assert "one or two sentences" in server.requests[0].body["messages"][-1]["content"]
    assert all(len(t) == 10 for t in texts.values())
    assert not any(t in corpus_text for ts in texts.values() for t in ts)
    # Only the description that names the token yields texts holding it; the feature fires exactly on those texts.
    assert {k: [_fires_on(tiny_model, t) for t in ts] for k, ts in texts.items()} == {
        "correct": [True] * 10, "unrelated": [False] * 10, "topical": [False] * 10,
    }  # fmt: skip
    acts = {k: fn(ts) for k, ts in texts.items()}
    assert (acts["correct"] > 0).all() and not acts["unrelated"].any() and not acts["topical"].any()
    scores = {k: cosy_score(a, a0) for k, a in acts.items()}
    for k, score in scores.items():
        assert score.auc == pytest.approx(_auc_by_hand(acts[k], a0)), k
    # All-zero texts against a control that is mostly zero: AUC = half the control's zero fraction.
    assert scores["unrelated"].auc == pytest.approx(0.5 * float(np.mean(a0 == 0)))
    good = scores["correct"]
    assert good.auc > 0.9 and good.mad > 1.0 and good.mannwhitney_p < 0.01
    for k in ("unrelated", "topical"):
        assert 0.3 < scores[k].auc < 0.7 and scores[k].mad < good.mad and scores[k].mannwhitney_p > 0.05


def test_paper_preset_asks_for_512_words_and_reads_512_tokens(
    store, planted_means: ModelFeatureMeans, tiny_model
) -> None:
    """The paper preset asks for 512-word texts; its 512-token cut reads code that a 128-token cut drops."""
    _, control = _snippets_and_control(store)
    paper = CosyConfig.paper()
    assert (paper.words_per_text, paper.n_control, paper.max_tokens) == (512, 1000, 512)
    with FakeLLM(responder=echo_generator) as server:
        texts = _generate(server, "the Python keyword def that starts a function definition", paper)
        assert "Write 10 texts of 512 words each." in server.requests[0].body["messages"][-1]["content"]
    n_tokens = [len(tiny_model.tokenizer.encode(t, add_special_tokens=False)) for t in texts]
    assert min(n_tokens) > 160 and max(n_tokens) < 250  # the description starts after the first 128 tokens
    long_cut = ModelFeatureMeans(
        tiny_model, HOOK, planted_means.encode, bos_id=0, max_tokens=paper.max_tokens
    )
    short_cut = ModelFeatureMeans(
        tiny_model, HOOK, planted_means.encode, bos_id=0, max_tokens=CosyConfig().max_tokens
    )
    seen = cosy_score(long_cut.for_feature(0)(texts), long_cut.for_feature(0)(control))
    cut = cosy_score(short_cut.for_feature(0)(texts), short_cut.for_feature(0)(control))
    assert seen.auc > 0.9 and cut.auc < 0.7


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
