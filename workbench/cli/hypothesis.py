"""`workbench hypothesis`: store your own explanation of a feature (text and/or rules) to score it like any other.

    workbench hypothesis --store S --sae ID --feature 12 --text "the word LORD in the KJV"
    workbench hypothesis --store S --sae ID --feature 12 --rule '"LORD"' --strength 5 --rule '"Lord"' --strength 4
    workbench score --store S --sae ID --scorer detection --explainer manual

It is stored as explainer `manual` with who/when/where in its provenance; the same hypothesis submitted again is
not stored twice. Rules use the lexical syntax (quoted tokens match exactly, case kept; `"B" after "A"`).
"""

from __future__ import annotations

import typer

from sae_workbench.cli import options


def hypothesis(
    store: options.Store,
    sae: options.SaeId,
    feature: int = typer.Option(..., "--feature", help="The feature the hypothesis explains."),
    text: str = typer.Option("", "--text", help="The hypothesis in words (default: the rules as text)."),
    rule: list[str] = typer.Option(
        [], "--rule", help='A rule, e.g. \'"LORD" after "the"\'; repeat for several (at most 5).'
    ),
    strength: list[int] = typer.Option(
        [],
        "--strength",
        help="Strength 0..5 of each --rule, in order (none: 5 for every rule).",
    ),
    author: str | None = typer.Option(None, "--author", help="Who states it (default: your login name)."),
    seen: str = typer.Option(
        "",
        "--seen",
        help="Window ids you read before writing it, comma-separated (e.g. from the app's feature page): scoring "
        "holds them, their documents and near-duplicates out of the test windows.",
    ),
) -> None:
    """Store a hand-written explanation of one feature as explainer `manual`, ready for `workbench score`."""
    from sae_workbench.explainers.manual import (
        DEFAULT_STRENGTH,
        HypothesisError,
        default_author,
        parse_hypothesis,
        store_hypothesis,
    )
    from sae_workbench.store import Store, StoreNotFoundError

    if not store.exists():
        raise StoreNotFoundError(
            f"No store at {store}; `workbench index --store {store} ...` creates and fills it."
        )
    if strength and len(strength) != len(rule):
        raise HypothesisError(
            f"{len(strength)} --strength for {len(rule)} --rule; give one per rule, or none (all {DEFAULT_STRENGTH})"
        )
    strengths = strength or [DEFAULT_STRENGTH] * len(rule)
    hyp = parse_hypothesis(text, list(zip(rule, strengths, strict=True)))
    try:
        shown = [int(s) for s in seen.replace(",", " ").split()]
    except ValueError as err:
        raise HypothesisError(f"--seen takes window ids separated by commas, not {seen!r}") from err
    stored = store_hypothesis(
        Store.open(store), sae, feature, hyp, author=author or default_author(), source="cli", shown_ids=shown
    )
    what = "stored" if stored.created else "already stored"
    typer.echo(
        f"{what}: explanation {stored.explanation_id} of feature {feature} (explainer manual). Score it with "
        f"`workbench score --store {store} --sae {sae} --scorer detection --explainer manual --features {feature}`"
    )
