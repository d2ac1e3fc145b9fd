"""A k-means-style loop whose centroids DataFrame is carried from iteration to iteration.

Each run is a fresh interpreter with a 1 GB driver (a JVM's heap is fixed when it starts).
"""
import json
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import NO_KEPT_RESULTS, TEST_CONFS, run_python

KMEANS_APP = """
import json, sys
import memphis

modes, iterations = sys.argv[2].split(","), int(sys.argv[3])
sys.path.insert(0, sys.argv[4])
from workloads.kmeans import height, points_and_centroids, step

on = modes == ["memphis"]
spark = memphis.session("local[2]", app_name="memphis-kmeans", **{**json.loads(sys.argv[1]),
                        "spark.driver.memory": "1g", "spark.memphis.enabled": str(on).lower(),
                        "spark.memphis.checkpoint.minHeight": sys.argv[5]})
spark.sparkContext.setLogLevel("ERROR")
results = {}
for mode in modes:
    points, centroids = points_and_centroids(spark, 2000)
    history = []
    for i in range(iterations):
        centroids = step(points, centroids)
        if mode == "hand" and (i + 1) % 10 == 0:
            centroids = centroids.localCheckpoint()
        if mode == "memphis":  # the loop's convergence check: one query per iteration
            history.append((centroids, sorted(map(list, centroids.collect()))))
    # The last ten iterations' DataFrames, run again after later checkpoints superseded their own.
    rerun = [sorted(map(list, df.collect())) == rows for df, rows in history[-10:]]
    last = centroids.orderBy("cid")
    rows = [list(r) for r in last.collect()] if mode != "plain" else None
    qe = last._jdf.queryExecution()
    results[mode] = {"analyzed": height(qe.analyzed()), "optimized": height(qe.optimizedPlan()), "rows": rows,
                     "executed": qe.executedPlan().toString(), "rerun": rerun,
                     "stats": memphis.stats(spark) if mode == "memphis" else None}
print(json.dumps(results))
"""

ITERATIONS = 14
# Past this height memphis cuts the loop (spark.memphis.checkpoint.minHeight, default 40): an iteration adds about
# 4 to the plan, so the cuts begin about the 4th iteration rather than the 10th. Until then each iteration's query
# runs every step before it, the most of this test's time (20 iterations at the default: 77 s, 2026-12-07).
MIN_HEIGHT = 16
BENCHMARKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks")


def run(*modes):
    # Collected results off: the loop collects its centroids every iteration, and their rows would serve
    # the next one, so that no plan grows and nothing is cut (tests/test_collected_results.py).
    return run_python(KMEANS_APP, json.dumps({**TEST_CONFS, **NO_KEPT_RESULTS}), ",".join(modes), str(ITERATIONS),
                      BENCHMARKS, str(MIN_HEIGHT))


@pytest.mark.slow
def test_a_loop_carried_dataframe_is_cut_by_checkpoints_with_the_hand_tuned_answer():
    # memphis's loop, and plain Spark's and the hand-tuned one (memphis off) in a JVM of their own, at once.
    with ThreadPoolExecutor(2) as pool:
        memphis_run, off_runs = pool.submit(run, "memphis"), pool.submit(run, "plain", "hand")
        on, plain, hand = memphis_run.result()["memphis"], off_runs.result()["plain"], off_runs.result()["hand"]
    # Without memphis the lineage grows by a few operators per iteration, all the way to the optimizer.
    assert plain["analyzed"] > 3 * ITERATIONS and plain["optimized"] > 3 * ITERATIONS

    stats = on["stats"]
    # One checkpoint per iteration past MIN_HEIGHT (about 4 iterations), the superseded ones let go:
    # memphis holds two at the end.
    assert stats["checkpointed"] >= ITERATIONS - 6
    assert stats["checkpoints_released"] >= stats["checkpointed"] - 3
    # A DataFrame of an earlier iteration still runs, with its answer: its checkpoint lives as long
    # as something reads it.
    assert on["rerun"] == [True] * 10
    # The user's DataFrame keeps its analyzed plan; what is optimized and run reads the checkpoint.
    assert on["analyzed"] > 3 * ITERATIONS
    assert on["optimized"] < 10 and "ExistingRDD" in on["executed"]

    assert hand["optimized"] < 60
    assert len(on["rows"]) == len(hand["rows"]) >= 2
    for mine, theirs in zip(on["rows"], hand["rows"]):
        assert mine[0] == theirs[0]
        assert abs(mine[1] - theirs[1]) < 1e-9 and abs(mine[2] - theirs[2]) < 1e-9


RELIABLE_APP = """
import gc, json, os, sys, time
import memphis

sys.path.insert(0, sys.argv[2])
from workloads.kmeans import points_and_centroids, step

folder = sys.argv[3]
spark = memphis.session("local[2]", app_name="memphis-reliable", **{**json.loads(sys.argv[1]),
                        "spark.memphis.checkpoint.dir": folder, "spark.memphis.checkpoint.minHeight": "12"})
spark.sparkContext.setLogLevel("ERROR")
points, start = points_and_centroids(spark, 500)


def loop(iterations, written):
    centroids = start
    for i in range(iterations):
        centroids = step(points, centroids)
        if spark.conf.get("spark.memphis.enabled") == "false" and (i + 1) % 5 == 0:
            centroids = centroids.localCheckpoint()  # the plugin-off run, hand-tuned
        rows = sorted(map(list, centroids.collect()))
        if os.path.isdir(app):  # the newest folder is held; older ones may be gone already
            written.update(f for f in os.listdir(app) if os.listdir(os.path.join(app, f)))
    return rows


app = os.path.join(folder, "memphis-" + spark.sparkContext.applicationId)
written = set()
on = loop(16, written)
# Released checkpoints' folders go once nothing can read them; any query polls for them.
for _ in range(20):
    gc.collect()
    spark._jvm.System.gc()
    time.sleep(0.5)
    spark.range(1).count()
    if len(os.listdir(app)) <= 3:
        break
left = len(os.listdir(app))
stats = memphis.stats(spark)
spark.conf.set("spark.memphis.enabled", "false")
off = loop(16, set())
spark.stop()
print(json.dumps({"on": on, "off": off, "written": len(written), "left": left, "stats": stats,
                  "after_stop": os.path.exists(app)}))
"""


@pytest.mark.default_line_only  # every line cuts the loop above; the files of checkpoint.dir are memphis' own
def test_reliable_checkpoints_are_written_under_the_dir_and_deleted_when_released(tmp_path):
    folder = str(tmp_path / "checkpoints")
    result = run_python(RELIABLE_APP, json.dumps({**TEST_CONFS, **NO_KEPT_RESULTS}), BENCHMARKS, folder)
    stats = result["stats"]
    # Past minHeight 12 (about three iterations) each iteration is cut, each cut written to a folder.
    assert stats["checkpointed"] >= 10 and result["written"] >= 10
    assert stats["checkpoints_released"] >= stats["checkpointed"] - 3
    # The released ones' folders are deleted (most already during the loop); the two or three held stay.
    assert result["left"] <= 3 and stats["checkpoint_files_deleted"] >= result["written"] - 3
    assert not result["after_stop"]  # the application's folder goes with it
    assert len(result["on"]) == len(result["off"]) >= 2
    for mine, theirs in zip(result["on"], result["off"]):
        assert mine[0] == theirs[0]
        assert abs(mine[1] - theirs[1]) < 1e-9 and abs(mine[2] - theirs[2]) < 1e-9
