"""Iterative k-means-like loop (issue 7, benchmark 1): plain Spark, hand-placed localCheckpoint, memphis.

    PYTHONPATH=python .venv/bin/python benchmarks/kmeans_loop.py [--iterations N] [--points N] [--out DIR]

Each variant runs in its own fresh local[2] session (1 GB driver): --points generated points
(default 2 000) and 4 centroids; each iteration joins the points with the current centroids,
assigns each point to its nearest and averages the new centroids, then collects them (the
convergence check). plain: memphis off; hand: memphis off, `localCheckpoint()` (eager: its own
job) every 10 iterations; hand-lazy: the same with `localCheckpoint(eager=False)` (filled by the
next job that reads it), which measures whether eager materialization pays; memphis: memphis on,
no change to the loop; memphis-nospec: memphis on with spark.memphis.loop.speculative=false (each
iteration's result checkpointed by the next query, not by the one that computes it), which
measures speculation. --modes picks variants. Reports wall time, the height of the last
query's optimized plan and the memphis counters; writes kmeans_loop.json and kmeans_loop.md.
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
from workloads.kmeans import height, points_and_centroids, step

spark = memphis.session("local[2]", app_name="kmeans-loop", **{"spark.ui.enabled": "false",
    "spark.driver.host": "127.0.0.1", "spark.sql.shuffle.partitions": "4", "spark.driver.memory": "1g",
    "spark.memphis.enabled": str(mode.startswith("memphis")).lower(),
    "spark.memphis.loop.speculative": str(mode != "memphis-nospec").lower()})
spark.sparkContext.setLogLevel("ERROR")
points, centroids = points_and_centroids(spark, n)
start = time.time()
for i in range(iterations):
    centroids = step(points, centroids)
    if mode.startswith("hand") and (i + 1) % 10 == 0:
        centroids = centroids.localCheckpoint(eager=mode == "hand")
    rows = centroids.orderBy("cid").collect()
    print("ITER", i, flush=True)
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
    parser.add_argument("--modes", default="plain,hand,hand-lazy,memphis")
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
