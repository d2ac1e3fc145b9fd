import json
import os
import subprocess
import sys
import time

import atexit
import shutil
import tempfile

import pytest

# No test reads or writes the user's durable tier, and none sees another test's durable entries:
# the durable tier is off (tests that need it configure a folder of their own), and its default
# folder lies in a cache directory of this run, removed at its end. Subprocesses inherit both.
os.environ["MEMPHIS_DURABLE"] = "off"
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="memphis-test-cache-")
atexit.register(shutil.rmtree, os.environ["XDG_CACHE_HOME"], True)

import memphis  # noqa: E402  (after the environment above: tiers read it when first made)

# The benchmark harness and workloads, which some tests import: they are not part of the package.
BENCHMARKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks")
sys.path.insert(0, BENCHMARKS)

# The longest test files, longest first (their seconds in a full run's --durations, 2026-12-07), started
# first: `make test` hands whole files to its workers (--dist loadfile) in collection order, and one begun
# last would keep its worker busy long after the other ran out of files. The line scenarios
# (integration/lines/run.sh) run some of them too, and so start with theirs.
LONGEST_FIRST = ("test_tpcds_corpus.py", "test_staleness_corpus.py", "test_bench_restart.py", "test_bench.py",
                 "test_tpch_corpus.py", "test_durable_storage.py", "test_bench_spark_scripts.py",
                 "test_loop_speculation.py", "test_durable_spark.py", "test_staleness.py", "test_bench_ml.py",
                 "test_connect.py", "test_memory_accounts.py", "test_delta.py", "test_durable_collected.py",
                 "test_demo.py", "test_checkpoint.py", "test_key_property.py", "test_broadcast_join_reuse.py",
                 "test_collected_results.py", "test_reuse.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


# Small, quiet local sessions (the recipe in shared/reference/spark-internals.md §14.2).
TEST_CONFS = {
    "spark.ui.enabled": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.sql.shuffle.partitions": "4",
}


def stop_spark():
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if SparkSession.getActiveSession() is not None:
        SparkSession.getActiveSession().stop()
    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()


@pytest.fixture
def spark():
    """A local[2] session with memphis; reused across tests while it runs."""
    session = memphis.session("local[2]", app_name="memphis-tests", **TEST_CONFS)
    session.conf.set("spark.memphis.enabled", "true")
    deadline = time.time() + 30  # the block manager reports its memory shortly after start
    while memphis.stats(session)["storage_budget_bytes"] == 0 and time.time() < deadline:
        time.sleep(0.1)
    return session


@pytest.fixture
def fresh(spark):
    """The shared session with memphis' caches and Spark's cache empty before and after."""
    memphis.clear(spark)
    spark.catalog.clearCache()
    yield spark
    memphis.clear(spark)
    spark.catalog.clearCache()
    spark.conf.unset("spark.memphis.reuse.minOccurrences")
    spark.conf.unset("spark.memphis.collected.maxBytes")


# Collected results off: a query's rows are not kept on the driver for later queries.
NO_KEPT_RESULTS = {"spark.memphis.collected.maxBytes": "0"}


@pytest.fixture
def spark_tier(fresh):
    """The fresh session with collected results off (:data:`NO_KEPT_RESULTS`), for tests of cached
    relations, kept shuffles and checkpoints that collect one query again and again: with them on,
    the repeats would read the rows the first collect kept on the driver, and the Spark tier would
    see one occurrence."""
    fresh.conf.set("spark.memphis.collected.maxBytes", "0")
    return fresh


@pytest.fixture(params=["true", pytest.param("false", marks=pytest.mark.default_line_only)],
                ids=["adaptive", "not-adaptive"])
def adaptive(fresh, request):
    """The fresh session with adaptive execution on, then off (Spark's default, on, on every line; off on the
    default line only, integration/lines/run.sh)."""
    fresh.conf.set("spark.sql.adaptive.enabled", request.param)
    yield fresh
    fresh.conf.unset("spark.sql.adaptive.enabled")


@pytest.fixture
def no_spark():
    """For tests that start their own SparkContext: none runs before or after."""
    stop_spark()
    yield
    stop_spark()


def in_job_group(spark, tag, action):
    """Runs ``action()`` in a job group and returns (its result, the ids of the Spark jobs it ran)."""
    sc = spark.sparkContext
    sc.setJobGroup(tag, tag)
    try:
        result = action()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    return result, sc.statusTracker().getJobIdsForGroup(tag)


def job_count(spark, tag, action):
    """Runs ``action()`` in a job group and returns (its result, the number of Spark jobs it ran)."""
    result, jobs = in_job_group(spark, tag, action)
    return result, len(jobs)


def memphis_off(spark, action):
    """``action()`` with memphis turned off in ``spark`` (plain Spark), then on again."""
    spark.conf.set("spark.memphis.enabled", "false")
    try:
        return action()
    finally:
        spark.conf.set("spark.memphis.enabled", "true")


def eventually(check, seconds=30):
    """Spark's listener bus tells memphis about stored blocks and ended queries a moment later."""
    deadline = time.time() + seconds
    while not check() and time.time() < deadline:
        time.sleep(0.1)
    return check()


def sales(spark, path, rows=20_000):
    (spark.range(rows).selectExpr("id", "id % 50 AS k", "(id * 7) % 13 AS v")
     .repartition(2).write.mode("overwrite").parquet(path))
    return path


def per_key(spark, path):
    from pyspark.sql import functions as F  # imported when used: the GPU machine's tests run without pyspark

    return spark.read.parquet(path).groupBy("k").agg(F.sum("v").alias("total"), F.count("*").alias("n"))


def entry_states(spark):
    return {r["key"]: r for r in spark.sql("SELECT * FROM memphis_cache()").collect()}


def uses_memphis_cache(df):
    return "Scan In-memory table memphis" in df._jdf.queryExecution().executedPlan().toString()


def long_lived_jvm_env():
    """This process's environment for a JVM that runs for many minutes, such as a corpus': without the
    C1-only flag the root conftest.py gives the tests' short-lived JVMs. The second JIT tier pays
    off there: the TPC-DS corpus answered 1.55 times as many queries in 16 minutes with it, two runs side by
    side on two cores."""
    env = dict(os.environ)
    env["SPARK_SUBMIT_OPTS"] = " ".join(
        o for o in env.get("SPARK_SUBMIT_OPTS", "").split() if not o.startswith("-XX:TieredStopAtLevel="))
    return env


def run_python(code, *args, env=None, timeout=300):
    """Runs ``code`` in a fresh interpreter (a fresh JVM too) and returns the JSON its last line prints."""
    result = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                            timeout=timeout, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture
def local_tier(tmp_path):
    """Fresh local tiers of memphis.local (64 MiB host, a disk dir under tmp_path), caching every result."""
    import memphis.local

    tier = memphis.local.configure(host_max_bytes=64 << 20, disk_dir=str(tmp_path / "spill"), min_cost_s=0.0)
    yield tier
    memphis.local.configure()


@pytest.fixture(params=["simulated", pytest.param("cupy", marks=pytest.mark.gpu)])
def device(request):
    """The device a GPU-tier test runs on: the simulated one always, cupy's where a GPU is."""
    from memphis.gpu import CupyDevice, SimulatedDevice
    from memphis.gpu import usable

    if request.param == "cupy":
        if not usable()[0]:
            pytest.skip("no GPU: cupy not importable or no CUDA device")
        return CupyDevice()
    return SimulatedDevice(capacity_bytes=256 << 20)


@pytest.fixture
def gpu_tier(device, local_tier):
    """A function (budget_bytes) -> a fresh GPU tier on ``device`` above fresh local tiers; gone after."""
    import memphis.gpu

    yield lambda budget_bytes: memphis.gpu.configure(device=device, budget_bytes=budget_bytes)
    memphis.gpu.configure(device="none")
