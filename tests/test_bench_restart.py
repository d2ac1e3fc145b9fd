"""benchmarks/restart.py: a notebook restart in every mode, every answer checked across both processes."""
import json
import os
import subprocess
import sys

import pytest

BENCHMARKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks")
sys.path.insert(0, BENCHMARKS)
import restart  # noqa: E402
from rigor import AnswerMismatch  # noqa: E402


def test_a_mode_answering_differently_fails_and_writes_no_results(monkeypatch, tmp_path):
    def process(mode, confs, tables, scale, expert_dir, workload, quick=False):
        if mode == "prepare":
            return {}
        wrong = mode == "durable" and confs["spark.memphis.durable.dir"] != "none"
        return {"answers": [[[1, 2.5 if wrong else 2.0]]], "seconds": 1.0, "wait_s": 0.0, "hits": 0, "persisted": 0,
                "durable_hits": 0, "durable_writes": 0, "durable_bytes_written": 0}

    monkeypatch.setattr(restart, "process", process)
    with pytest.raises(AnswerMismatch, match="durable"):
        restart.main(["--quick", "--out", str(tmp_path)])
    assert not os.listdir(tmp_path)  # no results file for a run whose answers differ


def test_a_rerun_answering_differently_from_its_first_process_fails(monkeypatch, tmp_path):
    ran = {"n": 0}

    def process(mode, confs, tables, scale, expert_dir, workload, quick=False):
        ran["n"] += 1
        return {} if mode == "prepare" else {
            "answers": [[[ran["n"] if mode == "expert" else 0]]], "seconds": 1.0, "wait_s": 0.0, "hits": 0,
            "persisted": 0, "durable_hits": 0, "durable_writes": 0, "durable_bytes_written": 0}

    monkeypatch.setattr(restart, "process", process)
    with pytest.raises(AnswerMismatch, match="expert"):
        restart.main(["--quick", "--out", str(tmp_path)])


@pytest.mark.slow
@pytest.mark.parametrize("workload, name", [("tpch_session", "restart"), ("demo", "restart_demo")])
def test_quick_runs_every_mode_and_the_rerun_reads_the_durable_tier(tmp_path, workload, name):
    result = subprocess.run([sys.executable, os.path.join(BENCHMARKS, "restart.py"), "--quick", "--workload", workload,
                             "--out", str(tmp_path)], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / f"{name}.json").read_text())
    assert report["answers_equal"] and report["quick"] and set(report["modes"]) == set(restart.MODES)
    assert report["workload"] == workload
    durable = report["modes"]["durable"]
    assert durable["bytes_written"] > 0 and durable["rerun_durable_hits"] > 0
    assert report["modes"]["memory"]["rerun_durable_hits"] == 0 and report["modes"]["memory"]["bytes_written"] == 0
    assert report["provenance"]["commit"] and "commit " in (tmp_path / f"{name}.md").read_text()
