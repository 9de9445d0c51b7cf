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
from dataclasses import replace
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from sae_workbench.app import hypotheses, live_model, queries
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
    # Absorption metrics by name and better direction, not raw SAEBench keys (issue 19, item 5).
    name = "Absorption fraction, mean over letters (↓ better)"
    absorption = [d.value for d in at.dataframe if name in d.value.columns]
    assert absorption and float(absorption[0].iloc[0][name]) == pytest.approx(0.12)
    assert float(absorption[0].iloc[0]["Split features per letter, mean (↓ better)"]) == pytest.approx(1.3)
    assert not any("mean_absorption" in str(c) for d in at.dataframe for c in d.value.columns)


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
    absorption = [d.value for d in at.dataframe if "First letter" in d.value.columns]
    assert absorption and list(absorption[0]["First letter"]) == ["g"]
    assert absorption[0].iloc[0]["Absorption fraction (↓ better)"] == pytest.approx(0.2)
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


def test_compare_names_the_llms_and_warns_about_a_tiny_one(
    sample: SampleStore, monkeypatch, tmp_path: Path
) -> None:
    """Issue 32 item 6: the app names each explainer's LLM and its size, and says a tiny model is a smoke test."""
    at = run_page("compare", sample.path, monkeypatch, sae=sample.sae_id)
    models = next(d.value for d in at.dataframe if "structured output" in d.value.columns)
    assert set(models["model"]) == {"fake"} and set(models["size"]) == {"not stated"}
    assert not at.warning  # "fake" states no size: no warning
    path = tmp_path / "store.duckdb"
    shutil.copy(sample.path, path)
    store = Store.open(path)
    (e,) = [x for x in store.explanations(sae_id=sample.sae_id) if x.explainer == "tree"][:1]
    store.add_explanation(
        replace(e, id=None, explainer="oneshot", llm_model="SmolLM2-135M-Instruct",
                llm_params={"structured_output": "json_object"}, config_key="smoke/oneshot")
    )  # fmt: skip
    del store
    queries.clear_caches()
    at = run_page("compare", path, monkeypatch, sae=sample.sae_id)
    models = next(d.value for d in at.dataframe if "structured output" in d.value.columns)
    row = models[models["model"] == "SmolLM2-135M-Instruct"].iloc[0]
    assert (row["size"], row["structured output"], row["explanations"]) == (
        "135M parameters",
        "json_object",
        1,
    )
    assert (
        len(at.warning) == 1
        and "SmolLM2-135M-Instruct: a model this small is a smoke test" in at.warning[0].value
    )


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
        from sae_workbench.store.rows import ExplanationRecord
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


def test_dead_feature_says_dead_over_how_many_tokens(sample: SampleStore, monkeypatch) -> None:
    """Issue 19 item 5: a never-firing feature is called dead with the token count, not an empty headline `“”` and
    a note to fill statistics that exist."""
    at = run_page("feature", sample.path, monkeypatch, sae=sample.sae_id, feature=str(sample.dead_feature))
    store = Store.open(sample.path, read_only=True)
    progress = store.index_progress(sample.sae_id)
    assert progress is not None
    stored = store.explanations(sample.sae_id, sample.dead_feature)
    assert [e.status.value for e in stored] == ["dead"] and stored[0].text == ""
    warning = at.warning[0].value
    assert (
        "Dead feature" in warning and f"never fired over the {progress.n_tokens:,} indexed tokens" in warning
    )
    md = markdown_text(at)
    assert "“”" not in md and "(none: dead feature" in md
    captions = " ".join(c.value for c in at.caption)
    assert "No activation statistics" not in captions and "never fired over" in captions


def _copy(sample: SampleStore, tmp_path: Path) -> Path:
    path = tmp_path / "store.duckdb"
    shutil.copyfile(sample.path, path)
    return path


def test_hypothesis_form_stores_a_manual_explanation(
    sample: SampleStore, tmp_path: Path, monkeypatch
) -> None:
    """Issue 19 item 3 from the feature page: stored as explainer `manual` with source "app", shown after storing,
    idempotent, and a bad rule is refused with its reason and nothing stored."""
    path = _copy(sample, tmp_path)
    feature = sample.plain_feature
    at = run_page("feature", path, monkeypatch, sae=sample.sae_id, feature=str(feature))
    at.text_area(key="hypothesis_rules").set_value('"God" | 9')
    at.button[[b.label for b in at.button].index("Store hypothesis")].click().run()
    assert "strength" in at.error[0].value and "HypothesisError" in at.error[0].value
    assert Store.open(path, read_only=True).explanations(sample.sae_id, feature, explainer="manual") == []
    at.text_area(key="hypothesis_text").set_value("the word God")
    at.text_area(key="hypothesis_rules").set_value('"God" | 4\n"Lord"')
    at.text_input(key="hypothesis_author").set_value("ada")
    at.button[[b.label for b in at.button].index("Store hypothesis")].click().run()
    assert not at.exception and not at.error
    assert "Stored as explanation" in at.success[0].value
    rows = Store.open(path, read_only=True).explanations(sample.sae_id, feature, explainer="manual")
    assert len(rows) == 1
    e = rows[0]
    assert e.text == "the word God" and e.rules == [{"activates_on": '"God"', "strength": 4},
                                                     {"activates_on": '"Lord"', "strength": 5}]  # fmt: skip
    assert e.extra["provenance"]["source"] == "app" and e.extra["provenance"]["author"] == "ada"
    assert "the word God" in markdown_text(at)  # the page shows it as the headline now
    at.button[[b.label for b in at.button].index("Store hypothesis")].click().run()
    assert "Already stored" in at.success[0].value
    assert len(Store.open(path, read_only=True).explanations(sample.sae_id, feature, explainer="manual")) == 1


def test_read_only_app_offers_no_hypothesis_form(sample: SampleStore, monkeypatch) -> None:
    monkeypatch.setenv("WORKBENCH_APP_READ_ONLY", "1")
    at = run_page(
        "feature", sample.path, monkeypatch, sae=sample.sae_id, feature=str(sample.explained_feature)
    )
    assert any("read-only" in i.value and "workbench hypothesis" in i.value for i in at.info)
    assert "Store hypothesis" not in [b.label for b in at.button]
    with pytest.raises(hypotheses.ReadOnlyAppError):
        hypotheses.submit_hypothesis(str(sample.path), sample.sae_id, 0, "x", "", "")


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("localhost", True), ("::1", True), ("127.0.0.5", True), ("0.0.0.0", False),
     ("192.168.1.4", False), ("::", False), ("example.org", False), (None, False), ("", False)],
)  # fmt: skip
def test_loopback_addresses(host: str | None, loopback: bool) -> None:
    from sae_workbench.app.settings import is_loopback

    assert is_loopback(host) is loopback


@pytest.fixture()
def bind_address():
    from streamlit import config

    before = config.get_option("server.address")

    def set_to(host: str | None) -> None:
        config.set_option("server.address", host)

    yield set_to
    config.set_option("server.address", before)


def test_network_served_playground_loads_only_registered_saes(
    sample: SampleStore, tmp_path: Path, monkeypatch, bind_address
) -> None:
    """Issue 19 item 7: bound beyond loopback, the SAE field is fixed to the registered files and any other path or
    registry id is refused before anything loads; on loopback the field stays editable."""
    record = Store.open(sample.path, read_only=True).get_sae(sample.sae_id)
    bind_address("0.0.0.0")
    at = run_page("playground", sample.path, monkeypatch, sae=sample.sae_id)
    field = at.text_input(key="playground_sae_path")
    assert field.disabled and field.value == str(sample.sae_dir)
    assert any("loads only SAEs registered in the store" in c.value for c in at.caption)
    for other in (str(tmp_path), "gpt2-small-res-jb/blocks.0.hook_resid_pre"):
        with pytest.raises(live_model.UnregisteredSAEError, match="registered in the store"):
            live_model.run_playground(record, other, "God said", None)
    bind_address("127.0.0.1")
    at = run_page("playground", sample.path, monkeypatch, sae=sample.sae_id)
    assert not at.text_input(key="playground_sae_path").disabled
    assert not any("loads only SAEs registered" in c.value for c in at.caption)
