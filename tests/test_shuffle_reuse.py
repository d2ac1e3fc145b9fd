"""The first occurrence of an aggregate keeps its shuffle; the second occurrence persists from it."""
import glob
import os
import shutil

from pyspark.sql import functions as F

import memphis
from conftest import entry_states, in_job_group, memphis_off, per_key, sales


def tasks_run(spark, tag, action):
    """Runs ``action()`` in a job group; returns its result and how many tasks its stages ran (none in skipped ones)."""
    result, jobs = in_job_group(spark, tag, action)
    tracker = spark.sparkContext.statusTracker()
    stages = [tracker.getStageInfo(s) for j in jobs for s in tracker.getJobInfo(j).stageIds]
    return result, sum(s.numCompletedTasks for s in stages if s)


def counters(spark):
    stats = memphis.stats(spark)
    return stats["shuffles_retained"], stats["shuffles_reused"]


def test_second_occurrence_persists_from_the_first_occurrences_shuffle(adaptive, tmp_path):
    spark = adaptive
    path = sales(spark, str(tmp_path / "sales"))
    query = lambda threshold: per_key(spark, path).where(F.col("total") > threshold)  # noqa: E731
    retained, reused = counters(spark)
    first = sorted(query(0).collect())
    assert counters(spark) == (retained + 1, reused)
    key = memphis.lineage_key(per_key(spark, path))
    assert entry_states(spark)[key]["retained_shuffles"] == 1

    second_df = query(100)
    second, tasks = tasks_run(spark, "second", lambda: sorted(second_df.collect()))
    assert counters(spark) == (retained + 1, reused + 1)
    assert entry_states(spark)[key]["retained_shuffles"] == 0, "the cached relation takes over"
    assert "ReusedExchange" in second_df._jdf.queryExecution().executedPlan().toString()
    plain, plain_tasks, first_plain = memphis_off(spark, lambda: (
        *tasks_run(spark, "plain", lambda: sorted(query(100).collect())), sorted(query(0).collect())))
    assert first == first_plain
    assert second == plain
    # Plain Spark scans and shuffles again; the second occurrence only combines the kept shuffle.
    assert tasks < plain_tasks, (tasks, plain_tasks)


def test_an_aggregate_over_an_aggregate_persists_from_its_own_kept_shuffle(adaptive, tmp_path):
    """A notebook's features: an aggregate of a join with another aggregate, looked at from two sides.
    Only the outer one keeps its shuffle at its first occurrence: a mark on the inner one would change
    the outer one's input (no filter pushed into the inner one, no column pruned), which planned alone at
    its second occurrence would then not match its kept shuffle."""
    spark = adaptive
    path = sales(spark, str(tmp_path / "sales"))
    keys = spark.range(50).selectExpr("id AS k", "id % 3 AS group")
    features = lambda: per_key(spark, path).join(keys, "k").groupBy("group").agg(  # noqa: E731
        F.sum("total").alias("total"), F.sum("n").alias("n"))
    retained, reused = counters(spark)
    check = features().agg(F.count("*"), F.sum("n")).collect()  # the query's answer and the outer one keep theirs
    assert counters(spark) == (retained + 2, reused)
    summary = sorted(features().where(F.col("total") > 0).collect())  # the outer one's second occurrence
    assert counters(spark) == (retained + 2, reused + 1)
    assert memphis_off(spark, lambda: (features().agg(F.count("*"), F.sum("n")).collect(),
                                       sorted(features().where(F.col("total") > 0).collect()))) == (check, summary)


def test_a_changed_source_is_not_read_from_a_kept_shuffle(spark_tier, tmp_path):
    spark = spark_tier
    path = sales(spark, str(tmp_path / "sales"))
    per_key(spark, path).collect()  # first occurrence: its shuffle is kept
    part = sorted(glob.glob(os.path.join(path, "part-*.parquet")))[0]
    shutil.copy(part, os.path.join(path, "part-99999-copy.parquet"))  # the same rows once more
    spark.catalog.refreshByPath(path)
    reused = counters(spark)[1]
    changed = [sorted(per_key(spark, path).collect()) for _ in range(2)]  # a new key: first, then second occurrence
    assert counters(spark)[1] == reused + 1, "the second occurrence persists from the first over the new files"
    assert changed == [memphis_off(spark, lambda: sorted(per_key(spark, path).collect()))] * 2


def test_retained_shuffles_are_bounded_and_can_be_turned_off(fresh, tmp_path):
    spark = fresh
    path = sales(spark, str(tmp_path / "sales"))
    by = lambda column: spark.read.parquet(path).groupBy(column).agg(F.sum("id").alias("s"))  # noqa: E731
    spark.conf.set("spark.memphis.reuse.retainedShuffles", "1")
    try:
        for column in ("k", "v"):
            by(column).collect()
        kept = {k: r["retained_shuffles"] for k, r in entry_states(spark).items() if r["retained_shuffles"]}
        assert list(kept) == [memphis.lineage_key(by("v"))], "only the newest first occurrence keeps its shuffle"

        spark.conf.set("spark.memphis.reuse.retainedShuffles", "0")
        df = spark.read.parquet(path).groupBy((F.col("k") % 3).alias("m")).count()
        assert "RetainShuffle" not in df._jdf.queryExecution().optimizedPlan().toString()
        spark.conf.set("spark.memphis.reuse.retainedShuffles", "1")
        df = spark.read.parquet(path).groupBy((F.col("k") % 5).alias("m")).count()
        assert "RetainShuffle" in df._jdf.queryExecution().optimizedPlan().toString()
    finally:
        spark.conf.unset("spark.memphis.reuse.retainedShuffles")


def test_a_shuffle_over_a_join_broadcast_is_kept_only_while_the_broadcast_fits_the_driver_heap(spark_tier, tmp_path):
    """A kept shuffle keeps what its map side read alive, the join broadcasts built below it among them (Spark
    frees a broadcast on the driver once no plan references it): kept only while they fit in what the driver
    heap's budget leaves."""
    spark = spark_tier
    path = sales(spark, str(tmp_path / "sales"))
    labels = str(tmp_path / "labels")
    spark.range(5000).selectExpr("id AS k", "id % 3 AS group", "repeat('x', 100) AS label").write.parquet(labels)
    by_group = lambda modulus: (spark.read.parquet(path)  # noqa: E731
                                .join(F.broadcast(spark.read.parquet(labels)), "k")
                                .groupBy((F.col("group") % modulus).alias("g")).agg(F.sum("v").alias("total")))
    retained, _ = counters(spark)
    fits = sorted(by_group(2).collect())
    assert counters(spark)[0] == retained + 1
    assert entry_states(spark)[memphis.lineage_key(by_group(2))]["retained_shuffles"] == 1
    # A budget of about a tenth of a MiB of a 1 GiB heap: the label broadcast (over half a MiB) no longer fits.
    spark.conf.set("spark.memphis.driver.heapFraction", "0.0001")
    try:
        too_large = sorted(by_group(3).collect())
        assert counters(spark)[0] == retained + 1, "its shuffle is not kept"
        assert entry_states(spark)[memphis.lineage_key(by_group(3))]["retained_shuffles"] == 0
    finally:
        spark.conf.unset("spark.memphis.driver.heapFraction")
    assert memphis_off(spark, lambda: (sorted(by_group(2).collect()), sorted(by_group(3).collect()))) == (fits, too_large)
