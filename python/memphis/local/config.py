"""Where the local tiers get their budgets: explicit configure(), else the active Spark session's confs.

The confs are declared on the JVM side (io.memphis.MemphisConf) with these defaults and
meanings; values are parsed by the same rules, so a value the session accepts means the same here.
"""
import getpass
import logging
import os
import re
import sys
import tempfile
import threading

from memphis.local.disk import DiskTier
from memphis.local.host import HostTier

log = logging.getLogger("memphis.local")

HOST_MAX_BYTES = "spark.memphis.host.maxBytes"
DISK_DIR = "spark.memphis.disk.dir"
DISK_MAX_BYTES = "spark.memphis.disk.maxBytes"
GPU_MEMORY_FRACTION = "spark.memphis.gpu.memoryFraction"
BROADCAST_MAX_BYTES = "spark.memphis.broadcast.maxBytes"
DEFAULTS = {HOST_MAX_BYTES: "0", DISK_DIR: "", DISK_MAX_BYTES: "10g", GPU_MEMORY_FRACTION: "0.9",
            BROADCAST_MAX_BYTES: "1g"}
HOST_FRACTION_OF_RAM = 0.25  # what host.maxBytes=0 means
_BYTE_SIZE = re.compile(r"\s*(\d+)\s*([kmgtp]?)b?\s*", re.IGNORECASE)

_lock = threading.Lock()
_tier = None  # the process's HostTier, made on first use; guarded by _lock


def parse_bytes(text) -> int:
    """A byte size as the JVM reads it: a whole number with an optional binary unit k, m, g, t or p
    (and an optional ``b``), any case; an int passes through.

    Examples
    --------
    >>> parse_bytes("512m"), parse_bytes("4G"), parse_bytes("10gb"), parse_bytes(0)
    (536870912, 4294967296, 10737418240, 0)
    """
    if isinstance(text, int) and not isinstance(text, bool) and text >= 0:
        return text
    match = _BYTE_SIZE.fullmatch(str(text))
    if not match:
        raise ValueError(f"not a byte size: {text!r}; expected a whole number with an optional unit "
                         "k, m, g, t or p, such as 512m or 4g")
    number, unit = match.groups()
    return int(number) << (10 * "_kmgtp".index(unit.lower() or "_"))


def host_budget(value) -> int:
    """The host budget that a host.maxBytes value means: 0 is a quarter of the driver's physical RAM."""
    size = parse_bytes(value)
    if size == 0:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * HOST_FRACTION_OF_RAM)
    return size


def disk_root(value) -> str:
    """The directory that a disk.dir value means: empty is ``memphis-<user>`` under the system temp dir."""
    return value.strip() or os.path.join(tempfile.gettempdir(), f"memphis-{getpass.getuser()}")


def fraction(value) -> float:
    """A fraction in (0, 1], as the JVM accepts it.

    Examples
    --------
    >>> fraction("0.9")
    0.9
    """
    number = float(value)
    if not 0 < number <= 1:
        raise ValueError(f"not a fraction in (0, 1]: {value!r}")
    return number


def setting(name, given):
    """``given`` if set, else the active Spark session's conf (never starts one), else the JVM default."""
    if given is not None:
        return given
    if "pyspark.sql" in sys.modules:
        from pyspark.sql import SparkSession

        session = SparkSession.getActiveSession()
        if session is not None:
            return session.conf.get(name, DEFAULTS[name])
    return DEFAULTS[name]


def _from_confs(host, directory, disk_max, min_cost_s) -> HostTier:
    disk_bytes = parse_bytes(setting(DISK_MAX_BYTES, disk_max))
    disk = None
    if disk_bytes:  # 0 turns spilling off
        try:
            disk = DiskTier(root=disk_root(setting(DISK_DIR, directory)), max_bytes=disk_bytes)
        except OSError as error:
            log.warning("memphis.local: no disk tier (%s); evicted values are dropped", error)
    return HostTier(max_bytes=host_budget(setting(HOST_MAX_BYTES, host)), disk=disk, min_cost_s=min_cost_s)


def configure(*, host_max_bytes=None, disk_dir=None, disk_max_bytes=None, min_cost_s: float = None) -> HostTier:
    """Replaces the local tiers (their entries are dropped) with ones of these settings.

    Unset values come from the active Spark session's ``spark.memphis.host.maxBytes`` (default
    ``0``: a quarter of the driver's physical RAM), ``spark.memphis.disk.dir`` (default empty:
    ``memphis-<user>`` under the system temp dir) and ``spark.memphis.disk.maxBytes`` (default
    ``10g``; ``0`` turns spilling off). ``min_cost_s``: traced results that took less are not
    cached; by default the tier's measured probe+store time (0 caches all; tests use it).

    Examples
    --------
    >>> import memphis.local
    >>> memphis.local.configure(host_max_bytes="64m", disk_max_bytes=0).max_bytes
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
                _tier = _from_confs(None, None, None, None)
    return _tier
