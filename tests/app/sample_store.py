"""A small, real store for the app's tests and screenshots: the tiny model + a random TopK SAE indexed over real
text (including HTML/JS that must render as text), with explanations, scores, negatives and an absorption eval.

    from tests.app.sample_store import build_sample_store
    sample = build_sample_store(tmp_path)          # -> SampleStore(path, sae_id, sae_dir, ...)

Everything goes through the store's public API and workbench.indexing, exactly as the real stages write it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sae_workbench.examples.sampling import random_negatives

HOOK = "blocks.1.hook_resid_post"
MODEL = "tiny:0"
XSS_LINE = 'Beware <script>alert("xss")</script> and <img src=x onerror=alert(1)> in the corpus.'
# A PRISM cluster text as a corpus can hold it (issue 37 item 3): a blank line then indentation (which raw markdown
# turns into a code block), tags, an ampersand, both quotes, brackets and a stray closing tag.
PRISM_TRICKY_TEXT = "if a < b and b > c:\n\n    x = \"1 & 2\" [0]\n\tprint('</div>')"
SAMPLE_TEXT = "\n".join(
    [
        "In the beginning God created the heaven and the earth.",
        "And the earth was without form, and void; and darkness was upon the face of the deep.",
        "And God said, Let there be light: and there was light.",
        XSS_LINE,
        "def parse(text: str) -> list[str]:\n    return [line.strip() for line in text.splitlines()]",
        "A fool and his money are soon parted; a wise man keeps his counsel.",
        "The quick brown fox jumps over the lazy dog near the river bank.",
        "Python's standard library includes modules for json, csv, sqlite3 and email parsing.",
        "Cost is $5 * 3 = $15, and _emphasis_ or `code` must show literally.",
        "And God saw the light, that it was good: and God divided the light from the darkness.",
    ]
    * 3
)


@dataclass(frozen=True)
class SampleStore:
    """What the sample builder made."""

    path: Path
    """The store file."""
    sae_id: str
    """The indexed SAE."""
    sae_dir: Path
    """Its SAELens folder (for the Playground)."""
    d_sae: int
    """Number of features."""
    explained_feature: int
    """A feature with explanations (lexical, PRISM, tree), scores, negatives and an absorption entry."""
    xss_feature: int
    """A feature whose top examples include the window with `<script>` / `<img onerror>`."""
    xss_window: int
    """That window's id."""
    plain_feature: int
    """An active feature without explanations (the hypothesis form's tests store one for it)."""
    dead_feature: int
    """A feature that never fires (its encoder is zeroed and its bias -100), explained by the real lexical job,
    which stores it as DEAD with an empty text."""
    attributed_window: int = -1
    """The explained feature's top window, with planted DePass token shares, head/MLP shares and effects."""
    attributed_token: int = -1
    """The position in that window planted with the largest token share (BOS, at 0, is planted larger still)."""


def build_sample_store(folder: Path, *, d_sae: int = 128, k: int = 8, seed: int = 0) -> SampleStore:
    """Index a random TopK SAE on the tiny model over SAMPLE_TEXT and add explanations, scores, samples, evals."""
    import torch
    from sae_lens import TopKSAE, TopKSAEConfig

    from sae_workbench.corpus import resolve_corpus
    from sae_workbench.models import load_model
    from sae_workbench.sae.feature_stats import compute_feature_stats
    from sae_workbench.sae.index_loop import index_sae
    from sae_workbench.sae.index_request import IndexConfig, IndexRequest
    from sae_workbench.sae.io import save_sae
    from sae_workbench.store import Store

    folder.mkdir(parents=True, exist_ok=True)
    corpus_file = folder / "sample_corpus.txt"
    corpus_file.write_text(SAMPLE_TEXT)
    model = load_model(MODEL)
    torch.manual_seed(seed)
    sae = TopKSAE(TopKSAEConfig(d_in=model.cfg.d_model, d_sae=d_sae, k=k))
    sae.cfg.metadata.hook_name = HOOK
    dead_feature = d_sae - 1
    with torch.no_grad():
        sae.b_enc.normal_(0, 0.1)
        sae.W_enc[:, dead_feature] = 0.0
        sae.b_enc[dead_feature] = -100.0
    sae_dir = save_sae(sae, folder / "sae")

    from sae_workbench.sae.io import compute_sae_id

    store = Store.open(folder / "store.duckdb")
    sae_id = compute_sae_id(sae, MODEL, HOOK)
    # Registered first so the cfg records where the files are (the Playground loads them from there).
    store.register_sae(
        sae_id, MODEL, HOOK, sae.cfg.d_in, d_sae, {**sae.cfg.to_dict(), "path": str(sae_dir)},
        {"explained_variance": 0.42, "l0": float(k), "mse": 0.8},
    )  # fmt: skip
    cfg = IndexConfig(context_size=32, batch_size=8, commit_tokens=512, compute_stats=False)
    corpus = resolve_corpus(str(corpus_file))
    index_sae(store, IndexRequest(model, sae, HOOK, corpus, 32 * 1000, cfg, model_name=MODEL))
    compute_feature_stats(store, sae_id, sae, model, cfg)

    progress = store.index_progress(sae_id)
    assert progress is not None
    windows = store.get_windows(progress.corpus, store.indexed_window_ids(sae_id))
    xss_window = next(w for w in windows if "<script>" in w.text)
    tag_positions = [i for i, t in enumerate(xss_window.token_strings) if "script" in t or "img" in t]
    acts_F = np.zeros(d_sae)
    for f in range(d_sae):  # the feature firing hardest on the tag tokens themselves
        acts_F[f] = store.window_activations(sae_id, f, [xss_window.window_id])[0, tag_positions].max()
    xss_feature = -1
    for f in np.argsort(-acts_F):
        if acts_F[f] > 0 and xss_window.window_id in [
            e.window_id for e in store.top_examples(sae_id, int(f), 12)
        ]:
            xss_feature = int(f)
            break
    table = store.feature_table(sae_id)
    active = table.column("feature").to_numpy()
    # A feature active in about half the windows: rich examples and real non-activating windows for negatives.
    n_windows = table.column("n_windows_active").to_numpy()
    order = np.argsort(np.abs(n_windows - len(windows) / 2), kind="stable")
    explained = next(int(active[i]) for i in order if int(active[i]) != xss_feature)
    _add_explanations(store, sae_id, explained, xss_feature, windows)
    attributed_window, attributed_token = _add_attributions(store, sae_id, explained)
    _add_interactions(store, sae_id, explained, attributed_window)
    from sae_workbench.explainers.base import ExplainConfig
    from sae_workbench.explainers.job import ExplainJob

    ExplainJob(store, sae_id, ExplainConfig("lexical", negatives="RANDOM_NEGATIVE"), progress=False).run(
        [dead_feature]
    )
    return SampleStore(
        folder / "store.duckdb",
        sae_id,
        sae_dir,
        d_sae,
        explained,
        xss_feature,
        xss_window.window_id,
        next(int(f) for f in active if int(f) not in (explained, xss_feature)),
        dead_feature,
        attributed_window,
        attributed_token,
    )


PLANTED_INTERACTION = (" river", " bank", 1.25)
"""The planted top ProxySPEX Möbius term of the explained feature (labels, value)."""
PLANTED_R2 = {"proxyspex": 0.91, "shapley": 0.42, "banzhaf": 0.55}


def _add_interactions(store, sae_id: str, feature: int, window_id: int) -> None:
    """A planted ProxySPEX result for `feature` and a constant one, as `workbench interactions` stores them."""
    from sae_workbench.store.interactions import InteractionRecord

    first, second, value = PLANTED_INTERACTION
    result = {
        "top_terms": [{"players": [0, 3], "labels": [first, second], "value": value, "singletons": [0.1, -0.2]}],
        "order2": [{"players": [0, 3], "labels": [first, second], "value": value / 2}], "index": "FBII",
        "r2": PLANTED_R2, "full_value": 2.5, "empty_value": 0.0, "wall_s": 12.0,
    }  # fmt: skip
    constant = {"message": "the value function is constant (0) on all 1000 masks"}
    store.add_interactions(
        [
            InteractionRecord(sae_id, feature, "a" * 16, "tokens", 1000, 0, window_id, 5, "ok", result, "k1"),
            InteractionRecord(
                sae_id, feature, "b" * 16, "heads", 1000, 0, window_id, 5, "constant", constant, "k2"
            ),
        ]
    )


PLANTED_TOP_COMPONENT = "L1.H0"
"""The head planted with the largest DePass share of the explained feature (mean over its two examples)."""
PLANTED_CONTINUATION = "planted <b>steered</b> text"


def _add_attributions(store, sae_id: str, feature: int) -> tuple[int, int]:
    """Planted DePass rows for `feature`'s two top examples (token and component level) plus a zero ablation and a
    steering run, through the store's API as `workbench attribute` writes them; return (window, top position)."""
    from sae_workbench.store.attributions import AttributionRecord, EffectRecord

    top = store.top_examples(sae_id, feature, 2)
    rows = []
    planted = (top[0].window_id, max(top[0].max_position - 1, 1))
    for rank, ex in enumerate(top):
        n = ex.max_position + 1
        scores = [0.01] * n
        scores[0] = 5.0  # the BOS attention sink: excluded from the ranking and the shading
        top_pos = max(ex.max_position - 1, 1) if n > 1 else 0
        scores[top_pos] = 2.0 - rank
        if n > 2:
            scores[-1] = -0.5
        tokens = {
            "token_ids_N": list(range(n)),
            "scores_N": scores,
            "bos_position": 0,
            "rule": "softmax",
            "activation": ex.max_value,
            "pre_activation": ex.max_value,
            "completeness_error": 1e-6,
        }
        components = {
            "head_scores_LH": [[0.1, 0.2], [0.9 - 0.2 * rank, 0.05]],
            "mlp_scores_L": [0.3, 0.4],
            "activation": ex.max_value,
            "pre_activation": ex.max_value,
        }
        for level, result in (("tokens", tokens), ("components", components)):
            rows.append(AttributionRecord(sae_id, feature, ex.window_id, ex.max_position, level, "depass", "softmax",
                                          result, f"planted/{feature}/{ex.window_id}/{level}"))  # fmt: skip
    store.add_attributions(rows)
    ids = [e.window_id for e in top]
    shift = {"token_id": 1, "token": " light", "logit_change": 0.75}
    store.add_effects([
        EffectRecord(sae_id, feature, "zero_ablation", {"mean_delta_loss": 0.1234, "mean_delta_loss_fired": 0.5,
                     "mean_kl": 0.02, "promoted": [shift], "suppressed": []}, f"planted/{feature}/zero", ids),
        EffectRecord(sae_id, feature, "steering", {"prompt_ids": [1, 2, 3], "baseline_continuation": "plain text",
                     "effects": [{"alpha": 10.0, "mean_delta_loss": 0.3, "mean_kl": 0.1, "promoted": [shift],
                                  "suppressed": [], "continuation": PLANTED_CONTINUATION}]},
                     f"planted/{feature}/steer", ids),
    ])  # fmt: skip
    return planted


def _add_explanations(store, sae_id: str, feature: int, xss_feature: int, windows) -> None:
    """Explanations (lexical, PRISM with clusters, tree with its tree), scores with both negative kinds, samples,
    and an absorption eval that names `feature`."""
    from sae_workbench.store.rows import ExplanationRecord, Sample, ScoreRecord

    negatives = random_negatives(store, sae_id, feature, 4, seed=0)
    store.add_sample(Sample(sae_id, feature, "RANDOM_NEGATIVE", 0, {"k": 4}, negatives))
    store.add_sample(Sample(sae_id, feature, "SIMILAR_NEGATIVE", 1, {"k": 4, "embedding": "all-MiniLM-L6-v2"},
                            negatives[::-1]))  # fmt: skip
    top_ids = [e.window_id for e in store.top_examples(sae_id, feature, 5)]
    common = {
        "sae_id": sae_id, "feature": feature, "explainer_version": "1", "llm_params": {}, "sampling": {"k": 5},
        "example_ids": top_ids, "negative_ids": negatives,
    }  # fmt: skip
    texts = {
        "lexical": ("words about God creating light and the earth", "", {}),
        "prism": (
            "two senses: creation narrative; code and library names",
            "prism-v1",
            {"clusters": [
                {"cluster": 0, "description": "creation narrative", "texts": [windows[0].text, windows[2].text]},
                {"cluster": 1, "description": "Python code <b>tags</b>", "texts": [windows[4].text]},
                {"cluster": 2, "description": "code with markup", "texts": [PRISM_TRICKY_TEXT]},
            ]},
        ),
        "tree": (
            "the word God at the start of a clause",
            "tree-v1",
            {"tree": {"best": 2, "nodes": [
                {"id": 1, "depth": 0, "text": "religious text", "validation_score": 0.41},
                {"id": 2, "depth": 1, "text": "the word God at the start of a clause", "validation_score": 0.63},
                {"id": 3, "depth": 1, "text": "capitalised nouns", "validation_score": 0.22},
            ]}},
        ),
    }  # fmt: skip
    for explainer, (text, prompt_version, extra) in texts.items():
        eid = store.add_explanation(
            ExplanationRecord(
                explainer=explainer, prompt_version=prompt_version, llm_model="" if explainer == "lexical" else "fake",
                text=text, config_key=f"{sae_id}/{feature}/{explainer}", extra=extra, tokens_in=120, tokens_out=30,
                seconds=0.5, **common,
            )
        )  # fmt: skip
        base = {"lexical": 0.8, "prism": 0.75, "tree": 0.9}[explainer]
        store.add_score(ScoreRecord(eid, "detection", "1", "RANDOM_NEGATIVE", {"balanced_accuracy": base}))
        store.add_score(
            ScoreRecord(eid, "detection", "1", "SIMILAR_NEGATIVE", {"balanced_accuracy": base - 0.25})
        )
        store.add_score(ScoreRecord(eid, "simulation", "1", "", {"correlation": base - 0.3}))
    store.add_explanation(
        ExplanationRecord(
            sae_id=sae_id, feature=xss_feature, explainer="lexical", explainer_version="1", prompt_version="",
            llm_model="", llm_params={}, sampling={}, example_ids=[], negative_ids=[],
            text="HTML tags like <script>alert(1)</script>", config_key=f"{sae_id}/{xss_feature}/lexical",
        )
    )  # fmt: skip
    store.add_eval(
        sae_id,
        "absorption_first_letter",
        {
            "eval_type_id": "absorption_first_letter",
            "eval_result_metrics": {"mean": {"mean_absorption_fraction_score": 0.12, "mean_full_absorption_score": 0.05,
                                             "mean_num_split_features": 1.3}},
            "eval_result_details": [
                {"first_letter": "g", "main_feature_ids": [feature], "mean_absorption_fraction": 0.2},
                {"first_letter": "l", "main_feature_ids": [feature + 1], "mean_absorption_fraction": 0.1},
            ],
        },
    )  # fmt: skip
