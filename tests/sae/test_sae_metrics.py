"""Hand-computed checks of every metric formula, and the splice metrics on the tiny model."""

import json
import math

import pytest
import torch
from sae_lens import StandardSAE, StandardSAEConfig

from sae_workbench.sae import metrics as m

X = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
R = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 2.0]])


def test_mse_by_hand():
    # squared errors per token: 0, 1, 1 → mean 2/3
    assert m.mse(X, R) == pytest.approx(2 / 3)


def test_explained_variance_and_fvu_by_hand():
    # mean (2/3, 2/3); Σ‖x − mean‖² = (1/9+4/9)+(4/9+1/9)+(1/9+1/9) = 12/9; Σ err = 2 → EV = 1 − 2/(12/9) = −0.5
    assert m.explained_variance(X, R) == pytest.approx(-0.5)
    assert m.explained_variance(X, X) == pytest.approx(1.0)


def test_cosine_by_hand():
    # token 1: 1; token 2: recon is zero → cosine 0 (torch eps); token 3: (1+2)/(√2·√5)
    assert m.cosine(X, R) == pytest.approx((1 + 0 + 3 / math.sqrt(10)) / 3, abs=1e-6)


def test_l0_l1_by_hand():
    feats = torch.tensor([[0.0, 2.0, -1.0], [0.0, 0.0, 0.5]])
    assert m.l0(feats) == pytest.approx(1.5)  # (2 + 1) / 2
    assert m.l1(feats) == pytest.approx(1.75)  # (3 + 0.5) / 2


def test_density_dead_dense_histogram_by_hand():
    density = m.feature_density(torch.tensor([0, 1, 5, 50]), 100)
    assert density.tolist() == pytest.approx([0.0, 0.01, 0.05, 0.5])
    assert m.dead_fraction(density) == 0.25
    assert m.dense_fraction(density) == 0.25  # only 0.5 > 0.1
    hist = m.density_histogram(density, bins=4, low=-4.0)
    assert hist["dead"] == 1
    assert hist["counts"] == [0, 0, 2, 1]  # log10: −2, −1.3 in [−2, −1); −0.3 in [−1, 0]
    assert sum(hist["counts"]) + hist["dead"] == 4


def test_kl_and_recovered_by_hand():
    clean = torch.log(torch.tensor([[0.5, 0.5]]))
    other = torch.log(torch.tensor([[0.25, 0.75]]))
    expected = 0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75)
    assert m.kl_divergence(clean, other).item() == pytest.approx(expected)
    assert m.kl_divergence(clean, clean).item() == pytest.approx(0.0, abs=1e-7)
    assert m.recovered(clean=2.0, sae=3.0, zero=6.0) == pytest.approx(0.75)
    assert math.isnan(m.recovered(1.0, 1.0, 1.0))


def test_every_metric_states_direction():
    for name, info in m.METRICS.items():
        assert info.doc, name
        if info.higher_is_better is True:
            assert "higher is better" in info.doc, name
        if info.higher_is_better is False:
            assert "lower is better" in info.doc, name


def _identity_sae(d: int) -> StandardSAE:
    """relu(x) − relu(−x) = x: a 2d-feature SAE that reconstructs perfectly."""
    sae = StandardSAE(StandardSAEConfig(d_in=d, d_sae=2 * d, apply_b_dec_to_input=False))
    eye = torch.eye(d)
    with torch.no_grad():
        sae.W_enc.copy_(torch.cat([eye, -eye], dim=1))
        sae.W_dec.copy_(torch.cat([eye, -eye], dim=0))
        sae.b_enc.zero_()
        sae.b_dec.zero_()
    return sae


def test_splice_metrics_on_tiny_model(tiny_model, tmp_path):
    torch.manual_seed(0)
    tokens = torch.randint(1, 1000, (2, 16))
    tokens[:, 0] = 0
    mask = torch.ones_like(tokens, dtype=torch.bool)
    mask[:, 0] = False
    hook = "blocks.0.hook_resid_post"
    perfect = m.evaluate_sae(_identity_sae(64), tiny_model, hook, [(tokens, mask)])
    assert perfect["n_tokens"] == 30
    assert perfect["explained_variance"] == pytest.approx(1.0, abs=1e-5)
    assert perfect["ce_loss_sae"] == pytest.approx(perfect["ce_loss_clean"], abs=1e-4)
    assert perfect["ce_loss_recovered"] == pytest.approx(1.0, abs=1e-3)
    assert perfect["kl_sae"] == pytest.approx(0.0, abs=1e-5)
    assert perfect["l0"] == pytest.approx(64.0, abs=1.0)  # every coordinate is non-zero once (±)
    assert perfect["dead_fraction"] < 0.05  # a coordinate of one sign on all 30 tokens leaves its twin dead
    # An SAE that reconstructs nothing (all-zero decoder) behaves like zero-ablation.
    useless = _identity_sae(64)
    with torch.no_grad():
        useless.W_dec.zero_()
    bad = m.evaluate_sae(useless, tiny_model, hook, [(tokens, mask)])
    assert bad["ce_loss_recovered"] == pytest.approx(0.0, abs=1e-4)
    assert bad["kl_recovered"] == pytest.approx(0.0, abs=1e-4)
    assert bad["ce_loss_zero"] != pytest.approx(bad["ce_loss_clean"])
    path = m.write_metrics(tmp_path, perfect, {"hook": hook})
    saved = json.loads(path.read_text())
    assert saved["directions"]["explained_variance"]["higher_is_better"] is True
    assert saved["directions"]["mse"]["higher_is_better"] is False
    assert saved["eval_config"] == {"hook": hook}


def _reference_metrics(sae, model, hook, tokens, mask):
    """The original (slow) definition: full forwards, whole logits tensors, metrics on concatenated tokens."""
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, names_filter=[hook])
        x = cache[hook][mask].float()
        feats = sae.encode(x)
        recon = sae.decode(feats)

        def run(replace):
            def fn(act, hook):
                return torch.where(mask.unsqueeze(-1), replace(act).to(act.dtype), act)

            return model.run_with_hooks(tokens, fwd_hooks=[(hook, fn)])

        clean = model(tokens)
        spliced = run(lambda a: sae.decode(sae.encode(a.float())))
        zero = run(torch.zeros_like)
    pred = mask[:, :-1]
    targets = tokens[:, 1:][pred]
    ce = {
        name: float(torch.nn.functional.cross_entropy(logits[:, :-1][pred], targets))
        for name, logits in (("clean", clean), ("sae", spliced), ("zero", zero))
    }
    clean_n = clean[:, :-1][pred]
    return {
        "explained_variance": m.explained_variance(x, recon),
        "mse": m.mse(x, recon),
        "cosine": m.cosine(x, recon),
        "l0": m.l0(feats),
        "l1": m.l1(feats),
        "ce_loss_clean": ce["clean"],
        "ce_loss_sae": ce["sae"],
        "ce_loss_zero": ce["zero"],
        "kl_sae": float(m.kl_divergence(clean_n, spliced[:, :-1][pred]).mean()),
        "kl_zero": float(m.kl_divergence(clean_n, zero[:, :-1][pred]).mean()),
    }


def test_fast_path_equals_reference_definition(tiny_model):
    from sae_lens import TopKTrainingSAE, TopKTrainingSAEConfig

    torch.manual_seed(1)
    tokens = torch.randint(1, 5000, (5, 20))
    tokens[:, 0] = 0
    mask = torch.rand(5, 20) > 0.2
    mask[:, 0] = False
    hook = "blocks.0.hook_resid_post"
    sae = TopKTrainingSAE(TopKTrainingSAEConfig(d_in=64, d_sae=128, k=8))
    expected = _reference_metrics(sae, tiny_model, hook, tokens, mask)
    # Batches of 3 and 2 windows, sub-batched by 2, positions reduced 7 at a time: every chunk boundary is crossed.
    batches = [(tokens[:3], mask[:3]), (tokens[3:], mask[3:])]
    got = m.evaluate_sae(sae, tiny_model, hook, batches, batch_windows=2, chunk_positions=7)
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, rel=1e-4, abs=1e-5), name
    assert got["n_tokens"] == int(mask.sum())
    assert got["n_ce_tokens"] == int(mask[:, :-1].sum())
    # CE on the first 2 windows only: reconstruction metrics unchanged, CE equals the reference on those windows.
    part = m.evaluate_sae(sae, tiny_model, hook, batches, ce_windows=2, batch_windows=2)
    assert part["explained_variance"] == pytest.approx(expected["explained_variance"], rel=1e-4)
    first_two = _reference_metrics(sae, tiny_model, hook, tokens[:2], mask[:2])
    assert part["ce_loss_sae"] == pytest.approx(first_two["ce_loss_sae"], rel=1e-4)
    assert part["kl_sae"] == pytest.approx(first_two["kl_sae"], rel=1e-4, abs=1e-6)
    assert "ce_loss_clean" not in m.evaluate_sae(sae, tiny_model, hook, batches, ce_windows=0)
