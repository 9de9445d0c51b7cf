"""CoSy loads its own model, SAE and control texts behind the Scorer protocol (`CosyScorer.from_backends` reading the
run's `ScorerInputs`), so `workbench score` and the Ray backend never switch on its name; scores are those of the
same components built by hand."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from sae_workbench.corpus import default_bos_id, iter_windows, resolve_corpus
from sae_workbench.evaluation.scorers.base import ScoreBackends, ScoreConfig, ScoreConfigError, ScorerInputs
from sae_workbench.evaluation.scorers.cosy import (
    CorpusRuleGenerator,
    CorpusSnippet,
    CosyConfig,
    CosyControlError,
    CosyScorer,
    ModelFeatureMeans,
    read_control_texts,
)
from sae_workbench.evaluation.scorers.job import run_scoring, score_backends
from sae_workbench.evaluation.scorers.registry import SCORERS, make_scorer
from sae_workbench.sae.index_loop import index_sae
from sae_workbench.sae.index_request import IndexConfig, IndexRequest
from sae_workbench.sae.io import compute_sae_id, load_sae, save_sae
from sae_workbench.status import Status
from sae_workbench.store import ExplanationRecord, Store
from tests.sae.test_indexing import HOOK, TEXT, make_sae

CONTEXT = 32
INDEXED_WINDOWS = 20


@pytest.fixture()
def indexed(tiny_model, tmp_path: Path) -> tuple[Store, str, Path, Path]:
    """A store with a saved TopK SAE indexed over 20 windows of a small corpus: (store, SAE id, SAE folder, corpus)."""
    corpus_path = tmp_path / "corpus.txt"
    corpus_path.write_text(TEXT)
    sae_dir = save_sae(make_sae(), tmp_path / "sae")
    sae = load_sae(str(sae_dir))
    store = Store.open(tmp_path / "store.duckdb")
    cfg = IndexConfig(context_size=CONTEXT, batch_size=4)
    corpus = resolve_corpus(str(corpus_path))
    request = IndexRequest(tiny_model, sae, HOOK, corpus, CONTEXT * INDEXED_WINDOWS, cfg, model_name="tiny")
    index_sae(store, request)
    return store, compute_sae_id(sae, "tiny", HOOK), sae_dir, corpus_path


def _explanation(store: Store, sae_id: str) -> ExplanationRecord:
    """A stored explanation of the SAE's most active feature, quoting words the corpus has."""
    table = store.feature_table(sae_id).to_pylist()
    feature = int(max(table, key=lambda r: r["n_windows_active"])["feature"])
    record = ExplanationRecord(sae_id, feature, "manual", "manual-v1", "", "", {}, {}, [], [], '" fox"; " river"',
                               f"cosy-load-{feature}")  # fmt: skip
    return store.get_explanation(store.add_explanation(record))


def test_cosy_loads_what_the_cli_used_to_build_and_scores_the_same(tiny_model, indexed) -> None:
    store, sae_id, sae_dir, corpus_path = indexed
    expl = _explanation(store, sae_id)
    steps: list[str] = []
    inputs = ScorerInputs(store, sae_id, sae_dir, control_size=8, step=steps.append)
    loaded = make_scorer(ScoreConfig("cosy", seed=3), score_backends(None, inputs=inputs))
    assert isinstance(loaded, CosyScorer)
    # Each loading step without a bar of its own is announced (issue 19 item 4), in order.
    assert [s.split(" ")[:2] for s in steps] == [["loading", "model"], ["loading", "SAE"], ["reading", "8"]]
    # Control = 128-token windows (the default preset's cut) right after the 20 indexed 32-token ones, read here
    # straight from the corpus: the first starts at the first 127-token boundary after 20 x 31 indexed tokens.
    corpus = resolve_corpus(str(corpus_path))
    after = next(
        iter_windows(
            corpus, tiny_model.tokenizer, 128, start_window=-(-INDEXED_WINDOWS * 31 // 127), batch_size=8
        )
    )
    assert loaded.control_texts == list(after.texts)[:8]
    assert loaded.backend() == "corpus-rule-composer" and loaded.prompt_version() == ""
    assert loaded.key_params() == {"n_control": 8, "cosy": {"preset": "default", "words_per_text": None,
                                                           "max_tokens": 128}}  # fmt: skip
    # The same components built by hand from the model, the SAE file and the store's windows.
    sae = load_sae(str(sae_dir))
    means = ModelFeatureMeans(
        tiny_model, HOOK, sae.encode, default_bos_id(tiny_model.tokenizer), max_tokens=128
    )
    windows = store.get_windows(store.index_progress(sae_id).corpus, store.indexed_window_ids(sae_id))
    snippets = [CorpusSnippet(w.window_id, tuple(w.token_strings[1:])) for w in windows]
    by_hand = CosyScorer(CorpusRuleGenerator(snippets, seed=3), means.for_feature, list(after.texts)[:8])
    got, want = (asyncio.run(s.score(expl, None)) for s in (loaded, by_hand))
    assert got.status is want.status is Status.OK
    assert got.metrics == want.metrics and got.details == want.details
    assert all(isinstance(v, int | float) for v in got.metrics.values())  # the typed boundary: numbers only
    assert {"auc", "mad", "n_descriptions"} <= set(got.metrics) and got.details["descriptions"]

    result = run_scoring(store, sae_id, ScoreConfig("cosy", seed=3), score_backends(None, inputs=inputs),
                         progress=False)  # fmt: skip
    assert (result.scored, result.failed) == (1, 0)
    (stored,) = store.scores(explanation_id=expl.id, scorer="cosy")
    assert stored.metrics == {**got.metrics, **got.details}  # one JSON object, as before the split
    assert stored.provenance["n_control"] == 8


def test_control_texts_have_the_presets_length_and_none_is_a_typed_error(tiny_model, tmp_path: Path) -> None:
    # Before: control texts were the index's own windows (32 tokens here, <= 127 on the demo) whatever the preset's
    # cut (512 in the paper preset), and an exhausted corpus gave an empty control set silently.
    corpus_path = tmp_path / "corpus.txt"
    corpus_path.write_text(TEXT)
    corpus = resolve_corpus(str(corpus_path))
    tok = tiny_model.tokenizer
    for settings in (CosyConfig(n_control=3, max_tokens=64), replace(CosyConfig.paper(), n_control=1)):
        texts = read_control_texts(corpus, tok, 0, settings)
        assert len(texts) == settings.n_control
        assert all(
            len(tok(t, add_special_tokens=False)["input_ids"]) >= settings.max_tokens - 2 for t in texts
        )
    # After the first 31 tokens the first 64-token control window starts at text token 63, not inside the index.
    first = read_control_texts(corpus, tok, 31, CosyConfig(n_control=1, max_tokens=64))[0]
    second = next(iter_windows(corpus, tok, 64, start_window=1, batch_size=1)).texts[0]
    assert first == second
    with pytest.raises(CosyControlError, match="no CoSy control text"):
        read_control_texts(corpus, tok, 10**7, CosyConfig(n_control=3, max_tokens=64))


def test_cosy_refuses_bad_inputs_before_loading(indexed, tmp_path: Path) -> None:
    store, sae_id, sae_dir, _ = indexed
    with pytest.raises(ScoreConfigError, match="pass --sae-path"):
        CosyScorer.check_inputs(ScorerInputs())
    with pytest.raises(ScoreConfigError, match="unknown CoSy preset 'fast'"):
        CosyScorer.check_inputs(ScorerInputs(sae_path=sae_dir, preset="fast"))
    with pytest.raises(ScoreConfigError, match="at least 1"):
        CosyScorer.check_inputs(ScorerInputs(sae_path=sae_dir, control_size=0))
    other = save_sae(make_sae(seed=1), tmp_path / "other")
    backends = ScoreBackends(inputs=ScorerInputs(store, sae_id, other))
    with pytest.raises(ScoreConfigError, match="weights hash differently"):
        make_scorer(ScoreConfig("cosy"), backends)


def test_only_cosy_is_local_only_and_every_scorer_checks_its_preset() -> None:
    assert {name for name, cls in SCORERS.items() if cls.local_only} == {"cosy"}
    for cls in SCORERS.values():
        with pytest.raises(ScoreConfigError, match="preset 'fast'"):
            cls.check_inputs(ScorerInputs(sae_path=Path("x"), preset="fast"))
        cls.check_inputs(
            ScorerInputs(sae_path=Path("x"), preset="paper")
        )  # accepted, as `workbench score` did


def test_cli_refuses_cosy_on_ray_first(tmp_path: Path) -> None:
    """`workbench score --scorer cosy --backend ray` names the real obstacle (CoSy is local only) at once, before
    asking for --sae-path, opening the store or starting Ray."""
    from typer.testing import CliRunner

    from sae_workbench import cli

    if not any(c.name == "score" for c in cli.app.registered_commands):
        cli._register_stage_commands()
    missing = tmp_path / "none.duckdb"
    out = CliRunner().invoke(
        cli.app, ["score", "--store", str(missing), "--sae", "x", "--scorer", "cosy", "--backend", "ray"]
    )
    assert out.exit_code != 0 and isinstance(out.exception, ScoreConfigError), out.output
    assert "use --backend local" in str(out.exception) and "--sae-path" not in str(out.exception)
    assert not missing.exists()
