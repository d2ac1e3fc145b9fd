"""The durable tier of Spark results on the storage clusters keep their data: HDFS (a mini cluster,
permissions on, users by HADOOP_USER_NAME) and an S3-compatible object store through S3A (moto's
server, its request log read). The scenarios of tests/test_durable_spark.py, run by its APP in fresh
processes, on ``hdfs://`` and ``s3a://``:

wave 1: two writers at once (alice twice), the first making the sources;
wave 2, at once: alice again (the second process served; an outside write to a source seen), a writer
paused before its commit and a reader asking while it commits (carol), a writer killed before its
commit (carol), and bob, who cannot read alice's folder on HDFS.

Each answer is compared with the one memphis off gives in the same process. ``MEMPHIS_STORAGE_LOCAL=1``
runs the same on the local disk (tests/test_durable_spark.py covers it otherwise), for the times."""
import json
import os
import signal
import subprocess
import sys
import time

import boto3
import pytest

from conftest import TEST_CONFS
from storage_servers import MARK_CODE, MiniHdfs, MotoS3, classpath
from test_durable_spark import APP, asking, assert_answers_right

STORES = ["hdfs", "s3a"] + (["local"] if os.environ.get("MEMPHIS_STORAGE_LOCAL") == "1" else [])

# What the steps below call: the store through the process's own Hadoop filesystem (spark._jvm).
FS_CODE = r"""
import time
jvm = spark._jvm
hconf = spark._jsc.hadoopConfiguration()
def hpath(p):
    return jvm.org.apache.hadoop.fs.Path(p)
def hfs(p):
    return hpath(p).getFileSystem(hconf)
def exists(p):
    return hfs(p).exists(hpath(p))
def wait_until(check, seconds=240):
    deadline = time.time() + seconds
    while time.time() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise TimeoutError("waited in vain")
def names(p):
    try:
        return sorted(s.getPath().getName() for s in hfs(p).listStatus(hpath(p)))
    except Exception:
        return []
def uncommitted(folder, besides=()):  # entries whose data is complete (_SUCCESS) and no manifest commits it
    return [shape for shape in names(folder) if shape not in besides and "manifest.json" not in names(folder + "/" + shape)
            and any("_SUCCESS" in names(folder + "/" + shape + "/" + d) for d in names(folder + "/" + shape) if d.startswith("data-"))]
def attempt(action):  # "allowed", or the exception's class (AccessControlException: denied)
    try:
        action()
        return "allowed"
    except Exception as e:
        text = str(e)
        return "AccessControlException" if "AccessControlException" in text else text.split(":")[0][-80:]
def mode(p):
    return hfs(p).getFileStatus(hpath(p)).getPermission().toShort()
"""

# Alice's first processes: the first makes the two sources (two files each), the other waits for them.
MAKE_SOURCES = FS_CODE + r"""
for source in (SOURCE, SOURCE2):
    spark.range(60000).selectExpr("id % 7 AS k", "id % 5 AS v", "id % 11 AS k2").repartition(2).write.parquet(source)
"""
WAIT_SOURCES = FS_CODE + r"""
wait_until(lambda: exists(SOURCE2 + "/_SUCCESS"))
"""

# Alice's next process, first step: one lookup planned alone between marks in moto's log (its
# requests), then its read; the modes of her folders.
MEASURE = FS_CODE + MARK_CODE + r"""
df = question(SOURCE, "k", 0)
mark("lookup-begin")
df._jdf.queryExecution().optimizedPlan()
mark("lookup-end")
df.collect()
mark("read-end")
hfs(MEASURED).create(hpath(MEASURED), False).close()  # bob may look into alice's folder now
if PERMISSIONS:
    user = DURABLE + "/alice"
    shape = names(user + "/spark")[0]
    data = [d for d in names(user + "/spark/" + shape) if d.startswith("data-")][0]
    part = [f for f in names(user + "/spark/" + shape + "/" + data) if f.startswith("part-")][0]
    out["modes"] = {"user": mode(user), "spark": mode(user + "/spark"), "entry": mode(user + "/spark/" + shape),
                    "manifest": mode(user + "/spark/" + shape + "/manifest.json"),
                    "part": mode(user + "/spark/" + shape + "/" + data + "/" + part)}
"""
# ... second step: another writer adds a file to the source.
OUTSIDE_WRITE = FS_CODE + MARK_CODE + r"""
spark.range(500).selectExpr("id % 7 AS k", "id % 5 AS v", "id % 11 AS k2").coalesce(1).write.mode("append").parquet(SOURCE)
mark("outside-write")
"""

# Carol's reader: waits until her writer's data is complete and its commit held back, then asks
# again and again until the entry is served: misses before the commit, hits after, never a refusal.
READ_WHILE_COMMITTING = FS_CODE + r"""
folder = DURABLE + "/carol/spark"
wait_until(lambda: uncommitted(folder))
out["loop"] = []
deadline = time.time() + 240
while time.time() < deadline:
    memphis.clear(spark)
    before = counters()
    rows, run = ask(SOURCE2, "k2", 0, "loop-%d" % len(out["loop"]))
    after = counters()
    out["loop"].append({"rows": rows, "hits": after["durable_hits"] - before["durable_hits"],
                        "refused": after["durable_refused"] - before["durable_refused"]})
    if out["loop"][-1]["hits"]:
        break
    open(os.path.join(RELEASE, "reader"), "w").close()  # asked once before the commit: let the writer commit
    time.sleep(0.3)
"""
# ... then waits until the killed writer's data is complete (it never commits), and asks its question.
READ_KILLED = FS_CODE + r"""
folder = DURABLE + "/carol/spark"
served = [e.rstrip("/").split("/")[-1] for e in memphis.entries(spark).path]
served = {p for e in memphis.entries(spark).path for p in e.split("/")}
out["killed_entry"] = wait_until(lambda: uncommitted(folder, besides=served))[0]
out["killed_names"] = names(folder + "/" + out["killed_entry"])
"""

# Bob: what he can do in alice's folder, then his own question.
BOB = FS_CODE + r"""
wait_until(lambda: exists(MEASURED))  # after alice's lookup is counted: only hers then touch her folder
alice = DURABLE + "/alice/spark"
def open_manifest():
    shape = [s.getPath().getName() for s in hfs(DURABLE).listStatus(hpath(alice))][0]
    hfs(alice).open(hpath(alice + "/" + shape + "/manifest.json")).read()
out["bob"] = {"list": attempt(lambda: hfs(alice).listStatus(hpath(alice))), "read": attempt(open_manifest),
              "write": attempt(lambda: hfs(alice).create(hpath(alice + "/planted.json"), False).close())}
"""


def python_env(user, pause_ms=None, barrier=None):
    """The environment of a process of `user`, its writes held before their commit `pause_ms`, or until
    `barrier` (a local folder, a number) holds that many files (DurableWriter.pauseBeforeCommit)."""
    env = {**os.environ, "SPARK_USER": user, "HADOOP_USER_NAME": user}
    hold = (f" -Dmemphis.durable.pauseBeforeCommitMs={pause_ms}" if pause_ms else "") + \
        (f" -Dmemphis.durable.commitBarrier={barrier[0]},{barrier[1]}" if barrier else "")
    if hold:
        env["SPARK_SUBMIT_OPTS"] = os.environ.get("SPARK_SUBMIT_OPTS", "") + hold
    return env


class Process:
    """One APP process of ``user`` with ``steps``; ``result()`` waits for its answers."""

    def __init__(self, store, user, steps, pause_ms=None, barrier=None, **confs):
        args = {"confs": {**TEST_CONFS, "spark.memphis.collected.maxBytes": "0",
                          "spark.memphis.durable.dir": store.durable, **store.confs, **confs},
                "durable": store.durable, "steps": steps}
        self.started = time.time()
        self.process = subprocess.Popen([sys.executable, "-c", APP, json.dumps(args)], stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, env=python_env(user, pause_ms, barrier))

    def result(self, timeout=400):
        out, err = self.process.communicate(timeout=timeout)
        assert self.process.returncode == 0, err[-3000:]
        self.seconds = time.time() - self.started
        return json.loads(out.strip().splitlines()[-1])

    def kill(self):
        self.process.send_signal(signal.SIGKILL)
        self.process.communicate()


class Store:
    def __init__(self, kind, durable, data, confs, server=None):
        self.kind, self.durable, self.data, self.confs, self.server = kind, durable, data, confs, server

    def step(self, source, code="", group="k", **names):
        """A step of APP with `code` run first, the names it uses bound."""
        bound = {"SOURCE": f"{self.data}/sales", "SOURCE2": f"{self.data}/sales2", "DURABLE": self.durable,
                 "MEASURED": f"{self.data}/measured",
                 "ENDPOINT": getattr(self.server, "endpoint", "http://127.0.0.1:9"),
                 "PERMISSIONS": self.kind == "hdfs", **names}
        prelude = "".join(f"{k} = {v!r}\n" for k, v in bound.items())
        return asking(bound[source], prelude + code, group)


class Servers:
    """The HDFS mini cluster and moto's server, each started when a test first needs it, once for the module."""

    def __init__(self, tmp_path_factory):
        self.tmp, self.started = tmp_path_factory, {}

    def get(self, kind):
        if kind not in self.started:
            self.started[kind] = self.start_s3a() if kind == "s3a" else self.start_hdfs()
        return self.started[kind]

    def start_s3a(self):
        classpath("s3a")
        return MotoS3(self.tmp.mktemp("moto"))

    def start_hdfs(self):
        hdfs = MiniHdfs(self.tmp.mktemp("hdfs"))
        try:
            # As an administrator would: a root for the durable tier and one for data that every user may
            # write (1777, as /tmp); each user's folder below it is made owner-only by memphis.
            hdfs.shell(["-mkdir", "-p", "/memphis", "/data"], ["-chmod", "1777", "/memphis", "/data"])
        except Exception:
            hdfs.stop()
            raise
        return hdfs

    def stop(self):
        for server in self.started.values():
            server.stop()


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    started = Servers(tmp_path_factory)
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
def store(request, servers, tmp_path):
    kind = request.param
    if kind == "hdfs":
        hdfs = servers.get("hdfs")
        # The root the administrator made (1777), as every user's process names it; data as alice made it.
        return Store(kind, f"{hdfs.uri}/memphis", f"{hdfs.uri}/data/{tmp_path.name}", hdfs.confs())
    if kind == "s3a":
        s3 = servers.get("s3a")
        return Store(kind, s3.uri(f"{tmp_path.name}/durable"), s3.uri(f"{tmp_path.name}/data"), s3.confs(), s3)
    return Store(kind, str(tmp_path / "durable"), str(tmp_path / "data"), {})


def listing(store):
    """Every file of the store under the durable root (relative names), as the test sees them afterwards."""
    if store.kind == "s3a":
        s3 = boto3.client("s3", endpoint_url=store.server.endpoint, aws_access_key_id="testing",
                          aws_secret_access_key="testing", region_name="us-east-1")
        prefix = store.durable.split("/", 3)[3] + "/"
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=store.server.bucket, Prefix=prefix)
        return sorted(o["Key"][len(prefix):] for page in pages for o in page.get("Contents", []))
    if store.kind == "local":
        return sorted(os.path.relpath(os.path.join(d, f), store.durable) for d, _, fs in os.walk(store.durable) for f in fs)
    return None  # HDFS: the processes list it themselves (a JVM of the test's own would take seconds)


def requests_between(log, begin, end):
    marks = [i for i, r in enumerate(log) if r[0] == "MARK"]
    start = next(i for i in marks if log[i][1] == begin)
    stop = len(log) if end is None else next(i for i in marks if i > start and log[i][1] == end)
    return log[start + 1:stop]


def kind_of(request):
    """A request's kind for counting: what it names, with uuids and times left out."""
    import re
    uuid = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    method, key, query, _ = request
    if "list-type" in query:
        prefix = query.get("prefix", [""])[0]
        return "LIST " + re.sub(uuid, "*", prefix.rstrip("/").rsplit("/", 1)[-1]) + "/" + \
            ("" if query.get("max-keys") != ["2"] else " (probe)")
    name = re.sub(uuid, "*", re.sub(r"\d{13}", "*", key.rstrip("/").rsplit("/", 1)[-1]))
    if "/_temporary" in key:
        return "_temporary/..."
    return re.sub(r"^part-.*", "part-*", name) + ("/" if key.endswith("/") else "")


def alices(requests, store):
    """The requests that touched alice's folder (an object, or a listing of a prefix in it)."""
    root = store.durable.split("/", 3)[3] + "/alice/"
    return [r for r in requests if r[1].startswith(root) or any(p.startswith(root) for p in r[2].get("prefix", []))]


def durable_requests(requests, store):
    """The requests that touched the durable root (an object, or a listing of a prefix under it)."""
    root = store.durable.split("/", 3)[3] + "/"
    return [r for r in requests if r[1].startswith(root) or any(p.startswith(root) for p in r[2].get("prefix", []))]


@pytest.mark.parametrize("store", STORES, indirect=True)
def test_the_durable_tier_on_the_store_serves_the_next_process_never_stale_half_written_or_foreign(store, tmp_path):
    times = {}
    # Wave 1: two writers at once, both alice's, both of each source's shared aggregate.
    started = time.time()
    # Each holds its commit until both have written their data. (The second source is carol's and bob's, below.)
    both_wrote = (str(tmp_path / "both-wrote"), 2)
    first = [Process(store, "alice", [store.step("SOURCE", MAKE_SOURCES)], barrier=both_wrote),
             Process(store, "alice", [store.step("SOURCE", WAIT_SOURCES)], barrier=both_wrote)]
    written = [p.result() for p in first]
    times["two writers at once"] = time.time() - started
    for seen in written:
        assert_answers_right(seen)
        assert seen["steps"][0]["moved"]["durable_hits"] == 0  # both computed the first aggregate at once
        assert seen["steps"][0]["moved"]["durable_refused"] == 0
    # On an object store the later commit replaces the earlier; on HDFS and the local disk (Hadoop's
    # rename does not replace a file) the first stays and the other's rename fails.
    both = sum(seen["steps"][0]["moved"]["durable_writes"] for seen in written)
    assert both == (2 if store.kind == "s3a" else 1)
    assert {e["owner"] for seen in written for e in seen["entries"]} == {"alice"}

    # Wave 2, at once: alice's next process; carol's writer held before its commit, her reader, her
    # killed writer; bob.
    started = time.time()
    alice = Process(store, "alice", [store.step("SOURCE", MEASURE), store.step("SOURCE", OUTSIDE_WRITE)])
    release = tmp_path / "release"
    release.mkdir()
    # Carol's writer commits only once her reader has asked (and missed) while its data was complete.
    writer = Process(store, "carol", [store.step("SOURCE2", group="k2")], barrier=(str(release), 2))
    killed = Process(store, "carol", [store.step("SOURCE2", group="v")], pause_ms=600000)
    reader = Process(store, "carol", [store.step("SOURCE2", READ_WHILE_COMMITTING, group="k2", RELEASE=str(release)),
                                      store.step("SOURCE2", READ_KILLED, group="v")],
                     **{"spark.memphis.durable.maxBytes": "0"})  # it reads and never writes
    bob = Process(store, "bob", [store.step("SOURCE2", BOB)])
    second, committed, reading, bobs = alice.result(), writer.result(), reader.result(), bob.result()
    times["second process (served, outside write)"] = alice.seconds
    times["writer held until the reader asked"] = writer.seconds
    times["reader while it commits"] = reader.seconds
    times["another user"] = bob.seconds
    killed.kill()
    times["wave 2 in all"] = time.time() - started

    print(json.dumps({"store": store.kind, "seconds": {k: round(v, 1) for k, v in times.items()}}))

    # The second process is served from the durable tier: no job scans the source; then a file added
    # to the source: the entry is invalidated, the answer is the new one, and written anew. (Its plain
    # answers came after the file: the first step's are wave 1's.)
    assert second["steps"][0]["answers"] == written[0]["plain"][0]
    assert second["steps"][1]["answers"] == second["plain"][1]
    served, changed = second["steps"][0]["moved"], second["steps"][1]["moved"]
    assert served["durable_hits"] == 3 and served["durable_refused"] == 0
    assert all(r["durable_in_plan"] and not r["scans_source"] for r in second["steps"][0]["runs"])
    assert changed["durable_invalidated"] == 1 and changed["durable_hits"] == 0 and changed["durable_writes"] == 1
    assert second["plain"][1] != written[0]["plain"][0]
    assert {e["owner"] for e in second["entries"]} == {"alice"} and len(second["entries"]) == 1

    # Carol's reader asked while her writer's data was complete and its manifest not there: not served,
    # never refused; once committed, served; every answer right.
    assert_answers_right(committed)
    assert committed["steps"][0]["moved"]["durable_writes"] == 1
    loop = reading["loop"]
    assert len(loop) >= 2 and loop[0]["hits"] == 0 and loop[-1]["hits"] == 1
    assert all(r["refused"] == 0 and r["rows"] == reading["plain"][0][0] for r in loop)
    assert_answers_right(reading)
    assert reading["steps"][0]["moved"]["durable_hits"] == 3
    # The killed writer's data was complete and uncommitted when the reader asked its question: not
    # served, not refused (nothing to refuse: no manifest), computed.
    killed_step = reading["steps"][1]["moved"]
    assert killed_step["durable_hits"] == 0 and killed_step["durable_refused"] == 0
    assert "manifest.json" not in reading["killed_names"] and any(n.startswith("data-") for n in reading["killed_names"])

    # Bob: his own folder, nothing of alice's served; on HDFS he cannot list, read or write in hers.
    assert_answers_right(bobs)
    assert bobs["steps"][0]["moved"]["durable_hits"] == 0 and bobs["steps"][0]["moved"]["durable_writes"] == 1
    assert {e["owner"] for e in bobs["entries"]} == {"bob"}
    if store.kind == "hdfs":
        assert bobs["bob"] == {"list": "AccessControlException", "read": "AccessControlException",
                               "write": "AccessControlException"}
        assert second["modes"] == {"user": 0o700, "spark": 0o700, "entry": 0o700, "manifest": 0o600, "part": 0o600}
    elif store.kind == "s3a":  # no POSIX permissions: the bucket's policy and the credentials decide
        assert bobs["bob"] == {"list": "allowed", "read": "allowed", "write": "allowed"}

    files = listing(store)
    if files is not None:
        assert not any(".manifest-" in f for f in files) or store.kind == "local"
        killed_files = [f for f in files if f.startswith(f"carol/spark/{reading['killed_entry']}/")]
        assert killed_files and not any(f.endswith("/manifest.json") for f in killed_files)

    if store.kind == "s3a":
        log = store.server.requests()
        # A lookup, planned alone. memphis: the user's folder and its `spark` folder listed (once for the
        # queries planned within a second; no `collected` folder: not listed), the manifest read (HEAD,
        # GET), its data folder listed. Then Spark's Parquet relation over the data folder (its own
        # probes of the path and of `_spark_metadata`, its listing), and the read: the data files.
        lookup = alices(requests_between(log, "lookup-begin", "lookup-end"), store)
        read = alices(requests_between(log, "lookup-end", "read-end"), store)
        kinds = [(r[0], kind_of(r)) for r in lookup]
        print(json.dumps({"lookup": kinds, "read": [(r[0], kind_of(r)) for r in read]}))
        assert kinds.count(("HEAD", "manifest.json")) == 1 and kinds.count(("GET", "manifest.json")) == 1
        assert kinds.count(("GET", "LIST alice/")) == 1 and kinds.count(("GET", "LIST spark/")) == 1
        assert not [k for k in kinds if "collected" in k[1]]
        assert len(lookup) <= 12, kinds
        # A commit (alice's entry written anew after the outside write): the manifest written once, in
        # place, after every write of its data; never a temporary manifest, never a copy of one.
        assert not [r for r in durable_requests(log, store) if ".manifest-" in r[1]]
        rewrite = alices(requests_between(log, "outside-write", None), store)
        puts = [i for i, r in enumerate(rewrite) if r[0] == "PUT" and r[1].endswith("/manifest.json")]
        assert len(puts) == 1
        s3 = boto3.client("s3", endpoint_url=store.server.endpoint, aws_access_key_id="testing",
                          aws_secret_access_key="testing", region_name="us-east-1")
        manifest = json.loads(s3.get_object(Bucket=store.server.bucket, Key=rewrite[puts[0]][1])["Body"].read())
        data = rewrite[puts[0]][1].rsplit("/", 1)[0] + "/" + manifest["files"][0]["path"].split("/")[0] + "/"
        writes = [i for i, r in enumerate(rewrite) if r[0] in ("PUT", "POST", "DELETE") and r[1].startswith(data)]
        assert writes and max(writes) < puts[0]
        # memphis's own requests of the write, around Spark's Parquet job: is a manifest there (HEAD), the
        # data folder listed, the manifest written.
        before_data = next(i for i, r in enumerate(rewrite) if r[1].startswith(data)
                           or any(p.startswith(data) for p in r[2].get("prefix", [])))
        memphis_commit = [rewrite[i] for i in range(before_data - 1, puts[0] + 1)
                          if rewrite[i][1].endswith("/manifest.json") or (rewrite[i][2].get("prefix") == [data]
                                                                          and rewrite[i][2].get("max-keys") != ["2"])]
        by_kind = {}
        for r in rewrite:
            by_kind[f"{r[0]} {kind_of(r)}"] = by_kind.get(f"{r[0]} {kind_of(r)}", 0) + 1
        counts = {"lookup": kinds, "read": len(read), "commit": [(r[0], kind_of(r), r[3]) for r in memphis_commit],
                  "alice's requests after the outside write": by_kind}
        print(json.dumps({"s3a requests": counts}))
