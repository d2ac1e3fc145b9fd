"""A k-means-style loop whose centroids DataFrame is carried from iteration to iteration.

Each run is a fresh interpreter with a 1 GB driver (a JVM's heap is fixed when it starts).
"""
import json

from conftest import TEST_CONFS, run_python

KMEANS_APP = """
import json, sys
import memphis
from pyspark.sql import functions as F

mode, iterations = sys.argv[2], int(sys.argv[3])
spark = memphis.session("local[2]", app_name="memphis-kmeans", **{**json.loads(sys.argv[1]),
                        "spark.driver.memory": "1g", "spark.memphis.enabled": str(mode == "memphis").lower()})
spark.sparkContext.setLogLevel("ERROR")

def height(plan):
    children = plan.children()
    return 1 + max((height(children.apply(i)) for i in range(children.size())), default=0)

# 2 000 points around 4 corners; centroids start off the corners.
points = spark.range(2000).select(F.col("id").alias("pid"),
    (F.when(F.col("id") % 2 == 0, 0.0).otherwise(10.0) + F.sin(F.col("id") * 12.9898)).alias("x"),
    (F.when(F.col("id") % 4 < 2, 0.0).otherwise(10.0) + F.cos(F.col("id") * 78.233)).alias("y"))
centroids = spark.range(4).select(F.col("id").cast("int").alias("cid"), (F.col("id") * 3).cast("double").alias("cx"),
    (F.col("id") * 2).cast("double").alias("cy"))
history = []
for i in range(iterations):
    distances = points.crossJoin(centroids).withColumn(
        "d", (F.col("x") - F.col("cx")) ** 2 + (F.col("y") - F.col("cy")) ** 2)
    nearest = distances.groupBy("pid", "x", "y").agg(F.min(F.struct("d", "cid"))["cid"].alias("cid"))
    centroids = nearest.groupBy("cid").agg(F.avg("x").alias("cx"), F.avg("y").alias("cy"))
    if mode == "hand" and (i + 1) % 10 == 0:
        centroids = centroids.localCheckpoint()
    if mode == "memphis":  # the loop's convergence check: one query per iteration
        history.append((centroids, sorted(map(list, centroids.collect()))))
# An early iteration's DataFrame, run again after later checkpoints superseded its own.
rerun = [sorted(map(list, df.collect())) == rows for df, rows in history[10:20]]
last = centroids.orderBy("cid")
rows = [list(r) for r in last.collect()] if mode != "plain" else None
qe = last._jdf.queryExecution()
print(json.dumps({"analyzed": height(qe.analyzed()), "optimized": height(qe.optimizedPlan()), "rows": rows,
                  "executed": qe.executedPlan().toString(), "rerun": rerun,
                  "stats": memphis.stats(spark) if mode == "memphis" else None}))
"""

ITERATIONS = 50


def run(mode):
    return run_python(KMEANS_APP, json.dumps(TEST_CONFS), mode, str(ITERATIONS))


def test_a_loop_carried_dataframe_is_cut_by_checkpoints_with_the_hand_tuned_answer():
    plain = run("plain")
    # Without memphis the lineage grows by a few operators per iteration, all the way to the optimizer.
    assert plain["analyzed"] > 150 and plain["optimized"] > 150

    on = run("memphis")
    stats = on["stats"]
    # One checkpoint per iteration past spark.memphis.checkpoint.minHeight (40, about 10 iterations),
    # the superseded ones let go: memphis holds two at the end.
    assert stats["checkpointed"] >= ITERATIONS - 15
    assert stats["checkpoints_released"] >= stats["checkpointed"] - 3
    # A DataFrame of an earlier iteration still runs, with its answer: its checkpoint lives as long
    # as something reads it.
    assert on["rerun"] == [True] * 10
    # The user's DataFrame keeps its analyzed plan; what is optimized and run reads the checkpoint.
    assert on["analyzed"] > 150
    assert on["optimized"] < 10 and "ExistingRDD" in on["executed"]

    hand = run("hand")
    assert hand["optimized"] < 60
    assert len(on["rows"]) == len(hand["rows"]) >= 2
    for mine, theirs in zip(on["rows"], hand["rows"]):
        assert mine[0] == theirs[0]
        assert abs(mine[1] - theirs[1]) < 1e-9 and abs(mine[2] - theirs[2]) < 1e-9
