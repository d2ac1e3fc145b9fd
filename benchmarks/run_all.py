"""A grid of actions over one shared expensive join + aggregate: memphis.run_all vs the hand-written
concurrent grid a competent Spark user writes, and vs one action after another.

    PYTHONPATH=python .venv/bin/python benchmarks/run_all.py [--rows N] [--repeats N] [--quick] [--out DIR]

Seeded generated data (--rows fact rows, default 2 000 000, joined with 1 000 dimension rows and
aggregated per customer) written once to Parquet; 8 actions (filters and aggregations of that
aggregate) run in one local[2] session with spark.scheduler.mode=FAIR, every mode with the session
tuning memphis gives itself (spark.sql.optimizer.canChangeCachedPlanOutputPartitioning=true). Modes:

- plain: plain Spark (memphis off), the actions one after another;
- expert: plain Spark as a competent user writes the grid: ``cache()`` of the shared aggregate by
  hand, the 8 actions submitted at once from a ThreadPoolExecutor, then ``unpersist()``;
- sequential: memphis on, one after another (memphis persists the aggregate on its 2nd occurrence);
- run_all: memphis on, ``memphis.run_all`` (the aggregate persisted up front, actions concurrent).

Each run starts from empty caches; the runs follow rigor.balanced_order (--repeats per mode after an
untimed warm-up); every run's answers must equal the first run's, or the script fails. Reports the
median seconds with 95 % intervals, every mode's time over the expert's, Spark jobs (by job group)
and the memphis counters; writes run_all.json and run_all.md to --out. --quick: 20 000 rows,
every mode once. A full run takes about 4 minutes on 2 cores.
"""
import argparse
import concurrent.futures
import os
import tempfile
import time

from pyspark.sql import functions as F

import memphis
from harness import SESSION_TUNING, environment, settle
from rigor import (DEFAULT_REPEATS, provenance, provenance_line, ratios_to, run_checked, runs_text, seconds_summary,
                   write_results)

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
DIMENSION_ROWS = 1_000
MODES = ("plain", "expert", "sequential", "run_all")


def write_data(spark, root, rows):
    facts = spark.range(rows).selectExpr("id", "id % 50000 AS customer", "id % 1000 AS product",
                                         "(id * 7919) % 100 / 10.0 AS amount")
    facts.write.mode("overwrite").parquet(os.path.join(root, "facts"))
    products = spark.range(DIMENSION_ROWS).selectExpr("id AS product", "id % 20 AS category", "1 + id % 7 AS weight")
    products.write.mode("overwrite").parquet(os.path.join(root, "products"))


def per_customer(spark, root):
    """The shared expensive part: facts ⋈ products aggregated per customer."""
    facts = spark.read.parquet(os.path.join(root, "facts"))
    products = spark.read.parquet(os.path.join(root, "products"))
    return (facts.join(products, "product").groupBy("customer")
            .agg(F.sum(F.col("amount") * F.col("weight")).alias("spend"),
                 F.countDistinct("category").alias("categories"), F.count("*").alias("orders")))


def grid(shared):
    """8 actions over the per-customer aggregate."""
    return ([shared.where(F.col("spend") > t).agg(F.count("*"), F.avg("orders")) for t in (100, 200, 400)]
            + [shared.groupBy("categories").agg(F.avg("spend"), F.max("orders")),
               shared.agg(F.stddev("spend"), F.avg("categories")),
               shared.orderBy(F.desc("spend")).limit(10),
               shared.where(F.col("categories") >= 10).agg(F.sum("spend")),
               shared.selectExpr("percentile_approx(spend, 0.9)")])


def expert(spark, root, group):
    """The grid as a competent user writes it with plain Spark: the shared aggregate cached by hand,
    the actions submitted at once (the first jobs fill the cache; the others wait for its blocks
    rather than computing them again), the cache released after."""
    shared = per_customer(spark, root).cache()
    sc = spark.sparkContext

    def collect(df):
        sc.setJobGroup(group, group)  # a pool thread starts without the caller's job group
        return df.collect()

    try:
        actions = grid(shared)
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(actions)) as pool:
            return list(pool.map(collect, actions))
    finally:
        shared.unpersist()


def run(spark, root, mode, group, settle_seconds):
    memphis.clear(spark)
    spark.catalog.clearCache()
    spark.conf.set("spark.memphis.enabled", str(mode in ("sequential", "run_all")).lower())
    settle(spark, settle_seconds)
    sc = spark.sparkContext
    before = memphis.stats(spark)
    sc.setJobGroup(group, group)
    started = time.perf_counter()
    try:
        if mode == "expert":
            results = expert(spark, root, group)
        else:
            actions = grid(per_customer(spark, root))
            results = memphis.run_all(actions) if mode == "run_all" else [df.collect() for df in actions]
    finally:
        seconds = time.perf_counter() - started
        sc.setLocalProperty("spark.jobGroup.id", None)
    after = memphis.stats(spark)
    counters = {n: after[n] - before[n] for n in ("persisted", "hits", "materialized")}
    return _rounded(results), {"seconds": seconds, "jobs": len(sc.statusTracker().getJobIdsForGroup(group)), **counters}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS)
    parser.add_argument("--quick", action="store_true", help="20 000 rows, every mode once (no warm-up)")
    parser.add_argument("--out", default=RESULTS)
    args = parser.parse_args(argv)
    rows = 20_000 if args.quick else args.rows
    spark = memphis.session("local[2]", app_name="memphis-bench-run-all", **{
        "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false", "spark.driver.host": "127.0.0.1",
        "spark.sql.shuffle.partitions": "8",
        "spark.scheduler.mode": "FAIR", "spark.driver.memory": "2g", **SESSION_TUNING})
    spark.sparkContext.setLogLevel("ERROR")
    try:
        with tempfile.TemporaryDirectory(prefix="memphis-run-all-") as root:
            write_data(spark, root, rows)
            pause = 0.1 if args.quick else 1.0
            samples = run_checked(MODES, lambda mode, i: run(spark, root, mode, f"{mode}-{i}", pause),
                                repeats=args.repeats, quick=args.quick, desc="run_all benchmark")
        env = environment(spark)
    finally:
        spark.stop()
    modes = {m: {**seconds_summary(s), **{k: s[-1][k] for k in ("jobs", "persisted", "hits", "materialized")}}
             for m, s in samples.items()}
    report = {"benchmark": "run_all", "rows": rows, "actions": 8, "quick": args.quick,
              "runs_per_mode": len(samples["plain"]), "answers_equal": True, "modes": modes,
              "ratios": ratios_to(samples, "expert"), "environment": env, "provenance": provenance()}
    lines = [f"# run_all: 8 actions over one shared join + aggregate ({rows:,} fact rows)", "",
             "| mode | seconds, median [95 % interval] | time / expert's | Spark jobs | persisted | hits |",
             "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {m} | {r['median_s']:.3g} [{r['low_s']:.3g}–{r['high_s']:.3g}] | "
              f"{report['ratios'].get(f'{m} / expert', '1')} | {r['jobs']} | {r['persisted']} | {r['hits']} |"
              for m, r in modes.items()]
    lines += ["", f"Answers equal across all runs. local[2], spark.scheduler.mode=FAIR, "
              f"canChangeCachedPlanOutputPartitioning=true; {runs_text(args.quick, report['runs_per_mode'])}, "
              "each from empty caches (jobs and counters from the last); plain and expert = memphis off.",
              "", provenance_line(report["provenance"])]
    write_results(args.out, "run_all", report, lines)


def _rounded(results):
    """Rows with floats rounded: sums in another order differ in the last bits."""
    return [[tuple(round(v, 6) if isinstance(v, float) else v for v in row) for row in rows] for rows in results]


if __name__ == "__main__":
    main()
