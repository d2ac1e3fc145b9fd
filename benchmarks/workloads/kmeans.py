"""A k-means-style loop over DataFrames: the centroids DataFrame is carried from one iteration to
the next, so its lineage grows by a join and two aggregates per iteration. The ``kmeans``
workload of benchmarks/run.py; also run by benchmarks/kmeans_loop.py and tests/test_checkpoint.py.

Every iteration collects its centroids (the convergence check). ``plain`` and ``memphis`` run the
loop as written (memphis keeps the collected centroids on the driver, and the next iteration's
query reads them as a local relation: what the rebuilding expert below does by hand, without
PySpark's Python RDD); ``expert`` is the best hand-tuned loop: ``localCheckpoint()`` of every
iteration's centroids, so that no plan grows. It was measured against the other cut a user writes,
rebuilding the centroids each iteration from the rows the loop collects
(``spark.createDataFrame(rows, schema)``): at scale 1, 5 balanced repeats each (2026-12-02, a
2-core machine shared with other jobs), rebuilding took 1.53× [1.09–2.28] the checkpointing's
time (medians 11.3 s and 7.4 s), as PySpark makes a list into a Python RDD whose every read starts
Python workers. (The former expert, a checkpoint every 10th iteration, let the plan grow 10
iterations deep.) There is no ``naive`` mode: ``cache()`` on the points and on every iteration's
centroids doubles the plan's explain string per iteration (each cached scan prints the cached plan,
itself holding the previous one, under adaptive execution's initial and final plans), and the
default 1 GB driver ran out of heap building it in the 14th iteration (Spark 4.2.0).
"""
from pyspark.sql import functions as F

from harness import Workload

# memphis reads each iteration's collected centroids (collected results); with them off it cuts the
# lineage by checkpoints from about the 10th iteration on (checkpoint.minHeight 40).
ITERATIONS = 15
CHECKPOINT_EVERY = 10
# At the quick scale (below 0.1; benchmarks/run.py --quick, a check of the answers) the loop runs this many:
# plain Spark's time grows with the square of the iterations (each collect runs every earlier step again),
# and 15 took 121 s of the quick run's 438 s in a full pytest run here.
QUICK_SCALE_ITERATIONS = 8


def points_and_centroids(spark, n):
    """`n` points around 4 corners, and 4 starting centroids off the corners."""
    points = spark.range(n).select(F.col("id").alias("pid"),
        (F.when(F.col("id") % 2 == 0, 0.0).otherwise(10.0) + F.sin(F.col("id") * 12.9898)).alias("x"),
        (F.when(F.col("id") % 4 < 2, 0.0).otherwise(10.0) + F.cos(F.col("id") * 78.233)).alias("y"))
    centroids = spark.range(4).select(F.col("id").cast("int").alias("cid"),
        (F.col("id") * 3).cast("double").alias("cx"), (F.col("id") * 2).cast("double").alias("cy"))
    return points, centroids


def step(points, centroids):
    """One iteration: each point to its nearest centroid, then the new centroids."""
    distances = points.crossJoin(centroids).withColumn(
        "d", (F.col("x") - F.col("cx")) ** 2 + (F.col("y") - F.col("cy")) ** 2)
    nearest = distances.groupBy("pid", "x", "y").agg(F.min(F.struct("d", "cid"))["cid"].alias("cid"))
    return nearest.groupBy("cid").agg(F.avg("x").alias("cx"), F.avg("y").alias("cy"))


def iterate(points, centroids, iterations=ITERATIONS, cut=None, done=lambda i: None, cut_every=CHECKPOINT_EVERY):
    """The loop: ``iterations`` steps, each one's centroids collected; ``cut(df)`` (a checkpoint)
    replaces every ``cut_every``-th iteration's centroids if given. Returns the last centroids
    DataFrame and the rows of every iteration."""
    history = []
    for i in range(iterations):
        centroids = step(points, centroids)
        if cut is not None and (i + 1) % cut_every == 0:
            centroids = cut(centroids)
        history.append([tuple(r) for r in centroids.orderBy("cid").collect()])
        done(i)
    return centroids, history


def loop(spark, inputs, **how):
    """The workload's loop on a few points: 4 shuffle partitions, as a user sets for small data
    (every mode alike; the session's setting is restored after). ``inputs``: prepare's; ``how``:
    iterate's cut options."""
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "4")
    try:
        return iterate(*inputs, **how)[1]
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", partitions)


def height(plan):
    """The height of a JVM plan tree (py4j object)."""
    children = plan.children()
    return 1 + max((height(children.apply(i)) for i in range(children.size())), default=0)


def prepare(spark, scale):
    """The points, the starting centroids and the number of iterations (fewer at the quick scale)."""
    points, centroids = points_and_centroids(spark, int(1000 * scale))
    # Coordinates on a grid of 1/1024: their sums are exact in any order, so every mode's centroids
    # are equal to the last bit (an average of doubles is not, across partitionings).
    grid = [(F.round(F.col(c) * 1024) / 1024).alias(c) for c in ("x", "y")]
    return points.select("pid", *grid), centroids, ITERATIONS if scale >= 0.1 else QUICK_SCALE_ITERATIONS


def workload(directory):
    return Workload(
        name="kmeans",
        description=f"a k-means-style loop of {ITERATIONS} iterations ({QUICK_SCALE_ITERATIONS} below scale 0.1) "
                    "carrying its centroids DataFrame",
        prepare=prepare,
        run=loop,
        expert=lambda spark, inputs: loop(spark, inputs, cut=lambda df: df.localCheckpoint(), cut_every=1),
    )
