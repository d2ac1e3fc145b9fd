"""A bounded soak of the JVM tier: threads x overlapping DataFrame queries sharing aggregates, on a
small storage budget. Prints what it saw as JSON (last line); memphis' decisions go to stderr at
debug level, for the caller to count persists per key.

Run by integration/test_jvm_soak.py in its own interpreter (a fresh driver JVM, so its heap is ours).
Usage: jvm_soak.py <scratch dir> <seconds> <threads>
"""
import json
import os
import random
import sys
import threading
import time

from pyspark.sql import functions as F

import memphis

CONFS = {
    "spark.ui.enabled": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.sql.shuffle.partitions": "4",
    # Spark's own driver state (finished jobs, stages, SQL executions) is bounded low, so that the
    # heap after warm-up shows what memphis keeps.
    "spark.sql.ui.retainedExecutions": "20",
    "spark.ui.retainedJobs": "20",
    "spark.ui.retainedStages": "20",
    # Spark holds a broadcast's value on the driver by a soft reference, which the JVM keeps while
    # memory is ample (1 s per free MiB since its last use): cleared at each collection here, the heap
    # after one shows what is strongly held.
    "spark.driver.extraJavaOptions": "-XX:SoftRefLRUPolicyMSPerMB=0",
    # Repeated collects of one aggregate are what it soaks: persisted entries, not rows kept on the
    # driver (which would answer them without persisting; tests/test_collected_results.py has those).
    "spark.memphis.collected.maxBytes": "0",
}
MODULI = (7, 11, 13, 17, 19, 23)
THRESHOLDS = (0, 2000, 6000)
SOAK_STARTS = "memphis-soak: start"


def main(scratch, seconds, threads):
    spark = memphis.session("local[2]", app_name="memphis-jvm-soak", **CONFS)
    jvm = spark.sparkContext._jvm
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel("io.memphis", jvm.org.apache.logging.log4j.Level.DEBUG)
    path = os.path.join(scratch, "sales")
    spark.range(20_000).selectExpr("id", "id % 97 AS k", "(id * 7) % 13 AS v").repartition(2).write.parquet(path)

    def agg(m):
        return (spark.read.parquet(path).groupBy((F.col("k") % m).alias("g"))
                .agg(F.sum("v").alias("total"), F.count("*").alias("n")))

    # Overlapping queries: each reads one or two of the shared aggregates.
    queries = [("filter", m, t) for m in MODULI for t in THRESHOLDS]
    queries += [("join", a, b) for a, b in zip(MODULI, MODULI[1:])]

    def run(query):
        kind, a, b = query
        df = agg(a).where(F.col("total") > b) if kind == "filter" else agg(a).join(agg(b), "g")
        return sorted(map(tuple, df.collect()))

    spark.conf.set("spark.memphis.enabled", "false")
    expected = {q: run(q) for q in queries}
    spark.conf.set("spark.memphis.enabled", "true")

    # A budget of about two and a half aggregates: six compete for it, so evictions go on throughout.
    agg(MODULI[0]).collect(), agg(MODULI[0]).collect()
    key = memphis.lineage_key(agg(MODULI[0]))
    deadline = time.time() + 60
    while entry_rows(spark).get(key, {}).get("state") != "materialized":
        assert time.time() < deadline, entry_rows(spark).get(key)
        time.sleep(0.1)
    spark.conf.set("spark.memphis.storage.maxBytes", str(int(2.5 * entry_rows(spark)[key]["size_bytes"])))
    budget = memphis.stats(spark)["storage_budget_bytes"]
    memphis.clear(spark)

    counts = {"queries": 0, "wrong": 0, "errors": []}
    # The heap is sampled while no query runs (workers wait at the gate): what running queries hold
    # (their broadcasts, hash maps, pages of 16-32 MiB each) is not what memphis keeps.
    gate = {"paused": False, "running": 0}
    lock = threading.Condition()
    end = time.time() + seconds

    def worker(seed):
        rng = random.Random(seed)
        while time.time() < end:
            query = rng.choice(queries)
            with lock:
                lock.wait_for(lambda: not gate["paused"])
                gate["running"] += 1
            try:
                right = run(query) == expected[query]
            except Exception as e:  # noqa: BLE001 - reported, and fails the test
                with lock:
                    counts["errors"].append(repr(e)[:300])
                continue
            finally:
                with lock:
                    gate["running"] -= 1
                    lock.notify_all()
            with lock:
                counts["queries"] += 1
                counts["wrong"] += not right

    samples = {"bytes": [], "over_budget_idle": [], "heap": []}
    pools = [p for p in jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans()
             if p.getType().toString() == "Heap memory" and p.getCollectionUsage() is not None]

    def heap_used():
        """The heap's live bytes between queries: what its pools held right after a full collection.
        Spark's ContextCleaner drops the broadcasts and shuffles of finished queries only after a
        collection found them unreachable, so a second collection follows its pass."""
        with lock:
            gate["paused"] = True
            lock.wait_for(lambda: gate["running"] == 0)
        try:
            jvm.java.lang.System.gc()
            time.sleep(0.5)
            jvm.java.lang.System.gc()
            return sum(p.getCollectionUsage().getUsed() for p in pools)
        finally:
            with lock:
                gate["paused"] = False
                lock.notify_all()

    def sampler():
        last_heap = 0.0
        while time.time() < end:
            rows = entry_rows(spark).values()
            held = [r for r in rows if r["state"] in ("to-persist", "materialized")]
            total = sum(r["size_bytes"] for r in held)
            samples["bytes"].append(total)
            # Over the budget is allowed only while eviction waits: an entry still filled or being read.
            if total > budget and not any(r["state"] == "to-persist" or r["readers"] > 0 for r in held):
                samples["over_budget_idle"].append(total)
            if time.time() - last_heap >= 2:
                last_heap = time.time()
                samples["heap"].append((round(seconds - (end - last_heap), 1), heap_used()))
            time.sleep(0.2)

    before = memphis.stats(spark)
    print(SOAK_STARTS, file=sys.stderr, flush=True)  # the decisions logged from here are the soak's
    started = time.time()
    pool = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    pool.append(threading.Thread(target=sampler, daemon=True))
    for t in pool:
        t.start()
    for t in pool:
        t.join(max(1.0, end - time.time()) + 60)
    hung = sum(t.is_alive() for t in pool)
    after = memphis.stats(spark)
    time.sleep(1)  # the listener bus delivers the last block updates and execution ends
    quiet = entry_rows(spark).values()
    print(json.dumps({
        "seconds": round(time.time() - started, 1), "threads": threads, "hung": hung,
        "queries": counts["queries"], "wrong": counts["wrong"], "errors": counts["errors"][:5],
        "budget": budget, "peak_bytes": max(samples["bytes"], default=0), "samples": len(samples["bytes"]),
        "over_budget_idle": samples["over_budget_idle"][:5],
        "bytes_held_quiet": sum(r["size_bytes"] for r in quiet if r["state"] in ("to-persist", "materialized")),
        "heap": samples["heap"],
        "counters": {k: after[k] - before[k] for k in ("hits", "misses", "persisted", "materialized", "evicted",
                                                       "invalidated")},
        "keys": {memphis.lineage_key(agg(m)): m for m in MODULI},
    }))
    spark.stop()


def entry_rows(spark):
    return {r["key"]: r.asDict() for r in spark.sql("SELECT * FROM memphis_cache()").collect()}


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), int(sys.argv[3]))
