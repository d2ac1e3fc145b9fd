"""Nothing to reuse: every query is different, so memphis can only cost (keys, bookkeeping).
The target is memphis within 5 % of plain Spark.

An expert has nothing to cache here, so the expert is plain Spark: the ``expert`` mode runs the
same code as ``plain`` again (its time beside plain's shows the run-to-run noise), and memphis /
expert is memphis's cost over plain Spark."""
import os

from harness import Workload


def write(spark, directory, scale):
    path = os.path.join(directory, "events")
    spark.range(int(2_000_000 * scale)).selectExpr("id", "id % 1000 AS k", "(id * 13) % 97 AS v") \
        .write.mode("overwrite").parquet(path)
    return path


def run(spark, path, cache=lambda df: df):
    events = cache(spark.read.parquet(path))
    # Each query aggregates by another key under another filter: no subplan recurs.
    return [sorted(map(tuple, events.where(f"v > {i}").groupBy((events.k % (i + 2)).alias("g"))
                       .agg({"v": "sum"}).collect())) for i in range(20)]


def workload(directory):
    return Workload(name="no_reuse", description="20 distinct aggregates over one Parquet table "
                                                 "(nothing to cache: its expert is plain Spark, run again)",
                    prepare=lambda spark, scale: write(spark, directory, scale), run=run, expert=run,
                    # The only DataFrame used twice is the table itself; a naive user caches it.
                    naive=lambda spark, path: run(spark, path, cache=lambda df: df.cache()))
