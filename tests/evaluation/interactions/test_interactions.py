"""ProxySPEX interactions (issue 22; specs/attribution.md B.4): the planted game P1 against its known terms and the
exact Möbius transform, the parity negative control P2, the order-2 FBII and k-SII against their definitions computed
here over all 2^n coalitions, the constant game, the missing extra, the feature value functions on the tiny model
against the SAE's own encoding, and `workbench interactions` into the store, resumed.

Most tests shrink the LightGBM grid to one configuration of the reference grid (shapiq_adapter.REFERENCE_GRID,
the library default: 8 configurations x 5 folds, spec B.1.3) to stay fast; the reference grid runs in the slow test.
"""

from __future__ import annotations

import itertools
import math
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


# Order-2 indices from their definitions, by enumerating all 2^n coalitions (independent of shapiq):
# - FBII (Tsai, Yeh & Ravikumar 2023, "Faith-Shap", Banzhaf case): the coefficients E(S), |S| <= k, of the least-squares
#   fit of v(T) by sum_{S subset T, |S| <= k} E(S) with every coalition weighted equally (p = 1/2); no constraint.
# - SII (Grabisch & Roubens 1999): SII(S) = sum_{T subset N\S} (n-|T|-|S|)! |T|! / (n-|S|+1)! * Delta_S v(T), where
#   Delta_S v(T) = sum_{L subset S} (-1)^(|S|-|L|) v(T u L).
# - k-SII (Bordt & von Luxburg 2023): k-SII(S) = sum_{j=0}^{k-|S|} B_j sum_{T superset S, |T|=|S|+j} SII(T), with
#   Bernoulli numbers B_0 = 1, B_1 = -1/2. At k = 2: pairs are their SII, a singleton is SII(i) - 1/2 sum_j SII(i, j).


def _subsets(players, max_size: int | None = None):
    """Every subset of `players` (as a frozenset), smallest first."""
    players = sorted(players)
    top = len(players) if max_size is None else max_size
    for size in range(top + 1):
        yield from (frozenset(c) for c in itertools.combinations(players, size))


def _all_values(game, n: int) -> dict[frozenset[int], float]:
    """v(T) for every coalition T of n players."""
    masks = np.array([[(c >> i) & 1 for i in range(n)] for c in range(2**n)], dtype=bool)
    return {frozenset(np.flatnonzero(m).tolist()): float(y) for m, y in zip(masks, game(masks), strict=True)}


def _fbii(v: dict[frozenset[int], float], n: int, order: int = 2) -> dict[tuple[int, ...], float]:
    """FBII up to `order`: the uniformly weighted least-squares fit over all coalitions."""
    basis = list(_subsets(range(n), order))
    coalitions = list(v)
    A = np.array([[float(S <= T) for S in basis] for T in coalitions])
    coef = np.linalg.lstsq(A, np.array([v[T] for T in coalitions]), rcond=None)[0]
    return {tuple(sorted(S)): float(c) for S, c in zip(basis, coef, strict=True)}


def _sii(v: dict[frozenset[int], float], n: int, S: frozenset[int]) -> float:
    """The Shapley interaction index of S by its definition."""
    s, total = len(S), 0.0
    for T in _subsets(set(range(n)) - S):
        weight = math.factorial(n - len(T) - s) * math.factorial(len(T)) / math.factorial(n - s + 1)
        total += weight * sum((-1) ** (s - len(L)) * v[T | L] for L in _subsets(S))
    return total


def _ksii2(v: dict[frozenset[int], float], n: int) -> dict[tuple[int, ...], float]:
    """k-SII at k = 2 for every singleton and pair."""
    pairs = {(i, j): _sii(v, n, frozenset((i, j))) for i, j in itertools.combinations(range(n), 2)}
    singles = {
        (i,): _sii(v, n, frozenset((i,))) - 0.5 * sum(x for p, x in pairs.items() if i in p) for i in range(n)
    }
    return singles | pairs


def _exact_order2(index: str, v: dict[frozenset[int], float], n: int) -> dict[tuple[int, ...], float]:
    """The exact index at order 2 (singletons and pairs) by the definitions above."""
    values = _fbii(v, n) if index == "FBII" else _ksii2(v, n)
    return {k: x for k, x in values.items() if 1 <= len(k) <= 2}


def _game(terms: dict[tuple[int, ...], float]):
    """sum_S c_S prod_{i in S} x_i: a game whose Möbius transform is `terms`."""

    def f(X: np.ndarray) -> np.ndarray:
        return sum(c * X[:, list(S)].all(axis=1) for S, c in terms.items()) + np.zeros(len(X))

    return f


# The game plus a 4-way term: pairs inside a 3-way term get m/2 under both indices, inside a 4-way term m/4
# (FBII) and m/3 (k-SII), so (4, 6) is 0.8 vs 0.9 and a swapped index fails.
MIXED = {(1, 2): 2.0, (3,): 1.5, (4, 5, 6): 1.0, (0, 4, 6, 7): 1.2}


@pytest.mark.parametrize("index", ["FBII", "k-SII"])
def test_moebius_conversion_matches_the_index_definitions(index):
    n = 8
    v = _all_values(_game(MIXED), n)
    exact = _exact_order2(index, v, n)
    moebius = {  # Möbius inversion m(S) = sum_{T subset S} (-1)^(|S|-|T|) v(T), over all 256 coalitions
        tuple(sorted(S)): sum((-1) ** (len(S) - len(T)) * v[T] for T in _subsets(S)) for S in v
    }
    assert {k: round(x, 9) for k, x in moebius.items() if abs(x) > 1e-9} == MIXED
    got = shapiq_adapter.convert(moebius, n, index, 2)
    for players in exact:
        assert got.get(players, 0.0) == pytest.approx(exact[players], abs=1e-9), players
    assert not [k for k, x in got.items() if len(k) > 2 and abs(x) > 1e-9]
    # the reference itself: the two indices differ here, and k-SII is efficient (sums to v(N) - v(empty))
    assert _exact_order2("FBII", v, n)[(4, 6)] == pytest.approx(0.8)
    assert _exact_order2("k-SII", v, n)[(4, 6)] == pytest.approx(0.9)
    if index == "k-SII":
        assert sum(exact.values()) == pytest.approx(v[frozenset(range(n))] - v[frozenset()])


DEPTH5 = {"max_depth": [5], "max_iter": [1000], "learning_rate": [0.1]}
"""One configuration of the reference grid deep enough for a 4-way term (a depth-d tree has Fourier order <= d)."""


@pytest.mark.parametrize("index", ["FBII", "k-SII"])
@pytest.mark.parametrize(
    ("n", "terms", "grid"),
    [
        # the game with the 3-way term at 3 (at 1 it is under 5% of the variance, below ProxySPEX's energy
        # cut); n = 8: budget_for caps at 2^8 = 256 masks, all coalitions, 32 with x4 x5 x6 = 1
        (8, {(1, 2): 2.0, (3,): 1.5, (4, 5, 6): 3.0}, QUICK),
        # a 4-way term, where FBII (m/4) and k-SII (m/3) pairs differ; n = 10 (1000 masks) because LightGBM leaves
        # need 20 samples (min_child_samples) and 256 masks hold only 16 with all four kept
        (10, {(3, 4, 5, 6): 3.0, (1,): 0.5}, DEPTH5),
    ],
    ids=["3way-n8", "4way-n10"],
)
def test_reported_order2_values_match_the_exact_index(n, terms, grid, index):
    """`explain_game`'s order-2 table (ProxySPEX's Möbius model converted to FBII or k-SII) against the index computed
    from its definition on the planted game: every non-zero pair is reported, to 0.02, and nothing else is."""
    game = _game(terms)
    exact = {k: x for k, x in _exact_order2(index, _all_values(game, n), n).items() if len(k) == 2}
    result = explain_game(game, n, seed=0, index=index, grid=grid)
    assert result.index == index and result.budget == min(1000, 2**n)
    reported = {tuple(p["players"]): p["value"] for p in result.order2}
    nonzero = {k for k, x in exact.items() if abs(x) > 1e-9}
    assert nonzero <= set(reported)
    for players in nonzero | set(reported):
        assert reported.get(players, 0.0) == pytest.approx(exact[players], abs=0.02), players


def test_a_failing_value_function_raises_its_own_error():
    """An error inside the game reaches the caller as itself, not as 'the trees found no structure' (shapiq 1.4.1's
    _refine failure is an IndexError too)."""

    def broken(X: np.ndarray) -> np.ndarray:
        return X[:, 99].astype(float)  # IndexError: 6 players

    with pytest.raises(IndexError, match="99"):
        shapiq_adapter.proxyspex_moebius(broken, 6, 64, 0, QUICK)


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


@pytest.mark.parametrize("n", [2, 3])
def test_a_budget_covering_every_coalition_gives_the_exact_transform(n):
    """With 2 players (4 masks) ProxySPEX's 5-fold fit raised sklearn's ValueError (the demo's interactions stage on a
    2-token example); a budget of 2^n masks is the whole game, so its Möbius transform is computed, exactly."""
    terms = {(): 0.5, (0,): 1.5, (0, 1): 2.0} if n == 2 else {(1,): -1.0, (0, 2): 2.5, (0, 1, 2): 1.25}
    result = explain_game(
        _game(terms), n, 1000, seed=0
    )  # as the demo passes it: capped at the 2^n masks there are
    assert result.method == "exact" and result.budget == 2**n
    assert {k: round(v, 9) for k, v in result.moebius} == terms  # every non-zero term, v(empty) included
    assert result.r2["proxyspex"] == pytest.approx(1.0)
    big = explain_game(_game({(1, 2): 2.0, (3,): 1.5, (4, 5, 6): 3.0}), 12, 1000, seed=0, grid=QUICK)
    assert big.method == "proxyspex"
