import json
import os
import subprocess
import sys

import pytest
from pyspark.sql import functions as F

BENCHMARKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks")
sys.path.insert(0, BENCHMARKS)
from harness import (RATIOS, SESSION_TUNING, Workload, markdown_table, plot_speedups, run_workload,  # noqa: E402
                     scaling_table)
from rigor import AnswerMismatch, balanced_order, ratio_interval  # noqa: E402
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
        assert len(run["seconds"]) >= 2
        low, high = run["interval_s"]
        assert low <= run["median_s"] <= high
        assert run["counters"]["storage_budget_bytes"] > 0
        assert run["counters"]["hits"] == 0
    ratio, low, high = report["ratios"]["memphis/plain"]
    assert low <= ratio <= high and "memphis/expert" not in report["ratios"]
    assert set(report["provenance"]) == {"commit", "date", "machine"}
    table = markdown_table([report])
    assert table.splitlines()[0] == ("| workload | scale | plain s | memphis s | memphis / plain "
                                     "| hits | persisted | evicted |")
    assert table.splitlines()[2].startswith("| sums | 2 |")


def test_the_runs_follow_a_balanced_order_after_one_warm_up(spark):
    """The runs follow rigor.balanced_order: its first run is an untimed warm-up; the mode of each
    run is read from the session's conf."""
    ran = []

    def run(spark, n):
        ran.append("memphis" if spark.conf.get("spark.memphis.enabled") == "true" else "plain")
        return grouped_sums(spark, n)

    report = run_workload(spark, Workload("sums", "grouped sums", lambda spark, scale: 100, run), repeats=3,
                          progress=False)
    assert ran == report["order"] == balanced_order(["plain", "memphis"], 3)
    assert {m: len(r["seconds"]) for m, r in report["modes"].items()} == {
        m: ran[1:].count(m) for m in ("plain", "memphis")}


def test_quick_mode_runs_every_mode_once_without_warm_up(spark):
    ran = []

    def run(spark, n):
        ran.append(spark.conf.get("spark.memphis.enabled"))
        return n

    both = lambda spark, n: run(spark, n)  # noqa: E731
    report = run_workload(spark, Workload("n", "n", lambda spark, scale: 1, run, naive=both, expert=both),
                          repeats=1, progress=False)
    assert report["order"] == ["plain", "memphis", "naive", "expert"] and len(ran) == 4
    assert all(len(r["seconds"]) == 1 for r in report["modes"].values())


def test_the_tables_show_intervals_and_ratios_and_the_plot_is_written(tmp_path):
    def report(name, scale, **seconds):
        runs = {m: {"seconds": s, "median_s": sorted(s)[len(s) // 2], "counters": {}} for m, s in seconds.items()}
        ratios = {f"{n}/{d}": ratio_interval(seconds[n], seconds[d])
                  for n, d in RATIOS if n in seconds and d in seconds}
        return {"workload": name, "scale": scale, "repeats": 3, "modes": runs, "ratios": ratios}

    reports = [report("a", 1, plain=[4.0] * 3, memphis=[2.0] * 3, expert=[2.0, 2.1, 1.9]),
               report("b", 1, plain=[1.0] * 3, memphis=[0.5] * 3)]
    lines = markdown_table(reports).splitlines()
    assert lines[0] == ("| workload | scale | plain s | memphis s | expert s | memphis / expert | memphis / plain "
                        "| expert / plain | hits | persisted | evicted |")
    assert lines[2].startswith("| a | 1 | 4 [4–4] | 2 [2–2] | 2 [1.9–2.1] | no difference (1.00× [")
    assert "| 0.50× [0.50–0.50] |" in lines[2]
    assert lines[3] == "| b | 1 | 1 [1–1] | 0.5 [0.5–0.5] |  |  | 0.50× [0.50–0.50] |  |  |  |  |"
    sweep = scaling_table([report("a", 0.1, plain=[1.0] * 3, memphis=[1.0] * 3, expert=[1.0] * 3),
                           report("a", 1, plain=[4.0] * 3, memphis=[2.0] * 3, expert=[2.0] * 3)]).splitlines()
    assert sweep[0] == "| workload | mode | 0.1 | 1 | × from 0.1 to 1 |"
    assert sweep[2] == "| a | plain | 1 [1–1] | 4 [4–4] | 4.00× [4.00–4.00] |"
    same = "no difference (1.00× [1.00–1.00])"
    assert sweep[5] == f"| a | memphis / expert | {same} | {same} |  |"
    path = plot_speedups(reports, str(tmp_path / "speedups.png"))
    assert (tmp_path / "speedups.png").stat().st_size > 0 and path.endswith("speedups.png")


def test_a_run_that_answers_differently_fails_the_run(spark):
    answers = iter([1, 1, 2])  # the third run, a timed one, answers differently

    workload = Workload("unequal", "answers change", lambda spark, scale: None, lambda spark, _: next(answers))
    with pytest.raises(AnswerMismatch, match=r"unequal: mode \w+ \(run 3\) answered differently"):
        run_workload(spark, workload, repeats=2, progress=False)


def test_a_warm_up_that_answers_differently_fails_the_run(spark):
    def answer(spark, _):
        return spark.conf.get("spark.memphis.enabled")  # differs between the modes

    workload = Workload("unequal", "answers depend on the mode", lambda spark, scale: None, answer)
    with pytest.raises(AnswerMismatch, match="mode memphis .run 2. answered differently from mode plain .run 1."):
        run_workload(spark, workload, repeats=1, progress=False)


def test_every_spark_mode_has_the_session_tuning():
    """The benchmark session sets what memphis gives its own persists, for every mode."""
    assert SESSION_TUNING == {"spark.sql.optimizer.canChangeCachedPlanOutputPartitioning": "true"}
    assert "canChangeCachedPlanOutputPartitioning" not in open(os.path.join(BENCHMARKS, "workloads",
                                                                              "tpch_exploration.py")).read()


def test_further_confs_hold_for_the_runs_and_are_unset_after(spark):
    seen = []

    def run(spark, _):
        seen.append(spark.conf.get("spark.memphis.storage.maxBytes"))
        return 0

    workload = Workload("capped", "reads the cap", lambda spark, scale: None, run)
    run_workload(spark, workload, repeats=1, confs={"spark.memphis.storage.maxBytes": "1234"}, progress=False)
    assert seen == ["1234", "1234"] and spark.conf.get("spark.memphis.storage.maxBytes") == "0"


@pytest.mark.slow
def test_pressure_makes_memphis_evict_and_answers_agree(tmp_path):
    """run.py --pressure caps memphis's storage below what it holds unconstrained: it evicts, and
    every mode still answers alike (else run.py exits 1)."""
    result = subprocess.run([sys.executable, os.path.join(BENCHMARKS, "run.py"), "--quick", "--pressure",
                             "--workload", "tpch_session", "--workload", "exploration", "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    reports = json.loads((tmp_path / "pressure.json").read_text())
    assert [r["workload"] for r in reports] == ["tpch_session", "exploration"]
    for report in reports:
        assert 0 < report["cap_bytes"] < report["unconstrained_bytes"]
        assert report["modes"]["memphis"]["counters"]["evicted"] > 0
    assert "| exploration |" in (tmp_path / "pressure.md").read_text()


@pytest.mark.slow
def test_quick_benchmark_runs_every_mode_and_answers_agree(tmp_path):
    """`make bench-quick` as CI runs it: every workload in each of its modes once, in a process of
    its own (one SparkContext per process). run.py fails when a run answers differently; timings
    are not checked."""
    result = subprocess.run([sys.executable, os.path.join(BENCHMARKS, "run.py"), "--quick", "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stderr[-3000:]
    for name, make in ALL.items():
        with open(tmp_path / f"{name}.json") as f:
            report = json.load(f)
        assert report["order"] == list(make(str(tmp_path)).modes()), name
        assert {"plain", "memphis", "expert"} <= set(report["modes"]), name
        assert "memphis/expert" in report["ratios"] and report["provenance"]["commit"], name
        # kmeans has no naive mode: cache() on every iteration's centroids runs the driver out of heap.
        assert ("naive" in report["modes"]) == (name != "kmeans"), name
    results = (tmp_path / "results.md").read_text()
    assert results.count("\n| ") == len(ALL) + 1  # header and one row each
    assert "memphis / expert" in results and "results.png" in results and "commit " in results
    assert (tmp_path / "results.png").stat().st_size > 0
