"""Kills executors of a local-cluster session under memphis; prints what it saw as JSON (last line).

Run by integration/test_faults.py in its own interpreter (one SparkContext per process).
Usage: executor_loss.py <scratch dir>
"""
import json
import os
import signal
import sys
import threading
import time

from pyspark.sql import functions as F

import memphis

MASTER = "local-cluster[2,1,1024]"
CONFS = {
    "spark.ui.enabled": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.executor.memory": "512m",
    "spark.sql.shuffle.partitions": "8",
    # Fixed partitions, spread over both executors: a lost executor takes some of them, not all.
    "spark.sql.adaptive.enabled": "false",
    # The entries lost with an executor are persisted ones: rows kept on the driver would answer the
    # repeated collects without any.
    "spark.memphis.collected.maxBytes": "0",
}
PARTITIONS = 8


def start():
    """A local-cluster session with both executors up. A first start sometimes fails
    ("Master removed our application"), so it is tried twice; None when neither came up."""
    from pyspark import SparkContext

    for _ in range(2):
        try:
            spark = memphis.session(MASTER, app_name="memphis-executor-loss", **CONFS)
            if wait_for(lambda: len(executors(spark)) >= 2, 120):
                return spark
        except Exception as e:  # noqa: BLE001 - reported below if the retry fails too
            print(f"start failed: {e}", file=sys.stderr)
        if SparkContext._active_spark_context is not None:
            SparkContext._active_spark_context.stop()
    return None


def wait_for(check, seconds):
    deadline = time.time() + seconds
    while not check():
        if time.time() > deadline:
            return False
        time.sleep(0.1)
    return True


def executors(spark):
    jvm = spark.sparkContext._jvm
    return sorted(jvm.scala.jdk.javaapi.CollectionConverters.asJava(spark.sparkContext._jsc.sc().getExecutorIds()))


def entry(spark, key):
    rows = [r.asDict() for r in spark.sql("SELECT * FROM memphis_cache()").collect() if r["key"] == key]
    return rows[0] if rows else None


def spark_rdd(spark, key):
    """Spark's own view of the entry's cached RDD: (id, cached partitions), or None."""
    for info in spark.sparkContext._jsc.sc().getRDDStorageInfo():
        if key in info.name():
            return info.id(), info.numCachedPartitions()
    return None


def holders(spark, rdd_id):
    """Executor id -> the partitions of the RDD whose blocks it stores (the block manager master's view)."""
    jvm = spark.sparkContext._jvm
    master = spark.sparkContext._jsc.sc().env().blockManager().master()
    held = {}
    for p in range(PARTITIONS):
        locations = master.getLocations(jvm.org.apache.spark.storage.RDDBlockId(rdd_id, p))
        for bm in jvm.scala.jdk.javaapi.CollectionConverters.asJava(locations):
            held.setdefault(bm.executorId(), []).append(p)
    return held


def kill_process(spark, executor_id):
    """SIGKILLs the executor's JVM: a crash, not a polite decommission; the worker launches a new one."""
    app = spark.sparkContext.applicationId
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if b"org.apache.spark.executor.CoarseGrainedExecutorBackend" in args and app.encode() in args:
            i = args.index(b"--executor-id")
            if args[i + 1].decode() == executor_id:
                os.kill(int(pid), signal.SIGKILL)
                return int(pid)
    raise AssertionError(f"no process for executor {executor_id} of {app}")


def consistent(spark, key):
    """memphis' stored partitions of the entry equal what Spark's block managers hold."""
    e, rdd = entry(spark, key), spark_rdd(spark, key)
    return e is not None and rdd is not None and e["partitions_stored"] == rdd[1]


def main(scratch):
    started = time.time()
    spark = start()
    if spark is None:
        print(json.dumps({"unavailable": f"{MASTER} did not bring up 2 executors in two tries of 120 s"}))
        return
    seen = {"start_s": round(time.time() - started, 1), "faults": 0}
    path = os.path.join(scratch, "sales")
    spark.range(40_000).selectExpr("id", "id % 80 AS k", "(id * 7) % 13 AS v").repartition(4).write.parquet(path)

    def per_key():
        return spark.read.parquet(path).groupBy("k").agg(F.sum("v").alias("total"), F.count("*").alias("n"))

    def answer(df):
        return sorted(map(tuple, df.collect()))

    # Seconds of work above the entry, in the tasks that fill it (a block is stored before its rows are read).
    def slow_reader():
        return per_key().selectExpr("k", "total", "n", "reflect('java.lang.Thread', 'sleep', 100L) AS s")

    spark.conf.set("spark.memphis.enabled", "false")
    plain = answer(per_key())
    spark.conf.set("spark.memphis.enabled", "true")
    key = memphis.lineage_key(per_key())

    # 1. After materialization: persisted on its 2nd occurrence, then an executor holding part of it dies.
    after = seen["after_materialized"] = {"answers_right": [answer(per_key()) == plain for _ in range(2)]}
    after["materialized"] = wait_for(lambda: (entry(spark, key) or {}).get("state") == "materialized", 30)
    rdd_id = spark_rdd(spark, key)[0]
    held = holders(spark, rdd_id)
    victim = max(held, key=lambda x: len(held[x]))
    only_there = [p for p in held[victim] if not any(p in held[o] for o in held if o != victim)]
    bytes_before = memphis.stats(spark)["bytes_held"]
    kill_process(spark, victim)
    seen["faults"] += 1
    after["lost"] = len(only_there)
    after["noticed"] = wait_for(lambda: (entry(spark, key) or {}).get("state") == "to-persist", 30)
    after["entry_after_loss"] = entry(spark, key)
    after["consistent_after_loss"] = wait_for(lambda: consistent(spark, key), 30)
    after["bytes_held"] = [bytes_before, memphis.stats(spark)["bytes_held"]]
    hits = memphis.stats(spark)["hits"]
    after["answer_after_loss"] = answer(per_key()) == plain
    after["served"] = memphis.stats(spark)["hits"] - hits
    after["rematerialized"] = wait_for(lambda: (entry(spark, key) or {}).get("state") == "materialized", 30)
    after["entry_end"] = entry(spark, key)
    after["spark_cached_end"] = spark_rdd(spark, key)[1]

    # 2. While being materialized: persisted on its first occurrence, an executor dies mid-job.
    during = seen["during_materialization"] = {"executors_back": wait_for(lambda: len(executors(spark)) >= 2, 90)}
    memphis.clear(spark)
    spark.conf.set("spark.memphis.reuse.minOccurrences", "1")
    result = {}
    job = threading.Thread(target=lambda: result.update(rows=answer(slow_reader())))
    job.start()
    stored = wait_for(lambda: ((entry(spark, key) or {}).get("partitions_stored") or 0) >= 1, 60)
    held = holders(spark, spark_rdd(spark, key)[0]) if stored else {}
    during["running_at_kill"] = stored and job.is_alive()
    during["stored_at_kill"] = (entry(spark, key) or {}).get("partitions_stored")
    victim = next(iter(held), None)
    if victim is not None:
        kill_process(spark, victim)
        seen["faults"] += 1
    job.join(120)
    during["answer"] = not job.is_alive() and sorted(r[:3] for r in result.get("rows", [])) == plain
    during["entry_after_job"] = entry(spark, key)
    during["consistent_after_job"] = wait_for(lambda: consistent(spark, key), 30)
    during["answer_next"] = answer(per_key()) == plain
    during["rematerialized"] = wait_for(lambda: (entry(spark, key) or {}).get("state") == "materialized", 30)
    during["entry_end"] = entry(spark, key)
    during["spark_cached_end"] = spark_rdd(spark, key)[1]
    seen["seconds"] = round(time.time() - started, 1)
    print(json.dumps(seen, default=str))
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
