"""DePass exactness (spec A.5 D1) on random tiny Llama-style and GPT-2-style models, and the baselines' axioms."""

import json

import numpy as np
import pytest
import torch
from sae_lens import JumpReLUSAE, JumpReLUSAEConfig, StandardSAE, StandardSAEConfig, TopKSAE, TopKSAEConfig
from transformer_lens import HookedTransformer, HookedTransformerConfig

from sae_workbench.corpus import default_bos_id
from sae_workbench.errors import HookNotFoundError
from sae_workbench.evaluation.attribution import (
    MLP_RULES,
    FeatureOutOfRangeError,
    PositionOutOfRangeError,
    UnsupportedHookError,
    attention_rollout,
    depass_components,
    depass_tokens,
    depass_upstream,
    grad_x_input,
    integrated_gradients,
    random_scores,
)
from sae_workbench.evaluation.attribution.depass import head_outputs_NHD
from sae_workbench.evaluation.attribution.propagate import Roles, _softmax_split, propagate, trace_model
from sae_workbench.evaluation.attribution.readout import feature_readout
from sae_workbench.sae.io import SAEShapeMismatchError

D = 64
REL = 1e-5
HOOKS = [
    "blocks.1.hook_resid_post",
    "blocks.1.hook_resid_mid",
    "blocks.1.hook_attn_out",
    "blocks.0.hook_mlp_out",
]


def build_llama(**overrides) -> HookedTransformer:
    """Random Llama-style model: RMSNorm, rotary, GQA (4 heads, 2 KV heads), gated SiLU MLP."""
    cfg = dict(
        n_layers=2, d_model=D, d_head=16, n_heads=4, n_key_value_heads=2, d_mlp=128, d_vocab=97, n_ctx=64,
        act_fn="silu", gated_mlp=True, normalization_type="RMS", positional_embedding_type="rotary", seed=0,
    )  # fmt: skip
    model = HookedTransformer(HookedTransformerConfig(**{**cfg, **overrides}))
    with torch.no_grad():
        for block in model.blocks:  # non-trivial norm weights, so gamma is exercised
            for ln in (block.ln1, block.ln2):
                w = getattr(ln, "w", None)
                if isinstance(w, torch.Tensor):
                    w.uniform_(0.5, 1.5)
    return model.eval()


def build_gpt2_like() -> HookedTransformer:
    """Random GPT-2-style model: LayerNorm with bias, learned positions, GELU MLP, every bias non-zero."""
    cfg = HookedTransformerConfig(
        n_layers=2, d_model=D, d_head=16, n_heads=4, d_mlp=128, d_vocab=97, n_ctx=64, act_fn="gelu",
        normalization_type="LN", seed=1,
    )  # fmt: skip
    model = HookedTransformer(cfg)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.split(".")[-1].startswith("b"):
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))
            if name.endswith(".w") and "ln" in name:
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=gen))
    return model.eval()


def build_sae(kind: str, seed: int = 0):
    """Random SAE of an architecture with non-trivial b_dec/b_enc (TopK with non-unit decoder norms)."""
    torch.manual_seed(seed)
    if kind == "standard":
        sae = StandardSAE(StandardSAEConfig(d_in=D, d_sae=48))
    elif kind == "topk":
        sae = TopKSAE(TopKSAEConfig(d_in=D, d_sae=48, k=6, rescale_acts_by_decoder_norm=True))
    else:
        sae = JumpReLUSAE(JumpReLUSAEConfig(d_in=D, d_sae=48))
    with torch.no_grad():
        sae.b_dec.normal_(0, 0.3)
        sae.b_enc.normal_(0, 0.2)
        sae.W_dec.mul_(torch.rand(48, 1) + 0.5)
        if kind == "jumprelu":
            sae.threshold.fill_(0.05)  # pyright: ignore[reportCallIssue]
    return sae


MODELS = {"llama": build_llama, "gpt2": build_gpt2_like}
TOKENS = torch.tensor([1, 5, 17, 33, 8, 61, 5, 42, 90, 12, 7, 3])


def _rms(x: torch.Tensor) -> float:
    return float(x.pow(2).mean().sqrt())


def _active_feature(model, sae, hook, tokens) -> int:
    """The most active feature at the last position (so activation == pre-activation)."""
    _, cache = model.run_with_cache(tokens[None], names_filter=[hook])
    acts = sae.encode(cache[hook][0, -1][None])[0]
    assert acts.max() > 0
    return int(acts.argmax())


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
@pytest.mark.parametrize("rule", MLP_RULES)
def test_components_sum_to_cached_residual_at_every_layer(arch, rule):
    model = MODELS[arch]()
    trace = trace_model(model, TOKENS, last_block=1)
    N = TOKENS.numel()
    C = torch.zeros(N + 2, N, D)
    C[torch.arange(N), torch.arange(N)] = trace.state(0)
    seen = {}
    propagate(
        model,
        trace,
        C,
        0,
        4,
        Roles(rest=N, bias=N + 1, bos=0),
        rule,
        on_state=lambda i, c: seen.update({i: c}),
    )
    assert sorted(seen) == [1, 2, 3, 4]
    # Fresh cache, independent of the trace the propagation used.
    _, cache = model.run_with_cache(TOKENS[None])
    clean = [cache["blocks.0.hook_resid_mid"], cache["blocks.1.hook_resid_pre"], cache["blocks.1.hook_resid_mid"],
             cache["blocks.1.hook_resid_post"]]  # fmt: skip
    for i, ref in zip([1, 2, 3, 4], clean, strict=True):
        ref = ref[0]
        assert float((seen[i].sum(0) - ref).abs().max()) <= REL * _rms(ref), (arch, rule, i)
    # Token m's component is exactly zero at earlier positions (causality survives the decomposition).
    final = seen[4]
    assert all(float(final[m, :m].abs().max()) == 0.0 for m in range(1, N))
    if arch == "llama":  # no biases anywhere: the bias component stays exactly zero
        assert float(final[N + 1].abs().max()) == 0.0
    else:
        assert float(final[N + 1].abs().max()) > 1e-3


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
@pytest.mark.parametrize("rule", MLP_RULES)
@pytest.mark.parametrize("kind", ["standard", "topk", "jumprelu"])
def test_token_scores_sum_to_the_sae_activation(arch, rule, kind):
    model = MODELS[arch]()
    sae = build_sae(kind)
    hook = "blocks.1.hook_resid_post"
    feature = _active_feature(model, sae, hook, TOKENS)
    res = depass_tokens(model, sae, hook, TOKENS, feature, rule=rule)
    # The SAE's own activation (sae_lens encode) equals the adapter's pre-activation for an active feature.
    assert res.activation == pytest.approx(res.pre_activation, rel=REL, abs=1e-6)
    total = sum(res.scores_N) + res.rest + res.model_bias + res.sae_bias
    assert total == pytest.approx(res.activation, rel=REL, abs=1e-6)
    assert res.rule == rule and len(res.scores_N) == TOKENS.numel()
    json.dumps(res.to_dict())


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_and_level_is_complete(arch, hook):
    model = MODELS[arch]()
    sae = build_sae("standard")
    for rule in MLP_RULES:
        tok = depass_tokens(model, sae, hook, TOKENS, 3, position=9, rule=rule)
        comp = depass_components(model, sae, hook, TOKENS, 3, position=9, rule=rule)
        up = depass_upstream(model, sae, hook, TOKENS, 3, build_sae("standard", seed=1), "blocks.0.hook_resid_pre",
                             position=9, rule=rule)  # fmt: skip
        scale = max(1.0, abs(tok.pre_activation))
        assert tok.position == 9 and len(tok.scores_N) == 10
        assert tok.completeness_error <= REL * scale
        assert comp.completeness_error <= REL * scale
        assert up.completeness_error <= REL * max(scale, sum(abs(p) for p in up.scores_K) + abs(up.sae_error))
        assert comp.pre_activation == pytest.approx(tok.pre_activation, rel=REL)
        up_parts = [
            *up.scores_K,
            up.other_features,
            up.b_dec,
            up.bos,
            up.sae_error,
            up.model_bias,
            up.sae_bias,
        ]
        # A random upstream SAE reconstructs badly: its error term and features cancel (|parts| ~ 15 for a total
        # ~ 0.4), so float32 round-off is relative to the parts' magnitude, not the total's.
        up_scale = max(1.0, sum(abs(p) for p in up_parts))
        assert sum(up_parts) == pytest.approx(up.pre_activation, abs=REL * up_scale)
        json.dumps(comp.to_dict())
        json.dumps(up.to_dict())


def test_heads_plus_bias_are_the_attention_output():
    model = build_gpt2_like()
    trace = trace_model(model, TOKENS, last_block=1)
    for layer in (0, 1):
        heads = head_outputs_NHD(model, trace, layer).sum(1) + model.blocks[layer].attn.b_O.detach()
        ref = trace.acts[f"blocks.{layer}.hook_attn_out"]
        assert float((heads - ref).abs().max()) <= REL * _rms(ref)


def _frozen_forward(model, tokens, at, inject, hook, rule):
    """The state at `hook` (N, D) of TL's own forward in which the state at hook `at` is replaced by `inject(clean)`.

    Patterns, norm scales and (per rule) the MLP gate or secant slope are patched in from the clean run; with those
    frozen the map from the state at `at` to the state at `hook` is linear (for a bias-free model), so pushing one
    component through it is the linear rules' share of that component by definition.
    """
    _, clean = model.run_with_cache(tokens[None])
    store: dict[str, torch.Tensor] = {}

    def freeze(name):
        return lambda x, hook: clean[name]

    def keep(key):
        def fn(x, hook):
            store[key] = x

        return fn

    def mlp_post(layer):
        def fn(x, hook):
            g, h = clean[f"blocks.{layer}.mlp.hook_pre"], clean[f"blocks.{layer}.mlp.hook_post"]
            if rule == "up_linear" and model.cfg.gated_mlp:
                return model.blocks[layer].mlp.act_fn(g) * store["u"]
            return h / g * store["g"]

        return fn

    hooks = [(at, lambda x, hook: inject(x))]
    for layer in range(model.cfg.n_layers):
        for name in ("ln1.hook_scale", "ln2.hook_scale", "attn.hook_pattern"):
            hooks.append((f"blocks.{layer}.{name}", freeze(f"blocks.{layer}.{name}")))
        hooks += [
            (f"blocks.{layer}.mlp.hook_pre", keep("g")),
            (f"blocks.{layer}.mlp.hook_post", mlp_post(layer)),
        ]
        if model.cfg.gated_mlp:
            hooks.append((f"blocks.{layer}.mlp.hook_pre_linear", keep("u")))
    hooks.append((hook, keep("x")))
    with torch.no_grad():
        model.run_with_hooks(tokens[None], fwd_hooks=hooks)
    return store["x"][0]


def _frozen_share(model, sae, tokens, feature, at, inject, hook, rule):
    """The feature's read-out at the last position of `_frozen_forward`'s state (score of one component)."""
    _, clean = model.run_with_cache(tokens[None], names_filter=[hook])
    x = _frozen_forward(model, tokens, at, inject, hook, rule)
    return float(feature_readout(sae, feature).component_scores(x[-1][None], clean[hook][0, -1])[0])


def _frozen_forward_share(model, sae, hook, feature, n, rule):
    """Token n's share by an independent route: TL's own forward, only token n's embedding, everything frozen."""

    def only_n(x):
        out = torch.zeros_like(x)
        out[:, n] = x[:, n]
        return out

    return _frozen_share(model, sae, TOKENS, feature, "hook_embed", only_n, hook, rule)


@pytest.mark.parametrize("rule", ["up_linear", "gate_linear"])
def test_linear_rules_equal_an_independent_frozen_forward(rule):
    model = build_llama()
    sae = build_sae("standard")
    hook = "blocks.1.hook_resid_post"
    res = depass_tokens(model, sae, hook, TOKENS, 5, rule=rule)
    for n in (0, 3, TOKENS.numel() - 1):
        assert res.scores_N[n] == pytest.approx(
            _frozen_forward_share(model, sae, hook, 5, n, rule), rel=1e-4, abs=1e-5
        )


def _bias_free(model) -> bool:
    """Whether every bias of the model is exactly zero (the frozen forward is then linear in its input state)."""
    params = model.named_parameters()
    return all(float(p.detach().abs().max()) == 0.0 for n, p in params if n.split(".")[-1].startswith("b"))


@pytest.mark.parametrize("rule", ["up_linear", "gate_linear"])
@pytest.mark.parametrize("hook", ["blocks.1.hook_resid_post", "blocks.1.hook_resid_mid"])
def test_head_and_mlp_scores_equal_a_frozen_forward_of_that_component_alone(rule, hook):
    # Completeness holds by construction (the rest term absorbs errors); this checks each part on its own. Under a
    # linear rule a head's share is the read-out of TL's frozen forward in which the residual stream right after
    # block l's attention holds that head's clean output alone (z_h W_O[h], from TL's own hook_z) and nothing else.
    model = build_llama()
    assert _bias_free(model)
    sae = build_sae("standard")
    feature = _active_feature(model, sae, hook, TOKENS)
    comp = depass_components(model, sae, hook, TOKENS, feature, rule=rule)
    _, clean = model.run_with_cache(TOKENS[None])
    n_attn = 2  # both blocks' attention writes before either hook
    assert len(comp.head_scores_LH) == n_attn
    for layer in range(n_attn):
        W_O = model.blocks[layer].attn.W_O.detach()
        for h in range(model.cfg.n_heads):
            head_out = clean[f"blocks.{layer}.attn.hook_z"][:, :, h] @ W_O[h]
            want = _frozen_share(model, sae, TOKENS, feature, f"blocks.{layer}.hook_resid_mid",
                                 lambda x, o=head_out: o, hook, rule)  # fmt: skip
            assert comp.head_scores_LH[layer][h] == pytest.approx(want, rel=1e-4, abs=1e-5), (layer, h)
    # The MLPs that write before the hook: block 0's (and block 1's for resid_post), alone after their write.
    n_mlp = 2 if hook.endswith("resid_post") else 1
    assert len(comp.mlp_scores_L) == n_mlp
    for layer in range(n_mlp):
        mlp_out = clean[f"blocks.{layer}.hook_mlp_out"]
        want = _frozen_share(model, sae, TOKENS, feature, f"blocks.{layer}.hook_resid_post",
                             lambda x, o=mlp_out: o, hook, rule)  # fmt: skip
        assert comp.mlp_scores_L[layer] == pytest.approx(want, rel=1e-4, abs=1e-5), layer
    # Not all zero: the check would pass vacuously on a dead decomposition.
    assert max(abs(s) for row in comp.head_scores_LH for s in row) > 1e-2


@pytest.mark.parametrize("rule", ["up_linear", "gate_linear"])
def test_upstream_feature_scores_equal_a_frozen_forward_of_that_feature_alone(rule):
    model = build_llama()
    sae, up_sae = build_sae("standard"), build_sae("standard", seed=1)
    hook, up_hook = "blocks.1.hook_resid_post", "blocks.0.hook_resid_post"
    feature = _active_feature(model, sae, hook, TOKENS)
    res = depass_upstream(model, sae, hook, TOKENS, feature, up_sae, up_hook, rule=rule)
    _, clean = model.run_with_cache(TOKENS[None], names_filter=[up_hook])
    acts = up_sae.encode(clean[up_hook])[0].detach()  # (N, F); no tokenizer, so no BOS position is set aside
    assert len(res.upstream_features_K) >= 3
    for j, score in list(zip(res.upstream_features_K, res.scores_K, strict=True))[:3]:
        part = acts[:, j, None] * up_sae.W_dec[j].detach()
        want = _frozen_share(model, sae, TOKENS, feature, up_hook, lambda x, p=part: p[None], hook, rule)
        assert score == pytest.approx(want, rel=1e-4, abs=1e-5), j
    b_dec = _frozen_share(model, sae, TOKENS, feature, up_hook,
                          lambda x: up_sae.b_dec.detach().expand_as(x).clone(), hook, rule)  # fmt: skip
    assert res.b_dec == pytest.approx(b_dec, rel=1e-4, abs=1e-5)
    assert res.bos == 0.0


def _text_after_bos(model) -> torch.Tensor:
    """A window as the index builds it: the index's BOS (`default_bos_id`), then the tokens of a short text."""
    tok = model.tokenizer
    ids = tok.encode(
        "The fisherman cast his line from the muddy river bank at dawn.", add_special_tokens=False
    )
    return torch.tensor([default_bos_id(tok), *ids])


def test_the_index_window_bos_gets_the_bos_rule_on_the_tiny_model(tiny_model):
    # SmolLM2's tokenizer declares <|im_start|> (1) as BOS, but every indexed window starts with <|endoftext|> (0).
    tok = tiny_model.tokenizer
    tokens = _text_after_bos(tiny_model)
    assert int(tokens[0]) == default_bos_id(tok) != tok.bos_token_id
    assert _bias_free(tiny_model)
    sae = build_sae("standard")
    hook = "blocks.1.hook_resid_post"
    feature = _active_feature(tiny_model, sae, hook, tokens)
    res = depass_tokens(tiny_model, sae, hook, tokens, feature, rule="softmax")
    assert res.bos_position == 0
    with torch.no_grad():
        ref_bos = _reference_softmax_shares(tiny_model, sae, tokens, feature, bos=True)
        ref = _reference_softmax_shares(tiny_model, sae, tokens, feature, bos=False)
    assert ref_bos[:-1] != pytest.approx(ref[:-1], rel=1e-3)  # the BOS rule changes the split on this text
    assert list(res.scores_N) == pytest.approx(ref_bos[:-1], rel=1e-4, abs=1e-5)
    assert res.rest == pytest.approx(ref_bos[-1], abs=1e-5)
    # ignore_bos=False still finds the BOS but splits the MLPs as if it were an ordinary token.
    kept = depass_tokens(tiny_model, sae, hook, tokens, feature, rule="softmax", ignore_bos=False)
    assert kept.bos_position == 0
    assert list(kept.scores_N) == pytest.approx(ref[:-1], rel=1e-4, abs=1e-5)


def test_the_upstream_level_sets_the_index_window_bos_aside_on_the_tiny_model(tiny_model):
    # The BOS position's state (the sink: a huge residual in real models) is its own `bos` component, not credited to
    # the upstream features active there: checked against TL's frozen forward (gate_linear is linear per component).
    tokens = _text_after_bos(tiny_model)
    assert _bias_free(tiny_model)
    sae, up_sae = build_sae("standard"), build_sae("standard", seed=1)
    hook, up_hook, rule = "blocks.1.hook_resid_post", "blocks.0.hook_resid_post", "gate_linear"
    feature = _active_feature(tiny_model, sae, hook, tokens)
    res = depass_upstream(tiny_model, sae, hook, tokens, feature, up_sae, up_hook, rule=rule)
    _, clean = tiny_model.run_with_cache(tokens[None], names_filter=[up_hook])
    x = clean[up_hook][0]

    def only_bos(_):
        out = torch.zeros_like(x)
        out[0] = x[0]
        return out[None]

    bos = _frozen_share(tiny_model, sae, tokens, feature, up_hook, only_bos, hook, rule)
    assert abs(bos) > 1e-3
    assert res.bos == pytest.approx(bos, rel=1e-4, abs=1e-5)
    acts = up_sae.encode(clean[up_hook])[0].detach()
    active_at_bos = [i for i, j in enumerate(res.upstream_features_K) if acts[0, j] > 0]
    assert active_at_bos, "no chosen feature is active at BOS: the exclusion would go unchecked"
    for i in active_at_bos[:3]:
        j = res.upstream_features_K[i]
        part = acts[:, j, None] * up_sae.W_dec[j].detach()
        part[0] = 0.0  # features count from position 1 on
        want = _frozen_share(tiny_model, sae, tokens, feature, up_hook, lambda _, p=part: p[None], hook, rule)
        assert res.scores_K[i] == pytest.approx(want, rel=1e-4, abs=1e-5), j


def test_softmax_rule_by_hand():
    # 4 components (bos, token, rest, bias) x 2 positions x 1 neuron.
    g = torch.tensor([[[0.3], [0.2]], [[0.0], [0.1]], [[1e-6], [0.0]], [[0.0], [0.0]]])
    w = _softmax_split(g.clone(), torch.ones(2, 1), Roles(rest=2, bias=3, bos=0), temperature=0.1)
    # Zero rows marked -inf by the caller instead of found per entry: the same weights.
    marked = g.clone()
    marked[g.eq(0).all(-1)] = float("-inf")
    rows = _softmax_split(marked, torch.ones(2, 1), Roles(rest=2, bias=3, bos=0), 0.1, zeros_marked=True)
    assert torch.equal(w, rows)
    # Position 0: only BOS holds a share (rest below 1e-5 is treated as empty) -> 1.
    assert w[:, 0, 0].tolist() == pytest.approx([1.0, 0.0, 0.0, 0.0])
    # Position 1: BOS is excluded after position 0 -> the token takes everything.
    assert w[:, 1, 0].tolist() == pytest.approx([0.0, 1.0, 0.0, 0.0])
    g2 = torch.tensor([[[0.0]], [[0.2]], [[-0.1]], [[0.0]]])
    w2 = _softmax_split(g2, torch.ones(1, 1), Roles(rest=2, bias=3), temperature=0.1)
    e = np.exp([2.0, -1.0])
    assert w2[:, 0, 0].tolist() == pytest.approx([0.0, e[0] / e.sum(), e[1] / e.sum(), 0.0])
    # Nobody holds a share -> the residual component takes it, so the weights still sum to 1.
    w3 = _softmax_split(torch.zeros(3, 1, 1), torch.ones(1, 1), Roles(rest=1, bias=2), temperature=0.1)
    assert w3[:, 0, 0].tolist() == [0.0, 1.0, 0.0]


def test_bad_input_raises_typed_errors():
    model = build_llama()
    sae = build_sae("standard")
    with pytest.raises(HookNotFoundError):
        depass_tokens(model, sae, "blocks.9.hook_resid_post", TOKENS, 0)
    with pytest.raises(UnsupportedHookError, match="hook_resid_pre/mid/post"):
        depass_tokens(model, sae, "blocks.0.attn.hook_z", TOKENS, 0)
    with pytest.raises(FeatureOutOfRangeError, match=r"0\.\.47"):
        depass_tokens(model, sae, "blocks.1.hook_resid_post", TOKENS, 48)
    with pytest.raises(PositionOutOfRangeError):
        depass_tokens(model, sae, "blocks.1.hook_resid_post", TOKENS, 0, position=12)
    wide = StandardSAE(StandardSAEConfig(d_in=32, d_sae=8))
    with pytest.raises(SAEShapeMismatchError, match="d_in=32"):
        depass_components(model, wide, "blocks.1.hook_resid_post", TOKENS, 0)
    with pytest.raises(ValueError, match="softmax"):
        depass_tokens(model, sae, "blocks.1.hook_resid_post", TOKENS, 0, rule="relu")  # type: ignore[arg-type]


def test_baselines_satisfy_their_axioms():
    # Without norms: RMSNorm(αx) is flat in α except in a sliver near 0 (width ~sqrt(eps)/rms), which a 100-point
    # Riemann sum cannot resolve, so IG's completeness is only checkable on a smooth path.
    model = build_llama(normalization_type=None)
    sae = build_sae("standard")
    hook = "blocks.1.hook_resid_post"
    ig = integrated_gradients(model, sae, hook, TOKENS, 5, steps=100)
    # IG completeness: the scores sum to pre(x) - pre(zero embedding), computed here by a plain forward.
    readout = feature_readout(sae, 5)
    _, cache = model.run_with_cache(TOKENS[None], names_filter=[hook])
    zero = {}
    model.run_with_hooks(TOKENS[None], fwd_hooks=[("hook_embed", lambda x, hook: torch.zeros_like(x)),
                                                  (hook, lambda x, hook: zero.update(x=x.detach()))])  # fmt: skip
    diff = float(
        readout.pre_activation_N(cache[hook][0, -1:])[0] - readout.pre_activation_N(zero["x"][0, -1:])[0]
    )
    assert sum(ig.scores_N) == pytest.approx(diff, rel=2e-2, abs=1e-3)
    gxi = grad_x_input(model, sae, hook, TOKENS, 5)
    assert len(gxi.scores_N) == TOKENS.numel() and gxi.method == "grad_x_input"
    # grad·e_n is the derivative along token n's own embedding: a central difference of plain forwards.
    for n in (2, 7):
        ends = []
        for sign in (1.0, -1.0):
            out = {}

            def scale_n(x, hook, sign=sign, n=n):
                x = x.clone()
                x[:, n] *= 1 + sign * 1e-2
                return x

            with torch.no_grad():
                model.run_with_hooks(TOKENS[None], fwd_hooks=[("hook_embed", scale_n),
                                                              (hook, lambda x, hook, out=out: out.update(x=x))])  # fmt: skip
            ends.append(float(readout.pre_activation_N(out["x"][0, -1:])[0]))
        assert gxi.scores_N[n] == pytest.approx((ends[0] - ends[1]) / 2e-2, rel=1e-2, abs=1e-3)
    roll = attention_rollout(model, hook, TOKENS)
    assert sum(roll.scores_N) == pytest.approx(1.0, rel=1e-5) and min(roll.scores_N) >= 0
    a = random_scores(TOKENS, np.random.default_rng(3))
    assert (
        a
        == random_scores(TOKENS, np.random.default_rng(3))
        != random_scores(TOKENS, np.random.default_rng(4))
    )


def _reference_softmax_shares(model, sae, tokens, feature, bos, temperature=0.1):
    """Token shares by the paper's rule written out plainly (spec A.2), for a bias-free model (Llama-style: RMSNorm,
    gated MLP; or the tiny LayerNorm/GELU one with TL's zero-initialised biases).

    Dense (N + 1 components: tokens, then the residual one), per-entry masks, every position carried to the end,
    TL's own repeat-interleaved W_V: none of the shortcuts of the library's propagation.
    """
    assert _bias_free(model)
    _, cache = model.run_with_cache(tokens[None])
    N = tokens.numel()
    d = model.cfg.d_model
    ln = model.cfg.normalization_type == "LN"

    def norm(C, scale, w):
        if ln:  # centring is linear, so it applies per component; the scale is the clean one
            C = C - C.mean(-1, keepdim=True)
        return C / scale * w

    C = torch.zeros(N + 1, N, d)
    C[torch.arange(N), torch.arange(N)] = cache["blocks.0.hook_resid_pre"][0]
    for layer, block in enumerate(model.blocks):
        pre = f"blocks.{layer}."
        x = norm(C, cache[pre + "ln1.hook_scale"][0], block.ln1.w)
        v = torch.einsum("mkd,hde->mhke", x, block.attn.W_V)
        z = torch.einsum("hqk,mhke->mqhe", cache[pre + "attn.hook_pattern"][0], v)
        C = C + torch.einsum("mqhe,hed->mqd", z, block.attn.W_O)
        x = norm(C, cache[pre + "ln2.hook_scale"][0], block.ln2.w)
        g = x @ (block.mlp.W_gate if model.cfg.gated_mlp else block.mlp.W_in)
        g[N] = torch.where(g[N].abs() < 1e-5, torch.zeros_like(g[N]), g[N])
        mask = g != 0
        if bos:
            mask[0, 1:] = False  # BOS takes no share after position 0
        nobody = ~mask.any(0)
        logits = torch.where(mask, g / temperature, torch.full_like(g, float("-inf")))
        logits[N] = torch.where(nobody, torch.zeros_like(logits[N]), logits[N])
        C = C + (torch.softmax(logits, 0) * cache[pre + "mlp.hook_post"][0]) @ block.mlp.W_out
    return (C[:, -1] @ sae.W_enc[:, feature]).tolist()


def test_softmax_rule_equals_a_plain_reimplementation():
    model = build_llama()
    sae = build_sae("standard")
    N = TOKENS.numel()
    with torch.no_grad():
        ref = _reference_softmax_shares(model, sae, TOKENS, 7, bos=False)
        ref_bos = _reference_softmax_shares(model, sae, TOKENS, 7, bos=True)
    # The random model has no tokenizer, so depass_tokens finds no BOS and applies no BOS rule.
    res = depass_tokens(model, sae, "blocks.1.hook_resid_post", TOKENS, 7, rule="softmax")
    assert res.bos_position is None
    assert list(res.scores_N) == pytest.approx(ref[:-1], rel=1e-4, abs=1e-5)
    assert res.rest == pytest.approx(ref[-1], abs=1e-5)
    # With position 0 as BOS (propagation kept to the last position only, as depass_tokens runs it).
    trace = trace_model(model, TOKENS, last_block=1)
    C = torch.zeros(N + 2, N, D)
    C[torch.arange(N), torch.arange(N)] = trace.state(0)
    out = propagate(model, trace, C, 0, 4, Roles(rest=N, bias=N + 1, bos=0), "softmax", keep=N - 1)
    assert out.shape == (N + 2, 1, D)
    scores = (out[:, 0] @ sae.W_enc[:, 7].detach()).tolist()
    assert scores[: N + 1] == pytest.approx(ref_bos, rel=1e-4, abs=1e-5)
    assert ref_bos != pytest.approx(ref, rel=1e-3)  # the BOS rule changes the split
