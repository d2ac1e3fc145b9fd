"""Lineage-based reuse of driver-side work: traced arrays, reused functions, host and disk tiers.

The public face of the driver's cache (:data:`memphis.tiers.runtime.default`): tracing lives in
:mod:`memphis.tracing`, the tiers in :mod:`memphis.tiers`, collect and broadcasts beside Spark.

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
from memphis.spark.broadcasts import broadcast
from memphis.spark.collect import collect
from memphis.spark.driver import clear, entries, stats
from memphis.tiers.host import HostTier, State
from memphis.tiers.runtime import default
from memphis.tracing.array import TracedArray, array, eye, full, random
from memphis.tracing.reuse import reuse

__all__ = ["State", "TracedArray", "array", "broadcast", "clear", "collect", "configure", "entries", "eye", "full", "random",
           "reuse", "stats", "tier"]


def configure(*, host_max_bytes=None, disk_dir=None, disk_max_bytes=None, durable_dir=None, durable_max_bytes=None,
              min_cost_s: float = None) -> HostTier:
    """Replaces the local tiers (their entries are dropped; durable files stay) with ones of these settings.

    Unset values come from the active Spark session's ``spark.memphis.host.maxBytes`` (default
    ``0``: a quarter of the driver's physical RAM), ``spark.memphis.disk.dir`` (default empty:
    ``memphis-<user>`` under the system temp dir), ``spark.memphis.disk.maxBytes`` (default
    ``10g``; ``0`` turns spilling off), ``spark.memphis.durable.dir`` (default ``auto``:
    ``memphis/durable`` under ``$XDG_CACHE_HOME`` or ``~/.cache``; ``none`` or empty: off; this
    tier's files go to its ``<user>/driver`` folder) and ``spark.memphis.durable.maxBytes`` (default ``10g``; ``0`` turns
    the durable tier off, as ``MEMPHIS_DURABLE=off`` in the environment does when neither durable
    argument is given). ``min_cost_s``: traced results that took less are not
    cached, nor kept durably; by default the host tier's measured probe+store time, and for the
    durable tier the estimated time to write and read the value back (0 keeps all; tests use it). A value
    that is not one of these kinds raises ValueError naming the argument (or the conf), the value
    and what is allowed; nothing is replaced then.

    Examples
    --------
    >>> import memphis.local
    >>> memphis.local.configure(host_max_bytes="64m", disk_max_bytes=0).max_bytes
    67108864
    >>> memphis.local.configure(durable_dir="/scratch/memphis", durable_max_bytes="50g")  # doctest: +SKIP
    """
    return default.configure_host(host_max_bytes=host_max_bytes, disk_dir=disk_dir, disk_max_bytes=disk_max_bytes,
                                  durable_dir=durable_dir, durable_max_bytes=durable_max_bytes, min_cost_s=min_cost_s)


def tier() -> HostTier:
    """The process's host tier (with its disk tier), configured from confs on first use."""
    return default.host()
