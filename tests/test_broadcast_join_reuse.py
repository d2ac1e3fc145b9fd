"""A broadcast join's broadcast, built by one query, is read by later queries instead of built again."""
import glob
import os
import shutil

import pytest
from pyspark.sql import functions as F

import memphis
from conftest import in_job_group, job_count, memphis_off
from harness import jobs_in_group


def tables(spark, root, partitioned=False):
    """A fact table over the 200 keys `d` of a dimension; partitioned by `d`, over the first 40 of them (a
    folder per key: 200 took most of the pruning test's time to write and list)."""
    fact, dim = os.path.join(root, "fact"), os.path.join(root, "dim")
    rows = spark.range(40_000).selectExpr("id", f"id % {40 if partitioned else 200} AS d", "id % 7 AS v")
    writer = rows.repartition(2).write.mode("overwrite")
    (writer.partitionBy("d") if partitioned else writer).parquet(fact)
    (spark.range(200).selectExpr("id AS d", "id % 10 AS g", "concat('name', id) AS name")
     .repartition(2).write.mode("overwrite").parquet(dim))
    return fact, dim


def other_dimensions(spark, root, count, name):
    """Dimensions of the same shape as `dim`, other rows: broadcasts of about its size."""
    paths = [os.path.join(root, f"{name}{n}") for n in range(count)]
    for n, path in enumerate(paths):
        (spark.range(200).selectExpr(f"id + {n + 1} AS d", "id % 10 AS g", f"concat('{name}', id) AS name")
         .repartition(2).write.parquet(path))
    return paths


def query(spark, fact, dim, i):
    """The same broadcast dimension under a different fact filter and aggregate each time (so that no
    cached subplan serves the join: only its broadcast recurs)."""
    facts = spark.read.parquet(fact).where(F.col("v") != i % 7)
    dims = spark.read.parquet(dim).where("g < 8")
    joined = facts.join(F.broadcast(dims), "d")
    agg = F.sum("v") if i % 2 else F.max("id")
    return joined.groupBy("g").agg(agg.alias("x"))


def counters(spark):
    s = memphis.stats(spark)
    return s["broadcasts_registered"], s["broadcasts_reused"], s["broadcasts_released"]


def run_in_group(spark, group, action):
    """``action()`` in a job group: (its result, its Spark jobs, its broadcast-building jobs)."""
    result, _ = in_job_group(spark, group, action)
    return (result, *jobs_in_group(spark, group))


def test_the_same_broadcast_is_built_twice_then_read_across_queries(adaptive, tmp_path):
    spark = adaptive
    fact, dim = tables(spark, str(tmp_path))
    n = 5
    registered, reused, _ = counters(spark)
    runs = [run_in_group(spark, f"memphis-{i}", lambda i=i: sorted(query(spark, fact, dim, i).collect()))
            for i in range(n)]
    # Seen at its first build, kept at its second (it recurs), read by every later query.
    assert counters(spark)[:2] == (registered + 1, reused + n - 2)
    plan = query(spark, fact, dim, n)._jdf.queryExecution().executedPlan().toString()
    assert "ReusedExchange" in plan and "BroadcastExchange" in plan, plan
    plain_runs = memphis_off(spark, lambda: [
        run_in_group(spark, f"plain-{i}", lambda i=i: sorted(query(spark, fact, dim, i).collect())) for i in range(n)])
    assert [r[0] for r in runs] == [r[0] for r in plain_runs]
    # Plain Spark builds the broadcast in every query; memphis in the first two only, and runs no other job less.
    broadcast_jobs, plain_broadcast_jobs = [r[2] for r in runs], [r[2] for r in plain_runs]
    assert plain_broadcast_jobs == [plain_broadcast_jobs[0]] * n and plain_broadcast_jobs[0] > 0
    assert broadcast_jobs == [plain_broadcast_jobs[0]] * 2 + [0] * (n - 2), (runs, plain_runs)
    assert [r[1] for r in runs] == [p[1] - (p[2] if i > 1 else 0) for i, p in enumerate(plain_runs)]


def test_a_changed_build_side_is_broadcast_again(adaptive, tmp_path):
    spark = adaptive
    # The session's recent broadcasts decide whether a new one is kept at its first build: start
    # from none, so that the only history is this test's own (one broadcast, built twice: it recurred).
    memphis.clear(spark)
    fact, dim = tables(spark, str(tmp_path))
    for i in range(2):
        query(spark, fact, dim, i).collect()
    registered, reused, released = counters(spark)
    part = sorted(glob.glob(os.path.join(dim, "part-*.parquet")))[0]
    shutil.copy(part, os.path.join(dim, "part-99999-copy.parquet"))  # its dimension rows twice: sums double
    # Distinct queries: a repeated one would be served by memphis' cached subplans, not by the broadcast.
    changed = [sorted(query(spark, fact, dim, 3).collect())]
    assert counters(spark) == (registered + 1, reused, released + 1), \
        "the stale broadcast goes; the new one is kept at its first build, as the session's broadcasts recur"
    changed.append(sorted(query(spark, fact, dim, 4).collect()))
    assert counters(spark)[1] == reused + 1, "the new broadcast is read"
    assert changed == memphis_off(spark, lambda: [sorted(query(spark, fact, dim, i).collect()) for i in (3, 4)])


def test_dynamic_partition_pruning_keeps_working(adaptive, tmp_path):
    spark = adaptive
    fact, dim = tables(spark, str(tmp_path), partitioned=True)

    def pruned(i):
        facts = spark.read.parquet(fact).where(F.col("v") != i)
        dims = spark.read.parquet(dim).where("g = 3")  # 4 of 40 partitions
        return facts.join(F.broadcast(dims), "d").groupBy("name").agg(F.sum("v").alias("s"))

    answers, broadcast_jobs = [], []
    for i in range(3):
        df = pruned(i)
        rows, _, built = run_in_group(spark, f"pruned-{i}", lambda: sorted(df.collect()))
        answers.append(rows)
        broadcast_jobs.append(built)
        plan = df._jdf.queryExecution().executedPlan().toString()
        assert "dynamicpruningexpression" in plan.lower(), plan
    # The pruning filter reads the join's broadcast (Spark reuses it within the query), so the third
    # query builds none: it reads the second's, kept as it was built again.
    assert broadcast_jobs[0] > 0 and broadcast_jobs[1:] == [broadcast_jobs[0], 0], broadcast_jobs
    assert answers == memphis_off(spark, lambda: [sorted(pruned(i).collect()) for i in range(3)])
    assert len(answers[0]) == 4


def test_broadcasts_are_bounded_by_their_budget(fresh, tmp_path):
    spark = fresh
    fact, dim = tables(spark, str(tmp_path))
    others = other_dimensions(spark, str(tmp_path), 2, "other")
    try:
        spark.conf.set("spark.memphis.broadcast.joinMaxBytes", "1k")  # smaller than any broadcast
        registered = counters(spark)[0]
        for i in range(2):
            query(spark, fact, dim, i).collect()
        assert counters(spark)[0] == registered and memphis.stats(spark)["bytes_held_join_broadcasts"] == 0

        spark.conf.unset("spark.memphis.broadcast.joinMaxBytes")
        query(spark, fact, dim, 2).collect()
        one = memphis.stats(spark)["bytes_held_join_broadcasts"]
        assert one > 0
        budget = one * 5 // 2  # room for two broadcasts: each takes at most half
        spark.conf.set("spark.memphis.broadcast.joinMaxBytes", str(budget))
        released = counters(spark)[2]
        for i, other in enumerate(others):
            query(spark, fact, other, 3 + i).collect()  # kept at once: the session's broadcasts recur
            stats = memphis.stats(spark)
            assert 0 < stats["bytes_held_join_broadcasts"] <= budget == stats["join_broadcast_budget_bytes"]
        assert counters(spark)[2] == released + 1, "the broadcast of least value per byte went"

        memphis.clear(spark)
        assert memphis.stats(spark)["bytes_held_join_broadcasts"] == 0
    finally:
        spark.conf.unset("spark.memphis.broadcast.joinMaxBytes")


def test_turning_memphis_off_releases_the_broadcasts(fresh, tmp_path):
    spark = fresh
    fact, dim = tables(spark, str(tmp_path))
    for i in range(2):
        query(spark, fact, dim, i).collect()
    assert memphis.stats(spark)["bytes_held_join_broadcasts"] > 0
    memphis_off(spark, lambda: query(spark, fact, dim, 2).collect())
    assert memphis.stats(spark)["bytes_held_join_broadcasts"] == 0


@pytest.mark.default_line_only
def test_a_kept_result_takes_the_room_of_a_broadcast_worth_less_per_byte(fresh, tmp_path):
    """Kept results and join broadcasts share the driver heap's budget: a query's rows (KiB standing for its
    time) displace a broadcast (its hash relation, far larger) when both do not fit, not the other way round."""
    spark = fresh
    fact, dim = tables(spark, str(tmp_path))
    for i in range(2):
        query(spark, fact, dim, i).collect()  # the broadcast is kept at its second build
    stats = memphis.stats(spark)
    broadcast = stats["bytes_held_join_broadcasts"]
    assert broadcast > 0

    def totals():  # asked afresh each time, as a notebook cell run again builds its DataFrame again
        return spark.read.parquet(fact).groupBy("d").agg(F.sum("v").alias("s"), F.max("id").alias("m"))
    # Room for what memphis holds there now (the broadcast, its own structures), not for the result as well.
    room = memphis.stats(spark)["bytes_held_driver_heap"] + 4096
    spark.conf.set("spark.memphis.driver.heapFraction", repr(room / stats["driver_heap_max_bytes"]))
    try:
        released, kept = counters(spark)[2], memphis.stats(spark)["results_kept"]
        rows = sorted(totals().collect())
        after = memphis.stats(spark)
        assert after["results_kept"] == kept + 1 and after["bytes_held_results"] > stats["bytes_held_results"] + 4096
        assert counters(spark)[2] == released + 1 and after["bytes_held_join_broadcasts"] == 0, after
        assert after["bytes_held_driver_heap"] <= after["driver_heap_budget_bytes"]
        asked = totals()  # reading the files' schema runs a job of its own
        again, jobs = job_count(spark, "asked-again", lambda: sorted(asked.collect()))
        assert again == rows == memphis_off(spark, lambda: sorted(totals().collect()))
        assert jobs == 0, "served from the kept rows"
    finally:
        spark.conf.unset("spark.memphis.driver.heapFraction")


def test_keeping_broadcasts_stops_while_those_kept_go_unread_and_resumes_when_they_recur(fresh, tmp_path):
    """A notebook whose queries moved on (other years) builds a broadcast a second time and never a third:
    kept, it fills the driver heap and is never read. Once the broadcasts kept went unread, one built again
    is held back; once those held back are built again, keeping pays again."""
    spark = fresh
    fact, _ = tables(spark, str(tmp_path))
    dims = other_dimensions(spark, str(tmp_path), 5, "dim")

    def ask(path, i):
        """A query no other answers (its own fact filter, `i`) that builds `path`'s broadcast, or reads it."""
        facts = spark.read.parquet(fact).where(F.col("id") != i)
        return sorted(facts.join(F.broadcast(spark.read.parquet(path)), "d").groupBy("g").agg(F.sum("v")).collect())

    def not_kept():
        return memphis.stats(spark)["refused_not_recurring"]

    # Four dimensions built once (none recurs yet: seen), then each a second time (kept), never read again:
    # four bets are enough to judge. The driver heap's budget leaves room for a fifth besides the queries'
    # kept rows, so that no broadcast is let go for them (that order is another test's).
    spark.conf.set("spark.memphis.driver.heapFraction", "0.4")
    try:
        registered = counters(spark)[0]
        for i, path in enumerate(dims[:4] + dims[:4]):
            ask(path, i)
        assert counters(spark)[0] == registered + 4
        held, refused = memphis.stats(spark)["bytes_held_join_broadcasts"], not_kept()
        for _ in range(8):  # the bets settle: none of the four was read
            spark.range(10).count()

        filters = [8, 9]
        answers = [ask(dims[4], i) for i in filters]
        assert counters(spark)[0] == registered + 4 and not_kept() == refused + 2, "held back, built again"
        assert memphis.stats(spark)["bytes_held_join_broadcasts"] == held

        # Each build of the held-back broadcast pays the bet before it; once half of the bets paid, it is kept and read.
        for i in range(10, 18):
            filters.append(i)
            answers.append(ask(dims[4], i))
            if counters(spark)[0] > registered + 4:
                break
        assert counters(spark)[0] == registered + 5
        reused = counters(spark)[1]
        filters.append(filters[-1] + 1)
        answers.append(ask(dims[4], filters[-1]))
        assert counters(spark)[1] == reused + 1
        assert answers == memphis_off(spark, lambda: [ask(dims[4], i) for i in filters])
    finally:
        spark.conf.unset("spark.memphis.driver.heapFraction")
