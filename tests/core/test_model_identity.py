"""Whether an SAE's recorded model is the model a command loaded: aliases, structure, weights fingerprint
(issue 19, item 2)."""

from __future__ import annotations

import logging

import pytest

from sae_workbench.model_identity import (
    KNOWN_MODELS,
    ModelMismatchError,
    canonical_model_name,
    check_model_identity,
    known_model_in_name,
    model_fingerprint,
    model_for_recorded,
    resolve_model,
    transformer_lens_official_name,
)
from sae_workbench.models import tiny_model

SMOL_SPELLINGS = [
    "smollm2-135m",
    "HuggingFaceTB/SmolLM2-135M-Instruct",
    "HuggingFaceTB/SmolLM2-135M",
    "huggingfacetb/smollm2-135m-instruct",
    "SmolLM2_135M_Instruct",
    " SmolLM2-135M ",
]


@pytest.mark.parametrize("name", SMOL_SPELLINGS)
def test_spellings_of_smollm2_are_one_model(name: str) -> None:
    assert canonical_model_name(name) == "smollm2-135m"


def test_other_names_stay_apart() -> None:
    assert canonical_model_name("gpt2") != canonical_model_name("smollm2-135m")
    assert canonical_model_name("HuggingFaceTB/SmolLM2-360M-Instruct") != "smollm2-135m"
    assert canonical_model_name("tiny") == canonical_model_name("tiny:0") != canonical_model_name("tiny:1")


@pytest.mark.parametrize("name", SMOL_SPELLINGS)
def test_an_sae_recorded_under_an_alias_fits_the_embedded_model(smollm2, name: str) -> None:
    check_model_identity(name, smollm2, sae_d_in=576, hook="blocks.3.hook_resid_post")


def test_the_known_fingerprint_and_structure_are_the_embedded_models(smollm2) -> None:
    known = KNOWN_MODELS["smollm2-135m"]
    assert (smollm2.cfg.d_model, smollm2.cfg.n_layers, smollm2.cfg.d_vocab) == (
        known.d_model,
        known.n_layers,
        known.d_vocab,
    )
    assert model_fingerprint(smollm2) == known.fingerprint


def test_fingerprint_tells_weights_apart(tiny_model) -> None:
    """Another load of the same weights (another object) agrees; other weights, or one changed embedding value among
    the first FINGERPRINT_ROWS rows, do not; a change beyond those rows is not seen (it compared a value with itself
    before)."""
    import copy

    import torch

    from sae_workbench.model_identity import FINGERPRINT_ROWS

    again = tiny_model_seeded(0)  # `load_model("tiny")` is tiny at seed 0
    assert again is not tiny_model
    assert model_fingerprint(again) == model_fingerprint(tiny_model)
    assert model_fingerprint(tiny_model) != model_fingerprint(tiny_model_seeded(1))
    edited, beyond = copy.deepcopy(again), copy.deepcopy(again)
    with torch.no_grad():
        edited.W_E[FINGERPRINT_ROWS - 1, 0] += 1.0
        beyond.W_E[FINGERPRINT_ROWS, 0] += 1.0
    assert model_fingerprint(edited) != model_fingerprint(again)
    assert model_fingerprint(beyond) == model_fingerprint(again)


def tiny_model_seeded(seed: int):
    return tiny_model(seed)


def test_a_different_model_is_refused_naming_both(tiny_model) -> None:
    # An SAE that says SmolLM2 applied to a random 2-layer model of width 64 (even at a hook of the right width).
    with pytest.raises(ModelMismatchError) as err:
        check_model_identity("HuggingFaceTB/SmolLM2-135M-Instruct", tiny_model)
    text = str(err.value)
    assert "HuggingFaceTB/SmolLM2-135M-Instruct" in text and "tiny" in text and "--force-model" in text
    assert "d_model" in text  # says what differs, not only the names


def test_a_different_model_of_another_name_is_refused(tiny_model) -> None:
    wide = tiny_model_seeded_wide()
    with pytest.raises(ModelMismatchError, match="--force-model"):
        check_model_identity(str(tiny_model.cfg.model_name), wide)


def tiny_model_seeded_wide():
    model = tiny_model(0, d_model=128)
    model.cfg.model_name = "other-tiny"
    return model


def test_force_model_passes_with_a_warning(tiny_model, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="sae_workbench.model_identity"):
        check_model_identity("HuggingFaceTB/SmolLM2-135M-Instruct", tiny_model, force=True)
    assert any(r.levelno == logging.WARNING and "--force-model" in r.getMessage() for r in caplog.records)


def test_a_recorded_fingerprint_must_match(tiny_model) -> None:
    check_model_identity("tiny", tiny_model, fingerprint=model_fingerprint(tiny_model))
    with pytest.raises(ModelMismatchError, match="fingerprint"):
        check_model_identity("tiny", tiny_model, fingerprint=model_fingerprint(tiny_model_seeded(1)))


def test_hook_width_mismatch_is_refused_even_when_forced(tiny_model) -> None:
    with pytest.raises(ModelMismatchError, match="width"):
        check_model_identity("tiny", tiny_model, sae_d_in=576, hook="blocks.0.hook_resid_post", force=True)


def test_no_recorded_model_checks_only_the_width(tiny_model) -> None:
    check_model_identity(None, tiny_model, sae_d_in=64, hook="blocks.0.hook_resid_post")


# Spellings of GPT-2 small that SAELens/Neuronpedia cfgs and users write (issue 19, item 2).
GPT2_SPELLINGS = ["gpt2", "GPT2", "gpt2-small", "GPT2-Small", "openai-community/gpt2"]


def gpt2_shaped_model(name: str = "gpt2"):
    """A HookedTransformer with GPT-2 small's shape (TransformerLens's gpt2 config) on the meta device: the
    identity check sees its name, config and hook widths; no weights exist, none are downloaded."""
    import torch
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    cfg = HookedTransformerConfig(
        n_layers=12, d_model=768, n_heads=12, d_head=64, d_mlp=3072, d_vocab=50257, n_ctx=1024,
        act_fn="gelu_new", normalization_type="LN", model_name=name, device="meta",
    )  # fmt: skip
    with torch.device("meta"):
        return HookedTransformer(cfg, move_to_device=False)


@pytest.mark.parametrize("name", GPT2_SPELLINGS)
def test_spellings_transformer_lens_resolves_to_gpt2_are_one_model(name: str) -> None:
    from transformer_lens.loading_from_pretrained import get_official_model_name

    assert canonical_model_name(name) == canonical_model_name("gpt2") == "gpt2"
    if not name.startswith("openai-community/"):  # TransformerLens 3.9 itself lists the pre-2024 root id only
        assert get_official_model_name(name) == "gpt2"


def test_every_transformer_lens_alias_is_its_official_model() -> None:
    """Against TransformerLens's own table: each alias names its official model, and no two official models merge."""
    from transformer_lens.supported_models import MODEL_ALIASES, OFFICIAL_MODEL_NAMES

    assert len({canonical_model_name(o) for o in OFFICIAL_MODEL_NAMES}) == len(OFFICIAL_MODEL_NAMES)
    for official, aliases in MODEL_ALIASES.items():
        if official not in OFFICIAL_MODEL_NAMES:
            continue
        for alias in aliases:
            assert transformer_lens_official_name(alias) == official, alias
            assert canonical_model_name(alias) == canonical_model_name(official), alias


@pytest.mark.parametrize("name", GPT2_SPELLINGS)
def test_an_sae_recorded_under_any_gpt2_spelling_fits_a_loaded_gpt2(name: str) -> None:
    check_model_identity(name, gpt2_shaped_model("gpt2"), sae_d_in=768, hook="blocks.8.hook_resid_pre")


def test_a_gpt2_sae_on_a_model_loaded_by_its_alias_fits() -> None:
    check_model_identity("openai-community/gpt2", gpt2_shaped_model("gpt2-small"), sae_d_in=768,
                         hook="blocks.8.hook_resid_pre")  # fmt: skip


@pytest.mark.parametrize(
    "name", ["EleutherAI/pythia-70m-deduped", "gpt2-medium", "distilgpt2", "smollm2-135m"]
)
def test_an_unrelated_model_is_still_refused_against_gpt2(name: str) -> None:
    # Same width at the hook (or no width given), yet another model the workbench knows by this name.
    with pytest.raises(ModelMismatchError, match="--force-model"):
        check_model_identity(name, gpt2_shaped_model("gpt2"))


def test_a_name_nobody_knows_is_accepted_with_the_risk_named(caplog: pytest.LogCaptureFixture) -> None:
    # A fine-tune under another org: the workbench cannot tell what it is, and nothing else can be checked here
    # (no width given, no fingerprint recorded), so it is accepted with a warning (issue 37 item 1).
    with caplog.at_level(logging.WARNING, logger="sae_workbench.model_identity"):
        found = check_model_identity("someorg/gpt2", gpt2_shaped_model("gpt2"))
    assert found.risk is not None and "someorg/gpt2" in found.risk and "no weights fingerprint" in found.risk
    assert "nothing could be checked" in found.message()
    assert any(r.levelno == logging.WARNING and "someorg/gpt2" in r.getMessage() for r in caplog.records)


# --- SAEs from elsewhere: a model name the workbench does not know (issue 37 item 1) ---------------------------


@pytest.mark.parametrize(
    ("name", "spelled"),
    [
        ("smollm2-135m-instruct-local", "smollm2-135m"),
        ("/data/models/SmolLM2-135M-Instruct-ft", "smollm2-135m"),
        ("my-org/SmolLM2_135M_sft", "smollm2-135m"),
        ("smollm2-1350m", None),  # not a token boundary
        ("SmolLM2-360M-Instruct", None),
        ("gpt2", None),
    ],
)
def test_known_model_in_name(name: str, spelled: str | None) -> None:
    assert known_model_in_name(name) == spelled


def test_without_model_an_unknown_name_loads_what_its_fingerprint_or_name_points_to() -> None:
    assert model_for_recorded("smollm2-135m-instruct-local")[0] == "smollm2-135m"
    known = KNOWN_MODELS["smollm2-135m"].fingerprint
    assert model_for_recorded("whatever-i-called-it", known)[0] == "smollm2-135m"
    assert model_for_recorded("tiny:3")[0] == "tiny:3"
    name, why = model_for_recorded("whatever-i-called-it")
    assert name is None and "'whatever-i-called-it'" in why and "--model" in why and "`" not in why


def test_smollm2_under_a_local_name_is_identified_by_its_weights(smollm2) -> None:
    """The issue's SAE: trained on SmolLM2, its cfg says `smollm2-135m-instruct-local` (failed before: the name was
    refused and the error suggested `--model smollm2-135m-instruct-local`, which cannot load)."""
    found = check_model_identity(
        "smollm2-135m-instruct-local", smollm2, sae_d_in=576, hook="blocks.3.hook_resid_post"
    )
    assert found.risk is None and not found.by_name
    assert f"fingerprint {KNOWN_MODELS['smollm2-135m'].fingerprint}" in found.message()
    assert "blocks.3.hook_resid_post has the SAE's input width 576" in found.message()


def test_an_unknown_name_is_identified_by_the_fingerprint_it_records(tiny_model) -> None:
    found = check_model_identity(
        "my-tiny-finetune", tiny_model, sae_d_in=64, hook="blocks.0.hook_resid_post",
        fingerprint=model_fingerprint(tiny_model),
    )  # fmt: skip
    assert found.risk is None
    assert found.matched[0] == f"the weights fingerprint {model_fingerprint(tiny_model)} the SAE records"


def test_an_unknown_name_with_only_the_width_to_check_is_accepted_naming_the_risk(tiny_model) -> None:
    found = check_model_identity("my-tiny-finetune", tiny_model, sae_d_in=64, hook="blocks.0.hook_resid_post")
    assert found.matched == ("blocks.0.hook_resid_post has the SAE's input width 64",)
    assert found.risk is not None and "same hook width" in found.risk


def test_a_mismatch_never_suggests_the_model_that_was_just_refused(tiny_model) -> None:
    # The SAE records `tiny` and tiny:1's fingerprint; the loaded tiny:0 has the name but not the weights.
    with pytest.raises(ModelMismatchError) as err:
        check_model_identity("tiny", tiny_model, fingerprint=model_fingerprint(tiny_model_seeded(1)))
    assert "--model" not in str(err.value) and "`--force-model`" in str(err.value)
    with pytest.raises(ModelMismatchError) as err:
        check_model_identity("tiny:1", tiny_model)
    assert "`--model tiny:1`" in str(err.value)
    with pytest.raises(ModelMismatchError) as err:
        check_model_identity("smollm2-135m-local", tiny_model)  # spells a known model of another shape
    assert "`--model smollm2-135m`" in str(err.value) and "d_model 64" in str(err.value)


def test_resolve_model_spells_a_hub_id_the_way_transformer_lens_loads_it() -> None:
    assert resolve_model("openai-community/gpt2", None) == "gpt2"  # TransformerLens 3.9 cannot load this id
    assert resolve_model("GPT2", None) == "gpt2"  # its loader is case-sensitive
    assert (
        resolve_model("gpt2-small", None) == "gpt2-small"
    )  # loadable as recorded: kept (the SAE id hashes it)
    assert resolve_model("someorg/gpt2", None) == "someorg/gpt2"
