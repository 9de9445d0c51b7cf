"""The DuckDB feature store, where every stage's results land — the contract between all stages. ALL SQL of the
workbench lives in this package (tests/store/test_sql_only_in_store.py), and each table family's module names only its
own tables (tests/store/test_table_families.py).

    from sae_workbench.store import Store
    store = Store.open("runs/store.duckdb")               # writer (creates + migrates)
    app_store = Store.open("runs/store.duckdb", read_only=True)   # reader (the Streamlit app)

Concurrency (DuckDB allows one writing process, and an open read-write connection locks readers out): no process
keeps the file open. Each method attaches the file to the process's one in-memory DuckDB instance, runs one short
transaction and detaches it (~5 ms; a fresh DuckDB instance per call cost 15–60 ms — see `connection.py`); `with
store.session():` holds it across several calls (a dashboard render, a batch of writes; keep it short) and caches
what cannot change under it (index progress, SAE records, indexed window ids, window maxima). The `Session` it yields
is a handle, not a connection: no SQL leaves this package. Long writers (the explain job) hold the file in a
`lease.StoreLease` that steps aside when another process announces it waits.
A process that finds the file locked retries with exponential backoff (5 ms → 25 ms) up to `busy_timeout_s` (60 s for
a reader; a writer waits without limit and logs that it waits, so a reader cannot fail a job), then
raises `StoreBusyError`. So the app keeps reading while `workbench index` writes (it waits at most one write
transaction), and concurrent writers queue on DuckDB's lock — never interleave, never corrupt.

Layout: `store.py` is the `Store` facade, one class over a mixin per table family, each module holding its own SQL:
`base.py` (sessions, transactions, session cache, schema introspection), `saes.py`, `windows.py`, `indexing.py`
(index_runs, activations_staging, activations), `activations.py` (per-feature reads and example draws, with
`feature_rows.py`), `stats.py`, `tokens.py` (token search), `explanations.py`, `scores.py` (scores, evals),
`samples.py`, `llm_cache.py`, `window_embeddings.py` (+ `vectors.py`, the memory-mapped copy), `parquet.py`; `sql.py` holds
their shared helpers, `connection.py` the file attachment, `migrations.py` the schema, `lease.py` the job's lease.

Why one flat `Store` and not namespaced views (`store.scores.add(...)`): the families share more than a connection.
One `with store.session()` / `store.transaction()` spans several of them (the explain job writes explanations, samples
and LLM cache rows in one transaction; indexing writes windows and activations together) and the session cache it
holds (index progress, SAE records, window maxima) serves all of them, so views would be thin aliases of the same
object. The grouping a reader needs is the file layout — one module per family, listed in `store.py` — and every
method name already carries its family (`add_explanation`, `scores`, `llm_cache_get`, `window_embeddings`). What the
grouping is for, that one family never touches another's tables, is enforced by tests/store/test_table_families.py
(cross-family reads go through the owner's relation functions: `_windows_sql`, `_activations_sql`,
`explanations.explanation_ids_of_sae`), which namespaces alone would not guarantee; renaming ~80 methods across every
stage would churn the callers and change nothing they can observe.

Schema: append-only numbered migrations (`migrations.py`) recorded in `schema_migrations`; a store from a newer
version raises `SchemaVersionError`, an unreadable file `StoreCorruptError`.

Tables: saes, windows, index_runs, activations_staging, activations (sparse: sae_id, feature, window_id, position,
value; sorted by feature after indexing; empty for a partitioned SAE), activation_partitions and window_partitions (the Parquet ledgers), feature_stats, feature_neighbours, window_vectors (float32 blobs),
explanations (status), scores (status, score_key UNIQUE), evals, llm_cache, samples, schema_migrations.

Public API of `Store` (records are frozen dataclasses from `sae_workbench.store.rows`; statuses are
`sae_workbench.status.Status`):

  Store.open(path, read_only=False, *, busy_timeout_s=None) -> Store   (None: 60 s read-only, no limit for writers)
  session() -> ContextManager[Session];  transaction() -> ContextManager[None]   (group writes atomically)
  schema_version() -> int;  table_names() -> list[str];  table_columns(table) -> list[(name, type)]

  SAEs
  register_sae(sae_id, model, hook, d_in, d_sae, cfg: dict, metrics: dict | None = None) -> SAERecord
  get_sae(sae_id) -> SAERecord;  list_saes() -> list[SAERecord];  update_sae_metrics(sae_id, metrics) -> None

  Windows (keyed by (corpus, window_id); window_id = position in the corpus's deterministic window sequence)
  add_windows(corpus, window_ids, tokens_BT, mask_BT, texts, token_strings, sources, offsets) -> int  (new rows)
  get_windows(corpus, window_ids) -> list[Window];  window_tokens(corpus, ids) -> {id: (token_strings, mask)}
  window_ids(corpus) -> ndarray;  window_texts(corpus, ids) -> list[str]

  Activations / indexing (written by sae_workbench.sae.index_loop)
  start_index(sae_id, corpus, context_size, top_k, config) -> IndexProgress;  index_progress(sae_id) -> IndexProgress | None
  add_activations(sae_id, batch: pa.Table | pa.RecordBatch [feature, window_id, position, value]) -> int
  add_index_batch(sae_id, corpus, windows: dict, activations, next_window, n_tokens) -> None   (atomic, idempotent)
  finalize_index(sae_id) -> int;  activation_count(sae_id, staged=False) -> int;  activation_coordinates(sae_id) -> pa.Table
  window_activations(sae_id, feature, window_ids) -> ndarray (N, T) float32   (dense per-token values)
  window_maxima(sae_id, feature) -> WindowMaxima;  indexed_window_ids(sae_id) -> ndarray
  window_text_scores(sae_id, feature) -> (window ids, scores)   (PRISM's text score per active window)
  features_for_token(sae_id, token, *, ignore_case=False, limit=25) -> (occurrences, list[TokenFeature])

  Examples (window ids of the SAE's indexed corpus: get_sae/index_progress(sae_id).corpus)
  top_examples(sae_id, feature, k=20) -> list[Example]
  add_sample(Sample) -> int;  samples(sae_id, feature=None, source=None) -> list[Sample]
  (Sampling policy is not the store's: sae_workbench.examples.sampling draws over window_maxima and
  indexed_window_ids — quantile_examples, random_examples, random_negatives, close_negatives — and draw_examples /
  draw_negatives store what they draw as samples.)

  Embeddings
  add_window_embeddings(corpus, model, window_ids, embeddings_ND) -> None
  window_embeddings(corpus, model) -> WindowEmbeddings   (memory-mapped copy in <store>.vectors/ while it matches)
  windows_missing_embeddings(corpus, model) -> ndarray
  embedding_count(corpus, model) -> int

  Feature statistics (filled by sae_workbench.sae.feature_stats.compute_feature_stats)
  compute_activation_stats(sae_id, quantile_levels=…, n_bins=32) -> int;  put_feature_neighbours(sae_id, table) -> None
  feature_stats(sae_id, feature) -> FeatureStats;  feature_table(sae_id) -> pa.Table

  Explanations (status OK or DEAD)
  add_explanation(ExplanationRecord) -> int (existing id if its config_key is stored);  has_explanation(config_key) -> bool
  stored_explanation_keys(config_keys) -> set[str] (the stored subset, one query)
  add_explanations(records) -> list[int]   (one transaction: batch a job's writes)
  explanations(sae_id=None, feature=None, explainer=None) -> list[ExplanationRecord];  get_explanation(id) -> ExplanationRecord

  Scores (status; score_key unique: a stored key raises DuplicateScoreError and writes nothing), evals, LLM cache
  add_score(ScoreRecord) -> int;  add_scores(records) -> list[int]   (one transaction, all or nothing)
  score_keys(sae_id, scorer) -> set[str]   (what a job skips on resume, one query)
  scores(explanation_id=None, scorer=None, sae_id=None) -> list[ScoreRecord]
  add_eval(sae_id, eval_type_id, result: dict) -> int;  evals(sae_id=None, eval_type_id=None) -> list[EvalRecord]
  llm_cache_get(key) -> LLMCacheEntry | None;  llm_cache_put(key, model, response: dict, tokens: int) -> None
  llm_cache_put_many([(key, model, response, tokens), ...]) -> None;  llm_cache_entries(model) -> list[LLMCacheEntry]

  Your own SQL (read-only; works while a job holds the file: it waits its turn through the lease)
  query(sql, params=None) -> pa.Table   (one SELECT / WITH / DESCRIBE / SHOW / SUMMARIZE / EXPLAIN; else
  QueryNotAllowedError) — the CLI's `workbench sql --store S "SELECT ..."`

  Partitioned data plane (partitioned.py, graduate.py: an SAE's activations, fb = feature // 256, and a corpus's
  windows, chunk = window_id // 65536, as hive-partitioned Parquet under a root, local or s3://; every read above
  answers the same on either layout)
  graduate(root, sae_ids=None, *, windows=True) -> list[GraduationReport]   (crash-safe; a rerun finishes the job)
  verify() -> VerifyReport   (schema, ledgers, every partitioned file byte for byte, index steps, staging leftovers)
  damaged_files(kind, key, deep=False) / replace_partition_file(kind, key, rel, rows)   (`graduate --repair`)
  activations_root(sae_id) / windows_root(corpus) -> str | None;  partitioned_saes() / partitioned_corpora() -> dict
  record_partitioned(sae_id, root, n_rows, part) / record_windows_partitioned(corpus, ...) -> None   (ledger rows)

  Export / import
  export_parquet(folder) -> list[Path];  import_parquet(folder) -> list[str]
  sae_workbench.store.export.export_neuronpedia(store, sae_id, path, ...) -> int   (gzipped JSONL)
"""

from sae_workbench.store.errors import (
    DuplicateScoreError,
    NotIndexedError,
    QueryNotAllowedError,
    SAEConflictError,
    SchemaVersionError,
    StoreBusyError,
    StoreCorruptError,
    StoreError,
    StoreNotFoundError,
    StoreReadOnlyError,
    UnknownSAEError,
)
from sae_workbench.store.rows import (
    EvalRecord,
    Example,
    ExplanationRecord,
    FeatureStats,
    IndexProgress,
    LLMCacheEntry,
    SAERecord,
    Sample,
    ScoreRecord,
    TokenFeature,
    Window,
    WindowEmbeddings,
    WindowMaxima,
)
from sae_workbench.store.store import IndexConfigError, Session, Store

__all__ = [
    "DuplicateScoreError",
    "EvalRecord",
    "Example",
    "ExplanationRecord",
    "FeatureStats",
    "IndexConfigError",
    "IndexProgress",
    "LLMCacheEntry",
    "NotIndexedError",
    "QueryNotAllowedError",
    "SAEConflictError",
    "SAERecord",
    "Sample",
    "SchemaVersionError",
    "ScoreRecord",
    "Session",
    "Store",
    "StoreBusyError",
    "StoreCorruptError",
    "StoreError",
    "StoreNotFoundError",
    "StoreReadOnlyError",
    "TokenFeature",
    "UnknownSAEError",
    "Window",
    "WindowEmbeddings",
    "WindowMaxima",
]
