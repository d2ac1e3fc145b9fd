import numpy as np
import pytest

import memphis


@pytest.fixture
def fresh(spark):
    memphis.clear(spark)
    yield spark
    memphis.clear(spark)
    spark.conf.unset("spark.memphis.broadcast.maxBytes")


def spark_id(bc):
    """The id Spark gave the broadcast (PySpark's object does not show it)."""
    return bc._jbroadcast.id()


def delta(spark, before, *names):
    after = memphis.stats(spark)
    return [after[n] - before[n] for n in names]


def test_the_same_value_is_broadcast_once_and_a_changed_one_anew(fresh):
    spark = fresh
    centroids = np.arange(12.0).reshape(4, 3)
    before = memphis.stats(spark)
    first = memphis.broadcast(spark, centroids)
    again = memphis.broadcast(spark, centroids.copy())  # same content, another object
    assert spark_id(again) == spark_id(first)
    assert delta(spark, before, "local_broadcasts", "local_broadcast_hits") == [1, 1]
    changed = memphis.broadcast(spark, centroids + 1)
    assert spark_id(changed) != spark_id(first)
    rows = spark.sparkContext.parallelize([0, 3]).map(lambda i: float(changed.value[i].sum())).collect()
    assert rows == [float((centroids + 1)[0].sum()), float((centroids + 1)[3].sum())]


def test_an_early_broadcast_is_built_in_the_background_once(fresh):
    spark = fresh
    weights = np.arange(20.0).reshape(5, 4)
    before = memphis.stats(spark)
    future = memphis.broadcast(spark, weights, wait=False)
    original = weights.copy()
    weights[:] = -1.0  # changed by the caller while the broadcast may still be built: it holds the old value
    same = memphis.broadcast(spark, original)  # waits for the early one, builds nothing
    early = future.result(timeout=60)
    assert spark_id(same) == spark_id(early)
    assert delta(spark, before, "local_broadcasts", "local_broadcast_hits", "local_broadcasts_early") == [1, 1, 1]
    sums = spark.sparkContext.parallelize([0, 4]).map(lambda i: float(early.value[i].sum())).collect()
    assert sums == [float(original[0].sum()), float(original[4].sum())]


def test_traced_values_are_keyed_by_lineage(fresh):
    spark = fresh
    x = memphis.array(np.ones((50, 4)))
    first = memphis.broadcast(spark, x.T @ x)
    assert spark_id(memphis.broadcast(spark, x.T @ x)) == spark_id(first)
    assert isinstance(first.value, np.ndarray)  # executors get plain numpy


def test_clear_destroys_them(fresh):
    spark = fresh
    held = memphis.broadcast(spark, {"weights": np.zeros(100)})
    memphis.clear(spark)
    assert not held._jbroadcast.isValid()
    assert spark_id(memphis.broadcast(spark, {"weights": np.zeros(100)})) != spark_id(held)


def test_the_budget_lets_the_least_recently_used_go(fresh):
    spark = fresh
    spark.conf.set("spark.memphis.broadcast.maxBytes", "1k")
    before = memphis.stats(spark)
    for offset in range(3):
        memphis.broadcast(spark, np.full(100, float(offset)))  # 800 bytes each: one fits
    assert delta(spark, before, "local_broadcasts_evicted") == [2]
    assert memphis.stats(spark)["bytes_held_broadcast"] <= 1024
