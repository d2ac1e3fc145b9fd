"""Speculative checkpoints in loops: each iteration's result is computed once, even when two jobs read it."""
from pyspark.sql import functions as F

import memphis
from conftest import in_job_group, memphis_off
from workloads.kmeans import points_and_centroids, step  # from benchmarks/, which conftest puts on the path

ITERATIONS = 12
# The non-deterministic loop's: past checkpoint.minHeight 12 from about the third iteration, as the other loop's, so
# three more show that none is cut. Its plans grow every iteration, and each job runs all of it (12 took 93 s).
NOISE_ITERATIONS = 6


def tasks_run(spark, tag, action):
    """Runs ``action()`` in a job group; returns its result and how many tasks its stages ran (none in skipped ones)."""
    result, jobs = in_job_group(spark, tag, action)
    tracker = spark.sparkContext.statusTracker()
    stages = [tracker.getStageInfo(s) for j in jobs for s in tracker.getJobInfo(j).stageIds]
    return result, sum(s.numCompletedTasks for s in stages if s)


def two_actions_per_iteration(spark, tag, noise=False, iterations=ITERATIONS, hand=False):
    """A k-means loop whose iterations each run two jobs over the new centroids: a total, then the rows
    (``hand``: with memphis off, cut by hand every 4 iterations, as a user who knows the loop would)."""
    memphis.clear(spark)
    before = memphis.stats(spark)
    points, centroids = points_and_centroids(spark, 400)
    rows, tasks = [], []
    for i in range(iterations):
        centroids = step(points, centroids)
        if hand and (i + 1) % 4 == 0:
            centroids = centroids.localCheckpoint()
        if noise:  # unseeded SQL rand(): no lineage key, nothing may be persisted or checkpointed
            centroids = centroids.withColumn("cx", F.col("cx") + F.expr("rand()") * 0)
        _, first = tasks_run(spark, f"{tag}-{i}-a", lambda: centroids.agg(F.sum("cx")).collect())
        answer, second = tasks_run(spark, f"{tag}-{i}-b", lambda: sorted(map(list, centroids.collect())))
        rows.append(answer)
        tasks.append((first, second))
    after = memphis.stats(spark)
    return rows, tasks, {k: after[k] - before[k] for k in ("checkpointed", "persisted_speculatively")}


def same(rows, others):
    return len(rows) == len(others) and all(
        a[0] == b[0] and abs(a[1] - b[1]) < 1e-9 and abs(a[2] - b[2]) < 1e-9
        for mine, theirs in zip(rows, others) for a, b in zip(mine, theirs))


def test_a_loop_result_read_by_two_jobs_is_computed_once_per_iteration(spark_tier):
    # Collected results off: the loop's second action collects the centroids, whose rows would serve
    # the next iteration (no plan would grow, no checkpoint be made: tests/test_collected_results.py).
    spark = spark_tier
    spark.conf.set("spark.memphis.checkpoint.minHeight", "12")
    try:
        # Plain Spark's answers, its plans kept short by hand: uncut, each iteration's jobs would run every step
        # before it.
        plain, _, _ = memphis_off(spark, lambda: two_actions_per_iteration(spark, "plain", hand=True))
        spark.conf.set("spark.memphis.loop.speculative", "false")
        delayed, delayed_tasks, delayed_stats = two_actions_per_iteration(spark, "delayed")
        spark.conf.set("spark.memphis.loop.speculative", "true")
        on, on_tasks, on_stats = two_actions_per_iteration(spark, "speculative")
    finally:
        spark.conf.unset("spark.memphis.checkpoint.minHeight")
        spark.conf.unset("spark.memphis.loop.speculative")
    assert same(on, plain) and same(delayed, plain)
    # Without speculation each iteration's result is checkpointed by the second job, which computes it again.
    assert delayed_stats["persisted_speculatively"] == 0 and delayed_stats["checkpointed"] >= ITERATIONS - 4
    # With it, from the third cut on, the first job checkpoints the result it computes; the second job reads it.
    assert on_stats["persisted_speculatively"] >= ITERATIONS - 6
    steady = slice(ITERATIONS - 4, ITERATIONS)
    assert all(second < first for first, second in on_tasks[steady]), on_tasks
    assert sum(map(sum, on_tasks[steady])) < sum(map(sum, delayed_tasks[steady])), (on_tasks, delayed_tasks)


def test_a_non_deterministic_loop_result_is_not_speculated(spark_tier):
    spark = spark_tier
    spark.conf.set("spark.memphis.checkpoint.minHeight", "12")
    try:
        rows, _, stats = two_actions_per_iteration(spark, "noise", noise=True, iterations=NOISE_ITERATIONS)
    finally:
        spark.conf.unset("spark.memphis.checkpoint.minHeight")
    assert len(rows[-1]) >= 2
    assert stats == {"checkpointed": 0, "persisted_speculatively": 0}
