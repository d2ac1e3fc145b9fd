"""The durable tier of Spark results (``spark.memphis.durable.dir``): what one process computed serves
the next process, never after its sources changed, never half-written, never another user's.

Each process is a fresh interpreter and JVM (:data:`APP`), so the tests are marked slow; one process
answers many questions, each compared with the answer memphis off gives in that process."""
import glob
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import memphis
from conftest import TEST_CONFS, run_python

HERE = os.path.dirname(os.path.abspath(__file__))
DELTA_JARS = sorted(glob.glob(os.path.join(HERE, "..", "jvm", "target", "delta-jars", "*.jar")))

# One process: asks each source's questions (filters over one shared aggregate) with memphis on, waits
# for the durable writes it started, then answers them again with memphis off. Per source it reports
# the answers, the counters the questions moved and, per question, its jobs, their stages and whether
# its plan scans the raw source. Steps ("steps": [...]) first change the durable folder as a test asks.
APP = r"""
import glob, json, os, sys, time
import memphis
from pyspark.sql import functions as F

args = json.loads(sys.argv[1])
spark = memphis.session("local[2]", app_name="memphis-durable", **args["confs"])
sc = spark.sparkContext

def table(source):
    return spark.read.format("delta").load(source) if source.endswith("delta") else spark.read.parquet(source)

def question(source, group, i):
    shared = table(source).groupBy(group).agg(F.sum("v").alias("total"), F.count("*").alias("n"))
    return shared.where(f"{group} % 3 = {i}")

def ask(source, group, i, tag):
    df = question(source, group, i)
    sc.setJobGroup(tag, tag)
    try:
        rows = sorted(map(list, df.collect()))
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    jobs = sc.statusTracker().getJobIdsForGroup(tag)
    stages = sum(len(sc.statusTracker().getJobInfo(j).stageIds) for j in jobs)
    plan = df._jdf.queryExecution().executedPlan().toString()
    optimized = df._jdf.queryExecution().optimizedPlan().toString()
    return rows, {"jobs": len(jobs), "stages": stages, "scans_source": source in plan,
                  "durable_in_plan": "DurableResult" in optimized, "collected_in_plan": "CollectedResult" in optimized}

def counters():
    return {k: v for k, v in memphis.stats(spark).items() if k.startswith("durable_") or k == "hits"}

def settled():  # the counters once the durable writes this process queued have ended
    deadline = time.time() + 120
    while counters()["durable_writes_pending"] and time.time() < deadline:
        time.sleep(0.2)
    return counters()

out = {"steps": []}
for step in args["steps"]:
    exec(step["code"], {**globals(), "entry": step.get("entry")})  # spark, ask, out, ... for the step's own checks
    memphis.clear(spark)  # memory only: what follows reads the durable tier or computes
    before = counters()
    answers, runs = [], []
    for i in range(3):
        rows, run = ask(step["source"], step.get("group", "k"), i, f"{len(out['steps'])}-{i}")
        answers.append(rows)
        runs.append(run)
    after = settled()
    out["steps"].append({"answers": answers, "runs": runs, "moved": {k: after[k] - before[k] for k in after}})
entries = memphis.entries(spark)
out["entries"] = entries[entries.tier == "durable"][["key", "size_bytes", "path", "age_s", "owner"]].to_dict("records")
if args.get("explain"):
    out["explain"] = question(args["steps"][0]["source"], "k", 0)._jdf.queryExecution().toString()  # explain(True)
spark.conf.set("spark.memphis.enabled", "false")
out["plain"] = [[ask(s["source"], s.get("group", "k"), i, f"plain-{n}-{i}")[0] for i in range(3)]
                for n, s in enumerate(args["steps"])]
for table_path in args.get("append_delta", []):  # a commit after this process's questions
    spark.range(1000).selectExpr("id % 7 AS k", "id % 5 AS v", "id % 11 AS k2").write.format("delta").mode("append").save(table_path)
def key_in(removed):  # the key a removed manifest names, if it is one (a truncated one is removed too)
    try:
        return json.load(open(removed))["key"]
    except ValueError:
        return None
out["removed"] = sorted(filter(None, map(key_in, glob.glob(os.path.join(args["durable"], "*", "spark", "*", "removed-*.json")))))
if args.get("clear_durable"):
    spark.conf.set("spark.memphis.enabled", "true")
    memphis.clear(spark, durable=True)
print(json.dumps(out))
"""


def write_sales(folder, part=0, rows=60_000):
    os.makedirs(folder, exist_ok=True)
    ids = pa.array(range(rows), pa.int64())
    pq.write_table(pa.table({"k": pa.compute.remainder(ids, 7), "v": pa.compute.remainder(ids, 5),
                             "k2": pa.compute.remainder(ids, 11)}), os.path.join(folder, f"part-{part}.parquet"))
    return str(folder)


def confs(durable, **more):
    return {**TEST_CONFS, "spark.memphis.collected.maxBytes": "0", "spark.memphis.durable.dir": str(durable), **more}


def run_app(durable, steps, env=None, **more):
    return run_python(APP, json.dumps({"confs": confs(durable), "durable": str(durable), "steps": steps, **more}), env=env)


def asking(source, code="", group="k", entry=None):
    return {"source": str(source), "code": code, "group": group, "entry": entry}


def manifests(durable):
    return sorted(glob.glob(os.path.join(str(durable), "*", "spark", "*", "manifest.json")))


def key_of(manifest):
    with open(manifest) as f:
        return json.load(f)["key"]


def assert_answers_right(seen):
    for step, plain in zip(seen["steps"], seen["plain"]):
        assert step["answers"] == plain


@pytest.mark.slow
def test_a_new_process_reads_what_the_first_wrote_until_a_source_changes(tmp_path):
    sales, durable = write_sales(tmp_path / "sales"), tmp_path / "durable"
    sources = [sales]
    if DELTA_JARS:  # Delta's jars come with the Maven build (jvm/target/delta-jars); delta-spark is not in the venv
        sources.append(str(tmp_path / "sales_delta"))
    delta_confs = {"spark.jars": ",".join(DELTA_JARS), "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
                   "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog"} if DELTA_JARS else {}
    make_delta = ("from pyspark.sql import SparkSession\n"
                  "s = SparkSession.getActiveSession()\n"
                  f"s.read.parquet({sales!r}).write.format('delta').save({str(tmp_path / 'sales_delta')!r})\n") if DELTA_JARS else ""

    def run(steps, **more):
        return run_python(APP, json.dumps({"confs": confs(durable, **delta_confs), "durable": str(durable),
                                           "steps": steps, **more}))

    first = run([asking(sources[0], make_delta)] + [asking(s) for s in sources[1:]])
    assert_answers_right(first)
    for step in first["steps"]:
        assert step["moved"]["durable_writes"] == 1 and step["moved"]["durable_hits"] == 0
    written = manifests(durable)
    written_keys = sorted(key_of(m) for m in written)
    assert len(written) == len(sources)
    user_folder = os.path.dirname(os.path.dirname(os.path.dirname(written[0])))
    assert stat.S_IMODE(os.stat(user_folder).st_mode) == 0o700 and stat.S_IMODE(os.stat(written[0]).st_mode) == 0o600
    data_files = glob.glob(os.path.join(os.path.dirname(written[0]), "data-*", "part-*"))
    assert data_files and all(stat.S_IMODE(os.stat(f).st_mode) == 0o600 for f in data_files)

    # A new process (a notebook restarted): every question reads the durable entry, no job scans the source.
    second = run([asking(s) for s in sources], explain=True, append_delta=sources[1:])
    assert_answers_right(second)
    for step in second["steps"]:
        assert step["moved"]["durable_hits"] == 3 and step["moved"]["durable_writes"] == 0
        assert not any(r["scans_source"] for r in step["runs"]) and all(r["durable_in_plan"] for r in step["runs"])
        assert all(r["stages"] == 1 for r in step["runs"])  # the plain questions shuffle: two stages at least
    assert "DurableResult memphis" in second["explain"]
    assert sorted(e["key"] for e in second["entries"]) == written_keys
    assert all(e["size_bytes"] > 0 and e["age_s"] >= 0 and e["path"].startswith("file:") for e in second["entries"])

    # A file copied into the Parquet folder (and, with Delta, a commit the second process made): the new
    # answer, the old entry invalidated and removed, the new one written.
    shutil.copy(os.path.join(sales, "part-0.parquet"), os.path.join(sales, "part-1.parquet"))
    third = run([asking(s) for s in sources], clear_durable=True)
    assert_answers_right(third)
    assert third["plain"][0] != first["plain"][0]
    for step in third["steps"]:
        assert step["moved"]["durable_invalidated"] == 1 and step["moved"]["durable_hits"] == 0
        assert step["moved"]["durable_writes"] == 1
    assert third["removed"] == written_keys
    # memphis.clear(spark, durable=True) at the end of the third process emptied the user's folder.
    assert not os.path.exists(os.path.dirname(os.path.dirname(written[0])))


# Changes to the entry of the shared aggregate (its folder is `entry`), as a broken disk, a careless user
# or another user would make them. Truncated: no longer a manifest. Planted: a valid manifest naming another
# owner (its checksum file dropped, where Hadoop kept one), so that it is read and its owner looked at.
TRUNCATE_MANIFEST = """
text = open(os.path.join(entry, 'manifest.json')).read()
open(os.path.join(entry, 'manifest.json'), 'w').write(text[:len(text) // 2])
"""

CORRUPT_DATA = """
import glob
for f in glob.glob(os.path.join(entry, 'data-*', 'part-*')):
    with open(f, 'r+b') as out:
        out.seek(os.path.getsize(f) // 2)
        out.write(bytes(64))
"""

FOREIGN_MANIFEST = """
planted = json.load(open(os.path.join(entry, 'manifest.json')))
planted['owner'] = 'mallory'
json.dump(planted, open(os.path.join(entry, 'manifest.json'), 'w'))
if os.path.exists(os.path.join(entry, '.manifest.json.crc')):
    os.remove(os.path.join(entry, '.manifest.json.crc'))
"""

FOREIGN_FILE = """
import glob
for f in glob.glob(os.path.join(entry, 'data-*', 'part-*')):
    os.chown(f, 4321, 4321)
"""


@pytest.mark.slow
def test_concurrent_killed_truncated_corrupt_and_foreign_entries_are_never_served(tmp_path):
    sales, durable = write_sales(tmp_path / "sales"), tmp_path / "durable"
    args = json.dumps({"confs": confs(durable), "durable": str(durable), "steps": [asking(sales)]})
    # Two processes compute and write the same key at once: both answers right, one manifest, its files there.
    both = [subprocess.Popen([sys.executable, "-c", APP, args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
    for p in both:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        assert_answers_right(json.loads(out.strip().splitlines()[-1]))
    assert len(manifests(durable)) == 1

    # A process killed (SIGKILL) between writing its data and committing its manifest: nothing to serve.
    env = {**os.environ, "SPARK_SUBMIT_OPTS": os.environ.get("SPARK_SUBMIT_OPTS", "") +
           " -Dmemphis.durable.pauseBeforeCommitMs=600000"}
    killed = subprocess.Popen([sys.executable, "-c", APP, json.dumps(
        {"confs": confs(durable), "durable": str(durable), "steps": [asking(sales, group="k2")]})],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.time() + 240
    while not glob.glob(os.path.join(str(durable), "*", "spark", "*", ".manifest-*.tmp")) and time.time() < deadline:
        time.sleep(0.2)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    leftovers = glob.glob(os.path.join(str(durable), "*", "spark", "*", ".manifest-*.tmp"))
    assert len(leftovers) == 1 and len(manifests(durable)) == 1
    # ... its leftovers are deleted once they are old (30 minutes; aged here).
    killed_entry = os.path.dirname(leftovers[0])
    for path in [leftovers[0], *glob.glob(os.path.join(killed_entry, "data-*"))]:
        os.utime(path, (time.time() - 7200, time.time() - 7200))

    entry = os.path.dirname(manifests(durable)[0])
    steps = [asking(sales), asking(sales, group="k2")] + [asking(sales, change, entry=entry) for change in
                                                          (TRUNCATE_MANIFEST, CORRUPT_DATA, FOREIGN_MANIFEST)]
    if os.geteuid() == 0:  # only root can give a file to another user
        steps.append(asking(sales, FOREIGN_FILE, entry=entry))
    seen = run_app(durable, steps)
    assert_answers_right(seen)
    served, killed_key, truncated, corrupt, foreign_owner, *foreign_file = [s["moved"] for s in seen["steps"]]
    assert served["durable_hits"] == 3 and served["durable_refused"] == 0
    assert killed_key["durable_hits"] == 0 and killed_key["durable_writes"] == 1 and killed_key["durable_cleaned"] >= 2
    assert not os.path.exists(leftovers[0])
    for broken in (truncated, corrupt, foreign_owner, *foreign_file):
        assert broken["durable_hits"] == 0
    # A broken entry of this user is refused once, removed and written anew; another user's is refused
    # at each look (until the subplan is held in memory) and left alone.
    assert truncated["durable_refused"] == 1 and truncated["durable_writes"] == 1
    assert corrupt["durable_refused"] == 1 and corrupt["durable_writes"] == 1
    for foreign in (foreign_owner, *foreign_file):
        assert foreign["durable_refused"] >= 1


@pytest.mark.parametrize("key, value", [("spark.memphis.durable.maxBytes", "lots"),
                                        ("spark.memphis.durable.dir", "FILE")])
def test_a_wrong_durable_setting_stops_the_session_with_key_value_and_what_is_allowed(no_spark, tmp_path, key, value):
    if value == "FILE":  # a folder under a plain file cannot be made
        (tmp_path / "plain").write_text("not a folder")
        value = str(tmp_path / "plain" / "durable")
    with pytest.raises(memphis.MemphisConfigError) as refused:
        memphis.session("local[1]", **TEST_CONFS, **{key: value})
    message = str(refused.value)
    assert f"{key}={value}" in message and "expected" in message


def test_the_test_sessions_run_with_the_durable_tier_off(spark):
    # conftest.py (the repository's) turns it off in every JVM the tests start, so that no test reads
    # what another test, or an earlier run, wrote; the tests above set it for their own processes.
    assert spark.sparkContext.getConf().get("spark.memphis.durable.dir") == "none"
