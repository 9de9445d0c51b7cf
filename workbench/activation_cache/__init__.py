"""The cache stage: a model's activations at one or more hooks in resumable, checksummed safetensors shards.

    workbench cache --model smollm2-135m --hook blocks.3.hook_resid_post --tokens 200000

    from sae_workbench.activation_cache.reader import ActivationCache
    cache = ActivationCache("runs/cache/…")
    for acts_ND in cache.iter_batches("blocks.3.hook_resid_post", batch_size=4096, shuffle_seed=0): ...

A cache folder holds
    manifest.json             identity (model, hooks, corpus, window size, BOS id, dtype, mask policy) + shard list
    shard-00000.safetensors   acts.<hook> (W, T, d) · tokens (W, T) int32 · mask (W, T) bool · window_ids (W,) int64

A shard counts only when the manifest lists it with a matching size and sha256. Each shard is written to a temp
name, fsynced and renamed before the manifest (itself replaced atomically) lists it, so a process killed at any
point leaves complete listed shards plus, at most, an unlisted file that the next run deletes. Rerunning the same
command resumes after the last listed shard (windows are deterministic, `iter_windows(start_window=…)`); a larger
token count extends the cache. Shards are written by a background thread so the forward pass never waits on disk.

Modules: `caching.py` (the forward + write loop, `cache_activations`), `manifest.py` (what a folder holds, its
identity check), `writer.py` (the background shard writer), `reader.py` (`ActivationCache`: verified shards and
batches), `lock.py` (one writing process per folder), `disk.py` (free-space check), `errors.py`.
"""
