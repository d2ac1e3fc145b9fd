"""Safe to turn on: what memphis refuses to hold, what it holds in each place, and its pressure valve."""
import json
import os
import shutil

import memphis
from conftest import TEST_CONFS, memphis_off, run_python

# Join broadcasts in a fresh JVM with a small driver: a dimension table per query, each built twice
# (so kept), under a driver-heap budget smaller than all of them together (a broadcast hash relation
# on a long key takes about 32 MiB, whatever its rows: room for three).
BROADCASTS_APP = r"""
import json, sys
import memphis
from pyspark.sql import functions as F

confs = json.loads(sys.argv[1])
spark = memphis.session("local[2]", **confs)
spark.range(200_000).selectExpr("id", "id % 5000 AS d", "id % 7 AS v").write.parquet(sys.argv[2] + "/fact")
fact = spark.read.parquet(sys.argv[2] + "/fact")
dims = spark.range(5000).selectExpr("id AS d", "id % 10 AS g", "repeat(cast(id AS string), 20) AS pad")

def query(i, j):
    # A dimension of its own for each i (its filter), under a fact filter of its own for each j.
    return (fact.where(F.col("v") != j % 7).join(F.broadcast(dims.where(F.col("g") != i % 10).where(F.col("d") > i)), "d")
            .groupBy("g").agg(F.sum("v").alias("s"), F.count("pad").alias("n")))

samples, answers = [], []
for i in range(12):
    for j in range(2):
        answers.append(sorted(map(tuple, query(i, j).collect())))
        s = memphis.stats(spark)
        samples.append([s["bytes_held_join_broadcasts"], s["join_broadcast_budget_bytes"], s["bytes_held_driver_heap"],
                        s["driver_heap_budget_bytes"]])
spark.conf.set("spark.memphis.enabled", "false")
plain = [sorted(map(tuple, query(i, j).collect())) for i in range(12) for j in range(2)]
s = memphis.stats(spark)
print(json.dumps({"samples": samples, "equal": answers == plain, "registered": s["broadcasts_registered"],
                  "released": s["broadcasts_released"], "max_heap": spark._jvm.java.lang.Runtime.getRuntime().maxMemory()}))
"""


def test_many_distinct_broadcasts_in_a_small_driver_stay_in_their_budget(tmp_path):
    confs = {**TEST_CONFS, "spark.driver.memory": "640m", "driver_heapFraction": "0.2"}
    result = run_python(BROADCASTS_APP, json.dumps(confs), str(tmp_path))
    assert result["max_heap"] <= 640 << 20
    assert result["equal"]
    assert result["registered"] > 2 and result["released"] > 0, result
    for held, budget, heap_held, heap_budget in result["samples"]:
        assert 0 < budget <= heap_budget <= result["max_heap"] * 0.2 + 1
        assert held <= budget and heap_held <= heap_budget


# The valve in a fresh JVM: two kept broadcasts, one read ten times, the other once; after a full
# collection over the threshold the next query lets go of the one of least value. The test holds the
# old generation's threshold itself (JMX), so that only its own collections cross it: a collection
# the JVM runs on its own in the middle would release too early.
PRESSURE_APP = r"""
import json, sys
import memphis
from pyspark.sql import functions as F

confs = json.loads(sys.argv[1])
spark = memphis.session("local[2]", **confs)
jvm = spark._jvm
old_generation = [p for p in jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans()
                  if str(p.getType()) == "Heap memory" and p.isUsageThresholdSupported() and p.isCollectionUsageThresholdSupported()][0]

def collect_over_threshold(then):
    # A full collection that crosses the threshold, then `then`'s answer, then no crossings.
    old_generation.setCollectionUsageThreshold(1)
    jvm.java.lang.System.gc()
    answer = then()
    old_generation.setCollectionUsageThreshold(0)   # 0: no checking
    return answer

spark.range(100_000).selectExpr("id", "id % 500 AS d", "id % 7 AS v").write.parquet(sys.argv[2] + "/fact")
fact = spark.read.parquet(sys.argv[2] + "/fact")
# Broadcasts of several MiB (together above the share of the heap the valve leaves alone), of which the
# fact's keys (0 to 499) match the first 500 rows.
dims = spark.range(400_000).selectExpr("id AS d", "id % 10 AS g")

def query(dim, j):
    # A filter of its own for each j (most keep every row): no query is served by a cached subplan.
    return (fact.where(F.col("v") != j).join(F.broadcast(dims.where(f"g < {dim}")), "d")
            .groupBy("g").agg(F.sum("v").alias("s")))

def counters():
    s = memphis.stats(spark)
    return {k: s[k] for k in ["pressure_releases", "broadcasts_reused", "broadcasts_registered", "bytes_held_join_broadcasts",
                              "bytes_held_results"]}

conf_threshold = old_generation.getCollectionUsageThreshold()    # what the valve set, from the conf
old_generation.setCollectionUsageThreshold(0)
answers = [collect_over_threshold(query(9, 0).collect)]   # a crossing before anything is held releases nothing
answers.append(collect_over_threshold(query(7, 1).collect))  # nor one while only a few KiB of kept rows are
before = counters()
for dim in (8, 5):                                # each built twice: both kept
    for j in (1, 2):
        answers.append(query(dim, j).collect())
for j in range(3, 13):                            # the first read ten times: of more value than the second
    answers.append(query(8, j).collect())
held = counters()
answers.append(collect_over_threshold(spark.range(1000).selectExpr("sum(id)").collect))  # the valve runs when the next query is planned
relieved = counters()
answers.append(query(8, 13).collect())            # still kept: read again
kept = counters()
answers.append(query(5, 14).collect())            # let go: built again
rebuilt = counters()
spark.conf.set("spark.memphis.enabled", "false")
plain = [query(9, 0).collect(), query(7, 1).collect()] + [query(d, j).collect() for d in (8, 5) for j in (1, 2)] + \
    [query(8, j).collect() for j in range(3, 13)] + [spark.range(1000).selectExpr("sum(id)").collect(), query(8, 13).collect(),
     query(5, 14).collect()]
pool_max = old_generation.getUsage().getMax()
print(json.dumps({"threshold": [conf_threshold, pool_max if pool_max > 0 else jvm.java.lang.Runtime.getRuntime().maxMemory()],
                  "before": before, "held": held, "relieved": relieved, "kept": kept, "rebuilt": rebuilt,
                  "equal": [sorted(a) for a in answers] == [sorted(p) for p in plain]}))
"""


def test_the_pressure_valve_releases_by_value_and_the_next_queries_answer_right(tmp_path):
    confs = {**TEST_CONFS, "spark.driver.memory": "640m", "driver_pressureThreshold": "0.01",
             "driver_heapFraction": "0.3"}
    r = run_python(PRESSURE_APP, json.dumps(confs), str(tmp_path))
    assert r["equal"]
    conf_threshold, pool_max = r["threshold"]
    assert conf_threshold == int(pool_max * 0.01)
    assert r["before"]["pressure_releases"] == 0 and r["before"]["bytes_held_results"] > 0, r
    assert r["held"]["broadcasts_registered"] - r["before"]["broadcasts_registered"] == 2, r
    assert r["held"]["bytes_held_join_broadcasts"] > 0
    assert r["relieved"]["pressure_releases"] - r["held"]["pressure_releases"] == 1, r
    assert 0 < r["relieved"]["bytes_held_join_broadcasts"] < r["held"]["bytes_held_join_broadcasts"]
    assert r["kept"]["broadcasts_reused"] == r["relieved"]["broadcasts_reused"] + 1, "the valuable one stayed"
    assert r["rebuilt"]["broadcasts_reused"] == r["kept"]["broadcasts_reused"], "the other one was let go"


# A shared aggregate asked by four queries in a fresh JVM, the second while the heap stays above its
# threshold after a collection (the threshold set to 1 byte through the JVM's own MXBean).
CROWDED_APP = r"""
import json, sys
import memphis

spark = memphis.session("local[2]", **json.loads(sys.argv[1]))
jvm = spark._jvm
old_generation = [p for p in jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans()
                  if str(p.getType()) == "Heap memory" and p.isUsageThresholdSupported() and p.isCollectionUsageThresholdSupported()][0]
spark.range(200_000).selectExpr("id", "id % 97 AS k").write.parquet(sys.argv[2] + "/t")
t = spark.read.parquet(sys.argv[2] + "/t")

def query(j):
    return t.groupBy("k").count().where(f"k != {j}")

def counters():
    s = memphis.stats(spark)
    return {k: s[k] for k in ("persisted", "refused", "hits")}

answers, seen = [query(0).collect()], []
old_generation.setCollectionUsageThreshold(1)
jvm.java.lang.System.gc()
seen.append(counters())
answers.append(query(1).collect())      # its second occurrence: due, while the heap stays full
seen.append(counters())
old_generation.setCollectionUsageThreshold(0)   # 0: no checking
answers.append(query(2).collect())      # its third: persisted
seen.append(counters())
answers.append(query(3).collect())      # its fourth: served
seen.append(counters())
spark.conf.set("spark.memphis.enabled", "false")
plain = [query(j).collect() for j in range(4)]
print(json.dumps({"seen": seen, "equal": [sorted(a) for a in answers] == [sorted(p) for p in plain]}))
"""


def test_nothing_is_persisted_while_the_heap_that_would_store_it_stays_full(tmp_path):
    # Local mode stores cached relations on the driver heap, where Spark builds its broadcasts too.
    r = run_python(CROWDED_APP, json.dumps(TEST_CONFS), str(tmp_path))
    assert r["equal"]
    before, crowded, persisted, served = r["seen"]
    assert crowded["persisted"] == before["persisted"] and crowded["refused"] > before["refused"], r
    assert persisted["persisted"] == crowded["persisted"] + 1, r
    assert served["hits"] > persisted["hits"], r


def test_every_budget_is_what_spark_and_the_jvm_report(spark_tier, tmp_path):
    spark = spark_tier
    jsc = spark.sparkContext._jsc.sc()
    heap_max = spark._jvm.java.lang.Runtime.getRuntime().maxMemory()
    storage = sum(e.totalOnHeapStorageMemory() + e.totalOffHeapStorageMemory()
                  for e in jsc.statusTracker().getExecutorInfos())
    s = memphis.stats(spark)
    assert s["storage_budget_bytes"] == int(storage * 0.7)
    assert s["driver_heap_max_bytes"] == heap_max
    assert s["driver_heap_budget_bytes"] == int(heap_max * 0.1)
    assert 0 < s["driver_heap_used_bytes"] <= heap_max
    local_dir = spark._jvm.org.apache.spark.util.Utils.getLocalDir(jsc.conf())
    free = shutil.disk_usage(os.path.dirname(local_dir.rstrip("/"))).free
    assert abs(s["local_disk_budget_bytes"] - (free + s["bytes_held_local_disk"]) * 0.1) < 0.02 * free
    host = memphis.local.tier()
    assert s["host_budget_bytes"] == host.max_bytes

    # Held bytes per place against Spark's storage status: an aggregate asked for twice is cached
    # (the first occurrence's kept shuffle on local disk until then), read on its third.
    df = lambda: spark.range(100_000).selectExpr("id % 97 AS k", "id AS v").groupBy("k").sum("v")
    first = sorted(df().collect())
    kept = memphis.stats(spark)["bytes_held_local_disk"]
    assert kept > 0
    answers = [first, sorted(df().collect()), sorted(df().collect())]
    s = memphis.stats(spark)
    infos = [i for i in jsc.getRDDStorageInfo() if i.name().startswith("In-memory table memphis")]
    assert s["bytes_held_storage"] == s["bytes_held"] == sum(i.memSize() + i.diskSize() for i in infos) > 0
    assert s["bytes_held_storage"] <= s["storage_budget_bytes"]
    assert s["bytes_held_local_disk"] < kept, "the kept shuffle is let go once the entry is persisted"
    assert s["bytes_held_driver_heap"] > 0, "memphis's own entries are on the heap"
    assert answers == [memphis_off(spark, lambda: sorted(df().collect()))] * 3


def test_comma_join_reproduction_is_fast_and_right(fresh):
    spark = fresh
    spark.range(0, 200_000).selectExpr("id % 1000 as k", "id as v").createOrReplaceTempView("a")
    spark.range(0, 20_000).selectExpr("id % 1000 as k", "id % 10 as x").createOrReplaceTempView("b")
    queries = ["SELECT count(*) FROM a, b WHERE a.k = b.k AND b.x < 5",
               "SELECT sum(v) FROM a, b WHERE a.k = b.k AND b.x > 7"]
    refused = memphis.stats(spark)["refused_cross_join"]
    on = [spark.sql(q).collect() for q in queries]
    rows = spark.sql("SELECT state, reason FROM memphis_cache()").collect()
    assert memphis.stats(spark)["refused_cross_join"] > refused
    assert any("join without a condition" in r.reason and r.state == "seen" for r in rows), rows
    assert on == memphis_off(spark, lambda: [spark.sql(q).collect() for q in queries])
