"""A k-means-style loop over DataFrames: the centroids DataFrame is carried from one iteration to
the next, so its lineage grows by a join and two aggregates per iteration. Shared by
benchmarks/kmeans_loop.py and tests/test_checkpoint.py."""
from pyspark.sql import functions as F


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


def height(plan):
    """The height of a JVM plan tree (py4j object)."""
    children = plan.children()
    return 1 + max((height(children.apply(i)) for i in range(children.size())), default=0)
