"""The app's SAE-family views through AppTest on a real matched family (tests/evaluation/families/family_store.py):
the Families page (curves, splitting tree, stability table) and the feature page's "Across SAEs" section."""

from __future__ import annotations

from pathlib import Path

import pytest

from sae_workbench.app import queries
from tests.app.test_app_pages import markdown_text, run_page
from tests.evaluation.families.family_store import FamilyStore, build_matched_family


@pytest.fixture(scope="module")
def family(tmp_path_factory: pytest.TempPathFactory) -> FamilyStore:
    return build_matched_family(tmp_path_factory.mktemp("family_app"))


def test_families_page_shows_curves_tree_and_stability(family: FamilyStore, monkeypatch) -> None:
    queries.clear_caches()
    at = run_page("families", family.path, monkeypatch)
    # Shared fraction at 0.7: A ↔ B (a permuted copy) shares every counted feature.
    at07 = next(d.value for d in at.dataframe if "shared at 0.7" in d.value.columns).to_dict("records")
    row = [r for r in at07 if r["pair"].startswith(f"{family.a[:8]} (64) ↔ {family.b[:8]} (64)")]
    assert row and float(row[0]["shared at 0.7"]) == 1.0
    # The splitting tree of the first planted parent (the default root: the most-split feature, ties by id).
    parent = sorted(family.splits_ac)[0]
    text = markdown_text(at)
    assert f"d=64 · feature {parent}</b>" in text
    for child in family.splits_ac[parent]:
        assert f"d=74 · feature {child}</b>" in text
    for grandchild in family.splits_cd[family.splits_ac[parent][0]]:
        assert f"d=84 · feature {grandchild}</b>" in text
    stability = next(d.value for d in at.dataframe if "text similarity" in d.value.columns).to_dict("records")
    assert len(stability) == 12 and all(r["weight cos"] > 0.9 for r in stability)


def test_feature_page_across_saes(family: FamilyStore, monkeypatch) -> None:
    queries.clear_caches()
    at = run_page("feature", family.path, monkeypatch, sae=family.a, feature="0")
    assert any(s.value == "Across SAEs" for s in at.subheader)
    across = next(d.value for d in at.dataframe if "activation corr" in d.value.columns).to_dict("records")
    mine = [r for r in across if str(r["SAE"]).startswith(family.b[:8])]
    assert mine and all(r["feature"] == int(family.perm[0]) for r in mine)
    assert any(
        r["activation corr"] is not None and r["activation corr"] == r["activation corr"] for r in mine
    )


def test_families_page_empty_store_says_what_to_run(tmp_path: Path, monkeypatch) -> None:
    from sae_workbench.store import Store

    Store.open(tmp_path / "empty.duckdb")
    queries.clear_caches()
    at = run_page("families", tmp_path / "empty.duckdb", monkeypatch)
    assert any("workbench match" in i.value for i in at.info)
