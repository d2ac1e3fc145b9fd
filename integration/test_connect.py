"""memphis over Spark Connect: a server started by `memphis connect-server`, real Connect clients.

Each scenario runs in a client process of its own (integration/apps/connect_client.py): a Connect
session switches its whole Python process to Connect mode, which the classic tests here must not see.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

pytestmark = pytest.mark.slow  # a server start and a client process per scenario: a minute and more

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT = os.path.join(HERE, "apps", "connect_client.py")
MEMPHIS = os.path.join(os.path.dirname(sys.executable), "memphis")  # the console script


@pytest.fixture(scope="module")
def server_log(tmp_path_factory):
    return tmp_path_factory.mktemp("connect") / "server.log"


@pytest.fixture(scope="module")
def server(server_log):
    """The URL of a Spark Connect server with memphis, started as a user would start it (its UI on)."""
    yield from serving(server_log, "spark.ui.enabled=true", "spark.ui.port=0")


@pytest.fixture(scope="module")
def server_ui(server, server_log):
    """The address of the Connect server's Spark UI: the port Spark bound, from the server's log."""
    port = re.search(r"started service 'SparkUI' on port (\d+)", server_log.read_text()).group(1)
    return f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def durable_server(tmp_path_factory):
    """A Spark Connect server with the durable tier on, in a folder of its own: (its URL, the folder)."""
    durable = tmp_path_factory.mktemp("connect-durable")
    for url in serving(durable / "server.log", f"spark.memphis.durable.dir={durable / 'tier'}"):
        yield url, durable / "tier"


def serving(log, *confs):
    """Starts a Spark Connect server with memphis and these confs, logging to `log`; yields its URL, then stops it."""
    # Port 0 here and for the UI: the server binds free ports itself. Ports picked by the tests could be
    # taken by another test worker's server before this one binds them.
    with open(log, "w") as out:
        process = subprocess.Popen(
            [MEMPHIS, "connect-server", "--port", "0", "--master", "local[2]", "--conf", "spark.ui.enabled=false",
             "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.sql.shuffle.partitions=4"] +
            [arg for conf in confs for arg in ("--conf", conf)],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 240
        while "Spark Connect server started" not in log.read_text():
            assert process.poll() is None, f"the server exited: {log.read_text()[-3000:]}"
            assert time.time() < deadline, f"the server did not start: {log.read_text()[-3000:]}"
            time.sleep(1)
        yield "sc://127.0.0.1:" + re.search(r"Spark Connect server started at: \S*:(\d+)", log.read_text()).group(1)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)


def client(server, scenario, tmp_path, env=None) -> dict:
    """What a client process saw running ``scenario`` (a function of connect_client.py)."""
    done = subprocess.run([sys.executable, CLIENT, server, scenario, json.dumps({"path": str(tmp_path / "data")})],
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # the last line: explain() prints above it


def test_reuse_over_connect_answers_as_memphis_off_and_a_new_file_invalidates(server, server_ui, tmp_path):
    seen = client(server, "reuse", tmp_path)
    assert all(answer == seen["expected"] for answer in seen["answers"])
    [entry] = seen["entries"]
    assert entry["state"] == "materialized" and entry["hits"] >= 1 and entry["owner"] == "alice"
    # The server's UI has the memphis tab, with the entries of the Connect session's user (its state
    # arrives on the listener bus a moment after the last query's end).
    def owners():
        with urllib.request.urlopen(f"{server_ui}/memphis/", timeout=30) as page:
            rows = re.findall(r'<tr data-key="[0-9a-f]+">(.*?)</tr>', page.read().decode(), re.S)
        return {owner for row in rows for owner in re.findall(r"<td>(alice|reference)</td>", row)}
    deadline = time.time() + 30
    while "alice" not in owners() and time.time() < deadline:
        time.sleep(0.5)
    assert "alice" in owners()
    assert seen["before"]["hits"] >= 1 and seen["before"]["materialized"] >= 1
    # A file written into the folder: the held entry is stale and recomputed, never served.
    assert seen["changed"] == seen["changed_expected"] != seen["expected"]
    assert seen["after"]["invalidated"] == seen["before"]["invalidated"] + 1


def test_each_public_function_on_a_connect_session(server, tmp_path):
    seen = client(server, "functions", tmp_path)
    assert seen["key"] == seen["renamed_key"] and len(seen["key"]) == 32  # aliases do not change a key
    assert seen["rebuilt_key"] == seen["key"]  # the plan ids Connect attaches are not in a key
    assert seen["join_keys"][0] is not None and seen["join_keys"][0] == seen["join_keys"][1]
    assert seen["uuid_key"] is None and seen["explain_uuid"] == "no lineage key: uuid is non-deterministic"
    assert seen["explain_key"].startswith(f"lineage key {seen['key']}")
    assert seen["collect_rows"] == seen["expected"] and seen["collect_shape"] == [7, 2] and seen["pandas_rows"] == 7
    assert seen["local_hits"] == 2  # the pandas and numpy collects read the Arrow table collected first
    assert seen["prefetched_rows"] == 4
    assert seen["reuse_hits"] == 1  # @memphis.reuse keyed by the DataFrame's lineage key
    assert seen["run_all"] == seen["run_all_expected"] and seen["run_all_persisted"] >= 1
    assert seen["entries_tiers"] == ["host", "spark"]
    # A Connect user's clear lets go of what their entries hold; other users' are theirs to keep.
    assert seen["after_clear"]["entries"] and all(e["state"] in ("evicted", "seen") for e in seen["after_clear"]["entries"])
    assert seen["broadcast"].startswith("TypeError: memphis.broadcast needs a classic SparkSession")
    assert seen["configure_spark"].startswith("MemphisSetupError: this builder connects to a Spark Connect server")


def test_two_users_never_read_each_others_entries(server, tmp_path):
    seen = client(server, "users", tmp_path)
    assert all(answer == seen["bob"][0] for answer in seen["alice"] + seen["bob"])
    assert seen["after"]["refused_other_user"] > seen["before"]["refused_other_user"]
    held = {e["owner"]: e for e in seen["entries"] if e["state"] == "materialized"}
    assert set(held) == {"alice2", "bob"}  # bob's queries made an entry of his own
    assert held["alice2"]["key"] == held["bob"]["key"]
    assert {e["owner"] for e in seen["bob_sees"]} == {"bob"}  # memphis_cache() lists a user's own entries
    # Alice's third run, and a run in another session of hers; bob's runs were not served from it.
    assert held["alice2"]["hits"] == 2


def test_explain_and_analysis_count_no_occurrence_and_a_run_counts_one(server, tmp_path):
    seen = client(server, "explain", tmp_path)
    assert seen["explained"] == []
    [entry] = seen["ran"]
    assert entry["occurrences"] == 1 and entry["owner"] == "erin"


def test_cache_and_persist_work_and_closing_a_users_last_session_releases_theirs(server, tmp_path):
    seen = client(server, "lifecycle", tmp_path)
    assert seen["cached"] == seen["cached_again"] and len(seen["cached"]) == 5
    assert seen["persisted_count"] == 10_000
    assert seen["cached_level"] == seen["persisted_level"] == "Disk Memory Deserialized 1x Replicated"
    assert "InMemoryTableScan" in seen["cached_plan"] and "InMemoryTableScan" in seen["persisted_plan"]
    assert seen["held_before"] and seen["held_one_closed"] == seen["held_before"]
    assert seen["observer_sees"] == []
    assert seen["held_after"] == []


def test_the_demo_runs_over_connect(server, tmp_path):
    done = subprocess.run([MEMPHIS, "demo", "--remote", server, "--rows", "20000", "--plot", str(tmp_path / "demo.png")],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "demo on Spark" in done.stdout and server in done.stdout
    assert "every stage answers the same with memphis off and on" in done.stdout


def test_clients_that_send_no_user_id_share_nothing_and_keep_nothing_durable(durable_server, tmp_path):
    # pyspark sends $SPARK_USER, else $USER, when the connection names no user: a client without them sends none.
    url, durable = durable_server
    env = {k: v for k, v in os.environ.items() if k not in ("USER", "SPARK_USER")}
    seen = client(url, "anonymous", tmp_path, env=env)
    assert seen["user_ids"] == [None, None, None]
    answers = seen["answers"]
    assert all(answer == seen["expected"] for run in answers.values() for answer in run)
    # Each such session is its own scope: the second is never served the first's entries, and lists only its own.
    owners = {name: {e["owner"] for e in seen["sees"][name]} for name in ("first", "second", "third")}
    assert all(len(o) == 1 and next(iter(o)).startswith("connect-session:") for o in owners.values())
    assert len(set.union(*owners.values())) == 3
    assert any(e["state"] == "materialized" and "no known user" in e["reason"] for e in seen["sees"]["first"])
    assert seen["moved"]["refused_other_user"] >= 3  # occurrences another scope's held entry would have served
    # Nothing of theirs in the durable tier, read or written; each of their runs counted. A named user's as before.
    assert not any(e["tier"] == "durable" for name in ("first", "second", "third") for e in seen["sees"][name])
    assert seen["moved"]["refused_unknown_user"] >= 7 and seen["moved"]["durable_hits"] == 0
    assert seen["moved"]["durable_writes"] >= 1 and [n for n in os.listdir(durable) if not n.startswith(".")] == ["frank"]
    assert {e["owner"] for e in seen["sees"]["named"]} == {"frank"}
    assert any(e["tier"] == "durable" for e in seen["sees"]["named"])
    # The first session closing lets go of what its entries hold, though other sessions without a user id are open.
    assert seen["released_on_close"]
