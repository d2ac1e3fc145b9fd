"""A grid of actions over one shared expensive join + aggregate: memphis.run_all vs one after another.

    PYTHONPATH=python .venv/bin/python benchmarks/run_all.py [--rows N] [--out DIR]

Seeded generated data (--rows fact rows, default 2 000 000, joined with 1 000 dimension rows and
aggregated per customer) written once to Parquet; 8 actions (filters and aggregations of that
aggregate) run three ways in one local[2] session with spark.scheduler.mode=FAIR, each from empty
caches: plain Spark one after another (memphis off), memphis on one after another (the aggregate
is persisted on its 2nd occurrence), and memphis.run_all (persisted up front, actions
concurrent). Reports wall time, Spark jobs (counted by job group) and the memphis counters;
writes run_all.json and run_all.md to --out.
"""
import argparse
import json
import os
import platform
import tempfile
import time

from pyspark.sql import functions as F
from tqdm import tqdm

import memphis

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
DIMENSION_ROWS = 1_000


def write_data(spark, root, rows):
    facts = spark.range(rows).selectExpr("id", "id % 50000 AS customer", "id % 1000 AS product",
                                         "(id * 7919) % 100 / 10.0 AS amount")
    facts.write.mode("overwrite").parquet(os.path.join(root, "facts"))
    products = spark.range(DIMENSION_ROWS).selectExpr("id AS product", "id % 20 AS category", "1 + id % 7 AS weight")
    products.write.mode("overwrite").parquet(os.path.join(root, "products"))


def grid(spark, root):
    """8 actions over the per-customer aggregate of facts ⋈ products."""
    facts = spark.read.parquet(os.path.join(root, "facts"))
    products = spark.read.parquet(os.path.join(root, "products"))
    per_customer = (facts.join(products, "product").groupBy("customer")
                    .agg(F.sum(F.col("amount") * F.col("weight")).alias("spend"),
                         F.countDistinct("category").alias("categories"), F.count("*").alias("orders")))
    return ([per_customer.where(F.col("spend") > t).agg(F.count("*"), F.avg("orders")) for t in (100, 200, 400)]
            + [per_customer.groupBy("categories").agg(F.avg("spend"), F.max("orders")),
               per_customer.agg(F.stddev("spend"), F.avg("categories")),
               per_customer.orderBy(F.desc("spend")).limit(10),
               per_customer.where(F.col("categories") >= 10).agg(F.sum("spend")),
               per_customer.selectExpr("percentile_approx(spend, 0.9)")])


def run(spark, root, mode, *, group=None):
    group = group or mode
    memphis.clear(spark)
    spark.catalog.clearCache()
    spark.conf.set("spark.memphis.enabled", "false" if mode == "plain" else "true")
    sc = spark.sparkContext
    before = memphis.stats(spark)
    sc.setJobGroup(group, group)
    started = time.perf_counter()
    try:
        actions = grid(spark, root)
        results = memphis.run_all(actions) if mode == "run_all" else [df.collect() for df in actions]
    finally:
        seconds = time.perf_counter() - started
        sc.setLocalProperty("spark.jobGroup.id", None)
    after = memphis.stats(spark)
    counters = {n: after[n] - before[n] for n in ("persisted", "hits", "materialized")}
    return results, {"mode": mode, "seconds": round(seconds, 2), "jobs": len(sc.statusTracker().getJobIdsForGroup(group)),
                     **counters}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--out", default=RESULTS)
    args = parser.parse_args()
    spark = memphis.session("local[2]", app_name="memphis-bench-run-all", **{
        "spark.ui.enabled": "false", "spark.driver.host": "127.0.0.1", "spark.sql.shuffle.partitions": "8",
        "spark.scheduler.mode": "FAIR", "spark.driver.memory": "2g"})
    spark.sparkContext.setLogLevel("ERROR")
    runs, answers = [], {}
    with tempfile.TemporaryDirectory(prefix="memphis-run-all-") as root:
        write_data(spark, root, args.rows)
        run(spark, root, "plain", group="warm-up")  # warm-up, not reported: the JVM's first queries compile and load classes
        for mode in tqdm(("plain", "sequential", "run_all"), desc="run_all benchmark"):
            results, figures = run(spark, root, mode)
            answers[mode] = results
            runs.append(figures)
    spark.stop()
    same = all(_rounded(answers[m]) == _rounded(answers["plain"]) for m in answers)
    report = {"benchmark": "run_all", "rows": args.rows, "actions": len(answers["plain"]), "answers_equal": same,
              "machine": {"python": platform.python_version(), "cpus": os.cpu_count()}, "runs": runs}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "run_all.json"), "w") as f:
        json.dump(report, f, indent=2)
    lines = [f"# run_all: {report['actions']} actions over one shared join + aggregate ({args.rows:,} fact rows)", "",
             "| mode | seconds | Spark jobs | persisted | hits |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {r['mode']} | {r['seconds']} | {r['jobs']} | {r['persisted']} | {r['hits']} |" for r in runs]
    lines += ["", f"Answers equal across modes: {same}. local[2], spark.scheduler.mode=FAIR, one run each, "
              "each from empty caches after an untimed warm-up; plain = memphis off."]
    with open(os.path.join(args.out, "run_all.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def _rounded(results):
    """Rows with floats rounded: sums in another order differ in the last bits."""
    return [[tuple(round(v, 6) if isinstance(v, float) else v for v in row) for row in rows] for rows in results]


if __name__ == "__main__":
    main()
