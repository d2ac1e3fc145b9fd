"""Runs the benchmark workloads in every mode, side by side in one Spark session.

    python benchmarks/run.py                      # all workloads, scale 1, 3 repeats
    python benchmarks/run.py --scale 0.1 --repeats 1 --out /tmp/quick
    python benchmarks/run.py --conf spark.sql.shuffle.partitions=4   # a further session setting

Writes <out>/<workload>.json (environment, seconds per repeat, median/min/max, counters),
<out>/results.md (one table, with memphis's time over the expert's) and <out>/results.png (speedup
over plain Spark per workload and mode). A run fails if any mode answers differently from plain Spark.
"""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import memphis  # noqa: E402
from harness import add_conf_option, confs_of, environment, markdown_table, plot_speedups, run_workload  # noqa: E402
from workloads import ALL  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", action="append", choices=sorted(ALL),
                        help="run only this workload (repeatable; default: all)")
    parser.add_argument("--scale", type=float, default=1.0, help="data size relative to the default (1.0)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    add_conf_option(parser)
    args = parser.parse_args(argv)
    confs = confs_of(parser, args)

    os.makedirs(args.out, exist_ok=True)
    # The progress bar of run_workload replaces Spark's, which would interleave with it.
    spark = memphis.session(args.master, app_name="memphis-bench", **{"spark.ui.showConsoleProgress": "false", **confs})
    spark.sparkContext.setLogLevel("ERROR")
    try:
        env = environment(spark)
        reports = []
        for name in args.workload or sorted(ALL):
            with tempfile.TemporaryDirectory(prefix=f"memphis-bench-{name}-") as directory:
                # One repeat is a smoke run (make bench-quick): its timings mean nothing, so no warm-up either.
                report = run_workload(spark, ALL[name](directory), scale=args.scale, repeats=args.repeats,
                                      warmup=args.repeats > 1)
            report["environment"] = env
            with open(os.path.join(args.out, f"{name}.json"), "w") as f:
                json.dump(report, f, indent=2)
            reports.append(report)
        table = markdown_table(reports)
        plot = plot_speedups(reports, os.path.join(args.out, "results.png"))
        command = "python benchmarks/run.py " + " ".join(argv if argv is not None else sys.argv[1:])
        workloads = "".join(f"- `{r['workload']}`: {r['description']}\n" for r in reports)
        with open(os.path.join(args.out, "results.md"), "w") as f:
            f.write(f"`{command.strip()}` on {env['cpus']} CPUs, {env['platform']}, Spark {env['spark']}, "
                    f"Java {env['java']}, master {env['master']}, {env['date']}\n\n{table}\n{workloads}\n"
                    f"Plot: {os.path.basename(plot)} (speedup over plain Spark per workload and mode).\n")
        print(table)
        print(f"plot: {os.path.abspath(plot)}")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
