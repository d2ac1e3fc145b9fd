"""Repeated broadcast joins across 20 queries: plain Spark, the dimension cached by hand, memphis
(cross-query broadcast reuse).

    PYTHONPATH=python .venv/bin/python benchmarks/broadcast_joins.py [--rows N] [--dim-rows N] [--queries N]
        [--repeats N] [--no-adaptive] [--quick] [--out DIR]

Seeded generated data written once to Parquet: a fact table (--rows, default 300 000) and a
dimension (--dim-rows, default 200 000, with a text column) joined through a broadcast hint. Each
query filters the facts differently and aggregates differently on top of the join, so no cached
subplan serves it: only the broadcast recurs. The --queries queries (one after another, each
collected before the next, as a dashboard or a notebook sends them) run in one local[2] session
with the session tuning memphis gives itself (spark.sql.optimizer.canChangeCachedPlanOutputPartitioning
=true) in every mode. Modes:

- plain: plain Spark (memphis off); every query builds its broadcast from Parquet;
- expert: plain Spark with the dimension, as the queries read it (filtered, the two columns they
  use), ``cache()``d by hand before the queries and unpersisted after: every query's broadcast is
  built from memory rather than Parquet. In a short trial (400 000 × 100 000 rows, on a busy
  machine) the plausible alternatives were no faster, within the noise: caching the whole dimension
  table (it holds a text column no query reads), or materializing the cache with ``count()`` first
  (an extra job; the first query's broadcast fills the cache anyway). Collecting the dimension to
  the driver and ``spark.createDataFrame``-ing it gives a driver-fed RDD source that each broadcast
  reads again unless cached, which is this mode again. Spark's own broadcast reuse works only
  within one query: unioning the 20 queries into one needs them all known up front and mixes their
  result types (decimal and double), so it is not the same workload;
- memphis: memphis on; the broadcast built by the first query is reused by the others.

Each run starts from empty caches; the runs follow rigor.balanced_order (--repeats per mode after an
untimed warm-up); every run's answers must equal the first run's, or the script fails. Adaptive
execution as configured (on by default; --no-adaptive). Reports the median seconds of the 20
queries with 95 % intervals, every mode's time over the expert's, Spark jobs and broadcast-building
jobs (by Spark's job tag, from the last run); writes broadcast_joins.json and broadcast_joins.md to
--out. --quick: 20 000 fact rows, 2 000 dimension rows, 5 queries, every mode once. A full run takes
about 8 minutes on 2 cores. The sizes keep it there: the broadcast is what recurs, so the dimension
stays large and the facts small (at 2 000 000 × 300 000 a plain run took a minute; at
600 000 × 100 000 the broadcast was too cheap for the modes to differ).
"""
import argparse
import os
import statistics
import tempfile
import time

from pyspark.sql import functions as F

import memphis
from harness import SESSION_TUNING, environment, jobs_in_group, settle
from rigor import (DEFAULT_REPEATS, provenance, provenance_line, ratios_to, run_checked, runs_text, seconds_summary,
                   write_results)

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
AGGREGATES = [F.sum, F.avg, F.max, F.min, F.stddev]
MODES = ("plain", "expert", "memphis")


def write_data(spark, root, rows, dim_rows):
    (spark.range(rows).selectExpr("id", f"(id * 2654435761) % {dim_rows} AS product", "id % 50000 AS customer",
                                  "(id * 7919) % 1000 / 10.0 AS amount")
     .write.mode("overwrite").parquet(os.path.join(root, "facts")))
    (spark.range(dim_rows).selectExpr("id AS product", "id % 25 AS category", "sha2(cast(id AS string), 256) AS label")
     .write.mode("overwrite").parquet(os.path.join(root, "products")))


def dimension(spark, root):
    """The dimension as every query reads it."""
    return spark.read.parquet(os.path.join(root, "products")).where(F.col("category") < 20).select("product", "category")


def query(spark, root, products, i):
    """Query i: facts above an amount (a filter below the join, distinct per query) ⋈ products, one aggregate per category."""
    facts = spark.read.parquet(os.path.join(root, "facts")).where(F.col("amount") >= i * 2.5)
    joined = facts.join(F.broadcast(products), "product")
    return joined.groupBy("category").agg(AGGREGATES[i % len(AGGREGATES)]("amount").alias("value")).where(F.col("value") > i)


def run(spark, root, mode, queries, group, settle_seconds):
    memphis.clear(spark)
    spark.catalog.clearCache()
    spark.conf.set("spark.memphis.enabled", str(mode == "memphis").lower())
    settle(spark, settle_seconds)
    sc = spark.sparkContext
    before = memphis.stats(spark)
    answers, seconds = [], []
    sc.setJobGroup(group, group)
    started = time.perf_counter()
    products = dimension(spark, root).cache() if mode == "expert" else None
    try:
        for i in range(queries):
            query_started = time.perf_counter()
            rows = query(spark, root, products or dimension(spark, root), i).collect()
            answers.append(sorted(tuple(round(v, 6) if isinstance(v, float) else v for v in row) for row in rows))
            seconds.append(time.perf_counter() - query_started)
        if products is not None:
            products.unpersist()
    finally:
        total = time.perf_counter() - started
        sc.setLocalProperty("spark.jobGroup.id", None)
    after = memphis.stats(spark)
    jobs, broadcast_jobs = jobs_in_group(spark, group)
    return answers, {"seconds": total, "median_query_seconds": statistics.median(seconds), "jobs": jobs,
                     "broadcast_jobs": broadcast_jobs,
                     **{n: after[n] - before[n] for n in ("broadcasts_registered", "broadcasts_reused")}}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--dim-rows", type=int, default=200_000)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS)
    parser.add_argument("--no-adaptive", action="store_true")
    parser.add_argument("--quick", action="store_true", help="tiny data, 5 queries, every mode once (no warm-up)")
    parser.add_argument("--out", default=RESULTS)
    args = parser.parse_args(argv)
    rows, dim_rows, queries = (20_000, 2_000, 5) if args.quick else (args.rows, args.dim_rows, args.queries)
    spark = memphis.session("local[2]", app_name="memphis-bench-broadcast-joins", **{
        "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false", "spark.driver.host": "127.0.0.1",
        "spark.sql.shuffle.partitions": "8",
        "spark.driver.memory": "2g", "spark.sql.adaptive.enabled": str(not args.no_adaptive).lower(), **SESSION_TUNING})
    spark.sparkContext.setLogLevel("ERROR")
    try:
        with tempfile.TemporaryDirectory(prefix="memphis-broadcast-joins-") as root:
            write_data(spark, root, rows, dim_rows)
            samples = run_checked(MODES, lambda mode, i: run(spark, root, mode, queries, f"{mode}-{i}",
                                                           0.1 if args.quick else 1.0),
                                repeats=args.repeats, quick=args.quick, desc="broadcast joins benchmark")
        env = environment(spark)
    finally:
        spark.stop()
    modes = {m: {**seconds_summary(s), "median_query_seconds": statistics.median(x["median_query_seconds"] for x in s),
                 **{k: s[-1][k] for k in ("jobs", "broadcast_jobs", "broadcasts_registered", "broadcasts_reused")}}
             for m, s in samples.items()}
    report = {"benchmark": "broadcast_joins", "rows": rows, "dim_rows": dim_rows, "queries": queries,
              "quick": args.quick, "runs_per_mode": len(samples["plain"]), "adaptive": not args.no_adaptive,
              "answers_equal": True, "modes": modes, "ratios": ratios_to(samples, "expert"), "environment": env,
              "provenance": provenance()}
    lines = [f"# Broadcast joins: {queries} queries over one broadcast dimension "
             f"({rows:,} fact rows, {dim_rows:,} dimension rows)", "",
             f"| mode | seconds ({queries} queries), median [95 % interval] | time / expert's | median query s "
             "| Spark jobs | broadcast jobs | registered | reused |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {m} | {r['median_s']:.3g} [{r['low_s']:.3g}–{r['high_s']:.3g}] | "
              f"{report['ratios'].get(f'{m} / expert', '1')} | {r['median_query_seconds']:.3f} | {r['jobs']} | "
              f"{r['broadcast_jobs']} | {r['broadcasts_registered']} | {r['broadcasts_reused']} |"
              for m, r in modes.items()]
    lines += ["", "Answers equal across all runs. local[2], "
              f"adaptive execution {'on' if report['adaptive'] else 'off'}, "
              f"canChangeCachedPlanOutputPartitioning=true; {runs_text(args.quick, report['runs_per_mode'])}, "
              "each from empty caches (jobs and counters from the last); plain and expert = memphis off; expert = the "
              "dimension cached by hand.", "", provenance_line(report["provenance"])]
    write_results(args.out, "broadcast_joins", report, lines)


if __name__ == "__main__":
    main()
