import pytest
from pyspark.sql import functions as F

import memphis
from conftest import job_count, memphis_off

ROWS = 2_000


def counted_aggregate(spark):
    """An aggregate whose input rows each add 1 to the returned accumulator when computed."""
    computed = spark.sparkContext.accumulator(0)

    def tick(v):  # a local function: pickled by value, so the Python workers need not import this file
        computed.add(1)
        return v

    keys = F.udf(tick, "long")(F.col("id") % 40).alias("k")
    base = spark.range(ROWS).select(keys, "id").groupBy("k").agg(F.sum("id").alias("total"), F.count("*").alias("n"))
    return base, computed


def grid(base):
    return [base.where(F.col("k") < t).agg(F.sum("total").alias("s")) for t in (10, 20, 30)] + [base.orderBy("k")]


def test_actions_sharing_an_aggregate_compute_it_once_and_answer_as_plain_spark(fresh):
    spark = fresh
    base, computed = counted_aggregate(spark)
    before = memphis.stats(spark)
    results = memphis.run_all(grid(base))
    after = memphis.stats(spark)
    assert computed.value == ROWS  # every input row of the shared aggregate computed once
    assert after["persisted"] - before["persisted"] == 1
    assert after["hits"] - before["hits"] == 4

    memphis.clear(spark)
    def plain_run():
        plain_base, plain_computed = counted_aggregate(spark)
        return plain_computed, [df.collect() for df in grid(plain_base)]
    plain_computed, plain = memphis_off(spark, plain_run)
    assert plain_computed.value >= len(plain) * ROWS  # each action computes it (a sort samples it once more)
    assert results == plain  # in input order, equal to plain Spark


def test_a_failing_action_keeps_the_others_results(fresh):
    spark = fresh
    ok = spark.range(10).selectExpr("sum(id) AS s")
    failing_df = spark.range(10).selectExpr("assert_true(id < 5) AS checked")
    with pytest.raises(memphis.RunAllError) as raised:
        memphis.run_all([ok, lambda: 1 / 0, failing_df, lambda: "local"], max_parallel=2)
    results = raised.value.results
    assert results[0] == ok.collect()
    assert results[3] == "local"
    assert [f.index for f in raised.value.failures] == [1, 2]
    assert isinstance(results[1], memphis.ActionFailed) and isinstance(results[1].exception, ZeroDivisionError)
    assert isinstance(results[2], memphis.ActionFailed)


def test_actions_run_in_the_pool_with_the_callers_job_group(fresh):
    spark = fresh
    sc = spark.sparkContext
    pools, jobs = job_count(spark, "run-all-group", lambda: memphis.run_all(
        [lambda: sc.getLocalProperty("spark.scheduler.pool"), spark.range(5).selectExpr("count(*)")], pool="grid"))
    assert pools[0] == "grid"
    assert jobs >= 1  # the DataFrame action's jobs ran in the caller's job group
    assert sc.getLocalProperty("spark.scheduler.pool") is None  # the caller's properties are untouched


def test_nothing_to_run_and_a_bad_parallelism():
    assert memphis.run_all([]) == []
    with pytest.raises(ValueError, match="max_parallel"):
        memphis.run_all([lambda: 1], max_parallel=0)
