"""A Ray worker's cache snapshot (`llm.snapshot_cache`) serves exactly what the store's cache serves for its model."""

from pathlib import Path

from sae_workbench.llm.cache import CachedResponse, StoreCache
from sae_workbench.llm.snapshot_cache import SnapshotCache, cache_snapshot
from sae_workbench.store import Store


def test_snapshot_holds_the_models_well_formed_answers(tmp_path: Path) -> None:
    """Answers of the model are in it as StoreCache reads them; another model's and malformed payloads are not."""
    store = Store.open(tmp_path / "s.duckdb")
    cache = StoreCache(store)
    cache.put("k1", "m", "first", 3, 4)
    cache.put("k2", "m", "second", 5, 6)
    cache.put("k3", "other", "not mine", 1, 1)
    store.llm_cache_put("k4", "m", {"no_text": True}, 0)  # a payload StoreCache did not write
    snapshot = cache_snapshot(store, "m")
    assert snapshot == {"k1": CachedResponse("m", "first", 3, 4), "k2": CachedResponse("m", "second", 5, 6)}
    assert all(cache.get(key) == answer for key, answer in snapshot.items())
    assert cache.get("k4") is None


def test_snapshot_cache_hands_back_only_new_answers() -> None:
    """A put of a key the snapshot holds is ignored; new answers are drained once."""
    worker = SnapshotCache({"k1": CachedResponse("m", "old", 1, 1)})
    worker.put("k1", "m", "new", 2, 2)
    worker.put("k2", "m", "fresh", 3, 4)
    assert worker.get("k1") == CachedResponse("m", "old", 1, 1)
    assert worker.get("k2") == CachedResponse("m", "fresh", 3, 4)
    assert worker.drain() == [("k2", "m", "fresh", 3, 4)]
    assert worker.drain() == []
