"""Append-only, numbered schema migrations, recorded in `schema_migrations`.

Never edit a migration that has shipped: append a new one. `MIGRATIONS[i]` has version i + 1.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import duckdb

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Migration:
    """One schema step."""

    version: int
    """Schema version after applying it (1-based, consecutive)."""
    name: str
    """Short description."""
    sql: str
    """Statements, separated by semicolons."""


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "initial schema",
        """
        CREATE TABLE saes (
            sae_id TEXT PRIMARY KEY, model TEXT NOT NULL, hook TEXT NOT NULL,
            d_in INTEGER NOT NULL, d_sae INTEGER NOT NULL,
            cfg JSON NOT NULL, metrics JSON NOT NULL,
            created_at TIMESTAMP NOT NULL DEFAULT current_timestamp
        );
        CREATE TABLE windows (
            corpus TEXT NOT NULL, window_id BIGINT NOT NULL,
            tokens INTEGER[] NOT NULL, text TEXT NOT NULL, token_strings TEXT[] NOT NULL,
            source TEXT NOT NULL, "offset" BIGINT NOT NULL, mask BOOLEAN[] NOT NULL,
            PRIMARY KEY (corpus, window_id)
        );
        CREATE TABLE index_runs (
            sae_id TEXT PRIMARY KEY, corpus TEXT NOT NULL, context_size INTEGER NOT NULL, top_k INTEGER,
            next_window BIGINT NOT NULL, n_tokens BIGINT NOT NULL, finalized BOOLEAN NOT NULL,
            config JSON NOT NULL, updated_at TIMESTAMP NOT NULL DEFAULT current_timestamp
        );
        CREATE TABLE activations_staging (
            sae_id TEXT NOT NULL, feature INTEGER NOT NULL, window_id BIGINT NOT NULL,
            position SMALLINT NOT NULL, value REAL NOT NULL
        );
        CREATE TABLE activations (
            sae_id TEXT NOT NULL, feature INTEGER NOT NULL, window_id BIGINT NOT NULL,
            position SMALLINT NOT NULL, value REAL NOT NULL
        );
        CREATE TABLE feature_stats (
            sae_id TEXT NOT NULL, feature INTEGER NOT NULL,
            n_active BIGINT NOT NULL, n_windows_active BIGINT NOT NULL, density DOUBLE NOT NULL,
            max_value REAL NOT NULL, mean_value REAL NOT NULL,
            quantile_levels REAL[] NOT NULL, quantiles REAL[] NOT NULL,
            hist_edges REAL[] NOT NULL, hist_counts BIGINT[] NOT NULL,
            PRIMARY KEY (sae_id, feature)
        );
        CREATE TABLE feature_neighbours (
            sae_id TEXT NOT NULL, feature INTEGER NOT NULL,
            logit_top_tokens TEXT[], logit_top_values REAL[],
            logit_bottom_tokens TEXT[], logit_bottom_values REAL[],
            decoder_neighbours INTEGER[], decoder_cosines REAL[],
            cooc_neighbours INTEGER[], cooc_jaccard REAL[],
            PRIMARY KEY (sae_id, feature)
        );
        CREATE TABLE window_embeddings (
            corpus TEXT NOT NULL, model TEXT NOT NULL, window_id BIGINT NOT NULL, embedding FLOAT[] NOT NULL,
            PRIMARY KEY (corpus, model, window_id)
        );
        CREATE SEQUENCE explanation_ids START 1;
        CREATE TABLE explanations (
            id BIGINT PRIMARY KEY DEFAULT nextval('explanation_ids'),
            sae_id TEXT NOT NULL, feature INTEGER NOT NULL,
            explainer TEXT NOT NULL, explainer_version TEXT NOT NULL, prompt_version TEXT NOT NULL,
            llm_model TEXT NOT NULL, llm_params JSON NOT NULL, sampling JSON NOT NULL,
            example_ids BIGINT[] NOT NULL, negative_ids BIGINT[] NOT NULL,
            text TEXT NOT NULL, rules JSON, extra JSON NOT NULL,
            tokens_in BIGINT NOT NULL, tokens_out BIGINT NOT NULL, seconds DOUBLE NOT NULL,
            created_at TIMESTAMP NOT NULL DEFAULT current_timestamp,
            config_key TEXT NOT NULL UNIQUE
        );
        CREATE SEQUENCE score_ids START 1;
        CREATE TABLE scores (
            id BIGINT PRIMARY KEY DEFAULT nextval('score_ids'),
            explanation_id BIGINT NOT NULL, scorer TEXT NOT NULL, scorer_version TEXT NOT NULL,
            negative_source TEXT NOT NULL, metrics JSON NOT NULL, provenance JSON NOT NULL,
            created_at TIMESTAMP NOT NULL DEFAULT current_timestamp
        );
        CREATE SEQUENCE eval_ids START 1;
        CREATE TABLE evals (
            id BIGINT PRIMARY KEY DEFAULT nextval('eval_ids'),
            sae_id TEXT NOT NULL, eval_type_id TEXT NOT NULL, eval JSON NOT NULL,
            created_at TIMESTAMP NOT NULL DEFAULT current_timestamp
        );
        CREATE TABLE llm_cache (
            key TEXT PRIMARY KEY, model TEXT NOT NULL, response JSON NOT NULL, tokens BIGINT NOT NULL,
            created_at TIMESTAMP NOT NULL DEFAULT current_timestamp
        );
        CREATE SEQUENCE sample_ids START 1;
        CREATE TABLE samples (
            id BIGINT PRIMARY KEY DEFAULT nextval('sample_ids'),
            sae_id TEXT NOT NULL, feature INTEGER NOT NULL, source TEXT NOT NULL, seed BIGINT NOT NULL,
            config JSON NOT NULL, window_ids BIGINT[] NOT NULL,
            created_at TIMESTAMP NOT NULL DEFAULT current_timestamp
        );
        """,
    ),
    Migration(
        2,
        "window embeddings as raw float32 blobs",
        # A FLOAT[] list per window took ~1.7 s to fetch for 100k windows; one BLOB per window comes back as one
        # contiguous Arrow buffer (np.frombuffer, no parsing). Embeddings are a recomputable cache, so the old
        # table is dropped rather than converted.
        """
        DROP TABLE window_embeddings;
        CREATE TABLE window_vectors (
            corpus TEXT NOT NULL, model TEXT NOT NULL, window_id BIGINT NOT NULL, dim INTEGER NOT NULL,
            vector BLOB NOT NULL,
            PRIMARY KEY (corpus, model, window_id)
        );
        """,
    ),
    Migration(
        3,
        "status columns on explanations and scores, unique scores.score_key (of duplicate keys the earliest row kept)",
        # Backfilled from the JSON they were kept in: explanations.status = 'dead' where extra.status is "dead" (the
        # explain job's "explained" and anything else: 'ok'); scores.status = metrics.status (default 'ok');
        # scores.score_key = provenance.score_key (NULL where absent). Both tables are rebuilt (create, copy, drop,
        # rename) rather than altered: DuckDB before 1.2 cannot ADD COLUMN with a constraint, and rebuilding never
        # UPDATEs rows under a unique index (DuckDB's checks there are over-eager inside one transaction). The id
        # defaults keep drawing from the same sequences. A key stored twice keeps its earliest row (lowest id).
        """
        CREATE TABLE explanations_v3 (
            id BIGINT PRIMARY KEY DEFAULT nextval('explanation_ids'),
            sae_id TEXT NOT NULL, feature INTEGER NOT NULL,
            explainer TEXT NOT NULL, explainer_version TEXT NOT NULL, prompt_version TEXT NOT NULL,
            llm_model TEXT NOT NULL, llm_params JSON NOT NULL, sampling JSON NOT NULL,
            example_ids BIGINT[] NOT NULL, negative_ids BIGINT[] NOT NULL,
            text TEXT NOT NULL, rules JSON, extra JSON NOT NULL,
            tokens_in BIGINT NOT NULL, tokens_out BIGINT NOT NULL, seconds DOUBLE NOT NULL,
            created_at TIMESTAMP NOT NULL DEFAULT current_timestamp,
            config_key TEXT NOT NULL UNIQUE,
            status TEXT NOT NULL DEFAULT 'ok'
        );
        INSERT INTO explanations_v3
            SELECT *, CASE WHEN extra->>'status' = 'dead' THEN 'dead' ELSE 'ok' END FROM explanations ORDER BY id;
        DROP TABLE explanations;
        ALTER TABLE explanations_v3 RENAME TO explanations;
        CREATE TABLE scores_v3 (
            id BIGINT PRIMARY KEY DEFAULT nextval('score_ids'),
            explanation_id BIGINT NOT NULL, scorer TEXT NOT NULL, scorer_version TEXT NOT NULL,
            negative_source TEXT NOT NULL, metrics JSON NOT NULL, provenance JSON NOT NULL,
            created_at TIMESTAMP NOT NULL DEFAULT current_timestamp,
            status TEXT NOT NULL DEFAULT 'ok',
            score_key TEXT UNIQUE
        );
        INSERT INTO scores_v3
            SELECT *, coalesce(metrics->>'status', 'ok'), provenance->>'score_key' FROM scores
            WHERE provenance->>'score_key' IS NULL OR id IN (
                SELECT min(id) FROM scores WHERE provenance->>'score_key' IS NOT NULL GROUP BY provenance->>'score_key'
            )
            ORDER BY id;
        DROP TABLE scores;
        ALTER TABLE scores_v3 RENAME TO scores
        """,
    ),
    Migration(
        4,
        "attributions and feature_effects (DePass attribution, ablation and steering per feature)",
        # One JSON document per result, keyed by config_key (store/attributions.py); window_id is NULL for a typed
        # text. Results are recomputable, so no backfill.
        """
        CREATE SEQUENCE attribution_ids START 1;
        CREATE TABLE attributions (
            id BIGINT PRIMARY KEY DEFAULT nextval('attribution_ids'),
            sae_id TEXT NOT NULL, feature INTEGER NOT NULL, window_id BIGINT, position INTEGER NOT NULL,
            level TEXT NOT NULL, method TEXT NOT NULL, rule TEXT NOT NULL, result JSON NOT NULL,
            config_key TEXT NOT NULL UNIQUE,
            created_at TIMESTAMP NOT NULL DEFAULT current_timestamp
        );
        CREATE SEQUENCE feature_effect_ids START 1;
        CREATE TABLE feature_effects (
            id BIGINT PRIMARY KEY DEFAULT nextval('feature_effect_ids'),
            sae_id TEXT NOT NULL, feature INTEGER NOT NULL, kind TEXT NOT NULL, window_ids BIGINT[] NOT NULL,
            result JSON NOT NULL, config_key TEXT NOT NULL UNIQUE,
            created_at TIMESTAMP NOT NULL DEFAULT current_timestamp
        )
        """,
    ),
    Migration(
        5,
        "activation_partitions (SAEs whose activations live as feature-partitioned Parquet under a root)",
        # The ledger row of store/partitioned.py: written in the transaction that removes the SAE's rows from
        # `activations` (graduate) or by the driver once every bucket file is in place (Ray index reduce).
        """
        CREATE TABLE activation_partitions (
            sae_id TEXT PRIMARY KEY, root TEXT NOT NULL, n_rows BIGINT NOT NULL, part TEXT NOT NULL,
            created_at TIMESTAMP NOT NULL DEFAULT current_timestamp
        )
        """,
    ),
    Migration(
        6,
        "index_ranges (ledger of the window ranges a distributed index run committed)",
        # One row per window range [range_start, range_end) of an SAE, written by the Ray driver in the transaction
        # that copies the range's staged windows and activation rows in (store/ranges.py); files maps each staging
        # file to its sha256. Nothing to backfill: single-process runs keep using index_runs.next_window.
        """
        CREATE TABLE index_ranges (
            sae_id TEXT NOT NULL, range_start BIGINT NOT NULL, range_end BIGINT NOT NULL,
            n_tokens BIGINT NOT NULL, n_rows BIGINT NOT NULL, files JSON NOT NULL, config_hash TEXT NOT NULL,
            committed_at TIMESTAMP NOT NULL DEFAULT current_timestamp,
            PRIMARY KEY (sae_id, range_start)
        )
        """,
    ),
    Migration(
        7,
        "interactions (ProxySPEX interactions behind a feature: top Möbius terms, order-2 index, R^2 table)",
        # One JSON result per row (store/interactions.py), keyed by (sae_id, feature, text_hash, player_type, budget,
        # seed) plus a hash of the other settings in config_key. Results are recomputable, so no backfill.
        """
        CREATE SEQUENCE interaction_ids START 1;
        CREATE TABLE interactions (
            id BIGINT PRIMARY KEY DEFAULT nextval('interaction_ids'),
            sae_id TEXT NOT NULL, feature INTEGER NOT NULL, text_hash TEXT NOT NULL, player_type TEXT NOT NULL,
            budget INTEGER NOT NULL, seed INTEGER NOT NULL, window_id BIGINT, position INTEGER NOT NULL,
            status TEXT NOT NULL, result JSON NOT NULL, config_key TEXT NOT NULL UNIQUE,
            created_at TIMESTAMP NOT NULL DEFAULT current_timestamp
        );
        CREATE INDEX interactions_feature ON interactions (sae_id, feature)
        """,
    ),
    Migration(
        8,
        "window_partitions (corpora whose windows live as window-chunked Parquet under a root)",
        # The windows counterpart of activation_partitions (store/partitioned.py): written in the transaction that
        # removes the corpus's rows from `windows` (graduate). Nothing to backfill.
        """
        CREATE TABLE window_partitions (
            corpus TEXT PRIMARY KEY, root TEXT NOT NULL, n_rows BIGINT NOT NULL, part TEXT NOT NULL,
            created_at TIMESTAMP NOT NULL DEFAULT current_timestamp
        )
        """,
    ),
    Migration(
        9,
        "index_buckets (ledger of the feature buckets a distributed index reduce placed)",
        # One row per feature bucket fb of an SAE's reduce run `part` (the hash naming its files), written by the Ray
        # driver once the bucket's file is in place (store/ranges.py), so a rerun after a crash reduces only the
        # buckets without a row. Nothing to backfill: a reduce interrupted before this version simply reruns.
        """
        CREATE TABLE index_buckets (
            sae_id TEXT NOT NULL, part TEXT NOT NULL, fb INTEGER NOT NULL, n_rows BIGINT NOT NULL,
            path TEXT, committed_at TIMESTAMP NOT NULL DEFAULT current_timestamp,
            PRIMARY KEY (sae_id, part, fb)
        )
        """,
    ),
    Migration(
        10,
        "SAE families: match_runs, feature_matches, match_agreement, explanation_stability",
        # store/families.py. A run (match_key: hash of both SAE ids, method, similarity and settings) and its pairs
        # are written in one transaction; every pair row repeats the method, similarity, threshold and both SAE ids
        # so an exported feature_matches.parquet stands alone. Agreement is written per chunk of A features (the
        # resume unit); stability per (run, explanation pair, embedding model). Recomputable, so no backfill.
        """
        CREATE TABLE match_runs (
            match_key TEXT PRIMARY KEY, sae_a TEXT NOT NULL, sae_b TEXT NOT NULL, method TEXT NOT NULL,
            similarity TEXT NOT NULL, threshold DOUBLE NOT NULL, params JSON NOT NULL, n_rows BIGINT NOT NULL,
            created_at TIMESTAMP NOT NULL DEFAULT current_timestamp
        );
        CREATE TABLE feature_matches (
            match_key TEXT NOT NULL, sae_a TEXT NOT NULL, sae_b TEXT NOT NULL, method TEXT NOT NULL,
            similarity TEXT NOT NULL, threshold DOUBLE NOT NULL, feature_a INTEGER NOT NULL,
            feature_b INTEGER NOT NULL, sim REAL NOT NULL,
            PRIMARY KEY (match_key, feature_a, feature_b)
        );
        CREATE TABLE match_agreement (
            match_key TEXT NOT NULL, feature_a INTEGER NOT NULL, feature_b INTEGER NOT NULL,
            act_corr REAL, top_jaccard REAL, n_windows BIGINT NOT NULL,
            PRIMARY KEY (match_key, feature_a, feature_b)
        );
        CREATE TABLE explanation_stability (
            match_key TEXT NOT NULL, feature_a INTEGER NOT NULL, feature_b INTEGER NOT NULL,
            explanation_a BIGINT NOT NULL, explanation_b BIGINT NOT NULL, explainer TEXT NOT NULL,
            embedding_model TEXT NOT NULL, text_similarity REAL NOT NULL, transfer_explanation BIGINT,
            PRIMARY KEY (match_key, explanation_a, explanation_b, embedding_model)
        )
        """,
    ),
    Migration(
        11,
        "integrity records: the files of each partitioned SAE / corpus, and index_steps (statistics, neighbours)",
        # `files` (partitioned.py): {path relative to the SAE's / corpus's folder: [rows, bytes, blake2b]} of every
        # Parquet file graduation (or a Ray reduce) placed; every read checks the folder against it. NULL for rows
        # written before this version (reads then skip the check; `workbench verify` reports it, `workbench graduate
        # --repair` records it). `index_steps`: one row per finished post-index step of an SAE (sae/indexing.py), so
        # a kill during the statistics or the neighbours leaves them to be redone by the rerun. Backfilled from the
        # rows those steps wrote (each step writes its table in one transaction, so rows mean it finished).
        """
        ALTER TABLE activation_partitions ADD COLUMN files JSON;
        ALTER TABLE window_partitions ADD COLUMN files JSON;
        CREATE TABLE index_steps (
            sae_id TEXT NOT NULL, step TEXT NOT NULL, config JSON NOT NULL,
            completed_at TIMESTAMP NOT NULL DEFAULT current_timestamp,
            PRIMARY KEY (sae_id, step)
        );
        INSERT INTO index_steps (sae_id, step, config)
            SELECT DISTINCT sae_id, 'statistics', '{}' FROM feature_stats;
        INSERT INTO index_steps (sae_id, step, config)
            SELECT DISTINCT sae_id, 'neighbours', '{}' FROM feature_neighbours
        """,
    ),
    Migration(
        12,
        "lrp_attributions (position-aware LRP / AttnLRP / CP token and position relevance per feature example)",
        # One row per (SAE, feature, window, position, mode) result (store/lrp.py), keyed by config_key like
        # `attributions`; target, pre_activation and closure_error are columns so a check of the conservation
        # identity needs no JSON. Results are recomputable, so no backfill.
        """
        CREATE SEQUENCE lrp_attribution_ids START 1;
        CREATE TABLE lrp_attributions (
            id BIGINT PRIMARY KEY DEFAULT nextval('lrp_attribution_ids'),
            sae_id TEXT NOT NULL, feature INTEGER NOT NULL, window_id BIGINT, position INTEGER NOT NULL,
            mode TEXT NOT NULL, target DOUBLE NOT NULL, pre_activation DOUBLE NOT NULL, closure_error DOUBLE NOT NULL,
            result JSON NOT NULL, config_key TEXT NOT NULL UNIQUE,
            created_at TIMESTAMP NOT NULL DEFAULT current_timestamp
        );
        CREATE INDEX lrp_attributions_feature ON lrp_attributions (sae_id, feature)
        """,
    ),
)

LATEST_VERSION = MIGRATIONS[-1].version


def statements(sql: str) -> list[str]:
    """Split a migration's SQL into statements (no semicolons inside literals in our migrations)."""
    return [s.strip() for s in sql.split(";") if s.strip()]


def schema_version_of(conn: duckdb.DuckDBPyConnection) -> int:
    """Highest applied migration (0 for a blank database)."""
    exists = conn.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
        "AND table_name = 'schema_migrations'"
    ).fetchall()
    if not exists or not exists[0][0]:
        return 0
    rows = conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchall()
    return int(rows[0][0]) if rows else 0


def migrate(conn: duckdb.DuckDBPyConnection, current: int, upto: int = LATEST_VERSION) -> None:
    """Apply every migration above `current` (up to version `upto`), each in its own transaction, recording it."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
        "applied_at TIMESTAMP NOT NULL DEFAULT current_timestamp)"
    ).fetchall()
    for migration in MIGRATIONS:
        if migration.version <= current or migration.version > upto:
            continue
        conn.execute("BEGIN TRANSACTION").fetchall()
        try:
            for statement in statements(migration.sql):
                conn.execute(statement).fetchall()
            conn.execute(
                "INSERT INTO schema_migrations (version, name) VALUES (?, ?)",
                [migration.version, migration.name],
            ).fetchall()
            conn.execute("COMMIT").fetchall()
        except BaseException:
            conn.execute("ROLLBACK").fetchall()
            raise
        log.info("store migrated to schema version %d (%s)", migration.version, migration.name)
