"""The staleness corpus: every kind of change to what a query reads, crossed with how the query reaches the
data, each answer with memphis on compared with plain Spark doing the same steps in another process.

One script (:data:`APP`) runs every scenario of one mode in one process: once with memphis on (a session made
with ``memphis.configure_spark``), once with ``spark.memphis.enabled=false``, each over folders, tables and a
metastore of its own; each prints its answers as JSON. A second process per mode (``phase: second``) asks the
queries of the durable-tier scenarios after the first process filed them and their sources changed. The test
compares the two modes answer by answer, writes ``build/staleness_corpus.md`` and fails on any difference.

Kinds of change: files added, removed, rewritten (other size, same size, same size with the modification time
put back) by another process (files written beforehand by :data:`test_staleness.WRITER`, pyarrow, and put in
place by a plain file operation in a subprocess); managed tables (INSERT, INSERT OVERWRITE, a write into the
table's folder by another process, REFRESH TABLE, ALTER TABLE ADD COLUMNS, DROP and re-create) in a Hive
metastore (Derby), so that a new process sees them; views redefined (temporary, global temporary, permanent);
the user's own cache (cache, persist DISK_ONLY, unpersist, clearCache, CACHE TABLE, UNCACHE TABLE, with writes
while it holds old rows); Delta (INSERT, an append committed by another process with pyarrow and a commit file,
UPDATE, DELETE, MERGE, OPTIMIZE, overwrite, RESTORE, VACUUM, and reads of a pinned version) when the Maven
build left Delta's jars in jvm/target/delta-jars;
and non-deterministic expressions, whose answers cannot be compared by value: for them memphis must give no
key and its answers must vary across asks exactly when plain Spark's do.

Paths: (a) a DataFrame built before the change and kept, (b) a DataFrame built after it (a new one at every
ask), (c) SQL text, (t) for Delta a read of the version before the change (``versionAsOf``), (d) a new process
through the durable tier (process 1 asks and files its results, the change happens, process 2 asks).

Each query is asked 3 times per path after each change with memphis on; plain Spark, whose asks of a
deterministic query agree with each other, asks it once, and its answer is compared with each of memphis' (its
non-deterministic queries it asks 3 times, as memphis does: there the asks differ). Changes are applied in a
chain per source, so the asks after one change are the asks before the next: the unchanged query is asked
repeatedly before every change, and memphis must have served something (``hits``, ``results_reused`` or
``durable_hits`` moved) there, so that a pass cannot be one where nothing was reused.
"""
import glob
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import TEST_CONFS, long_lived_jvm_env, run_python
from test_staleness import ADDED, ROWS, WRITER

pytestmark = pytest.mark.slow

HERE = os.path.dirname(os.path.abspath(__file__))
REPORT = os.path.join(HERE, "..", "build", "staleness_corpus.md")  # and the raw answers beside it, .json
DELTA_JARS = sorted(os.path.abspath(j)
                    for j in glob.glob(os.path.join(HERE, "..", "jvm", "target", "delta-jars", "*.jar")))
ASKS = 3
# Plain Spark's asks of a deterministic query per path after each change: its asks agree with each other (all
# 163 deterministic cells of the last run with 3 asks did, 2026-12-07), and one about halves its process's time.
PLAIN_ASKS = 1

# Another process commits an append to a Delta table without Spark: pyarrow writes a Parquet file into the
# table's folder, then the commit file (the next version's JSON: commitInfo and one `add`) is put in place
# with a hard link, which fails if that version exists (Delta's put-if-absent on a local filesystem).
DELTA_APPEND = r"""
import json, os, sys, time, uuid
import pyarrow as pa, pyarrow.compute as pc, pyarrow.parquet as pq
a = json.loads(sys.argv[1])
ids = pa.array(range(a["start"], a["start"] + a["rows"]), pa.int64())
name = f"part-outside-{uuid.uuid4()}.parquet"
pq.write_table(pa.table({"id": ids, "k": pc.remainder(ids, 5), "v": pc.remainder(ids, 7)}),
               os.path.join(a["path"], name))
log = os.path.join(a["path"], "_delta_log")
version = max(int(f[:-5]) for f in os.listdir(log) if f.endswith(".json") and f[:-5].isdigit()) + 1
st = os.stat(os.path.join(a["path"], name))
now = int(time.time() * 1000)
actions = [{"commitInfo": {"timestamp": now, "operation": "WRITE", "operationParameters": {"mode": "Append"},
                           "isBlindAppend": True}},
           {"add": {"path": name, "partitionValues": {}, "size": st.st_size,
                    "modificationTime": st.st_mtime_ns // 10**6, "dataChange": True,
                    "stats": json.dumps({"numRecords": a["rows"]})}}]
tmp = os.path.join(log, f".{version:020d}.json.{uuid.uuid4()}.tmp")
with open(tmp, "w") as f:
    f.write("\n".join(json.dumps(x) for x in actions) + "\n")
os.link(tmp, os.path.join(log, f"{version:020d}.json"))
os.remove(tmp)
print(json.dumps({"version": version}))
"""

# Another process's plain file operation: it writes a staged file's bytes at a path (in place, keeping the
# inode, when the file exists), and with "keep-mtime" puts back the file's modification (and access) time.
PUT = r"""
import os, sys
source, target, keep = sys.argv[1], sys.argv[2], sys.argv[3] == "keep-mtime"
before = os.stat(target) if keep else None
with open(source, "rb") as f:
    data = f.read()
with open(target, "wb") as f:
    f.write(data)
if before is not None:
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
"""

# The files the changes put in place, written once by pyarrow in another process (test_staleness's writer:
# plain encoding, so a file's size depends on its row count only): name -> (first id, rows, shift of v).
STAGED = {"base": (0, ROWS, 0), "next": (ROWS, ROWS, 0), "base_shift1": (0, ROWS, 1), "added": (ROWS, ADDED, 0),
          "added_twice": (ROWS, 2 * ADDED, 0), "added_later": (2 * ROWS, ADDED, 0), "half": (0, ROWS // 2, 0),
          "half_shift1": (0, ROWS // 2, 1), "half_shift2": (0, ROWS // 2, 2)}

# Labels of the changes: a chain's stage and a durable-tier scenario of the same change share one, so that
# both fill one row of the report.
LABELS = dict(
    ADDED_FILE="another process adds a file",
    REMOVED_FILE="another process removes a file",
    OTHER_SIZE="another process rewrites a file, other size",
    SAME_SIZE="another process rewrites a file, same size",
    SAME_MTIME="another process rewrites a file, same size, modification time put back",
    T_INSERT="INSERT INTO",
    T_OVERWRITE="INSERT OVERWRITE",
    T_OUTSIDE="another process writes a file into the table's folder",
    T_REFRESH="REFRESH TABLE (after that write)",
    T_ALTER="ALTER TABLE ADD COLUMNS",
    T_DROP="DROP TABLE, then CREATE TABLE with other rows",
    UNCHANGED="nothing changes (control)",
    V_PERMANENT="permanent view redefined (CREATE OR REPLACE VIEW)",
    C_ADDED="another process adds a file while cache() holds the folder",
)

# The corpus, run in one process per mode. Prints one JSON line: per chain its stages, per stage per path the
# answers and what memphis served at each ask; the non-deterministic scenarios; the durable-tier scenarios.
APP = r"""
import glob, json, os, shutil, subprocess, sys, time
args = json.loads(sys.argv[1])
sys.path.insert(0, args["tests"])
from test_staleness import ADDED, ROWS, reused  # the stale-answer reproductions' helpers
import memphis
from pyspark import StorageLevel
from pyspark.sql import SparkSession, functions as F

ON, ROOT, ASKS, L = args["mode"] == "on", args["root"], args["asks"], args["labels"]
NONDETERMINISTIC_ASKS = args["nondeterministic_asks"]
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
builder = SparkSession.builder.master("local[2]").appName("memphis-staleness-corpus").enableHiveSupport()
for key, value in args["confs"].items():
    builder.config(key, value)
spark = memphis.configure_spark(builder, enabled=ON).getOrCreate()
deadline = time.time() + 30  # the block manager reports its memory shortly after start
while ON and memphis.stats(spark)["storage_budget_bytes"] == 0 and time.time() < deadline:
    time.sleep(0.1)
timings = {}

def norm(value):
    if isinstance(value, (list, tuple)):  # a Row is a tuple
        return [norm(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)

def rows(df):
    return sorted((norm(r) for r in df.collect()), key=json.dumps)

def error_name(e):
    # The error's class: PySpark's condition, else the Java exception's (a Py4JJavaError that PySpark did not
    # convert) with the first condition in its chain of causes.
    condition = getattr(e, "getCondition", None)
    if callable(condition) and condition():
        return condition()
    java = getattr(e, "java_exception", None)
    if java is None:
        return type(e).__name__
    name, seen, cause = java.getClass().getName(), 0, java
    while cause is not None and seen < 10:
        try:
            found = cause.getCondition()
        except Exception:
            found = None
        if found:
            return f"{name} ({found})"
        cause, seen = cause.getCause(), seen + 1
    return name

def ask(make):
    # One ask: (the answer or {"error": its class}, what memphis served during it).
    before = memphis.stats(spark)
    try:
        answer = rows(make())
    except Exception as e:
        answer = {"error": error_name(e)}
    return answer, reused(before, memphis.stats(spark))

def key_of(df):
    if not ON:
        return "not asked"
    try:
        return memphis.lineage_key(df)
    except Exception as e:
        return "error: " + error_name(e)

def explained(df):
    if not ON:
        return None
    try:
        return memphis.explain_key(df)[:1500]
    except Exception as e:
        return "explain failed: " + error_name(e)

def run_sql(text):
    spark.sql(text)  # a command runs when spark.sql analyzes it

def in_another_process(code, *argv):
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout

STAGED = args["staged"]

def put(name, path, keep_mtime=False):
    # Another process writes the staged file `name` at `path` (in place when it exists); returns whether the
    # file kept its size and modification time.
    seen = os.stat(path) if os.path.exists(path) else None
    in_another_process(args["put"], os.path.join(STAGED, name), path, "keep-mtime" if keep_mtime else "")
    now = os.stat(path)
    return {"size_kept": bool(seen) and now.st_size == seen.st_size,
            "mtime_kept": bool(seen) and now.st_mtime_ns == seen.st_mtime_ns}

def remove_in_another_process(path):
    in_another_process("import os, sys; os.remove(sys.argv[1])", path)

def location(table):
    where = spark.sql(f"DESCRIBE TABLE EXTENDED {table}").where("col_name = 'Location'").first()["data_type"]
    return where[len("file:"):] if where.startswith("file:") else where

def per_key(df):
    return df.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("total"))

def per_key_sql(source):
    return f"SELECT k, count(*) AS n, sum(v) AS total FROM {source} GROUP BY k"

def table_query(df):  # with the highest row per key as text, so that a new column shows in the answer
    return df.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("total"),
                               F.max(F.struct("*").cast("string")).alias("top"))

def table_sql(table):
    return f"SELECT k, count(*) AS n, sum(v) AS total, max(CAST(struct(*) AS STRING)) AS top FROM {table} GROUP BY k"

def parquet_folder(name, parts=1):  # ROWS rows a file (part-1: the next ROWS ids), copied from the staged files
    folder = os.path.join(ROOT, name)
    os.makedirs(folder, exist_ok=True)
    for i in range(parts):
        shutil.copyfile(os.path.join(STAGED, ("base", "next")[i] + ".parquet"),
                        os.path.join(folder, f"part-{i}.parquet"))
    return folder

def make_table(name):
    # A managed table of ROWS rows: made empty, then the staged file copied into its folder (no job to run).
    spark.sql(f"CREATE TABLE {name} (id BIGINT, k BIGINT, v BIGINT) USING parquet")
    os.makedirs(location(name), exist_ok=True)
    shutil.copyfile(os.path.join(STAGED, "base.parquet"), os.path.join(location(name), "part-0.parquet"))

# ------------------------------------------------------------------------------------------------------
# Chains: a source, the query's paths, and changes applied one after the other. Before the first change the
# query is asked ASKS times by (b) and (c); after each change, ASKS rounds of every path. (a) is the DataFrame
# built before the change: for the first change one built at the start and never run, for the others the
# last one (b) built, run once before the change.

def chain(name, fresh, sql, stages, pinned=None, unrun=False):
    # unrun: also (a0), a DataFrame built just before each change (after the first) and first run after it.
    kept, out = fresh(), {"name": name, "stages": []}
    never_run = None

    def rounds(skip, tt_version, t0_version):
        nonlocal kept
        paths = {p: {"answers": [], "served": []} for p in ("a", "a0", "b", "c")
                 if p not in skip and (p != "a0" or never_run is not None)}
        if tt_version is not None:
            paths["t"] = {"answers": [], "served": [], "version": tt_version}
        if t0_version is not None:
            paths["t0"] = {"answers": [], "served": [], "version": t0_version}
        built = []
        for _ in range(ASKS):
            for path, cell in paths.items():
                if path == "a":
                    make = lambda: kept
                elif path == "a0":
                    make = lambda: never_run
                elif path == "b":
                    make = lambda: built.append(fresh()) or built[-1]
                elif path == "c":
                    make = lambda: spark.sql(sql)
                else:
                    make = lambda version=cell["version"]: pinned(version)
                started = time.time()
                answer, served = ask(make)
                cell["answers"].append(answer)
                cell["served"].append(served)
                cell.setdefault("seconds", []).append(round(time.time() - started, 3))
        if ON:
            for path, cell in paths.items():
                df = {"a": kept, "a0": never_run}.get(path) or (built[0] if path == "b" and built else None)
                if df is not None:
                    cell["explain"] = explained(df)
        if built:
            kept = built[-1]
        return paths

    # Before any change, (a) is not asked: the first change's (a) is a DataFrame built, never run, before it.
    out["stages"].append({"change": "before any change", "paths": rounds(("a",), None, None),
                          "skip": {"a": "asked after the first change only"}})
    for n, stage in enumerate(stages):
        label, change = stage[0], stage[1]
        options = stage[2] if len(stage) > 2 else {}
        never_run = fresh() if unrun and n > 0 and "a" not in options.get("skip", {}) else None
        started = time.time()
        before_version = pinned and pinned("version")
        note = change()
        change_s = round(time.time() - started, 2)
        pinned_version = None if options.get("unpinned") else before_version
        paths = rounds(options.get("skip", {}), pinned_version, options.get("t0") and options["t0"]())
        out["stages"].append({"change": label, "paths": paths, "note": note, "skip": options.get("skip", {}),
                              "stale_before": options.get("stale_before"), "change_s": change_s})
    return out

def file_chain():
    folder = parquet_folder("files")
    source = f"parquet.`{folder}`"
    part0, part1 = os.path.join(folder, "part-0.parquet"), os.path.join(folder, "part-1.parquet")

    stages = [(L["ADDED_FILE"], lambda: put("added.parquet", part1)),
              (L["REMOVED_FILE"], lambda: remove_in_another_process(part1)),
              (L["OTHER_SIZE"], lambda: put("half.parquet", part0)),
              (L["SAME_SIZE"], lambda: put("half_shift1.parquet", part0)),
              (L["SAME_MTIME"], lambda: put("half_shift2.parquet", part0, keep_mtime=True))]
    return chain("files", lambda: per_key(spark.read.parquet(folder)), per_key_sql(source), stages, unrun=True)

def table_chain():
    make_table("t_chain")
    folder = location("t_chain")

    def drop_and_create():
        spark.sql("DROP TABLE t_chain")
        spark.sql("CREATE TABLE t_chain USING parquet AS SELECT id, id % 5 AS k, id % 3 AS v FROM range(0, 3000)")
    insert = f"INSERT INTO t_chain SELECT id, id % 5, id % 7 FROM range({ROWS}, {ROWS + ADDED})"
    overwrite = f"INSERT OVERWRITE TABLE t_chain SELECT id, id % 5, id % 7 + 1 FROM range(0, {ROWS // 2})"
    stages = [(L["T_INSERT"], lambda: run_sql(insert)),
              (L["T_OVERWRITE"], lambda: run_sql(overwrite)),
              (L["T_OUTSIDE"], lambda: put("added.parquet", os.path.join(folder, "part-outside.parquet"))),
              (L["T_REFRESH"], lambda: run_sql("REFRESH TABLE t_chain"),
               {"stale_before": "before it the table's file list is older than its files: no key, by design"}),
              (L["T_ALTER"], lambda: run_sql("ALTER TABLE t_chain ADD COLUMNS (w BIGINT)")),
              (L["T_DROP"], drop_and_create,
               {"skip": {"a": "a DataFrame built before DROP TABLE reads a table that no longer exists"}})]
    return chain("tables", lambda: table_query(spark.table("t_chain")), table_sql("t_chain"), stages, unrun=True)

def view_chains():
    folder = parquet_folder("views")
    out = []
    for kind, create, ref in (("temporary", "TEMP VIEW", "tv"),
                              ("global temporary", "GLOBAL TEMP VIEW", "global_temp.gv"),
                              ("permanent", "VIEW", "pv")):
        name = ref.split(".")[-1]
        spark.sql(f"CREATE OR REPLACE {create} {name} AS SELECT * FROM parquet.`{folder}` WHERE v > 2")
        redefine = lambda create=create, name=name: run_sql(
            f"CREATE OR REPLACE {create} {name} AS SELECT id, k, v * 10 AS v FROM parquet.`{folder}` WHERE v < 5")
        out.append(chain(f"views ({kind})", lambda ref=ref: per_key(spark.table(ref)), per_key_sql(ref),
                         [(f"{kind} view redefined (CREATE OR REPLACE {create})", redefine)]))
    return out

def cache_chains():
    folder = parquet_folder("cache")
    part1 = os.path.join(folder, "part-1.parquet")
    held = {}

    def cache(how):
        df = spark.read.parquet(folder)
        df.cache() if how == "cache" else df.persist(StorageLevel.DISK_ONLY)
        df.count()
        held[how] = df
    stages = [("cache() of the folder's DataFrame", lambda: cache("cache")),
              (L["C_ADDED"], lambda: put("added.parquet", part1)),
              ("unpersist()", lambda: held["cache"].unpersist(blocking=True) and None),
              ("persist(DISK_ONLY) of the folder's DataFrame", lambda: cache("disk")),
              ("another process rewrites a file (other size) while persist(DISK_ONLY) holds the folder",
               lambda: put("added_twice.parquet", part1)),
              ("spark.catalog.clearCache()", lambda: spark.catalog.clearCache())]
    files = chain("user cache (files)", lambda: per_key(spark.read.parquet(folder)), per_key_sql(f"parquet.`{folder}`"),
                  stages)
    make_table("ct")
    table_folder = location("ct")
    stages = [("CACHE TABLE", lambda: run_sql("CACHE TABLE ct")),
              ("INSERT INTO a cached table",
               lambda: run_sql(f"INSERT INTO ct SELECT id, id % 5, id % 7 FROM range({ROWS}, {ROWS + ADDED})")),
              ("another process writes a file into a cached table's folder",
               lambda: put("added_later.parquet", os.path.join(table_folder, "part-outside.parquet"))),
              ("UNCACHE TABLE", lambda: run_sql("UNCACHE TABLE ct"),
               {"stale_before": "before it the table's file list is older than its files: no key, by design"})]
    tables = chain("user cache (table)", lambda: table_query(spark.table("ct")), table_sql("ct"), stages)
    return [files, tables]

def delta_chain():
    path = os.path.join(ROOT, "delta")
    spark.range(ROWS).selectExpr("id", "id % 5 AS k", "id % 7 AS v").write.format("delta").save(path)
    source = f"delta.`{path}`"
    versions = {}

    def version():
        return max(int(os.path.basename(f)[:-5]) for f in glob.glob(os.path.join(path, "_delta_log", "*.json")))

    def pinned(v):
        if v == "version":
            return version()
        return per_key(spark.read.format("delta").option("versionAsOf", v).load(path))

    def remember(name, do):
        do()
        versions[name] = version()

    merge = (f"MERGE INTO {source} AS t "
             f"USING (SELECT id, id % 5 AS k, CAST(100 AS BIGINT) AS v FROM range(0, {2 * ROWS}, 7)) AS s "
             "ON t.id = s.id "
             "WHEN MATCHED THEN UPDATE SET t.v = s.v WHEN NOT MATCHED THEN INSERT (id, k, v) VALUES (s.id, s.k, s.v)")
    append = json.dumps({"path": path, "start": ROWS + ADDED, "rows": ADDED})
    overwrite = spark.range(ROWS // 2).selectExpr("id", "id % 5 AS k", "id % 3 AS v")
    # (t), the version before the change read pinned, after every other change (a pinned read of the first
    # version, of another process's commit, of DELETE's, of OPTIMIZE's and of RESTORE's): time is precious.
    unpinned = {"unpinned": True}
    insert = f"INSERT INTO {source} SELECT id, id % 5, id % 7 FROM range({ROWS}, {ROWS + ADDED})"
    stages = [("INSERT INTO", lambda: run_sql(insert)),
              ("another process commits an append",
               lambda: json.loads(in_another_process(args["delta_append"], append)), unpinned),
              ("UPDATE", lambda: run_sql(f"UPDATE {source} SET v = v + 10 WHERE k = 1")),
              ("DELETE", lambda: run_sql(f"DELETE FROM {source} WHERE k = 2"), unpinned),
              ("MERGE", lambda: run_sql(merge)),
              ("OPTIMIZE", lambda: remember("optimized", lambda: run_sql(f"OPTIMIZE {source}")), unpinned),
              ("overwrite (DataFrame writer, mode overwrite)",
               lambda: overwrite.write.format("delta").mode("overwrite").save(path)),
              ("RESTORE TABLE ... TO VERSION AS OF 1", lambda: run_sql(f"RESTORE TABLE {source} TO VERSION AS OF 1"),
               unpinned),
              ("VACUUM ... RETAIN 0 HOURS", lambda: run_sql(f"VACUUM {source} RETAIN 0 HOURS"),
               {"t0": lambda: versions["optimized"]})]
    return chain("Delta", lambda: per_key(spark.read.format("delta").load(path)), per_key_sql(source), stages,
                 pinned=pinned)

# ------------------------------------------------------------------------------------------------------
# Non-deterministic expressions: (a) one DataFrame (spark.sql) asked NONDETERMINISTIC_ASKS times, (b) a new
# DataFrame (the DataFrame API) at every ask, (c) the SQL text at every ask. Their answers are summarized, not
# compared.

def nondeterministic():
    folder = parquet_folder("nondeterministic")
    src = f"parquet.`{folder}`"
    df = lambda: spark.read.parquet(folder)
    cases = {
        "rand()": (f"SELECT count(*) AS n FROM {src} WHERE rand() < 0.5",
                   lambda: df().where(F.expr("rand() < 0.5")).agg(F.count("*"))),
        "randn()": (f"SELECT count(*) AS n FROM {src} WHERE randn() < 0",
                    lambda: df().where(F.expr("randn() < 0")).agg(F.count("*"))),
        "uuid()": (f"SELECT uuid() AS u FROM {src} WHERE id < 100",
                   lambda: df().where("id < 100").select(F.expr("uuid()").alias("u"))),
        "shuffle(array)": (
            f"SELECT sum(x) AS s FROM (SELECT id * element_at(shuffle(sequence(1, 10)), 1) AS x FROM {src})",
            lambda: df().select(F.expr("id * element_at(shuffle(sequence(1, 10)), 1)").alias("x")).agg(F.sum("x"))),
        "monotonically_increasing_id()": (
            f"SELECT sum(m) AS s FROM (SELECT monotonically_increasing_id() AS m FROM {src})",
            lambda: df().select(F.monotonically_increasing_id().alias("m")).agg(F.sum("m"))),
        "current_timestamp()": (f"SELECT count(*) AS n, current_timestamp() AS t FROM {src}",
                                lambda: df().agg(F.count("*"), F.current_timestamp())),
        "TABLESAMPLE (50 PERCENT), no seed": (f"SELECT count(*) AS n FROM {src} TABLESAMPLE (50 PERCENT)",
                                              lambda: df().sample(fraction=0.5).agg(F.count("*"))),
    }
    out = []
    for name, (sql, build) in cases.items():
        kept = spark.sql(sql)
        case = {"name": name, "paths": {}}
        for path, make in (("a", lambda: kept), ("b", build), ("c", lambda: spark.sql(sql))):
            answers, keys = [], []
            for _ in range(NONDETERMINISTIC_ASKS):
                frame = make()
                keys.append(key_of(frame))
                answers.append(ask(lambda: frame)[0])
            case["paths"][path] = {"answers": answers, "keys": keys}
        out.append(case)
    return out

# ------------------------------------------------------------------------------------------------------
# The durable tier: scenarios, each a source and a change. The first process builds the sources, asks each
# query ASKS times (memphis files the results), waits for the writes, then makes the changes; the second
# process (phase "second") asks each query ASKS times.

def durable_scenarios():
    d = lambda name: os.path.join(ROOT, "durable", name)
    parquet = lambda name: lambda: per_key(spark.read.parquet(d(name)))
    table = lambda name: lambda: table_query(spark.table(name))

    def files(name, parts=1):
        return lambda: parquet_folder(os.path.join("durable", name), parts)

    def sql(text):
        return lambda: run_sql(text)

    def user_cached(name):
        def setup():
            files(name)()
            df = spark.read.parquet(d(name))
            df.cache()
            df.count()
            put("added.parquet", os.path.join(d(name), "part-1.parquet"))
        return setup

    def drop_and_create():
        spark.sql("DROP TABLE d_drop")
        spark.sql("CREATE TABLE d_drop USING parquet AS SELECT id, id % 5 AS k, id % 3 AS v FROM range(0, 3000)")

    view = "CREATE OR REPLACE VIEW d_view AS SELECT {} FROM parquet.`" + d("view") + "` WHERE {}"
    return [
        ("files", L["ADDED_FILE"], files("added"), parquet("added"),
         lambda: put("added.parquet", os.path.join(d("added"), "part-1.parquet"))),
        ("files", L["REMOVED_FILE"], files("removed", 2), parquet("removed"),
         lambda: remove_in_another_process(os.path.join(d("removed"), "part-1.parquet"))),
        ("files", L["OTHER_SIZE"], files("other_size"), parquet("other_size"),
         lambda: put("half.parquet", os.path.join(d("other_size"), "part-0.parquet"))),
        ("files", L["SAME_SIZE"], files("same_size"), parquet("same_size"),
         lambda: put("base_shift1.parquet", os.path.join(d("same_size"), "part-0.parquet"))),
        ("files", L["SAME_MTIME"], files("same_mtime"), parquet("same_mtime"),
         lambda: put("base_shift1.parquet", os.path.join(d("same_mtime"), "part-0.parquet"), keep_mtime=True)),
        ("files", L["UNCHANGED"], files("unchanged"), parquet("unchanged"), lambda: None),
        ("tables", L["T_INSERT"], lambda: make_table("d_insert"), table("d_insert"),
         sql(f"INSERT INTO d_insert SELECT id, id % 5, id % 7 FROM range({ROWS}, {ROWS + ADDED})")),
        ("tables", L["T_OVERWRITE"], lambda: make_table("d_overwrite"), table("d_overwrite"),
         sql(f"INSERT OVERWRITE TABLE d_overwrite SELECT id, id % 5, id % 7 + 1 FROM range(0, {ROWS // 2})")),
        ("tables", L["T_OUTSIDE"], lambda: make_table("d_outside"), table("d_outside"),
         lambda: put("added.parquet", os.path.join(location("d_outside"), "part-outside.parquet"))),
        ("tables", L["T_ALTER"], lambda: make_table("d_alter"), table("d_alter"),
         sql("ALTER TABLE d_alter ADD COLUMNS (w BIGINT)")),
        ("tables", L["T_DROP"], lambda: make_table("d_drop"), table("d_drop"), drop_and_create),
        ("tables", L["UNCHANGED"], lambda: make_table("d_unchanged"), table("d_unchanged"), lambda: None),
        ("views (permanent)", L["V_PERMANENT"], lambda: files("view")() and run_sql(view.format("*", "v > 2")),
         lambda: per_key(spark.table("d_view")), sql(view.format("id, k, v * 10 AS v", "v < 5"))),
        # The change happens in process 1, while the user's cache holds the folder: process 1 asks after it.
        ("user cache (files)", L["C_ADDED"], user_cached("user_cache"), parquet("user_cache"), lambda: None),
    ]

def durable_asks(query):
    moved = memphis.stats(spark)
    answers, served = [], []
    for _ in range(ASKS):
        answer, n = ask(query)
        answers.append(answer)
        served.append(n)
    after = memphis.stats(spark)
    return {"answers": answers, "served": served,
            **{k: after[k] - moved[k] for k in ("durable_hits", "durable_invalidated", "durable_refused")}}

def settled():
    deadline = time.time() + 120
    while memphis.stats(spark)["durable_writes_pending"] and time.time() < deadline:
        time.sleep(0.1)
    return memphis.stats(spark)

def timed(name, run):
    started = time.time()
    result = run()
    timings[name] = round(time.time() - started, 1)
    return result

out = {"mode": args["mode"], "phase": args["phase"]}
if args["phase"] == "first":
    scenarios = durable_scenarios()

    def first_process():
        before, asked = memphis.stats(spark), {}
        for section, label, setup, query, _ in scenarios:
            setup()
        for section, label, setup, query, _ in scenarios:
            asked[f"{section}: {label}"] = durable_asks(query)
        after = settled()
        notes = {f"{section}: {label}": change() for section, label, setup, query, change in scenarios}
        return {"asked": asked, "durable_writes": after["durable_writes"] - before["durable_writes"], "notes": notes}
    out["durable"] = timed("durable, first process", first_process)
    out["chains"] = timed("files", lambda: [file_chain()])
    out["chains"] += timed("tables", lambda: [table_chain()])
    out["chains"] += timed("views", view_chains)
    out["chains"] += timed("user cache", cache_chains)
    if args["delta"]:
        out["chains"] += timed("Delta", lambda: [delta_chain()])
    out["nondeterministic"] = timed("non-deterministic", nondeterministic)
else:
    out["durable"] = timed("durable, second process", lambda: {
        f"{section}: {label}": durable_asks(query) for section, label, setup, query, change in durable_scenarios()})
    if ON:
        entries = memphis.entries(spark)
        durable = entries[entries.tier == "durable"]
        out["durable_entries"] = durable[["key", "size_bytes", "path"]].astype(str).to_dict("records")
out["timings"] = timings
print(json.dumps(out))
"""

# ---------------------------------------------------------------------------------------------------------
# The test: both modes, then the comparison and the report.


def confs(root):
    more = {
        "spark.sql.shuffle.partitions": "2",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.warehouse.dir": os.path.join(root, "warehouse"),
        "spark.hadoop.javax.jdo.option.ConnectionURL":
            f"jdbc:derby:;databaseName={os.path.join(root, 'metastore')};create=true",
        "spark.driver.extraJavaOptions":
            f"-Dderby.system.home={root} -Dderby.stream.error.file={os.path.join(root, 'derby.log')}",
        "spark.memphis.durable.dir": os.path.join(root, "durable-tier"),
    }
    if DELTA_JARS:
        more.update({"spark.jars": ",".join(DELTA_JARS),
                     "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
                     "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
                     "spark.databricks.delta.snapshotPartitions": "2",
                     "spark.databricks.delta.retentionDurationCheck.enabled": "false",
                     # VACUUM lists the table's folders in one task per slot of this (default 10 000)
                     "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2"})
    return {**TEST_CONFS, **more}


# test_staleness's writer run once per file, all in one other process.
WRITE_ALL = r"""
import json, sys
code, files = sys.argv[1], json.loads(sys.argv[2])
for args in files:
    sys.argv[1:] = [json.dumps(args)]
    exec(code, {"__name__": "__main__"})
"""


def stage_files(folder):
    """Writes the staged files with test_staleness's writer (pyarrow, in another process); returns the folder."""
    os.makedirs(folder, exist_ok=True)
    files = [{"path": os.path.join(folder, name + ".parquet"), "start": start, "rows": rows, "shift": shift}
             for name, (start, rows, shift) in STAGED.items()]
    done = subprocess.run([sys.executable, "-c", WRITE_ALL, WRITER, json.dumps(files)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    size = lambda name: os.path.getsize(os.path.join(folder, name + ".parquet"))
    assert size("half") == size("half_shift1") == size("half_shift2") and size("base") == size("base_shift1"), \
        "precondition: the same-size rewrites have the size of the file they replace"
    return folder


# A process of one mode takes about two minutes alone; beside the TPC-DS corpus (make test starts the longest
# files together) over five. The limit is for a hang, not for a loaded machine.
PHASE_TIMEOUT_S = 900


def run_mode(mode, root, staged):
    """The two processes of one mode: every scenario, then the durable tier's second process."""
    os.makedirs(root, exist_ok=True)
    base = {"mode": mode, "root": root, "asks": ASKS if mode == "on" else PLAIN_ASKS, "nondeterministic_asks": ASKS,
            "tests": HERE, "labels": LABELS, "confs": confs(root),
            "delta": bool(DELTA_JARS), "delta_append": DELTA_APPEND, "put": PUT, "staged": staged}
    env = {k: v for k, v in long_lived_jvm_env().items() if k != "PYSPARK_PYTHON"}
    first = run_python(APP, json.dumps({**base, "phase": "first"}), env=env, timeout=PHASE_TIMEOUT_S)
    second = run_python(APP, json.dumps({**base, "phase": "second"}), env=env, timeout=PHASE_TIMEOUT_S)
    return first, second


PATHS = {"a": "(a) DataFrame built before", "a0": "(a) DataFrame built before, first run after",
         "b": "(b) DataFrame built after", "c": "(c) SQL text",
         "t": "(t) versionAsOf the version before", "t0": "(t) versionAsOf the version after OPTIMIZE"}


def short(value, width=90):
    text = json.dumps(value)
    return text if len(text) <= width else text[:width] + "…"


def cell(on, off, what="plain Spark"):
    """A report cell for one path of one scenario, and the mismatch (None if the answers agree): each of
    memphis' answers against plain Spark's at the same ask, or against its one answer (PLAIN_ASKS)."""
    asks, served = len(on["answers"]), sum(on["served"])
    expected = off["answers"] * asks if len(off["answers"]) == 1 else off["answers"]
    if on["answers"] == expected:
        errors = sorted({a["error"] for a in on["answers"] if isinstance(a, dict)})
        raised = f"; both raise {', '.join(errors)}" if errors else ""
        return f"same as {what} ({asks} asks, served {served}{raised})", None
    n = next(i for i, (x, y) in enumerate(zip(on["answers"], expected)) if x != y)
    mine, plain = on["answers"][n], expected[n]
    return (f"**MISMATCH** at ask {n + 1} of {asks} (served {served}): memphis {short(mine, 60)}, "
            f"plain Spark {short(plain, 60)}"), {
        "ask": n + 1, "memphis": mine, "plain": plain, "served": on["served"],
        "explain": on.get("explain")}


def all_equal(answers):
    return all(a == answers[0] for a in answers)


def values(answers):
    return [json.dumps(v) for a in answers if isinstance(a, list) for row in a for v in row]


def compare(on, off):
    """Both modes' outputs -> (markdown sections, mismatches, problems, cells where memphis served something)."""
    (on1, on2), (off1, off2) = on, off
    mismatches, problems, served_cells, sections = [], [], [], []
    durable = {}
    for key, later in on2["durable"].items():
        first, plain_first = on1["durable"]["asked"][key], off1["durable"]["asked"][key]
        plain_later = off2["durable"][key]
        text1, bad1 = cell(first, plain_first)
        text2, bad2 = cell(later, plain_later)
        for bad, when in ((bad1, "process 1"), (bad2, "process 2")):
            if bad:
                mismatches.append({"scenario": f"{key}, durable tier, {when}", **bad})
        # Asked while the user's cache holds the folder's older file list, the query has no key, by design.
        if sum(first["served"]) < 1 and not key.endswith(LABELS["C_ADDED"]):
            problems.append(f"{key}, durable tier: process 1 asked the unchanged query {ASKS} times, "
                            "memphis served nothing")
        if sum(later["served"]) > 0:
            served_cells.append(f"{key} (d)")
        durable[key] = (f"process 1: {text1}; process 2: {text2}; durable hits {later['durable_hits']}, "
                        f"invalidated {later['durable_invalidated']}")
        note = on1["durable"]["notes"].get(key) or {}
        if key.endswith(LABELS["SAME_SIZE"]) and not note.get("size_kept") or \
                key.endswith(LABELS["SAME_MTIME"]) and not (note.get("size_kept") and note.get("mtime_kept")):
            problems.append(f"{key}, durable tier: precondition, the size (and time) kept: {note}")
        if key.endswith(LABELS["UNCHANGED"]) and later["durable_hits"] < 1:
            problems.append(f"{key}: the second process read nothing from the durable tier (durable_hits 0)")
    if on1["durable"]["durable_writes"] < 1:
        problems.append("the first process wrote nothing to the durable tier")

    groups = {}
    for chain_on, chain_off in zip(on1["chains"], off1["chains"]):
        assert chain_on["name"] == chain_off["name"]
        section = chain_on["name"].split(" (")[0] if chain_on["name"].startswith("views") else chain_on["name"]
        rows = groups.setdefault(section, [])
        previous = None
        for stage_on, stage_off in zip(chain_on["stages"], chain_off["stages"]):
            change, row = stage_on["change"], {}
            if previous is None and section != chain_on["name"]:  # views: one chain per kind
                change = f"{change} ({chain_on['name'][len(section) + 2:-1]} view)"
            for path, reason in stage_on.get("skip", {}).items():
                row[path] = f"n/a: {reason}"
            for path, result in stage_on["paths"].items():
                text, bad = cell(result, stage_off["paths"][path])
                row[path] = text
                if bad:
                    mismatches.append({"scenario": f"{chain_on['name']}: {change}", "path": PATHS[path], **bad})
                if previous is not None and sum(result["served"]) > 0:
                    served_cells.append(f"{chain_on['name']}: {change} {path}")
            if previous is not None and "a0" not in row:  # (a) itself was never run before this change, or n/a
                never = "see (a): that DataFrame was never run before"
                row["a0"] = row["a"] if row.get("a", "").startswith("n/a") else never
            if previous is None:
                row["before"] = "—"
            elif stage_on.get("stale_before"):
                row["before"] = f"not expected: {stage_on['stale_before']}"
            else:
                before = sum(sum(previous["paths"][p]["served"]) for p in ("b", "c"))
                row["before"] = f"served {before}"
                if before < 1:
                    problems.append(f"{chain_on['name']}: {change}: the unchanged query asked {2 * ASKS} times before "
                                    "it (paths b and c), memphis served nothing")
            note = stage_on.get("note") or {}
            if change == LABELS["SAME_SIZE"] and not note.get("size_kept"):
                problems.append(f"{chain_on['name']}: {change}: precondition, the size is kept: {note}")
            if change == LABELS["SAME_MTIME"] and not (note.get("size_kept") and note.get("mtime_kept")):
                problems.append(f"{chain_on['name']}: {change}: precondition, size and time kept: {note}")
            key = f"{chain_on['name']}: {change}"
            row["d"] = durable.pop(key, None)
            rows.append((change, row))
            previous = stage_on
    for key, text in durable.items():  # the controls, asked through the durable tier only
        section, change = key.split(": ", 1)
        groups[section].append((change, {"d": text}))

    na_d = {"views": "n/a: a temporary view lives in its session (a global one in its application)",
            "user cache (files)": "n/a: a user's cache lives in its process",
            "user cache (table)": "n/a: a user's cache lives in its process",
            "Delta": "not run here (tests/test_durable_spark.py: a Delta commit between processes)"}
    for section, rows in groups.items():
        columns = (["a"] + (["a0"] if section in ("files", "tables") else []) + ["b", "c"]
                   + (["t", "t0"] if section == "Delta" else []))
        head = (["change", "served before the change (b, c)"] + [PATHS[c] for c in columns if c != "t0"]
                + ["(d) new process, durable tier"])
        lines = [f"**{section}**", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for change, row in rows:
            cells = [change, row.get("before", "—")]
            for c in columns:
                if c == "t0":
                    continue
                later = c == "t" and change != "before any change"
                text = row.get(c, "not asked after this change (every other change only)" if later else "—")
                if c == "t" and "t0" in row:
                    text += f"; versionAsOf the version after OPTIMIZE: {row['t0']}"
                cells.append(text)
            before_any = change.startswith("before any change")
            cells.append(row.get("d") or ("—" if before_any else na_d.get(section, "—")))
            lines.append("| " + " | ".join(cells) + " |")
        sections.append("\n".join(lines))

    lines = ["**non-deterministic expressions** (answers summarized: do the asks all give the same answer?)", "",
             "| expression | lineage key | (a) one DataFrame asked 3 times | (b) a new DataFrame each ask "
             "| (c) SQL text each ask |",
             "|---|---|---|---|---|"]
    for case_on, case_off in zip(on1["nondeterministic"], off1["nondeterministic"]):
        name, cells, keys = case_on["name"], [], []
        for path in ("a", "b", "c"):
            mine, plain = case_on["paths"][path], case_off["paths"][path]
            same, plain_same = all_equal(mine["answers"]), all_equal(plain["answers"])
            repeats = len(set(values(mine["answers"]))) < len(values(mine["answers"]))
            plain_repeats = len(set(values(plain["answers"]))) < len(values(plain["answers"]))
            word = lambda equal: "all equal" if equal else "not all equal"
            if same == plain_same and (name != "uuid()" or repeats == plain_repeats):
                extra = f", uuids {'repeat' if repeats else 'never repeat'}" if name == "uuid()" else ""
                cells.append(f"as plain Spark ({len(mine['answers'])} asks: {word(same)}{extra})")
            else:
                cells.append(f"**MISMATCH**: memphis {word(same)}, plain Spark {word(plain_same)}")
                mismatches.append({"scenario": f"non-deterministic {name}", "path": PATHS[path],
                                   "memphis": mine["answers"], "plain": plain["answers"], "keys": mine["keys"]})
            k = mine["keys"]
            if path != "b" or name != "TABLESAMPLE (50 PERCENT), no seed":
                keys.append("none" if all(x is None for x in k) else f"{path}: {k}")
                if any(x is not None for x in k):
                    problems.append(f"non-deterministic {name}, {PATHS[path]}: memphis gives a lineage key {k}")
            else:  # DataFrame.sample() draws its seed when called: each DataFrame its own key, as F.rand()
                keys.append("b: one of its own per DataFrame" if len(set(k)) == len(k) else f"b: shared {k}")
                if len(set(k)) != len(k):
                    problems.append(f"non-deterministic {name}: DataFrames with different seeds share a key {k}")
        if name == "rand()" and all_equal(case_on["paths"]["c"]["answers"]):
            problems.append(f"rand(): the SQL text's 3 asks all equal with memphis: {case_on['paths']['c']['answers']}")
        if name == "uuid()":
            asked = values(case_on["paths"]["c"]["answers"])
            if len(set(asked)) != len(asked):
                problems.append("uuid(): values repeat across asks of the SQL text with memphis")
        key_text = ("none" if all(k == "none" for k in keys)
                    else "; ".join(k for k in keys if k != "none") + " (others none)")
        lines.append(f"| {name} | {key_text} | " + " | ".join(cells) + " |")
    sections.append("\n".join(lines))
    return sections, mismatches, problems, served_cells


# At least this many (change, path) cells, after a change, where memphis served something.
MIN_SERVED = 30


def test_staleness_corpus(no_spark, tmp_path):
    started = time.time()
    staged = stage_files(str(tmp_path / "staged"))
    on = run_mode("on", str(tmp_path / "on"), staged)
    off = run_mode("off", str(tmp_path / "off"), staged)
    seconds = time.time() - started
    sections, mismatches, problems, served = compare(on, off)
    timings = {mode: {**first["timings"], **second["timings"]} for mode, (first, second) in (("on", on), ("off", off))}
    os.makedirs(os.path.dirname(REPORT), exist_ok=True)
    with open(REPORT[:-len(".md")] + ".json", "w") as f:
        json.dump({"on": on, "off": off}, f)
    with open(REPORT, "w") as f:
        f.write("# The staleness corpus\n\n"
                f"Generated by `tests/test_staleness_corpus.py` in {seconds:.0f} s; {len(mismatches)} mismatches; "
                f"memphis served something in {len(served)} (change, path) cells after a change. Delta: "
                f"{'run' if DELTA_JARS else 'not run (no jars in jvm/target/delta-jars)'}. "
                f"Seconds per part: {timings}.\n\n"
                + "\n\n".join(sections) + "\n")
        if mismatches or problems:
            f.write("\n## Mismatches and problems\n\n"
                    + "\n".join(f"- `{short(m, 3000)}`" for m in mismatches + problems) + "\n")
    assert not mismatches, f"memphis answered differently from plain Spark (see {REPORT}): {short(mismatches, 6000)}"
    assert not problems, problems
    assert len(served) >= MIN_SERVED, f"memphis served something in only {len(served)} cells: {served}"
