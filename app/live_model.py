"""Run the subject model + SAE on typed text for the Playground page: per-token feature activations and DePass shares
of typed text. Model and SAE are loaded once per server (`st.cache_resource`); on a network-served app only the SAE
files the store registered may be loaded."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import streamlit as st
import torch

from sae_workbench.app.settings import served_on_network
from sae_workbench.app.views import PlaygroundResult
from sae_workbench.errors import WorkbenchError
from sae_workbench.store.rows import SAERecord

if TYPE_CHECKING:
    from sae_workbench.evaluation.attribution.depass import TokenAttribution

log = logging.getLogger(__name__)

# Keys under which a registered SAE's cfg may record where its files are (train / index record one of them).
SAE_PATH_KEYS = ("path", "sae_path", "source", "loaded_from", "folder")
MAX_PLAYGROUND_TOKENS = 512


class PlaygroundError(WorkbenchError):
    """The Playground cannot run: the SAE's files are unknown or the text is unusable."""


class UnregisteredSAEError(PlaygroundError):
    """A network-served app was asked to load SAE files other than those the store registered for the SAE."""


def check_sae_allowed(record: SAERecord, sae_spec: str, on_network: bool) -> None:
    """On an app served beyond loopback, only the registered SAE's recorded files may be loaded (any filesystem path
    or registry id would let a visitor make the server read or download what they name)."""
    if not on_network:
        return
    recorded = sae_location(record)
    if recorded is None or sae_spec != recorded:
        raise UnregisteredSAEError(
            f"This app is served on the network, so the Playground loads only SAEs registered in the store, from "
            f"the location the store recorded ({recorded or 'none recorded for SAE ' + record.sae_id}). Serve it "
            f"on 127.0.0.1 (the default of `workbench app`) to load other SAE files."
        )


def sae_location(record: SAERecord) -> str | None:
    """Where the SAE's files are, as recorded in its cfg (None when the store does not say)."""
    for key in SAE_PATH_KEYS:
        value = record.cfg.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def load_pair(model_name: str, sae_spec: str, hook: str) -> tuple[Any, Any]:
    """Load the subject model and the SAE, and check that they fit together."""
    from sae_workbench.models import load_model
    from sae_workbench.sae.io import check_sae_matches, load_sae

    if not Path(sae_spec).expanduser().exists() and "/" not in sae_spec:
        raise PlaygroundError(
            f"SAE files {sae_spec!r} not found; pass the SAE folder `workbench train` wrote."
        )
    model = load_model(model_name)
    sae = load_sae(sae_spec, hook=hook)
    check_sae_matches(sae, model, hook)
    return model, sae


def text_tokens(model: Any, text: str, bos_id: int | None) -> torch.Tensor:
    """`text`'s token ids with BOS prepended, like indexing, cut to MAX_PLAYGROUND_TOKENS; (N,) long."""
    if not text.strip():
        raise PlaygroundError("Type some text first.")
    ids = model.tokenizer(text, add_special_tokens=False)["input_ids"][: MAX_PLAYGROUND_TOKENS - 1]
    bos = int(bos_id) if bos_id is not None else int(model.tokenizer.bos_token_id or 0)
    return torch.tensor([bos, *ids], dtype=torch.long)


def encode_text(model: Any, sae: Any, hook: str, text: str, bos_id: int | None) -> PlaygroundResult:
    """Feature activations of every token of `text` (BOS prepended, like indexing) as a dense (T, F) array."""
    from sae_workbench.models import forward_to_hooks

    tokens_1T = text_tokens(model, text, bos_id)[None]
    with torch.no_grad():
        acts_TF = sae.encode(forward_to_hooks(model, tokens_1T, [hook])[hook][0].to(sae.W_enc.dtype))
    strings = [model.tokenizer.decode([t]) for t in tokens_1T[0].tolist()]
    return PlaygroundResult(
        token_strings=strings,
        acts_TF=acts_TF.float().cpu().numpy().astype(np.float32),
        skip_positions=[0],
    )


def depass_text(
    model: Any, sae: Any, hook: str, text: str, bos_id: int | None, feature: int, position: int
) -> TokenAttribution:
    """DePass token shares (arXiv 2510.18462, softmax rule) of `feature`'s pre-activation at `position` of `text`,
    tokenized exactly as `encode_text` does (BOS prepended); a `TokenAttribution`."""
    from sae_workbench.evaluation.attribution.depass import depass_tokens

    if not 0 <= feature < int(sae.cfg.d_sae):
        raise PlaygroundError(
            f"Feature {feature} is out of range: the SAE has features 0…{sae.cfg.d_sae - 1}."
        )
    tokens_N = text_tokens(model, text, bos_id)
    if not 0 <= position < len(tokens_N):
        raise PlaygroundError(f"Position {position} is outside the text's {len(tokens_N)} tokens.")
    return depass_tokens(model, sae, hook, tokens_N, feature, position)


@st.cache_resource(show_spinner="Loading model and SAE (once per server)…", max_entries=2)
def _pair(model_name: str, sae_spec: str, hook: str) -> tuple[Any, Any]:
    return load_pair(model_name, sae_spec, hook)


def playground_restricted() -> bool:
    """Whether the Playground may load only registered SAEs (the app binds more than loopback)."""
    return served_on_network()


def run_playground(record: SAERecord, sae_spec: str, text: str, bos_id: int | None) -> PlaygroundResult:
    """Per-token feature activations of `text` under the SAE (model + SAE cached for the server's life); on a
    network-served app only the SAE's registered files (UnregisteredSAEError otherwise)."""
    check_sae_allowed(record, sae_spec, playground_restricted())
    model, sae = _pair(record.model, sae_spec, record.hook)
    return encode_text(model, sae, record.hook, text, bos_id)


def run_playground_depass(
    record: SAERecord, sae_spec: str, text: str, bos_id: int | None, feature: int, position: int
) -> TokenAttribution:
    """DePass token shares of `feature` at `position` of typed text (a `TokenAttribution`; model + SAE cached for the
    server's life, the attribution computed on demand); on a network-served app only the registered SAE files."""
    check_sae_allowed(record, sae_spec, playground_restricted())
    model, sae = _pair(record.model, sae_spec, record.hook)
    return depass_text(model, sae, record.hook, text, bos_id, int(feature), int(position))
