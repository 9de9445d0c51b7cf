"""The Feature page's "Why it fires" section (issue 21) through AppTest, against the sample store's planted DePass
rows (tests/app/sample_store.py `_add_attributions`): the heatmap's top token, the top head, the effects, and the
`workbench attribute` hint for a feature with nothing stored."""

import html
import re

import pytest

from sae_workbench.app import commands, live_model, queries, render
from sae_workbench.models import tiny_tokenizer
from sae_workbench.store import Store
from tests.app.sample_store import (
    PLANTED_CONTINUATION,
    PLANTED_INTERACTION,
    PLANTED_R2,
    PLANTED_TOP_COMPONENT,
    SampleStore,
)
from tests.app.test_app_pages import markdown_text, run_page


@pytest.fixture()
def sample(app_sample_store: SampleStore) -> SampleStore:
    queries.clear_caches()
    return app_sample_store


def test_feature_page_shows_planted_depass_shares_heads_and_effects(sample: SampleStore, monkeypatch) -> None:
    at = run_page(
        "feature", sample.path, monkeypatch, sae=sample.sae_id, feature=str(sample.explained_feature)
    )
    md = markdown_text(at)
    assert [s.value for s in at.subheader] == ["Why it fires", "Interactions", "Across SAEs"]
    store = Store.open(sample.path, read_only=True)
    corpus = store.index_progress(sample.sae_id).corpus  # type: ignore[union-attr]
    window = store.get_windows(corpus, [sample.attributed_window])[0]
    token = window.token_strings[sample.attributed_token]
    # The planted top token (share 2.0), not the BOS sink planted at 5.0, is named and shaded at full strength.
    assert f"window {sample.attributed_window} · position" in md
    header = next(line for line in md.split("\n") if f"window {sample.attributed_window} · position" in line)
    assert f"top token {render.escape_text(repr(token))} (+2.000)" in header
    assert 'data-act="2"' in header and "background-color:rgba(255,128,0,0.900)" in header
    assert 'data-act="-0.5"' in header and "rgba(40,110,255," in header  # the negative share is blue
    components = [d.value for d in at.dataframe if "component" in d.value.columns]
    assert components and components[0].iloc[0]["component"] == PLANTED_TOP_COMPONENT
    assert components[0].iloc[0]["mean share"] == pytest.approx(0.8)
    assert {m.label: m.value for m in at.metric}["Loss change (nats)"] == "+0.1234"
    assert html.escape(PLANTED_CONTINUATION) in md and PLANTED_CONTINUATION not in md  # escaped, not rendered
    assert 'light<span class="wb-special"> +0.75</span>' in md  # the planted promoted token


def test_feature_page_without_attributions_gives_the_attribute_command(
    sample: SampleStore, monkeypatch
) -> None:
    at = run_page("feature", sample.path, monkeypatch, sae=sample.sae_id, feature=str(sample.plain_feature))
    hint = commands.attribute_command(sample.sae_id, sample.plain_feature)
    assert hint.startswith(f"workbench attribute --store STORE --sae {sample.sae_id} ")
    assert f"--features {sample.plain_feature}" in hint
    assert any(hint in c.value for c in at.caption)
    assert not [d for d in at.dataframe if "component" in d.value.columns]


def test_playground_depass_shares_of_typed_text_add_up_at_the_peak(sample: SampleStore, monkeypatch) -> None:
    at = run_page("playground", sample.path, monkeypatch, sae=sample.sae_id)
    text = "And God said, Let there be light"
    at.text_area(key="playground_text").set_value(text).run()
    at.button(key="playground_run").click().run()
    at.toggle(key="playground_depass").set_value(True).run()
    assert not at.exception, [e.value for e in at.exception]
    selected = at.selectbox(key="playground_feature").value
    assert selected is not None
    chosen = int(selected)
    record = Store.open(sample.path, read_only=True).get_sae(sample.sae_id)
    # The SAE's own encoding of the same text (not DePass): the feature's peak position and activation there.
    encoded = live_model.run_playground(
        record, str(sample.sae_dir), text, queries.index_bos_id(str(sample.path), sample.sae_id)
    )
    values = encoded.acts_TF[:, chosen].copy()
    values[encoded.skip_positions] = -1.0
    peak = int(values.argmax())
    md = markdown_text(at)
    header = next(line for line in md.split("\n") if "completeness error" in line)
    assert f"position {peak} · activation {values[peak]:.3f}" in header
    error = float(header.split("completeness error ")[1].split(" ")[0].split("<")[0])
    assert error < 1e-3  # Σ token shares + rest + biases = the pre-activation (DePass's exact decomposition)
    acts = [float(a) for a in re.findall(r'data-act="([^"]+)"', header)]
    assert len(acts) == len(encoded.token_strings) and all(a == 0.0 for a in acts[peak + 1 :])  # causal cut
    # The playground prepends the index's BOS (<|endoftext|> for SmolLM2's tokenizer, not its declared <|im_start|>);
    # DePass recognises it as the sink, so the paper's ignore-BOS rule applies to typed text too.
    bos_id = queries.index_bos_id(str(sample.path), sample.sae_id)
    res = live_model.run_playground_depass(record, str(sample.sae_dir), text, bos_id, chosen, peak)
    assert bos_id is not None and res.token_ids_N[0] == bos_id != tiny_tokenizer().bos_token_id
    assert res.bos_position == 0
    with pytest.raises(live_model.PlaygroundError):
        live_model.run_playground_depass(record, str(sample.sae_dir), text, None, sample.d_sae, peak)


# The "Interactions" section (issue 22): the planted ProxySPEX rows (sample_store.py `_add_interactions`).


def test_feature_page_shows_planted_interactions_and_r2_table(sample: SampleStore, monkeypatch) -> None:
    at = run_page(
        "feature", sample.path, monkeypatch, sae=sample.sae_id, feature=str(sample.explained_feature)
    )
    assert "Interactions" in [s.value for s in at.subheader]
    terms = [d.value for d in at.dataframe if "interaction" in d.value.columns]
    assert len(terms) == 1
    first, second, value = PLANTED_INTERACTION
    row = terms[0].iloc[0]
    assert row["interaction"] == f"{first!r} × {second!r}" and row["Möbius"] == pytest.approx(value)
    assert row["singletons"] == "+0.100, -0.200"
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["R² ProxySPEX"] == f"{PLANTED_R2['proxyspex']:.3f}"
    assert metrics["R² Shapley"] == f"{PLANTED_R2['shapley']:.3f}"
    assert metrics["R² Banzhaf"] == f"{PLANTED_R2['banzhaf']:.3f}"
    captions = [c.value for c in at.caption]
    assert any("heads" in c and "constant" in c for c in captions)  # the constant result says so, no table
    assert any(c.startswith("FBII at order 2:") for c in captions)


def test_feature_page_without_interactions_gives_the_command(sample: SampleStore, monkeypatch) -> None:
    at = run_page("feature", sample.path, monkeypatch, sae=sample.sae_id, feature=str(sample.plain_feature))
    hint = commands.interactions_command(sample.sae_id, sample.plain_feature)
    assert any(hint in c.value and "[interactions]" in c.value for c in at.caption)
    assert not [d for d in at.dataframe if "interaction" in d.value.columns]
