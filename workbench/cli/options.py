"""The options several `sae-workbench` commands share, each declared once; their defaults live in
`sae_workbench.defaults`.

Each option is an `Annotated` alias: the name, help and parsing are here, the default (if any) sits in the command's
signature and comes from `sae_workbench.defaults`, so a command can make the same option required, optional or
defaulted without declaring it again:

    from sae_workbench import defaults
    from sae_workbench.cli import loaders, options

    def command(
        store: options.Store,                                  # required: no default
        sae: options.SaeId,
        model: options.Model = defaults.DEFAULT_MODEL,
        hook: options.Hook = defaults.DEFAULT_HOOK,
        context_size: options.ContextSize = defaults.CONTEXT_SIZE,
        device: options.Device = defaults.DEFAULT_DEVICE,
        features: options.Features = "all",
        negatives: options.Negatives = defaults.NEGATIVES,     # normalised to the NegativeSource spelling
        llm_model: options.LlmModel = None,
        api_key_env: options.ApiKeyEnv = defaults.LLM_API_KEY_ENV,
        concurrency: options.Concurrency = defaults.LLM_CONCURRENCY,
        progress: options.Progress = True,
    ) -> None:
        subject = loaders.load_subject(model, [hook], context_size, device)   # checked once, at the edge
        wanted = options.parse_features(features, d_sae)

A command whose library entry point checks the model itself (`cache_activations`, `index_sae`) loads it with
`load_model` and leaves the check to it, so nothing is checked twice.

Options only one command has stay in that command's module; what commands load at their edge (model, SAEs) is in
`loaders.py`. This module imports typer and the defaults only, so `--help` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

# The LLM options are declared in llm_options.py (with their WORKBENCH_LLM_* variables); re-exported here.
from sae_workbench.cli.llm_options import ApiKeyEnv as ApiKeyEnv
from sae_workbench.cli.llm_options import Concurrency as Concurrency
from sae_workbench.cli.llm_options import LlmBaseUrl as LlmBaseUrl
from sae_workbench.cli.llm_options import LlmModel as LlmModel
from sae_workbench.cli.split_options import ScoreNegatives as ScoreNegatives
from sae_workbench.cli.split_options import ScoreRecordLen as ScoreRecordLen
from sae_workbench.cli.split_options import split_config as split_config
from sae_workbench.features import FeatureSpecError as FeatureSpecError  # re-exported
from sae_workbench.features import parse_features as parse_features  # re-exported

Store = Annotated[
    Path, typer.Option("--store", help="DuckDB feature store file (`workbench index` creates and fills it).")
]
OptionalStore = Annotated[
    Path | None,
    typer.Option("--store", help="DuckDB feature store file to record the result in (default: none)."),
]
SaePath = Annotated[
    str,
    typer.Option(
        "--sae",
        help="SAE: a folder written by `workbench train` (SAELens format), a sparsify or Gemma Scope folder/file, "
        "or a SAELens registry id release/sae_id.",
    ),
]
OptionalSaePath = Annotated[
    str | None,
    typer.Option(
        "--sae", help="SAE: a folder written by `workbench train`, a sparsify folder or a registry id."
    ),
]
SaeId = Annotated[str, typer.Option("--sae", help="SAE id in the store (printed by `workbench index`).")]
Model = Annotated[
    str,
    typer.Option(
        "--model",
        help="Subject model: smollm2-135m (embedded), tiny (random, for tests), a local Hugging Face folder, or a "
        "TransformerLens name.",
    ),
]
SaeModel = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="Subject model (as --model elsewhere; default: the model the SAE's cfg records, else smollm2-135m).",
    ),
]
Hook = Annotated[str, typer.Option("--hook", help="Hook whose activations the SAE reads.")]
SaeHook = Annotated[
    str | None,
    typer.Option(
        "--hook",
        help="Hook whose activations the SAE reads (default: the hook the SAE's cfg records, else "
        "blocks.3.hook_resid_post).",
    ),
]
ForceModel = Annotated[
    bool,
    typer.Option(
        "--force-model",
        help="Use --model even when the SAE's cfg records another model (a warning instead of an error; "
        "known aliases such as HuggingFaceTB/SmolLM2-135M-Instruct for smollm2-135m always pass).",
    ),
]
Hooks = Annotated[
    list[str],
    typer.Option("--hook", help="Hook to read; repeat for several (the forward stops after the last)."),
]
Corpus = Annotated[
    str,
    typer.Option(
        "--corpus", help="'default' (embedded), a .txt/.jsonl/.parquet file or folder, or hf:<dataset>."
    ),
]
ContextSize = Annotated[
    int, typer.Option("--context-size", min=2, help="Window size in tokens, BOS included.")
]
ForwardBatch = Annotated[int, typer.Option("--batch-size", min=1, help="Windows per forward pass.")]
Device = Annotated[str, typer.Option("--device", help="Torch device (cpu, cuda, cuda:1, mps).")]
Seed = Annotated[int, typer.Option("--seed", help="Seed of every random choice.")]
OptionalSeed = Annotated[
    int | None, typer.Option("--seed", help="Seed of every random choice (default: the command's).")
]
Features = Annotated[
    str, typer.Option("--features", help="'all', a range '0-49', a list '3,7,9', or a mix '0-9,20'.")
]


def progress_switch(ctx: typer.Context, value: bool) -> bool:
    """--no-progress: besides the flag the command passes down, every progress bar in the process is off until the
    command ends (`sae_workbench.progress.silence_bars`), so bars of the libraries it calls stay quiet too."""
    if not value and not ctx.resilient_parsing:
        from sae_workbench.progress import silence_bars

        ctx.call_on_close(silence_bars())
    return value


Progress = Annotated[
    bool,
    typer.Option(
        "--progress/--no-progress",
        callback=progress_switch,
        help="Show progress bars and step lines on stderr (--no-progress: none, from any library).",
    ),
]

Backend = Annotated[
    str,
    typer.Option(
        "--backend",
        help="Where the work runs: local (this process, the default) or ray (Ray workers, the driver the sole "
        "writer of the store; needs the [scale] extra).",
    ),
]
RayAddress = Annotated[
    str | None,
    typer.Option(
        "--ray-address",
        help="Ray cluster to join with --backend ray (default: RAY_ADDRESS, else a local 127.0.0.1-only cluster).",
    ),
]
RayWorkers = Annotated[
    int | None,
    typer.Option(
        "--ray-workers", help="Worker actors with --backend ray, one CPU each (default: the cluster's CPUs)."
    ),
]
LlmQps = Annotated[
    float | None,
    typer.Option(
        "--llm-qps",
        help="With --backend ray: most LLM calls per second to the endpoint over all workers together, and "
        "--concurrency bounds their calls in flight together (default: no rate limit).",
    ),
]


def negative_source_name(value: str) -> str:
    """`--negatives` in the `NegativeSource` spelling: `similar_negative` and `SIMILAR_NEGATIVE` name the same
    source (the configs reject an unknown one with the valid choices)."""
    return value.strip().upper()


Negatives = Annotated[
    str,
    typer.Option(
        "--negatives",
        callback=negative_source_name,
        help="Negative source of each feature's split, in any case: random, random_negative, similar or "
        "similar_negative (tree paper default). explain shows the train (and valid) third; score scores the test "
        "third (unused by cosy, polysemanticity and complexity).",
    ),
]
Preset = Annotated[
    str,
    typer.Option(
        "--preset",
        help="Method settings: 'default', 'paper' (the reference code's values), or 'smoke' (explain's tree and prism "
        "only: the smallest search, 1 root and 1 revision, and 2 clusters of 10 texts; a check that they run on a "
        "real LLM, not a setting for results). paper: explain: tree = depth 2, width "
        "2, roots at temperature 1.0 with 5 few-shot examples, train positives only, train/valid scored on 0..5 "
        "values, stop rule after pruning (default: depth 3, width 3); prism = p99, 1000 texts, k 5, "
        "gte-Qwen2-1.5B-instruct embeddings, seed 42. score: simulation, detection, fuzzing, embedding = 32-token "
        "records (tree paper) whatever record length the explanation was made at, 10 + 10 test records (default: "
        "each explanation's own record length); cosy = 512-word texts, 1000 control texts, cut at 512 tokens "
        "(default: short texts, 200 control texts, cut at 128). Recorded with each explanation and score.",
    ),
]
EmbeddingModel = Annotated[
    str,
    typer.Option(
        "--embedding-model",
        help="sentence-transformers model of the methods that embed texts: explain's prism (default: the preset's; "
        "'default' = all-MiniLM-L6-v2 offline in place of the paper's Alibaba-NLP/gte-Qwen2-1.5B-instruct) and "
        "score's polysemanticity and embedding scorers (default: all-MiniLM-L6-v2 offline). Recorded with each "
        "result.",
    ),
]
TrustRemoteCode = Annotated[
    bool,
    typer.Option(
        "--trust-remote-code/--no-trust-remote-code",
        help="Allow an embedding model that runs code from its own repository (the paper preset's "
        "gte-Qwen2-1.5B-instruct); without it such a model is refused. Read the model's code first.",
    ),
]
Explainer = Annotated[
    str | None,
    typer.Option(
        "--explainer",
        help="lexical, oneshot, tree or prism (default: oneshot with an LLM endpoint, else lexical).",
    ),
]
ExplainerFilter = Annotated[
    str | None,
    typer.Option("--explainer", help="Only this explainer's explanations (default: all)."),
]
RecordLen = Annotated[
    int,
    typer.Option(
        "--record-len", help="Tokens per record shown or simulated, around each peak (tree paper: 32)."
    ),
]
