"""The family job on a real store: four indexed SAEs with planted structure (tests/evaluation/families/family_store.py),
matched, split, agreement and stability computed, through the job functions and `workbench match`."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from sae_workbench.evaluation.families.agreement import QUOTED_THRESHOLD
from sae_workbench.evaluation.families.job import (
    FamilyConfig,
    chain_runs_for,
    dead_mask,
    family_tree,
    load_member,
    match_family,
    run_agreement,
    stored_matching,
)
from sae_workbench.evaluation.families.stability import (
    TRANSFER_EXPLAINER,
    explanation_pairs,
    record_stability,
    stability_table,
)
from sae_workbench.store import ScoreRecord, Store
from tests.evaluation.families.family_store import EXPLAINED, FamilyStore, build_family_store


@pytest.fixture(scope="module")
def family(tmp_path_factory: pytest.TempPathFactory) -> FamilyStore:
    return build_family_store(tmp_path_factory.mktemp("family"))


def _report(store: Store, fam: FamilyStore, methods: tuple[str, ...]):
    members = [load_member(store, s) for s in (fam.a, fam.b, fam.c, fam.d)]
    return match_family(store, members, FamilyConfig(methods=methods), progress=False)


def test_family_matching_splitting_and_resume(family: FamilyStore) -> None:
    store = Store.open(family.path)
    report = _report(store, family, ("hungarian", "greedy", "sinkhorn"))
    runs = {(s.run.sae_a, s.run.sae_b, s.run.method): s for s in report.runs}
    assert len(report.runs) == 6 * 3 and all(s.computed for s in report.runs)
    for method in ("hungarian", "greedy", "sinkhorn"):
        ab = runs[(family.a, family.b, method)]
        m = stored_matching(store, ab.run)
        assert np.array_equal(m.feature_b, family.perm), method  # the planted permutation, exactly
        assert (
            ab.curve.at(0.9) == 1.0 and ab.curve.n_counted + ab.curve.n_dead + ab.curve.n_partner_dead == 64
        )
    dead = dead_mask(store, family.a)
    assert dead is not None and ab.curve.n_dead == int(dead.sum())
    # Splits between consecutive widths: exactly the planted parents (coverage from the indexed activations).
    by_narrow = {store.match_run(k).sae_b: v for k, v in report.splits.items()}  # type: ignore[union-attr]
    assert [s.parent for s in by_narrow[family.a]] == sorted(family.splits_ac)
    assert [s.parent for s in by_narrow[family.c]] == sorted(family.splits_cd)
    for s in by_narrow[family.a]:
        assert sorted(s.children) == sorted(family.splits_ac[s.parent])
        assert s.coverage is None or s.coverage >= 0.5
    # A rerun computes nothing and stores nothing twice.
    again = _report(store, family, ("hungarian", "greedy", "sinkhorn"))
    assert not any(s.computed for s in again.runs)
    assert (
        store.query("SELECT count(*) AS n FROM match_runs").column("n")[0].as_py() == 18 + 0
    )  # chain links reuse greedy


def test_agreement_tree_stability_and_export(family: FamilyStore, tmp_path: Path) -> None:
    store = Store.open(family.path)
    report = _report(store, family, ("hungarian", "greedy"))
    ab = next(
        s.run
        for s in report.runs
        if (s.run.sae_a, s.run.sae_b, s.run.method) == (family.a, family.b, "hungarian")
    )
    assert run_agreement(store, ab, progress=False) == 64
    assert run_agreement(store, ab, progress=False) == 0  # resumed: every chunk stored
    g = store.agreement(ab.match_key).to_pydict()
    dead = dead_mask(store, family.a)
    assert dead is not None
    live = [i for i, f in enumerate(g["feature_a"]) if not dead[f]]
    # B is A plus 2% noise: nearly the same activations (TopK's k-th place can flip on a rare feature's few tokens).
    corr = np.array([g["act_corr"][i] for i in live])
    assert np.median(corr) > 0.95 and corr.min() > 0.5
    assert np.median([g["top_jaccard"][i] for i in live]) > 0.8
    # The feature page's view of one pair, from either side.
    fa = g["feature_a"][live[0]]
    seen = [
        m for m in store.matches_of_feature(family.b, int(family.perm[fa])) if m.match_key == ab.match_key
    ]
    assert seen and seen[0].other_feature == fa and seen[0].act_corr == pytest.approx(g["act_corr"][live[0]])

    # Splitting tree over three widths (A 64 -> C 74 -> D 84): the planted two levels under A's first parent.
    parent = sorted(family.splits_ac)[0]
    tree = family_tree(store, chain_runs_for(store, [family.a, family.c, family.d]), parent, QUOTED_THRESHOLD)
    assert sorted(c.feature for c in tree.children) == sorted(family.splits_ac[parent])
    first_child = family.splits_ac[parent][0]
    grand = next(c for c in tree.children if c.feature == first_child)
    assert sorted(x.feature for x in grand.children) == sorted(family.splits_cd[first_child])
    assert tree.info["sae_id"] == family.a and "explanation" in tree.info

    # Explanation stability: the explained pairs, their texts' similarity, and A's text stored on B as "transfer".
    pairs = explanation_pairs(store, ab, "lexical")
    assert len(pairs) == EXPLAINED and all(family.perm[p.feature_a] == p.feature_b for p in pairs)
    assert record_stability(store, ab, pairs) == EXPLAINED
    assert record_stability(store, ab, pairs) == 0
    rows = stability_table(store, ab)
    assert len(rows) == EXPLAINED and all(r.scorer == "" for r in rows)
    moved = store.explanations(sae_id=family.b, explainer=TRANSFER_EXPLAINER)
    assert len(moved) == EXPLAINED and moved[0].extra["source_sae"] == family.a
    # A score of B's own explanation and one of the transfer land side by side.
    stab = store.stability(ab.match_key).to_pylist()[0]
    for eid, value in ((stab["explanation_b"], 0.8), (stab["transfer_explanation"], 0.6)):
        store.add_score(
            ScoreRecord(int(eid), "detection", "1", "RANDOM", {"balanced_accuracy": value, "f1": value})
        )
    row = next(r for r in stability_table(store, ab) if r.feature_a == stab["feature_a"] and r.scorer)
    assert (row.scorer, row.own_score, row.transfer_score) == ("detection", 0.8, 0.6)

    files = store.export_families_parquet(tmp_path / "pq")
    assert (
        pq.read_table(files[1]).num_rows
        == store.query("SELECT count(*) AS n FROM feature_matches").column("n")[0].as_py()
    )
    assert set(pq.read_table(files[1]).column_names) >= {
        "sae_a",
        "sae_b",
        "method",
        "similarity",
        "threshold",
        "sim",
    }


def test_workbench_match_cli(family: FamilyStore, tmp_path: Path) -> None:
    from sae_workbench.cli import _register_stage_commands, app

    _register_stage_commands()
    args = ["match", "--store", str(family.path), "--sae", str(family.folders[family.a]), "--sae", family.b,
            "--method", "hungarian,greedy", "--agreement", "--export", str(tmp_path / "pq"), "--no-progress"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert f"{family.a:16s} {family.b:16s} hungarian" in result.output and "1.000" in result.output
    assert (tmp_path / "pq" / "feature_matches.parquet").exists()
    # B is A plus 2% noise: almost no pair is flagged as similar weights with different activations (seen: 1 of 64,
    # a feature firing on a handful of tokens where TopK's k-th place flipped, so one side stayed silent).
    flagged = re.search(r"(\d+) of 64 pairs at cosine >= 0.7 flagged", result.output)
    assert flagged is not None and int(flagged.group(1)) <= 2, result.output
    bad = CliRunner().invoke(app, ["match", "--store", str(family.path), "--sae", family.a, "--sae", "nope"])
    assert bad.exit_code != 0 and "neither an SAE id" in str(bad.exception)
