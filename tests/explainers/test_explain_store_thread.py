"""The explain job's store thread: reads ahead and batched writes off the event loop change no result, and a
store that cannot be written stops the job with a typed error."""

import shutil

import pytest

from sae_workbench.explainers.job import ExplainConfig, ExplainJob, ExplainJobError
from sae_workbench.store import Store, StoreReadOnlyError
from tests.explainers.test_explain_support import PLANTED_SAE, build_planted_store

FEATURES = [0, 1, 2, 3, 4, 5]


@pytest.fixture(scope="module")
def planted_copies(tmp_path_factory, tiny_model):
    store = build_planted_store(tmp_path_factory.mktemp("planted"), tiny_model.tokenizer)
    copy = store.path.with_name("copy.duckdb")
    shutil.copyfile(store.path, copy)  # no session is open: the file is checkpointed and unlocked
    return store, Store.open(copy)


def _outputs(store: Store, explainer: str) -> dict[int, tuple]:
    out = {}
    for e in store.explanations(PLANTED_SAE, explainer=explainer):
        extra = {k: v for k, v in e.extra.items() if k != "usage"}
        out[e.feature] = (e.text, e.rules, e.example_ids, e.negative_ids, extra, e.config_key)
    return out


@pytest.mark.parametrize("explainer", ["lexical", "tree"])
def test_results_do_not_depend_on_concurrency_or_batching(planted_copies, explainer):
    one, many = planted_copies
    cfg = ExplainConfig(explainer, negatives="RANDOM_NEGATIVE")
    # concurrency 1 with a commit per feature vs 4 in flight (reads up to 6 features ahead) in one batch
    a = ExplainJob(one, PLANTED_SAE, cfg, concurrency=1, progress=False, batch_size=1).run(FEATURES)
    b = ExplainJob(many, PLANTED_SAE, cfg, concurrency=4, progress=False).run(FEATURES)
    assert (a.explained, a.dead) == (b.explained, b.dead) == (4, 2)  # features 2 and 5 never fire
    assert set(a.ids) == set(b.ids) == set(FEATURES)
    assert _outputs(one, explainer) == _outputs(many, explainer)


def test_read_only_store_stops_the_job_with_a_typed_error_and_writes_nothing(tmp_path, tiny_model):
    path = build_planted_store(tmp_path, tiny_model.tokenizer).path
    reader = Store.open(path, read_only=True)
    with pytest.raises((StoreReadOnlyError, ExplainJobError)) as err:
        ExplainJob(reader, PLANTED_SAE, ExplainConfig("lexical"), progress=False).run([0, 1, 3])
    assert "read-only" in str(err.value)
    assert Store.open(path).explanations(PLANTED_SAE) == []
