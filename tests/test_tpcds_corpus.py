"""TPC-DS' 99 queries asked as a notebook session (benchmarks/tpcds_corpus.py: first, again, edited;
each by plain Spark and by memphis) in a fresh JVM of 1g driver heap: every query answered in every
pass, memphis' answers equal to plain Spark's, no place memphis holds data above its budget at any
sample, none much slower with memphis on, and every query whose rows memphis kept at its first ask
served from them with no Spark job when asked again (all but UNSERVED_ALLOWED, whose rows the
heap-pressure valve may let go: below), within the issue's bound on a re-run (1.2 × plain + 0.2 s).
The TPC-H corpus' test (test_tpch_corpus.py) over the other corpus: more joins, subqueries, WITH
clauses and windows."""
import json
import os
import subprocess
import sys
import warnings

import pytest

from conftest import BENCHMARKS, long_lived_jvm_env
import tpch_corpus
from tpcds_corpus import TPCDS

pytestmark = pytest.mark.slow  # minutes: `make test-fast` leaves it out

SF = 0.05  # the script's default (its doc says why)
# Off, the slowest query takes about 6 s here (Q14; the others under 5 s): a query past 45 s is a blowup,
# and cancelling it there keeps a bad jar's run within minutes.
QUERY_TIMEOUT_S = 45
# A backstop for a run gone wrong (the per-query timeout catches a blowup): alone here the run took 681 s,
# beside the staleness corpus in pytest's other worker it passed 900 s in its second pass of five.
RUN_DEADLINE_S = 1800
# As test_tpch_corpus.py's: for the blowups, not for a shared 2-core machine's noise.
SLOWER_FACTOR, SLOWER_SLACK_S = 2.0, 5.0
# On a loaded machine the heap-pressure valve lets go of one or two kept results (counted as pressure_releases,
# not results_released, so the report cannot name them): those queries run their jobs again when asked again
# (docs/reliability.md, "The TPC-H and TPC-DS corpora"). More than that fails, and each is reported.
UNSERVED_ALLOWED = 2


@pytest.fixture(scope="module")
def tpcds_data():
    """The generated tables at SF (cached under build/tpcds), so that no run's time includes dsdgen's."""
    return tpch_corpus.generate(SF, corpus=TPCDS)


def test_every_query_answers_the_same_within_budget_and_time(tpcds_data, tmp_path):
    out = tmp_path / "tpcds_corpus.json"
    command = [sys.executable, os.path.join(BENCHMARKS, "tpcds_corpus.py"), "--sf", str(SF), "--driver-memory", "1g",
               "--timeout", str(QUERY_TIMEOUT_S), "--deadline", str(RUN_DEADLINE_S), "--plain-once", "--out", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=RUN_DEADLINE_S + 300,
                            env=long_lived_jvm_env())
    assert out.exists(), f"no report (exit status {result.returncode}):\n{result.stderr[-5000:]}"
    with open(out) as f:
        report = json.load(f)
    off = {r["query"]: r["seconds"] for r in report["runs"] if r["phase"] == "off" and r["ok"]}
    slow = [f"Q{r['query']} ({r['phase']}) took {r['seconds']:.2f} s with memphis on, {off[r['query']]:.2f} s off"
            for r in tpch_corpus.slow_runs(report, SLOWER_FACTOR, SLOWER_SLACK_S)]
    unserved = tpch_corpus.not_served_again(report)
    if unserved:
        warnings.warn(f"{len(unserved)} of {TPCDS.count} queries not served again (allowed {UNSERVED_ALLOWED}): {unserved}")
    problems = (report["problems"] + slow + (unserved if len(unserved) > UNSERVED_ALLOWED else [])
                + tpch_corpus.rerun_over_bound(report))
    table = tpch_corpus.summary_table(report, SLOWER_FACTOR, SLOWER_SLACK_S, TPCDS)
    assert not problems, "\n".join(problems) + "\n\n" + table
