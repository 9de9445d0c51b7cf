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
    model_fingerprint,
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
    assert model_fingerprint(tiny_model) == model_fingerprint(tiny_model)
    assert model_fingerprint(tiny_model) != model_fingerprint(tiny_model_seeded(1))


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
