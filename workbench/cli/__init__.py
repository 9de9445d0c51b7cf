"""The `workbench` command line: one module per stage's command, registered here; the options commands share are
declared in `options.py`, what they load at their edge (model, SAEs) in `loaders.py`.

workbench --help
workbench corpus info default
"""

from __future__ import annotations

import logging
import os

import typer

from sae_workbench import defaults
from sae_workbench.cli import options
from sae_workbench.errors import WorkbenchError

app = typer.Typer(
    name="workbench",
    help="Train sparse autoencoders on a model's activations, store their features in DuckDB, explain and score "
    "them, measure absorption, and browse everything in a Streamlit app. Runs offline on the embedded default "
    "(SmolLM2-135M + a local corpus).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
corpus_app = typer.Typer(
    help="Inspect and build corpora (the embedded default or your own files).", no_args_is_help=True
)
app.add_typer(corpus_app, name="corpus")


@corpus_app.command("build")
def corpus_build() -> None:
    """Assemble the embedded default corpus (KJV, fortunes, WordNet glosses, Python docs and stdlib) if missing."""
    from sae_workbench.default_corpus import default_corpus_path

    typer.echo(f"default corpus: {default_corpus_path()}")


@corpus_app.command("info")
def corpus_info(
    spec: str = typer.Argument(
        defaults.DEFAULT_CORPUS, help="'default', a .txt/.jsonl/.parquet file or folder, or hf:<dataset>."
    ),
    model: options.Model = defaults.DEFAULT_MODEL,
    context_size: options.ContextSize = defaults.CONTEXT_SIZE,
) -> None:
    """Count a corpus's documents, tokens and windows with a model's tokenizer."""
    from sae_workbench.corpus import default_bos_id, iter_windows, resolve_corpus
    from sae_workbench.models import load_model

    corpus = resolve_corpus(spec)
    tokenizer = load_model(model).tokenizer
    n_docs = sum(1 for _ in corpus.documents())
    n_windows = sum(
        len(b.window_ids)
        for b in iter_windows(corpus, tokenizer, context_size, batch_size=1024, decode=False)
    )
    typer.echo(
        f"corpus {corpus.name}: {n_docs} documents, {n_windows} windows of {context_size} tokens "
        f"({n_windows * context_size:,} tokens), window BOS id {default_bos_id(tokenizer)}"
    )


def _register_stage_commands() -> None:
    """Attach each pipeline stage's command (imported lazily so `--help` stays fast)."""
    from sae_workbench.cli.cache import cache

    app.command("cache")(cache)
    from sae_workbench.cli.train import train

    app.command("train")(train)
    from sae_workbench.cli.demo import demo

    app.command("demo")(demo)
    from sae_workbench.cli.index import index

    app.command("index")(index)
    from sae_workbench.cli.serve import app as serve_app

    app.command("app")(serve_app)
    from sae_workbench.cli.explain import explain

    app.command("explain")(explain)
    from sae_workbench.cli.polysemanticity_sweep import polysemanticity_sweep

    app.command("polysemanticity-sweep")(polysemanticity_sweep)
    from sae_workbench.cli.score import report, score

    app.command("score")(score)
    app.command("report")(report)
    from sae_workbench.cli.absorption import absorption

    app.command("absorption")(absorption)
    from sae_workbench.cli.prism_table import prism_table1

    app.command("prism-table1")(prism_table1)
    from sae_workbench.cli.hypothesis import hypothesis

    app.command("hypothesis")(hypothesis)
    from sae_workbench.cli.attribute import attribute

    app.command("attribute")(attribute)
    from sae_workbench.cli.interactions import interactions

    app.command("interactions")(interactions)
    from sae_workbench.cli.sql import sql

    app.command("sql")(sql)
    from sae_workbench.cli.graduate import graduate

    app.command("graduate")(graduate)
    from sae_workbench.cli.llm import llm_app

    app.add_typer(llm_app, name="llm")
    from sae_workbench.cli.verify import verify

    app.command("verify")(verify)
    from sae_workbench.cli.match import match

    app.command("match")(match)


def main() -> None:
    """Console-script entry point: run the CLI, turning WorkbenchErrors into one clear line and exit code 2."""
    logging.basicConfig(
        level=os.environ.get("WORKBENCH_LOG", "WARNING"), format="%(levelname)s %(name)s: %(message)s"
    )
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    _register_stage_commands()
    try:
        app()
    except WorkbenchError as err:
        typer.secho(f"error: {type(err).__name__}: {err}", fg="red", err=True)
        raise SystemExit(2) from err
