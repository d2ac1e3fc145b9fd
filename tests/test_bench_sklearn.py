"""The scikit-learn pipelines benchmark: every case runs in every mode, every run's answer is
checked, results record where they came from (timings are not checked)."""
import json

import pytest

import memphis.sklearn
import sklearn_pipelines  # from benchmarks/, which conftest puts on the path
from rigor import AnswerMismatch


def test_quick_mode_runs_every_case_in_every_mode_and_records_its_provenance(tmp_path):
    assert sklearn_pipelines.main(["--quick", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "sklearn_pipelines.json").read_text())
    assert report["answers_equal"] and report["quick"] and set(report["cases"]) == set(sklearn_pipelines.CASES)
    for case in report["cases"].values():
        assert set(case["modes"]) == set(sklearn_pipelines.MODES)
        assert case["modes"]["memphis"]["hits"] > 0 and case["modes"]["joblib"]["hashing_s"] > 0
        assert "memphis / none" in case["ratios"] and "memphis / joblib" in case["ratios"]
    assert report["provenance"]["commit"] and report["provenance"]["machine"]["cpus"]
    table = (tmp_path / "sklearn_pipelines.md").read_text()
    assert "| pca_ridge (20 candidates) | memphis |" in table and "commit " in table


class ShiftingMemory(memphis.sklearn.Memory):
    """A broken cache: every transformed array it hands out is off by one."""

    def cache(self, func=None, ignore=None):
        def shifted(*args, **kwargs):
            Xt, fitted = func(*args, **kwargs)
            return Xt + 1.0, fitted
        return shifted


def test_a_memory_that_answers_differently_fails_the_run(monkeypatch, tmp_path):
    monkeypatch.setattr(memphis.sklearn, "memory", ShiftingMemory)
    with pytest.raises(AnswerMismatch, match="mode memphis"):
        sklearn_pipelines.main(["--quick", "--cases", "pca_ridge", "--out", str(tmp_path)])
    assert not (tmp_path / "sklearn_pipelines.json").exists()  # no results file for a run whose answers differ
