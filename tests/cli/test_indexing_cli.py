"""`workbench index` end to end on the tiny model, then the Parquet and Neuronpedia exports of the store."""

import gzip
import json
from pathlib import Path

import duckdb
from typer.testing import CliRunner

from sae_workbench import cli
from sae_workbench.sae.io import save_sae
from sae_workbench.store import ExplanationRecord, ScoreRecord, Store
from sae_workbench.store.export import export_neuronpedia
from tests.sae.test_indexing import TEXT, make_sae


def test_index_cli_then_exports(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT)
    sae_dir = save_sae(make_sae(), tmp_path / "sae")
    store_path = tmp_path / "store.duckdb"
    cli._register_stage_commands()
    args = ["index", "--store", str(store_path), "--sae", str(sae_dir), "--model", "tiny", "--hook",
            "blocks.0.hook_resid_post", "--corpus", str(corpus), "--tokens", "320", "--context-size", "32",
            "--batch-size", "4", "--top-k", "4"]  # fmt: skip
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 0, result.output
    assert "10 new windows" in result.output
    again = CliRunner().invoke(cli.app, args)
    assert "0 new windows" in again.output

    store = Store.open(store_path)
    (sae,) = store.list_saes()
    feature = int(store.feature_table(sae.sae_id).column("feature")[0].as_py())
    eid = store.add_explanation(
        ExplanationRecord(sae.sae_id, feature, "lexical", "1", "", "", {}, {}, [0], [1], "foxes", "key-1")
    )
    store.add_score(ScoreRecord(eid, "detection", "1", "RANDOM", {"f1": 0.75}))

    files = store.export_parquet(tmp_path / "parquet")
    assert {f.stem for f in files} == set(store.table_names())
    con = duckdb.connect()
    n = con.execute(f"SELECT count(*) FROM '{tmp_path / 'parquet' / 'activations.parquet'}'").fetchall()[0][0]
    assert n == store.activation_count(sae.sae_id) > 0
    copy = Store.open(tmp_path / "copy.duckdb")
    copy.import_parquet(tmp_path / "parquet")
    assert copy.activation_count(sae.sae_id) == n and copy.explanations()[0].text == "foxes"
    assert (
        copy.add_explanation(
            ExplanationRecord(sae.sae_id, feature, "lexical", "1", "", "", {}, {}, [], [], "new", "key-2")
        )
        == eid + 1
    )

    out = tmp_path / "np.jsonl.gz"
    written = export_neuronpedia(store, sae.sae_id, out, n_examples=3)
    lines = [json.loads(line) for line in gzip.open(out, "rt")]
    assert written == len(lines) == store.feature_table(sae.sae_id).num_rows
    first = next(r for r in lines if r["index"] == feature)
    assert first["id"] == f"tiny/0-res-wb/{feature}"
    assert first["explanations"][0]["description"] == "foxes"
    assert first["explanations"][0]["scores"][0]["metrics"] == {"f1": 0.75}
    top = first["activations"][0]
    assert len(top["tokens"]) == len(top["values"]) == 32
    assert max(top["values"]) == top["maxValue"] == store.top_examples(sae.sae_id, feature, 1)[0].max_value
