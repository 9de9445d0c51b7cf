"""Ablation and steering on planted SAE features of the tiny model, whose effects are known by construction.

Feature 0 fires on the token "def" only (ReLU(10·(⟨x, e⟩/|e|² − 0.9)) at ``hook_embed``, the same planted encoder as
the CoSy tests) and decodes to that token's embedding, so zero-ablating it deletes "def" from the model's input.
Feature 1 never fires and decodes to the unembedding column of " Paris" at the last block's output: steering along
it must promote " Paris" — in the large-alpha limit the logits become exactly LN_final(direction) @ W_U.
"""

from __future__ import annotations

import math

import pytest
import torch
from sae_lens import StandardSAE, StandardSAEConfig

from sae_workbench.evaluation.attribution import ablate_feature, steer_feature
from sae_workbench.evaluation.attribution.errors import FeatureOutOfRangeError, PositionOutOfRangeError
from sae_workbench.sae.io import SAEShapeMismatchError

EMBED_HOOK = "hook_embed"
LAST_HOOK = "blocks.1.hook_resid_post"
DEF_TEXT = "x = 1\ndef foo(x):\n    return x\n\ndef bar(y):\n    pass"
PLAIN_TEXT = "The cat sat on the mat and looked at the birds."
PARIS = " Paris"


def _token_id(model, text: str) -> int:
    ids = model.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == 1, ids
    return int(ids[0])


@pytest.fixture(scope="module")
def planted(tiny_model):
    """(def detector SAE at hook_embed, " Paris" steering SAE at the last block, def id, Paris id)."""
    def_id, paris_id = _token_id(tiny_model, "def"), _token_id(tiny_model, PARIS)
    d = tiny_model.cfg.d_model
    with torch.no_grad():
        e_D = tiny_model.W_E[def_id].detach().clone()
        detector = StandardSAE(StandardSAEConfig(d_in=d, d_sae=2, apply_b_dec_to_input=False))
        for p in detector.parameters():
            p.zero_()
        detector.W_enc[:, 0] = 10 * e_D / e_D.pow(2).sum()
        detector.b_enc[0] = -9.0
        detector.b_enc[1] = -1.0  # feature 1 of this SAE never fires
        detector.W_dec[0] = e_D
        detector.W_dec[1] = torch.randn(d)
        steer = StandardSAE(StandardSAEConfig(d_in=d, d_sae=2, apply_b_dec_to_input=False))
        for p in steer.parameters():
            p.zero_()
        u_D = tiny_model.W_U[:, paris_id].detach().clone()
        steer.W_dec[1] = u_D / u_D.norm()
        steer.b_enc.fill_(-1.0)
    return detector, steer, def_id, paris_id


def test_zero_ablation_changes_loss_only_where_the_feature_fires(tiny_model, planted):
    detector, _, def_id, _ = planted
    tokens_BN = tiny_model.to_tokens(DEF_TEXT)
    truth_N = tokens_BN[0] == def_id
    assert int(truth_N.sum()) == 2
    ab = ablate_feature(tiny_model, detector, EMBED_HOOK, tokens_BN, feature=0, mode="zero")
    # The planted encoder fires exactly on the "def" tokens.
    assert list(ab.fired_BN[0]) == truth_N.tolist()
    # The SAE error term is kept: without ablation the spliced forward is the clean one.
    assert ab.splice_max_logit_error < 1e-4
    first = int(truth_N.nonzero()[0])
    delta = ab.delta_loss_BN[0]
    kl = ab.kl_BN[0]
    # Causal model: nothing before the first "def" can change; every position that reads a "def" does.
    assert all(abs(v) < 1e-5 for v in delta[:first]) and all(abs(v) < 1e-6 for v in kl[:first])
    assert all(kl[n] > 1e-4 for n in truth_N.nonzero().flatten().tolist())
    assert not math.isnan(ab.mean_delta_loss_fired)
    # Removing the input token "def" moves the prediction at its positions, so logits shift both ways.
    assert ab.promoted[0].logit_change > 0 > ab.suppressed[0].logit_change
    # A text without "def": the feature never fires, and zero-ablation is exactly the clean forward.
    plain = ablate_feature(tiny_model, detector, EMBED_HOOK, tiny_model.to_tokens(PLAIN_TEXT), 0, mode="zero")
    assert not any(plain.fired_BN[0])
    assert max(abs(v) for v in plain.delta_loss_BN[0]) < 1e-5 and plain.mean_kl < 1e-6
    assert math.isnan(plain.mean_delta_loss_fired)


def test_mean_ablation_sets_the_feature_to_its_mean(tiny_model, planted):
    detector, _, def_id, _ = planted
    tokens_BN = tiny_model.to_tokens(DEF_TEXT)
    ab = ablate_feature(tiny_model, detector, EMBED_HOOK, tokens_BN, feature=0, mode="mean")
    # The planted activation is 10·(1 − 0.9) = 1 on each exact "def" embedding and 0 elsewhere (BOS excluded).
    n_def = int((tokens_BN[0, 1:] == def_id).sum())
    assert ab.value == pytest.approx(n_def / (tokens_BN.shape[1] - 1), rel=1e-4)
    # Mean-ablation also writes the mean where the feature is silent, so the very first prediction moves too.
    assert ab.kl_BN[0][0] > 0
    # An explicit value: writing the planted activation 1 everywhere leaves the "def" positions' inputs as they
    # were but adds "def" to every other position, so the first prediction moves more than under the mean.
    fixed = ablate_feature(
        tiny_model, detector, EMBED_HOOK, tokens_BN, feature=0, mode="mean", mean_value=1.0
    )
    assert fixed.value == 1.0
    assert fixed.kl_BN[0][0] > ab.kl_BN[0][0]


def test_positive_steering_promotes_the_tokens_its_decoder_writes(tiny_model, planted):
    _, steer, _, paris_id = planted
    prompt_N = tiny_model.to_tokens(PLAIN_TEXT)[0]
    # Ground truth, computed from the weights: in the large-alpha limit the final LayerNorm sees only the decoder
    # row, so the logits tend to LN_final(direction) @ W_U + b_U.
    with torch.no_grad():
        limit_V = tiny_model.unembed(tiny_model.ln_final(steer.W_dec[1][None, None]))[0, 0]
    expected_top = int(limit_V.argmax())
    assert expected_top == paris_id
    res = steer_feature(
        tiny_model, steer, LAST_HOOK, prompt_N, feature=1, alphas=(-200.0, 5.0, 200.0), n_new=4
    )
    neg, small, big = res.effects
    assert [e.alpha for e in res.effects] == [-200.0, 5.0, 200.0]
    assert big.promoted[0].token_id == paris_id and big.promoted[0].logit_change > 0
    assert neg.suppressed[0].token_id == paris_id and neg.suppressed[0].logit_change < 0
    # A small push already raises " Paris" (its logit change is positive), and more push raises it more.
    small_change = next((s.logit_change for s in small.promoted if s.token_id == paris_id), None)
    assert small_change is not None and 0 < small_change < big.promoted[0].logit_change
    assert big.continuation_ids == (paris_id,) * 4 and PARIS in big.continuation
    assert res.baseline_continuation != big.continuation
    assert big.mean_kl > small.mean_kl > 0
    assert res.to_dict()["effects"][2]["continuation_ids"] == [paris_id] * 4


def test_effects_reject_bad_input(tiny_model, planted):
    detector, _, _, _ = planted
    tokens_BN = tiny_model.to_tokens(DEF_TEXT)
    with pytest.raises(FeatureOutOfRangeError):
        ablate_feature(tiny_model, detector, EMBED_HOOK, tokens_BN, feature=2)
    with pytest.raises(PositionOutOfRangeError):
        ablate_feature(tiny_model, detector, EMBED_HOOK, tokens_BN[:, :1], feature=0)
    with pytest.raises(PositionOutOfRangeError):
        steer_feature(tiny_model, detector, EMBED_HOOK, tokens_BN, feature=0)
    with pytest.raises(ValueError, match="zero"):
        ablate_feature(tiny_model, detector, EMBED_HOOK, tokens_BN, feature=0, mode="median")  # type: ignore[arg-type]
    wide = StandardSAE(StandardSAEConfig(d_in=32, d_sae=2))
    with pytest.raises(SAEShapeMismatchError, match="d_in=32"):
        ablate_feature(tiny_model, wide, EMBED_HOOK, tokens_BN, feature=0)
