"""Collected results: a query's rows, kept on the driver, serve later queries that hold its subplan.

The k-means loop of benchmarks/workloads/kmeans.py collects its centroids every iteration; with
memphis the next iteration reads those rows instead of computing every iteration again.
"""
import glob
import os
import shutil

from pyspark.sql import functions as F

import memphis
from conftest import in_job_group, memphis_off, per_key, sales
from workloads.kmeans import height, points_and_centroids, step  # from benchmarks/, which conftest puts on the path

ITERATIONS = 8
COUNTERS = ("results_kept", "results_reused", "results_released", "results_refused")


def counters(spark):
    s = memphis.stats(spark)
    return {k: s[k] for k in COUNTERS}


def changed(before, after):
    return {k: after[k] - before[k] for k in COUNTERS}


def kmeans(spark, tag, noise=False):
    """The loop, each iteration's centroids collected in order: (rows, jobs and optimized plan heights per
    iteration, the last query's execution)."""
    points, centroids = points_and_centroids(spark, 200)
    points = points.select("pid", *[(F.round(F.col(c) * 1024) / 1024).alias(c) for c in ("x", "y")])  # exact means
    rows, jobs, heights = [], [], []
    for i in range(ITERATIONS):
        centroids = step(points, centroids)
        if noise:  # unseeded SQL rand(): no lineage key, nothing may be kept
            centroids = centroids.withColumn("cx", F.col("cx") + F.expr("rand()") * 0)
        query = centroids.orderBy("cid")
        answer, ran = in_job_group(spark, f"collected-results-{tag}-{i}", query.collect)  # a group no other test names
        rows.append([tuple(r) for r in answer])
        jobs.append(len(ran))
        heights.append(height(query._jdf.queryExecution().optimizedPlan()))
    return rows, jobs, heights, query._jdf.queryExecution()


def test_a_loop_reads_the_rows_it_collected_and_its_plans_stay_shallow(adaptive):
    spark = adaptive
    plain, plain_jobs, plain_heights, _ = memphis_off(spark, lambda: kmeans(spark, "plain"))
    before = counters(spark)
    on, jobs, heights, qe = kmeans(spark, "memphis")
    assert on == plain
    assert changed(before, counters(spark)) == {"results_kept": ITERATIONS, "results_reused": ITERATIONS - 1,
                                                "results_released": 0, "results_refused": 0}
    # Plain Spark's plan grows by an iteration each time, and its jobs with it; memphis's stays one iteration deep
    # (a node shallower once the session shows that its aggregates do not recur: no first occurrence is then
    # marked to keep its shuffle).
    assert plain_heights[-1] > 4 * ITERATIONS
    assert heights[1:] == sorted(heights[1:], reverse=True) and heights[1] <= heights[0] + 2
    assert max(jobs[1:]) <= jobs[1] and jobs[-1] <= plain_jobs[-1]
    # explain shows what the query reads and that its rows are kept.
    assert "CollectedResult memphis" in qe.optimizedPlan().toString()
    assert "KeepResult memphis" in qe.executedPlan().toString()
    assert memphis.stats(spark)["bytes_held_results"] > 0
    memphis.clear(spark)
    assert memphis.stats(spark)["bytes_held_results"] == 0


def test_a_non_deterministic_result_is_not_kept(fresh):
    spark = fresh
    before = counters(spark)
    rows, _, _, qe = kmeans(spark, "noise", noise=True)
    assert len(rows[-1]) >= 2
    assert changed(before, counters(spark)) == dict.fromkeys(COUNTERS, 0)
    assert "CollectedResult" not in qe.optimizedPlan().toString()


def test_a_changed_source_file_invalidates_the_kept_rows(fresh, tmp_path):
    spark = fresh
    path = sales(spark, str(tmp_path / "sales"))
    total = lambda: per_key(spark, path).agg(F.sum("total"), F.sum("n")).collect()  # noqa: E731
    per_key(spark, path).collect()  # kept
    before = counters(spark)
    first = total()
    assert changed(before, counters(spark))["results_reused"] == 1
    part = sorted(glob.glob(os.path.join(path, "part-*.parquet")))[0]
    shutil.copy(part, os.path.join(path, "part-99999-copy.parquet"))  # the same rows once more, outside Spark
    before = counters(spark)
    after = total()
    assert changed(before, counters(spark))["results_reused"] == 0
    assert changed(before, counters(spark))["results_released"] == 2  # the aggregate's rows and the total's
    assert after != first and after == memphis_off(spark, total)


def test_a_result_larger_than_collected_max_bytes_is_not_kept(fresh):
    spark = fresh
    spark.conf.set("spark.memphis.collected.maxBytes", "4k")
    many = lambda: spark.range(2000).groupBy((F.col("id") % 1000).alias("k")).count()  # noqa: E731
    before = counters(spark)
    assert len(many().collect()) == 1000
    assert changed(before, counters(spark)) == {"results_kept": 0, "results_reused": 0, "results_released": 0,
                                                "results_refused": 1}
    count = many().agg(F.sum("count")).collect()[0][0]
    assert count == 2000 and changed(before, counters(spark))["results_reused"] == 0


def test_kept_rows_serve_a_subquery(fresh):
    spark = fresh
    spark.range(1000).selectExpr("id % 10 AS k", "id AS v").createOrReplaceTempView("r")
    per_k = "SELECT k, sum(v) AS s FROM r GROUP BY k"
    spark.sql(f"SELECT avg(s) FROM ({per_k})").collect()  # kept: the average
    query = f"SELECT k FROM ({per_k}) WHERE s > (SELECT avg(s) FROM ({per_k}))"
    before = counters(spark)
    on = sorted(spark.sql(query).collect())
    assert changed(before, counters(spark))["results_reused"] == 1, "the scalar subquery reads the kept average"
    assert on == memphis_off(spark, lambda: sorted(spark.sql(query).collect())) and len(on) == 5


def test_ordered_questions_over_kept_rows_are_sorted_on_the_driver(fresh):
    spark = fresh
    # The mark that keeps a query's rows leaves Spark's plan for an ordered limit at the root: no global sort.
    top = spark.range(300).groupBy((F.col("id") % 11).alias("k")).count().orderBy(F.desc("count"), "k").limit(3)
    assert top.collect() == memphis_off(spark, top.collect)
    plan = top._jdf.queryExecution().executedPlan().toString()
    assert "KeepResult memphis" in plan and "TakeOrderedAndProject" in plan
    # Per group, a maximum that is null for one group and NaN for another: Spark's orderings of both.
    x = F.when(F.col("id") % 23 == 3, F.lit(None)).when(F.col("id") % 23 == 5, F.lit(float("nan"))) \
        .otherwise((F.col("id") % 7).cast("double"))
    groups = spark.range(400).select((F.col("id") % 23).alias("k"), x.alias("x")) \
        .groupBy("k").agg(F.max("x").alias("x"), F.count("*").alias("n"))
    questions = {"nulls first": lambda: groups.orderBy("x", "k"),
                 "descending, nulls last": lambda: groups.orderBy(F.desc_nulls_last("x"), F.desc("k")),
                 "limited": lambda: groups.orderBy("n", "k").limit(5),
                 "projected": lambda: groups.orderBy("k").select("x")}
    plain = {name: repr(memphis_off(spark, question().collect)) for name, question in questions.items()}
    groups.collect()  # kept
    before = counters(spark)
    for name, question in questions.items():
        asked = question()
        answer, jobs = in_job_group(spark, f"ordered-{name}", asked.collect)
        assert repr(answer) == plain[name], name
        assert jobs == [], f"{name}: the kept rows are sorted on the driver"
        assert "ordered by" in asked._jdf.queryExecution().optimizedPlan().toString(), name
    assert changed(before, counters(spark))["results_reused"] == len(questions)
