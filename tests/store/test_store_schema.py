"""Schema migrations and bad store files."""

from pathlib import Path

import duckdb
import pytest

from sae_workbench.store import (
    SAEConflictError,
    SchemaVersionError,
    Store,
    StoreCorruptError,
    StoreNotFoundError,
    StoreReadOnlyError,
    UnknownSAEError,
)
from sae_workbench.store.migrations import LATEST_VERSION

EXPECTED_SCHEMA = {
    "schema_migrations": ["version", "name", "applied_at"],
    "saes": ["sae_id", "model", "hook", "d_in", "d_sae", "cfg", "metrics", "created_at"],
    "windows": ["corpus", "window_id", "tokens", "text", "token_strings", "source", "offset", "mask"],
    "index_runs": [
        "sae_id", "corpus", "context_size", "top_k", "next_window", "n_tokens", "finalized", "config", "updated_at",
    ],
    "activations_staging": ["sae_id", "feature", "window_id", "position", "value"],
    "activations": ["sae_id", "feature", "window_id", "position", "value"],
    "feature_stats": [
        "sae_id", "feature", "n_active", "n_windows_active", "density", "max_value", "mean_value",
        "quantile_levels", "quantiles", "hist_edges", "hist_counts",
    ],
    "feature_neighbours": [
        "sae_id", "feature", "logit_top_tokens", "logit_top_values", "logit_bottom_tokens", "logit_bottom_values",
        "decoder_neighbours", "decoder_cosines", "cooc_neighbours", "cooc_jaccard",
    ],
    "window_vectors": ["corpus", "model", "window_id", "dim", "vector"],
    "explanations": [
        "id", "sae_id", "feature", "explainer", "explainer_version", "prompt_version", "llm_model", "llm_params",
        "sampling", "example_ids", "negative_ids", "text", "rules", "extra", "tokens_in", "tokens_out", "seconds",
        "created_at", "config_key", "status",
    ],
    "scores": [
        "id", "explanation_id", "scorer", "scorer_version", "negative_source", "metrics", "provenance", "created_at",
        "status", "score_key",
    ],
    "evals": ["id", "sae_id", "eval_type_id", "eval", "created_at"],
    "llm_cache": ["key", "model", "response", "tokens", "created_at"],
    "samples": ["id", "sae_id", "feature", "source", "seed", "config", "window_ids", "created_at"],
    "attributions": [
        "id", "sae_id", "feature", "window_id", "position", "level", "method", "rule", "result", "config_key",
        "created_at",
    ],
    "feature_effects": ["id", "sae_id", "feature", "kind", "window_ids", "result", "config_key", "created_at"],
    "activation_partitions": ["sae_id", "root", "n_rows", "part", "created_at", "files"],
    "index_ranges": [
        "sae_id", "range_start", "range_end", "n_tokens", "n_rows", "files", "config_hash", "committed_at",
    ],
    "interactions": [
        "id", "sae_id", "feature", "text_hash", "player_type", "budget", "seed", "window_id", "position", "status",
        "result", "config_key", "created_at",
    ],
    "window_partitions": ["corpus", "root", "n_rows", "part", "created_at", "files"],
    "index_buckets": ["sae_id", "part", "fb", "n_rows", "path", "committed_at"],
    "match_runs": [
        "match_key", "sae_a", "sae_b", "method", "similarity", "threshold", "params", "n_rows", "created_at",
    ],
    "feature_matches": [
        "match_key", "sae_a", "sae_b", "method", "similarity", "threshold", "feature_a", "feature_b", "sim",
    ],
    "match_agreement": ["match_key", "feature_a", "feature_b", "act_corr", "top_jaccard", "n_windows"],
    "explanation_stability": [
        "match_key", "feature_a", "feature_b", "explanation_a", "explanation_b", "explainer", "embedding_model",
        "text_similarity", "transfer_explanation",
    ],
    "index_steps": ["sae_id", "step", "config", "completed_at"],
    "lrp_attributions": [
        "id", "sae_id", "feature", "window_id", "position", "mode", "target", "pre_activation", "closure_error",
        "result", "config_key", "created_at",
    ],
}  # fmt: skip


def test_blank_database_migrates_to_full_schema(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.duckdb")
    assert store.schema_version() == LATEST_VERSION == 12
    assert sorted(store.table_names()) == sorted(EXPECTED_SCHEMA)
    for table, columns in EXPECTED_SCHEMA.items():
        assert [c for c, _ in store.table_columns(table)] == columns, table
    types = dict(store.table_columns("activations"))
    assert types == {"sae_id": "VARCHAR", "feature": "INTEGER", "window_id": "BIGINT", "position": "SMALLINT",
                     "value": "FLOAT"}  # fmt: skip
    scores = dict(store.table_columns("scores"))
    assert (
        scores["status"]
        == scores["score_key"]
        == dict(store.table_columns("explanations"))["status"]
        == "VARCHAR"
    )
    # Re-opening applies nothing twice.
    Store.open(tmp_path / "s.duckdb")
    con = duckdb.connect(str(tmp_path / "s.duckdb"), read_only=True)
    assert con.execute("SELECT version, name FROM schema_migrations").fetchall() == [
        (1, "initial schema"),
        (2, "window embeddings as raw float32 blobs"),
        (
            3,
            "status columns on explanations and scores, unique scores.score_key (of duplicate keys the earliest row kept)",
        ),
        (4, "attributions and feature_effects (DePass attribution, ablation and steering per feature)"),
        (
            5,
            "activation_partitions (SAEs whose activations live as feature-partitioned Parquet under a root)",
        ),
        (6, "index_ranges (ledger of the window ranges a distributed index run committed)"),
        (
            7,
            "interactions (ProxySPEX interactions behind a feature: top Möbius terms, order-2 index, R^2 table)",
        ),
        (8, "window_partitions (corpora whose windows live as window-chunked Parquet under a root)"),
        (9, "index_buckets (ledger of the feature buckets a distributed index reduce placed)"),
        (10, "SAE families: match_runs, feature_matches, match_agreement, explanation_stability"),
        (
            11,
            "integrity records: the files of each partitioned SAE / corpus, and index_steps (statistics, neighbours)",
        ),
        (
            12,
            "lrp_attributions (position-aware LRP / AttnLRP / CP token and position relevance per feature example)",
        ),
    ]
    con.close()


def test_newer_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    Store.open(path)
    con = duckdb.connect(str(path))
    con.execute("INSERT INTO schema_migrations (version, name) VALUES (99, 'from the future')").fetchall()
    con.close()
    with pytest.raises(SchemaVersionError, match="newer"):
        Store.open(path)
    with pytest.raises(SchemaVersionError):
        Store.open(path, read_only=True)


def test_read_only_open_of_unmigrated_store_says_to_migrate(tmp_path: Path) -> None:
    path = tmp_path / "blank.duckdb"
    duckdb.connect(str(path)).close()
    with pytest.raises(SchemaVersionError, match="read-write"):
        Store.open(path, read_only=True)


def test_corrupted_file_raises_typed_error(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    path.write_bytes(b"not a database" * 1000)
    with pytest.raises(StoreCorruptError, match="not a readable DuckDB store"):
        Store.open(path)


def test_truncated_store_raises_typed_error(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    store = Store.open(path)
    store.add_eval("x", "core", {"a": 1})
    data = path.read_bytes()
    path.write_bytes(data[:100])
    with pytest.raises(StoreCorruptError):
        Store.open(path)


def test_missing_file_read_only(tmp_path: Path) -> None:
    with pytest.raises(StoreNotFoundError):
        Store.open(tmp_path / "nope.duckdb", read_only=True)


def test_read_only_store_refuses_writes(tmp_path: Path) -> None:
    Store.open(tmp_path / "s.duckdb")
    reader = Store.open(tmp_path / "s.duckdb", read_only=True)
    with pytest.raises(StoreReadOnlyError):
        reader.add_eval("x", "core", {})


def test_several_saes_and_conflicts(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.duckdb")
    store.register_sae("a", "tiny", "blocks.0.hook_resid_post", 64, 256, {"k": 8})
    store.register_sae("b", "tiny", "blocks.1.hook_resid_post", 64, 512, {})
    store.register_sae("a", "tiny", "blocks.0.hook_resid_post", 64, 256, {"k": 8})  # idempotent
    assert [s.sae_id for s in store.list_saes()] == ["a", "b"]
    assert store.get_sae("b").d_sae == 512 and store.get_sae("a").cfg == {"k": 8}
    with pytest.raises(SAEConflictError):
        store.register_sae("a", "tiny", "blocks.1.hook_resid_post", 64, 256, {})
    with pytest.raises(UnknownSAEError, match="known SAEs"):
        store.get_sae("zzz")
    store.update_sae_metrics("a", {"l0": 8.0})
    assert store.get_sae("a").metrics == {"l0": 8.0}
