"""The app's one write: the feature page's hypothesis form stores a hand-written explanation (explainer `manual`)
in one short write session, then drops the query caches so the page shows it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sae_workbench.app.queries import BUSY_TIMEOUT_S, clear_caches
from sae_workbench.app.settings import app_read_only
from sae_workbench.errors import WorkbenchError
from sae_workbench.explainers.manual import (
    HypothesisError,
    StoredHypothesis,
    parse_hypothesis,
    parse_rule_lines,
    store_hypothesis,
)
from sae_workbench.store import Store

__all__ = ["HypothesisError", "ReadOnlyAppError", "submit_hypothesis", "writable"]


class ReadOnlyAppError(WorkbenchError):
    """The app serves its store read-only, so the hypothesis form cannot store anything."""


def writable(path: str) -> bool:
    """Whether the feature page's hypothesis form may write to the store (not `--read-only`, file writable)."""
    return not app_read_only(Path(path))


def page_window_ids(dash: Any) -> list[int]:
    """The windows the feature page shows next to its hypothesis form: top examples, quantile bins and the first 10
    of each negative sample (what a hypothesis's author may have read; held out when it is scored)."""
    views = [*dash.top, *dash.quantiles, *(e for s in dash.samples for e in s.examples[:10])]
    return sorted({int(v.window_id) for v in views})


def submit_hypothesis(
    path: str,
    sae_id: str,
    feature: int,
    text: str,
    rule_lines: str,
    author: str,
    shown_ids: Sequence[int] = (),
) -> StoredHypothesis:
    """Store a hand-written explanation as explainer `manual` (source "app") in one short write session.

    The app's only write: the store is opened writable for this call alone (other queries keep their read-only
    handle), and the caches are dropped so the page shows the new explanation. ReadOnlyAppError on a read-only app,
    HypothesisError on bad text/rules, StoreBusyError when a job holds the store longer than BUSY_TIMEOUT_S.
    """
    if not writable(path):
        raise ReadOnlyAppError(
            "This app serves its store read-only; store a hypothesis with `workbench hypothesis --store STORE "
            "--sae ID --feature F --text ...` instead."
        )
    hypothesis = parse_hypothesis(text, parse_rule_lines(rule_lines))
    store = Store.open(path, busy_timeout_s=BUSY_TIMEOUT_S)
    stored = store_hypothesis(
        store, sae_id, feature, hypothesis, author=author.strip(), source="app", shown_ids=shown_ids
    )
    clear_caches()
    return stored
