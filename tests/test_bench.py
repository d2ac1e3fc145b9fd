import json
import os
import subprocess
import sys

import pytest
from pyspark.sql import functions as F

BENCHMARKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks")
sys.path.insert(0, BENCHMARKS)
from harness import AnswerMismatch, Workload, markdown_table, plot_speedups, run_workload  # noqa: E402
from workloads import ALL  # noqa: E402


def grouped_sums(spark, n):
    return sorted(tuple(r) for r in spark.range(n).groupBy((F.col("id") % 5).alias("k"))
                  .agg(F.sum("id")).collect())


def test_every_mode_runs_and_reports(spark):
    workload = Workload("sums", "grouped sums", lambda spark, scale: int(1000 * scale), grouped_sums)
    report = run_workload(spark, workload, scale=2, repeats=2, progress=False)
    assert report["workload"] == "sums" and report["scale"] == 2
    assert list(report["modes"]) == ["plain", "memphis"]
    for run in report["modes"].values():
        assert len(run["seconds"]) == 2
        assert run["min_s"] <= run["median_s"] <= run["max_s"]
        assert run["counters"]["storage_budget_bytes"] > 0
        assert run["counters"]["hits"] == 0
    table = markdown_table([report])
    assert table.splitlines()[0].startswith("| workload | scale | plain s | memphis s | speedup memphis | hits |")
    assert table.splitlines()[2].startswith("| sums | 2 |")


def test_every_mode_warms_up_and_each_repeat_runs_every_mode_once(spark):
    """The modes run after a warm-up run of each, in a shuffled order per repeat (a run's time
    depends on the run before it); the mode of each run is read from the session's conf."""
    ran = []

    def run(spark, n):
        ran.append(spark.conf.get("spark.memphis.enabled"))
        return grouped_sums(spark, n)

    run_workload(spark, Workload("sums", "grouped sums", lambda spark, scale: 100, run), repeats=4, progress=False)
    assert ran[:2] == ["false", "true"]
    repeats = [ran[i:i + 2] for i in range(2, len(ran), 2)]
    assert len(repeats) == 4 and all(sorted(r) == ["false", "true"] for r in repeats)
    assert len({tuple(r) for r in repeats}) == 2, "every repeat ran the modes in the same order"


def test_the_table_shows_memphis_over_the_expert_and_the_plot_is_written(tmp_path):
    def report(name, **medians):
        return {"workload": name, "scale": 1, "repeats": 1,
                "modes": {m: {"median_s": s, "counters": {}} for m, s in medians.items()}}

    reports = [report("a", plain=4.0, memphis=2.3, expert=2.0), report("b", plain=1.0, memphis=0.5)]
    lines = markdown_table(reports).splitlines()
    assert lines[0] == ("| workload | scale | plain s | memphis s | expert s | speedup memphis | speedup expert "
                        "| memphis / expert | hits | persisted | evicted |")
    assert lines[2] == "| a | 1 | 4.00 | 2.30 | 2.00 | 1.74x | 2.00x | 1.15 |  |  |  |"
    assert lines[3] == "| b | 1 | 1.00 | 0.50 |  | 2.00x |  |  |  |  |  |"
    path = plot_speedups(reports, str(tmp_path / "speedups.png"))
    assert (tmp_path / "speedups.png").stat().st_size > 0 and path.endswith("speedups.png")


def test_a_mode_that_answers_differently_fails_the_run(spark):
    def answer(spark, _):
        return spark.conf.get("spark.memphis.enabled")  # differs between the modes

    workload = Workload("unequal", "answers depend on the mode", lambda spark, scale: None, answer)
    try:
        run_workload(spark, workload, repeats=1, progress=False)
    except AnswerMismatch as e:
        assert "mode memphis answered differently from mode plain" in str(e)
    else:
        raise AssertionError("a differing answer was accepted")


@pytest.mark.slow
def test_quick_benchmark_runs_every_mode_and_answers_agree(tmp_path):
    """`make bench-quick` as CI runs it: every workload in each of its modes, in a process of its
    own (one SparkContext per process), with 4 shuffle partitions for its small data. run.py fails
    when a mode answers differently; timings are not checked."""
    result = subprocess.run([sys.executable, os.path.join(BENCHMARKS, "run.py"), "--scale", "0.1", "--repeats", "1",
                             "--conf", "spark.sql.shuffle.partitions=4", "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stderr[-3000:]
    for name, make in ALL.items():
        with open(tmp_path / f"{name}.json") as f:
            report = json.load(f)
        assert list(report["modes"]) == list(make(str(tmp_path)).modes()), name
        assert {"plain", "memphis", "expert"} <= set(report["modes"]), name
        # kmeans has no naive mode: cache() on every iteration's centroids runs the driver out of heap.
        assert ("naive" in report["modes"]) == (name != "kmeans"), name
    results = (tmp_path / "results.md").read_text()
    assert results.count("\n| ") == len(ALL) + 1  # header and one row each
    assert "memphis / expert" in results and "results.png" in results
    assert (tmp_path / "results.png").stat().st_size > 0
