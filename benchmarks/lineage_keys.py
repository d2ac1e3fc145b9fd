"""What a lineage key costs next to the planning it rides on.

    python benchmarks/lineage_keys.py [--repeats 30] [--files 10000] [--quick] [--out DIR]

For plans of 10, 100 and 1 000 operators, and for a text source of 10 000 files, times (median of
repeats, in one process) memphis computing the key and Spark analyzing, then fully planning, the
same plan (for the files: Spark listing them to build the DataFrame); and the planning time of
each plan with memphis off and on (its reuse rule keys every subplan). Each goes through one py4j
call. Every figure is a median with its 95 % interval (rigor.median_interval). Writes
lineage_keys.json and .md to --out (default benchmarks/results), with the commit, date and machine.
--quick: 3 repeats, 200 files, no warm-up.
"""
import argparse
import json
import os
import sys
import tempfile
import time

from pyspark.sql import functions as F
from tqdm import tqdm

import memphis
from harness import environment
from rigor import median_interval, provenance, provenance_line

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def median_ms(action, repeats, warmups=5):
    """(median, low, high) milliseconds of ``repeats`` calls of ``action`` after ``warmups`` untimed ones
    (class loading and JIT)."""
    for _ in range(warmups):
        action()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        times.append((time.perf_counter() - start) * 1000)
    return median_interval(times)


def ms_text(interval):
    median, low, high = interval
    return f"{median:.1f} [{low:.1f}–{high:.1f}]"


def plan_of(spark, operators):
    """An aggregate over a chain of projections and filters over a range: `operators` plan nodes.

    The aggregate makes it a reuse candidate, so that memphis keys every subplan of it."""
    df = spark.range(1000).select(F.col("id").alias("x"))
    for i in range(operators - 2):
        df = df.where(F.col("x") > -i) if i % 2 else df.select((F.col("x") + 1).alias("x"))
    return df.groupBy((F.col("x") % 10).alias("k")).count()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--quick", action="store_true", help="3 repeats, 200 files, no warm-up")
    parser.add_argument("--out", default=RESULTS)
    args = parser.parse_args(argv)
    repeats, files, warmups = (3, 200, 0) if args.quick else (args.repeats, args.files, 5)

    spark = memphis.session("local[2]", app_name="memphis-bench-keys", **{"spark.ui.showConsoleProgress": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    jvm, jsession = spark._jvm, spark._jsparkSession
    rows, overhead = [], []
    try:
        for operators in tqdm([10, 100, 1000], desc="plans", file=sys.stderr):
            df = plan_of(spark, operators)
            logical = df._jdf.queryExecution().logical()
            dataset = jvm.org.apache.spark.sql.classic.Dataset
            analysis = median_ms(lambda: dataset.ofRows(jsession, logical), repeats, warmups)
            def plan():
                return dataset.ofRows(jsession, logical).queryExecution().executedPlan()

            # Off and on take turns, so that JIT and GC drift favour neither. The reuse rule keys
            # every subplan; it persists nothing here, so both plan the same query.
            spark.conf.set("spark.memphis.reuse.minOccurrences", "1000")
            timings = {"false": [], "true": []}
            for _ in range(repeats + warmups):
                for enabled in ("false", "true"):
                    spark.conf.set("spark.memphis.enabled", enabled)
                    start = time.perf_counter()
                    plan()
                    timings[enabled].append((time.perf_counter() - start) * 1000)
            spark.conf.set("spark.memphis.enabled", "true")
            spark.conf.unset("spark.memphis.reuse.minOccurrences")
            planning, planning_on = (median_interval(timings[e][warmups:]) for e in ("false", "true"))
            key = median_ms(lambda: memphis.lineage_key(df), repeats, warmups)
            assert memphis.lineage_key(df) is not None
            case = f"plan of {operators} operators"
            rows.append({"case": case, "key_ms": key, "spark_ms": analysis, "spark_does": "analysis"})
            rows.append({"case": case, "key_ms": key, "spark_ms": planning,
                         "spark_does": "analysis + optimization + physical planning"})
            overhead.append({"case": case, "plain_ms": planning, "memphis_ms": planning_on})

        with tempfile.TemporaryDirectory(prefix="memphis-bench-files-") as directory:
            for i in tqdm(range(files), desc="writing files", file=sys.stderr):
                with open(os.path.join(directory, f"part-{i:05d}.txt"), "w") as f:
                    f.write(f"{i}\n")
            reader = spark.read.schema("value string")
            listing = median_ms(lambda: reader.text(directory), repeats, warmups)
            df = reader.text(directory)
            key = median_ms(lambda: memphis.lineage_key(df), repeats, warmups)
            rows.append({"case": f"text source of {files} files", "key_ms": key, "spark_ms": listing,
                         "spark_does": "listing (DataFrame creation)"})

        env = environment(spark)
    finally:
        spark.stop()

    for row in rows:
        row["ratio"] = row["key_ms"][0] / row["spark_ms"][0]
    origin = provenance()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "lineage_keys.json"), "w") as f:  # milliseconds as [median, low, high]
        json.dump({"environment": env, "provenance": origin, "repeats": repeats, "quick": args.quick, "rows": rows,
                   "planning": overhead}, f, indent=2)
    lines = ["| case | key ms | Spark ms | Spark does | key / Spark |", "|---|---|---|---|---|"]
    lines += [f"| {r['case']} | {ms_text(r['key_ms'])} | {ms_text(r['spark_ms'])} | {r['spark_does']} | "
              f"{r['ratio']:.2f} |"
              for r in rows]
    lines += ["", "| case | planning ms, memphis off | planning ms, memphis on | added ms |", "|---|---|---|---|"]
    lines += [f"| {o['case']} | {ms_text(o['plain_ms'])} | {ms_text(o['memphis_ms'])} | "
              f"{o['memphis_ms'][0] - o['plain_ms'][0]:.1f} |" for o in overhead]
    table = "\n".join(lines) + "\n"
    command = "python benchmarks/lineage_keys.py " + " ".join(argv if argv is not None else sys.argv[1:])
    with open(os.path.join(args.out, "lineage_keys.md"), "w") as f:
        f.write(f"`{command.strip()}` on {env['cpus']} CPUs, Spark {env['spark']}, Java {env['java']}; "
                f"medians of {repeats} [95 % intervals]\n\n{table}\n{provenance_line(origin)}\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
