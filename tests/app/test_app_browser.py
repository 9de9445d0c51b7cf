"""End to end in a real headless Chromium: `workbench app` serves a sample store; the Feature page shows shaded
tokens and explanations, HTML in the corpus stays text, and explanation search finds a feature. Issue 19: every page
has its own URL, a dead feature is called dead, the hypothesis form stores a `manual` explanation, and an app bound
beyond loopback fixes the Playground to registered SAEs (and `--read-only` hides the form), and the absorption tables
name each metric and its better direction."""

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.app.sample_store import PRISM_TRICKY_TEXT, SampleStore
from tests.evaluation.families.family_store import FamilyStore

pytestmark = [pytest.mark.browser, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"workbench app exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"{url} not healthy after {timeout_s}s")


@pytest.fixture(scope="module")
def sample(app_sample_store: SampleStore) -> SampleStore:
    return app_sample_store


@contextlib.contextmanager
def _serve(store: Path, *extra: str) -> Iterator[str]:
    """`workbench app` over `store` on a free port (extra CLI options appended); yields its loopback URL."""
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium not installed (make system-deps)")
    port = _free_port()
    workbench = Path(sys.executable).with_name("workbench")
    proc = subprocess.Popen(
        [str(workbench), "app", "--store", str(store), "--port", str(port), *extra],
        cwd=REPO,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def served_store(sample: SampleStore, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the sample store (the hypothesis form writes to it)."""
    path = tmp_path_factory.mktemp("served") / "store.duckdb"
    shutil.copyfile(sample.path, path)
    return path


@pytest.fixture(scope="module")
def server(served_store: Path) -> Iterator[str]:
    with _serve(served_store) as url:
        yield url


@pytest.fixture(scope="module")
def network_server(sample: SampleStore) -> Iterator[str]:
    with _serve(sample.path, "--host", "0.0.0.0", "--read-only") as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


def test_feature_page_shows_tokens_explanations_and_screenshot(
    server: str, browser, sample: SampleStore
) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 1500})
    page.goto(f"{server}/feature?sae={sample.sae_id}&feature={sample.explained_feature}")
    page.get_by_text(f"Feature {sample.explained_feature}", exact=True).wait_for(timeout=60_000)
    shaded = page.locator("span.wb-tok[style*='background-color']")
    shaded.first.wait_for(timeout=30_000)
    assert shaded.count() > 5
    title = shaded.first.get_attribute("title") or ""
    assert float(title.split(" ")[0]) > 0  # the activation value is on hover
    # The newest explanation is the headline; every explanation is listed in its tab.
    assert page.get_by_text("the word God at the start of a clause").first.is_visible()
    page.get_by_role("tab", name="Explanations & scores").click()
    page.get_by_text("words about God creating light and the earth").first.wait_for(timeout=10_000)
    page.get_by_role("tab", name="Top examples").click()
    artifacts = REPO / "artifacts"
    artifacts.mkdir(exist_ok=True)
    page.screenshot(path=str(artifacts / "app-feature.png"), full_page=False)
    if os.environ.get("WORKBENCH_UPDATE_DOCS") == "1":  # refresh the README's screenshot only when asked to
        shutil.copyfile(artifacts / "app-feature.png", REPO / "docs" / "app-feature.png")
    page.close()


def test_html_in_corpus_renders_as_text(server: str, browser, sample: SampleStore) -> None:
    page = browser.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(f"{server}/feature?sae={sample.sae_id}&feature={sample.xss_feature}&")
    # The page renders progressively (the logit-lens token list comes first): wait for the corpus window itself.
    page.locator("div.wb-tokens", has_text=re.compile(r"script|img")).first.wait_for(timeout=120_000)
    # The headline explanation and the corpus window both contain tags; both must show as text.
    assert page.get_by_text("HTML tags like <script>alert(1)</script>").first.is_visible()
    windows = " ".join(page.locator("div.wb-tokens").all_inner_texts())
    assert "<script>" in windows.replace(" <", "<") or "<img src=x" in windows.replace(" <", "<")
    assert page.locator("script", has_text="alert").count() == 0
    assert page.locator("img[src='x']").count() == 0
    assert dialogs == []
    page.close()


def test_prism_cluster_text_shows_exactly_as_the_corpus_holds_it(
    server: str, browser, sample: SampleStore
) -> None:
    """Issue 37 item 3: a cluster text with a blank line then indentation, `<`, `>`, `&` and quotes used to become a
    markdown code block showing `&#91;`, `&quot;` and a stray `</div>` literally."""
    page = browser.new_page(viewport={"width": 1400, "height": 1500})
    page.goto(f"{server}/feature?sae={sample.sae_id}&feature={sample.explained_feature}")
    page.get_by_text(f"Feature {sample.explained_feature}", exact=True).wait_for(timeout=60_000)
    page.get_by_role("tab", name="Explanations & scores").click()
    page.get_by_text("code with markup").first.wait_for(timeout=30_000)
    blocks = page.locator("div.wb-text")
    contents = blocks.evaluate_all("els => els.map(e => e.textContent)")
    assert PRISM_TRICKY_TEXT in contents, contents
    shown = blocks.nth(contents.index(PRISM_TRICKY_TEXT))
    assert shown.is_visible()
    assert (
        shown.inner_text() == PRISM_TRICKY_TEXT
    )  # pre-wrap: the blank line, tab and indentation are on screen
    assert shown.locator("*").count() == 0  # no element made from the text (no <pre>, <code>, <div>)
    body = page.locator("body").inner_text()
    assert "&#91;" not in body and "&quot;" not in body and "&amp;" not in body
    assert page.locator("pre code", has_text="print(").count() == 0
    page.close()


def test_search_by_explanation_finds_the_feature(server: str, browser, sample: SampleStore) -> None:
    page = browser.new_page()
    page.goto(f"{server}/search?sae={sample.sae_id}")
    box = page.get_by_label("Describe a feature")
    box.wait_for(timeout=60_000)
    box.fill("God making light and the earth")
    box.press("Enter")
    link = page.get_by_role("link", name=f"feature {sample.explained_feature}").first
    link.wait_for(timeout=120_000)
    page.screenshot(path=str(REPO / "artifacts" / "app-search.png"))
    link.click()
    page.get_by_text(f"Feature {sample.explained_feature}", exact=True).wait_for(timeout=60_000)
    page.close()


PAGE_TITLES = {"overview": "Overview", "feature": "Feature 0", "search": "Search", "playground": "Playground",
               "compare": "Compare explainers and scorers", "families": "SAE families"}  # fmt: skip


def test_every_page_has_its_own_url(server: str, browser, sample: SampleStore) -> None:
    page = browser.new_page()
    for slug, title in PAGE_TITLES.items():
        page.goto(f"{server}/{slug}?sae={sample.sae_id}&feature=0")
        page.get_by_role("heading", name=title).first.wait_for(timeout=60_000)
        assert "Page not found" not in page.locator("body").inner_text(), slug
    page.goto(server)  # the root forwards to the Overview's own address
    page.get_by_role("heading", name="Overview").first.wait_for(timeout=60_000)
    page.wait_for_url("**/overview**", timeout=30_000)
    page.close()


def test_dead_feature_is_called_dead(server: str, browser, sample: SampleStore) -> None:
    page = browser.new_page()
    page.goto(f"{server}/feature?sae={sample.sae_id}&feature={sample.dead_feature}")
    page.get_by_text("Dead feature.").first.wait_for(timeout=60_000)
    body = page.locator("body").inner_text()
    assert "indexed tokens of corpus" in body and "“”" not in body
    assert "No activation statistics in the store yet" not in body
    page.close()


def test_hypothesis_form_stores_a_manual_explanation(
    server: str, browser, sample: SampleStore, served_store: Path
) -> None:
    from sae_workbench.store import Store

    feature = sample.plain_feature
    page = browser.new_page(viewport={"width": 1400, "height": 1500})
    page.goto(f"{server}/feature?sae={sample.sae_id}&feature={feature}")
    page.get_by_role("tab", name="Explanations & scores").click(timeout=60_000)
    page.get_by_role("textbox", name="Hypothesis in words").fill("the word God")
    page.get_by_role("textbox", name="Rules (optional), one per line: RULE | STRENGTH").fill('"God" | 4')
    page.get_by_role("button", name="Store hypothesis").click()
    page.get_by_text("Stored as explanation").first.wait_for(timeout=60_000)
    rows = Store.open(served_store, read_only=True).explanations(sample.sae_id, feature, explainer="manual")
    assert [(e.text, e.rules, e.extra["provenance"]["source"]) for e in rows] == [
        ("the word God", [{"activates_on": '"God"', "strength": 4}], "app")
    ]
    page.close()


# Every shaded corpus window the page shows right now (visible ones only): its label and its token texts.
_VISIBLE_WINDOWS_JS = """() => [...document.querySelectorAll('div.wb-tokens')]
  .filter(d => d.offsetParent !== null && d.querySelector('span[data-act]'))
  .map(d => [d.previousElementSibling ? d.previousElementSibling.textContent : '',
             [...d.querySelectorAll('span.wb-tok')].map(s => s.textContent)])"""


def _windows_showing(tokens: list[str], windows: dict[int, Any]) -> list[int]:
    """The stored windows whose token strings (in the page's visible form) contain `tokens` as a contiguous run."""
    n = len(tokens)
    found = []
    for wid, w in windows.items():
        shown = [t.replace("\r", "").replace("\n", "↵").replace("\t", "⇥") for t in w.token_strings]
        if any(shown[i : i + n] == tokens for i in range(len(shown) - n + 1)):
            found.append(wid)
    return found


def test_hypothesis_from_the_page_is_scored_on_windows_the_page_did_not_show(
    browser, tiny_model, tmp_path: Path
) -> None:
    """Issue 33 (Check): a hypothesis typed on the feature page is scored on none of the windows that page showed.
    The windows shown are read off the page itself (every visible shaded window of the Top examples, Quantile
    examples and Negatives tabs, its label checked against the stored windows holding the tokens it shows) and
    compared with the ids the app stored and with the test windows `workbench score` recorded. The planted store
    (feature 0 fires on LORD/God/Israel over 25 KJV documents) has enough documents that the held-out third is full,
    and the feature's split (drawn before, as an explain run draws it: its negatives are on the page) has displayed
    windows in its raw test third, so a scorer that ignored the page would score them."""
    from sae_workbench.evaluation.scorers.base import ScoreConfig
    from sae_workbench.evaluation.scorers.job import TestSetBuilder
    from sae_workbench.examples.testsets import held_out_test
    from sae_workbench.store import Store
    from tests.explainers.test_explain_support import PLANTED_SAE, build_planted_store

    want = {"kjv": 25, "stdlib": 10, "pydoc": 5, "wordnet": 5}
    store = build_planted_store(tmp_path, tiny_model.tokenizer, want=want)
    store.compute_activation_stats(PLANTED_SAE)
    split = TestSetBuilder(store, PLANTED_SAE, ScoreConfig("detection", "RANDOM_NEGATIVE")).split(0)
    progress = store.index_progress(PLANTED_SAE)
    assert progress is not None
    ids = store.indexed_window_ids(PLANTED_SAE)
    windows = {w.window_id: w for w in store.get_windows(progress.corpus, ids)}

    displayed: set[int] = set()
    with _serve(store.path) as url:
        page = browser.new_page(viewport={"width": 1400, "height": 1500})
        page.goto(f"{url}/feature?sae={PLANTED_SAE}&feature=0")
        # The page's last section: every tab above it is rendered.
        page.get_by_role("heading", name="Across SAEs").first.wait_for(timeout=180_000)
        for tab in ("Top examples", "Quantile examples", "Negatives"):
            page.get_by_role("tab", name=tab).click(timeout=60_000)
            blocks = page.evaluate(_VISIBLE_WINDOWS_JS)
            assert blocks, tab
            for label, tokens in blocks:
                wid = re.match(r"window (\d+) ·", label)
                assert wid is not None, label
                # The label names a stored window that holds the tokens shown (a short crop, e.g. a negative's first
                # 9 tokens, may occur in another window too; a longer one names its window alone).
                match = _windows_showing(tokens, windows)
                assert int(wid[1]) in match and (len(match) == 1 or len(tokens) < 16), (tab, label, match)
                displayed.add(int(wid[1]))
        page.get_by_role("tab", name="Explanations & scores").click(timeout=60_000)
        page.get_by_role("textbox", name="Hypothesis in words").fill("the names LORD, God and Israel")
        page.get_by_role("textbox", name="Rules (optional), one per line: RULE | STRENGTH").fill(
            '"LORD" | 5\n"God" | 3\n"Israel" | 2'
        )
        page.get_by_role("button", name="Store hypothesis").click()
        page.get_by_text("Stored as explanation").first.wait_for(timeout=60_000)
        page.close()
    (manual,) = Store.open(store.path, read_only=True).explanations(PLANTED_SAE, 0, explainer="manual")

    workbench = Path(sys.executable).with_name("workbench")
    scored = subprocess.run(
        [str(workbench), "score", "--store", str(store.path), "--sae", PLANTED_SAE, "--scorer", "detection",
         "--negatives", "random_negative", "--explainer", "manual", "--features", "0", "--no-progress"],
        cwd=REPO, env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert scored.returncode == 0, scored.stdout + scored.stderr
    (score,) = Store.open(store.path, read_only=True).scores(explanation_id=manual.id)
    prov = score.provenance
    assert prov["negative_sample_id"] == split.negative_sample_id  # the split checked below is the one scored
    positives, negatives = set(prov["positive_ids"]), set(prov["negative_ids"])
    assert len(positives) == len(negatives) == 10  # a full held-out test third
    # The scored windows are none the page showed, nor from a document it showed.
    assert not (positives | negatives) & displayed, sorted((positives | negatives) & displayed)
    shown_docs = {windows[i].source for i in displayed}
    assert not {windows[i].source for i in positives | negatives} & shown_docs
    # The app stored exactly what the page showed.
    assert set(manual.extra["shown_ids"]) == displayed
    # The risk was real: the split's raw test third holds displayed windows (top examples and negatives), which the
    # same held-out draw without the page's windows would score, and the scorer counted each of them as seen.
    raw = set(split.test.positives) | set(split.test.negatives)
    assert set(split.test.positives) & displayed and set(split.test.negatives) & displayed
    blind = held_out_test(store, PLANTED_SAE, progress.corpus, split, shown_ids=())
    assert (set(blind.third.positives) | set(blind.third.negatives)) & displayed
    assert prov["test_windows_seen"] == len(raw & displayed) > 0


def test_network_served_app_fixes_the_playground_to_registered_saes(
    server: str, network_server: str, browser, sample: SampleStore
) -> None:
    page = browser.new_page()
    page.goto(f"{network_server}/playground?sae={sample.sae_id}")
    page.get_by_text("loads only SAEs registered in the store").first.wait_for(timeout=60_000)
    field = page.get_by_role("textbox", name="SAE files")
    assert field.is_disabled() and field.input_value() == str(sample.sae_dir)
    page.goto(f"{network_server}/feature?sae={sample.sae_id}&feature={sample.explained_feature}")
    page.get_by_role("tab", name="Explanations & scores").click(timeout=60_000)
    page.get_by_text("Score your own hypothesis").click()
    page.get_by_text("serves its store read-only").first.wait_for(timeout=30_000)
    assert page.get_by_role("button", name="Store hypothesis").count() == 0
    # The same store served on loopback keeps the field editable.
    page.goto(f"{server}/playground?sae={sample.sae_id}")
    field = page.get_by_role("textbox", name="SAE files")
    field.wait_for(timeout=60_000)
    assert not field.is_disabled()
    assert page.get_by_text("loads only SAEs registered in the store").count() == 0
    page.close()


def _grid(page, header: str):
    """The st.dataframe whose grid has a column named `header`. Glide draws the grid on a canvas and keeps an
    accessible table of the same headers and cells in the DOM (hidden): that table is what is read here."""
    frame = page.get_by_test_id("stDataFrame").filter(has=page.locator("th", has_text=header)).first
    frame.wait_for(timeout=60_000)
    return frame


def test_absorption_columns_show_names_and_directions(server: str, browser, sample: SampleStore) -> None:
    """Issue 19, item 5c: the absorption tables a user sees name each SAEBench metric and its better direction
    (app/labels.py); the values are the sample store's planted eval (tests/app/sample_store.py)."""
    page = browser.new_page(viewport={"width": 1400, "height": 1500})
    page.goto(f"{server}/overview?sae={sample.sae_id}")
    overview = _grid(page, "Absorption fraction, mean over letters (↓ better)")
    assert overview.locator("th").all_text_contents() == [
        "Absorption fraction, mean over letters (↓ better)",
        "Full absorption rate, mean over letters (↓ better)",
        "Split features per letter, mean (↓ better)",
    ]
    assert overview.locator("td").all_text_contents() == ["0.12", "0.05", "1.3"]
    assert overview.locator("canvas").first.is_visible()
    page.goto(f"{server}/feature?sae={sample.sae_id}&feature={sample.explained_feature}")
    page.get_by_role("tab", name="Absorption").click(timeout=60_000)
    feature = _grid(page, "First letter")
    assert feature.locator("th").all_text_contents() == [
        "First letter",
        "Main features",
        "Absorption fraction (↓ better)",
    ]
    assert feature.locator("td").all_text_contents() == ["g", str(sample.explained_feature), "0.2"]
    assert feature.locator("canvas").first.is_visible()
    headers = " ".join(page.locator("th").all_text_contents())
    assert "mean_absorption" not in headers and "first_letter" not in headers  # no raw SAEBench keys
    page.close()


@pytest.fixture(scope="module")
def family_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, FamilyStore]]:
    """`workbench app` over a real matched SAE family (issue 36): four indexed tiny-model SAEs with planted structure."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.evaluation.families.family_store import build_matched_family

    # Built in a thread of its own: the explain job runs asyncio.run, and Playwright's sync API may already hold an
    # event loop in this one (the module's browser fixture).
    with ThreadPoolExecutor(1) as pool:
        family = pool.submit(build_matched_family, tmp_path_factory.mktemp("family_browser")).result()
    with _serve(family.path) as url:
        yield url, family


def test_families_page_and_across_saes(family_server: tuple[str, FamilyStore], browser) -> None:
    """Issue 36: the Families page draws the curves, the planted splitting tree and the stability table; the feature
    page's "Across SAEs" section links to the matched feature of the other seed."""
    url, family = family_server
    page = browser.new_page(viewport={"width": 1400, "height": 1600})
    page.goto(f"{url}/families")
    # The first page of a cold server imports torch and the matching code: generous on a busy machine.
    page.get_by_role("heading", name="SAE families").first.wait_for(timeout=180_000)
    parent = sorted(family.splits_ac)[0]
    page.get_by_text(f"d=64 · feature {parent}", exact=False).first.wait_for(timeout=120_000)
    for child in family.splits_ac[parent]:
        assert page.get_by_text(f"d=74 · feature {child}", exact=False).count() >= 1
    page.get_by_role("heading", name="Explanation stability").first.wait_for(timeout=30_000)
    assert page.locator("canvas, svg").count() > 0  # the shared-fraction chart is drawn
    page.screenshot(path=str(REPO / "artifacts" / "app-families.png"), full_page=True)

    page.goto(f"{url}/feature?sae={family.a}&feature=0")
    page.get_by_role("heading", name="Across SAEs").first.wait_for(timeout=120_000)
    partner = int(family.perm[0])
    link = page.get_by_role("link", name=f"open feature {partner} of {family.b[:8]} (d=64)").first
    link.wait_for(timeout=30_000)
    href = link.get_attribute("href") or ""
    assert f"sae={family.b}" in href and f"feature={partner}" in href, href
    # Followed in a fresh page rather than clicked: clicking it (feature page -> feature page) once left the page
    # without the partner's heading for 60 s on a loaded machine, which looked like the sidebar's keyed SAE/feature
    # widgets keeping their values across the same-page switch (not investigated further; the decoder-neighbour
    # links share the pattern).
    other = browser.new_page(viewport={"width": 1400, "height": 1600})
    other.goto(href if href.startswith("http") else f"{url}/{href.lstrip('/')}")
    other.get_by_text(f"Feature {partner}", exact=True).wait_for(timeout=120_000)
    other.get_by_role("heading", name="Across SAEs").first.wait_for(timeout=120_000)
    other.close()
    page.close()
