"""Every page of the app through streamlit's AppTest, against a small real store (tests/conftest.py
`app_sample_store`): content, escaping, bad input (empty store, no explanations, out-of-range feature, locked
store) and a real writer process committing while the pages are served."""

import html
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from sae_workbench.app import queries
from sae_workbench.store import Store
from tests.app.sample_store import SampleStore

MAIN = str(Path(__file__).resolve().parents[2] / "app" / "main.py")


def run_page(page: str, store: Path, monkeypatch: pytest.MonkeyPatch, **params: str) -> AppTest:
    """Run one page against `store` with query parameters; fail on any uncaught exception."""
    monkeypatch.setenv("WORKBENCH_STORE", str(store))
    at = AppTest.from_file(MAIN, default_timeout=120)
    for k, v in params.items():
        at.query_params[k] = v
    at.switch_page(f"page_scripts/{page}.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def markdown_text(at: AppTest) -> str:
    """All markdown element bodies of a run, joined."""
    return "\n".join(m.value for m in at.markdown)


@pytest.fixture()
def sample(app_sample_store: SampleStore) -> SampleStore:
    queries.clear_caches()
    return app_sample_store


def test_overview_lists_sae_metrics_dead_dense_and_absorption(sample: SampleStore, monkeypatch) -> None:
    at = run_page("overview", sample.path, monkeypatch)
    table = at.dataframe[0].value
    assert list(table["sae_id"]) == [sample.sae_id]
    active = Store.open(sample.path, read_only=True).feature_table(sample.sae_id).num_rows
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Dead (↓)"] == f"{sample.d_sae - active:,}"
    assert metrics["Explained variance (↑)"] == "0.420"
    absorption = [d.value for d in at.dataframe if "mean.mean_absorption_fraction_score" in d.value.columns]
    assert absorption and float(
        absorption[0].iloc[0]["mean.mean_absorption_fraction_score"]
    ) == pytest.approx(0.12)


def test_feature_page_shows_the_full_dashboard(sample: SampleStore, monkeypatch) -> None:
    at = run_page(
        "feature", sample.path, monkeypatch, sae=sample.sae_id, feature=str(sample.explained_feature)
    )
    assert at.title[0].value == f"Feature {sample.explained_feature}"
    md = markdown_text(at)
    assert md.count('class="wb-tok') > 50 and "background-color:rgba(255,128,0," in md
    for text in ("the word God at the start of a clause", "words about God creating light and the earth"):
        assert text in md
    assert "Cluster 0" in md and "creation narrative" in md and "Python code &lt;b&gt;tags&lt;/b&gt;" in md
    assert "★" in md  # the tree explainer's best node
    assert "RANDOM_NEGATIVE" in md and "SIMILAR_NEGATIVE" in md
    scores = [d.value for d in at.dataframe if "scorer" in d.value.columns]
    assert len(scores) == 3 and set(scores[0]["negatives"]) == {"RANDOM_NEGATIVE", "SIMILAR_NEGATIVE", "–"}
    absorption = [d.value for d in at.dataframe if "first_letter" in d.value.columns]
    assert absorption and list(absorption[0]["first_letter"]) == ["g"]
    assert [t.label for t in at.tabs][:2] == ["Top examples", "Quantile examples"]


def test_corpus_html_renders_as_text(sample: SampleStore, monkeypatch) -> None:
    at = run_page("feature", sample.path, monkeypatch, sae=sample.sae_id, feature=str(sample.xss_feature))
    at.toggle[0].set_value(True).run()  # whole windows
    md = markdown_text(at)
    assert f"window {sample.xss_window} " in md
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in md  # the explanation
    # The window's tokens, with our own tags stripped, read back as the corpus's literal HTML.
    shown = html.unescape(
        re.sub(r"<[^>]+>", "", md.split(f"window {sample.xss_window} ")[1].split("window ")[0])
    )
    assert "<script>" in shown or "<img src=x onerror" in shown
    lowered = md.lower()
    assert (
        "<script" not in lowered
        and "<img" not in lowered
        and "onerror=" not in lowered.replace("onerror=&", "")
    )


def test_feature_out_of_range_and_not_explained(sample: SampleStore, monkeypatch) -> None:
    at = run_page("feature", sample.path, monkeypatch, sae=sample.sae_id, feature=str(sample.d_sae + 5))
    assert "out of range" in at.error[0].value and f"0…{sample.d_sae - 1}" in at.error[0].value
    other = next(f for f in range(sample.d_sae) if f not in (sample.explained_feature, sample.xss_feature))
    at = run_page("feature", sample.path, monkeypatch, sae=sample.sae_id, feature=str(other))
    assert any("workbench explain" in c.value for c in at.caption)


def test_empty_and_missing_store_name_the_command(tmp_path: Path, monkeypatch) -> None:
    missing = tmp_path / "nothing.duckdb"
    for page in ("overview", "feature", "search", "compare", "playground"):
        at = run_page(page, missing, monkeypatch)
        assert "Empty store" in at.info[0].value and "workbench index" in at.info[0].value
    empty = tmp_path / "empty.duckdb"
    Store.open(empty)
    at = run_page("overview", empty, monkeypatch)
    assert "no SAEs yet" in at.info[0].value and "workbench train" in at.info[0].value


def test_sae_without_activations_or_explanations(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "only_sae.duckdb"
    Store.open(path).register_sae("abc123", "tiny:0", "blocks.1.hook_resid_post", 64, 32, {})
    at = run_page("feature", path, monkeypatch, feature="3")
    assert "Not indexed yet" in at.info[0].value and "workbench index" in at.info[0].value
    at = run_page("compare", path, monkeypatch)
    assert "No scores" in at.info[0].value and "workbench score" in at.info[0].value
    at = run_page("overview", path, monkeypatch)
    assert any("workbench index" in c.value for c in at.caption)


def test_search_by_explanation_token_and_id(sample: SampleStore, monkeypatch) -> None:
    at = run_page("search", sample.path, monkeypatch, sae=sample.sae_id)
    at.text_input(key="explanation_query").set_value("God making light and the earth").run()
    assert not at.exception
    links = [p.proto.label for p in at.get("page_link")]
    assert links[0] == f"feature {sample.explained_feature}"
    at.text_input(key="token_query").set_value("God").run()
    hits = [d.value for d in at.dataframe if "fires on" in d.value.columns]
    assert len(hits) == 1 and len(hits[0]) > 0
    assert bool((hits[0]["n"] > 0).all())
    assert any("occurrences of 'God'" in c.value for c in at.caption)
    at.number_input(key="feature_id_query").set_value(7).run()
    assert "Open feature 7" in [p.proto.label for p in at.get("page_link")]


def test_compare_table_and_verdict_flips(sample: SampleStore, monkeypatch) -> None:
    at = run_page("compare", sample.path, monkeypatch, sae=sample.sae_id)
    matrix = at.dataframe[0].value
    assert set(matrix["explainer"]) == {"lexical", "prism", "tree"}
    col = "detection · RANDOM_NEGATIVE · balanced_accuracy"
    assert dict(zip(matrix["explainer"], matrix[col], strict=True))["tree"] == pytest.approx(0.9)
    flips = at.dataframe[1].value  # threshold 0.7: 0.8→0.55, 0.75→0.5, 0.9→0.65 all flip
    assert sorted(flips["explainer"]) == ["lexical", "prism", "tree"]
    at.slider[0].set_value(0.6).run()  # now only lexical (0.55) and prism (0.5) drop below
    assert sorted(at.dataframe[1].value["explainer"]) == ["lexical", "prism"]


def test_playground_encodes_typed_text(sample: SampleStore, monkeypatch) -> None:
    at = run_page("playground", sample.path, monkeypatch, sae=sample.sae_id)
    assert at.text_input(key="playground_sae_path").value == str(sample.sae_dir)
    at.text_area(key="playground_text").set_value("God said <b>hi</b>").run()
    at.button(key="playground_run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    md = markdown_text(at)
    assert "wb-tok" in md and "<b>" not in md
    tokens_block = md[md.index('<div class="wb-tokens">') :].split("</div>")[0]
    assert html.unescape(re.sub(r"<[^>]+>", "", tokens_block)).endswith("God said <b>hi</b>")
    per_token = at.dataframe[0].value
    assert len(per_token) >= 5 and per_token["features"].str.len().min() > 0


def _hold_lock_script(path: Path, seconds: float) -> str:
    return textwrap.dedent(
        f"""
        import time
        from sae_workbench.store import Store
        store = Store.open({str(path)!r})
        with store.session():
            print("locked", flush=True)
            time.sleep({seconds})
        """
    )


def test_locked_store_shows_retry(sample: SampleStore, tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "locked.duckdb"
    shutil.copyfile(sample.path, path)
    monkeypatch.setattr(queries, "BUSY_TIMEOUT_S", 0.5)
    writer = subprocess.Popen(
        [sys.executable, "-c", _hold_lock_script(path, 20)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "locked"
        at = run_page("overview", path, monkeypatch)
        assert "locked by a writer" in at.warning[0].value
        assert at.button(key="retry-list_saes").label == "Retry"
    finally:
        writer.kill()
        writer.wait()
    at.button(key="retry-list_saes").click().run()
    assert not at.warning and at.title[0].value == "Overview"


def _writer_script(path: Path, sae_id: str, feature: int, n: int) -> str:
    return textwrap.dedent(
        f"""
        import time
        from sae_workbench.store import Store
        from sae_workbench.store.records import ExplanationRecord
        store = Store.open({str(path)!r}, busy_timeout_s=60)
        for i in range({n}):
            store.add_explanation(ExplanationRecord(
                sae_id={sae_id!r}, feature={feature}, explainer="lexical", explainer_version="1",
                prompt_version="", llm_model="", llm_params={{}}, sampling={{}}, example_ids=[], negative_ids=[],
                text=f"concurrent explanation {{i}}", config_key=f"concurrent/{{i}}"))
            time.sleep(0.05)
        print("done", flush=True)
        """
    )


def test_pages_keep_working_while_a_writer_process_commits(
    sample: SampleStore, tmp_path: Path, monkeypatch
) -> None:
    path = tmp_path / "busy.duckdb"
    shutil.copyfile(sample.path, path)
    feature = sample.explained_feature
    before = len(Store.open(path, read_only=True).explanations(sample.sae_id, feature))
    n = 40
    writer = subprocess.Popen([sys.executable, "-c", _writer_script(path, sample.sae_id, feature, n)])
    renders = 0
    try:
        while writer.poll() is None:
            at = run_page("feature", path, monkeypatch, sae=sample.sae_id, feature=str(feature))
            assert at.title[0].value == f"Feature {feature}" and not at.warning and not at.error
            renders += 1
    finally:
        writer.wait(timeout=120)
    assert writer.returncode == 0 and renders >= 2
    time.sleep(0.1)
    at = run_page("feature", path, monkeypatch, sae=sample.sae_id, feature=str(feature))
    assert {m.label: m.value for m in at.metric}["Explanations"] == str(before + n)
