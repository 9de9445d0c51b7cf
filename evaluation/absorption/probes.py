"""First-letter probing data and probes for the absorption eval (Chanin et al., arXiv 2409.14507; SAEBench).

Vocabulary: every token made only of a–z/A–Z with an optional leading space (decoded through the tokenizer, so
SmolLM2's "Ġ" prefix becomes a space). Prompt: `n_icl_examples` lines "{word} has the first letter: X", then
"{word} has the first letter:". The residual stream is read at the word token, whose position is found by
tokenizing the prompt up to the word (never hard-coded), after the model's document separator as BOS.
Prompts are batched by token length (no padding is ever read) and the model runs only up to the hook's layer.

    acts = collect_probe_activations(model, ProbingConfig(layer=3))  # cached on disk, resumable
    probes = train_letter_probes(acts, ProbingConfig())
    probes.f1  # 26 F1s on the held-out 20% of words
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import f1_score
from tqdm.auto import tqdm

from sae_workbench import paths
from sae_workbench.errors import WorkbenchError
from sae_workbench.models import forward_to_hooks

log = logging.getLogger(__name__)

LETTERS = "abcdefghijklmnopqrstuvwxyz"
# SAEBench eval_config.py defaults.
SAEBENCH_TEMPLATE = "{word} has the first letter:"
F1_JUMP_THRESHOLD = 0.03
MAX_K = 10


class ProbingDataError(WorkbenchError):
    """The first-letter dataset cannot be built (too few words, a template without {word}, …)."""


@dataclass(frozen=True)
class ProbingConfig:
    """How the first-letter probing data is built and the probes are trained."""

    layer: int = 3
    """Residual layer read (blocks.<layer>.hook_resid_post). SmolLM2 default 3: probe F1 is flat (0.81–0.83)
    across layers 0–8 and 26/26 letters exceed 0.6 with the full vocabulary (design.md), and layer 3 is the
    workbench's default SAE hook."""
    template: str = SAEBENCH_TEMPLATE
    """Prompt template with a {word} slot (SAEBench's)."""
    n_icl_examples: int = 5
    """In-context examples per prompt. SAEBench uses 10; 5 halves the tokens per prompt on CPU and was the
    setting measured in design.md."""
    max_words: int | None = None
    """Cap on the vocabulary (a seeded sample); None uses all alphabetic tokens. Rare letters need ≥ 20k words."""
    train_fraction: float = 0.8
    """Share of words used to train the probes; the rest evaluates them and the absorption (split by word)."""
    seed: int = 42
    """Seeds the word split, the ICL examples and probe training (SAEBench random_seed)."""
    batch_size: int = 64
    """Prompts per model forward."""
    bos_id: int | None = None
    """Token prepended to every prompt; None = the model's document separator (`default_bos_id`)."""
    probe_epochs: int = 50
    """Epochs of the 26 one-vs-rest logistic probes (SAEBench train_and_save_probes)."""
    probe_lr: float = 1e-2
    """Adam learning rate of the probes (SAEBench)."""
    probe_weight_decay: float = 1e-4
    """Weight decay of the residual probes (SAEBench train_linear_probe_for_task)."""
    probe_batch_size: int = 64
    """Words per Adam step of the residual probes. SAEBench: 64 — `train_and_save_probes(batch_size=64)` in
    sae_bench/evals/absorption/common.py passes its batch size on to `train_linear_probe_for_task` (whose own
    default, 4096, is never used by the absorption eval). 50 epochs over ~37k train words = ~29k steps."""

    def hook(self) -> str:
        """The residual hook name read at `layer`."""
        return f"blocks.{self.layer}.hook_resid_post"


@dataclass(frozen=True)
class ProbeActivations:
    """Residuals at the word token for the train and test words, with their letters."""

    train_words: list[str]
    test_words: list[str]
    train_labels: np.ndarray
    """Letter index 0..25 per train word, shape (N_train,)."""
    test_labels: np.ndarray
    train_resid_ND: np.ndarray
    test_resid_ND: np.ndarray
    n_dropped: int
    """Words skipped because the prompt re-tokenized them into more than their own token."""


@dataclass(frozen=True)
class LetterProbes:
    """26 one-vs-rest logistic probes on the residual stream."""

    weights_LD: np.ndarray
    biases_L: np.ndarray
    f1: list[float]
    """Test-split F1 per letter (prediction: logit > 0, as SAEBench's f1_probe)."""
    test_scores_NL: np.ndarray
    """Probe logits on the test words, shape (N_test, 26)."""


def first_letter_index(word: str) -> int:
    """Letter index of a word's first alphabetic character (SAEBench's first_letter, lower-cased)."""
    return LETTERS.index(next(c for c in word.strip() if c.isalpha()).lower())


def alphabetic_vocab(tokenizer: Any, progress: bool = False) -> list[tuple[int, str]]:
    """(token id, decoded text) of every token made only of ASCII letters, with an optional leading space."""
    out = []
    for tid in tqdm(range(len(tokenizer)), desc="alphabetic vocabulary", unit="tok", disable=not progress):
        text = tokenizer.decode([tid])
        body = text[1:] if text.startswith(" ") else text
        if body and body.isascii() and body.isalpha():
            out.append((tid, text))
    return out


def _answer(word: str) -> str:
    """ICL answer: space + upper-case first letter (SAEBench first_letter_formatter)."""
    return " " + LETTERS[first_letter_index(word)].upper()


def build_prompt(word: str, examples: list[str], template: str) -> tuple[str, str]:
    """(text up to and including the word, full prompt text) for one word and its ICL examples."""
    if "{word}" not in template:
        raise ProbingDataError(f"template {template!r} has no {{word}} slot")
    before, after = template.split("{word}", 1)
    lines = [template.format(word=ex) + _answer(ex) for ex in examples]
    head = "\n".join([*lines, ""]) + before + word
    return head, head + after


def _tokenize(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    """Token ids without special tokens."""
    return tokenizer(texts, add_special_tokens=False)["input_ids"]


def _cache_dir(model_name: str, cfg: ProbingConfig, bos_id: int, vocab_size: int, dtype: str) -> Path:
    """Folder of cached probe activations, keyed by model, dtype, layer and every setting that changes them."""
    key = json.dumps(
        {
            "model": model_name,
            "dtype": dtype,
            # Probe-training settings do not change the residuals: leave them out so the cache is shared.
            "cfg": {k: v for k, v in asdict(cfg).items() if not k.startswith("probe_")} | {"bos_id": bos_id},
            "vocab": vocab_size,
            "v": 1,
        },
        sort_keys=True,
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    path = (
        paths.home() / "absorption" / "probe_acts" / f"{model_name.replace('/', '_')}-L{cfg.layer}-{digest}"
    )
    path.mkdir(parents=True, exist_ok=True)
    return path


def _split_words(
    vocab: list[tuple[int, str]], cfg: ProbingConfig
) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """Seeded 80/20 split by word (after the optional cap)."""
    rng = random.Random(cfg.seed)
    words = list(vocab)
    rng.shuffle(words)
    if cfg.max_words is not None:
        words = words[: cfg.max_words]
    n_train = int(len(words) * cfg.train_fraction)
    return words[:n_train], words[n_train:]


def _tokenize_chunked(tokenizer: Any, texts: list[str], bar: Any, chunk: int = 2048) -> list[list[int]]:
    """`_tokenize` in chunks, advancing `bar` by each chunk's texts."""
    out: list[list[int]] = []
    for s in range(0, len(texts), chunk):
        out.extend(_tokenize(tokenizer, texts[s : s + chunk]))
        bar.update(len(texts[s : s + chunk]))
    return out


def _prompts(
    tokenizer: Any,
    words: list[tuple[int, str]],
    cfg: ProbingConfig,
    bos_id: int,
    rng: random.Random,
    desc: str = "build prompts",
    progress: bool = False,
) -> tuple[list[list[int]], list[int], list[int]]:
    """Token ids and word positions of each prompt; ICL examples come from the same split; returns kept indices."""
    texts_head, texts_full = [], []
    pool = [w for _, w in words]
    for _, word in words:
        examples = rng.sample(pool, cfg.n_icl_examples + 1)
        examples = [e for e in examples if e != word][: cfg.n_icl_examples]
        head, full = build_prompt(word, examples, cfg.template)
        texts_head.append(head)
        texts_full.append(full)
    # Tokenizing ~95k texts takes tens of seconds on CPU: show it (two passes: heads, then full prompts).
    with tqdm(total=2 * len(words), desc=desc, unit="text", disable=not progress) as bar:
        heads = _tokenize_chunked(tokenizer, texts_head, bar)
        fulls = _tokenize_chunked(tokenizer, texts_full, bar)
    ids, positions, kept = [], [], []
    for i, ((tid, _), head, full) in enumerate(zip(words, heads, fulls, strict=True)):
        # The word must stay its own token in context, and the tail must not merge into it.
        if head[-1] != tid or full[: len(head)] != head:
            continue
        ids.append([bos_id, *full])
        positions.append(len(head))  # index of the word token after the BOS
        kept.append(i)
    return ids, positions, kept


@torch.no_grad()
def _read_resid(
    model: Any,
    ids: list[list[int]],
    positions: list[int],
    cfg: ProbingConfig,
    folder: Path,
    tag: str,
    progress: bool = False,
) -> np.ndarray:
    """Residuals at the word token, batched by prompt length; chunks are saved so a killed run resumes."""
    by_len: dict[int, list[int]] = defaultdict(list)
    for i, row in enumerate(ids):
        by_len[len(row)].append(i)
    batches = [
        group[s : s + cfg.batch_size]
        for _, group in sorted(by_len.items())
        for s in range(0, len(group), cfg.batch_size)
    ]
    out = np.zeros((len(ids), model.cfg.d_model), dtype=np.float32)
    hook = cfg.hook()
    chunk_size = 8  # batches per saved chunk (a killed run loses at most this much work)
    n_chunks = math.ceil(len(batches) / chunk_size)
    device = next(model.parameters()).device
    with tqdm(
        total=len(ids), desc=f"first-letter prompts ({tag})", unit="prompt", disable=not progress
    ) as bar:
        for c in range(n_chunks):
            chunk_path = folder / f"{tag}-chunk{c:05d}.npy"
            members = [i for b in batches[c * chunk_size : (c + 1) * chunk_size] for i in b]
            if chunk_path.exists():
                out[members] = np.load(chunk_path)
                bar.update(len(members))
                continue
            for b in batches[c * chunk_size : (c + 1) * chunk_size]:
                tokens_BT = torch.tensor([ids[i] for i in b], device=device)
                acts_BTD = forward_to_hooks(model, tokens_BT, [hook])[hook]
                pos_B = torch.tensor([positions[i] for i in b], device=device)
                resid_BD = acts_BTD[torch.arange(len(b), device=device), pos_B]
                out[b] = resid_BD.float().cpu().numpy()
                bar.update(len(b))
            tmp = chunk_path.with_name(chunk_path.stem + ".tmp.npy")
            np.save(tmp, out[members])
            tmp.replace(chunk_path)
    return out


def collect_probe_activations(
    model: Any, cfg: ProbingConfig = ProbingConfig(), progress: bool = False
) -> ProbeActivations:
    """Build the first-letter dataset and read the residual at each word (cached on disk by model and layer);
    `progress` shows a bar per step (vocabulary, prompt building, the forwards)."""
    from sae_workbench.corpus import default_bos_id

    tokenizer = model.tokenizer
    bos_id = cfg.bos_id if cfg.bos_id is not None else default_bos_id(tokenizer)
    if cfg.layer >= model.cfg.n_layers:
        raise ProbingDataError(
            f"layer {cfg.layer} does not exist; {model.cfg.model_name!r} has layers 0..{model.cfg.n_layers - 1}"
        )
    folder = _cache_dir(str(model.cfg.model_name), cfg, bos_id, len(tokenizer), str(model.cfg.dtype))
    final = folder / "activations.npz"
    if final.exists():
        log.info("first-letter data: cached in %s", folder)
        data = np.load(final, allow_pickle=False)
        meta = json.loads((folder / "words.json").read_text())
        return ProbeActivations(
            meta["train"],
            meta["test"],
            data["train_labels"],
            data["test_labels"],
            data["train"],
            data["test"],
            meta["dropped"],
        )
    vocab = alphabetic_vocab(tokenizer, progress)
    if len(vocab) < cfg.n_icl_examples + 2:
        raise ProbingDataError(f"only {len(vocab)} alphabetic tokens in the vocabulary; need many thousands.")
    train, test = _split_words(vocab, cfg)
    rng = random.Random(cfg.seed + 1)
    result: dict[str, Any] = {"dropped": 0}
    for tag, words in (("train", train), ("test", test)):
        ids, positions, kept = _prompts(
            tokenizer, words, cfg, bos_id, rng, f"build prompts ({tag})", progress
        )
        result["dropped"] += len(words) - len(kept)
        kept_words = [words[i][1] for i in kept]
        result[tag] = kept_words
        result[f"{tag}_labels"] = np.array([first_letter_index(w) for w in kept_words], dtype=np.int64)
        result[f"{tag}_resid"] = _read_resid(model, ids, positions, cfg, folder, tag, progress)
    log.info(
        "first-letter data: %d train / %d test words, %d dropped",
        len(result["train"]),
        len(result["test"]),
        result["dropped"],
    )
    paths.atomic_write_bytes(
        folder / "words.json", json.dumps({k: result[k] for k in ("train", "test", "dropped")}).encode()
    )
    tmp = folder / "activations.tmp.npz"
    np.savez(
        tmp,
        train=result["train_resid"],
        test=result["test_resid"],
        train_labels=result["train_labels"],
        test_labels=result["test_labels"],
    )
    tmp.replace(final)
    for chunk in folder.glob("*-chunk*.npy"):
        chunk.unlink()
    return ProbeActivations(
        result["train"], result["test"], result["train_labels"], result["test_labels"],
        result["train_resid"], result["test_resid"], result["dropped"],
    )  # fmt: skip


def _train_multi_probe(
    x_fn: Any,
    n: int,
    y_NL: torch.Tensor,
    dim: int,
    *,
    epochs: int,
    lr: float,
    weight_decay: float,
    l1: float,
    seed: int,
    batch_size: int,
    end_lr: float = 1e-5,
    desc: str = "probes",
    progress: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """SAEBench's train_multi_probe: BCE with pos_weight = neg/pos, Adam, exponential decay to `end_lr`."""
    gen = torch.Generator().manual_seed(seed)
    n_labels = y_NL.shape[1]
    linear = torch.nn.Linear(dim, n_labels)
    with torch.no_grad():
        bound = 1 / math.sqrt(dim)
        linear.weight.uniform_(-bound, bound, generator=gen)
        linear.bias.uniform_(-bound, bound, generator=gen)
    pos = y_NL.sum(0)
    loss_fn = torch.nn.BCEWithLogitsLoss(pos_weight=(n - pos) / pos.clamp(min=1))
    opt = torch.optim.Adam(linear.parameters(), lr=lr, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=math.exp(math.log(end_lr / lr) / epochs))
    for _ in tqdm(range(epochs), desc=desc, unit="epoch", leave=False, disable=not progress):
        order = torch.randperm(n, generator=gen)
        for s in range(0, n, batch_size):
            idx = order[s : s + batch_size]
            loss = loss_fn(linear(x_fn(idx)), y_NL[idx])
            if l1:
                loss = loss + l1 * linear.weight.abs().sum(-1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        sched.step()
    return linear.weight.detach(), linear.bias.detach()


def _one_hot(labels: np.ndarray) -> torch.Tensor:
    """(N, 26) float one-hot letters."""
    return torch.nn.functional.one_hot(torch.from_numpy(labels), num_classes=len(LETTERS)).float()


def train_letter_probes(
    acts: ProbeActivations, cfg: ProbingConfig = ProbingConfig(), progress: bool = False
) -> LetterProbes:
    """26 one-vs-rest logistic probes on the train residuals; F1 per letter on the test words."""
    x = torch.from_numpy(acts.train_resid_ND)
    w, b = _train_multi_probe(
        lambda idx: x[idx], len(x), _one_hot(acts.train_labels), x.shape[1],
        epochs=cfg.probe_epochs, lr=cfg.probe_lr, weight_decay=cfg.probe_weight_decay, l1=0.0, seed=cfg.seed,
        batch_size=cfg.probe_batch_size, desc="letter probes", progress=progress,
    )  # fmt: skip
    scores = (torch.from_numpy(acts.test_resid_ND) @ w.T + b).numpy()
    f1 = [
        float(f1_score(acts.test_labels == i, scores[:, i] > 0, zero_division=0.0))  # type: ignore[arg-type]
        for i in range(len(LETTERS))
    ]
    return LetterProbes(w.numpy(), b.numpy(), f1, scores)


# ---- k-sparse probing on SAE features -------------------------------------------------------------------------


@dataclass(frozen=True)
class KSparseResult:
    """k-sparse probing of one letter: features and F1 for k = 1..max_k, and the main (split) features."""

    letter: str
    features_by_k: list[list[int]]
    f1_by_k: list[float]
    main_feature_ids: list[int]


def sae_feature_acts(
    sae: Any, resid_ND: np.ndarray, batch_size: int = 1024, progress: bool = False
) -> sp.csr_matrix:
    """SAE activations with decoder norms folded in (activation × ‖decoder row‖), stored sparse."""
    norms_F = sae.W_dec.detach().float().norm(dim=-1).cpu()
    rows = []
    with torch.no_grad():
        for s in tqdm(
            range(0, len(resid_ND), batch_size), desc="SAE encode", leave=False, disable=not progress
        ):
            x = torch.from_numpy(resid_ND[s : s + batch_size]).to(sae.device, sae.dtype)
            acts = sae.encode(x).float().cpu() * norms_F
            rows.append(sp.csr_matrix(acts.numpy()))
    return sp.vstack(rows, format="csr")  # type: ignore[return-value]


def main_features(
    f1_by_k: list[float], features_by_k: list[list[int]], tau: float = F1_JUMP_THRESHOLD
) -> list[int]:
    """SAEBench add_feature_splits_to_metrics_df: grow k while F1 rises by more than τ; return that k's features."""
    best, chosen = -100.0, []
    for f1, feats in zip(f1_by_k, features_by_k, strict=True):
        if f1 > best + tau:
            best, chosen = f1, feats
        else:
            break
    return list(chosen)


def k_sparse_probing(
    train_acts: sp.csr_matrix,
    train_labels: np.ndarray,
    test_acts: sp.csr_matrix,
    test_labels: np.ndarray,
    *,
    max_k: int = MAX_K,
    tau: float = F1_JUMP_THRESHOLD,
    l1_decay: float = 0.01,
    epochs: int = 50,
    batch_size: int = 4096,
    seed: int = 42,
    progress: bool = False,
) -> list[KSparseResult]:
    """SAEBench's k-sparse probing: an L1 probe on SAE features, then balanced logistic regressions on the top-k."""
    y = _one_hot(train_labels)
    n_rows, n_features = train_acts.shape  # type: ignore[misc]
    # SAEBench k_sparse_probing.py: l1_decay 0.01, weight decay 1e-6, lr 0.01, 50 epochs, batch 4096.
    w_LF, _ = _train_multi_probe(
        lambda idx: torch.from_numpy(train_acts[idx.numpy()].toarray()).float(), n_rows, y, n_features,
        epochs=epochs, lr=0.01, weight_decay=1e-6, l1=l1_decay, seed=seed, batch_size=batch_size,
        desc="L1 probe on SAE features", progress=progress,
    )  # fmt: skip
    train_csc, test_csc = train_acts.tocsc(), test_acts.tocsc()
    out = []
    for li, letter in enumerate(
        tqdm(LETTERS, desc="k-sparse probes", unit="letter", leave=False, disable=not progress)
    ):
        # By positive weight, not |w|: features that directly predict the letter (SAEBench).
        top = w_LF[li].topk(max_k).indices.tolist()
        feats_by_k, f1_by_k = [], []
        positives = int((train_labels == li).sum())
        for k in range(1, max_k + 1):
            feats = top[:k]
            feats_by_k.append(feats)
            if positives == 0 or positives == len(train_labels):
                f1_by_k.append(0.0)  # no words (or only words) with this letter: nothing to fit
                continue
            clf = LogisticRegression(max_iter=500, class_weight="balanced")
            clf.fit(train_csc[:, feats].toarray(), train_labels == li)
            pred = clf.decision_function(test_csc[:, feats].toarray()) > 0
            f1_by_k.append(float(f1_score(test_labels == li, pred, zero_division=0.0)))  # type: ignore[arg-type]
        out.append(KSparseResult(letter, feats_by_k, f1_by_k, main_features(f1_by_k, feats_by_k, tau)))
    return out
