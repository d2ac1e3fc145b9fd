"""Repeated broadcast joins across 20 queries: plain Spark vs memphis (cross-query broadcast reuse).

    PYTHONPATH=python .venv/bin/python benchmarks/broadcast_joins.py [--rows N] [--dim-rows N] [--queries N]
        [--repeats N] [--out DIR]

Seeded generated data written once to Parquet: a fact table (--rows, default 2 000 000) and a
dimension (--dim-rows, default 300 000, with a text column) joined through a broadcast hint. Each
query filters the facts differently and aggregates differently on top of the join, so no cached
subplan serves it: only the broadcast recurs. The --queries queries run in one local[2] session,
plain Spark (memphis off) then memphis, each from empty caches after an untimed warm-up, --repeats
times; the medians are reported. Adaptive execution as configured (on by default; --no-adaptive).
Counts Spark jobs and broadcast-building jobs (by Spark's job tag); writes broadcast_joins.json
and broadcast_joins.md to --out.
"""
import argparse
import json
import os
import statistics
import tempfile
import time

from pyspark.sql import functions as F
from tqdm import tqdm

import memphis
from harness import environment, jobs_in_group

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
AGGREGATES = [F.sum, F.avg, F.max, F.min, F.stddev]


def write_data(spark, root, rows, dim_rows):
    (spark.range(rows).selectExpr("id", f"(id * 2654435761) % {dim_rows} AS product", "id % 50000 AS customer",
                                  "(id * 7919) % 1000 / 10.0 AS amount")
     .write.mode("overwrite").parquet(os.path.join(root, "facts")))
    (spark.range(dim_rows).selectExpr("id AS product", "id % 25 AS category", "sha2(cast(id AS string), 256) AS label")
     .write.mode("overwrite").parquet(os.path.join(root, "products")))


def query(spark, root, i):
    """Query i: facts above an amount (a filter below the join, distinct per query) ⋈ products, one aggregate per category."""
    facts = spark.read.parquet(os.path.join(root, "facts")).where(F.col("amount") >= i * 2.5)
    products = spark.read.parquet(os.path.join(root, "products")).where(F.col("category") < 20)
    joined = facts.join(F.broadcast(products), "product")
    return joined.groupBy("category").agg(AGGREGATES[i % len(AGGREGATES)]("amount").alias("value")).where(F.col("value") > i)


def run(spark, root, mode, queries, group):
    memphis.clear(spark)
    spark.catalog.clearCache()
    spark.conf.set("spark.memphis.enabled", "false" if mode == "plain" else "true")
    sc = spark.sparkContext
    before = memphis.stats(spark)
    answers, seconds = [], []
    sc.setJobGroup(group, group)
    try:
        for i in range(queries):
            started = time.perf_counter()
            answers.append(sorted(tuple(round(v, 6) if isinstance(v, float) else v for v in row)
                                  for row in query(spark, root, i).collect()))
            seconds.append(time.perf_counter() - started)
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    after = memphis.stats(spark)
    jobs, broadcast_jobs = jobs_in_group(spark, group)
    return answers, {"seconds": sum(seconds), "median_query_seconds": statistics.median(seconds), "jobs": jobs,
                     "broadcast_jobs": broadcast_jobs,
                     **{n: after[n] - before[n] for n in ("broadcasts_registered", "broadcasts_reused")},
                     "bytes_held_join_broadcasts": after["bytes_held_join_broadcasts"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--dim-rows", type=int, default=300_000)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-adaptive", action="store_true")
    parser.add_argument("--out", default=RESULTS)
    args = parser.parse_args()
    spark = memphis.session("local[2]", app_name="memphis-bench-broadcast-joins", **{
        "spark.ui.enabled": "false", "spark.driver.host": "127.0.0.1", "spark.sql.shuffle.partitions": "8",
        "spark.driver.memory": "2g", "spark.sql.adaptive.enabled": str(not args.no_adaptive).lower()})
    spark.sparkContext.setLogLevel("ERROR")
    modes = ("plain", "memphis")
    samples = {m: [] for m in modes}
    answers = {}
    with tempfile.TemporaryDirectory(prefix="memphis-broadcast-joins-") as root:
        write_data(spark, root, args.rows, args.dim_rows)
        for mode in modes:  # warm-up, not reported: the JVM's first queries compile and load classes
            run(spark, root, mode, 2, f"warm-up-{mode}")
        with tqdm(total=args.repeats * len(modes), desc="broadcast joins benchmark") as progress:
            for r in range(args.repeats):
                for mode in modes:
                    answers[mode], figures = run(spark, root, mode, args.queries, f"{mode}-{r}")
                    samples[mode].append(figures)
                    progress.update()
        env = environment(spark)
    spark.stop()

    def median(mode, name):
        return statistics.median(s[name] for s in samples[mode])

    runs = [{"mode": m, "seconds": round(median(m, "seconds"), 2),
             "median_query_seconds": round(median(m, "median_query_seconds"), 3),
             **{n: samples[m][-1][n] for n in ("jobs", "broadcast_jobs", "broadcasts_registered", "broadcasts_reused",
                                               "bytes_held_join_broadcasts")},
             "samples_seconds": [round(s["seconds"], 2) for s in samples[m]]} for m in modes]
    same = answers["memphis"] == answers["plain"]
    speedup = runs[0]["seconds"] / runs[1]["seconds"]
    report = {"benchmark": "broadcast_joins", "rows": args.rows, "dim_rows": args.dim_rows, "queries": args.queries,
              "repeats": args.repeats, "adaptive": not args.no_adaptive, "answers_equal": same,
              "speedup": round(speedup, 2), "environment": env, "runs": runs}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "broadcast_joins.json"), "w") as f:
        json.dump(report, f, indent=2)
    lines = [f"# Broadcast joins: {args.queries} queries over one broadcast dimension "
             f"({args.rows:,} fact rows, {args.dim_rows:,} dimension rows)", "",
             f"| mode | seconds ({args.queries} queries) | median query s | Spark jobs | broadcast jobs | registered | reused |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['mode']} | {r['seconds']} | {r['median_query_seconds']} | {r['jobs']} | {r['broadcast_jobs']} | "
              f"{r['broadcasts_registered']} | {r['broadcasts_reused']} |" for r in runs]
    lines += ["", f"memphis {speedup:.2f}× plain. Answers equal: {same}. local[2], adaptive execution "
              f"{'on' if report['adaptive'] else 'off'}; medians of {args.repeats} runs per mode (jobs and counters "
              "from the last), each from empty caches after an untimed warm-up; plain = memphis off."]
    with open(os.path.join(args.out, "broadcast_joins.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    if not same:
        raise SystemExit("answers differ between plain Spark and memphis")


if __name__ == "__main__":
    main()
