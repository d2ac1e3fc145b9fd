"""A Spark Connect client of a server started by `memphis connect-server`: one scenario per run.

    python connect_client.py sc://host:port SCENARIO JSON-ARGUMENTS

Prints what it saw as one JSON line. A separate process, as a client is: creating a Connect session
switches the whole Python process to Connect mode (pyspark sets SPARK_CONNECT_MODE_ENABLED).
"""
import json
import os
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import memphis


def connect(url: str, user: str):
    return SparkSession.builder.remote(f"{url}/;user_id={user}").create()  # a new session each, not the active one


def rows(df) -> list:
    return sorted([list(r) for r in df.collect()])


def cache_rows(spark, owner=None) -> list:
    found = [r.asDict() for r in spark.sql("SELECT key, state, occurrences, hits, owner FROM memphis_cache()").collect()]
    return [r for r in found if owner is None or r["owner"] == owner]


def stats(spark) -> dict:
    return {k: v for k, v in memphis.stats(spark).items() if not k.startswith("local_")}


def aggregate(spark, path):
    return spark.read.parquet(path).groupBy((F.col("id") % 7).alias("b")).agg(F.sum("v").alias("s"))


def write_part(path: str, start: int, n: int, name: str):
    os.makedirs(path, exist_ok=True)
    ids = list(range(start, start + n))
    pq.write_table(pa.table({"id": ids, "v": [i * 0.5 for i in ids]}), os.path.join(path, name))


def reuse(url, path):
    """An aggregate over Parquet three times, then a file added to its folder, answers against memphis off."""
    on, off = connect(url, "alice"), connect(url, "reference")
    off.conf.set("spark.memphis.enabled", "false")
    write_part(path, 0, 20_000, "part-0.parquet")
    answers = [rows(aggregate(on, path)) for _ in range(3)]
    before = stats(on)
    entries = cache_rows(on, "alice")
    expected = rows(aggregate(off, path))
    write_part(path, 20_000, 5_000, "part-1.parquet")  # another writer adds a file
    changed = rows(aggregate(on, path))
    return {"answers": answers, "expected": expected, "entries": entries, "before": before, "after": stats(on),
            "changed": changed, "changed_expected": rows(aggregate(off, path))}


def functions(url, path):
    """Each public function of memphis on a Connect session."""
    spark = connect(url, "dora")
    write_part(path, 0, 5_000, "part-0.parquet")
    df = aggregate(spark, path)
    renamed = spark.read.parquet(path).groupBy((F.col("id") % 7).alias("bucket")).agg(F.sum("v").alias("total"))
    seen = {"key": memphis.lineage_key(df), "renamed_key": memphis.lineage_key(renamed),
            "uuid_key": memphis.lineage_key(spark.range(3).selectExpr("uuid() AS u")),
            "explain_key": memphis.explain_key(df),
            "explain_uuid": memphis.explain_key(spark.range(3).selectExpr("uuid() AS u"))}

    # Connect tags each DataFrame's plan with a new id, and resolves a column taken from a DataFrame
    # (left["id"]) by it: the same query built twice must key alike.
    def self_join():
        left, right = spark.read.parquet(path), spark.read.parquet(path).withColumnRenamed("v", "w")
        return left.join(right, left["id"] == right["id"]).select(left["id"], right["w"]).groupBy("id").count()
    seen.update(rebuilt_key=memphis.lineage_key(aggregate(spark, path)),
                join_keys=[memphis.lineage_key(self_join()) for _ in range(2)])
    before = memphis.stats(spark)
    table = memphis.collect(df)
    again = memphis.collect(df, as_="pandas")
    matrix = memphis.collect(df, as_="numpy")
    prefetched = memphis.collect(df.filter("b > 2"), prefetch=True).result()
    after = memphis.stats(spark)
    seen.update(collect_rows=sorted(map(list, zip(*table.to_pydict().values()))), collect_shape=list(matrix.shape),
                pandas_rows=len(again), prefetched_rows=prefetched.num_rows,
                local_hits=after["local_hits"] - before["local_hits"], expected=rows(df))

    @memphis.reuse
    def total(frame):
        return sum(r[1] for r in frame.collect())
    total(df), total(df)
    seen["reuse_hits"] = memphis.stats(spark)["local_hits"] - after["local_hits"]

    shared = spark.read.parquet(path).groupBy("id").agg(F.sum("v").alias("s"))
    before = memphis.stats(spark)
    small, big = memphis.run_all([shared.filter("s < 100"), shared.filter("s >= 100")])
    seen.update(run_all=[len(small), len(big)], run_all_persisted=memphis.stats(spark)["persisted"] - before["persisted"],
                run_all_expected=[shared.filter("s < 100").count(), shared.filter("s >= 100").count()])
    seen["entries_tiers"] = sorted(set(memphis.entries(spark)["tier"]))
    memphis.clear(spark)
    seen["after_clear"] = {"held": memphis.stats(spark)["bytes_held"], "entries": cache_rows(spark, "dora")}
    for name, call in [("broadcast", lambda: memphis.broadcast(spark, [1, 2, 3])),
                       ("configure_spark", lambda: memphis.configure_spark(SparkSession.builder.remote(url)))]:
        try:
            call()
            seen[name] = "no error"
        except Exception as e:  # what a user sees
            seen[name] = f"{type(e).__name__}: {e}"
    return seen


def users(url, path):
    """Two users of one server run the same query: neither reads the other's entry."""
    alice, bob = connect(url, "alice2"), connect(url, "bob")
    write_part(path, 0, 20_000, "part-0.parquet")
    first = [rows(aggregate(alice, path)) for _ in range(3)]
    before = stats(bob)
    second = [rows(aggregate(bob, path)) for _ in range(3)]
    after = stats(bob)
    # Another session of alice's: her entries are hers in every session of hers.
    alice_again = connect(url, "alice2")
    first.append(rows(aggregate(alice_again, path)))
    return {"alice": first, "bob": second, "before": before, "after": after, "bob_sees": cache_rows(bob),
            "entries": cache_rows(alice_again, "alice2") + cache_rows(bob, "bob")}


def anonymous(url, path):
    """Sessions of no user id (the process has neither $SPARK_USER nor $USER) and of a named user run one aggregate."""
    first, second, third = (SparkSession.builder.remote(url).create() for _ in range(3))
    named, off = connect(url, "frank"), connect(url, "reference")
    off.conf.set("spark.memphis.enabled", "false")
    write_part(path, 0, 60_000, "part-0.parquet")
    before = stats(named)
    answers = {name: [rows(aggregate(spark, path)) for _ in range(3)]
               for name, spark in [("first", first), ("second", second), ("named", named)]}
    deadline = time.time() + 120
    while stats(named)["durable_writes_pending"] and time.time() < deadline:
        time.sleep(0.2)
    answers["third"] = [rows(aggregate(third, path))]  # after the writes: nothing durable to read either
    listed = "SELECT tier, key, state, owner, reason FROM memphis_cache()"
    sees = {name: [r.asDict() for r in spark.sql(listed).collect()]
            for name, spark in [("first", first), ("second", second), ("third", third), ("named", named)]}
    after = stats(named)
    seen = {"user_ids": [s.client._user_id for s in (first, second, third)], "answers": answers,
            "expected": rows(aggregate(off, path)), "sees": sees, "moved": {k: after[k] - before[k] for k in after}}
    evicted = after["evicted"]
    first.stop()
    deadline = time.time() + 30
    while time.time() < deadline and stats(named)["evicted"] == evicted:
        time.sleep(0.5)
    seen["released_on_close"] = stats(named)["evicted"] > evicted
    return seen


def explain(url, path):
    """A query explained and analyzed, then run: one occurrence."""
    spark = connect(url, "erin")
    write_part(path, 0, 5_000, "part-0.parquet")
    df = aggregate(spark, path)
    key = memphis.lineage_key(df)
    df.explain()
    _ = df.schema, df.columns
    explained = [r for r in cache_rows(spark, "erin") if r["key"] == key]
    df.collect()
    ran = [r for r in cache_rows(spark, "erin") if r["key"] == key]
    return {"explained": explained, "ran": ran}


def lifecycle(url, path):
    """A user's cache() and persist() keep working with memphis on; closing their last session lets go of their entries."""
    spark, other, observer = connect(url, "carol"), connect(url, "carol"), connect(url, "observer")
    held = lambda: [r for r in cache_rows(other, "carol") if r["state"] == "materialized"]
    write_part(path, 0, 20_000, "part-0.parquet")
    [rows(aggregate(spark, path)) for _ in range(3)]
    cached = spark.read.parquet(path).groupBy((F.col("id") % 5).alias("b")).agg(F.max("v").alias("m")).cache()
    persisted = spark.read.parquet(path).filter("id % 2 = 0").persist()
    seen = {"cached": rows(cached), "cached_again": rows(cached), "persisted_count": persisted.count(),
            "cached_level": str(cached.storageLevel), "persisted_level": str(persisted.storageLevel),
            "cached_plan": cached._explain_string(), "persisted_plan": persisted.filter("id > 10")._explain_string(),
            "held_before": held(), "observer_sees": cache_rows(observer)}
    spark.stop()  # not carol's last session: what her entries hold stays
    time.sleep(3)  # the close reaches the server's listeners shortly after
    seen["held_one_closed"] = held()
    evicted = stats(observer)["evicted"]
    other.stop()
    deadline = time.time() + 30
    while time.time() < deadline and stats(observer)["evicted"] == evicted:
        time.sleep(0.5)
    # Read as carol again only now: a session of hers open before the close would have kept them.
    seen["held_after"] = [r for r in cache_rows(connect(url, "carol"), "carol") if r["state"] in ("materialized", "to-persist")]
    return seen


if __name__ == "__main__":
    url, scenario, arguments = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    print(json.dumps(globals()[scenario](url, **arguments), default=str))
