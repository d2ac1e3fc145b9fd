"""Runs the benchmark workloads (benchmarks/workloads/) in every mode, side by side in one Spark
session: plain Spark, memphis, naive (``cache()`` on everything used twice) and expert (the best a
competent user writes by hand). Every Spark mode has the session tuning memphis gives its own
persists (harness.SESSION_TUNING).

    python benchmarks/run.py                          # every workload, scale 1, 10 repeats (~30 min)
    python benchmarks/run.py --quick --out /tmp/q     # every mode once at scale 0.05 (CI, 1-2 min)
    python benchmarks/run.py --scale 0.1,1,10 --repeats 3 --conf spark.driver.memory=4g   # the scale sweep
    python benchmarks/run.py --pressure               # memphis's storage capped below its working set
    python benchmarks/run.py --conf spark.sql.shuffle.partitions=4   # a further session setting

Runs follow rigor.balanced_order (an untimed warm-up, then each mode at least --repeats times, each
mode after each other equally often). Every run's answer must equal the first one's, or the run
fails (exit status 1). Writes to --out: <workload>.json per workload (per workload and scale,
<workload>_scale<s>.json, when several scales run; seconds of every run, medians with 95 %
intervals, ratios, counters, provenance), results.md (the table: medians with intervals,
memphis / expert, memphis / plain, expert / plain; with several scales the scaling table too; the
commit, date and machine) and results.png (speedup over plain Spark per workload and mode).

Scale 10 needs a 4 GB driver (`--conf spark.driver.memory=4g`, as `make bench` runs the sweep): the
largest table is 6 M line items (54 MB of Parquet for the TPC-H-like tables), and with the default
1 GB plain Spark's first tpch_session query fails to build a broadcast ("Not enough memory to build
and broadcast the table"); what the naive mode caches beyond Spark's storage memory spills to disk.
Runs there take over a minute, so the sweep runs 3 repeats.

--pressure: for each workload, an untimed memphis run measures what memphis holds in Spark storage
unconstrained (its working set); the timed runs then cap ``spark.memphis.storage.maxBytes`` at a
third of it, so that memphis evicts. Writes pressure.json and pressure.md (evictions, bytes held
against the cap, memphis's time against plain and expert) instead of results.*; a workload where
memphis holds nothing is left out and said so. With --quick only plain and memphis run (the cap
changes nothing else).
"""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import (QUICK_CONFS, add_conf_option, confs_of, environment, markdown_table,  # noqa: E402
                     plot_speedups, run_workload, scaling_table, session)
from rigor import DEFAULT_REPEATS, AnswerMismatch, provenance, provenance_line, ratio_text, seconds_text  # noqa: E402
from workloads import ALL  # noqa: E402

QUICK_SCALE = 0.05
PRESSURE_SHARE = 1 / 3  # the storage cap under --pressure, as a share of memphis's unconstrained holding
# The modes --pressure --quick runs: the cap is memphis's, so only its answer can change; plain's is the reference.
PRESSURE_QUICK_MODES = ("plain", "memphis")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", action="append", choices=sorted(ALL),
                        help="run only this workload (repeatable; default: all)")
    parser.add_argument("--scale", default=None,
                        help="data size relative to the default, or a comma list of sizes to sweep (default 1)")
    parser.add_argument("--repeats", type=int, default=None, help=f"runs per mode (default {DEFAULT_REPEATS})")
    parser.add_argument("--quick", action="store_true",
                        help=f"every mode once, no warm-up, scale {QUICK_SCALE}, 4 shuffle partitions (CI)")
    parser.add_argument("--pressure", action="store_true",
                        help="cap memphis's Spark storage at a third of its working set (see above)")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    add_conf_option(parser)
    args = parser.parse_args(argv)
    confs = {**(QUICK_CONFS if args.quick else {}), **confs_of(parser, args)}
    scales = [float(s) for s in (args.scale or (str(QUICK_SCALE) if args.quick else "1")).split(",")]
    repeats = args.repeats or (1 if args.quick else DEFAULT_REPEATS)
    names = args.workload or sorted(ALL)
    command = "python benchmarks/run.py " + " ".join(argv if argv is not None else sys.argv[1:])

    os.makedirs(args.out, exist_ok=True)
    spark = session(args.master, confs)
    try:
        env = environment(spark)
        reports = []
        for scale in scales:
            for name in names:
                with tempfile.TemporaryDirectory(prefix=f"memphis-bench-{name}-") as directory:
                    workload = ALL[name](directory)
                    if args.pressure:
                        report = under_pressure(spark, workload, scale, repeats, quick=args.quick)
                    else:
                        report = run_workload(spark, workload, scale=scale, repeats=repeats)
                report["environment"] = env
                if not args.pressure:
                    suffix = f"_scale{scale:g}" if len(scales) > 1 else ""
                    with open(os.path.join(args.out, f"{name}{suffix}.json"), "w") as f:
                        json.dump(report, f, indent=2)
                reports.append(report)
    except AnswerMismatch as e:
        print(f"answer mismatch: {e}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    header = (f"`{command.strip()}`: Spark {env['spark']}, Java {env['java']}, master {env['master']}, "
              f"{repeats} repeats\n\n{provenance_line(provenance())}\n\n")
    workloads = "".join(f"- `{r['workload']}`: {r['description']}\n" for r in dict(
        (r["workload"], r) for r in reports).values())
    if args.pressure:
        table = pressure_table(reports)
        with open(os.path.join(args.out, "pressure.json"), "w") as f:
            json.dump(reports, f, indent=2)
        with open(os.path.join(args.out, "pressure.md"), "w") as f:
            f.write(header + table + "\n" + workloads)
        print(table)
        return 0
    table = markdown_table(reports)
    if len(scales) > 1:
        table += "\nHow time grows with the scale (median seconds; × is the ratio of successive scales):\n\n"
        table += scaling_table(reports)
    plot = plot_speedups(reports, os.path.join(args.out, "results.png"))
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(f"{header}{table}\nRatios are of median times (below 1: the first is faster), with 95 % "
                f"intervals.\n\n{workloads}\nPlot: {os.path.basename(plot)} (speedup over plain Spark per "
                f"workload and mode).\n")
    print(table)
    print(f"plot: {os.path.abspath(plot)}")
    return 0


def under_pressure(spark, workload, scale, repeats, quick=False) -> dict:
    """``workload`` with memphis's Spark storage capped at PRESSURE_SHARE of what one unconstrained,
    untimed memphis run holds there (quick: in :data:`PRESSURE_QUICK_MODES` only); the report gets
    ``unconstrained_bytes`` and ``cap_bytes`` (None where memphis held nothing, and then no timed runs)."""
    calibration = run_workload(spark, workload, scale=scale, modes=["memphis"], repeats=1, progress=False)
    held = calibration["modes"]["memphis"]["counters"]["bytes_held_storage"]
    cap = int(held * PRESSURE_SHARE)
    if cap == 0:
        return {**calibration, "unconstrained_bytes": held, "cap_bytes": None}
    report = run_workload(spark, workload, scale=scale, repeats=repeats, modes=PRESSURE_QUICK_MODES if quick else None,
                          confs={"spark.memphis.storage.maxBytes": str(cap)})
    return {**report, "unconstrained_bytes": held, "cap_bytes": cap}


def pressure_table(reports) -> str:
    """Per workload under --pressure: the cap, memphis's evictions and the bytes it held in Spark
    storage at the end (its last run; memphis counts no bytes evicted: an entry's size is read from
    Spark's block status, which is empty once it is unpersisted), its median time, and its time
    against plain and expert."""
    header = ["workload", "scale", "bytes held unconstrained", "cap", "evicted", "bytes held",
              "memphis s", "memphis / plain", "memphis / expert"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in reports:
        cells = [r["workload"], f"{r['scale']:g}", f"{r['unconstrained_bytes']:,}"]
        if r["cap_bytes"] is None:
            cells += ["memphis held nothing: no pressure to apply"] + [""] * (len(header) - 4)
        else:
            held = r["modes"]["memphis"]["counters"]
            cells += [f"{r['cap_bytes']:,}", str(held["evicted"]), f"{held['bytes_held_storage']:,}",
                      seconds_text(r["modes"]["memphis"]["seconds"])]
            cells += [ratio_text(r["ratios"][k]) if k in r["ratios"] else ""
                      for k in ("memphis/plain", "memphis/expert")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
