"""One-shot fault injection for the crash/resume tests of the distributed stages (specs/scale.md 4.4).

A test sets `SAE_WORKBENCH_FAULT=<point>:<marker file>`; the first process that reaches `fail_point(<point>)`
creates the marker and exits at once with status 17 (no cleanup, as a killed worker would); later processes find the
marker and go on. Unset, `fail_point` costs one environment lookup.

Points: `index-range-<start>` (an Indexer actor, before range [start, ...) is computed), `index-range-staged-<start>`
(the same, after that range's windows staging file is written and before its activations file),
`index-reduce-commit` (the index driver, after recording one reduced bucket), `train.checkpoint`, `llm.gate`,
`score.commit`; the steps of `workbench index` (sae/index_loop.py, sae/feature_stats.py): `index-batch-committed`
(after a batch of windows and activation rows is committed), `index-finalized` (after the staged rows are moved to
the query table), `index-statistics` (after the statistics step's transaction), `index-neighbours` (the neighbours
computed, not yet written).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

FAULT_ENV = "SAE_WORKBENCH_FAULT"
FAULT_EXIT_STATUS = 17


def fail_point(point: str) -> None:
    """Exit this process abruptly if a one-shot fault is armed for `point` and has not fired yet."""
    armed = os.environ.get(FAULT_ENV)
    if not armed:
        return
    name, _, marker = armed.partition(":")
    if name != point or not marker:
        return
    try:
        fd = os.open(Path(marker), os.O_CREAT | os.O_EXCL | os.O_WRONLY)  # atomic: exactly one process fires
    except FileExistsError:
        return
    os.close(fd)
    os._exit(FAULT_EXIT_STATUS)


def worker_options() -> dict[str, Any]:
    """Ray actor/task options that pass an armed fault on to workers (those of an already running cluster do not
    inherit this process's environment); empty when none is armed."""
    armed = os.environ.get(FAULT_ENV)
    return {"runtime_env": {"env_vars": {FAULT_ENV: armed}}} if armed else {}
