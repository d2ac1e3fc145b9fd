"""The Spark benchmark scripts (run_all.py, broadcast_joins.py, kmeans_loop.py, lineage_keys.py,
connect_calls.py): every mode runs, every run's answer is checked, results record where they came from."""
import json
import os
import subprocess
import sys
from collections import Counter

import pytest

BENCHMARKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks")
sys.path.insert(0, BENCHMARKS)
import kmeans_loop  # noqa: E402
from rigor import AnswerMismatch, balanced_order, run_checked  # noqa: E402


def test_the_modes_run_in_rigors_balanced_order_and_the_warm_up_is_not_kept():
    ran = []
    samples = run_checked(("a", "b", "c"), lambda mode, i: (ran.append(mode) or 42, {"seconds": 1.0}), repeats=4)
    assert ran == balanced_order(("a", "b", "c"), 4)
    assert {m: len(s) for m, s in samples.items()} == {m: n - (m == ran[0]) for m, n in Counter(ran).items()}


def test_quick_runs_every_mode_once_and_keeps_it():
    samples = run_checked(("a", "b"), lambda mode, i: (0, {"seconds": 1.0}), quick=True)
    assert {m: len(s) for m, s in samples.items()} == {"a": 1, "b": 1}


def test_a_run_answering_differently_fails_at_once():
    ran = []

    def run_one(mode, i):
        ran.append(mode)
        return (1 if mode == "wrong" else 0), {"seconds": 1.0}

    with pytest.raises(AnswerMismatch, match="wrong"):
        run_checked(("right", "wrong"), run_one, repeats=3)
    assert ran == ["right", "wrong"]


def test_kmeans_loop_fails_when_a_variant_computes_other_centroids(monkeypatch, tmp_path):
    def run(modes, iterations, points, every=10):
        return [([[0, 1.0 if mode == "expert-rebuild" else 2.0, 0.0]], {"seconds": 1.0}) for mode in modes]

    monkeypatch.setattr(kmeans_loop, "run", run)
    with pytest.raises(AnswerMismatch):
        kmeans_loop.main(["--quick", "--out", str(tmp_path)])
    assert not os.listdir(tmp_path)  # no results file for a run whose answers differ


def run_quick(tmp_path, script, *flags, name=None):
    """``script --quick`` in a process of its own: the report it wrote, after checking that its
    results record where they came from."""
    result = subprocess.run([sys.executable, os.path.join(BENCHMARKS, script), *flags, "--quick", "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    name = name or script.replace(".py", "")
    report = json.loads((tmp_path / f"{name}.json").read_text())
    assert report["quick"] and report["provenance"]["commit"]
    assert "commit " in (tmp_path / f"{name}.md").read_text()
    return report


@pytest.mark.slow
@pytest.mark.parametrize("script, modes", [
    ("run_all.py", {"plain", "expert", "sequential", "run_all"}),
    ("broadcast_joins.py", {"plain", "expert", "memphis"}),
    ("kmeans_loop.py", set(kmeans_loop.ALL_MODES)),
])
def test_quick_runs_every_mode_and_records_its_provenance(tmp_path, script, modes):
    report = run_quick(tmp_path, script)
    assert report["answers_equal"]
    assert set(report.get("modes") or report["results"]) == modes
    assert report["provenance"]["machine"]["cpus"]


@pytest.mark.slow
@pytest.mark.parametrize("command, name", [
    (["lineage_keys.py"], "lineage_keys"),
    (["connect_calls.py"], "connect_calls_classic"),
    (["connect_calls.py", "--serve"], "connect_calls_connect"),
])
def test_the_timing_scripts_run_quick_and_record_their_provenance(tmp_path, command, name):
    run_quick(tmp_path, *command, name=name)
