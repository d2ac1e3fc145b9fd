"""Executor loss in local-cluster mode: right answers, entry states that follow the lost partitions,
and the data rebuilt. The run (apps/executor_loss.py) has its own interpreter: one SparkContext a process."""
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # minutes: `make test-fast` leaves it out

HERE = os.path.dirname(os.path.abspath(__file__))
APP = os.path.join(HERE, "apps", "executor_loss.py")


@pytest.fixture(scope="module")
def seen(tmp_path_factory):
    result = subprocess.run([sys.executable, APP, str(tmp_path_factory.mktemp("executor-loss"))],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    if "unavailable" in seen:
        pytest.skip(seen["unavailable"])
    assert seen["faults"] == 2
    return seen


def assert_rebuilt(phase):
    """Answered right after the loss, then the entry is whole again: every partition stored, as Spark says."""
    end = phase["entry_end"]
    assert phase["rematerialized"], end
    assert end["partitions_stored"] == end["partitions"] == phase["spark_cached_end"] == 8


def test_losing_an_executor_after_materialization(seen):
    after = seen["after_materialized"]
    assert after["answers_right"] == [True, True] and after["materialized"]
    # Its blocks went without block updates: the executor's removal turned the entry back to to-persist.
    assert after["lost"] >= 1 and after["noticed"], after["entry_after_loss"]
    assert after["entry_after_loss"]["partitions_stored"] == 8 - after["lost"]
    assert after["consistent_after_loss"] and after["bytes_held"][1] < after["bytes_held"][0]
    # Still served (the cached relation remains); Spark recomputes the lost partitions and stores them.
    assert after["answer_after_loss"] and after["served"] == 1
    assert_rebuilt(after)


def test_losing_an_executor_while_the_entry_is_materialized(seen):
    during = seen["during_materialization"]
    assert during["executors_back"], "the worker relaunches a killed executor"
    assert during["running_at_kill"] and during["stored_at_kill"] < 8
    assert during["answer"] and during["answer_next"]
    # Never "materialized" while a partition is missing: memphis' count is Spark's after the job.
    assert during["consistent_after_job"], during["entry_after_job"]
    assert_rebuilt(during)
