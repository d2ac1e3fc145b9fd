"""What one memphis call costs from a classic session (py4j) and from a Spark Connect client (SQL
table functions): the spike that chose the Connect path.

    python benchmarks/connect_calls.py                          # classic, a local[2] session
    python benchmarks/connect_calls.py --remote sc://host:port  # a server from `memphis connect-server`
    python benchmarks/connect_calls.py --serve                  # starts such a server, measures, stops it

Prints, per call, the median and its 95 % interval (rigor.median_interval) of --repeats timed calls
(after one untimed call) as a Markdown table, and writes it with the commit, date and machine to
connect_calls_classic.{json,md} or connect_calls_connect.{json,md} in --out (default
benchmarks/results). --quick: 3 calls each, no untimed call. Run the two in separate processes: a
Connect session switches its whole Python process to Connect mode.
"""
import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

from pyspark.sql import functions as F

import memphis
from rigor import median_interval, provenance, provenance_line

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def timed(call, repeats: int, warm_up: bool = True) -> tuple:
    """(median, low, high) milliseconds of ``repeats`` calls."""
    if warm_up:
        call()  # untimed: the first call of each kind plans and loads classes
    milliseconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        milliseconds.append((time.perf_counter() - start) * 1000)
    return median_interval(milliseconds)


@contextlib.contextmanager
def connect_server(log_path: str):
    """The URL of a Spark Connect server with memphis on a free local port, started as a user starts
    it (``memphis connect-server``), stopped on exit."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [os.path.join(os.path.dirname(sys.executable), "memphis"), "connect-server", "--port", str(port),
               "--master", "local[2]", "--conf", "spark.ui.enabled=false", "--conf", "spark.driver.host=127.0.0.1",
               "--conf", "spark.sql.shuffle.partitions=4"]
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 240
        while "Spark Connect server started" not in open(log_path).read():
            if process.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"connect_calls: the Connect server did not start:\n{open(log_path).read()[-3000:]}")
            time.sleep(1)
        yield f"sc://127.0.0.1:{port}"
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--remote", help="a Spark Connect server's URL; by default a classic local[2] session")
    parser.add_argument("--serve", action="store_true", help="start a local Connect server and measure over it")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="3 calls each, no untimed call")
    parser.add_argument("--out", default=RESULTS)
    args = parser.parse_args()
    repeats = 3 if args.quick else args.repeats
    if args.serve:  # the client in its own process: a Connect session switches its process to Connect mode
        with tempfile.TemporaryDirectory() as folder, connect_server(os.path.join(folder, "server.log")) as url:
            own = [a for a in sys.argv[1:] if a != "--serve"]
            subprocess.run([sys.executable, os.path.abspath(__file__), "--remote", url, *own], check=True)
        return
    if args.remote:
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.remote(f"{args.remote}/;user_id=bench").create()
    else:
        spark = memphis.session("local[2]", **{"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"})
    df = spark.range(100_000).groupBy((F.col("id") % 100).alias("k")).agg(F.sum("id").alias("s"))
    joined = df.join(spark.range(100).withColumnRenamed("id", "k"), "k")
    calls = {"stats": lambda: memphis.stats(spark), "lineage_key": lambda: memphis.lineage_key(df),
             "explain_key": lambda: memphis.explain_key(df),
             "subplans (run_all's keys)": lambda: memphis.spark.jvm_access.of(joined).subplans(joined),
             "collect, held (a host-tier hit)": lambda: memphis.collect(df)}
    try:
        timings = {name: timed(call, repeats, warm_up=not args.quick) for name, call in calls.items()}
    finally:
        spark.stop()
    origin = provenance()
    kind = "connect" if args.remote else "classic"
    session = f"Spark Connect, {args.remote}" if args.remote else "classic, py4j"
    lines = [f"| call ({session}) | median ms | 95 % interval ms |",
             "|---|---|---|"]
    lines += [f"| {name} | {median:.1f} | {low:.1f}–{high:.1f} |" for name, (median, low, high) in timings.items()]
    lines += ["", f"{repeats} calls each; {provenance_line(origin)}"]
    print("\n".join(lines))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"connect_calls_{kind}.json"), "w") as f:
        json.dump({"session": kind, "remote": args.remote, "repeats": repeats, "quick": args.quick,
                   "milliseconds": {n: dict(zip(("median", "low", "high"), t)) for n, t in timings.items()},
                   "provenance": origin}, f, indent=2)
    with open(os.path.join(args.out, f"connect_calls_{kind}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
