"""The state of one driver cache: its host tier (with the disk tier), its GPU tier and its parts
made on first use (thread pools, what the rewrites remember, the Spark broadcasts it holds);
``default`` is the process's.

As ``joblib.Memory`` holds its own directory, a Runtime holds its own tiers: memphis.local and
memphis.gpu act on ``default``, and a test or a second, independent cache makes its own. Only the
public modules name ``default``; a traced array carries the Runtime it was made in, and the work
on it runs there.

Examples
--------
>>> cache = Runtime()
>>> cache.configure_host(host_max_bytes="1m", disk_max_bytes=0).max_bytes
1048576
>>> cache.configure_gpu(device="simulated", capacity_bytes="64m").budget_bytes
60397977
>>> cache.stats()["gpu_misses"], cache.host() is default.host()
(0, False)
"""
import threading
from typing import Callable, Optional

from memphis.tiers import config
from memphis.tiers.gpu import config as gpu_config
from memphis.tiers.gpu.tier import NO_GPU, GpuTier
from memphis.tiers.host import HostTier


class Runtime:
    """One driver cache: its tiers are made from the Spark confs on first use, or by
    :meth:`configure_host` and :meth:`configure_gpu`."""

    def __init__(self):
        # Guarded by _lock: the tiers are replaced whole, and read without it (a reader that got the
        # old one finishes on it; a replaced tier is closed).
        self._host: Optional[HostTier] = None
        self.gpu = NO_GPU  # the GPU tier, once configured (or "auto" resolved) to one; NO_GPU without a device
        self._gpu_resolved = False  # whether configure_gpu ran; gpu_tier() runs it with "auto" otherwise
        self._lock = threading.Lock()
        self._parts = {}  # name -> a part made on first use; guarded by _lock

    def configure_host(self, **settings) -> HostTier:
        """Replaces the host tier (its entries are dropped) by one of ``settings`` (see
        :func:`memphis.local.configure`); a bad value raises ValueError before anything is replaced."""
        tier = config.host_tier(**settings)
        with self._lock:
            old, self._host = self._host, tier
        if old is not None:
            old.close()
        return tier

    def host(self) -> HostTier:
        """The host tier (with its disk tier), made from the Spark confs on first use."""
        found = self._host
        if found is None:
            with self._lock:
                if self._host is None:
                    self._host = config.host_tier()
                found = self._host
        return found

    def configure_gpu(self, **settings) -> Optional[GpuTier]:
        """Replaces the GPU tier (its entries are dropped) by one of ``settings`` (see
        :func:`memphis.gpu.configure`); returns it, or None without a device. A bad value raises
        ValueError before anything is replaced."""
        device, fraction, budget_bytes = gpu_config.chosen(**settings)
        with self._lock:
            old, self.gpu = self.gpu, NO_GPU
        old.close()  # first: the new tier may manage the same device
        if device is None:
            tier = NO_GPU
        else:
            budget = budget_bytes if budget_bytes is not None else int(fraction * device.free_bytes())
            tier = GpuTier(device=device, budget_bytes=budget, host=self.host)
        with self._lock:
            self.gpu, self._gpu_resolved = tier, True
        return None if tier is NO_GPU else tier

    def gpu_tier(self, *, required: bool = False) -> Optional[GpuTier]:
        """The GPU tier, configured with ``device="auto"`` on first use; None without a GPU
        (``required=True``: raises :class:`memphis.gpu.NoGpuError` saying how to get one)."""
        with self._lock:
            needed = not self._gpu_resolved
        if needed:
            self.configure_gpu()
        found = self.gpu
        if found is NO_GPU:
            if required:
                raise gpu_config.no_gpu()
            return None
        return found

    def part(self, name: str, make: Callable):
        """The part ``name`` of this cache, ``make()`` on first use: a thread pool, or a layer
        above's state that belongs to one cache (what the rewrites of memphis.tracing.partial remember,
        the arrays memphis.sklearn handed out, the broadcasts of memphis.spark.broadcasts). A part
        with a ``clear()`` holds what the cache holds: :meth:`clear` empties it."""
        with self._lock:
            found = self._parts.get(name)
            if found is None:
                found = self._parts[name] = make()
            return found

    def traced(self, item, compute: Callable, *, device=None, signature: Callable = None):
        """(value, the item it is kept under or None) of a traced operation: the one place that routes
        between the host and GPU tiers. Work on ``device`` is probed in that device's GPU tier
        (which asks the host tier before computing; a device without one computes); host work asks
        the GPU tier before computing (see HostTier.traced, GpuTier.serving_host)."""
        if device is not None:
            return device.tier.traced(item.key, item, compute)
        return self.host().traced(item.key, item, self.gpu.serving_host(item, compute), signature=signature)

    def stats(self) -> dict:
        """The counters of the host and disk tiers and of the GPU tier (zeros without one)."""
        return {**self.host().stats(), **self.gpu.stats()}

    def entries(self) -> list:
        """One dict per entry of the host, disk and GPU tiers (see :meth:`HostTier.entries`)."""
        return self.host().entries() + self.gpu.entries()

    def clear(self, *, durable: bool = False):
        """Drops every entry of the host, disk and GPU tiers and empties every part with a
        ``clear()``; with ``durable=True`` the durable tier's files go too. The counters keep counting."""
        self.host().clear(durable=durable)
        self.gpu.clear()
        with self._lock:
            parts = list(self._parts.values())
        for part in parts:
            if hasattr(part, "clear"):
                part.clear()


default = Runtime()
