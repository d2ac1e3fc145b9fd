"""A notebook restart: a workload run in one process, then run again in a fresh one, with plain
Spark, memphis in memory only, memphis with its durable tier, and an expert who keeps the shared
results in files by hand.

    PYTHONPATH=python .venv/bin/python benchmarks/restart.py [--workload tpch_session|demo] [--scale S]
        [--repeats N] [--driver-memory 2g] [--quick] [--out DIR]

Workloads (--workload): tpch_session (benchmarks/workloads/tpch_session.py: 24 queries over three
shared joins and aggregates of TPC-H-like tables, Parquet written once, --scale 1: 600 000 line
items; results in restart.*) and demo (the pipeline of ``memphis demo``, memphis.demo.session:
exploration queries, then a ridge grid search, cross-validation and an ensemble search on the
collected features, 400 000 sales rows at --scale 1; its expert keeps exploration's aggregates as
Parquet and the collected feature matrix as .npy; results in restart_demo.*). A run of a
mode is a pair of fresh local[2] processes over the same tables, "first" then "rerun" (the restart):

- plain: memphis off in both;
- memory: memphis on, the durable tier off (spark.memphis.durable.dir=none): what memphis kept dies
  with the first process;
- durable: memphis on with the durable tier in a folder emptied before the pair: the first process
  writes what it persisted, the rerun reads it;
- expert: plain Spark as a competent user writes a notebook that will be restarted: the first process
  writes the shared results (tpch_session: the three shared aggregates, ``df.write.parquet``) and
  answers from them, the rerun reads them back (its folder emptied before the pair).

- floor (one process, not a mode): plain Spark builds and optimizes the DataFrame of every question (the
  sources' schemas read) and answers none: what a rerun that answered each question in no time would
  still spend; ``floor / plain`` is the least any reuse can reach.

Timed in each process: registering the tables and answering the workload (the JVM's start is the
same for every mode and not counted). The durable mode's first process then waits for its
background writes: reported apart as ``first_wait_s``, the time its end is delayed. Reports the
medians with 95 % intervals of the rerun's and the first process's seconds, the ratios the targets
are about (rerun: durable / plain at most 0.2, durable / expert at most 1.2; first: durable / memory
at most 1.1), and the bytes the durable tier wrote against the bytes of the input tables. Both
processes of every run must answer as the first run did, or the script fails (rigor.run_checked).
A run is two processes (about 10 s each to start), so the default is 3 runs per mode in rigor's
balanced order (13 pairs after the warm-up; about 15 minutes on 2 cores) rather than rigor's 10.
--quick: scale 0.05, 4 shuffle partitions, every mode once, and of tpch_session's questions the first
three over each shared aggregate (9 of 24): a check of the answers, not a timing; plain and memory,
whose rerun finds nothing the first process left, run their first process only (its figures stand
for both).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

from harness import QUICK_CONFS, SESSION_TUNING
from rigor import (provenance, provenance_line, ratio_interval, ratio_text, run_checked, runs_text, seconds_summary,
                   write_results)

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
MODES = ("plain", "memory", "durable", "expert")
CARRIED = ("durable", "expert")  # the modes whose rerun reads what their first process left
REPEATS = 3  # a run is two processes: see the docstring
WORKLOADS = {"tpch_session": "tpch_session (24 queries)",
             "demo": "the demo's pipeline (exploration, grid search, cross-validation, ensemble)"}
DEMO_ROWS = 400_000  # the demo's sales rows at scale 1
# The ratios the targets are about: (numerator, denominator, which process, target).
TARGETS = (("durable", "plain", "rerun", "≤ 0.2 (5× faster)"), ("durable", "expert", "rerun", "≤ 1.2"),
           ("memory", "plain", "rerun", ""), ("durable", "memory", "first", "≤ 1.1 (writing costs ≤ 10 %)"),
           ("expert", "plain", "first", ""))

# One process of a run: the tables registered, the 24 queries answered (by the expert from its Parquet
# copies of the shared aggregates, written first when they are not there yet); the durable writes waited for.
APP = r"""
import json, os, sys, time
args = json.loads(sys.argv[1])
sys.path.insert(0, args["benchmarks"])
import memphis
from workloads import tpch_session
from workloads.tpch_exploration import answers, register, write_tables

spark = memphis.session("local[2]", app_name="memphis-restart", **args["confs"])
spark.sparkContext.setLogLevel("ERROR")
mode, expert_dir = args["mode"], args["expert_dir"]
questions = tpch_session.quick_questions() if args["quick"] else tpch_session.QUERIES


def tpch_session_answers():
    register(spark, args["tables"])
    queries = questions
    if mode == "expert":
        for n, shared in enumerate(tpch_session.SHARED):
            path = os.path.join(expert_dir, f"shared_{n}")
            if not os.path.exists(path):
                spark.sql(shared).write.parquet(path)
            spark.read.parquet(path).createOrReplaceTempView(f"shared_{n}")
            queries = [q.replace(f"({shared})", f"shared_{n}") for q in queries]
    return answers(spark, queries)


def demo_answers():
    import numpy as np
    from memphis import demo
    from memphis.spark.collect import to_arrow

    class ExpertTools:
        # The feature matrix collected once and kept as .npy by hand; plain numpy on it.
        array = staticmethod(np.asarray)

        @staticmethod
        def collect(df):
            kept = os.path.join(expert_dir, "features.npy")
            if not os.path.exists(kept):
                os.makedirs(expert_dir, exist_ok=True)
                np.save(kept, to_arrow(df).to_pandas().to_numpy(dtype=float))
            return np.load(kept)

    made = []

    def parquet_kept(df):
        # Exploration's aggregates (not the raw sales: the first DataFrame it is handed) kept as Parquet by hand.
        made.append(df)
        if len(made) == 1:
            return df
        kept = os.path.join(expert_dir, f"explore_{len(made)}")
        if not os.path.exists(kept):
            df.write.parquet(kept)
        return spark.read.parquet(kept)

    class NoBar:
        def set_postfix_str(self, text):
            pass

        def update(self):
            pass

    expert = mode == "expert"
    found, _ = demo.session(spark, os.path.join(args["tables"], "sales"), mode in ("memory", "durable"), NoBar(),
                            tools=ExpertTools() if expert else None, cache=parquet_kept if expert else (lambda df: df))
    return [[list(map(list, rows)) for rows in found["exploration"]], found["grid search"].tolist(),
            found["cross-validation"].tolist(), [found["ensemble"][0], list(found["ensemble"][1])]]


def floor_planned():
    # Nothing answered: the DataFrames of every question built and optimized (their sources' schemas read), with
    # memphis off: what a rerun that answered each question in no time would still spend.
    if args["workload"] == "demo":
        from memphis import demo
        path = os.path.join(args["tables"], "sales")
        frames = demo.exploration_questions(spark, path) + \
            [demo.features(spark, path) for _ in demo.STAGES[1:]]  # each learning stage builds the features
    else:
        register(spark, args["tables"])
        frames = [spark.sql(q) for q in questions]
    for frame in frames:
        frame._jdf.queryExecution().optimizedPlan()
    return []


if mode == "prepare":
    if args["workload"] == "demo":
        from memphis import demo
        demo.write_sales(spark, int(DEMO_ROWS * args["scale"]), os.path.join(args["tables"], "sales"))
    else:
        write_tables(spark, args["tables"], args["scale"])
    print(json.dumps({}))
    sys.exit()
before = memphis.stats(spark)
start = time.perf_counter()
result = floor_planned() if mode == "floor" else demo_answers() if args["workload"] == "demo" else tpch_session_answers()
seconds = time.perf_counter() - start
while memphis.stats(spark)["durable_writes_pending"]:
    time.sleep(0.05)
wait = time.perf_counter() - start - seconds
after = memphis.stats(spark)
moved = {k: after[k] - before[k] for k in ("hits", "persisted", "durable_hits", "durable_writes", "durable_bytes_written",
                                           "durable_not_admitted", "durable_refused")}
print(json.dumps({"answers": result, "seconds": seconds, "wait_s": wait, **moved}))
""".replace("DEMO_ROWS", str(DEMO_ROWS))


def process(mode, confs, tables, scale, expert_dir, workload="tpch_session", quick=False):
    """One fresh process of ``mode`` (or ``prepare``) running ``workload`` (``quick``: its quick questions):
    what it printed."""
    args = {"mode": mode, "confs": confs, "tables": tables, "scale": scale, "expert_dir": expert_dir, "benchmarks": HERE,
            "workload": workload, "quick": quick}
    child = subprocess.run([sys.executable, "-c", APP, json.dumps(args)], capture_output=True, text=True)
    if child.returncode != 0:
        raise RuntimeError(f"restart: a {mode} process failed:\n{child.stderr[-3000:]}")
    return json.loads(child.stdout.strip().splitlines()[-1])


def confs_of(mode, durable_dir, driver_memory="2g", quick=False):
    """The session settings of ``mode``: memphis on or off, the durable tier in ``durable_dir`` or off
    (``quick``: with the quick runs' few shuffle partitions)."""
    return {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false", "spark.driver.host": "127.0.0.1",
            "spark.driver.memory": driver_memory, **SESSION_TUNING, **(QUICK_CONFS if quick else {}),
            "spark.memphis.enabled": str(mode in ("memory", "durable")).lower(),
            "spark.memphis.durable.dir": durable_dir if mode == "durable" else "none"}


def run_pair(mode, tables, scale, scratch, driver_memory="2g", workload="tpch_session", quick=False):
    """A run of ``mode``: the first process, then the rerun, from an empty durable (or expert) folder
    (quick: the rerun only where it reads what the first left, :data:`CARRIED`).
    Returns (the answers, both processes' equal, rounded; the figures)."""
    durable_dir, expert_dir = os.path.join(scratch, "durable"), os.path.join(scratch, "expert")
    for folder in (durable_dir, expert_dir):
        shutil.rmtree(folder, ignore_errors=True)
    def run():
        return process(mode, confs_of(mode, durable_dir, driver_memory, quick), tables, scale, expert_dir, workload,
                       quick)

    first = run()
    rerun = run() if mode in CARRIED or not quick else dict(first)
    answers = _rounded(first.pop("answers"))
    if _rounded(rerun.pop("answers")) != answers:
        answers = {"first": answers, "rerun": "different"}  # fails run_checked: the two processes disagree
    return answers, {"seconds": rerun["seconds"], "first_s": first["seconds"], "first_wait_s": first["wait_s"],
                     "bytes_written": first["durable_bytes_written"], "first_persisted": first["persisted"],
                     "rerun_durable_hits": rerun["durable_hits"], "rerun_hits": rerun["hits"]}


def input_bytes(tables):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(tables) for f in files
               if not f.startswith((".", "_")))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=WORKLOADS, default="tpch_session")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--driver-memory", default="2g", help="spark.driver.memory (plain Spark needs 4g from scale 5)")
    parser.add_argument("--quick", action="store_true",
                        help="scale 0.05, every mode once (no warm-up), 9 of tpch_session's questions")
    parser.add_argument("--out", default=RESULTS)
    args = parser.parse_args(argv)
    scale = 0.05 if args.quick else args.scale
    code = provenance()  # the code that runs, before it runs
    with tempfile.TemporaryDirectory(prefix="memphis-restart-") as scratch:
        tables = os.path.join(scratch, "tables")
        process("prepare", confs_of("plain", "none", quick=args.quick), tables, scale, "", args.workload)
        samples = run_checked(MODES, lambda mode, i: run_pair(mode, tables, scale, scratch, args.driver_memory,
                                                              args.workload, args.quick),
                              repeats=args.repeats, quick=args.quick, desc="restart")
        floor = [process("floor", confs_of("plain", "none", quick=args.quick), tables, scale, "", args.workload,
                         args.quick)
                 for _ in range(1 if args.quick else args.repeats)]
        read = input_bytes(tables)
    report = {"benchmark": "restart", "workload": args.workload, "scale": scale, "quick": args.quick,
              "runs_per_mode": min(len(s) for s in samples.values()), "answers_equal": True, "input_bytes": read,
              "driver_memory": args.driver_memory, "modes": {m: {"rerun": seconds_summary(s), "first": seconds_summary([{"seconds": f["first_s"]} for f in s]),
                            "first_wait": seconds_summary([{"seconds": f["first_wait_s"]} for f in s]),
                            **{k: s[-1][k] for k in ("bytes_written", "first_persisted", "rerun_durable_hits", "rerun_hits")}}
                        for m, s in samples.items()},
              "floor": seconds_summary(floor), "ratios": {}, "provenance": code}
    for numerator, denominator, which, _ in TARGETS:
        key = "seconds" if which == "rerun" else "first_s"
        interval = ratio_interval([f[key] for f in samples[numerator]], [f[key] for f in samples[denominator]])
        report["ratios"][f"{which}: {numerator} / {denominator}"] = ratio_text(interval)
    report["ratios"]["rerun: floor / plain"] = ratio_text(ratio_interval([f["seconds"] for f in floor],
                                                                         [f["seconds"] for f in samples["plain"]]))
    written = report["modes"]["durable"]["bytes_written"]
    lines = [f"# Notebook restart: {WORKLOADS[args.workload]}, scale {scale:g}, run, then run again in a fresh process", "",
             "| mode | first process, s | its end waits for durable writes, s | rerun after restart, s | "
             "persisted (first) | durable hits (rerun) |", "|---|---:|---:|---:|---:|---:|"]
    for mode, r in report["modes"].items():
        lines.append(f"| {mode} | {_seconds(r['first'])} | {_seconds(r['first_wait'])} | {_seconds(r['rerun'])} | "
                     f"{r['first_persisted']} | {r['rerun_durable_hits']} |")
    lines += ["", "| ratio of medians [95 % interval] | value | target |", "|---|---:|---|"]
    lines += [f"| {which}: {n} / {d} | {report['ratios'][f'{which}: {n} / {d}']} | {target} |"
              for n, d, which, target in TARGETS]
    lines += [f"| rerun: floor / plain | {report['ratios']['rerun: floor / plain']} | the least any reuse reaches |",
              "", f"Floor: {_seconds(report['floor'])} s in a fresh process that builds and optimizes the DataFrame of "
              "every question (their sources' schemas read) and answers none, memphis off "
              f"({len(floor)} processes): what a rerun that answered each question in no time would still spend."]
    lines += ["", f"The durable tier wrote {written:,} bytes against {read:,} bytes of input tables "
              f"({written / max(read, 1):.1%}). Answers of both processes equal across all runs; "
              f"{runs_text(args.quick, report['runs_per_mode'])}; each run is two fresh local[2] processes "
              f"({args.driver_memory} driver, canChangeCachedPlanOutputPartitioning=true); counters from the last run.",
              "", provenance_line(report["provenance"])]
    write_results(args.out, "restart" if args.workload == "tpch_session" else f"restart_{args.workload}", report, lines)


def _seconds(summary):
    return f"{summary['median_s']:.3g} [{summary['low_s']:.3g}–{summary['high_s']:.3g}]"


def _rounded(answer):
    """``answer`` with floats to 8 significant digits: sums in another order (Spark's partial
    aggregates, memphis's cached parts) differ in the last bits."""
    if isinstance(answer, list):
        return [_rounded(a) for a in answer]
    return float(f"{answer:.8g}") if isinstance(answer, float) else answer


if __name__ == "__main__":
    main()
