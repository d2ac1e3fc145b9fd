from pyspark.sql import functions as F

import memphis
import memphis.gpu
from memphis.spark import broadcasts
from memphis.tiers import durable
from conftest import job_count


def test_extension_is_registered_with_the_session(spark):
    conf = spark.sparkContext.getConf()
    assert memphis.EXTENSION_CLASS in conf.get("spark.sql.extensions").split(",")
    assert memphis.jar_path() in conf.get("spark.jars").split(",")
    jvm_conf = spark._jsparkSession.sessionState().conf()
    assert memphis.EXTENSION_CLASS in jvm_conf.getConfString("spark.sql.extensions")


def test_stats_from_sql_and_python_agree(spark):
    by_sql = {r["name"]: r["value"] for r in spark.sql("SELECT * FROM memphis_stats()").collect()}
    merged = memphis.stats(spark)
    # Measured figures (heap in use, free disk, what the entries take) move between two reads.
    measured = {"driver_heap_used_bytes", "local_disk_budget_bytes", "bytes_held_driver_heap", "join_broadcast_budget_bytes"}
    assert {name: merged[name] for name in by_sql if name not in measured} == \
        {name: value for name, value in by_sql.items() if name not in measured}
    assert {"hits", "misses", "persisted", "materialized", "evicted", "invalidated", "bytes_held",
            "compute_saved_ms", "storage_budget_bytes"} <= set(by_sql)
    assert by_sql["storage_budget_bytes"] > 0
    local = {name for name in merged if name not in by_sql}
    assert local == {"local_" + name for name in ("hits", "partial_hits", "misses", "computed", "evicted", "spilled",
                                                  "reloaded", "refused", "corrupt", "spill_failed",
                                                  "started_early", "internal_errors", "compute_saved_ms")} | \
        {"local_" + name for name in memphis.gpu.GPU_COUNTERS if name != "bytes_held_gpu"} | \
        {"local_" + name for name in broadcasts.COUNTERS if name != "bytes_held_broadcast"} | \
        {"local_" + name for name in durable.COUNTERS} | \
        {"bytes_held_host", "bytes_held_disk", "bytes_held_gpu", "bytes_held_broadcast", "bytes_held_durable",
         "host_budget_bytes", "disk_budget_bytes", "durable_budget_bytes"}


def test_entries_and_clear_cover_every_tier(spark, local_tier):
    import numpy as np

    df = spark.range(3000).groupBy((F.col("id") % 5).alias("k")).count()
    df.collect()
    memphis.collect(df)
    gram = memphis.array(np.ones((500, 40))).T @ memphis.array(np.ones((500, 40)))
    assert gram.shape == (40, 40)
    rows = memphis.entries(spark)
    assert {"spark", "host"} <= set(rows["tier"]) and {"key", "state", "hits", "opcode"} <= set(rows.columns)
    assert memphis.stats(spark)["bytes_held_host"] > 0
    memphis.clear(spark)
    assert memphis.entries(spark).empty and memphis.stats(spark)["bytes_held_host"] == 0


def test_counters_come_from_the_jvm_cache(spark):
    jvm = spark._jvm
    cache = jvm.io.memphis.facade.LineageCache.forContext(spark._jsparkSession.sparkContext())
    before = memphis.stats(spark)["misses"]
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()  # the one spark.jars feeds
    counters = (jvm.java.lang.Class.forName("io.memphis.conf.CacheStats$Counter$", True, loader)
                .getField("MODULE$").get(None))
    cache.stats().add(counters.Misses(), 2)
    assert memphis.stats(spark)["misses"] == before + 2


def test_same_answer_and_jobs_with_memphis_off_and_on(spark):
    def query():  # a new DataFrame per run: a re-collected one would skip its finished stages
        return (spark.range(20_000).withColumn("k", F.col("id") % 13)
                .groupBy("k").agg(F.sum("id").alias("s"), F.count("*").alias("n")).orderBy("k"))

    results = {}
    for enabled in ("false", "true"):
        spark.conf.set("spark.memphis.enabled", enabled)
        results[enabled] = job_count(spark, f"on-off-{enabled}", query().collect)
    (off, off_jobs), (on, on_jobs) = results["false"], results["true"]
    assert on == off
    assert on_jobs == off_jobs > 0


def test_bad_value_at_run_time_is_rejected_and_the_old_one_kept(spark):
    import pytest

    with pytest.raises(Exception) as info:
        spark.conf.set("spark.memphis.storage.fraction", "2")
    message = str(info.value)
    assert "spark.memphis.storage.fraction" in message and "'2'" in message
    assert "greater than 0 and at most 1" in message
    assert spark.conf.get("spark.memphis.storage.fraction") == "0.7"
