"""Iterative k-means-like loop, each variant in a fresh process with a 1 GB driver: plain Spark,
hand-placed localCheckpoint (eager or lazy), memphis.

    PYTHONPATH=python .venv/bin/python benchmarks/kmeans_loop.py [--iterations N] [--points N] [--modes M,...] [--out DIR]

The same loop (benchmarks/workloads/kmeans.py) is the ``kmeans`` workload of benchmarks/run.py,
which times plain, memphis and the hand-tuned loop side by side in one session. This script
measures what that one does not: each variant in its own fresh local[2] session with a 1 GB
driver, the height of the last query's optimized plan, whether eager materialization of the
hand-placed checkpoints pays (hand: `localCheckpoint()`, its own job, every 10 iterations;
hand-lazy: `localCheckpoint(eager=False)`, filled by the next job that reads it), and what
speculation saves (memphis-nospec: memphis with spark.memphis.loop.speculative=false, each
iteration's result checkpointed by the next query rather than by the one that computes it). By
default it runs hand and hand-lazy (20 iterations, 1 000 points); --modes picks any of
plain,hand,hand-lazy,memphis,memphis-nospec. Reports wall time, plan height and the memphis
counters; writes kmeans_loop.json and kmeans_loop.md.
"""
import argparse
import json
import os
import platform
import subprocess
import sys

from tqdm import tqdm

# (a, b): report a's time over b's when both ran; hand-lazy / hand is the eager-materialization question.
RATIOS = (("memphis", "hand"), ("plain", "memphis"), ("hand-lazy", "hand"), ("memphis-nospec", "memphis"))
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")

APP = """
import json, sys, time
import memphis

mode, iterations, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
sys.path.insert(0, sys.argv[4])
from workloads.kmeans import height, iterate, points_and_centroids

spark = memphis.session("local[2]", app_name="kmeans-loop", **{"spark.ui.enabled": "false",
    "spark.driver.host": "127.0.0.1", "spark.sql.shuffle.partitions": "4", "spark.driver.memory": "1g",
    "spark.memphis.enabled": str(mode.startswith("memphis")).lower(),
    "spark.memphis.loop.speculative": str(mode != "memphis-nospec").lower()})
spark.sparkContext.setLogLevel("ERROR")
points, centroids = points_and_centroids(spark, n)
start = time.time()
cut = (lambda df: df.localCheckpoint(eager=mode == "hand")) if mode.startswith("hand") else None
centroids, history = iterate(points, centroids, iterations, cut=cut, done=lambda i: print("ITER", i, flush=True))
rows = history[-1]
seconds = time.time() - start
stats = memphis.stats(spark)
print(json.dumps({"seconds": round(seconds, 2), "optimized_height": height(centroids._jdf.queryExecution().optimizedPlan()),
    "centroids": [list(r) for r in rows], "checkpointed": stats["checkpointed"],
    "checkpoints_released": stats["checkpoints_released"], "speculative": stats["persisted_speculatively"]}))
"""


def run(mode, iterations, points, bar):
    here = os.path.dirname(os.path.abspath(__file__))
    proc = subprocess.Popen([sys.executable, "-c", APP, mode, str(iterations), str(points), here],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    last = None
    for line in proc.stdout:
        if line.startswith("ITER"):
            bar.update(1)
        elif line.strip():
            last = line
    assert proc.wait() == 0, f"{mode} failed"
    return json.loads(last)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--points", type=int, default=1000)
    parser.add_argument("--out", default=RESULTS)
    parser.add_argument("--modes", default="hand,hand-lazy")
    args = parser.parse_args()
    modes = args.modes.split(",")
    results = {}
    with tqdm(total=args.iterations * len(modes), desc="kmeans_loop") as bar:
        for mode in modes:
            bar.set_postfix(mode=mode)
            results[mode] = run(mode, args.iterations, args.points, bar)
    ratios = {f"{a}_vs_{b}": round(results[a]["seconds"] / results[b]["seconds"], 2)
              for a, b in RATIOS if a in results and b in results}
    report = {"iterations": args.iterations, "points": args.points, "centroids": 4, "machine": platform.platform(),
              "cpus": os.cpu_count(), "results": results, **ratios}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "kmeans_loop.json"), "w") as f:
        json.dump(report, f, indent=2)
    lines = [f"# k-means loop: {args.iterations} iterations, {args.points} points, 4 centroids (local[2], 1 GB driver)",
             "", "| variant | seconds | last optimized plan height | checkpointed | released | speculative |",
             "|---|---|---|---|---|---|"]
    for mode in modes:
        r = results[mode]
        lines.append(f"| {mode} | {r['seconds']} | {r['optimized_height']} | {r['checkpointed']} | "
                     f"{r['checkpoints_released']} | {r['speculative']} |")
    lines += ["", "; ".join(f"{name.replace('_vs_', ' / ')}: {ratio}x" for name, ratio in ratios.items()), ""]
    with open(os.path.join(args.out, "kmeans_loop.md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
