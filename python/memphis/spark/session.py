"""Setting up Spark with memphis, and reading its counters."""
import os
import re
import sys

from memphis.spark import driver, jvm, jvm_access
from memphis.errors import MemphisConfigError, MemphisSetupError

CONF_PREFIX = "spark.memphis."


def option_key(name: str) -> str:
    """``storage_maxBytes`` or ``storage.maxBytes`` -> ``spark.memphis.storage.maxBytes``."""
    return name if name.startswith(CONF_PREFIX) else CONF_PREFIX + name.replace("_", ".")


def conf_value(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def append_csv(existing, item: str) -> str:
    """Adds ``item`` to a comma-separated conf value unless it is there already."""
    items = [x.strip() for x in (existing or "").split(",") if x.strip()]
    return ",".join(items if item in items else items + [item])


def spark_defaults() -> dict:
    """spark-defaults.conf as spark-submit will read it, so that values there are kept, not replaced."""
    from pyspark.find_spark_home import _find_spark_home

    conf_dir = os.environ.get("SPARK_CONF_DIR") or os.path.join(_find_spark_home(), "conf")
    path = os.path.join(conf_dir, "spark-defaults.conf")
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as f:
        lines = [re.match(r"([^\s=:#!]+)[\s=:]+(.*)", line.strip()) for line in f]
    return {m.group(1): m.group(2).strip() for m in lines if m}


def configure_spark(builder, **options):
    """Adds memphis to a ``SparkSession.Builder`` and returns the builder.

    The packaged jar is appended to ``spark.jars`` and the extension to ``spark.sql.extensions``;
    values already set on the builder or in ``spark-defaults.conf`` are kept. Each keyword becomes
    a ``spark.memphis.*`` conf, with ``_`` read as ``.``: ``storage_fraction=0.5`` sets
    ``spark.memphis.storage.fraction``. Values are checked when the session starts.

    A builder for a Spark Connect server (``.remote(...)``) is refused with
    :class:`MemphisSetupError`: memphis runs on the server (``memphis connect-server``).

    Call it before the first session of the process: the jar reaches Spark only when its JVM
    starts. A JVM that already runs must have the jar (cluster library) or this raises
    :class:`MemphisSetupError` saying what to do.

    Examples
    --------
    >>> from pyspark.sql import SparkSession
    >>> import memphis
    >>> builder = SparkSession.builder.master("local[2]").appName("features")
    >>> spark = memphis.configure_spark(builder, storage_fraction=0.5).getOrCreate()  # doctest: +SKIP
    """
    if builder._options.get("spark.remote") or os.environ.get("SPARK_REMOTE"):
        raise MemphisSetupError(
            "this builder connects to a Spark Connect server, where memphis runs, not in this process: start "
            "the server with `memphis connect-server` (or with the memphis jar in spark.jars and "
            f"spark.sql.extensions={jvm.EXTENSION_CLASS}), then connect as usual; memphis's functions take the "
            "Connect session")
    jar = jvm.jar_path()  # fails first, with one line, where memphis has no jar for this Spark
    problem = _running_jvm_problem()
    if problem:
        raise MemphisSetupError(problem)
    from pyspark import SparkContext

    if SparkContext._gateway is None:
        jvm.check_java()
    current = {**spark_defaults(), **builder._options}
    builder.config("spark.jars", append_csv(current.get("spark.jars"), jar))
    builder.config("spark.sql.extensions", append_csv(current.get("spark.sql.extensions"), jvm.EXTENSION_CLASS))
    for name, value in options.items():
        builder.config(option_key(name), conf_value(value))
    return builder


def _running_jvm_problem():
    """Why memphis cannot join the Spark JVM this process already runs, if it cannot."""
    from py4j.protocol import Py4JError
    from pyspark import SparkContext

    if SparkContext._gateway is None:
        return None  # no JVM yet: the builder's confs will reach it
    java = SparkContext._gateway.jvm
    try:
        java.java.lang.Class.forName(jvm.EXTENSION_CLASS, False,
                                     java.java.lang.Thread.currentThread().getContextClassLoader())
    except Py4JError:
        return ("Spark's JVM in this Python process started without the memphis jar, and a running JVM "
                "cannot load it; restart the Python process (notebook kernel) and configure memphis before "
                "the first session, or install the jar on the cluster (see docs/cluster.md)")
    running = SparkContext._active_spark_context
    extensions = running.getConf().get("spark.sql.extensions", "") if running is not None else None
    if extensions is not None and jvm.EXTENSION_CLASS not in [x.strip() for x in extensions.split(",")]:
        return ("a SparkContext is running without the memphis extension, and its confs are fixed; "
                "call spark.stop(), then build the session again")
    return None


def session(master: str = "local[*]", app_name: str = "memphis", **options):
    """Starts (or returns) a SparkSession with memphis on.

    Keyword options are ``spark.memphis.*`` settings as in :func:`configure_spark`; other Spark
    confs can be passed the same way with their full key, e.g.
    ``**{"spark.driver.memory": "2g"}``. A rejected memphis setting raises
    :class:`MemphisConfigError` and leaves no half-started context behind.

    Examples
    --------
    >>> import memphis
    >>> spark = memphis.session("local[2]", enabled=True)  # doctest: +SKIP
    >>> memphis.stats(spark)["hits"]  # doctest: +SKIP
    0
    """
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    # Python workers must run this interpreter, which has pyarrow and memphis.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark_confs = {k: v for k, v in options.items() if k.startswith("spark.") and not k.startswith(CONF_PREFIX)}
    memphis_options = {k: v for k, v in options.items() if k not in spark_confs}
    builder = SparkSession.builder
    # PySpark's builders share one dict of options: what a rejected start set must not outlive it.
    before = dict(builder._options)
    builder.master(master).appName(app_name)
    for key, value in spark_confs.items():
        builder.config(key, conf_value(value))
    configure_spark(builder, **memphis_options)
    try:
        return builder.getOrCreate()
    except Exception as e:
        reason = _memphis_rejection(e)
        if reason is None:
            raise
        # The first context of a process launches the JVM with its confs as system properties,
        # which every later context of that JVM would inherit: the rejected values go too.
        java = SparkContext._jvm
        for key, value in builder._options.items():
            if key.startswith(CONF_PREFIX) and java is not None and java.System.getProperty(key) == str(value):
                java.System.clearProperty(key)
        builder._options.clear()
        builder._options.update(before)
        if SparkContext._active_spark_context is not None:
            # Its conf is fixed: no session can start on it, so free it for a corrected retry.
            SparkContext._active_spark_context.stop()
        raise reason from None


# The JVM's exceptions for a refused start (io.memphis.conf.MemphisExceptions), by class name.
_REJECTIONS = {"io.memphis.conf.MemphisConfigException": MemphisConfigError,
               "io.memphis.conf.MemphisSetupException": MemphisSetupError}


def _memphis_rejection(error):
    """The memphis error inside a failed session start (PySpark may have wrapped it), if that is why."""
    throwable = getattr(error, "java_exception", None) or getattr(error, "_origin", None)
    seen = 0
    while throwable is not None and seen < 20:  # the cause chain, bounded
        kind = _REJECTIONS.get(throwable.getClass().getName())
        if kind is not None:
            return kind(str(throwable.getMessage()))
        throwable, seen = throwable.getCause(), seen + 1
    return None


def stats(spark) -> dict:
    """The memphis counters of every tier, as ``{name: number}``; one py4j round trip.

    Spark tier (what ``SELECT * FROM memphis_stats()`` shows): hits, misses, persisted,
    materialized, evicted, invalidated, refused, refused_other_user (another user's entry, not
    served: ``spark.memphis.shareAcrossUsers``), refused_unknown_user (the durable tier not read or
    written for a Spark Connect session that sent no user id), refused_cross_join, refused_broadcast_join, refused_estimated_size,
    refused_slower, refused_not_recurring (due, held back: the session's due subplans did not come back, or its persists were not read),
    pressure_releases, bytes_held, compute_saved_ms, shuffles_retained,
    shuffles_reused, persisted_ahead; for loops checkpointed,
    checkpoints_released, checkpoint_files_deleted and persisted_speculatively; for join broadcasts read across queries
    broadcasts_seen, broadcasts_registered, broadcasts_reused, broadcasts_released and bytes_held_join_broadcasts;
    for collected results read by later queries results_kept, results_reused, results_released, results_refused
    and bytes_held_results; for the durable tier's Spark results (``spark.memphis.durable.dir``) durable_hits,
    durable_writes, durable_bytes_written, durable_not_admitted (not worth writing), durable_write_failures,
    durable_refused (an entry not trusted: corrupt, another user's, another format), durable_invalidated (its
    sources changed: removed), durable_evicted (over ``durable.maxBytes``) and durable_cleaned (leftovers deleted); the level
    durable_writes_pending counts the writes queued or running in the background.
    Per place, held and budget: bytes_held_storage and storage_budget_bytes (executors' storage),
    bytes_held_driver_heap, driver_heap_budget_bytes and join_broadcast_budget_bytes (with
    driver_heap_used_bytes and driver_heap_max_bytes as the JVM measures them),
    bytes_held_local_disk and local_disk_budget_bytes, bytes_held_host and host_budget_bytes.
    Driver tiers (:mod:`memphis.local`), prefixed ``local_``: local_hits, local_partial_hits,
    local_misses, local_computed, local_evicted, local_spilled, local_reloaded, local_refused,
    local_corrupt, local_spill_failed, local_started_early, local_internal_errors, local_compute_saved_ms; and
    bytes_held_host, bytes_held_disk. The driver's durable tier: local_durable_hits, local_durable_misses,
    local_durable_writes, local_durable_refused, local_durable_evicted, local_durable_corrupt,
    local_durable_foreign, local_durable_write_failed, local_durable_orphans_removed, bytes_held_durable and
    durable_budget_bytes. GPU tier (:mod:`memphis.gpu`, zeros without one):
    local_gpu_hits, local_gpu_misses, local_recycled_allocations, local_fresh_allocations,
    local_evicted_to_host, local_gpu_deleted, local_eviction_time_ms, local_copies_to_device,
    local_copies_to_host; and bytes_held_gpu.
    Broadcasts of :func:`memphis.broadcast`: local_broadcast_hits, local_broadcasts,
    local_broadcasts_early, local_broadcasts_evicted, local_broadcasts_refused and bytes_held_broadcast.

    Examples
    --------
    >>> import memphis
    >>> spark = memphis.session("local[2]")  # doctest: +SKIP
    >>> memphis.stats(spark)["evicted"]  # doctest: +SKIP
    0
    """
    counters = jvm_access.of(spark).stats()
    for name, value in driver.stats().items():
        counters[name if name.startswith("bytes_held_") or name.endswith("_budget_bytes") else f"local_{name}"] = value
    return counters


# Stats that are levels, not event counts: reported as read after, not as a difference.
LEVELS = {"bytes_held", "storage_budget_bytes", "bytes_held_join_broadcasts", "durable_writes_pending"}


def difference(before: dict, after: dict) -> dict:
    """What happened between two reads of :func:`stats`: event counts as differences, levels as read after.

    Examples
    --------
    >>> difference({"hits": 2, "bytes_held": 10}, {"hits": 5, "bytes_held": 4})
    {'hits': 3, 'bytes_held': 4}
    """
    return {k: v if k in LEVELS else v - before.get(k, 0) for k, v in after.items()}


def entries(spark):
    """One row per memphis cache entry of every tier, as a pandas DataFrame.

    Columns: tier (spark, durable, host or disk), key, state (Spark: seen, to-persist, materialized,
    evicted, invalid; the durable tier's Spark results: durable; driver: computing, cached, spilled),
    occurrences, hits, misses, consumers (distinct queries that used it), readers (running queries that
    read it), size_bytes, partitions_stored, partitions, cost_ms, score, height, last_access_ms,
    retained_shuffles, estimated_bytes, reason, owner (Spark entries: the user whose query produced it),
    path and age_s (durable entries: their folder, the seconds since they were written), and opcode
    (driver entries: the operation that made it). A column that does not apply to a tier is empty.
    ``SELECT * FROM memphis_cache()`` shows the Spark and durable rows.

    Examples
    --------
    >>> memphis.entries(spark)[["tier", "key", "state", "hits"]]  # doctest: +SKIP
    """
    import pandas as pd

    return pd.concat([spark.sql("SELECT * FROM memphis_cache()").toPandas(), driver.entries()], ignore_index=True)


def clear(spark, *, durable: bool = False) -> None:
    """Unpersists everything memphis holds in Spark storage, forgets its entries, clears the
    driver tiers (host and disk) and destroys the broadcasts of :func:`memphis.broadcast`; with
    ``durable=True`` also deletes this user's results in the durable tier
    (``spark.memphis.durable.dir``: Spark results and the driver's files), which otherwise outlive
    the application."""
    jvm_access.of(spark).clear(durable=durable)
    driver.clear(durable=durable)
