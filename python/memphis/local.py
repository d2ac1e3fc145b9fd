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
from memphis.tracing import array as traced
from memphis.tracing import reuse as reused
from memphis.tracing.array import TracedArray

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


def array(value) -> TracedArray:
    """Wraps a numpy array (or anything ``np.asarray`` takes), or a device array, for traced, reusable work.

    The array is identified by its content (xxh3-128 of shape, dtype and bytes, at memory speed);
    derived values are identified by lineage and never hashed. The array is not copied and stays
    writeable: the traced array reads it through a read-only view. Change it in place and you must
    wrap it again (which hashes it again); a traced array made before the change still carries the
    old identity, and work on it would be keyed wrongly (not detected). A device array (cupy, or
    the simulated device's) stays on its device; it is hashed through one host copy, so it has the
    key that the same data has on the host, and work on it runs on the device (see memphis.gpu).

    Examples
    --------
    >>> import numpy as np, memphis
    >>> X = memphis.array(np.ones((1000, 10)))
    >>> float((X.T @ X)[0, 0])
    1000.0
    """
    return traced.array(value, runtime=default)


def eye(n: int, m: int = None, k: int = 0, dtype=float) -> TracedArray:
    """A traced ``np.eye``: identified by its arguments, never hashed."""
    return traced.eye(n, m, k, dtype, runtime=default)


def full(shape, fill_value, dtype=None) -> TracedArray:
    """A traced ``np.full`` (``ones``/``zeros`` alike): identified by its arguments."""
    return traced.full(shape, fill_value, dtype, runtime=default)


def random(shape, *, seed=None, distribution: str = "standard_normal") -> TracedArray:
    """Random data from ``np.random.default_rng(seed)``; with ``seed=None`` it is never reused.

    Examples
    --------
    >>> import memphis.local as ml
    >>> bool((ml.random((3,), seed=1) == ml.random((3,), seed=1)).all())
    True
    """
    return traced.random(shape, seed=seed, distribution=distribution, runtime=default)


def reuse(function=None, *, version=None):
    """Caches a deterministic function by its identity and the lineage of its arguments.

    The identity is the module, the qualified name, a hash of the code and constants (nested
    functions included), the values its closure holds, and ``version`` (bump it when something the
    code reads besides its arguments changes, e.g. a global). Arguments may be traced arrays, numpy
    arrays (hashed by content), pandas and Arrow data, Spark DataFrames (by their lineage key),
    scalars, strings, None, and tuples, lists and dicts of these. A call with any other argument,
    or with unseeded randomness in its lineage, runs without reuse (counted as ``refused``).
    Arrays in the result are read-only; when an argument is a traced array, arrays of the result
    come back traced.

    Examples
    --------
    >>> import numpy as np, memphis
    >>> @memphis.reuse
    ... def gram(X):
    ...     return X.T @ X
    >>> X = np.ones((100, 3))
    >>> bool((gram(X) == gram(X)).all())  # the second call is a hit
    True
    >>> @memphis.reuse(version="2")
    ... def scaled(X, factor=2.0):
    ...     return X * factor
    """
    return reused.reuse(function, version=version, runtime=default)
