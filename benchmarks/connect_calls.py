"""What one memphis call costs from a classic session (py4j) and from a Spark Connect client (SQL
table functions): the spike that chose the Connect path.

    python benchmarks/connect_calls.py                          # classic, a local[2] session
    python benchmarks/connect_calls.py --remote sc://host:port  # a server from `memphis connect-server`

Prints, per call, the median and the interquartile range of --repeats timed calls (after one
untimed call) as a Markdown table. Run the two in separate processes: a Connect session switches
its whole Python process to Connect mode.
"""
import argparse
import statistics
import time

from pyspark.sql import functions as F

import memphis


def timed(call, repeats: int) -> tuple:
    call()  # untimed: the first call of each kind plans and loads classes
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - start)
    q1, median, q3 = statistics.quantiles(seconds, n=4)
    return median * 1000, q1 * 1000, q3 * 1000


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--remote", help="a Spark Connect server's URL; by default a classic local[2] session")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    if args.remote:
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.remote(f"{args.remote}/;user_id=bench").create()
    else:
        spark = memphis.session("local[2]", **{"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"})
    df = spark.range(100_000).groupBy((F.col("id") % 100).alias("k")).agg(F.sum("id").alias("s"))
    joined = df.join(spark.range(100).withColumnRenamed("id", "k"), "k")
    calls = {"stats": lambda: memphis.stats(spark), "lineage_key": lambda: memphis.lineage_key(df),
             "explain_key": lambda: memphis.explain_key(df),
             "subplans (run_all's keys)": lambda: memphis.jvm_access.of(joined).subplans(joined),
             "collect, held (a host-tier hit)": lambda: memphis.collect(df)}
    print(f"| call ({'Spark Connect, ' + args.remote if args.remote else 'classic, py4j'}) | median ms | IQR ms |")
    print("|---|---|---|")
    for name, call in calls.items():
        median, q1, q3 = timed(call, args.repeats)
        print(f"| {name} | {median:.1f} | {q1:.1f}–{q3:.1f} |")
    spark.stop()


if __name__ == "__main__":
    main()
