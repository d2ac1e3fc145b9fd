import threading

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import memphis
import memphis.local as ml
from memphis.spark.collect import to_arrow
from conftest import job_count


@pytest.fixture
def frame(spark):
    return spark.range(5000).selectExpr("id", "CAST(id % 7 AS DOUBLE) AS x", "id * 0.5 AS y")


def test_a_second_collect_runs_no_spark_job(spark, local_tier, frame):
    first, jobs_first = job_count(spark, "collect-1", lambda: memphis.collect(frame, as_="pandas"))
    again, jobs_again = job_count(spark, "collect-2", lambda: memphis.collect(frame, as_="pandas"))
    assert jobs_first >= 1 and jobs_again == 0
    expected = frame.toPandas()
    pd.testing.assert_frame_equal(first, expected)
    pd.testing.assert_frame_equal(again, expected)
    table = memphis.collect(frame)
    assert isinstance(table, pa.Table) and table.num_rows == 5000
    np.testing.assert_array_equal(memphis.collect(frame, as_="numpy"), expected.to_numpy(dtype=float))


def test_same_key_other_column_names_keep_their_names(spark, local_tier):
    a = spark.range(100).selectExpr("id * 2 AS x")
    b = spark.range(100).selectExpr("2 * id AS y")  # the same lineage key: aliases do not count
    assert memphis.collect(a).column_names == ["x"] and memphis.collect(b).column_names == ["y"]


def test_a_changed_parquet_source_is_collected_fresh(spark, local_tier, tmp_path):
    path = str(tmp_path / "source")
    spark.range(100).selectExpr("id", "CAST(id * 1.5 AS DOUBLE) AS v").write.parquet(path)
    before = memphis.collect(spark.read.parquet(path), as_="pandas")
    pq.write_table(pa.table({"id": pa.array([1000], pa.int64()), "v": [1.0]}), f"{path}/part-added.parquet")
    changed = spark.read.parquet(path)
    after, jobs = job_count(spark, "collect-changed", lambda: memphis.collect(changed, as_="pandas"))
    assert len(before) == 100 and len(after) == 101 and jobs >= 1
    pd.testing.assert_frame_equal(after.sort_values("id", ignore_index=True),
                                  changed.toPandas().sort_values("id", ignore_index=True))


def test_prefetch_returns_a_future_of_the_same_data(spark, local_tier, frame):
    future = memphis.collect(frame, prefetch=True, as_="numpy")
    X = future.result(timeout=120)
    again, jobs = job_count(spark, "collect-after-prefetch", lambda: memphis.collect(frame, as_="numpy"))
    assert jobs == 0 and np.array_equal(X, again)


def test_a_collect_asked_while_a_prefetch_runs_waits_for_it(spark, local_tier):
    df = spark.range(6000).selectExpr("id AS k", "id % 13 AS r")
    sc = spark.sparkContext
    sc.setJobGroup("prefetch-in-flight", "prefetch-in-flight")  # the prefetch thread takes it over
    try:
        future = memphis.collect(df, prefetch=True, as_="pandas")
        now = memphis.collect(df, as_="pandas")  # at once, most likely while the prefetch runs
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    prefetched = future.result(timeout=120)
    _, alone = job_count(spark, "prefetch-alone", lambda: to_arrow(df))
    assert len(sc.statusTracker().getJobIdsForGroup("prefetch-in-flight")) == alone >= 1
    expected = df.toPandas().sort_values("k", ignore_index=True)
    for result in (now, prefetched):
        pd.testing.assert_frame_equal(result.sort_values("k", ignore_index=True), expected)
    assert ml.stats()["misses"] == 1


def test_threads_collecting_one_frame_run_one_set_of_jobs(spark, local_tier, frame):
    sc, results = spark.sparkContext, [None] * 4

    def ask(i):
        sc.setJobGroup("collect-threads", "collect-threads")  # per thread: local properties are
        results[i] = memphis.collect(frame)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    _, alone = job_count(spark, "collect-alone", lambda: to_arrow(frame))
    assert len(sc.statusTracker().getJobIdsForGroup("collect-threads")) == alone
    assert all(r.equals(results[0]) for r in results)
    assert ml.stats()["misses"] == 1 and ml.stats()["hits"] == 3


def test_no_key_no_reuse(spark, local_tier):
    df = spark.range(10).selectExpr("rand() AS r")  # unseeded: no lineage key
    assert memphis.collect(df).num_rows == 10 and ml.stats()["refused"] == 1


def test_what_collect_refuses(spark, local_tier, frame):
    import memphis.gpu

    memphis.gpu.configure(device="none")
    with pytest.raises(memphis.gpu.NoGpuError, match="device='simulated'"):
        memphis.collect(frame, device="gpu")
    with pytest.raises(ValueError, match="device"):
        memphis.collect(frame, device="tpu")
    with pytest.raises(ValueError, match="as_"):
        memphis.collect(frame, as_="list")
    with pytest.raises(TypeError, match=r"not numeric: s \(string\)"):
        memphis.collect(spark.range(3).selectExpr("id", "CAST(id AS STRING) AS s"), as_="numpy")
