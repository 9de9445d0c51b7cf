"""The partitioned data plane: an SAE's activation rows and a corpus's windows as hive-partitioned Parquet under a
root, local or `s3://`.

Layout (specs/scale.md section 4.2), one immutable file per (SAE, feature bucket):

    <root>/activations/sae_id=<id>/fb=<feature // 256 :05d>/part-<cfg8>.parquet
        columns feature INT32, window_id INT64, position INT16, value FLOAT, rank INT32
        sorted by (feature, value DESC, window_id, position); rank = 0-based rank of the row within its feature in
        that order; row groups of ROW_GROUP_SIZE rows (sae_id and fb live in the path, not in the file)
    <root>/windows/corpus=<name>/chunk=<window_id // 65536 :05d>/part-<cfg8>.parquet
        the `windows` table's columns but corpus, sorted by window_id
    <root>/staging/<job>/...              files being written; never read (moved into place when complete)

How a store knows it is partitioned: per SAE, from its ledger. `store.duckdb` stays the control plane; the table
`activation_partitions` (migration 5) holds one row per SAE whose activations live under a root (sae_id, root,
n_rows, part). A row there is the commit record: it is written in the same transaction that deletes the SAE's rows
from the single file (`graduate.py`), so readers see the rows either in the file or in Parquet, never both and never
a half-written bucket. An SAE without a row reads the `activations` table as before, so one store may hold both.
Windows likewise, per corpus, in `window_partitions` (migration 8).

Reads: every activation query of the store names its relation through `Partitions._activations_sql(sae_id)`,
which is `activations` (the table) or, for a partitioned SAE, a view over
`read_parquet('<root>/activations/sae_id=<id>/*/*.parquet', hive_partitioning=true, hive_types=HIVE_TYPES)` with
the same columns (plus fb and rank). Per-feature queries also filter `fb = feature // 256` (`_bucket_filter`), which
DuckDB turns into a file filter: only that bucket's file is opened (checked with EXPLAIN in tests/store/
test_partitioned.py). Window reads name `_windows_sql(corpus)` and, by id, filter `chunk IN (...)`
(`_chunk_filter`). The views are inlined as a subquery rather than a per-connection TEMP VIEW: the store's
connections are short-lived cursors of one process-wide DuckDB instance, and a subquery needs no per-cursor state.

Object storage: a root `s3://bucket/prefix` is read and written through fsspec/s3fs registered in DuckDB
(`register_filesystem`; no httpfs extension, so it works offline). Credentials come from the usual AWS variables
(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_DEFAULT_REGION); the endpoint (moto, MinIO) from
AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL (the CLI's --endpoint-url sets the latter).

Integrity: the ledger row also records every file it committed (`files`: path relative to the SAE's or corpus's
folder -> [rows, bytes, blake2b]). Before any query reads a partitioned SAE or corpus, its folder is listed once
(once per session: a dashboard render, a job's lease) and compared with that record: a missing file, one of
another size, or a file the ledger does not know (it would be counted twice) raises `PartitionFileError` naming the
file and the fix (restore it, or `workbench graduate --repair`), instead of a silently smaller answer. A per-feature
read also checks its bucket's file on every call (one stat on a local root). DuckDB's own errors on a damaged file
(same size, bad bytes) become the same typed error (`StoreBase._conn`). `workbench verify` reads every byte
(digests and footers) as well.

Writers (graduate, and the Ray backend's reduce tasks) use `write_bucket`, which sorts and ranks one bucket's rows
and COPYs them to a file; the caller writes to a staging path and moves the file into place (`move_file`).
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Any
from urllib.parse import quote

import duckdb
import fsspec  # pyright: ignore[reportMissingTypeStubs]

from sae_workbench.store.base import StoreBase
from sae_workbench.store.errors import PartitionFileError, StoreError
from sae_workbench.store.sql import count, dumps, first, loads

BUCKET_SIZE = 256
"""Features per partition bucket (specs/scale.md 4.2: 131k features -> 512 buckets, each a few files' footers)."""
ROW_GROUP_SIZE = 122_880
"""Rows per Parquet row group: DuckDB's default row-group size, so a top-k read of one feature touches 1-2 groups."""
HIVE_TYPES = "{'sae_id': VARCHAR, 'fb': INTEGER}"
"""Types of the hive partition columns (ids are never re-typed as numbers)."""
FILE_COLUMNS = ("feature", "window_id", "position", "value", "rank")
"""Columns stored in each bucket file."""
S3_PREFIX = "s3://"
_fsspec: Any = fsspec
"""fsspec (its signatures are untyped)."""


WINDOW_CHUNK = 65_536
"""Windows per `chunk` partition (65,536 windows of 128 tokens = 8.4M tokens per file)."""
WINDOW_ROW_GROUP_SIZE = 2_048
"""Rows per row group of a window file: a read by id decodes 2,048 windows' token lists, not 65,536."""
WINDOW_HIVE_TYPES = "{'corpus': VARCHAR, 'chunk': INTEGER}"
"""Types of the windows layout's partition columns."""
WINDOW_FILE_COLUMNS = ("window_id", "tokens", "text", "token_strings", "source", "offset", "mask")
"""Columns stored in each window file (the `windows` table's but corpus, in its order)."""


def chunk_of(window_id: int) -> int:
    """The windows partition (`chunk`) of a window id."""
    return int(window_id) // WINDOW_CHUNK


def corpus_dir(root: str, corpus: str) -> str:
    """The folder holding every chunk of one corpus's windows."""
    return join(root, "windows", "corpus=" + quote(corpus, safe="-_."))


def windows_dir(root: str, corpus: str, chunk: int) -> str:
    """The folder of one (corpus, chunk): `<root>/windows/corpus=<name>/chunk=<chunk:05d>`."""
    return join(corpus_dir(root, corpus), f"chunk={int(chunk):05d}")


def bucket_of(feature: int) -> int:
    """The partition bucket (`fb`) of a feature."""
    return int(feature) // BUCKET_SIZE


def sae_segment(sae_id: str) -> str:
    """The `sae_id=<id>` path segment (characters outside [A-Za-z0-9-_.] percent-encoded)."""
    return "sae_id=" + quote(sae_id, safe="-_.")


def join(root: str, *parts: str) -> str:
    """`root/part/...` for a local or s3:// root (no trailing slash)."""
    return "/".join([root.rstrip("/"), *parts])


def sae_dir(root: str, sae_id: str) -> str:
    """The folder holding every bucket of one SAE."""
    return join(root, "activations", sae_segment(sae_id))


def activations_dir(root: str, sae_id: str, fb: int) -> str:
    """The folder of one (SAE, bucket): `<root>/activations/sae_id=<id>/fb=<fb:05d>`."""
    return join(sae_dir(root, sae_id), f"fb={int(fb):05d}")


def part_name(cfg8: str) -> str:
    """File name of a bucket's part written under config hash `cfg8`."""
    return f"part-{cfg8}.parquet"


def staging_dir(root: str, job: str) -> str:
    """A job's staging folder (`<root>/staging/<job>`): written first, never read by queries."""
    return join(root, "staging", job)


def config_hash8(config: Any) -> str:
    """First 8 hex digits of the sha256 of a JSON-able config (names the part files it writes)."""
    return hashlib.sha256(dumps(config).encode()).hexdigest()[:8]


def is_remote(root: str) -> bool:
    """Whether the root is on object storage (s3://)."""
    return root.startswith(S3_PREFIX)


def normalise_root(root: str) -> str:
    """An absolute local path, or the s3:// URL unchanged (trailing slash dropped)."""
    if is_remote(root):
        return root.rstrip("/")
    return os.path.abspath(os.path.expanduser(root))


def s3_options() -> dict[str, Any]:
    """s3fs options from the environment: endpoint from AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, the rest boto's own
    variables; listings are never cached (another process may have just committed a bucket)."""
    options: dict[str, Any] = {"skip_instance_cache": True, "use_listings_cache": False}
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        options["client_kwargs"] = {"endpoint_url": endpoint}
    return options


def filesystem(root: str) -> Any:
    """The fsspec filesystem of a root (local or s3)."""
    if is_remote(root):
        return _fsspec.filesystem("s3", **s3_options())
    return _fsspec.filesystem("file")


def fs_path(root_or_path: str) -> str:
    """A path as its fsspec filesystem names it (s3:// stripped)."""
    return root_or_path[len(S3_PREFIX) :] if is_remote(root_or_path) else root_or_path


_registry_lock = threading.Lock()
_registered: dict[str, str] = {}
"""'s3' -> the options registered in this process's DuckDB instance (see ensure_registered)."""


def ensure_registered(conn: duckdb.DuckDBPyConnection, root: str) -> None:
    """Make DuckDB read and write `root`: registers s3fs in the connection's DuckDB instance (shared by all its
    cursors) for an s3:// root, again when the endpoint or key in the environment changed. A local root needs
    nothing."""
    if not is_remote(root):
        return
    wanted = dumps({**s3_options(), "key": os.environ.get("AWS_ACCESS_KEY_ID")})
    with _registry_lock:
        names = set(conn.list_filesystems())
        if "s3" in names and _registered.get("s3") == wanted:
            return
        if "s3" in names:
            conn.unregister_filesystem("s3")
        conn.register_filesystem(filesystem(root))
        _registered["s3"] = wanted


def activations_relation(root: str, sae_id: str) -> str:
    """SQL of a relation with the `activations` table's columns (+ fb, rank) over one SAE's Parquet files."""
    glob = join(sae_dir(root, sae_id), "*", "*.parquet").replace("'", "''")
    literal = sae_id.replace("'", "''")
    return (
        f"(SELECT '{literal}'::TEXT AS sae_id, feature, window_id, position, value, rank, fb FROM read_parquet("
        f"'{glob}', hive_partitioning = true, hive_types = {HIVE_TYPES}))"
    )


def windows_relation(root: str, corpus: str) -> str:
    """SQL of a relation with the `windows` table's columns (+ chunk) over one corpus's Parquet files."""
    glob = join(corpus_dir(root, corpus), "*", "*.parquet").replace("'", "''")
    literal = corpus.replace("'", "''")
    columns = ", ".join(f'"{c}"' for c in WINDOW_FILE_COLUMNS)
    return (
        f"(SELECT '{literal}'::TEXT AS corpus, {columns}, chunk FROM read_parquet('{glob}', hive_partitioning = true, "
        f"hive_types = {WINDOW_HIVE_TYPES}))"
    )


def write_bucket(conn: duckdb.DuckDBPyConnection, rows_sql: str, params: list[Any], path: str) -> int:
    """COPY one bucket's rows (`rows_sql` yields feature, window_id, position, value) to the Parquet file `path`,
    sorted by (feature, value DESC, window_id, position) with each row's rank within its feature; return the rows.

    The caller picks the path: write to a staging path, then `move_file` it into place once complete.
    """
    return _copy(
        conn,
        "SELECT feature::INTEGER AS feature, window_id::BIGINT AS window_id, position::SMALLINT AS position, "
        "value::FLOAT AS value, (row_number() OVER (PARTITION BY feature ORDER BY value DESC, window_id, position) "
        f"- 1)::INTEGER AS rank FROM ({rows_sql}) ORDER BY feature, value DESC, window_id, position",
        params,
        path,
        ROW_GROUP_SIZE,
    )


def write_bucket_from_files(files: list[str], features: tuple[int, int], path: str) -> int:
    """`write_bucket` of the rows of features [lo, hi) read from Parquet files (columns feature, window_id, position,
    value), on a DuckDB connection of its own (never the store file): the reduce task of `index --backend ray`."""
    listed = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
    rows_sql = f"SELECT feature, window_id, position, value FROM read_parquet([{listed}]) WHERE feature >= ? AND feature < ?"
    conn = duckdb.connect()
    try:
        return write_bucket(conn, rows_sql, [features[0], features[1]], path)
    finally:
        conn.close()


def write_window_chunk(conn: duckdb.DuckDBPyConnection, rows_sql: str, params: list[Any], path: str) -> int:
    """COPY one chunk of windows (`rows_sql` yields the `windows` table's columns but corpus) to `path`, sorted by
    window id; return the rows (write to a staging path, then `move_file` it into place)."""
    columns = ", ".join(f'"{c}"' for c in WINDOW_FILE_COLUMNS)
    return _copy(
        conn, f"SELECT {columns} FROM ({rows_sql}) ORDER BY window_id", params, path, WINDOW_ROW_GROUP_SIZE
    )


def _copy(
    conn: duckdb.DuckDBPyConnection, select_sql: str, params: list[Any], path: str, row_group_size: int
) -> int:
    """COPY a query's rows to one zstd Parquet file at `path` (local folders created); return the rows."""
    ensure_registered(conn, path)
    if not is_remote(path):
        filesystem(path).makedirs(os.path.dirname(path), exist_ok=True)
    target = path.replace("'", "''")
    return count(
        conn.execute(
            f"COPY ({select_sql}) TO '{target}' (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE {row_group_size})",
            params,
        )
    )


def parquet_rows(conn: duckdb.DuckDBPyConnection, path_or_glob: str) -> int:
    """Rows in a Parquet file (or glob of files), from the footers only."""
    ensure_registered(conn, path_or_glob)
    literal = path_or_glob.replace("'", "''")
    return count(conn.execute(f"SELECT coalesce(sum(num_rows), 0) FROM parquet_file_metadata('{literal}')"))


def move_file(src: str, dst: str) -> None:
    """Move a finished file into place (a rename on a local root, copy + delete on s3), replacing `dst`."""
    fs = filesystem(src)
    if not is_remote(dst):
        fs.makedirs(os.path.dirname(dst), exist_ok=True)
        os.replace(src, dst)
        return
    fs.mv(fs_path(src), fs_path(dst))


FileRecord = list[int | str]
"""[rows, bytes, blake2b hex] of one placed Parquet file (a ledger's `files` value)."""


def file_digest(path: str) -> str:
    """BLAKE2b (128-bit) of a local or s3:// file's bytes."""
    digest = hashlib.blake2b(digest_size=16)
    with filesystem(path).open(fs_path(path), "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def listed_files(folder: str) -> dict[str, int]:
    """Path relative to `folder` -> size in bytes of every file under it (one recursive listing; {} if absent)."""
    fs = filesystem(folder)
    base = fs_path(folder).rstrip("/")
    if not fs.exists(base):
        return {}
    found: dict[str, Any] = fs.find(base, detail=True)
    return {
        str(p)[len(base) + 1 :]: int(info["size"]) for p, info in found.items() if info.get("type") == "file"
    }


def repair_hint(path: Path | str, kind: str, key: str) -> str:
    """What to do about a damaged partition file (the tail of every PartitionFileError)."""
    return (
        f"Restore the file from a backup, or rebuild it: `workbench graduate --store {path} --repair` "
        f"(for {kind} of {key!r}; `workbench verify --store {path}` lists every fault)."
    )


class Partitions(StoreBase):
    """The `activation_partitions` / `window_partitions` ledgers and the relations every activation and window
    query names."""

    def activations_root(self, sae_id: str) -> str | None:
        """The Parquet root holding `sae_id`'s activations, or None when they are in the store file."""
        return self._cached(("partition_root", sae_id), lambda: self._read_partition_root(sae_id))

    def _read_partition_root(self, sae_id: str) -> str | None:
        """activations_root without the session cache."""
        with self._conn() as conn:
            row = first(conn.execute("SELECT root FROM activation_partitions WHERE sae_id = ?", [sae_id]))
        return None if row is None else str(row[0])

    def partitioned_saes(self) -> dict[str, str]:
        """sae_id -> root of every SAE whose activations are partitioned Parquet."""
        with self._conn() as conn:
            rows = conn.execute("SELECT sae_id, root FROM activation_partitions ORDER BY sae_id").fetchall()
        return {str(r[0]): str(r[1]) for r in rows}

    def _activations_sql(self, sae_id: str) -> str:
        """The relation holding `sae_id`'s activation rows: the `activations` table or its Parquet view (after
        checking its files against the ledger, once per session: PartitionFileError when one is damaged)."""
        root = self.activations_root(sae_id)
        if root is None:
            return "activations"
        self.require_partition_files("activations", sae_id)
        with self._conn() as conn:
            ensure_registered(conn, root)
        return activations_relation(root, sae_id)

    def _bucket_filter(self, sae_id: str, feature: int) -> str:
        """` AND fb = <bucket>` for a partitioned SAE (DuckDB then opens only that bucket's file), else ''; the
        bucket's file is checked on every call (one stat: a file lost inside a long session is still noticed)."""
        root = self.activations_root(sae_id)
        if root is None:
            return ""
        fb = bucket_of(feature)
        recorded = self.partition_file_record("activations", sae_id)
        if recorded is not None and not is_remote(root):
            prefix = f"fb={fb:05d}/"
            for rel, (_, size, _) in recorded.items():
                if rel.startswith(prefix):
                    path = join(sae_dir(root, sae_id), rel)
                    actual = os.path.getsize(path) if os.path.exists(path) else None
                    if actual != size:
                        raise PartitionFileError(
                            f"{path} (activations of SAE {sae_id}, bucket {fb}) is "
                            f"{'missing' if actual is None else f'{actual} bytes, the ledger recorded {size}'}. "
                            + repair_hint(self.path, "the activations", sae_id)
                        )
        return f" AND fb = {fb}"

    def partition_file_record(self, kind: str, key: str) -> dict[str, FileRecord] | None:
        """The files the ledger recorded for an SAE's activations (`kind` "activations") or a corpus's windows
        ("windows"): relative path -> [rows, bytes, blake2b]; None when not partitioned or recorded before the
        record existed (schema 11)."""
        return self._cached(("partition_files", kind, key), lambda: self._read_file_record(kind, key))

    def _read_file_record(self, kind: str, key: str) -> dict[str, FileRecord] | None:
        """partition_file_record without the session cache."""
        table, column = (
            ("activation_partitions", "sae_id") if kind == "activations" else ("window_partitions", "corpus")
        )
        with self._conn() as conn:
            row = first(conn.execute(f"SELECT files FROM {table} WHERE {column} = ?", [key]))
        if row is None or row[0] is None:
            return None
        return {str(k): list(v) for k, v in dict(loads(row[0])).items()}

    def partition_folder(self, kind: str, key: str) -> str | None:
        """The folder holding every file of `key`'s partitioned activations / windows (None: not partitioned)."""
        root = self.activations_root(key) if kind == "activations" else self.windows_root(key)
        if root is None:
            return None
        return sae_dir(root, key) if kind == "activations" else corpus_dir(root, key)

    def partition_faults(self, kind: str, key: str, deep: bool = False) -> list[str]:
        """What is wrong with `key`'s partitioned files against the ledger's record: missing files, other sizes,
        files the ledger does not know, and with `deep` other digests or footer row counts (every byte read).
        Empty when all is well (or nothing is recorded to compare with)."""
        return [message for _, message in self.damaged_files(kind, key, deep)]

    def damaged_files(self, kind: str, key: str, deep: bool = False) -> list[tuple[str, str]]:
        """(path relative to `key`'s folder, what is wrong) of each damaged, missing or stray file (see
        `partition_faults`); a stray file is one the ledger does not record."""
        folder = self.partition_folder(kind, key)
        recorded = self.partition_file_record(kind, key)
        if folder is None or recorded is None:
            return []
        found = {rel: size for rel, size in listed_files(folder).items() if rel.endswith(".parquet")}
        faults: list[tuple[str, str]] = []
        for rel, (rows, size, digest) in sorted(recorded.items()):
            path = join(folder, rel)
            if rel not in found:
                faults.append((rel, f"{path} is missing (the ledger recorded {rows} rows, {size} bytes)"))
            elif found[rel] != size:
                faults.append(
                    (rel, f"{path} is {found[rel]} bytes, the ledger recorded {size} (truncated or replaced)")
                )
            elif deep and file_digest(path) != digest:
                faults.append((rel, f"{path} has other contents than were recorded (blake2b differs)"))
            elif deep:
                try:
                    with self._conn() as conn:
                        n = parquet_rows(conn, path)
                except (duckdb.Error, PartitionFileError) as exc:
                    faults.append((rel, f"{path} is not a readable Parquet file ({exc})"))
                    continue
                if n != rows:
                    faults.append((rel, f"{path} holds {n} rows, the ledger recorded {rows}"))
        for rel in sorted(set(found) - set(recorded)):
            faults.append(
                (rel, f"{join(folder, rel)} is not in the ledger (a stray file would be read as well)")
            )
        return faults

    def require_partition_files(self, kind: str, key: str) -> None:
        """PartitionFileError unless `key`'s partitioned files match the ledger (checked once per session)."""
        faults = self._cached(("partition_faults", kind, key), lambda: self.partition_faults(kind, key))
        if faults:
            what = (
                f"the activations of SAE {key}" if kind == "activations" else f"the windows of corpus {key!r}"
            )
            more = f" (and {len(faults) - 3} more)" if len(faults) > 3 else ""
            raise PartitionFileError(
                f"{what} cannot be read: {'; '.join(faults[:3])}{more}. " + repair_hint(self.path, kind, key)
            )

    def record_partition_files(self, kind: str, key: str, root: str) -> dict[str, FileRecord]:
        """Rows, bytes and blake2b of every Parquet file under `key`'s folder at `root` (what a ledger row's `files`
        records; reads every byte, so call it before the committing transaction)."""
        folder = sae_dir(root, key) if kind == "activations" else corpus_dir(root, key)
        files: dict[str, FileRecord] = {}
        for rel, size in sorted(listed_files(folder).items()):
            if not rel.endswith(".parquet"):
                continue
            path = join(folder, rel)
            with self._conn() as conn:
                rows = parquet_rows(conn, path)
            files[rel] = [rows, size, file_digest(path)]
        return files

    def windows_root(self, corpus: str) -> str | None:
        """The Parquet root holding `corpus`'s windows, or None when they are in the store file."""
        return self._cached(("windows_root", corpus), lambda: self._read_windows_root(corpus))

    def _read_windows_root(self, corpus: str) -> str | None:
        """windows_root without the session cache."""
        with self._conn() as conn:
            row = first(conn.execute("SELECT root FROM window_partitions WHERE corpus = ?", [corpus]))
        return None if row is None else str(row[0])

    def partitioned_corpora(self) -> dict[str, str]:
        """corpus -> root of every corpus whose windows are partitioned Parquet."""
        with self._conn() as conn:
            rows = conn.execute("SELECT corpus, root FROM window_partitions ORDER BY corpus").fetchall()
        return {str(r[0]): str(r[1]) for r in rows}

    def _windows_sql(self, corpus: str) -> str:
        """The relation holding `corpus`'s windows: the `windows` table or its Parquet view (files checked against
        the ledger once per session)."""
        root = self.windows_root(corpus)
        if root is None:
            return "windows"
        self.require_partition_files("windows", corpus)
        with self._conn() as conn:
            ensure_registered(conn, root)
        return windows_relation(root, corpus)

    def _chunk_filter(self, corpus: str, window_ids: list[int]) -> str:
        """` AND chunk IN (...)` (the chunks of `window_ids`) for a partitioned corpus, else ''."""
        if self.windows_root(corpus) is None:
            return ""
        chunks = sorted({chunk_of(i) for i in window_ids})
        return f" AND chunk IN ({', '.join(str(c) for c in chunks) or 'NULL'})"

    def record_windows_partitioned(
        self, corpus: str, root: str, n_rows: int, part: str, files: dict[str, FileRecord] | None = None
    ) -> None:
        """Commit `corpus`'s windows as living under `root` (call inside the transaction that removes its rows);
        `files` (default: read now with `record_partition_files`) is what later reads are checked against."""
        root = normalise_root(root)
        files = self.record_partition_files("windows", corpus, root) if files is None else files
        _require_total(files, n_rows, f"windows of corpus {corpus!r}")
        with self._write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO window_partitions (corpus, root, n_rows, part, files) VALUES (?, ?, ?, ?, ?)",
                [corpus, root, int(n_rows), part, dumps(files)],
            ).fetchall()

    def record_partitioned(
        self, sae_id: str, root: str, n_rows: int, part: str, files: dict[str, FileRecord] | None = None
    ) -> None:
        """Commit `sae_id`'s activations as living under `root` (the ledger row; call inside the transaction that
        removes its rows from the file, after every bucket file is in place); `files` as for the windows."""
        root = normalise_root(root)
        files = self.record_partition_files("activations", sae_id, root) if files is None else files
        _require_total(files, n_rows, f"activations of SAE {sae_id}")
        with self._write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO activation_partitions (sae_id, root, n_rows, part, files) "
                "VALUES (?, ?, ?, ?, ?)",
                [sae_id, root, int(n_rows), part, dumps(files)],
            ).fetchall()

    def update_partition_files(self, kind: str, key: str, files: dict[str, FileRecord]) -> None:
        """Replace the ledger's file record of `key` (after `graduate --repair` rebuilt or recorded its files)."""
        table, column = (
            ("activation_partitions", "sae_id") if kind == "activations" else ("window_partitions", "corpus")
        )
        with self._write() as conn:
            conn.execute(f"UPDATE {table} SET files = ? WHERE {column} = ?", [dumps(files), key]).fetchall()


def _require_total(files: dict[str, FileRecord], n_rows: int, what: str) -> None:
    """StoreError unless the recorded files hold `n_rows` rows together."""
    total = sum(int(r[0]) for r in files.values())
    if total != n_rows:
        raise StoreError(
            f"{what}: the placed files hold {total} rows, {n_rows} were expected; nothing recorded."
        )
