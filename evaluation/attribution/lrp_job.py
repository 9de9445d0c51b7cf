"""Batch position-aware LRP of stored features: each feature's top examples at their peak, in each mode, into
`lrp_attributions`.

    summary = run_lrp_attribution(store, model, sae, sae_id, features=[0, 1, 2], config=LrpConfig(modes=("pa_lrp",)))

Rows are keyed like DePass's (`job.config_key`: SAE, feature, window, position, method, plus this module's
LRP_VERSION and the job's JOB_VERSION), so a rerun skips what is stored and an interrupted run resumes where it stopped.
A feature whose attribution fails (unsupported model, a broken identity) is reported and the job goes on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import torch
from sae_lens import SAE
from transformer_lens import HookedTransformer

from sae_workbench.evaluation.attribution.errors import AttributionError
from sae_workbench.evaluation.attribution.job import JobSummary, config_key, top_examples_of
from sae_workbench.evaluation.attribution.lrp_rules import LRP_MODES, LrpMode, check_model
from sae_workbench.evaluation.attribution.pa_lrp import lrp_attribution
from sae_workbench.store import Store
from sae_workbench.store.lrp import LrpRecord

log = logging.getLogger(__name__)

LRP_VERSION = "1"


class LrpConfigError(AttributionError):
    """The LRP batch job was asked for something it does not do."""


@dataclass(frozen=True)
class LrpConfig:
    """What `run_lrp_attribution` computes per feature."""

    modes: tuple[LrpMode, ...] = ("pa_lrp",)
    """pa_lrp (positions are inputs), attnlrp (positions detached) and/or cp (attention pattern constant)."""
    examples: int = 3
    """Top examples (highest max activation) attributed per feature, each at its peak position."""

    def check(self) -> None:
        """Raise LrpConfigError for unknown modes or fewer than one example."""
        bad = [m for m in self.modes if m not in LRP_MODES]
        if bad or not self.modes or self.examples < 1:
            raise LrpConfigError(
                f"unknown modes {bad or '(none given)'} or examples < 1: modes are {LRP_MODES}, and at least 1 "
                "example per feature."
            )


@dataclass
class LrpSummary(JobSummary):
    """What an LRP run did."""

    attributions: int = 0
    """New rows stored."""
    failed: dict[int, str] = field(default_factory=lambda: dict[int, str]())
    """Features whose attribution raised, with the error."""


def run_lrp_attribution(
    store: Store,
    model: HookedTransformer,
    sae: SAE[Any],
    sae_id: str,
    features: list[int],
    config: LrpConfig | None = None,
    progress: bool = True,
) -> LrpSummary:
    """LRP-attribute each feature's top examples in every configured mode; store them; skip what is stored."""
    config = config or LrpConfig()
    config.check()
    check_model(model)
    hook = store.get_sae(sae_id).hook
    stored = store.stored_lrp_keys(sae_id)
    summary = LrpSummary()
    for feature, examples, windows in top_examples_of(
        store, sae_id, features, config.examples, summary, "lrp", progress
    ):
        rows: list[LrpRecord] = []
        try:
            for ex, window in zip(examples, windows, strict=True):
                tokens_N = torch.as_tensor(window.tokens, dtype=torch.long)
                for mode in config.modes:
                    key = config_key(
                        sae_id=sae_id, feature=feature, window=ex.window_id, position=ex.max_position, method=mode,
                        lrp_version=LRP_VERSION,
                    )  # fmt: skip
                    if key in stored:
                        summary.skipped += 1
                        continue
                    r = lrp_attribution(model, sae, hook, tokens_N, feature, ex.max_position, mode)
                    rows.append(
                        LrpRecord(
                            sae_id, feature, ex.window_id, r.position, mode, r.target, r.pre_activation,
                            r.closure_error, r.to_dict(), key,
                        )
                    )  # fmt: skip
        except AttributionError as err:
            log.warning("LRP of feature %d failed: %s", feature, err)
            summary.failed[feature] = str(err)
            continue
        summary.attributions += store.add_lrp_attributions(rows)
    return summary
