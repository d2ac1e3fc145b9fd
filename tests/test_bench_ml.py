"""The ML workloads' quick mode: every mode runs and answers as plain numpy (timings are not checked).
SystemDS is left out here (a JVM per run takes a minute in all); `make bench-quick` runs it."""
import json

import ml_workloads  # from benchmarks/, which conftest puts on the path


def test_quick_mode_runs_every_mode_and_writes_json_table_and_plot(tmp_path):
    assert ml_workloads.main(["--quick", "--no-spark", "--no-systemds", "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "ml_workloads.json").read_text())
    assert set(results["workloads"]) == set(ml_workloads.ml.WORKLOADS)
    for workload in results["workloads"].values():
        assert set(workload["modes"]) == set(ml_workloads.MODES)
        for run in workload["modes"].values():
            assert run["min_s"] <= run["median_s"] <= run["max_s"]
    assert results["workloads"]["grid_10_lambda"]["modes"]["memphis"]["counters"]["hits"] > 0
    assert results["systemds"]["status"] == "skipped: --no-systemds"
    assert "| grid_10_lambda |" in (tmp_path / "ml_workloads.md").read_text()
    assert (tmp_path / "ml_workloads.png").stat().st_size > 0
