"""The ML workloads benchmark: every mode answers as plain numpy, a mismatch fails the run, the
results carry intervals, ratios and provenance (timings are not checked). SystemDS is left out
here (its JVMs take half a minute); `make bench-quick` runs it."""
import json

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
