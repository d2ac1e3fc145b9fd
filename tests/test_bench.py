from pyspark.sql import functions as F

from memphis.bench import AnswerMismatch, Workload, markdown_table, run_workload
from memphis.demo import exploration_workload


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
    assert table.splitlines()[0].startswith("| workload | scale | plain s | memphis s | speedup memphis |")
    assert table.splitlines()[2].startswith("| sums | 2 |")


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


def test_exploration_workload_agrees_with_memphis_off_and_on(spark, tmp_path):
    report = run_workload(spark, exploration_workload(str(tmp_path)), scale=0.02, repeats=1, progress=False)
    assert set(report["modes"]) == {"plain", "memphis"}
    answers = exploration_workload(str(tmp_path)).run(spark, str(tmp_path / "sales"))
    assert len(answers) == 5 and len(answers[0]) == 7  # five queries; seven regions
