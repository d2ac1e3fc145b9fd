"""Driver work started in the background (prefetch, early broadcast, run_all's actions), with the
caller's Spark local properties carried into the thread that runs it."""
import concurrent.futures

from memphis.tiers.runtime import Runtime, default


def submit(fn, *args, runtime: Runtime = default, **kwargs) -> concurrent.futures.Future:
    """Runs ``fn(*args, **kwargs)`` in a background thread of ``runtime`` and returns its future at once.

    The thread gets a copy of the caller's Spark local properties (job group, description,
    scheduler pool), so the jobs it runs count and schedule as the caller's own would.
    """
    properties = local_properties()

    def run():
        adopt(properties)
        return fn(*args, **kwargs)
    pool = runtime.part("background", lambda: concurrent.futures.ThreadPoolExecutor(
        thread_name_prefix="memphis-background"))
    return pool.submit(run)


def local_properties():
    """The calling thread's Spark local properties (a JVM object), or None without a running SparkContext."""
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    return sc._jsc.sc().getLocalProperties() if sc is not None else None


def adopt(properties):
    """Gives this thread its own copy of ``properties``; returns the SparkContext, or None when there is none."""
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    if sc is None or properties is None:
        return None
    sc._jsc.sc().setLocalProperties(properties.clone())  # a copy: threads then change theirs apart
    return sc
