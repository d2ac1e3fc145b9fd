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
from memphis.broadcasts import broadcast
from memphis.collect import collect
from memphis.driver import clear, entries, stats
from memphis.tiers.config import configure, tier
from memphis.tiers.host import State
from memphis.tracing.array import TracedArray, array, eye, full, random
from memphis.tracing.reuse import reuse

__all__ = ["State", "TracedArray", "array", "broadcast", "clear", "collect", "configure", "entries", "eye", "full", "random",
           "reuse", "stats", "tier"]
