"""First-letter probing data and k-sparse probing (evaluation/absorption/probes.py) on the tiny model and planted data."""

from dataclasses import replace

import numpy as np
import pytest
import scipy.sparse as sp

from sae_workbench.evaluation.absorption.eval import AbsorptionConfig, ProbeTooWeakError, run_absorption
from sae_workbench.evaluation.absorption.probes import (
    LETTERS,
    ProbingConfig,
    alphabetic_vocab,
    build_prompt,
    collect_probe_activations,
    first_letter_index,
    k_sparse_probing,
    main_features,
)

TINY_CFG = ProbingConfig(layer=1, max_words=300, n_icl_examples=2, batch_size=32, probe_epochs=5)


def test_alphabetic_vocab_decodes_leading_space(tiny_model) -> None:
    vocab = alphabetic_vocab(tiny_model.tokenizer)
    texts = {t for _, t in vocab}
    assert len(vocab) > 40_000  # design.md: 47,078 alphabetic tokens in SmolLM2's vocabulary
    assert " hello" in texts and "Java" in texts  # "Ġhello" decodes to " hello"
    assert all(t.lstrip(" ").isalpha() and t.isascii() and not t.startswith("  ") for t in texts)
    assert not any("Ġ" in t for t in texts)


def test_prompt_text_golden() -> None:
    head, full = build_prompt(" sun", ["Java", " moon"], "{word} has the first letter:")
    assert full == "Java has the first letter: J\n moon has the first letter: M\n sun has the first letter:"
    assert head == "Java has the first letter: J\n moon has the first letter: M\n sun"
    assert first_letter_index(" Zebra") == 25


def test_split_and_cache(tiny_model, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))
    acts = collect_probe_activations(tiny_model, TINY_CFG)
    assert acts.n_dropped == 0
    assert len(acts.train_words) == 240 and len(acts.test_words) == 60  # 80/20 split by word
    assert not set(acts.train_words) & set(acts.test_words)
    # Cached: a second call loads the same arrays from disk.
    again = collect_probe_activations(tiny_model, TINY_CFG)
    np.testing.assert_array_equal(again.test_resid_ND, acts.test_resid_ND)
    assert again.test_words == acts.test_words


def test_prompts_put_bos_first_and_read_the_word_token(tiny_model) -> None:
    import random

    from sae_workbench.evaluation.absorption.probes import _prompts

    tok = tiny_model.tokenizer
    words = [(tid, w) for tid, w in alphabetic_vocab(tok)][::997]
    ids, positions, kept = _prompts(tok, words, TINY_CFG, 0, random.Random(0))
    assert len(kept) == len(words)
    suffix = tok(" has the first letter:", add_special_tokens=False)["input_ids"]
    for row, pos, (tid, _) in zip(ids, positions, words, strict=True):
        assert row[0] == 0  # <|endoftext|>, the document separator, not <|im_start|>
        assert row[pos] == tid
        assert row[pos + 1 :] == suffix  # offset computed from the tokenizer: −(len(suffix) + 1)


def test_batched_read_equals_unbatched(tiny_model, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))
    batched = collect_probe_activations(tiny_model, replace(TINY_CFG, max_words=60))
    single = collect_probe_activations(tiny_model, replace(TINY_CFG, max_words=60, batch_size=1))
    np.testing.assert_allclose(batched.train_resid_ND, single.train_resid_ND, atol=1e-5)


def test_weak_probes_are_refused_with_f1s(tiny_model, tmp_path, monkeypatch) -> None:
    from sae_lens import SAE, StandardSAEConfig

    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))
    sae = SAE.from_dict(StandardSAEConfig(d_in=64, d_sae=128).to_dict())
    with pytest.raises(ProbeTooWeakError, match=r"probe F1 per letter: a=\d\.\d\d, b="):
        run_absorption(tiny_model, sae, AbsorptionConfig(probing=TINY_CFG))


def test_sae_from_another_model_is_refused(tiny_model) -> None:
    from sae_lens import SAE, StandardSAEConfig

    from sae_workbench.evaluation.absorption.eval import SAEMismatchError, check_sae_fits_probe

    with pytest.raises(SAEMismatchError, match="d_in=576"):
        check_sae_fits_probe(
            SAE.from_dict(StandardSAEConfig(d_in=576, d_sae=64).to_dict()), tiny_model, TINY_CFG.hook()
        )
    cfg = StandardSAEConfig(d_in=64, d_sae=64)
    cfg.metadata.hook_name = "blocks.0.hook_resid_post"
    with pytest.raises(SAEMismatchError, match=r"blocks\.0\.hook_resid_post"):
        check_sae_fits_probe(SAE.from_dict(cfg.to_dict()), tiny_model, TINY_CFG.hook())


def test_main_features_stop_when_f1_stops_rising() -> None:
    feats = [[5], [5, 9], [5, 9, 2], [5, 9, 2, 7]]
    assert main_features([0.5, 0.6, 0.62, 0.9], feats) == [5, 9]  # +0.02 ≤ τ stops at k = 2
    assert main_features([0.5, 0.53, 0.9, 0.9], feats) == [5]  # +0.03 is not > τ
    assert main_features([0.0, 0.0, 0.0, 0.0], feats) == [5]  # k = 1 is always taken


def _planted(n_per_letter: int, seed: int) -> tuple[sp.csr_matrix, np.ndarray]:
    """Feature i fires for letter i; letter 'a' is split: half its words use feature 0, half feature 26."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(26), n_per_letter)
    x = rng.random((len(labels), 40)) * 0.05 * (rng.random((len(labels), 40)) < 0.1)
    x[np.arange(len(labels)), labels] = 1.0 + rng.random(len(labels))
    a_rows = np.nonzero(labels == 0)[0]
    x[a_rows[::2], 0] = 0.0
    x[a_rows[::2], 26] = 1.0
    return sp.csr_matrix(x), labels


def test_k_sparse_probing_finds_planted_and_split_features() -> None:
    train_x, train_y = _planted(30, seed=0)
    test_x, test_y = _planted(10, seed=1)
    results = k_sparse_probing(train_x, train_y, test_x, test_y, max_k=4, epochs=30, batch_size=64, seed=0)
    by_letter = {r.letter: r for r in results}
    assert sorted(by_letter["a"].main_feature_ids) == [0, 26]  # the split letter needs both features
    assert by_letter["a"].f1_by_k[1] > by_letter["a"].f1_by_k[0] + 0.03
    for i, letter in enumerate(LETTERS[1:], start=1):
        assert by_letter[letter].main_feature_ids == [i]
        assert by_letter[letter].f1_by_k[0] > 0.95


def test_letter_probes_train_at_saebench_batch_64_and_honour_the_field() -> None:
    """SAEBench trains the letter probes at batch 64 (sae_bench/evals/absorption/common.py train_and_save_probes(
    batch_size=64) → train_linear_probe_for_task): by default, training on N words takes ceil(N / 64) Adam steps
    per epoch on batches of 64 (the last one the remainder), counted by hooks on the real optimiser and probe. The
    field reaches the optimiser: 64 and 4096 give different probes, 4096 ≥ N equals one full batch per epoch."""
    import torch
    from torch.nn.modules.module import register_module_forward_pre_hook
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from sae_workbench.evaluation.absorption.probes import ProbeActivations, train_letter_probes

    rng = np.random.default_rng(0)
    means = rng.normal(size=(26, 64)).astype(np.float32)
    y_tr, y_te = rng.integers(0, 26, 600), rng.integers(0, 26, 200)
    acts = ProbeActivations(
        [], [], y_tr, y_te,
        means[y_tr] + 0.5 * rng.normal(size=(600, 64)).astype(np.float32),
        means[y_te] + 0.5 * rng.normal(size=(200, 64)).astype(np.float32), 0,
    )  # fmt: skip
    cfg = ProbingConfig()  # SAEBench's 50 epochs
    steps: list[str] = []
    batch_rows: list[int] = []
    step_hook = register_optimizer_step_post_hook(lambda opt, args, kwargs: steps.append(type(opt).__name__))
    forward_hook = register_module_forward_pre_hook(
        lambda module, args: (
            batch_rows.append(args[0].shape[0]) if isinstance(module, torch.nn.Linear) else None
        )
    )
    try:
        small = train_letter_probes(acts, cfg)
    finally:
        step_hook.remove()
        forward_hook.remove()
    # 600 words: ceil(600 / 64) = 10 steps per epoch, nine of 64 and one of 600 - 9·64 = 24, for each of 50 epochs.
    assert steps == ["Adam"] * 50 * 10
    assert batch_rows == ([64] * 9 + [24]) * 50
    full = train_letter_probes(acts, replace(cfg, probe_batch_size=4096))
    same_full = train_letter_probes(acts, replace(cfg, probe_batch_size=600))
    assert not np.allclose(small.weights_LD, full.weights_LD)
    np.testing.assert_allclose(full.weights_LD, same_full.weights_LD, rtol=1e-6)
    # 50 epochs of 10 steps learn the 26 class-mean letters (measured F1 0.84); 50 full-batch steps do not (0.22).
    assert np.mean(small.f1) > 0.7 and np.mean(full.f1) < 0.4
