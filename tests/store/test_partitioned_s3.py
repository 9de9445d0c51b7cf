"""`workbench graduate` end to end: to a local root (default location, rerun) and to an s3:// root on a moto S3
server on 127.0.0.1, read back through s3fs registered in DuckDB (no DuckDB extension) with the same answers."""

import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sae_workbench import cli
from sae_workbench.cli.graduate import default_root
from sae_workbench.store import Store
from sae_workbench.store.partitioned import filesystem
from tests.store.test_partitioned import ABSENT, FEATURES, _build, _reads

runner = CliRunner()


@pytest.fixture(scope="module")
def app():
    if not any(c.name == "graduate" for c in cli.app.registered_commands):
        cli._register_stage_commands()
    return cli.app


@pytest.fixture()
def s3(monkeypatch) -> Iterator[str]:
    """A moto S3 server on a free loopback port with a bucket `wbk`; yields its endpoint URL."""
    from moto.server import ThreadedMotoServer

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": "/nonexistent",
                        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent", "AWS_ENDPOINT_URL": endpoint}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    filesystem("s3://wbk").mkdir("wbk")
    try:
        yield endpoint
    finally:
        server.stop()


def test_graduate_command_to_the_default_local_root_and_again(app, tmp_path: Path) -> None:
    single = _build(tmp_path / "single.duckdb")
    path = tmp_path / "store.duckdb"
    shutil.copy(single.path, path)
    first = runner.invoke(app, ["graduate", "--store", str(path)])
    assert first.exit_code == 0, first.output
    n = single.activation_count("sae")
    assert f"activations of SAE sae: {n:,} rows in 3 files -> {default_root(path)}" in first.output
    assert f"windows of corpus c: 50 rows in 1 files -> {default_root(path)}" in first.output
    assert len(list((default_root(path) / "activations").rglob("*.parquet"))) == 3
    assert len(list((default_root(path) / "windows").rglob("*.parquet"))) == 1
    again = runner.invoke(app, ["graduate", "--store", str(path)])
    assert again.exit_code == 0 and "already under" in again.output
    parted = Store.open(path, read_only=True)
    assert [_reads(parted, f) for f in FEATURES] == [_reads(single, f) for f in FEATURES]


@pytest.mark.slow  # ~25 s on the loaded 2-core VM: every read lists and reads objects over moto's HTTP server
def test_same_reads_from_an_s3_root_as_from_a_local_one(app, s3: str, tmp_path: Path) -> None:
    single = _build(tmp_path / "single.duckdb")
    local, remote = tmp_path / "local.duckdb", tmp_path / "remote.duckdb"
    shutil.copy(single.path, local)
    shutil.copy(single.path, remote)
    Store.open(local).graduate(str(tmp_path / "root"))
    result = runner.invoke(
        app, ["graduate", "--store", str(remote), "--root", "s3://wbk/runs/store", "--endpoint-url", s3]
    )
    assert result.exit_code == 0, result.output
    keys = sorted(filesystem("s3://wbk").find("wbk/runs/store"))
    assert len(keys) == 4 and keys[-1].endswith(
        "/windows/corpus=c/chunk=00000/" + keys[-1].rsplit("/", 1)[-1]
    )
    assert all("/activations/sae_id=sae/fb=0000" in k for k in keys[:3])  # and the staging folder is gone
    on_s3, on_disk = Store.open(remote, read_only=True), Store.open(local, read_only=True)
    assert on_s3.activations_root("sae") == on_s3.windows_root("c") == "s3://wbk/runs/store"
    for feature in FEATURES + ABSENT:
        assert on_s3.top_examples("sae", feature, 20) == on_disk.top_examples("sae", feature, 20)
    for feature in (
        2,
        300,
        700,
        1000,
    ):  # every read, one feature per bucket and one of a bucket without a file
        assert _reads(on_s3, feature) == _reads(on_disk, feature) == _reads(single, feature)
    loaded = on_s3.query("SELECT extension_name FROM duckdb_extensions() WHERE loaded").column(0).to_pylist()
    assert "httpfs" not in loaded  # read through s3fs, offline
