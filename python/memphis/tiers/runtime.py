"""The state of one driver cache: its host tier (with the disk tier), its GPU tier and its parts
made on first use (thread pools, the Spark broadcasts it holds); ``default`` is the process's.

As ``joblib.Memory`` holds its own directory, a Runtime holds its own tiers: memphis.local and
memphis.gpu act on ``default``, and a test or a second, independent cache makes its own.

Examples
--------
>>> from memphis.tiers.host import HostTier
>>> host = HostTier(max_bytes=1 << 20)
>>> cache = Runtime(host=lambda: host)
>>> cache.configure_gpu(device="simulated", capacity_bytes="64m").budget_bytes
60397977
>>> cache.stats()["gpu_misses"], cache.host() is host
(0, True)
"""
import threading
from typing import Callable, Optional

from memphis.tiers import config
from memphis.tiers.gpu import config as gpu_config
from memphis.tiers.gpu.tier import GPU_COUNTERS, GpuTier
from memphis.tiers.host import HostTier


class Runtime:
    """One driver cache. ``host``: a function that returns its host tier (it can be reconfigured;
    the default one is made from the Spark confs on first use, see :func:`memphis.local.configure`)."""

    def __init__(self, *, host: Callable[[], HostTier] = config.tier):
        self.host = host
        self.gpu: Optional[GpuTier] = None  # the GPU tier, once configured (or "auto" resolved) to one
        self._gpu_resolved = False  # whether configure_gpu ran; gpu_tier() runs it with "auto" otherwise
        self._lock = threading.Lock()
        self._parts = {}  # name -> a part made on first use; guarded by _lock

    def configure_gpu(self, **settings) -> Optional[GpuTier]:
        """Replaces the GPU tier (its entries are dropped) by one of ``settings`` (see
        :func:`memphis.gpu.configure`); returns it, or None without a device. A bad value raises
        ValueError before anything is replaced."""
        device, fraction, budget_bytes = gpu_config.chosen(**settings)
        with self._lock:
            old, self.gpu = self.gpu, None
        if old is not None:  # first: the new tier may manage the same device
            old.close()
        tier = None
        if device is not None:
            budget = budget_bytes if budget_bytes is not None else int(fraction * device.free_bytes())
            tier = GpuTier(device=device, budget_bytes=budget, host=self.host)
        with self._lock:
            self.gpu, self._gpu_resolved = tier, True
        return tier

    def gpu_tier(self, *, required: bool = False) -> Optional[GpuTier]:
        """The GPU tier, configured with ``device="auto"`` on first use; None without a GPU
        (``required=True``: raises :class:`memphis.gpu.NoGpuError` saying how to get one)."""
        with self._lock:
            needed = not self._gpu_resolved
        if needed:
            self.configure_gpu()
        found = self.gpu
        if found is None and required:
            raise gpu_config.no_gpu()
        return found

    def part(self, name: str, make: Callable):
        """The part ``name`` of this cache, ``make()`` on first use: a thread pool, or a layer
        above's state that belongs to one cache (memphis.broadcasts keeps its broadcasts here)."""
        with self._lock:
            found = self._parts.get(name)
            if found is None:
                found = self._parts[name] = make()
            return found

    def stats(self) -> dict:
        """The counters of the host and disk tiers and of the GPU tier (zeros without one)."""
        gpu = self.gpu
        return {**self.host().stats(), **(gpu.stats() if gpu is not None else dict.fromkeys(GPU_COUNTERS, 0))}

    def entries(self) -> list:
        """One dict per entry of the host, disk and GPU tiers (see :meth:`HostTier.entries`)."""
        gpu = self.gpu
        return self.host().entries() + (gpu.entries() if gpu is not None else [])

    def clear(self):
        """Drops every entry of the host, disk and GPU tiers; the counters keep counting."""
        self.host().clear()
        if self.gpu is not None:
            self.gpu.clear()


default = Runtime()
