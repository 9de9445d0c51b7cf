"""Model loading: name errors, hook validation, context sizes, local HF directories, the real SmolLM2 (slow)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sae_workbench.errors import ContextSizeError, HookNotFoundError, UnknownModelError
from sae_workbench.models import (
    DEFAULT_HOOK,
    check_context_size,
    forward_to_hooks,
    hook_layer,
    hook_shape,
    hook_width,
    load_model,
    stop_layer,
    tiny_tokenizer,
    validate_hooks,
)


def test_unknown_model_name_lists_options():
    with pytest.raises(UnknownModelError) as err:
        load_model("no-such-model-xyz")
    message = str(err.value)
    for option in ("smollm2-135m", "tiny", "config.json", "gpt2"):
        assert option in message


def test_hook_not_in_model_lists_valid_hooks(tiny_model):
    assert validate_hooks(tiny_model, ["blocks.1.hook_resid_post"]) == ["blocks.1.hook_resid_post"]
    with pytest.raises(HookNotFoundError) as err:
        validate_hooks(tiny_model, ["blocks.1.hook_resid_post", "blocks.5.hook_resid_post"])
    message = str(err.value)
    assert "blocks.5.hook_resid_post" in message and "blocks.0.hook_resid_post" in message
    assert "layers 0..1" in message


def test_context_size_limits(tiny_model):
    check_context_size(tiny_model, tiny_model.cfg.n_ctx)
    with pytest.raises(ContextSizeError, match=r"maximum of 256 .*--context-size 256"):
        check_context_size(tiny_model, 257)
    with pytest.raises(ContextSizeError, match="at least 2"):
        check_context_size(tiny_model, 1)


def test_hook_layers_and_stop_layer():
    assert hook_layer("blocks.3.hook_resid_post") == 3
    assert hook_layer("hook_embed") == 0
    assert stop_layer(["blocks.3.hook_resid_post", "blocks.1.hook_mlp_out"]) == 4
    assert stop_layer(["hook_embed"]) == 1
    assert stop_layer(["blocks.1.hook_resid_post", "ln_final.hook_normalized"]) is None  # after the blocks
    assert stop_layer(["blocks.3.hook_resid_post"], n_layers=4) is None  # the last block: full forward anyway
    assert stop_layer(["blocks.3.hook_resid_post"], n_layers=30) == 4
    assert stop_layer([DEFAULT_HOOK]) == 4  # design.md: stop_at_layer=4 returns blocks.3.hook_resid_post


def test_tiny_models_are_seeded():
    a, a2, b = load_model("tiny"), load_model("tiny:0"), load_model("tiny:1")
    assert torch.equal(a.W_E, a2.W_E) and not torch.equal(a.W_E, b.W_E)
    assert a.cfg.model_name == "tiny" and b.cfg.model_name == "tiny:1"


def test_local_hf_directory_matches_hf_logits(tmp_path: Path):
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=False,
    )
    hf_model = LlamaForCausalLM(config).eval()
    hf_model.save_pretrained(str(tmp_path))
    tokenizer.save_pretrained(str(tmp_path))

    model = load_model(str(tmp_path))
    assert model.cfg.n_layers == 2 and model.cfg.d_model == 64 and model.cfg.n_ctx == 128
    assert model.tokenizer is not None and len(model.tokenizer) == len(tokenizer)
    ids = torch.tensor([tokenizer.encode("The capital of France is Paris, and the capital of Italy is")])
    with torch.no_grad():
        expected = hf_model(ids).logits
        got = model(ids)
    assert expected.abs().max() > 0.1  # a non-trivial comparison
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


def test_hf_directory_without_architecture(tmp_path: Path):
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(UnknownModelError, match="architecture"):
        load_model(str(tmp_path))


@pytest.mark.slow
def test_smollm2_greedy_completion(smollm2):
    prompt = smollm2.tokenizer("The capital of France is", add_special_tokens=False)["input_ids"]
    tokens = torch.tensor([prompt])
    with torch.no_grad():
        for _ in range(3):
            next_id = smollm2(tokens)[0, -1].argmax()
            tokens = torch.cat([tokens, next_id.view(1, 1)], dim=1)
    completion = smollm2.tokenizer.decode(tokens[0, len(prompt) :])
    assert completion.startswith(" Paris"), completion
    assert smollm2.cfg.d_model == 576 and smollm2.cfg.n_layers == 30


def test_forward_to_hooks_equals_the_full_forward_and_stops_after_the_deepest_hook(tiny_model):
    tokens_BT = torch.tensor([[0, 5, 9, 200, 31], [0, 7, 7, 1000, 2]])
    hooks = ["blocks.0.hook_mlp_out", "hook_embed", "blocks.0.hook_resid_post"]
    _, full = tiny_model.run_with_cache(tokens_BT)
    fired: list[str] = []
    tiny_model.add_hook("blocks.1.hook_resid_pre", lambda act, hook: fired.append(hook.name))
    try:
        acts = forward_to_hooks(tiny_model, tokens_BT, hooks)
    finally:
        tiny_model.reset_hooks()
    assert list(acts) == hooks
    for h in hooks:
        assert torch.equal(acts[h], full[h]), h
        assert not acts[h].requires_grad
    assert fired == []  # block 1 never ran: the forward stopped after block 0
    last = forward_to_hooks(tiny_model, tokens_BT, ["blocks.1.hook_resid_post", "ln_final.hook_normalized"])
    assert torch.equal(last["ln_final.hook_normalized"], full["ln_final.hook_normalized"])


def test_forward_to_hooks_names_a_missing_hook(tiny_model):
    with pytest.raises(HookNotFoundError, match=r"blocks\.7\.hook_resid_post"):
        forward_to_hooks(tiny_model, torch.zeros((1, 2), dtype=torch.long), ["blocks.7.hook_resid_post"])


def test_hook_width_flattens_heads(tiny_model):
    cfg = tiny_model.cfg
    assert hook_shape(tiny_model, "blocks.1.hook_resid_post") == (cfg.d_model,)
    assert hook_width(tiny_model, "blocks.1.hook_resid_post") == cfg.d_model
    assert hook_shape(tiny_model, "blocks.0.attn.hook_z") == (cfg.n_heads, cfg.d_head)
    assert hook_width(tiny_model, "blocks.0.attn.hook_z") == cfg.n_heads * cfg.d_head
    assert hook_width(tiny_model, "blocks.0.mlp.hook_post") == cfg.d_mlp


def test_fast_cpu_dtype_is_bfloat16_only_with_native_bf16(tmp_path) -> None:
    """bfloat16 where the CPU flags say it is native, else float32 (emulated bfloat16 is 50× slower here)."""
    from sae_workbench.models import fast_cpu_dtype

    plain = tmp_path / "plain"
    plain.write_text(
        "processor\t: 0\nflags\t\t: fpu sse sse2 avx2 fma\n\nprocessor\t: 1\nflags\t\t: fpu avx2\n"
    )
    native = tmp_path / "native"
    native.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16\n")
    amx = tmp_path / "amx"
    amx.write_text("flags\t\t: fpu avx2 amx_tile amx_bf16\n")
    assert fast_cpu_dtype(plain) == "float32"
    assert fast_cpu_dtype(native) == "bfloat16" and fast_cpu_dtype(amx) == "bfloat16"
    assert fast_cpu_dtype(tmp_path / "missing") == "float32"  # not Linux: the exact dtype
