"""Lineage-based reuse of driver-side work: traced arrays, reused functions, host and disk tiers.

Examples
--------
>>> import numpy as np, memphis
>>> X = memphis.array(np.random.default_rng(0).standard_normal((1000, 20)))
>>> y = memphis.array(np.ones(1000))
>>> for lam in (0.1, 1.0, 10.0):  # Xᵀ X and Xᵀ y are computed once (when they take ≥ 1 ms)
...     w = np.linalg.solve(X.T @ X + lam * np.eye(20), X.T @ y)
>>> w.shape
(20,)
"""
from memphis.local.array import TracedArray, array, eye, full, random
from memphis.local.broadcasts import broadcast
from memphis.local.config import configure, tier
from memphis.local.exchange import collect
from memphis.local.host import State
from memphis.local.reuse import reuse

__all__ = ["State", "TracedArray", "array", "broadcast", "clear", "collect", "configure", "entries", "eye", "full", "random",
           "reuse", "stats", "tier"]


def stats() -> dict:
    """Counters of the local tiers: hits, partial_hits, misses, computed, evicted, spilled, reloaded,
    refused, corrupt, spill_failed, started_early, internal_errors, bytes_held_host, bytes_held_disk,
    compute_saved_ms; and the GPU tier's (zeros without one): gpu_hits, gpu_misses,
    recycled_allocations, fresh_allocations, evicted_to_host, gpu_deleted, bytes_held_gpu,
    eviction_time_ms, copies_to_device, copies_to_host; and the
    broadcasts of :func:`memphis.broadcast`: broadcast_hits, broadcasts, broadcasts_evicted,
    broadcasts_refused, bytes_held_broadcast."""
    from memphis import gpu
    from memphis.local import broadcasts

    return {**tier().stats(), **gpu.stats(), **broadcasts.registry.stats()}


def entries():
    """One row per local entry (pandas): key, tier (host, disk or gpu), state, opcode, hits, misses,
    cost_ms, size_bytes, score."""
    import pandas as pd

    from memphis import gpu

    columns = ["key", "tier", "state", "opcode", "hits", "misses", "cost_ms", "size_bytes", "score"]
    return pd.DataFrame(tier().entries() + gpu.entries(), columns=columns)


def clear():
    """Drops every local entry (host, disk and GPU) and destroys the broadcasts of
    :func:`memphis.broadcast`; the counters keep counting."""
    from memphis import gpu
    from memphis.local import broadcasts

    tier().clear()
    gpu.clear()
    broadcasts.registry.clear()
