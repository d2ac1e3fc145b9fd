"""The driver's caches as one: a Runtime's host, disk and GPU tiers with the Spark broadcasts it holds."""
from memphis import jar_facts
from memphis.spark.broadcasts import broadcasts_of
from memphis.tiers.runtime import Runtime, default


def stats(runtime: Runtime = default) -> dict:
    """Counters of the local tiers: hits, partial_hits, misses, computed, evicted, spilled, reloaded,
    refused, corrupt, spill_failed, started_early, internal_errors, bytes_held_host, bytes_held_disk,
    compute_saved_ms; the durable tier's: durable_hits, durable_misses, durable_writes, durable_refused,
    durable_evicted, durable_corrupt, durable_foreign, durable_write_failed, durable_orphans_removed,
    bytes_held_durable, durable_budget_bytes; and the GPU tier's (zeros without one): gpu_hits, gpu_misses,
    recycled_allocations, fresh_allocations, evicted_to_host, gpu_deleted, bytes_held_gpu,
    eviction_time_ms, copies_to_device, copies_to_host; and the
    broadcasts of :func:`memphis.broadcast`: broadcast_hits, broadcasts, broadcasts_evicted,
    broadcasts_refused, bytes_held_broadcast."""
    return {**runtime.stats(), **broadcasts_of(runtime).stats()}


def entries(runtime: Runtime = default):
    """One row per local entry (pandas): tier (host, disk, durable or gpu), key, state, hits, misses,
    size_bytes, cost_ms, score, path and age_s (durable files: the time since they were written),
    opcode; the jar's entry columns (``local``) name them."""
    import pandas as pd  # imported when asked for: most sessions never list entries

    return pd.DataFrame(runtime.entries(), columns=jar_facts.entry_columns("local"))


def clear(runtime: Runtime = default, *, durable: bool = False):
    """Drops every local entry (host, disk and GPU) and destroys the broadcasts of
    :func:`memphis.broadcast`; ``durable=True`` removes the durable tier's files of this user too
    (other processes then recompute them). The counters keep counting.

    Examples
    --------
    >>> import memphis.local
    >>> memphis.local.clear(durable=True)  # doctest: +SKIP
    """
    runtime.clear(durable=durable)  # the broadcasts are a part of it
