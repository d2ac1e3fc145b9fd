"""Automatic reuse: persisted on the 2nd occurrence, served afterwards, never stale, never wrong."""
import glob
import os
import shutil

import pytest
from pyspark.sql import functions as F

import memphis
from conftest import entry_states, eventually, job_count, memphis_off, per_key, sales, uses_memphis_cache


def test_shared_aggregate_is_persisted_on_its_second_occurrence_and_served_after(fresh, tmp_path):
    spark = fresh
    path = sales(spark, str(tmp_path / "sales"))
    key = memphis.lineage_key(per_key(spark, path))
    answers = []
    for threshold in (0, 100, 200, 300):
        df = per_key(spark, path).where(F.col("total") > threshold)
        rows = sorted(df.collect())  # run first: a plan looked at before its run counts only once it ran
        answers.append((uses_memphis_cache(df), rows))
        entry = entry_states(spark)[key]
        if threshold == 0:
            assert entry["state"] == "seen" and entry["occurrences"] == 1
    assert [served for served, _ in answers] == [False, True, True, True]
    assert eventually(lambda: entry_states(spark)[key]["state"] == "materialized")
    entry = entry_states(spark)[key]
    assert entry["state"] == "materialized" and entry["hits"] == 2
    assert entry["partitions_stored"] == entry["partitions"] > 0 and entry["size_bytes"] > 0
    assert memphis.stats(spark)["bytes_held"] >= entry["size_bytes"]

    def plain_answers_and_state():  # plain Spark answers the same
        return ([sorted(per_key(spark, path).where(F.col("total") > threshold).collect())
                 for threshold in (0, 100, 200, 300)], entry_states(spark)[key]["state"])
    plain, state = memphis_off(spark, plain_answers_and_state)
    assert plain == [answer for _, answer in answers]
    assert state == "evicted", "turning memphis off releases what it holds"


def test_an_aggregate_the_query_filters_on_a_grouping_column_waits_for_a_third_occurrence_once_persists_go_unread(
        fresh, tmp_path):
    """Spark moves a filter on a grouping column below the aggregate: the query computes one group's
    rows, while filling the aggregate computes every group. With no bet judged yet its second
    occurrence persists it; once a persist went unread, the second holds it back and the third
    (it recurs) persists it."""
    spark = fresh
    path = sales(spark, str(tmp_path / "sales"))
    per_v = lambda: spark.read.parquet(path).groupBy("v").agg(F.sum("id").alias("s"))  # noqa: E731
    first_bet = [per_v().where(F.col("v") == v) for v in (1, 2)]
    first_answers = [sorted(df.collect()) for df in first_bet]
    assert [uses_memphis_cache(df) for df in first_bet] == [False, True]
    for m in range(2, 10):  # other aggregates, none recurring: the persist above goes unread, and its bet is judged
        spark.read.parquet(path).groupBy((F.col("id") % m).alias("b")).count().where(F.col("count") > 0).collect()

    key = memphis.lineage_key(per_key(spark, path))
    held_back = memphis.stats(spark)["refused_not_recurring"]
    answers, served = [], []
    for k in (1, 2, 3, 4):
        df = per_key(spark, path).where(F.col("k") == k)
        answers.append(sorted(df.collect()))
        served.append(uses_memphis_cache(df))
        entry = entry_states(spark)[key]
        if k == 2:
            assert entry["occurrences"] == 2 and entry["state"] == "seen", entry
            assert "filters reach into it: (k = 2" in entry["reason"], entry["reason"]
            assert memphis.stats(spark)["refused_not_recurring"] == held_back + 1
    assert served == [False, False, True, True]
    assert eventually(lambda: entry_states(spark)[key]["state"] == "materialized")
    assert entry_states(spark)[key]["hits"] == 1
    assert memphis_off(spark, lambda: ([sorted(per_key(spark, path).where(F.col("k") == k).collect()) for k in (1, 2, 3, 4)],
                                       [sorted(per_v().where(F.col("v") == v).collect()) for v in (1, 2)])) == (answers, first_answers)
    assert [len(a) for a in answers] == [1, 1, 1, 1]


def test_served_queries_skip_the_shared_work(fresh, tmp_path):
    spark = fresh
    path = sales(spark, str(tmp_path / "sales"))
    for i in range(2):  # first and second occurrence: computed (the second fills the cache)
        per_key(spark, path).where(F.col("n") > i).collect()
    sc = spark.sparkContext

    def stages(tag):
        return sum(len(sc.statusTracker().getJobInfo(j).stageIds) for j in sc.statusTracker().getJobIdsForGroup(tag))

    served, _ = job_count(spark, "served", lambda: per_key(spark, path).where(F.col("n") > 5).collect())
    plain, _ = memphis_off(spark, lambda: job_count(spark, "plain",
                                                    lambda: per_key(spark, path).where(F.col("n") > 5).collect()))
    assert served == plain
    assert stages("served") < stages("plain")


def copy_a_file_in(path):
    donor = sorted(glob.glob(os.path.join(path, "*.parquet")))[0]
    shutil.copy(donor, os.path.join(path, "part-copied-outside-spark.parquet"))


def rewrite_a_file_in_place(path):
    """The same name, other values, a later mtime: only the listing's size and mtime can tell."""
    import pyarrow.parquet as pq

    victim = sorted(glob.glob(os.path.join(path, "*.parquet")))[0]
    table = pq.read_table(victim)
    changed = table.set_column(table.schema.get_field_index("v"), "v",
                               [[x + 1 for x in table.column("v").to_pylist()]])
    mtime = os.stat(victim).st_mtime
    pq.write_table(changed, victim)
    os.utime(victim, (mtime + 2, mtime + 2))  # a later mtime even where the clock is coarse
    # Hadoop's local file system checks a sidecar checksum, which a writer other than Hadoop leaves stale.
    os.remove(os.path.join(path, f".{os.path.basename(victim)}.crc"))


@pytest.mark.parametrize("change", [copy_a_file_in, rewrite_a_file_in_place])
def test_a_parquet_directory_changed_outside_spark_is_never_served_stale(spark_tier, tmp_path, change):
    spark = spark_tier
    path = sales(spark, str(tmp_path / "sales"))
    for _ in range(3):
        before = sorted(per_key(spark, path).collect())
    assert memphis.stats(spark)["hits"] >= 1
    change(path)
    invalidated = memphis.stats(spark)["invalidated"]
    after = sorted(per_key(spark, path).collect())
    assert after != before
    assert memphis.stats(spark)["invalidated"] == invalidated + 1
    assert memphis_off(spark, lambda: sorted(per_key(spark, path).collect())) == after


def test_a_held_entry_is_served_inside_subqueries(spark_tier, tmp_path):
    spark = spark_tier
    spark.read.parquet(sales(spark, str(tmp_path / "sales"))).createOrReplaceTempView("sales")
    per_k = "SELECT k, sum(v) AS total FROM sales GROUP BY k"
    for threshold in (0, 1):  # persisted at its second occurrence
        spark.sql(f"SELECT * FROM ({per_k}) WHERE total > {threshold}").collect()
    key = memphis.lineage_key(spark.sql(per_k))
    assert eventually(lambda: entry_states(spark)[key]["state"] == "materialized")
    query = f"SELECT k FROM ({per_k}) WHERE total > (SELECT avg(total) FROM ({per_k}))"
    hits = memphis.stats(spark)["hits"]
    on = sorted(spark.sql(query).collect())
    assert memphis.stats(spark)["hits"] == hits + 2, "in the query and in its scalar subquery"
    assert on and on == memphis_off(spark, lambda: sorted(spark.sql(query).collect()))


def test_non_deterministic_subplans_are_never_cached(fresh):
    spark = fresh
    spark.range(1000).selectExpr("id % 10 AS k").createOrReplaceTempView("r")
    queries = [f"SELECT k, count(*) AS c, max(x) AS m FROM (SELECT k, {e} AS x FROM r) GROUP BY k"
               for e in ("rand()", "current_timestamp()", "uuid()")]
    for query in queries:
        for _ in range(3):
            df = spark.sql(query)
            df.collect()
            assert not uses_memphis_cache(df)
    assert memphis.stats(spark)["refused"] >= 9
    assert not [e for e in entry_states(spark).values() if e["state"] in ("to-persist", "materialized")]


def test_min_occurrences_and_clear(spark_tier):
    spark = spark_tier
    spark.conf.set("spark.memphis.reuse.minOccurrences", "3")
    def df():  # a new DataFrame per action: one DataFrame plans once, however often it runs
        return spark.range(5000).groupBy((F.col("id") % 7).alias("k")).count()

    key = memphis.lineage_key(df())
    for _ in range(2):
        df().collect()
    assert entry_states(spark)[key]["state"] == "seen" and entry_states(spark)[key]["occurrences"] == 2
    df().collect()
    assert entry_states(spark)[key]["state"] in ("to-persist", "materialized")
    memphis.clear(spark)
    assert spark.sql("SELECT * FROM memphis_cache()").count() == 0
    assert memphis.stats(spark)["bytes_held"] == 0, memphis.entries(spark).to_string()
    assert spark_cache_is_empty(spark), "clear leaves nothing in Spark's CacheManager"


def spark_cache_is_empty(spark):
    return spark._jsparkSession.sharedState().cacheManager().isEmpty()


def test_a_subplan_inside_a_persisted_one_is_counted_not_persisted(fresh, tmp_path):
    spark = fresh
    path = sales(spark, str(tmp_path / "sales"))

    def joined():
        keys = spark.range(50).selectExpr("id AS key", "id % 3 AS region")
        return spark.read.parquet(path).join(keys, F.col("k") == F.col("key"))

    def per_region():
        return joined().groupBy("region").agg(F.sum("v").alias("total"), F.count("*").alias("n"))

    def queries():
        return [per_region().where(F.col("n") > i) for i in range(3)]

    answers = [sorted(df.collect()) for df in queries()]
    aggregate, join = memphis.lineage_key(per_region()), memphis.lineage_key(joined())
    entries = entry_states(spark)
    assert entries[aggregate]["state"] in ("to-persist", "materialized") and entries[aggregate]["hits"] == 1
    assert entries[aggregate]["consumers"] == 3
    # The join recurred only inside the aggregate, which serves every query that needs it.
    assert entries[join]["state"] == "seen" and entries[join]["occurrences"] == 2

    memphis.clear(spark)  # what memphis persisted, and nothing more, leaves Spark's cache
    assert spark_cache_is_empty(spark)
    assert memphis_off(spark, lambda: [sorted(df.collect()) for df in queries()]) == answers


def test_with_min_occurrences_1_a_shared_subplan_is_persisted_when_it_recurs_in_another_query(fresh, tmp_path):
    spark = fresh
    spark.conf.set("spark.memphis.reuse.minOccurrences", "1")
    path = sales(spark, str(tmp_path / "sales"))
    shared = memphis.lineage_key(per_key(spark, path))
    per_key(spark, path).groupBy("n").count().collect()  # the query's root is persisted, not what it is built on
    assert entry_states(spark)[shared]["state"] == "seen"
    per_key(spark, path).where(F.col("n") > 3).collect()  # recurs in another query: now persisted too
    assert entry_states(spark)[shared]["state"] in ("to-persist", "materialized")


def hashed(spark, rows):
    """`rows` SHA-256 hashes aggregated to 500 small numbers: the same shape and size for any `rows`."""
    digest = F.crc32(F.sha2(F.col("id").cast("string"), 256)) % 1000
    return spark.range(rows).groupBy((F.col("id") % 500).alias("k")).agg(F.max(digest).alias("m"))


def expensive(spark):
    return hashed(spark, 2_000_000)


def cheap(spark):
    return hashed(spark, 5_000)


def held_keys(spark):
    return {k for k, e in entry_states(spark).items() if e["state"] == "materialized"}


# The default policy on every Spark line; the other on the default line only (integration/lines/run.sh).
@pytest.mark.parametrize("policy, kept", [("costnsize", expensive),
                                          pytest.param("lru", cheap, marks=pytest.mark.default_line_only)])
def test_the_budget_holds_and_the_policy_picks_what_goes(fresh, policy, kept):
    spark = fresh
    spark.conf.set("spark.memphis.reuse.minOccurrences", "1")
    spark.conf.set("spark.memphis.evictionPolicy", policy)
    try:
        for make in (expensive, cheap):
            make(spark).collect()
        sizes = {k: e["size_bytes"] for k, e in entry_states(spark).items() if e["state"] == "materialized"}
        assert len(sizes) == 2, entry_states(spark)
        memphis.clear(spark)
        budget = max(sizes.values()) + min(sizes.values()) // 2  # room for either, not both

        spark.conf.set("spark.memphis.storage.maxBytes", str(budget))
        answers = [sorted(make(spark).collect()) for make in (expensive, cheap)]
        assert eventually(lambda: held_keys(spark) == {memphis.lineage_key(kept(spark))}), entry_states(spark)
        assert memphis.stats(spark)["bytes_held"] <= budget
        evicted = [e for e in entry_states(spark).values() if e["state"] == "evicted"]
        assert len(evicted) == 1 and "over the budget" in evicted[0]["reason"]
        assert memphis_off(spark, lambda: [sorted(make(spark).collect()) for make in (expensive, cheap)]) == answers
    finally:
        spark.conf.unset("spark.memphis.storage.maxBytes")
        spark.conf.unset("spark.memphis.evictionPolicy")


def test_an_entry_larger_than_the_budget_is_never_persisted_again(fresh):
    spark = fresh
    spark.conf.set("spark.memphis.reuse.minOccurrences", "1")
    spark.conf.set("spark.memphis.storage.maxBytes", "1k")
    try:
        answer = sorted(expensive(spark).collect())
        key = memphis.lineage_key(expensive(spark))
        assert eventually(lambda: entry_states(spark)[key]["state"] == "evicted")
        entry = entry_states(spark)[key]
        assert entry["state"] == "evicted" and "exceed the whole budget" in entry["reason"]
        refused = memphis.stats(spark)["refused"]
        assert sorted(expensive(spark).collect()) == answer
        assert entry_states(spark)[memphis.lineage_key(expensive(spark))]["state"] == "evicted"
        assert memphis.stats(spark)["refused"] == refused + 1 and memphis.stats(spark)["bytes_held"] == 0
    finally:
        spark.conf.unset("spark.memphis.storage.maxBytes")


@pytest.mark.default_line_only
def test_concurrent_queries_answer_right_and_persist_each_entry_once(fresh, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    spark = fresh
    # Persisted entries under concurrency: no rows kept on the driver answer the repeats instead.
    spark.conf.set("spark.memphis.collected.maxBytes", "0")
    path = sales(spark, str(tmp_path / "sales"))
    thresholds = [0, 50, 100, 150, 200, 250, 300, 350] * 3

    def query(threshold):
        return sorted(per_key(spark, path).where(F.col("total") > threshold).collect())

    expected = memphis_off(spark, lambda: {t: query(t) for t in set(thresholds)})
    before = memphis.stats(spark)
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(query, thresholds))
    assert answers == [expected[t] for t in thresholds]
    after = memphis.stats(spark)
    held = [e for e in entry_states(spark).values() if e["state"] in ("to-persist", "materialized")]
    assert held and after["persisted"] - before["persisted"] == len(held)  # each persisted once
    assert after["hits"] > before["hits"]


def test_an_evicted_entry_is_persisted_again_when_it_returns(spark_tier):
    spark = spark_tier

    def df():
        return spark.range(20_000).groupBy((F.col("id") % 11).alias("k")).count()

    key = memphis.lineage_key(df())
    answer = sorted(df().collect())
    df().collect()  # second occurrence: persisted
    assert eventually(lambda: entry_states(spark)[key]["state"] == "materialized")
    spark.catalog.clearCache()  # unpersisted outside memphis
    assert eventually(lambda: entry_states(spark)[key]["state"] == "evicted")
    assert sorted(df().collect()) == answer  # its return persists it again at once
    entry = entry_states(spark)[key]
    assert entry["state"] in ("to-persist", "materialized") and entry["misses"] == 1


@pytest.mark.default_line_only
def test_an_entry_read_by_a_running_query_is_not_evicted_under_it(fresh):
    spark = fresh
    spark.conf.set("spark.memphis.reuse.minOccurrences", "1")
    base = hashed(spark, 100_000)
    answer = sorted(base.collect())
    key = memphis.lineage_key(base)
    assert eventually(lambda: entry_states(spark)[key]["state"] == "materialized")
    # Seconds of work on top of the entry: 20 ms for each of its 500 rows.
    reader = hashed(spark, 100_000).selectExpr("k", "m", "reflect('java.lang.Thread', 'sleep', 20L) AS slept")
    # Planned before its action runs, so only the job that reads the entry can protect it.
    reader._jdf.queryExecution().executedPlan()
    try:
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(max_workers=1) as pool:
            running = pool.submit(reader.collect)
            assert eventually(lambda: entry_states(spark)[key]["readers"] == 1), entry_states(spark)[key]
            spark.conf.set("spark.memphis.storage.maxBytes", "1")
            cheap(spark).collect()  # materializes, so memphis enforces the budget, which it is over
            assert eventually(lambda: memphis.stats(spark)["evicted"] >= 1)
            assert not running.done() and entry_states(spark)[key]["state"] == "materialized"
            assert sorted((r.k, r.m) for r in running.result()) == answer
        assert eventually(lambda: entry_states(spark)[key]["state"] == "evicted"), entry_states(spark)[key]
    finally:
        spark.conf.unset("spark.memphis.storage.maxBytes")
