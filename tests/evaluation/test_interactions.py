"""ProxySPEX interactions (issue 22; specs/attribution.md B.4): the planted game P1 against its known terms and the
exact Möbius transform, the parity negative control P2, the constant game, the missing extra, the feature value
functions on the tiny model against the SAE's own encoding, and `workbench interactions` into the store, resumed.

Most tests shrink the LightGBM grid to one configuration of the reference grid (shapiq_adapter.REFERENCE_GRID,
the library default: 8 configurations x 5 folds, spec B.1.3) to stay fast; the reference grid runs in the slow test.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from sae_workbench import cli
from sae_workbench.evaluation.interactions import (
    ConstantGameError,
    MissingExtraError,
    budget_for,
    explain_game,
    feature_game,
    feature_interactions,
    shapiq_adapter,
)
from sae_workbench.evaluation.interactions.spex import moebius_predict, r_squared
from sae_workbench.models import load_model
from sae_workbench.sae.io import load_sae
from sae_workbench.store import Store
from tests.app.sample_store import MODEL, build_sample_store

QUICK = {"max_depth": [3], "max_iter": [1000], "learning_rate": [0.1]}
runner = CliRunner()


def planted(n: int = 24, noise: float = 0.01):
    """P1: 1 + sum w_i x_i (w ~ U(-0.3, 0.3), seed 0) + 2 x2 x5 + 1.5 x1 x7 x9 + N(0, noise^2)."""
    w = np.random.default_rng(0).uniform(-0.3, 0.3, n)
    rng = np.random.default_rng(1)

    def f(X: np.ndarray) -> np.ndarray:
        X = X.astype(float)
        y = 1 + X @ w + 2 * X[:, 2] * X[:, 5] + 1.5 * X[:, 1] * X[:, 7] * X[:, 9]
        return y + (rng.normal(0, noise, len(X)) if noise else 0.0)

    return f


def _check_p1(grid) -> None:
    result = explain_game(planted(), 24, 1000, seed=0, grid=grid)
    top5 = {tuple(t["players"]): t["value"] for t in result.top_terms[:5]}
    assert (2, 5) in top5 and (1, 7, 9) in top5
    assert top5[(2, 5)] == pytest.approx(2.0, abs=0.2)
    assert top5[(1, 7, 9)] == pytest.approx(1.5, abs=0.2)
    assert result.r2["proxyspex"] >= 0.95
    assert result.r2["banzhaf"] <= result.r2["proxyspex"] - 0.1
    assert not result.degenerate and result.evaluations == 1000 + 1000 + 2 + 1000
    # Each top term carries its players' singletons: x5's is its planted linear weight.
    w5 = np.random.default_rng(0).uniform(-0.3, 0.3, 24)[5]
    assert result.top_terms[0]["singletons"][1] == pytest.approx(w5, abs=0.05)


def test_p1_planted_terms_recovered_with_one_grid_config():
    _check_p1(QUICK)


@pytest.mark.slow
def test_p1_planted_terms_recovered_with_the_reference_grid():
    _check_p1(None)


def test_p1_at_n10_matches_the_exact_moebius_transform():
    f = planted(10, noise=0.0)
    exact = shapiq_adapter.exact_moebius(f, 10)
    found = shapiq_adapter.proxyspex_moebius(f, 10, 1000, 0, QUICK)
    # Every interaction (order >= 2) is the exact one: the planted terms to 0.01, the rest ~0.
    for players in set(exact) | set(found):
        if len(players) >= 2:
            assert found.get(players, 0.0) == pytest.approx(exact.get(players, 0.0), abs=0.01), players
    # The 95%-energy truncation drops the smallest singletons (|w| < 0.1) and the ridge refit absorbs them into the
    # kept ones and the constant, so the reconstruction, not each singleton, is what is exact.
    X = np.array([[(c >> i) & 1 for i in range(10)] for c in range(1024)], dtype=bool)
    assert r_squared(f(X), moebius_predict(found, X)) >= 0.95
    assert r_squared(f(X), moebius_predict(exact, X)) == pytest.approx(1.0)


@pytest.mark.parametrize("budget", [100, 1000])
def test_p2_parity_negative_control_has_low_r2(budget):
    """(-1)^(x2 + x5) has no lower-order part: no single split helps, so greedy trees find nothing (the paper's
    stated limitation, non-hierarchical interactions); the R^2 table shows it instead of a made-up interaction."""

    def parity(X: np.ndarray) -> np.ndarray:
        return (-1.0) ** (X[:, 2].astype(int) + X[:, 5].astype(int))

    result = explain_game(parity, 24, budget, seed=0, grid=QUICK)
    assert result.r2["proxyspex"] < 0.2 and result.r2["banzhaf"] < 0.2
    assert not [t for t in result.top_terms if tuple(t["players"]) == (2, 5) and abs(t["value"]) > 1.0]


def test_constant_game_is_a_clear_error():
    with pytest.raises(ConstantGameError, match="does not respond to masking"):
        explain_game(lambda X: np.zeros(len(X)), 24, 1000, seed=0, grid=QUICK)


def test_budget_rule():
    assert [budget_for(n) for n in (8, 24, 100, 400)] == [256, 1000, 1600, 5000]


def test_missing_extra_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "shapiq", None)  # what an environment without the extra imports
    with pytest.raises(MissingExtraError, match=r"pip install 'sae-workbench\[interactions\]'"):
        shapiq_adapter.require()


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory):
    """A private copy of the app's sample store (the CLI test writes to it)."""
    return build_sample_store(tmp_path_factory.mktemp("interactions_store"))


def _active_example(store: Store, sample):
    """(feature, tokens up to its top example's peak, activation there) of the first feature with an example."""
    corpus = store.index_progress(sample.sae_id).corpus  # type: ignore[union-attr]
    for f in range(sample.d_sae):
        ex = store.top_examples(sample.sae_id, f, 1)
        if ex and ex[0].max_position >= 4:
            window = store.get_windows(corpus, [ex[0].window_id])[0]
            return f, torch.as_tensor(window.tokens[: ex[0].max_position + 1]), ex[0].max_value
    raise AssertionError("no example")


@pytest.mark.parametrize("players", ["tokens", "heads", "upstream"])
def test_feature_games_keep_everything_equals_the_indexed_activation(sample, players):
    store = Store.open(sample.path, read_only=True)
    model, sae = load_model(MODEL), load_sae(str(sample.sae_dir))
    feature, tokens_N, stored = _active_example(store, sample)
    # upstream players: the same SAE read at the lower block-0 residual (same width; only its features matter)
    upstream = (load_sae(str(sample.sae_dir)), "blocks.0.hook_resid_post") if players == "upstream" else None
    game = feature_game(
        model, sae, "blocks.1.hook_resid_post", tokens_N, feature, players=players, upstream=upstream
    )
    values = game(np.array([np.ones(game.n, bool), np.zeros(game.n, bool)]))
    # All players kept = the clean forward = the activation the indexing stage stored for this peak.
    assert values[0] == pytest.approx(stored, rel=1e-3, abs=1e-4)
    if players == "tokens":
        assert game.n == len(tokens_N) - 2  # BOS and the target are not players
    if players == "heads":
        assert game.labels[0] == "L0.H0" and game.n == 2 * model.cfg.n_heads
    assert values[1] != pytest.approx(values[0])  # masking every player changes it


@pytest.mark.slow
def test_feature_interactions_on_the_tiny_model_reconstructs(sample):
    store = Store.open(sample.path, read_only=True)
    model, sae = load_model(MODEL), load_sae(str(sample.sae_dir))
    feature, tokens_N, _ = _active_example(store, sample)
    r = feature_interactions(
        model, sae, "blocks.1.hook_resid_post", tokens_N, feature, budget=300, grid=QUICK
    )
    assert set(r.r2) == {"proxyspex", "shapley", "banzhaf"} and r.meta["player_type"] == "tokens"
    assert r.labels and len(r.singletons) == r.n_players


@pytest.mark.slow
def test_cli_stores_interactions_and_a_rerun_skips(sample):
    args = [
        "interactions", "--store", str(sample.path), "--sae", sample.sae_id, "--sae-path", str(sample.sae_dir),
        "--features", "0-3", "--budget", "200", "--quick", "--no-progress",
    ]  # fmt: skip
    cli._register_stage_commands()
    first = runner.invoke(cli.app, args)
    assert first.exit_code == 0, first.output
    store = Store.open(sample.path, read_only=True)
    rows = [r for f in range(4) for r in store.interactions(sample.sae_id, f)]
    assert rows and {r.player_type for r in rows} == {"tokens"} and {r.budget for r in rows} == {200}
    ok = [r for r in rows if r.status == "ok"]
    assert ok and all(set(r.result["r2"]) == {"proxyspex", "shapley", "banzhaf"} for r in ok)
    assert f"{len(rows)} new results" in first.output
    again = runner.invoke(cli.app, args)
    assert again.exit_code == 0, again.output
    assert (
        f"0 new results (0 constant: the feature does not respond to masking), {len(rows)} already stored"
        in (again.output)
    )


def test_mask_embedding_auto_is_unk_if_the_tokenizer_has_one_else_the_mean(tiny_model):
    """SmolLM2's tokenizer has no unk of its own (its unk is <|endoftext|>, its document separator): `auto` masks with the mean
    embedding, `unk` with that token; a tokenizer with a dedicated unk token gets it under `auto` and `unk`; an unknown
    choice is refused."""
    from types import SimpleNamespace

    from sae_workbench.evaluation.interactions.games import mask_embedding

    W_E = tiny_model.W_E.detach()
    tok = tiny_model.tokenizer
    assert tok.unk_token_id == tok.convert_tokens_to_ids("<|endoftext|>")
    vec, name = mask_embedding(tiny_model, "auto")
    assert name == "mean embedding" and torch.equal(vec, W_E.mean(0))
    vec, name = mask_embedding(tiny_model, "unk")
    assert name == "unk '<|endoftext|>'" and torch.equal(vec, W_E[tok.unk_token_id])
    assert torch.equal(mask_embedding(tiny_model, "mean")[0], W_E.mean(0))
    with_unk = SimpleNamespace(
        W_E=tiny_model.W_E,
        tokenizer=SimpleNamespace(
            unk_token_id=7, eos_token_id=0, bos_token_id=1, pad_token_id=None, decode=lambda ids: "<unk>"
        ),
    )
    for mask in ("auto", "unk"):
        vec, name = mask_embedding(with_unk, mask)  # type: ignore[arg-type]
        assert name == "unk '<unk>'" and torch.equal(vec, W_E[7])
    with pytest.raises(ValueError, match="unknown mask"):
        mask_embedding(tiny_model, "eos")


@pytest.mark.slow
@pytest.mark.parametrize("players", ["heads", "upstream"])
def test_cli_head_and_upstream_players(sample, players):
    """`workbench interactions --players heads|upstream` stores results of that player type whose players are the
    model's heads below the SAE / the upstream SAE's active features (labels say which)."""
    args = [
        "interactions", "--store", str(sample.path), "--sae", sample.sae_id, "--sae-path", str(sample.sae_dir),
        "--features", "0-1", "--budget", "200", "--quick", "--no-progress", "--players", players,
    ]  # fmt: skip
    if players == "upstream":
        args += ["--upstream-sae", str(sample.sae_dir), "--upstream-hook", "blocks.0.hook_resid_post"]
    cli._register_stage_commands()
    out = runner.invoke(cli.app, args)
    assert out.exit_code == 0, out.output
    store = Store.open(sample.path, read_only=True)
    rows = [r for f in range(2) for r in store.interactions(sample.sae_id, f) if r.player_type == players]
    assert rows and f"{len(rows)} new results" in out.output
    ok = [r for r in rows if r.status == "ok"]
    assert ok
    model = load_model(MODEL)
    for r in ok:
        labels = r.result["labels"]
        if players == "heads":
            assert (
                len(labels) == 2 * model.cfg.n_heads
            )  # SAE at blocks.1.hook_resid_post: the heads of blocks 0-1
            assert {label.split(".")[0] for label in labels} == {"L0", "L1"}
        else:
            assert labels and all(label.startswith("F") or label[0].isdigit() for label in labels), labels
