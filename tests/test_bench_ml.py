"""The ML workloads benchmark: every mode answers as plain numpy, a mismatch fails the run, the
results carry intervals, ratios and provenance (timings are not checked). SystemDS and the grid
fed from Spark (JVMs that take half a minute) run only in the slow test."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import memphis.local
import ml_workloads  # from benchmarks/, which conftest puts on the path
from workloads import ml


def test_quick_mode_runs_every_mode_and_writes_json_table_and_plot(tmp_path):
    assert ml_workloads.main(["--quick", "--no-spark", "--no-systemds", "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "ml_workloads.json").read_text())
    workloads = results["scales"]["0.02"]["workloads"]
    assert set(workloads) == set(ml.WORKLOADS)
    for name, workload in workloads.items():
        expected = set(ml_workloads.run_order(name, 1, True))
        assert set(workload["modes"]) == expected >= {"numpy", "hoisted", "memphis", "joblib"}
        assert ("sklearn" in expected) == (name in ml.SKLEARN)
        for run in workload["modes"].values():
            assert len(run["seconds"]) == 1 and run["max_deviation"] <= ml_workloads.RTOL
        assert workload["ratios"]["memphis / hoisted"] is not None
    assert "joblib_second_process" in workloads["grid_10_lambda"]["modes"]
    assert workloads["grid_10_lambda"]["modes"]["memphis"]["counters"]["hits"] > 0
    assert results["provenance"]["commit"]
    assert results["systemds"] == "skipped: --no-systemds"
    table = (tmp_path / "ml_workloads.md").read_text()
    assert "| grid_10_lambda |" in table and "commit " in table
    assert (tmp_path / "ml_workloads.png").stat().st_size > 0


@pytest.mark.slow
def test_quick_mode_with_systemds_and_the_grid_fed_from_spark(tmp_path):
    """`make bench-quick`'s run, in a process of its own (its Spark session is its own)."""
    result = subprocess.run([sys.executable, ml_workloads.__file__, "--quick", "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=900, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads((tmp_path / "ml_workloads.json").read_text())
    assert results["systemds"].startswith("SystemDS ")
    fed = results["fed_from_spark"]
    assert fed["collect_1_spark_jobs"] > 0 and fed["collect_2_spark_jobs"] == 0  # the second collect is held
    for name, workload in results["scales"]["0.02"]["workloads"].items():
        # SystemDS runs every workload it has a script for (benchmarks/systemds/<workload>.dml).
        has_script = os.path.exists(os.path.join(ml_workloads.SYSTEMDS_SCRIPTS, f"{name}.dml"))
        assert ({"systemds", "systemds_reuse"} <= set(workload["modes"])) == has_script, name
        assert all(run["max_deviation"] <= ml_workloads.RTOL for run in workload["modes"].values())


def test_hoisted_and_sklearn_answer_as_the_naive_workloads():
    X, y = ml.data(600, seed=5)
    for name, workload in ml.WORKLOADS.items():
        reference = workload(X, y, ml_workloads.same, ml_workloads.same)
        assert ml_workloads.deviation(ml.HOISTED[name](X, y), reference) <= ml_workloads.RTOL
        if name in ml.SKLEARN:
            assert ml_workloads.deviation(ml.SKLEARN[name](X, y, None), reference) <= ml_workloads.RTOL


def test_a_different_answer_fails_the_run(monkeypatch, tmp_path):
    wrong = lambda X, y: [w + 1e-6 for w in ml.grid_hoisted(X, y)]  # noqa: E731
    monkeypatch.setitem(ml.HOISTED, "grid_10_lambda", wrong)
    with pytest.raises(AssertionError, match="hoisted answered differently"):
        ml_workloads.main(["--quick", "--no-spark", "--no-systemds", "--workloads", "grid_10_lambda",
                           "--out", str(tmp_path)])


def test_a_sweep_reports_growth_and_a_small_host_budget_evicts(tmp_path):
    try:
        assert ml_workloads.main(["--scale", "0.02,0.04", "--repeats", "1", "--host-budget", "100k", "--no-spark",
                                  "--no-systemds", "--skip", "joblib,joblib_second_process",
                                  "--workloads", "pca_k_sweep", "--out", str(tmp_path)]) == 0
    finally:
        memphis.local.configure()  # the process's tier as the confs make it, for the tests after this one
    results = json.loads((tmp_path / "ml_workloads.json").read_text())
    assert set(results["growth"]["pca_k_sweep"]["0.02 → 0.04"]) == {"numpy", "hoisted", "memphis", "sklearn"}
    counters = results["scales"]["0.04"]["workloads"]["pca_k_sweep"]["modes"]["memphis"]["counters"]
    assert counters["evicted"] > 0 and counters["host_bytes"] <= 100 * 1024
    assert "host-tier pressure" in (tmp_path / "ml_workloads.md").read_text()


def test_deviation_is_relative_and_raises_on_a_mismatch():
    assert ml_workloads.deviation([np.array([1.0, 2.0])], [np.array([1.0, 2.0 * (1 + 1e-12)])]) < 1e-11
    with pytest.raises(AssertionError):
        ml_workloads.deviation([np.array([1.0])], [np.array([1.0 + 1e-6])])
    with pytest.raises(AssertionError):
        ml_workloads.deviation([np.array([1.0])], [])
