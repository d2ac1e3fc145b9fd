"""Stale answers: the issue's six reproductions and one the staleness corpus found, each checked against
plain Spark doing the same steps.

Every test asks its queries three times with memphis on (default settings, ``memphis.session("local[2]")``
through the ``fresh`` fixture) and compares each answer with the one plain Spark gives for the same steps
(memphis off in the same session, on a copy of the data made the same way, or in the same subprocess);
where a count is the point it is also computed with pyarrow, so no right answer here is a constant.
"Another process" is always a subprocess (:data:`WRITER`: pyarrow writing a Parquet file, or rewriting one
in place), never the Spark session under test. Where reuse should happen after a fix, the test also checks
that it did (memphis' counters moved), so that a pass cannot come from memphis doing nothing.
"""
import glob
import json
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from pyspark import StorageLevel
from pyspark.sql import functions as F

import memphis
from conftest import TEST_CONFS, eventually, memphis_off, run_python

ROWS = 10_000  # the table before another process adds to it
ADDED = 1_000  # the rows another process adds

# Another process's write: a Parquet file of `rows` rows (id from `start`; k = id % 5; v = id % 7 + shift),
# written by pyarrow. Plain encoding, no compression and no dictionary, so that a file's size depends on its
# row count only (the statistics pyarrow writes by default are fixed-width min/max of int64 columns): the
# in-place rewrite of test 5 keeps its size, and only its footer's statistics and its pages differ. With
# "restore_mtime" it overwrites an existing file and puts back the file's modification (and access) time.
WRITER = r"""
import json, os, sys
import pyarrow as pa, pyarrow.compute as pc, pyarrow.parquet as pq
a = json.loads(sys.argv[1])
before = os.stat(a["path"]) if a.get("restore_mtime") else None
os.makedirs(os.path.dirname(a["path"]), exist_ok=True)
ids = pa.array(range(a["start"], a["start"] + a["rows"]), pa.int64())
table = pa.table({"id": ids, "k": pc.remainder(ids, 5), "v": pc.add(pc.remainder(ids, 7), a.get("shift", 0))})
pq.write_table(table, a["path"], compression="NONE", use_dictionary=False)
if before is not None:
    os.utime(a["path"], ns=(before.st_atime_ns, before.st_mtime_ns))
print(json.dumps({"size": os.path.getsize(a["path"]), "mtime_ns": os.stat(a["path"]).st_mtime_ns}))
"""


def another_process_writes(path, start=0, rows=ROWS, shift=0, restore_mtime=False):
    """Writes a Parquet file from a subprocess (another process than the Spark session's); returns its
    size and modification time (ns) as that process saw them."""
    args = {"path": str(path), "start": start, "rows": rows, "shift": shift, "restore_mtime": restore_mtime}
    done = subprocess.run([sys.executable, "-c", WRITER, json.dumps(args)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def pyarrow_rows(folder):
    """The rows of a Parquet folder as pyarrow reads them (hidden and `_` files skipped, as Spark skips them)."""
    files = [f for f in glob.glob(os.path.join(str(folder), "*.parquet"))
             if not os.path.basename(f).startswith((".", "_"))]
    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


def rows(df):
    return sorted(tuple(r) for r in df.collect())


def total(answer, column=1):
    """The rows an aggregate's answer counts: the sum of its count column."""
    return sum(r[column] for r in answer)


def reused(before, after):
    """How many times memphis served something between two reads of memphis.stats (a cached subplan,
    collected rows or a durable entry)."""
    moved = {k: after[k] - before[k] for k in ("hits", "results_reused", "durable_hits")}
    return moved["hits"] + moved["results_reused"] + moved["durable_hits"]


def off_then_on(spark, tmp_path, steps):
    """``steps(spark, folder)`` with memphis off over tmp_path/off, then (memphis's and Spark's caches cleared)
    on over tmp_path/on: (plain Spark's answers, memphis's answers, what else memphis's run returned)."""
    plain, _ = memphis_off(spark, lambda: steps(spark, tmp_path / "off"))
    memphis.clear(spark)
    spark.catalog.clearCache()
    on, more = steps(spark, tmp_path / "on")
    return plain, on, more


def counts_query(df):
    return df.groupBy("k").count()


# ---------------------------------------------------------------------------------------------------------
# 1. A DataFrame built before another process added a file.

def df_built_before_the_file(spark, folder):
    """The issue's steps; returns the answers: the old DataFrame's (once before, 3x after) and the fresh read's (3x)."""
    another_process_writes(folder / "part-0.parquet")
    df = spark.read.parquet(str(folder))
    first = rows(counts_query(df))
    another_process_writes(folder / "part-1.parquet", start=ROWS, rows=ADDED)
    old = [rows(counts_query(df)) for _ in range(3)]
    before = memphis.stats(spark)
    fresh = [rows(counts_query(spark.read.parquet(str(folder)))) for _ in range(3)]
    return {"first": first, "old": old, "fresh": fresh, "reused_fresh": reused(before, memphis.stats(spark))}


def test_a_fresh_read_after_another_process_added_a_file_sees_it(fresh, tmp_path):
    spark = fresh
    plain = memphis_off(spark, lambda: df_built_before_the_file(spark, tmp_path / "off"))
    memphis.clear(spark)
    on = df_built_before_the_file(spark, tmp_path / "on")
    assert pyarrow_rows(tmp_path / "on") == ROWS + ADDED
    assert [total(a) for a in plain["fresh"]] == [pyarrow_rows(tmp_path / "off")] * 3, "plain Spark sees the file"
    assert [total(a) for a in plain["old"]] == [ROWS] * 3, "plain Spark: the old DataFrame's file list is older"
    assert [total(a) for a in on["fresh"]] == [total(a) for a in plain["fresh"]], \
        "rows counted by a fresh read with memphis (left) and plain Spark (right)"
    assert on["fresh"] == plain["fresh"]
    assert on["old"] == plain["old"] and on["first"] == plain["first"]
    assert on["reused_fresh"] >= 1, "the fresh query asked 3 times: memphis served it at least once"


def sql_built_before_the_file(spark, folder, order):
    """A query parsed and analyzed (spark.sql) before the file arrived and first run after it, and the same
    query made afresh, asked in `order`; returns their answers (3x each)."""
    another_process_writes(folder / "part-0.parquet")
    query = f"SELECT k, count(*) AS n FROM parquet.`{folder}` GROUP BY k"
    pre = spark.sql(query)
    another_process_writes(folder / "part-1.parquet", start=ROWS, rows=ADDED)
    answers, moved = {}, {}
    for which in order:
        before = memphis.stats(spark)
        answers[which] = [rows(pre if which == "pre" else spark.sql(query)) for _ in range(3)]
        moved[which] = reused(before, memphis.stats(spark))
    return answers, moved


@pytest.mark.parametrize("order", [("pre", "fresh"), ("fresh", "pre")], ids=["pre-first", "fresh-first"])
def test_a_query_analyzed_before_another_process_added_a_file_answers_as_plain_spark(fresh, tmp_path, order):
    spark = fresh
    plain, _ = memphis_off(spark, lambda: sql_built_before_the_file(spark, tmp_path / "off", order))
    memphis.clear(spark)
    on, moved = sql_built_before_the_file(spark, tmp_path / "on", order)
    assert [total(a) for a in plain["fresh"]] == [pyarrow_rows(tmp_path / "off")] * 3
    for which in order:
        assert [total(a) for a in on[which]] == [total(a) for a in plain[which]], \
            f"rows counted by the {which} query with memphis (left) and plain Spark (right)"
        assert on[which] == plain[which]
    assert moved["fresh"] >= 1, "the fresh query asked 3 times: memphis served it at least once"


# One process of the durable-tier tests: a memphis session whose durable tier is the test's folder runs
# `steps` in order: "write" (another process writes a file: WRITER in a subprocess), "build" (a DataFrame
# over the folder, kept for later asks), "ask" (a query 3x, over the built DataFrame or a fresh read; memphis
# on or off). Prints, per ask, the answers and what memphis' counters did; waits for the durable writes.
DURABLE_APP = r"""
import json, os, subprocess, sys, time
import memphis
from pyspark.sql import functions as F

args = json.loads(sys.argv[1])
spark = memphis.session("local[2]", app_name="memphis-staleness", **args["confs"])
spark.conf.set("spark.memphis.enabled", "true")

def query(df):
    return df.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("total"))

def settled():
    deadline = time.time() + 120
    while memphis.stats(spark)["durable_writes_pending"] and time.time() < deadline:
        time.sleep(0.2)
    return memphis.stats(spark)

built, out = None, []
for step in args["steps"]:
    if step["do"] == "write":
        done = subprocess.run([sys.executable, "-c", args["writer"], json.dumps(step["args"])],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    elif step["do"] == "build":
        built = spark.read.parquet(args["folder"])
    else:
        spark.conf.set("spark.memphis.enabled", str(step["memphis"]).lower())
        before = settled()
        answers = [sorted(map(list, query(built if step["old"] else spark.read.parquet(args["folder"])).collect()))
                   for _ in range(3)]
        after = settled()
        spark.conf.set("spark.memphis.enabled", "true")
        out.append({"answers": answers, "moved": {k: after[k] - before[k] for k in
                    ("hits", "results_reused", "durable_hits", "durable_writes", "durable_invalidated", "durable_refused")}})
print(json.dumps(out))
"""


def durable_process(durable, folder, steps):
    confs = {**TEST_CONFS, "spark.memphis.durable.dir": str(durable)}
    return run_python(DURABLE_APP, json.dumps({"confs": confs, "folder": str(folder), "steps": steps, "writer": WRITER}))


def write_step(path, **more):
    return {"do": "write", "args": {"path": str(path), "start": 0, "rows": ROWS, **more}}


def ask_step(old=False, on=True):
    return {"do": "ask", "old": old, "memphis": on}


@pytest.mark.slow
def test_a_new_process_reading_the_durable_tier_sees_the_file_another_process_added(no_spark, tmp_path):
    folder, durable = tmp_path / "data", tmp_path / "durable"
    # The first process: a DataFrame built over 10 000 rows, asked; another process adds a file; the old
    # DataFrame asked 3x (plain Spark: 10 000, its file list is older), its results filed in the durable tier.
    first = durable_process(durable, folder, [write_step(folder / "part-0.parquet"), {"do": "build"}, ask_step(old=True),
                                              write_step(folder / "part-1.parquet", start=ROWS, rows=ADDED),
                                              ask_step(old=True), ask_step(old=True, on=False)])
    assert first[1]["answers"] == first[2]["answers"], "the first process answers as plain Spark"
    assert first[0]["moved"]["durable_writes"] + first[1]["moved"]["durable_writes"] >= 1, "it filed its results"
    # A new process asks the fresh query 3x with memphis on, then with memphis off.
    second = durable_process(durable, folder, [ask_step(), ask_step(on=False)])
    on, plain = second
    assert [total(a) for a in plain["answers"]] == [pyarrow_rows(folder)] * 3 == [ROWS + ADDED] * 3
    assert [total(a) for a in on["answers"]] == [total(a) for a in plain["answers"]], \
        f"rows counted by the new process with memphis (left) and plain Spark (right); memphis moved {on['moved']}"
    assert on["answers"] == plain["answers"]
    assert on["moved"]["hits"] + on["moved"]["results_reused"] + on["moved"]["durable_hits"] >= 1


# ---------------------------------------------------------------------------------------------------------
# 2. REFRESH TABLE after an outside write into a managed table's folder.

def refreshed_table(spark, table, ask_between):
    spark.range(ROWS).selectExpr("id", "id % 5 AS k", "id % 7 AS v").write.saveAsTable(table)
    query = f"SELECT k, count(*) AS n FROM {table} GROUP BY k"
    before = [rows(spark.sql(query)) for _ in range(3)]
    folder = spark.sql(f"DESCRIBE TABLE EXTENDED {table}").where("col_name = 'Location'").first()["data_type"]
    folder = folder[len("file:"):] if folder.startswith("file:") else folder
    another_process_writes(os.path.join(folder, "part-outside.parquet"), start=ROWS, rows=ADDED)
    between = [rows(spark.sql(query)) for _ in range(3)] if ask_between else None
    spark.sql(f"REFRESH TABLE {table}")
    stats = memphis.stats(spark)
    after = [rows(spark.sql(query)) for _ in range(3)]
    return {"before": before, "between": between, "after": after, "folder": folder,
            "reused_after": reused(stats, memphis.stats(spark))}


@pytest.mark.parametrize("ask_between", [False, True], ids=["refresh-at-once", "asked-before-refresh"])
def test_refresh_table_after_an_outside_write_sees_the_new_rows(no_spark, tmp_path, ask_between):
    spark = memphis.session("local[2]", app_name="memphis-staleness-refresh",
                            **{**TEST_CONFS, "spark.sql.warehouse.dir": str(tmp_path / "warehouse")})
    try:
        spark.conf.set("spark.memphis.enabled", "true")
        assert eventually(lambda: memphis.stats(spark)["storage_budget_bytes"] > 0)
        plain = memphis_off(spark, lambda: refreshed_table(spark, "t_off", ask_between))
        memphis.clear(spark)
        on = refreshed_table(spark, "t", ask_between)
        assert on["folder"].startswith(str(tmp_path / "warehouse"))
        assert [total(a) for a in plain["after"]] == [pyarrow_rows(plain["folder"])] * 3 == [ROWS + ADDED] * 3
        assert [total(a) for a in on["after"]] == [total(a) for a in plain["after"]], \
            "rows counted after REFRESH TABLE with memphis (left) and plain Spark (right)"
        assert on == {**plain, "folder": on["folder"], "reused_after": on["reused_after"]}
        assert on["reused_after"] >= 1, "the query asked 3 times after the refresh: memphis served it at least once"
    finally:
        spark.stop()


# ---------------------------------------------------------------------------------------------------------
# 3. A user's own cache, made stale by an outside write, outlives the user's unpersist().

def user_cache_unpersisted(spark, folder):
    another_process_writes(folder / "part-0.parquet")

    def agg():
        return spark.read.parquet(str(folder)).groupBy("k").agg(F.count("*").alias("n"))
    a = agg().cache()
    a.count()
    another_process_writes(folder / "part-1.parquet", start=ROWS, rows=ADDED)
    a.unpersist(blocking=True)
    before = memphis.stats(spark)
    answers = [agg().agg(F.sum("n")).collect()[0][0] for _ in range(3)]
    return answers, reused(before, memphis.stats(spark))


def test_a_users_cache_made_stale_by_an_outside_write_is_gone_after_unpersist(fresh, tmp_path):
    spark = fresh
    plain, on, moved = off_then_on(spark, tmp_path, user_cache_unpersisted)
    assert plain == [pyarrow_rows(tmp_path / "off")] * 3 == [ROWS + ADDED] * 3
    assert on == plain, "rows counted after unpersist with memphis (left) and plain Spark (right)"
    assert moved >= 1, "the query asked 3 times: memphis served it at least once"


def fresh_read_while_a_users_cache_holds_the_folder(spark, folder):
    """A fresh read asked while the user's cache of the folder's DataFrame, made before another process added
    a file, holds it (Spark answers from that cache, by folder), then after unpersist()."""
    another_process_writes(folder / "part-0.parquet")

    def total_n():
        return spark.read.parquet(str(folder)).groupBy("k").agg(F.count("*").alias("n")).agg(F.sum("n")).collect()[0][0]
    cached = spark.read.parquet(str(folder)).cache()
    cached.count()
    another_process_writes(folder / "part-1.parquet", start=ROWS, rows=ADDED)
    while_cached = [total_n() for _ in range(3)]
    cached.unpersist(blocking=True)
    before = memphis.stats(spark)
    after = [total_n() for _ in range(3)]
    return (while_cached, after), reused(before, memphis.stats(spark))


def test_rows_a_users_stale_cache_answered_are_not_served_after_unpersist(fresh, tmp_path):
    spark = fresh
    plain, on, moved = off_then_on(spark, tmp_path, fresh_read_while_a_users_cache_holds_the_folder)
    assert plain == ([ROWS] * 3, [pyarrow_rows(tmp_path / "off")] * 3) == ([ROWS] * 3, [ROWS + ADDED] * 3)
    assert on == plain, "rows counted while cached, then after unpersist, with memphis (left) and plain Spark (right)"
    assert moved >= 1, "the query asked 3 times after unpersist: memphis served it at least once"


# ---------------------------------------------------------------------------------------------------------
# 4. An unseeded TABLESAMPLE is drawn afresh at every ask.

def test_an_unseeded_tablesample_is_drawn_afresh_at_every_ask(fresh, tmp_path):
    spark = fresh
    folder = tmp_path / "data"
    for i in range(4):
        another_process_writes(folder / f"part-{i}.parquet", start=i * ROWS // 4, rows=ROWS // 4)
    query = f"SELECT count(*) FROM parquet.`{folder}` TABLESAMPLE (50 PERCENT)"
    # Why 5 equal counts mean a frozen answer: each ask draws a new seed for an unseeded TABLESAMPLE (Spark 4.2
    # leaves Sample's seed empty and draws it when the query runs; up to 4.1 the parser draws it from only
    # 1000 values, (math.random * 1000).toInt: the worse case, taken here), and each row is kept with
    # probability 1/2 by a generator seeded from it, so a count is Binomial(10 000, 1/2), whose most likely
    # value has probability 1/sqrt(2 pi 2500) < 0.008. Among 5 asks there are at least 4 distinct seeds but
    # for probability < 1e-4 (two of the 10 pairs alike, each 1/1000), and the counts of distinct seeds are
    # independent: P(5 equal counts) < 0.008^3 + 1e-4 * 0.008 < 1.4e-6. Plain Spark is checked the same
    # way, as a control.
    plain = memphis_off(spark, lambda: [spark.sql(query).collect()[0][0] for _ in range(5)])
    assert len(set(plain)) > 1, f"plain Spark draws a new sample at every ask: {plain}"
    key = memphis.lineage_key(spark.sql(query))
    why = memphis.explain_key(spark.sql(query))
    on = [spark.sql(query).collect()[0][0] for _ in range(5)]
    assert all(abs(n - ROWS / 2) < 500 for n in on + plain), "about half the rows, with memphis too"
    assert len(set(on)) > 1, f"memphis answers an unseeded TABLESAMPLE the same every time: {on} (plain Spark: {plain})"
    assert key is None, f"an unseeded TABLESAMPLE has no lineage key; memphis gives {key}: {why}"


# ---------------------------------------------------------------------------------------------------------
# 5. A Parquet file rewritten in place, its size the same and its modification time put back.

def rewritten_in_place(folder):
    """Another process rewrites part-0 with other values (v + 1) of the same width; the size must match
    (asserted: the case needs it) and the modification time is restored."""
    victim = folder / "part-0.parquet"
    seen = os.stat(victim)
    now = another_process_writes(victim, shift=1, restore_mtime=True)
    assert now["size"] == seen.st_size, "precondition: the rewritten file has the old file's size"
    assert now["mtime_ns"] == seen.st_mtime_ns == os.stat(victim).st_mtime_ns, "precondition: the old mtime is back"


def sums_query(spark, folder):
    return spark.read.parquet(str(folder)).groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("total"))


def in_session_rewrite(spark, folder):
    another_process_writes(folder / "part-0.parquet")
    stats = memphis.stats(spark)
    before = [rows(sums_query(spark, folder)) for _ in range(3)]
    served_before = reused(stats, memphis.stats(spark))
    rewritten_in_place(folder)
    after = [rows(sums_query(spark, folder)) for _ in range(3)]
    return {"before": before, "after": after}, served_before


def test_a_file_rewritten_in_place_with_its_size_and_mtime_kept_is_not_served_stale(fresh, tmp_path):
    spark = fresh
    plain, on, served_before = off_then_on(spark, tmp_path, in_session_rewrite)
    assert served_before >= 1, "the query asked 3 times before the rewrite: memphis served it at least once"
    assert plain["after"] != plain["before"], "plain Spark sees the rewrite"
    assert [total(a, 2) for a in on["after"]] == [total(a, 2) for a in plain["after"]], \
        "sum(v) after the rewrite with memphis (left) and plain Spark (right)"
    assert on == plain


@pytest.mark.slow
def test_a_file_rewritten_in_place_with_its_size_and_mtime_kept_is_not_served_from_the_durable_tier(no_spark, tmp_path):
    folder, durable = tmp_path / "data", tmp_path / "durable"
    first = durable_process(durable, folder, [write_step(folder / "part-0.parquet"), ask_step(), ask_step(on=False)])
    assert first[0]["answers"] == first[1]["answers"]
    assert first[0]["moved"]["durable_writes"] >= 1, "the first process filed its results"
    rewritten_in_place(folder)
    on, plain = durable_process(durable, folder, [ask_step(), ask_step(on=False)])
    assert plain["answers"] != first[1]["answers"], "plain Spark sees the rewrite"
    assert [total(a, 2) for a in on["answers"]] == [total(a, 2) for a in plain["answers"]], \
        f"sum(v) in the new process with memphis (left) and plain Spark (right); memphis moved {on['moved']}"
    assert on["answers"] == plain["answers"]


# ---------------------------------------------------------------------------------------------------------
# 6. A user's persist and unpersist of a plan memphis holds; memphis.clear and the user's own cache.

MEMPHIS_RDD = "In-memory table memphis"


def persisted_rdd_names(spark):
    return sorted(rdd.name() or "" for rdd in spark.sparkContext._jsc.getPersistentRDDs().values())


def storage_infos(spark):
    return [(i.name(), i.storageLevel().description(), i.numCachedPartitions())
            for i in spark.sparkContext._jsc.sc().getRDDStorageInfo()]


def held_by_memphis(spark, folder):
    """A per-key aggregate over `folder` asked in three queries, so that memphis persists and holds it."""
    def agg():
        return spark.read.parquet(str(folder)).groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("total"))
    answers = [rows(agg().where(F.col("total") > i)) for i in range(3)]
    return agg, answers


def test_clear_after_a_user_persisted_and_unpersisted_a_plan_memphis_holds_leaves_nothing(fresh, tmp_path):
    spark = fresh
    another_process_writes(tmp_path / "data" / "part-0.parquet")
    plain = memphis_off(spark, lambda: held_by_memphis(spark, tmp_path / "data")[1])
    leaks = []
    for attempt in range(5):
        agg, on = held_by_memphis(spark, tmp_path / "data")
        assert on == plain
        assert eventually(lambda: any(n.startswith(MEMPHIS_RDD) for n in persisted_rdd_names(spark))), \
            f"memphis holds the aggregate: {memphis.entries(spark).to_string()}"
        df = agg()
        df.persist()
        df.count()
        df.unpersist(blocking=True)
        memphis.clear(spark)
        eventually(lambda: not any(n.startswith(MEMPHIS_RDD) for n in persisted_rdd_names(spark)), seconds=5)
        left = [n for n in persisted_rdd_names(spark) if n.startswith(MEMPHIS_RDD)]
        held = {k: v for k, v in memphis.stats(spark).items() if k in ("bytes_held", "bytes_held_storage") and v}
        if left or held:
            leaks.append((attempt, left, held, storage_infos(spark)))
        spark.catalog.clearCache()  # the next attempt starts from nothing, whatever this one left
    assert not leaks, f"after memphis.clear, RDDs memphis persisted still persisted, or bytes still held: {leaks}"


def user_cache_of_a_held_plan(spark, folder, persist):
    agg, answers = held_by_memphis(spark, folder)
    memphis_held = eventually(lambda: any(n.startswith(MEMPHIS_RDD) for n in persisted_rdd_names(spark)), seconds=5)
    df = agg()
    persist(df)
    df.count()
    infos = storage_infos(spark)
    user_rdds = [i for i in infos if not i[0].startswith(MEMPHIS_RDD) and i[2] > 0]
    level = df.storageLevel
    memphis.clear(spark)
    level_after_clear = df.storageLevel
    cached_after_clear = spark._jsparkSession.sharedState().cacheManager().lookupCachedData(df._jdf).isDefined()
    answer_after = rows(df)
    df.unpersist(blocking=True)
    return {"answers": answers, "level": str(level), "user_rdd_levels": sorted(i[1] for i in user_rdds),
            "level_after_clear": str(level_after_clear), "cached_after_clear": cached_after_clear,
            "answer_after": answer_after, "memphis_held": memphis_held}


@pytest.mark.parametrize("how", ["cache", "persist-disk-only"])
def test_a_users_cache_of_a_plan_memphis_holds_is_the_users_and_survives_clear(fresh, tmp_path, how):
    spark = fresh
    persist = (lambda df: df.cache()) if how == "cache" else (lambda df: df.persist(StorageLevel.DISK_ONLY))
    another_process_writes(tmp_path / "data" / "part-0.parquet")
    plain = memphis_off(spark, lambda: user_cache_of_a_held_plan(spark, tmp_path / "data", persist))
    spark.catalog.clearCache()
    memphis.clear(spark)
    on = user_cache_of_a_held_plan(spark, tmp_path / "data", persist)
    assert on.pop("memphis_held"), "memphis held the aggregate before the user cached it"
    plain.pop("memphis_held")
    assert plain["cached_after_clear"] and plain["user_rdd_levels"], "plain Spark: the user's cache is there"
    held = memphis.stats(spark)
    assert on["level"] == plain["level"], "the DataFrame's storage level with memphis (left) and plain Spark (right)"
    assert on["user_rdd_levels"] == plain["user_rdd_levels"], \
        "the user's cached RDDs' levels with memphis (left) and plain Spark (right)"
    assert on["level_after_clear"] == plain["level_after_clear"], "the user's level after memphis.clear"
    assert on["cached_after_clear"], "memphis.clear dropped the user's cache"
    assert on == plain
    assert held["bytes_held"] == 0
