"""Where the local tiers get their budgets: explicit configure(), else the active Spark session's confs."""
import logging
import os
import re
import sys
import threading

from memphis.local.disk import DiskTier
from memphis.local.host import HostTier

log = logging.getLogger("memphis.local")

HOST_MAX_BYTES = "spark.memphis.host.maxBytes"
DISK_DIR = "spark.memphis.disk.dir"
DISK_MAX_BYTES = "spark.memphis.disk.maxBytes"
DEFAULT_HOST_FRACTION = 0.25  # of physical memory
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}

_lock = threading.Lock()
_tier = None  # the process's HostTier, made on first use; guarded by _lock


def parse_bytes(text) -> int:
    """``"512m"``, ``"4g"``, ``"1.5g"``, ``"4gb"`` or a number of bytes -> bytes.

    Examples
    --------
    >>> parse_bytes("1.5k")
    1536
    """
    if isinstance(text, (int, float)):
        return int(text)
    match = re.fullmatch(r"\s*([0-9.]+)\s*([kmgt]?)b?\s*", str(text).lower())
    if not match:
        raise ValueError(f"not a byte size: {text!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def default_host_max_bytes() -> int:
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * DEFAULT_HOST_FRACTION)


def _spark_conf(name):
    """A conf of the active Spark session, if pyspark is in use and one runs (never starts one)."""
    if "pyspark.sql" not in sys.modules:
        return None
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    return session.conf.get(name, None) if session is not None else None


def _from_confs(host_max_bytes, disk_dir, disk_max_bytes, min_cost_s=0.001) -> HostTier:
    host = host_max_bytes if host_max_bytes is not None else _spark_conf(HOST_MAX_BYTES)
    disk_dir = disk_dir if disk_dir is not None else _spark_conf(DISK_DIR)
    disk_max = disk_max_bytes if disk_max_bytes is not None else _spark_conf(DISK_MAX_BYTES)
    try:
        disk = DiskTier(root=disk_dir, max_bytes=parse_bytes(disk_max) if disk_max is not None else None)
    except OSError as error:
        log.warning("memphis.local: no disk tier (%s); evicted values are dropped", error)
        disk = None
    return HostTier(max_bytes=parse_bytes(host) if host is not None else default_host_max_bytes(), disk=disk,
                    min_cost_s=min_cost_s)


def configure(*, host_max_bytes=None, disk_dir=None, disk_max_bytes=None, min_cost_s: float = 0.001) -> HostTier:
    """Replaces the local tiers (their entries are dropped) with ones of these budgets.

    ``min_cost_s``: traced results that took less are not cached (0 caches all; tests use it).
    Unset values come from ``spark.memphis.host.maxBytes``, ``spark.memphis.disk.dir`` and
    ``spark.memphis.disk.maxBytes`` of the active session, else the defaults (25% of physical
    memory; a private directory under the temp dir; 10 GiB or half the free space, the lower).

    Examples
    --------
    >>> import memphis.local
    >>> memphis.local.configure(host_max_bytes="64m").max_bytes
    67108864
    """
    global _tier
    tier = _from_confs(host_max_bytes, disk_dir, disk_max_bytes, min_cost_s)
    with _lock:
        old, _tier = _tier, tier
    if old is not None:
        old.close()
    return tier


def tier() -> HostTier:
    """The process's host tier (with its disk tier), configured from confs on first use."""
    global _tier
    if _tier is None:
        with _lock:
            if _tier is None:
                _tier = _from_confs(None, None, None)
    return _tier
