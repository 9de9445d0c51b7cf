"""`workbench demo` — the whole pipeline on the embedded default, one stage after another.

    workbench demo                      # SmolLM2-135M + the offline corpus, everything under runs/demo
    workbench demo --fast               # a smaller run for a quick look (used by the tests on the tiny model)
    workbench demo --no-llm             # without the LLM stages (--fast skips them unless given --llm)

cache → train an SAE → index into the store → explain features (lexical; the tree search offline on a few) → score
with random and close negatives → LLM stages (one-shot and PRISM on the first feature with a held-out test set, scored
with detection next to its lexical explanation, and the lexical one with the LLM simulator, on the configured endpoint
or else on a local llama-cpp-python server for SmolLM2-135M-Instruct that the demo starts and stops; all within one
shared wall budget; the report names the model and its size and says that so small a model is a smoke test, not a
result) → attribute a few features
(DePass tokens + components with ablation/steering effects, position-aware LRP; ProxySPEX interactions when the
`interactions` extra is installed) → absorption → summary → the table of real stage times (wall and CPU seconds,
also in `<out>/stage_times.json`).
Every stage is a real `workbench` command run as a subprocess, so the demo exercises exactly what a user runs;
each command skips work that already exists, so rerunning the demo reuses earlier results.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import typer

from sae_workbench import defaults
from sae_workbench.cli import options
from sae_workbench.errors import WorkbenchError


class DemoStepError(WorkbenchError):
    """A demo stage's command failed."""


@dataclass(frozen=True)
class DemoConfig:
    """Sizes of the demo run."""

    model: str = defaults.DEFAULT_MODEL
    """Subject model."""
    hook: str = defaults.DEFAULT_HOOK
    """Hook the SAE reads (design.md: layer 3 of SmolLM2)."""
    # The sizes below are cut so that the whole default demo, LLM and attribution stages included, fits 25 minutes on
    # two idle cores (issue 37; the measured stage times are in README "A first tour" and bench/NOTES.md).
    cache_tokens: int = 300_000
    """Tokens cached for training."""
    train_tokens: int = 280_000
    """Tokens the SAE trains on (below the cache's unmasked token count)."""
    index_tokens: int = 150_000
    """Tokens indexed into the store."""
    n_features: int = 50
    """Features explained and scored."""
    expansion: int = 8
    """SAE width as a multiple of d_model."""
    k: int = 32
    """Active features per token (TopK)."""
    absorption_words: int | None = 20_000
    """Cap on first-letter words for absorption (design.md: the eval needs ≥ 20k words for rare letters). Not cut for
    time: on the demo SAE 10k words gave absorption fraction 0.59 against 0.39 at 20k (weaker probes; bench/NOTES.md,
    2026-12-07 evening)."""
    min_letters: int = 20
    """Letters whose probe must reach F1 > 0.6 (SAEBench default 20)."""
    attribute_features: int = 3
    """Budget of the attribution stages: the first this many explained features that fire."""
    attribute_examples: int = 1
    """Top examples per feature for DePass, position-aware LRP and the ablation effects."""
    steering_alphas: str = "-5,5,10"
    """Steering strengths (activation units; `workbench attribute`'s default)."""
    interaction_features: int = 1
    """Features given ProxySPEX interactions (`--quick`, one top example each) when the extra is installed."""
    interaction_budget: int = 1000
    """Masks per ProxySPEX method (the budget rule's floor, specs/attribution.md B.3)."""
    llm_features: int = 1
    """Features the LLM explainers (one-shot, PRISM) explain and the LLM scorers score (the first whose lexical
    explanation the offline scorers scored: they have held-out test windows)."""
    llm_preset: str = "smoke"
    """Preset of the LLM PRISM stage: 'smoke', 2 clusters of 10 texts (a check that it runs end to end on a real LLM;
    the default preset takes tens of calls per feature, minutes each on 2 cores)."""
    llm_budget_s: float = 480.0
    """Wall seconds all LLM stages together may take (2 cores, SmolLM2-135M on the local server); each stage gets
    what is left, a stage past it is stopped and the rest are skipped, each reported; what a stage stored is kept
    (rerunning the demo resumes it)."""


FAST = DemoConfig(
    cache_tokens=120_000,
    train_tokens=110_000,
    index_tokens=40_000,
    n_features=20,
    expansion=4,
    k=16,
    attribute_features=2,
    attribute_examples=1,
    steering_alphas="5",
    interaction_budget=300,
)


# The stages whose commands take --progress/--no-progress (the demo's own --no-progress is passed on to them).
_SHOWS_PROGRESS = {"cache", "train", "index", "explain", "score", "absorption", "attribute", "interactions"}


def stage_args(args: list[str]) -> list[str]:
    """A stage's command line: with `--no-progress` added under the demo's own --no-progress, where it takes it."""
    from sae_workbench.progress import bars_enabled

    if not bars_enabled() and args[0] in _SHOWS_PROGRESS:
        return [args[0], "--no-progress", *args[1:]]
    return args


@dataclass(frozen=True)
class StageTime:
    """The real cost of one demo stage: wall seconds and the CPU seconds (user + sys) of its process."""

    stage: str
    wall_s: float
    cpu_s: float
    ok: bool


STAGE_TIMES_FILE = "stage_times.json"
# The stages of the current run_demo, in the order they ran (rewritten to the run folder after each one).
_stage_times: list[StageTime] = []


def _record_stage(step: str, started: float, before: resource.struct_rusage, ok: bool, run_dir: Path) -> None:
    """Record a finished stage's wall time and its child's CPU time (RUSAGE_CHILDREN delta) and save the table."""
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    _stage_times.append(StageTime(step, wall, cpu, ok))
    write_stage_times(_stage_times, run_dir / STAGE_TIMES_FILE)


def write_stage_times(times: list[StageTime], path: Path) -> None:
    """The stage table as JSON: one record per stage that ran, plus the totals."""
    payload = {
        "stages": [
            {"stage": t.stage, "wall_s": round(t.wall_s, 2), "cpu_s": round(t.cpu_s, 2), "ok": t.ok}
            for t in times
        ],
        "total_wall_s": round(sum(t.wall_s for t in times), 2),
        "total_cpu_s": round(sum(t.cpu_s for t in times), 2),
        "cpu_count": os.cpu_count(),
    }
    path.write_text(json.dumps(payload, indent=2) + "\n")


def format_stage_times(times: list[StageTime]) -> str:
    """The stage table as text: wall and CPU (user + sys) seconds per stage that ran, and the totals."""
    width = max([len(t.stage) for t in times] + [len("total")])
    lines = [f"  {'stage':<{width}}  {'wall s':>8}  {'CPU s':>8}  {'CPU/wall':>8}"]
    for t in [*times, StageTime("total", sum(t.wall_s for t in times), sum(t.cpu_s for t in times), True)]:
        ratio = t.cpu_s / t.wall_s if t.wall_s > 0 else 0.0
        note = "" if t.ok else "  (failed)"
        lines.append(f"  {t.stage:<{width}}  {t.wall_s:>8.1f}  {t.cpu_s:>8.1f}  {ratio:>8.2f}{note}")
    return "\n".join(lines)


def _run(
    step: str,
    args: list[str],
    log_dir: Path,
    timeout_s: float | None = None,
    env: dict[str, str] | None = None,
) -> str:
    """Run one `workbench` command; stream its progress to the terminal (none after --no-progress) and return its
    stdout. A command past `timeout_s` is stopped (DemoStepError; what it stored stays). `env` overrides variables
    for this command only."""
    args = stage_args(args)
    typer.secho(f"\n▶ {step}: workbench {' '.join(args)}", bold=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "sae_workbench", *args],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired as err:
        _record_stage(step, started, before, False, log_dir.parent)
        out = err.stdout.decode() if isinstance(err.stdout, bytes) else (err.stdout or "")
        (log_dir / f"{step}.log").write_text(out)
        raise DemoStepError(
            f"demo step {step!r} passed its {timeout_s:.0f} s budget and was stopped (what it stored is kept; "
            "rerun the demo to resume it)"
        ) from None
    _record_stage(step, started, before, proc.returncode == 0, log_dir.parent)
    (log_dir / f"{step}.log").write_text(proc.stdout)
    sys.stdout.write(proc.stdout)
    if proc.returncode != 0:
        raise DemoStepError(
            f"demo step {step!r} failed (exit {proc.returncode}); its output is in {log_dir / step}.log"
        )
    typer.echo(f"  ({step}: {_stage_times[-1].wall_s:.0f} s wall, {_stage_times[-1].cpu_s:.0f} s CPU)")
    return proc.stdout


def _sae_id(sae_dir: Path, model: str, hook: str) -> str:
    """The id of the SAE the train step wrote (the key of everything in the store), read back from its record."""
    from sae_workbench.sae.io import load_sae, sae_id_of

    return sae_id_of(load_sae(sae_dir), model, hook, sae_dir)


def run_demo(cfg: DemoConfig, run_dir: Path, llm: bool = False) -> Path:
    """Run every stage into `run_dir` and print a summary; return the store path. `llm`: also explain a few features
    with one-shot and PRISM and score them with detection and simulation on a real LLM (`_run_llm_stages`)."""
    from sae_workbench.llm.config import endpoint_status

    _stage_times.clear()
    run_dir.mkdir(parents=True, exist_ok=True)
    logs = run_dir / "logs"
    logs.mkdir(exist_ok=True)
    cache_dir, sae_dir, store = run_dir / "cache", run_dir / "sae", run_dir / "store.duckdb"
    features = f"0-{cfg.n_features - 1}"
    common = ["--model", cfg.model, "--hook", cfg.hook]

    _run("cache", ["cache", *common, "--tokens", str(cfg.cache_tokens), "--out", str(cache_dir)], logs)
    train_args = [
        "train",
        *common,
        "--cache",
        str(cache_dir),
        "--tokens",
        str(cfg.train_tokens),
        "--out",
        str(sae_dir),
    ]
    train_args += ["--expansion", str(cfg.expansion), "--k", str(cfg.k)]
    if (sae_dir / "cfg.json").exists():
        typer.echo(f"\n▶ train: reusing the SAE in {sae_dir}")
    else:
        if (sae_dir / "checkpoints").exists():
            train_args.append("--resume")
        _run("train", train_args, logs)
    sae_id = _sae_id(sae_dir, cfg.model, cfg.hook)
    _run(
        "index",
        ["index", "--sae", str(sae_dir), "--store", str(store), *common, "--tokens", str(cfg.index_tokens)],
        logs,
    )

    explainers = ["lexical"]
    status = endpoint_status()
    typer.echo(f"\nLLM endpoint: {status.notice}")
    for explainer in explainers:
        _run(
            f"explain-{explainer}",
            [
                "explain",
                "--store",
                str(store),
                "--sae",
                sae_id,
                "--explainer",
                explainer,
                "--features",
                features,
            ],
            logs,
        )
    _run_offline_tree(cfg, store, sae_id, logs)
    scorers = ["simulation", "detection", "embedding"]
    for scorer in scorers:
        for negatives in ("random_negative", "similar_negative"):
            _run(
                f"score-{scorer}-{negatives}",
                [
                    "score",
                    "--store",
                    str(store),
                    "--sae",
                    sae_id,
                    "--scorer",
                    scorer,
                    "--negatives",
                    negatives,
                    "--features",
                    features,
                ],
                logs,
            )
    llm_note = _run_llm_stages(cfg, store, sae_id, run_dir, logs, llm) if llm else ""
    _run_attribution(cfg, store, sae_id, sae_dir, logs)
    absorption_args = ["absorption", "--sae", str(sae_dir), "--model", cfg.model, "--store", str(store)]
    absorption_args += ["--json", str(run_dir / "absorption.json"), "--min-letters", str(cfg.min_letters)]
    # bfloat16 reads the probe residuals ~2.5× faster on a CPU with native bf16 and changes layer-3 activations by
    # 0.8% (design.md); where the CPU only emulates it, float32 is the fast one (models.fast_cpu_dtype).
    from sae_workbench.models import fast_cpu_dtype

    absorption_args += ["--dtype", fast_cpu_dtype()]
    if cfg.absorption_words:
        absorption_args += ["--max-words", str(cfg.absorption_words)]
    try:
        _run("absorption", absorption_args, logs)
    except DemoStepError as err:
        typer.secho(f"absorption skipped: {err}", fg="yellow")
    report = _run("report", ["report", "--store", str(store), "--sae", sae_id, "--features", features], logs)
    (run_dir / "report.md").write_text(llm_note + report)
    _print_summary(sae_dir, run_dir, store, sae_id)
    typer.secho("\nStage times (real: wall clock, and CPU = user + sys of the stage's process):", bold=True)
    typer.echo(format_stage_times(_stage_times))
    typer.echo(f"  (also in {run_dir / STAGE_TIMES_FILE}; {os.cpu_count()} CPU cores)")
    return store


def demo_features(store: Path, sae_id: str, n_explained: int, n: int) -> list[int]:
    """The first `n` of the explained features (0..n_explained-1) that fire on the indexed windows."""
    from sae_workbench.store import Store

    table = Store.open(store, read_only=True).feature_table(sae_id)
    fired = [
        int(f)
        for f, windows in zip(
            table.column("feature").to_pylist(), table.column("n_windows_active").to_pylist(), strict=True
        )
        if f < n_explained and (windows or 0) > 0
    ]
    return fired[:n]


def _run_offline_tree(cfg: DemoConfig, store: Path, sae_id: str, logs: Path) -> None:
    """The tree explainer's offline variant (lexical rule editor + lexical simulator, no LLM) on the attribution
    features, so the feature page's tree section has a real search to show. The tree on an LLM is not in the default
    demo: its simulator scores every rule of every node on 40 records, ~10 answers of ~680 tokens per rule, and on
    SmolLM2-135M on 2 cores one `--preset smoke` feature passed 9 minutes (bench/NOTES.md)."""
    chosen = demo_features(store, sae_id, cfg.n_features, cfg.attribute_features)
    if not chosen:
        return
    # Offline whatever endpoint is configured (the same three variables the tests clear for the lexical path).
    offline = {"WORKBENCH_LLM_MODEL": "", "WORKBENCH_LLM_BASE_URL": "", "OPENAI_API_KEY": ""}
    args = ["explain", "--store", str(store), "--sae", sae_id, "--explainer", "tree"]
    _run("explain-tree-offline", [*args, "--features", ",".join(map(str, chosen))], logs, env=offline)


def scorable_features(store: Path, sae_id: str, n_explained: int, n: int) -> list[int]:
    """The first `n` explained features whose lexical explanation the offline detection scorer scored (random
    negatives, status ok): a feature that fires but has no held-out test window left (every active window's document
    was shown to the explainer) would give the LLM stages nothing to score."""
    from sae_workbench.status import Status
    from sae_workbench.store import Store

    db = Store.open(store, read_only=True)
    ok = {
        s.explanation_id
        for s in db.scores(scorer="detection", sae_id=sae_id)
        if s.status == Status.OK and s.negative_source == "RANDOM_NEGATIVE"
    }
    scored = {e.feature for e in db.explanations(sae_id, explainer="lexical") if e.id in ok}
    return [f for f in demo_features(store, sae_id, n_explained, n_explained) if f in scored][:n]


MIN_STAGE_S = 20.0
"""An LLM stage is started only with at least this many seconds of the budget left."""
LLM_EXPLAINERS = ("oneshot", "prism")
# (scorer, explainer) pairs scored on the LLM: detection for every explanation of the feature, the LLM simulator once
# (its answers are ~680 tokens, ~25 s each on SmolLM2 on 2 cores, ~5 per explanation).
LLM_SCORINGS = (
    ("detection", "lexical"),
    ("detection", "oneshot"),
    ("detection", "prism"),
    ("simulation", "lexical"),
)


def _run_llm_stages(cfg: DemoConfig, store: Path, sae_id: str, run_dir: Path, logs: Path, llm: bool) -> str:
    """One-shot and PRISM on the first `cfg.llm_features` features that the offline scorers could score, scored with
    detection (random negatives) next to the lexical explanations of the same features, and the lexical explanations
    with the LLM simulator (`LLM_SCORINGS`), on the configured endpoint,
    or else on a local llama-cpp-python server for SmolLM2-135M-Instruct started for these stages and stopped after
    them (its log in `<out>/llm-server`). The stages share `cfg.llm_budget_s`; a stage that fails or passes what is
    left is reported and skipped. Returns the note the report starts with (which model, its size, a smoke test)."""
    import importlib.util

    from sae_workbench.llm.config import endpoint_status

    chosen = scorable_features(store, sae_id, cfg.n_features, cfg.llm_features)
    if not chosen:
        typer.secho("LLM stages skipped: no explained feature has a held-out test set to score", fg="yellow")
        return ""
    status = endpoint_status()
    server = None
    if not status.configured:
        if importlib.util.find_spec("llama_cpp") is None:
            typer.secho("LLM stages skipped: no endpoint configured and llama-cpp-python is not installed "
                        "(make venv installs it; or set WORKBENCH_LLM_MODEL/WORKBENCH_LLM_BASE_URL)", fg="yellow")  # fmt: skip
            return ""
        from sae_workbench.llm.server import LocalLLMServer, ServerSettings

        typer.secho("\n▶ llm: starting a local llama-cpp-python server (SmolLM2-135M-Instruct)", bold=True)
        server = LocalLLMServer(ServerSettings(), run_dir=run_dir / "llm-server").start()
    saved = dict(os.environ)
    try:
        if server is not None:
            os.environ.update(server.env())
            model, size = server.model, _gguf_size(server.model_path)
        else:
            model, size = status.config.model if status.config else "?", "size not known to the workbench"
        picked = ",".join(map(str, chosen))
        common = ["--store", str(store), "--sae", sae_id, "--features", picked]
        stages = []
        for explainer in LLM_EXPLAINERS:
            preset = ["--preset", cfg.llm_preset] if explainer == "prism" else []
            stages.append((f"explain-{explainer}", ["explain", *common, "--explainer", explainer, *preset]))
        for scorer, explainer in LLM_SCORINGS:
            args = ["score", *common, "--scorer", scorer, "--negatives", "random_negative"]
            stages.append((f"score-{scorer}-{explainer}-llm", [*args, "--explainer", explainer]))
        deadline = time.monotonic() + cfg.llm_budget_s
        weights = [_llm_weight(step) for step, _ in stages]
        for i, (step, args) in enumerate(stages):
            _budgeted(step, args, logs, deadline, weights[i] / sum(weights[i:]))
    finally:
        os.environ.clear()
        os.environ.update(saved)
        if server is not None:
            server.stop()
    return (
        f"LLM stages: model {model} ({size}) on features {picked}. A model this small is a smoke test that the "
        "pipeline runs end to end on a real LLM, not a result: its explanations and scores say little about the "
        "features.\n\n"
    )


def _llm_weight(step: str) -> float:
    """A stage's share of the LLM budget, in units of one answer per feature, from their measured costs on SmolLM2 on
    2 cores (bench/NOTES.md): one-shot ~22 s and each detection ~20-30 s (1), PRISM smoke ~40 s (2), the simulation
    scorer ~250-300 s (10: ~5 chunks of ~680-token answers)."""
    return 10.0 if step.startswith("score-simulation") else 2.0 if step == "explain-prism" else 1.0


def _budgeted(step: str, args: list[str], logs: Path, deadline: float, share: float = 1.0) -> None:
    """Run an LLM stage within its `share` of what is left of the LLM stages' budget (until the monotonic
    `deadline`; shares by `_llm_weight` over the stages left, so that no stage starves the later ones and what one
    leaves unused goes to the rest); a failure or a spent budget is reported and the stage skipped."""
    left = deadline - time.monotonic()
    if left < MIN_STAGE_S:
        typer.secho(
            f"{step} skipped: the LLM stages' budget is spent (rerun the demo to resume)", fg="yellow"
        )
        return
    try:
        _run(step, args, logs, timeout_s=max(MIN_STAGE_S, left * share))
    except DemoStepError as err:
        typer.secho(f"{step} skipped: {err}", fg="yellow")


def _gguf_size(path: Path) -> str:
    """A GGUF model's size as the report names it: parameters from the file name when it says (135M), and MB."""
    import re

    found = re.search(r"(\d+(?:\.\d+)?[MB])-", path.name)
    params = f"{found.group(1)} parameters, " if found else ""
    return f"{params}{path.stat().st_size / 1e6:.0f} MB GGUF {path.name}"


def _run_attribution(cfg: DemoConfig, store: Path, sae_id: str, sae_dir: Path, logs: Path) -> None:
    """Why a few features fire and what they do: DePass (tokens + components) with ablation and steering effects,
    position-aware LRP, and ProxySPEX interactions when the `interactions` extra is installed. A failure is reported
    and skipped (the rest of the demo does not depend on these)."""
    import importlib.util

    chosen = demo_features(store, sae_id, cfg.n_features, cfg.attribute_features)
    if not chosen:
        typer.secho("attribution skipped: none of the explained features fires", fg="yellow")
        return
    common = ["--store", str(store), "--sae", sae_id, "--sae-path", str(sae_dir)]
    common += ["--features", ",".join(map(str, chosen)), "--examples", str(cfg.attribute_examples)]
    depass = ["attribute", *common, "--method", "depass", "--levels", "tokens,components"]
    stages = [
        ("attribute-depass", [*depass, "--alphas", cfg.steering_alphas]),
        ("attribute-pa_lrp", ["attribute", *common, "--method", "pa_lrp"]),
    ]
    if all(importlib.util.find_spec(m) is not None for m in ("shapiq", "lightgbm")):
        picked = ",".join(map(str, chosen[: cfg.interaction_features]))
        interactions = ["interactions", "--store", str(store), "--sae", sae_id, "--sae-path", str(sae_dir)]
        interactions += ["--features", picked, "--quick", "--examples", "1"]
        stages.append(("interactions", [*interactions, "--budget", str(cfg.interaction_budget)]))
    else:
        typer.echo(
            "\n▶ interactions: skipped (install the `interactions` extra: pip install '.[interactions]')"
        )
    for step, args in stages:
        try:
            _run(step, args, logs)
        except DemoStepError as err:
            typer.secho(f"{step} skipped: {err}", fg="yellow")


def _print_summary(sae_dir: Path, run_dir: Path, store: Path, sae_id: str) -> None:
    """SAE metrics, absorption and where everything went."""
    typer.secho("\n══ Summary ══", bold=True)
    metrics_path = sae_dir / "metrics.json"
    if metrics_path.exists():
        metrics = json.loads(metrics_path.read_text()).get("metrics", {})
        typer.echo("SAE metrics (held-out, BOS/special positions excluded):")
        for key in (
            "explained_variance",
            "fvu",
            "mse",
            "l0",
            "dead_fraction",
            "dense_fraction",
            "ce_loss_recovered",
            "kl_recovered",
        ):
            for name, value in metrics.items():
                if name.startswith(key) and isinstance(value, int | float):
                    typer.echo(f"  {name:<36} {value:.4f}")
                    break
    absorption = run_dir / "absorption.json"
    if absorption.exists():
        result = json.loads(absorption.read_text()).get("eval_result_metrics", {})
        typer.echo("Absorption (SAEBench definitions; lower is better):")
        for section in result.values():
            if isinstance(section, dict):
                for name, value in section.items():
                    typer.echo(f"  {name:<36} {value}")
    typer.echo(
        f"Explanation scores per explainer × scorer × negatives: {run_dir / 'report.md'} (printed above)"
    )
    typer.echo(f"SAE: {sae_dir}  (id {sae_id})\nStore: {store}")
    typer.secho(f"\nBrowse it:  .venv/bin/workbench app --store {store}", bold=True)


def demo(
    out: Path = typer.Option(defaults.DEMO_DIR, help="Folder for every artifact of the demo."),
    fast: bool = typer.Option(False, help="A smaller, quicker run (fewer tokens, narrower SAE)."),
    model: options.Model = defaults.DEFAULT_MODEL,
    progress: options.Progress = True,
    llm: bool | None = typer.Option(
        None,
        "--llm/--no-llm",
        help="Explain a feature with one-shot and PRISM and score it with detection and simulation on "
        "a real LLM: the configured endpoint, else a local server for SmolLM2-135M-Instruct (default: on, off with "
        "--fast).",
    ),
) -> None:
    """Run the whole pipeline on the embedded default and print a summary (rerunning reuses what exists)."""
    del progress  # --no-progress silences the bars here and is passed on to every stage (_run)
    cfg = FAST if fast else DemoConfig()
    if model != cfg.model:
        from dataclasses import replace

        cfg = replace(cfg, model=model)
    run_demo(cfg, out, llm=not fast if llm is None else llm)
