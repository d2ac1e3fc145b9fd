"""The showcase: an exploratory session of related DataFrame queries, run with memphis off, then on.

It is also the ``exploration`` benchmark workload (``benchmarks/workloads/exploration.py``).
"""
import os
import tempfile

from pyspark.sql import functions as F

from memphis.bench import Workload, run_workload


def write_sales(spark, rows: int, path: str) -> str:
    """Generated sales as Parquet: integer cents, so that sums are exact and answers comparable."""
    ids = F.col("id")
    (spark.range(rows, numPartitions=4)
     .select(
         (ids % 20_000).alias("customer"),
         (ids % 7).alias("region"),
         ((ids * 31) % 500).alias("product"),
         ((ids * 2_654_435_761) % 10_000 + 100).alias("price_cents"),
         ((ids * 7) % 10 + 1).alias("quantity"),
         (ids % 365).alias("day"))
     .write.mode("overwrite").parquet(path))
    return path


def explore(spark, path: str) -> list:
    """A data scientist's session: the same per-customer aggregate looked at from several sides."""
    sales = spark.read.parquet(path).withColumn("revenue", F.col("price_cents") * F.col("quantity"))
    per_customer = sales.groupBy("customer", "region").agg(
        F.sum("revenue").alias("revenue"), F.count("*").alias("orders"))
    per_region = per_customer.groupBy("region").agg(
        F.sum("revenue").alias("region_revenue"), F.count("*").alias("customers"))
    answers = [
        per_region.orderBy("region").collect(),
        per_customer.orderBy(F.desc("revenue"), "customer", "region").limit(10).collect(),
        per_customer.where(F.col("orders") >= 20).groupBy("region").count().orderBy("region").collect(),
        per_customer.join(per_region, "region")
        .where(F.col("revenue") * F.col("customers") > F.col("region_revenue") * 2)
        .groupBy("region").count().orderBy("region").collect(),
        sales.groupBy("region").agg(F.countDistinct("product").alias("products")).orderBy("region").collect(),
    ]
    return [[tuple(row) for row in rows] for rows in answers]


def exploration_workload(directory: str) -> Workload:
    return Workload(
        name="exploration",
        description="five related queries over one per-customer aggregate of generated sales (Parquet)",
        prepare=lambda spark, scale: write_sales(spark, int(400_000 * scale), os.path.join(directory, "sales")),
        run=explore,
    )


def main(master: str = "local[*]", rows: int = 400_000) -> None:
    import memphis

    # The progress bar below replaces Spark's, which would interleave with it.
    spark = memphis.session(master, app_name="memphis-demo", **{"spark.ui.showConsoleProgress": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    try:
        with tempfile.TemporaryDirectory(prefix="memphis-demo-") as directory:
            report = run_workload(spark, exploration_workload(directory), scale=rows / 400_000, repeats=3)
        print()
        print(f"memphis {memphis.__version__} demo on Spark {spark.version}, {spark.sparkContext.master}, "
              f"{rows} rows; answers agree with memphis off and on")
        print()
        print("| mode | median seconds | hits | misses | persisted | evicted | bytes held |")
        print("|---|---|---|---|---|---|---|")
        for mode, run in report["modes"].items():
            c = run["counters"]
            print(f"| {mode} | {run['median_s']:.2f} | {c['hits']} | {c['misses']} | {c['persisted']} "
                  f"| {c['evicted']} | {c['bytes_held']} |")
        plain, on = report["modes"]["plain"]["median_s"], report["modes"]["memphis"]["median_s"]
        print(f"\nspeedup with memphis: {plain / on:.2f}x (median of 3 runs each)")
        if report["modes"]["memphis"]["counters"]["hits"] == 0:
            print("memphis reused nothing in this run, so the difference is run-to-run noise")
    finally:
        spark.stop()
