"""TPC-H's 22 queries asked as a notebook session (benchmarks/tpch_corpus.py): first, again as they
were, and edited (other years), each by plain Spark and by memphis, in a fresh JVM of 640m driver heap:
the tightest size `make bench` runs it at (1g and 4g too); the TPC-DS corpus' test runs at 1g, where memphis
refuses fewer subplans as larger than their share. Every query answered in every pass, memphis' answers equal to plain Spark's, no place
memphis holds data above its budget at any sample, none much slower with memphis on, and every query
whose rows memphis kept at its first ask served from them with no Spark job when asked again, within
the issue's bound on a re-run (1.2 × plain + 0.2 s)."""
import json
import os
import subprocess
import sys

import pytest

from conftest import BENCHMARKS, long_lived_jvm_env  # conftest puts the benchmarks on sys.path
import tpch_corpus

pytestmark = pytest.mark.slow  # minutes: `make test-fast` leaves it out

SF = 0.1
# Off, the slowest query takes about 12 s here (Q1, the first, in a cold JVM; the others under 6 s):
# a query past 45 s is a blowup, and cancelling it there keeps a bad jar's run within minutes.
QUERY_TIMEOUT_S = 45
RUN_DEADLINE_S = 600
# Generous, so that a shared 2-core machine's noise never fails it (a 1 s query read 5.4 s once, under
# another test run's load): it catches the blowups this corpus is for, 90 s against 1.8 s, not small regressions.
SLOWER_FACTOR, SLOWER_SLACK_S = 2.0, 5.0


@pytest.fixture(scope="module")
def tpch_data():
    """The generated tables at SF (cached under build/tpch), so that no run's time includes dbgen's."""
    return tpch_corpus.generate(SF)


def run_corpus(driver_memory, out):
    """The corpus in a fresh interpreter, so in a JVM that starts with ``driver_memory``: its report."""
    command = [sys.executable, os.path.join(BENCHMARKS, "tpch_corpus.py"), "--sf", str(SF),
               "--driver-memory", driver_memory, "--timeout", str(QUERY_TIMEOUT_S),
               "--deadline", str(RUN_DEADLINE_S), "--plain-once", "--out", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=RUN_DEADLINE_S + 300,
                            env=long_lived_jvm_env())
    assert out.exists(), f"no report (exit status {result.returncode}):\n{result.stderr[-5000:]}"
    with open(out) as f:
        return json.load(f)


def test_every_query_answers_the_same_within_budget_and_time(tpch_data, tmp_path):
    report = run_corpus("640m", tmp_path / "tpch_corpus.json")
    off = {r["query"]: r["seconds"] for r in report["runs"] if r["phase"] == "off" and r["ok"]}
    slow = [f"Q{r['query']} ({r['phase']}) took {r['seconds']:.2f} s with memphis on, {off[r['query']]:.2f} s off"
            for r in tpch_corpus.slow_runs(report, SLOWER_FACTOR, SLOWER_SLACK_S)]
    problems = (report["problems"] + slow + tpch_corpus.not_served_again(report)
                + tpch_corpus.rerun_over_bound(report))
    table = tpch_corpus.summary_table(report, SLOWER_FACTOR, SLOWER_SLACK_S)
    assert not problems, "\n".join(problems) + "\n\n" + table
