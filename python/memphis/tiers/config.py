"""Where the local tiers get their budgets: explicit configure(), else the active Spark session's confs.

The confs are declared on the JVM side (io.memphis.conf.MemphisConf); their defaults come from the table
the build writes into the jar (memphis.jar_facts), and values are parsed by the same rules (a test
checks both sides agree), so a value the session accepts means the same here.
"""
import getpass
import math
import os
import re
import sys
import tempfile
import urllib.parse

from memphis import jar_facts
from memphis.tiers.disk import NO_DISK, DiskTier
from memphis.tiers.durable import DurableTier, default_root
from memphis.tiers.host import HostTier

HOST_MAX_BYTES = "spark.memphis.host.maxBytes"
DISK_DIR = "spark.memphis.disk.dir"
DISK_MAX_BYTES = "spark.memphis.disk.maxBytes"
GPU_MEMORY_FRACTION = "spark.memphis.gpu.memoryFraction"
BROADCAST_MAX_BYTES = "spark.memphis.broadcast.maxBytes"
DURABLE_DIR = "spark.memphis.durable.dir"
DURABLE_MAX_BYTES = "spark.memphis.durable.maxBytes"
SHARE_ACROSS_USERS = "spark.memphis.shareAcrossUsers"
# MEMPHIS_DURABLE=off in the environment turns the driver's durable tier off unless configure() names
# a durable setting: for test suites and sandboxes, whose processes must not share results.
DURABLE_SWITCH = "MEMPHIS_DURABLE"
HOST_FRACTION_OF_RAM = 0.25  # what host.maxBytes=0 means
_BYTE_SIZE = re.compile(r"\s*(\d+)\s*([kmgtp]?)b?\s*", re.IGNORECASE)
_MAX_BYTES = (1 << 63) - 1  # the JVM reads a byte size into a long



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
    match = _BYTE_SIZE.fullmatch(text) if isinstance(text, str) else None
    if not match:
        raise ValueError("expected a byte size: a whole number with an optional unit k, m, g, t or p, "
                         "such as 512m or 4g")
    number, unit = match.groups()
    size = int(number) << (10 * "_kmgtp".index(unit.lower() or "_"))
    if size > _MAX_BYTES:
        raise ValueError(f"expected a byte size of at most {_MAX_BYTES} bytes (8 EiB)")
    return size


def host_budget(value) -> int:
    """The host budget that a host.maxBytes value means: 0 is a quarter of the driver's physical RAM."""
    size = parse_bytes(value)
    if size == 0:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * HOST_FRACTION_OF_RAM)
    return size


def disk_root(value) -> str:
    """The directory that a disk.dir value means: empty is ``memphis-<user>`` under the system temp dir."""
    path = os.fspath(value) if isinstance(value, os.PathLike) else value
    if not isinstance(path, str):
        raise TypeError("expected a directory path (a string); empty for memphis-<user> under the temp dir")
    return path.strip() or os.path.join(tempfile.gettempdir(), f"memphis-{getpass.getuser()}")


def durable_root(value):
    """The directory that a durable.dir value means for the driver's tier, None for off: ``auto``
    (the default) is ``memphis/durable`` under the user's cache directory (``$XDG_CACHE_HOME``,
    else ``~/.cache``), for any master: the driver's files are its own machine's; ``none`` or empty
    is off; a ``file:`` URI is its path. Another filesystem's URI (``s3a://``, ``hdfs://``) holds the
    Spark results only: the driver's tier writes local files, and is off then."""
    path = os.fspath(value) if isinstance(value, os.PathLike) else value
    if not isinstance(path, str):
        raise TypeError("expected auto, none, or a directory path (a string)")
    path = path.strip()
    if path.lower() in ("", "none"):
        return None
    if path.lower() != "auto":
        scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]+):", path)
        if scheme is None:
            return path
        return urllib.parse.urlparse(path).path if scheme.group(1).lower() == "file" else None
    return default_root()


def boolean(value) -> bool:
    """A boolean as the JVM reads a conf: true or false, any case."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError("expected true or false")


def fraction(value) -> float:
    """A fraction in (0, 1], as the JVM accepts it.

    Examples
    --------
    >>> fraction("0.9")
    0.9
    """
    try:
        number = math.nan if isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not 0 < number <= 1:  # NaN fails too
        raise ValueError("expected a fraction in (0, 1], such as 0.9")
    return number


def seconds(value) -> float:
    """A non-negative, finite number of seconds."""
    number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
    if not 0 <= number < math.inf:
        raise ValueError("expected a non-negative number of seconds, such as 0.001")
    return number


def checked(name: str, value, parse):
    """``parse(value)``; a value it rejects raises ValueError naming ``name``, the value and what is allowed."""
    try:
        return parse(value)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name}={value!r}: {error}") from None


def default(name) -> str:
    """The default of the ``spark.memphis.*`` key ``name``, as the JVM declares it."""
    return jar_facts.default(name)


def setting(name, given):
    """``given`` if set, else the active Spark session's conf (never starts one), else the JVM default."""
    if given is not None:
        return given
    if "pyspark.sql" in sys.modules:
        from pyspark.sql import SparkSession

        session = SparkSession.getActiveSession()
        if session is not None:
            return session.conf.get(name, default(name))
    return default(name)


def resolved(conf: str, argument: str, given, parse):
    """``given`` (the argument named ``argument``), else ``conf``'s setting, parsed; a bad value
    raises ValueError naming where it came from."""
    return checked(argument, given, parse) if given is not None else checked(conf, setting(conf, None), parse)


def durable_tier(*, durable_dir=None, durable_max_bytes=None, min_cost_s: float = None):
    """The durable tier of these settings (unset ones from the Spark confs), None when it is off:
    ``durable_max_bytes`` 0, or MEMPHIS_DURABLE=off in the environment with neither argument given."""
    if durable_dir is None and durable_max_bytes is None and os.environ.get(DURABLE_SWITCH, "").lower() == "off":
        return None
    max_bytes = resolved(DURABLE_MAX_BYTES, "durable_max_bytes", durable_max_bytes, parse_bytes)
    root = resolved(DURABLE_DIR, "durable_dir", durable_dir, durable_root)
    shared = checked(SHARE_ACROSS_USERS, setting(SHARE_ACROSS_USERS, None), boolean)
    # An unusable directory shows on the first write: counted in durable_write_failed, warned once.
    return DurableTier(root=root, max_bytes=max_bytes, shared=shared, min_cost_s=min_cost_s) \
        if max_bytes and root else None


def host_tier(*, host_max_bytes=None, disk_dir=None, disk_max_bytes=None, durable_dir=None, durable_max_bytes=None,
              min_cost_s: float = None) -> HostTier:
    """A host tier (with its disk and durable tiers) of these settings; unset ones from the Spark
    confs (see :func:`memphis.local.configure`). A bad value raises ValueError naming where it came from."""
    host_bytes = resolved(HOST_MAX_BYTES, "host_max_bytes", host_max_bytes, host_budget)
    disk_bytes = resolved(DISK_MAX_BYTES, "disk_max_bytes", disk_max_bytes, parse_bytes)
    root = resolved(DISK_DIR, "disk_dir", disk_dir, disk_root)
    if min_cost_s is not None:
        min_cost_s = checked("min_cost_s", min_cost_s, seconds)
    durable = durable_tier(durable_dir=durable_dir, durable_max_bytes=durable_max_bytes, min_cost_s=min_cost_s)
    # An unusable directory shows on the first spill: counted in spill_failed, warned once.
    disk = DiskTier(root=root, max_bytes=disk_bytes) if disk_bytes else NO_DISK  # 0 turns spilling off
    return HostTier(max_bytes=host_bytes, disk=disk, durable=durable, min_cost_s=min_cost_s)
