"""A DataFrame collected to the GPU crosses Spark and the host → device link once."""
import numpy as np
import pytest

import memphis
import memphis.gpu
from conftest import job_count


def test_the_same_frame_collected_to_the_gpu_twice_is_transferred_once(spark, gpu_tier, device):
    gpu = gpu_tier(64 << 20)
    frame = spark.range(4000).selectExpr("id", "CAST(id % 7 AS DOUBLE) AS x", "id * 0.5 AS y")
    first, jobs_first = job_count(spark, "gpu-collect-1", lambda: memphis.collect(frame, device="gpu", as_="numpy"))
    again, jobs_again = job_count(spark, "gpu-collect-2", lambda: memphis.collect(frame, device="gpu", as_="numpy"))
    assert jobs_first >= 1 and jobs_again == 0
    assert gpu.stats()["copies_to_device"] == 1 and device.is_array(again)
    np.testing.assert_array_equal(device.copy_to_host(again), frame.toPandas().to_numpy(dtype=float))
    # The host path finds the same Arrow result: no Spark job either.
    _, jobs_host = job_count(spark, "gpu-collect-host", lambda: memphis.collect(frame, as_="numpy"))
    assert jobs_host == 0


def test_frames_need_cudf_on_the_simulated_device(spark, local_tier):
    memphis.gpu.configure(device="simulated", capacity_bytes="64m")
    try:
        with pytest.raises(TypeError, match="as_='numpy'"):
            memphis.collect(spark.range(3), device="gpu")
    finally:
        memphis.gpu.configure(device="none")
