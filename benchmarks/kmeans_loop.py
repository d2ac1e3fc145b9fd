"""Iterative k-means-like loop, each variant in a fresh process with a 1 GB driver: plain Spark,
the lineage cut by hand three ways, memphis.

    PYTHONPATH=python .venv/bin/python benchmarks/kmeans_loop.py [--iterations N] [--points N] [--modes M,...]
        [--repeats N] [--quick] [--out DIR]

The loop is benchmarks/workloads/kmeans.py's ``step``, carried --iterations times (default 20) over
--points points (default 1 000) on a grid of 1/1024 (so that every mode's centroids are equal to the
last bit), every iteration's centroids collected (the convergence check). It is the ``kmeans``
workload of benchmarks/run.py, which times plain, memphis and the hand-tuned loop side by side in
one session; this script measures each variant in its own fresh local[2] session with a 1 GB driver
(with spark.sql.optimizer.canChangeCachedPlanOutputPartitioning=true, the tuning memphis gives
itself), the height of the last query's optimized plan, and the memphis counters. Modes:

- plain: the loop as written, memphis off; its lineage grows by a join and two aggregates an iteration;
- hand: ``localCheckpoint()`` (eager: its own job) every 10 iterations, as workloads/kmeans.py's expert;
- hand-lazy: ``localCheckpoint(eager=False)`` every 10 iterations, filled by the next job that reads
  it (hand-lazy / hand: does eager materialization pay?);
- expert-rebuild: the centroids DataFrame rebuilt every iteration from the rows the loop collects
  anyway (``spark.createDataFrame(rows, schema)``): the lineage cut for free, no extra job;
- expert-checkpoint: ``localCheckpoint()`` every iteration;
- memphis: the loop as written, memphis on: each iteration reads the centroids the previous one
  collected, kept on the driver (collected results, spark.memphis.collected.maxBytes);
- memphis-checkpoints: memphis with collected results off (spark.memphis.collected.maxBytes=0): the
  plans grow until memphis cuts them by checkpoints, each iteration's result checkpointed speculatively;
- memphis-nospec: memphis-checkpoints with spark.memphis.loop.speculative=false (each iteration's
  result checkpointed by the next query rather than by the one that computes it: what speculation saves).

By default expert-rebuild, plain, expert-checkpoint and memphis; --modes picks any (the questions
of hand-lazy / hand and memphis-nospec / memphis-checkpoints: --modes
hand,hand-lazy,memphis-checkpoints,memphis-nospec).
Every run's per-iteration centroids must equal the first run's, or the script fails. A process
costs about 10 s to start, and plain's loop up to a minute, so the default is 3 runs per mode
(--repeats; rigor.balanced_order: 12 runs after a warm-up run of expert-rebuild, a cheap mode;
about 7 minutes on 2 cores) rather than rigor's 10, which would take about 25 minutes. Reports the
medians of the loop's seconds with 95 % intervals (with under 6 runs the interval is their whole
range) and every mode's time over the fastest hand-written variant's; writes kmeans_loop.json and
kmeans_loop.md to --out.
--quick: 200 points, 4 iterations, every mode once, all in one process (hand and hand-lazy
checkpointing every 2nd iteration): a check of the answers, not a timing.
"""
import argparse
import json
import os
import subprocess
import sys

from harness import SESSION_TUNING
from rigor import provenance, provenance_line, ratios_to, run_checked, runs_text, seconds_summary, write_results
from workloads.kmeans import CHECKPOINT_EVERY

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
ALL_MODES = ("expert-rebuild", "plain", "hand", "hand-lazy", "expert-checkpoint", "memphis", "memphis-checkpoints",
             "memphis-nospec")
CHECKPOINT_MODES = ("memphis-checkpoints", "memphis-nospec")  # memphis with collected results off
COUNTERS = ("checkpointed", "checkpoints_released", "persisted_speculatively", "results_reused")
DEFAULT_MODES = "expert-rebuild,plain,expert-checkpoint,memphis"  # a cheap one first: it is the warm-up
HAND_WRITTEN = ("hand", "hand-lazy", "expert-rebuild", "expert-checkpoint")
REPEATS = 3  # a run is a process: see the docstring

APP = """
import json, sys, time
import memphis
from pyspark.sql import functions as F

modes, iterations, n, every = sys.argv[1].split(","), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
sys.path.insert(0, sys.argv[5])
from workloads.kmeans import height, points_and_centroids, step

spark = memphis.session("local[2]", app_name="kmeans-loop", **{"spark.ui.enabled": "false",
    "spark.driver.host": "127.0.0.1", "spark.sql.shuffle.partitions": "4", "spark.driver.memory": "1g",
    **json.loads(sys.argv[6])})
spark.sparkContext.setLogLevel("ERROR")
points, first_centroids = points_and_centroids(spark, n)
# On a grid of 1/1024 the sums of coordinates are exact in any order: every mode's centroids are
# equal to the last bit (an average of doubles is not, across partitionings).
points = points.select("pid", *[(F.round(F.col(c) * 1024) / 1024).alias(c) for c in ("x", "y")])


def cut(mode, i, df):
    if mode == "expert-checkpoint":
        return df.localCheckpoint()
    if mode.startswith("hand") and (i + 1) % every == 0:
        return df.localCheckpoint(eager=mode == "hand")
    return df


for mode in modes:
    spark.conf.set("spark.memphis.enabled", str(mode.startswith("memphis")).lower())
    spark.conf.set("spark.memphis.loop.speculative", str(mode != "memphis-nospec").lower())
    if mode in json.loads(sys.argv[7]):
        spark.conf.set("spark.memphis.collected.maxBytes", "0")
    else:
        spark.conf.unset("spark.memphis.collected.maxBytes")
    spark.catalog.clearCache()
    memphis.clear(spark)
    before = memphis.stats(spark)
    start = time.perf_counter()
    centroids, history = first_centroids, []
    for i in range(iterations):
        centroids = cut(mode, i, step(points, centroids))
        rows = centroids.orderBy("cid").collect()
        history.append([list(r) for r in rows])
        if mode == "expert-rebuild":
            centroids = spark.createDataFrame(rows, centroids.schema)
    seconds = time.perf_counter() - start
    after = memphis.stats(spark)
    print(json.dumps({"seconds": seconds, "history": history,
        "optimized_height": height(centroids._jdf.queryExecution().optimizedPlan()),
        **{k: after[k] - before[k] for k in json.loads(sys.argv[8])}}),
        flush=True)
"""


def run(modes, iterations, points, every=CHECKPOINT_EVERY):
    """The loop in one fresh process per call, in each of ``modes`` in turn (each from empty caches):
    a list of (its per-iteration centroids, its figures)."""
    here = os.path.dirname(os.path.abspath(__file__))
    child = subprocess.run([sys.executable, "-c", APP, ",".join(modes), str(iterations), str(points), str(every), here,
                            json.dumps(SESSION_TUNING), json.dumps(CHECKPOINT_MODES), json.dumps(COUNTERS)],
                           capture_output=True, text=True)
    if child.returncode != 0:
        raise RuntimeError(f"kmeans_loop: {','.join(modes)} failed:\n{child.stderr[-3000:]}")
    lines = [json.loads(line) for line in child.stdout.splitlines() if line.startswith("{")]
    return [(figures.pop("history"), figures) for figures in lines]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--points", type=int, default=1000)
    parser.add_argument("--modes", default=DEFAULT_MODES, help=f"any of {','.join(ALL_MODES)}")
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--quick", action="store_true", help="200 points, 4 iterations, every mode once in one process")
    parser.add_argument("--out", default=RESULTS)
    args = parser.parse_args(argv)
    modes = ALL_MODES if args.quick else tuple(args.modes.split(","))
    if unknown := set(modes) - set(ALL_MODES):
        parser.error(f"unknown modes {sorted(unknown)}: expected any of {','.join(ALL_MODES)}")
    if args.quick:  # one process for all modes, hand checkpointing every 2nd of 4 iterations: a check, not a timing
        iterations, points = 4, 200
        ran = dict(zip(modes, run(modes, iterations, points, every=2)))
        samples = run_checked(modes, lambda mode, i: ran[mode], quick=True, desc="kmeans_loop")
    else:
        iterations, points = args.iterations, args.points
        samples = run_checked(modes, lambda mode, i: run([mode], iterations, points)[0], repeats=args.repeats,
                            desc="kmeans_loop")
    results = {m: {**seconds_summary(s), **{k: s[-1][k] for k in ("optimized_height", *COUNTERS)}}
               for m, s in samples.items()}
    hand_written = [m for m in HAND_WRITTEN if m in results]
    best = min(hand_written, key=lambda m: results[m]["median_s"]) if hand_written else None
    report = {"iterations": iterations, "points": points, "centroids": 4, "quick": args.quick,
              "runs_per_mode": min(len(s) for s in samples.values()), "answers_equal": True,
              "best_hand_written": best, "results": results, "ratios": ratios_to(samples, best) if best else {},
              "provenance": provenance()}
    lines = [f"# k-means loop: {iterations} iterations, {points} points, 4 centroids (local[2], 1 GB driver, "
             f"{'all modes in one process' if args.quick else 'a fresh process per run'})", "",
             f"| variant | loop seconds, median [95 % interval] | time / {best or 'best hand-written'}'s | "
             "last optimized plan height | checkpointed | released | speculative | kept rows read |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for mode, r in results.items():
        lines.append(f"| {mode} | {r['median_s']:.3g} [{r['low_s']:.3g}–{r['high_s']:.3g}] | "
                     f"{report['ratios'].get(f'{mode} / {best}', '1' if mode == best else '')} | "
                     f"{r['optimized_height']} | "
                     f"{r['checkpointed']} | {r['checkpoints_released']} | {r['persisted_speculatively']} | "
                     f"{r['results_reused']} |")
    lines += ["", f"Per-iteration centroids equal across all runs; {runs_text(args.quick, report['runs_per_mode'])}; "
              "counters from the last run.", "", provenance_line(report["provenance"])]
    write_results(args.out, "kmeans_loop", report, lines)


if __name__ == "__main__":
    main()
