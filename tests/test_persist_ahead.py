"""Persisting ahead: once a session's aggregates recur, a new one is persisted at its first occurrence."""
from pyspark.sql import functions as F

import memphis
from conftest import entry_states, eventually, in_job_group, memphis_off, per_key, sales, uses_memphis_cache


def per_value(spark, path):
    return spark.read.parquet(path).groupBy("v").agg(F.sum("k").alias("total"), F.count("*").alias("n"))


def stages_run(spark, tag, action):
    """Runs ``action()`` in a job group; returns its result and how many stages ran (skipped ones not)."""
    result, jobs = in_job_group(spark, tag, action)
    tracker = spark.sparkContext.statusTracker()
    stages = [tracker.getStageInfo(s) for j in jobs for s in tracker.getJobInfo(j).stageIds]
    return result, sum(1 for s in stages if s and s.numCompletedTasks > 0)


def test_after_a_recurring_aggregate_a_new_one_is_persisted_at_its_first_occurrence(adaptive, tmp_path):
    spark = adaptive
    path = sales(spark, str(tmp_path / "sales"))
    for threshold in (0, 100):  # the session's first aggregate recurs: persisted on its 2nd occurrence
        per_key(spark, path).where(F.col("total") > threshold).collect()
    ahead = memphis.stats(spark)["persisted_ahead"]
    key = memphis.lineage_key(per_value(spark, path))

    # An aggregate that is the answer, up to order, limit and columns, is rarely asked again: not ahead.
    per_pair = spark.read.parquet(path).groupBy("k", "v").agg(F.max("id").alias("top"))
    per_pair.orderBy(F.desc("top")).limit(5).select("k", "top").collect()
    assert entry_states(spark)[memphis.lineage_key(per_pair)]["state"] == "seen"

    first = sorted(per_value(spark, path).where(F.col("n") > 0).collect())
    entry = entry_states(spark)[key]
    assert entry["occurrences"] == 1 and entry["state"] in ("to-persist", "materialized")
    assert memphis.stats(spark)["persisted_ahead"] == ahead + 1
    assert eventually(lambda: entry_states(spark)[key]["state"] == "materialized")

    second_df = per_value(spark, path).where(F.col("total") > 3000)
    second, stages = stages_run(spark, "second", lambda: sorted(second_df.collect()))
    assert uses_memphis_cache(second_df)  # the second occurrence is a hit, not a persist
    assert entry_states(spark)[key]["hits"] == 1
    plain, plain_stages = stages_run(spark, "plain", lambda: memphis_off(
        spark, lambda: sorted(per_value(spark, path).where(F.col("total") > 3000).collect())))
    assert second == plain and stages < plain_stages, (stages, plain_stages)
    assert first == memphis_off(spark, lambda: sorted(per_value(spark, path).where(F.col("n") > 0).collect()))

    # A new aggregate over a held one is a one-off question about it (a loop's next step, too): not ahead.
    values_per_n = per_value(spark, path).groupBy("n").agg(F.count("*").alias("values"))
    over_held = values_per_n.where(F.col("values") > 0)
    rows = sorted(over_held.collect())
    assert entry_states(spark)[memphis.lineage_key(values_per_n)]["state"] == "seen"
    assert rows == memphis_off(spark, lambda: sorted(over_held.collect()))
    assert memphis.stats(spark)["persisted_ahead"] == ahead + 1


def test_aggregates_that_do_not_recur_or_the_key_off_keep_delayed_caching(fresh, tmp_path):
    spark = fresh
    path = sales(spark, str(tmp_path / "sales"))
    frame = spark.read.parquet(path)
    ahead = memphis.stats(spark)["persisted_ahead"]
    distinct = [frame.groupBy(column).agg(F.sum("id").alias("s")).where(F.col("s") > 0) for column in ("k", "v")]
    distinct.append(frame.groupBy("k", "v").agg(F.max("id").alias("s")).where(F.col("s") > 0))
    for df in distinct:  # every query distinct: nothing recurred, nothing is persisted ahead
        df.collect()
    assert memphis.stats(spark)["persisted_ahead"] == ahead
    assert {entry_states(spark)[memphis.lineage_key(df)]["state"] for df in distinct} == {"seen"}

    spark.conf.set("spark.memphis.reuse.persistAhead", "false")
    try:
        for threshold in (0, 100):
            per_key(spark, path).where(F.col("total") > threshold).collect()
        per_value(spark, path).where(F.col("n") > 0).collect()
        assert entry_states(spark)[memphis.lineage_key(per_value(spark, path))]["state"] == "seen"
        assert memphis.stats(spark)["persisted_ahead"] == ahead
    finally:
        spark.conf.unset("spark.memphis.reuse.persistAhead")
