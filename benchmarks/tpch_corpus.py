"""TPC-H's 22 queries on DuckDB-generated data as a notebook session, asked by plain Spark and by memphis
in one fresh JVM.

    python benchmarks/tpch_corpus.py --sf 0.1 --driver-memory 1g --out /tmp/tpch_corpus.json

The 8 tables come from DuckDB's dbgen (the duckdb-extension-tpch package carries the extension, loaded
by path: nothing is downloaded) as Parquet under build/tpch/sf<SF>, generated once per scale and then
reused. The queries are DuckDB's ``tpch_queries()`` with their LIMITs dropped, so that every answer can
be compared as a multiset; the comma joins stay as TPC-H writes them.

The session has three passes over the queries in order (``PASSES``): the first asks each for the first
time, the second asks it again as it was, the third as edited (``edited()``: other years, as an
analyst changes a filter; a query without a year asked as it was). Plain Spark (memphis off) asks the
three passes, and memphis asks them from empty caches; with --sessions N the session repeats,
alternating which mode goes first, so that neither gets the warmer JVM more often (a mode's passes
run together: turning memphis off lets go of what it holds). Each memphis answer must equal plain
Spark's of the same pass. With --warmup an untimed pass runs first, memphis on (Spark's code and
memphis's both run in it) and its holdings let go after, so that neither mode's first pass pays
for the JIT's warm-up: warmed with memphis off, memphis' first queries compiled its own code (Q1,
the first it planned, read 1.9× plain Spark's time at e879ba0).

While queries run a background thread samples the JVM heap and memphis' counters every 0.2 s: the
peak heap (used, and after GC) per phase, and at every sample each place memphis holds data
(executors' storage, driver heap, local disk, Python host tier) against its budget, where the counters
name both; each pass ends with a full GC and a read of the heap it left live. A failing query (an
OutOfMemoryError, a timeout: --timeout) is recorded, not raised; once Spark is down (its JVM dead or
hung, its SparkContext stopped) the run stops and reports.

Progress goes to stderr, a summary table too; the report is the last line of stdout and, with --out,
that file (and a .md of the table next to it). Exit status 1 when a query failed or answered
differently, the report written all the same.
"""
import argparse
import glob
import importlib
import json
import math
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, TimeoutError as FutureTimeout
from dataclasses import dataclass

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass(frozen=True)
class Corpus:
    """What one benchmark's corpus is made of (TPC-H here, TPC-DS in tpcds_corpus.py): the rest of this
    script runs either, as DuckDB generates both by extensions packaged alike."""
    name: str  # "TPC-H": in tables and messages
    tag: str  # "tpch": DuckDB's extension (and its tpch_queries()), build/tpch, logs and job groups
    generator: str  # DuckDB's call that generates the tables: "dbgen"
    tables: tuple
    count: int  # the queries are numbered 1..count
    # The queries of DuckDB's text that end in a LIMIT (and what it is): cut, as ties at the limit would
    # make two correct plans' answers differ.
    limits: dict

    @property
    def data_root(self) -> str:
        return os.path.join(REPO, "build", self.tag)

    @property
    def numbers(self) -> range:
        return range(1, self.count + 1)


TPCH = Corpus("TPC-H", "tpch", "dbgen",
              ("customer", "lineitem", "nation", "orders", "part", "partsupp", "region", "supplier"), 22,
              {2: 100, 3: 10, 10: 20, 18: 100, 21: 100})
# The session's passes, asked by plain Spark (memphis off) and by memphis: (pass, plain phase, memphis
# phase). The first asks each query for the first time, the second asks it again as it was, the third
# as edited (edited()).
PASSES = (("first", "off", "on"), ("again", "again_off", "rerun"), ("edited", "edited_off", "edited"))
PHASES = tuple(phase for _, plain, on in PASSES for phase in (plain, on))
PLAIN_OF = {on: plain for _, plain, on in PASSES}
MEMPHIS_OF = {plain: on for on, plain in PLAIN_OF.items()}
MEMPHIS_PHASES = tuple(PLAIN_OF)
# Where memphis holds data: (held key, budget key) of memphis.stats. A key the running jar does not
# report leaves the place unchecked.
PLACES = {
    "storage": ("bytes_held_storage", "storage_budget_bytes"),
    "driver_heap": ("bytes_held_driver_heap", "driver_heap_budget_bytes"),
    "local_disk": ("bytes_held_local_disk", "local_disk_budget_bytes"),
    "host": ("bytes_held_host", "host_budget_bytes"),
}
COUNTERS = ("persisted", "hits", "refused", "refused_cross_join", "refused_broadcast_join", "refused_estimated_size",
            "refused_slower", "refused_not_recurring", "pressure_releases", "broadcasts_registered", "broadcasts_reused")
SAMPLE_EVERY_S = 0.2
# A run with memphis on is slow past SLOW_FACTOR × its off-time + SLOW_SLACK_S: generous, for the blowups
# (90 s against 1.8 s) and not for a shared machine's noise.
SLOW_FACTOR, SLOW_SLACK_S = 2.0, 5.0
# After a timeout's cancel, how long the query and its tasks may take to stop before Spark counts as hung:
# a cancelled job fails at once, but its tasks run on until they next check for the kill, and would
# take the cores of the queries after it.
HANG_GRACE_S = 60
HUNG = f"the query or its tasks did not stop within {HANG_GRACE_S} s of its jobs' cancel"


def log(message):
    print(message, file=sys.stderr, flush=True)


# --- data and queries -----------------------------------------------------------------------------

def duckdb_with(corpus: Corpus = TPCH):
    """An in-memory DuckDB connection with the corpus' extension (tpch) of its package
    (duckdb-extension-tpch), loaded from its file: DuckDB is told never to install or load an
    extension by itself (offline)."""
    import duckdb

    package = importlib.import_module(f"duckdb_extension_{corpus.tag}")
    found = glob.glob(os.path.join(os.path.dirname(package.__file__), "extensions", "*",
                                   f"{corpus.tag}.duckdb_extension"))
    if len(found) != 1:
        raise RuntimeError(f"expected one {corpus.tag}.duckdb_extension in the duckdb-extension-{corpus.tag} "
                           f"package, found {found}")
    connection = duckdb.connect(config={"autoinstall_known_extensions": "false",
                                        "autoload_known_extensions": "false"})
    connection.execute(f"LOAD '{found[0]}'")
    return connection


def data_dir(sf: float, root: str) -> str:
    return os.path.join(root, f"sf{sf:g}")


def generate(sf: float, root: str = None, corpus: Corpus = TPCH) -> str:
    """The directory of the corpus' tables at scale ``sf`` (under ``root``, by default the corpus'
    build/<tag>), one ``<table>.parquet`` each, generated unless there.

    Written under a temporary name and renamed when complete, so a generation cut short is never
    taken for data; of two processes generating at once, the first rename wins.
    """
    root = root or corpus.data_root
    target = data_dir(sf, root)
    if os.path.isdir(target):
        return target
    os.makedirs(root, exist_ok=True)
    partial = tempfile.mkdtemp(prefix=f".{os.path.basename(target)}-", dir=root)
    try:
        started = time.perf_counter()
        connection = duckdb_with(corpus)
        connection.execute(f"CALL {corpus.generator}(sf={sf})")
        for table in corpus.tables:
            connection.execute(f"COPY {table} TO '{os.path.join(partial, table + '.parquet')}' (FORMAT parquet)")
        connection.close()
        os.rename(partial, target)
        log(f"{corpus.tag}: generated sf {sf:g} in {time.perf_counter() - started:.1f} s: {target}")
    except OSError:
        if not os.path.isdir(target):
            raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target


def spark_sql(number: int, text: str, corpus: Corpus = TPCH) -> str:
    """DuckDB's text of the corpus' query ``number`` as Spark SQL: no trailing ``;``, no final LIMIT,
    an alias in double quotes (TPC-DS' ``AS "order count"``) in backticks.

    DuckDB writes the queries in standard SQL that Spark parses as it is (``CAST('…' AS date)``,
    ``extract(year FROM …)``, ``substring(… FROM 1 FOR 2)``, ``AS c_orders (c_custkey, c_count)``),
    but for the double quotes of an identifier: Spark reads them as a string, which cannot be an alias.
    """
    text = text.strip().rstrip(";").rstrip()
    text, cut = re.subn(r"\s+LIMIT\s+\d+$", "", text, flags=re.IGNORECASE)
    if bool(cut) != (number in corpus.limits):
        raise ValueError(f"{corpus.name} Q{number}: expected {'a' if number in corpus.limits else 'no'} "
                         f"final LIMIT in DuckDB's text")
    return re.sub(r'\bAS\s+"([^"`]*)"', r"AS `\1`", text, flags=re.IGNORECASE)


def queries(corpus: Corpus = TPCH) -> dict:
    """``{number: Spark SQL}`` of the corpus' queries, from DuckDB's ``tpch_queries()`` (``<tag>_queries()``)."""
    connection = duckdb_with(corpus)
    rows = connection.execute(f"SELECT query_nr, query FROM {corpus.tag}_queries() ORDER BY query_nr").fetchall()
    connection.close()
    if [n for n, _ in rows] != list(corpus.numbers):
        raise ValueError(f"{corpus.tag}_queries() returned queries {[n for n, _ in rows]}, expected 1..{corpus.count}")
    return {n: spark_sql(n, text, corpus) for n, text in rows}


# A year of either corpus' data (TPC-H 1992-1998, TPC-DS 1998-2003), alone or in a date literal; and
# TPC-DS' month numbers (d_month_seq 1176-1235, its years 1998-2002).
YEAR = re.compile(r"(?<![\w.])(199[2-9]|200[0-3])(?![\w.])")
MONTH_SEQ = re.compile(r"(?<![\w.])(117[6-9]|11[89]\d|12[0-3]\d)(?![\w.])")


def edited(text: str) -> str:
    """``text`` asked of another year, as an analyst edits a query between passes: every year in it
    (``d_year = 2000``, ``'1994-01-01'``) one later, and in a query over ``d_month_seq`` its month
    numbers twelve later. A query with neither stays as it was, and is asked again unchanged."""
    text = YEAR.sub(lambda m: str(int(m.group(1)) + 1), text)
    return MONTH_SEQ.sub(lambda m: str(int(m.group(1)) + 12), text) if "month_seq" in text else text


def register(spark, directory: str, corpus: Corpus = TPCH):
    """Each of the corpus' tables in ``directory`` as a temporary view of ``spark`` named after it."""
    for table in corpus.tables:
        spark.read.parquet(os.path.join(directory, f"{table}.parquet")).createOrReplaceTempView(table)


# --- answers --------------------------------------------------------------------------------------

def sort_key(row):
    """Orders rows for a multiset comparison: None first, floats by their first digits only (the last
    bits of a double sum depend on the plan's order of addition)."""
    return tuple((v is not None, float(f"{v:.6g}") if isinstance(v, float) else v) for v in row)


def same_value(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return type(a) is type(b) and a == b  # decimals, dates, strings, integers: exactly


def difference(expected, actual):
    """None when two lists of rows are equal as multisets (floats to 1e-9 relative), else what differs."""
    if len(expected) != len(actual):
        return f"{len(actual)} rows, expected {len(expected)}"
    for i, (e, a) in enumerate(zip(sorted(expected, key=sort_key), sorted(actual, key=sort_key))):
        if len(e) != len(a) or not all(same_value(x, y) for x, y in zip(e, a)):
            return f"row {i} of the sorted answer: {tuple(a)!r}, expected {tuple(e)!r}"
    return None


def rows_of(dataframe):
    return [tuple(row) for row in dataframe.collect()]


# --- the JVM --------------------------------------------------------------------------------------

def byte_size(text: str) -> int:
    """``"640m"`` -> bytes, as Spark reads ``spark.driver.memory`` (a bare number is MiB)."""
    match = re.fullmatch(r"(\d+)([kmgt]?)b?", text.strip().lower())
    if not match:
        raise ValueError(f"not a memory size: {text!r}")
    return int(match.group(1)) << {"k": 10, "": 20, "m": 20, "g": 30, "t": 40}[match.group(2)]


def jvm_heap_used(spark) -> int:
    return spark._jvm.java.lang.management.ManagementFactory.getMemoryMXBean().getHeapMemoryUsage().getUsed()


def heap_after_full_gc(spark) -> int:
    """The heap in use right after a full collection (System.gc()): what the JVM holds live now."""
    spark._jvm.System.gc()
    return jvm_heap_used(spark)


def heap_pools(spark) -> list:
    """The JVM's heap memory pools (G1: eden, survivor, old gen)."""
    pools = spark._jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans()
    return [pool for pool in pools if pool.getType().name() == "HEAP"]


def heap_after_gc(pools) -> int:
    """The heap in use after each pool's latest collection: what is live, where the heap used counts
    garbage too (G1 lets the heap fill before it collects, so its peak is near -Xmx whatever is live)."""
    return sum(pool.getCollectionUsage().getUsed() for pool in pools)


def within(seconds: float, call):
    """``call()``'s result, or None when it raises or gives no answer within ``seconds``: a py4j call to a
    JVM busy collecting garbage may never return, and must not take the caller with it."""
    pool = ThreadPoolExecutor(1)
    future = pool.submit(call)
    pool.shutdown(wait=False)  # not waiting for a call that never returns
    try:
        return future.result(timeout=seconds)
    except Exception:  # noqa: BLE001 - no answer in time, or any py4j failure: no result
        return None


def running_tasks(spark) -> int:
    """Tasks running on the executors (in local mode, the driver's), killed ones until they stop."""
    infos = spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()
    return sum(info.numRunningTasks() for info in infos)


def idle_within(spark, seconds: float) -> bool:
    """Whether no task runs, waiting up to ``seconds`` for that."""
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        if within(10, lambda: running_tasks(spark)) == 0:
            return True
        time.sleep(0.2)
    return False


def spark_down(spark):
    """None while Spark can run queries, else why not: its SparkContext stopped (Spark stops it after an
    OutOfMemoryError), or its JVM does not answer (a dead one refuses, a hung one never answers)."""
    stopped = within(10, lambda: spark.sparkContext._jsc.sc().isStopped())
    return None if stopped is False else "its SparkContext stopped" if stopped else "its JVM died or does not answer"


def error_text(error: BaseException) -> str:
    """The first lines of an error (a Java one's class and message, not its stack trace)."""
    lines = [line for line in str(error).strip().splitlines() if line.strip() and not line.startswith("\tat ")]
    return f"{type(error).__name__}: " + " | ".join(lines[:4])[:1500]


class Sampler:
    """Samples the JVM heap and memphis.stats every ``SAMPLE_EVERY_S`` on a thread of its own (py4j
    serves each Python thread on its own connection): peak heap (used, and after GC) per phase and per
    query, and every place's bytes held against its budget."""

    def __init__(self, spark):
        import memphis

        self.spark, self.stats = spark, memphis.stats
        self.where = None  # (phase, query) now running; None between queries and phases
        self.peaks = {}  # phase -> {"used": peak heap bytes, "after_gc": peak heap bytes after GC}
        self.query_peak = 0  # peak heap used of the query now running
        self.samples = 0
        self.error = None
        self.places = {name: {"held_key": held, "budget_key": budget, "checked": False, "samples": 0,
                              "exceeded": 0, "max_held": 0, "first_exceeded": None}
                       for name, (held, budget) in PLACES.items()}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="corpus-sampler", daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self):
        pools = None
        while not self._stop.wait(SAMPLE_EVERY_S):
            where = self.where
            if where is None:
                continue
            try:
                pools = pools or heap_pools(self.spark)
                heap, live = jvm_heap_used(self.spark), heap_after_gc(pools)
                counters = self.stats(self.spark)
            except Exception as e:  # noqa: BLE001 - the JVM died or stopped: the main thread reports it
                self.error = error_text(e)
                return
            self.samples += 1
            phase, query = where
            peak = self.peaks.setdefault(phase, {"used": 0, "after_gc": 0})
            peak["used"], peak["after_gc"] = max(peak["used"], heap), max(peak["after_gc"], live)
            self.query_peak = max(self.query_peak, heap)
            for place in self.places.values():
                if place["held_key"] not in counters or place["budget_key"] not in counters:
                    continue
                held, budget = counters[place["held_key"]], counters[place["budget_key"]]
                place["checked"] = True
                place["samples"] += 1
                place["max_held"] = max(place["max_held"], held)
                if held > budget:
                    place["exceeded"] += 1
                    if place["first_exceeded"] is None:
                        place["first_exceeded"] = {"phase": phase, "query": query, "held": held, "budget": budget}


# --- the run --------------------------------------------------------------------------------------

def job_group(corpus, phase, number) -> str:
    return f"{corpus.tag}-{phase}-q{number}"


def run_query(spark, number, text, phase, corpus=TPCH):
    """Runs one query in its own job group (so that a timeout can cancel its jobs): (seconds, rows)."""
    sc = spark.sparkContext
    sc.setJobGroup(job_group(corpus, phase, number), f"{corpus.name} Q{number} ({phase})", interruptOnCancel=True)
    try:
        started = time.perf_counter()
        rows = rows_of(spark.sql(text))
        return time.perf_counter() - started, rows
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)


def run_corpus(sf=0.1, driver_memory="1g", shuffle_partitions=4, master="local[2]", timeout_s=120.0,
               deadline_s=None, warmup=False, root=None, confs=None, corpus=TPCH, plain_once=False,
               sessions=1) -> dict:
    """Generates (or reuses) the corpus' data (under ``root``, by default the corpus' build/<tag>),
    starts memphis' session in this process (with ``confs``, a dict of further Spark or memphis settings)
    and runs the three passes (``PASSES``), after a warm-up pass (memphis on, its answers unused) if ``warmup``.
    With ``plain_once`` plain Spark does not ask a query again as it was (the second pass, and the edited
    pass's queries that the edit leaves as they were; as the tests run it): memphis' runs of them are
    compared with the first pass's plain run.

    Must be the first Spark session of the process: ``spark.driver.memory`` applies only to a JVM
    that starts now. Returns the report (see the module's doc); never raises for a query's failure.
    """
    import memphis
    from pyspark import SparkContext

    from harness import environment

    if SparkContext._gateway is not None:
        raise RuntimeError("a JVM already runs in this process: spark.driver.memory would not apply")
    started = time.perf_counter()
    directory = generate(sf, root, corpus)
    generate_s = time.perf_counter() - started
    texts = queries(corpus)

    spark = memphis.session(master, app_name=f"memphis-{corpus.tag}-corpus", **{
        "spark.driver.memory": driver_memory,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",  # its bars would interleave with the progress lines
        "spark.driver.host": "127.0.0.1",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        # The re-run pass measures reuse within this process, not what an earlier run left on disk.
        "spark.memphis.durable.dir": "none",
        **(confs or {}),
    })
    spark.sparkContext.setLogLevel("ERROR")
    max_heap = spark._jvm.java.lang.Runtime.getRuntime().maxMemory()
    # The JVM reserves some of -Xmx (a survivor space), so its max heap reads a little below it.
    if not 0.75 * byte_size(driver_memory) <= max_heap <= 1.05 * byte_size(driver_memory):
        raise RuntimeError(f"the JVM's max heap is {max_heap} bytes, not spark.driver.memory={driver_memory}")
    waited = time.time() + 30  # the block manager reports its memory shortly after start
    while memphis.stats(spark)["storage_budget_bytes"] == 0 and time.time() < waited:
        time.sleep(0.1)
    register(spark, directory, corpus)

    report = {"corpus": corpus.name, "sf": sf, "driver_memory": driver_memory, "max_heap_bytes": max_heap,
              "master": master, "confs": confs or {}, "shuffle_partitions": shuffle_partitions, "timeout_s": timeout_s,
              "warmup": warmup, "plain_once": plain_once, "sessions": sessions, "data_dir": directory,
              "edited": sorted(n for n, t in texts.items() if edited(t) != t),
              "generate_s": round(generate_s, 3), "environment": environment(spark),
              "runs": [], "phases": {}, "stopped": None}
    sampler = Sampler(spark).start()
    worker = ThreadPoolExecutor(1, thread_name_prefix=f"{corpus.tag}-query")  # one thread, so one py4j connection
    down = None  # why Spark can run no more queries, once it cannot
    deadline = None if deadline_s is None else started + deadline_s

    def ask(number, text, phase, session):
        """Runs one query in ``phase`` (memphis on in a memphis phase): its record, with its answer
        unless in the warm-up."""
        nonlocal down
        spark.conf.set("spark.memphis.enabled", "true" if phase in MEMPHIS_PHASES + ("warmup",) else "false")
        refused = within(30, lambda: memphis.stats(spark)["results_refused"]) if phase == "on" else None
        record, down = run_one(spark, worker, sampler, number, text, phase, timeout_s, corpus)
        record["session"] = session
        if refused is not None and not down:
            # whether memphis kept the rows of the query's first ask: its next ask is then served
            record["kept"] = within(30, lambda: memphis.stats(spark)["results_refused"]) == refused
        if phase == "warmup":
            record.pop("answer", None)
        report["runs"].append(record)
        log(progress_line(record, corpus))
        return record

    def block(mode, session):
        """One mode's three passes (plain Spark's, or memphis' from empty caches). Memphis' state lasts
        only while it stays on (turning it off lets go of what it holds), so each mode's passes run
        together, and sessions alternate which mode runs first."""
        memphis.clear(spark)
        spark.catalog.clearCache()
        for name, plain, on in PASSES:
            phase = on if mode == "memphis" else plain
            if phase == "again_off" and plain_once:
                continue
            pass_started = time.perf_counter()
            for number, text in texts.items():
                if plain_skips(report, number, phase):
                    continue
                if deadline is not None and time.perf_counter() > deadline:
                    report["stopped"] = f"the deadline of {deadline_s:g} s passed before Q{number} ({phase})"
                    return
                record = ask(number, edited(text) if name == "edited" else text, phase, session)
                if down:
                    report["stopped"] = (f"Spark is down after Q{number} ({phase}): {down}; "
                                         f"Q{number}: {record['error']}")
                    return
            report["phases"][f"{phase}#{session}"] = {
                "seconds": round(time.perf_counter() - pass_started, 3),
                "peak_heap_bytes": sampler.peaks.get(phase, {}).get("used"),
                "peak_heap_after_gc_bytes": sampler.peaks.get(phase, {}).get("after_gc"),
                # what the pass left live: memphis' entries, Spark's broadcasts
                "heap_after_full_gc_bytes": within(60, lambda: heap_after_full_gc(spark)),
                # cumulative, as read at the pass's end
                "counters": phase_counters(within(30, lambda: memphis.stats(spark)))}

    try:
        # The JIT's warm-up, untimed, answers unused; each block starts from empty caches.
        for number, text in texts.items() if warmup else ():
            if ask(number, text, "warmup", None) and down:
                break
        for session in range(sessions):
            if down or report["stopped"]:
                break
            for mode in ("plain", "memphis") if session % 2 == 0 else ("memphis", "plain"):
                block(mode, session)
                if report["stopped"]:
                    break
            compare_answers(report, session, corpus)
    finally:
        sampler.stop()
    report.update(samples=sampler.samples, sampler_error=sampler.error, budgets=sampler.places,
                  unchecked_places=[name for name, place in sampler.places.items() if not place["checked"]],
                  hung=down == HUNG, stats=None if down else within(30, lambda: memphis.stats(spark)))
    report["counters"] = phase_counters(report["stats"])
    report["passes"], report["slowest"] = pass_ratios(report), slowest(report)
    report["problems"], report["warnings"] = problems(report, corpus), warnings(report)
    if down != HUNG:  # a hung query's thread never returns: the caller exits the process instead
        worker.shutdown()
        try:
            spark.stop()
        except Exception:  # noqa: BLE001 - a dead JVM cannot be stopped, and need not be
            pass
    return report


def run_one(spark, worker, sampler, number, text, phase, timeout_s, corpus=TPCH):
    """Runs Q``number`` on ``worker`` with a timeout: (its record, None or why Spark can run no more queries)."""
    sampler.query_peak = 0
    sampler.where = (phase, number)
    record = {"query": number, "phase": phase, "ok": False, "seconds": None, "rows": None, "error": None}
    started = time.perf_counter()
    future = worker.submit(run_query, spark, number, text, phase, corpus)
    down = None
    try:
        try:
            seconds, rows = future.result(timeout=timeout_s)
        except FutureTimeout:
            within(10, lambda: spark.sparkContext.cancelJobGroup(job_group(corpus, phase, number)))
            grace = time.perf_counter() + HANG_GRACE_S
            try:
                future.result(timeout=HANG_GRACE_S)
            except FutureTimeout:
                pass
            except Exception:  # noqa: BLE001 - the cancelled query's error: the timeout is the news
                pass
            if not future.done() or not idle_within(spark, grace - time.perf_counter()):
                down = HUNG
            raise TimeoutError(f"timed out after {timeout_s:g} s (its jobs cancelled)") from None
        jobs = spark.sparkContext.statusTracker().getJobIdsForGroup(job_group(corpus, phase, number))
        record.update(ok=True, seconds=round(seconds, 3), rows=len(rows), answer=rows, jobs=len(jobs))
    except Exception as e:  # noqa: BLE001 - an OutOfMemoryError, a timeout, a dead JVM: recorded
        record.update(seconds=round(time.perf_counter() - started, 3), error=error_text(e))
        down = down or spark_down(spark)
    finally:
        sampler.where = None
        record["peak_heap_bytes"] = sampler.query_peak or None
    return record, down


# A memphis answer of a query plain Spark failed in that pass: a problem still, as nothing vouches for it.
UNCHECKED = "no plain answer to compare with"


def compare_answers(report, session, corpus=TPCH):
    """Marks each memphis run of ``session`` whose answer differs from plain Spark's of the same pass
    (``mismatch``), and drops the session's answers."""
    runs = [r for r in report["runs"] if r.get("session") == session]
    plain = {(r["query"], r["phase"]): r.get("answer") for r in runs if r["phase"] in PLAIN_OF.values() and r["ok"]}
    for r in runs:
        if r["phase"] in PLAIN_OF and r["ok"]:
            expected = plain.get((r["query"], plain_phase(report, r["phase"], r["query"])))
            r["mismatch"] = difference(expected, r["answer"]) if expected is not None else UNCHECKED
            if r["mismatch"]:
                log(progress_line(r, corpus))
    for r in runs:
        r.pop("answer", None)


def not_served_again(report) -> list:
    """The queries whose re-run ran Spark jobs although memphis kept the rows of their first ask (phase
    "on"): each deterministic query over the corpus' Parquet has a key, so its next identical ask must be
    served from those rows with no job. One whose rows were not kept (over their budget) is not listed."""
    by = {(r["session"], r["query"], r["phase"]): r for r in report["runs"] if r["phase"] in ("on", "rerun")}
    return [f"Q{q} ran {r['jobs']} Spark job(s) when asked again" for (s, q, phase), r in sorted(by.items())
            if phase == "rerun" and r["ok"] and r.get("jobs") and by.get((s, q, "on"), {}).get("kept")]


# The issue's bound on a query asked again: at most this factor of its plain time plus this many seconds.
RERUN_FACTOR, RERUN_SLACK_S = 1.2, 0.2


def rerun_over_bound(report, factor: float = RERUN_FACTOR, slack_s: float = RERUN_SLACK_S) -> list:
    """The queries served from kept rows when asked again (no Spark job) that took more than ``factor``
    × plain Spark's time of them + ``slack_s``: what serving them costs must be a fraction of that. (One
    that ran jobs although its rows were kept is :func:`not_served_again`'s.)"""
    return [f"Q{r['query']} asked again took {r['seconds']:.2f} s with memphis, {plain:.2f} s plain"
            for r, plain in with_plain(report)
            if r["phase"] == "rerun" and r.get("jobs") == 0 and r["seconds"] > factor * plain + slack_s]


def phase_counters(stats):
    """The counters of interest in a read of memphis.stats (None for one this jar does not report), or None."""
    return None if stats is None else {name: stats.get(name) for name in COUNTERS}


def progress_line(record, corpus=TPCH) -> str:
    head = f"{corpus.tag} [{record['phase']:>5}] Q{record['query']:02d} {record['seconds'] or 0:8.2f} s"
    if not record["ok"]:
        return f"{head}  FAILED: {record['error']}"
    if record.get("mismatch") == UNCHECKED:
        return f"{head}  {record['rows']} rows, {UNCHECKED}"
    if record.get("mismatch"):
        return f"{head}  WRONG ANSWER: {record['mismatch']}"
    return f"{head}  {record['rows']} rows"


def plain_phase(report, phase: str, query: int) -> str:
    """The plain phase a memphis phase's run of ``query`` compares with (see ``plain_once``)."""
    as_it_was = phase == "rerun" or (phase == "edited" and query not in report["edited"])
    return "off" if as_it_was and report.get("plain_once") else PLAIN_OF[phase]


def plain_skips(report, query: int, phase: str) -> bool:
    """Whether plain Spark does not ask ``query`` in ``phase`` (with ``plain_once``, a query as it was asked)."""
    return phase in MEMPHIS_OF and plain_phase(report, MEMPHIS_OF[phase], query) != phase


def slow_runs(report, factor: float = SLOW_FACTOR, slack_s: float = SLOW_SLACK_S) -> list:
    """Runs with memphis on slower than ``factor`` × the same pass's plain time of the query + ``slack_s``."""
    return [r for r, plain in with_plain(report) if r["seconds"] > factor * plain + slack_s]


def with_plain(report) -> list:
    """Each run with memphis on that answered, with the seconds of its session's plain run of the same pass
    (if that answered)."""
    plain = {(r.get("session"), r["query"], r["phase"]): r["seconds"] for r in report["runs"]
             if r["phase"] in PLAIN_OF.values() and r["ok"]}

    def key(r):
        return r.get("session"), r["query"], plain_phase(report, r["phase"], r["query"])
    return [(r, plain[key(r)]) for r in report["runs"] if r["phase"] in PLAIN_OF and r["ok"] and key(r) in plain]


def pass_ratios(report) -> dict:
    """Per pass: plain Spark's seconds, memphis', and memphis' over plain's (summed over the queries both
    answered), per session; with several sessions, the median ratio and its interval (rigor.py)."""
    from rigor import median_interval

    ratios = {}
    for name, _, on in PASSES:
        per_session = []
        for session in range(report.get("sessions", 1)):
            pairs = [(r["seconds"], plain) for r, plain in with_plain(report)
                     if r["phase"] == on and r.get("session") == session]
            p, m = sum(plain for _, plain in pairs), sum(seconds for seconds, _ in pairs)
            if pairs and p:
                per_session.append({"plain_s": round(p, 3), "memphis_s": round(m, 3), "ratio": round(m / p, 3),
                                    "queries": len(pairs)})
        if per_session:
            median, low, high = median_interval([x["ratio"] for x in per_session])
            ratios[name] = {"sessions": per_session, "ratio": round(median, 3), "low": round(low, 3),
                            "high": round(high, 3)}
    return ratios


def slowest(report, count: int = 10) -> list:
    """The ``count`` runs with memphis on of the highest ratio to the same pass's plain time: (query, phase, ratio)."""
    ratios = [(r["query"], r["phase"], r["seconds"] / plain) for r, plain in with_plain(report) if plain > 0]
    return sorted(ratios, key=lambda x: -x[2])[:count]


def problems(report, corpus=TPCH) -> list:
    """Every way the run fell short, one line each: failures, wrong answers, budgets exceeded, queries not run."""
    found = []
    if report["stopped"]:
        found.append(f"stopped: {report['stopped']}")
    for r in report["runs"]:
        if r["phase"] == "warmup" or fails_as_plain(report, r):
            continue  # not memphis' failure: see warnings()
        if not r["ok"]:
            found.append(f"Q{r['query']} ({r['phase']}) failed after {r['seconds']} s: {r['error']}")
        elif r.get("mismatch") == UNCHECKED:
            found.append(f"Q{r['query']} ({r['phase']}) not checked: {UNCHECKED}")
        elif r.get("mismatch"):
            found.append(f"Q{r['query']} ({r['phase']}) answered differently from memphis off: {r['mismatch']}")
    answered = {(r["query"], r["phase"]) for r in report["runs"]}
    missing = {p: [f"Q{n}" for n in corpus.numbers if (n, p) not in answered and not plain_skips(report, n, p)]
               for p in PHASES}
    if any(missing.values()):
        found.append("not run: " + "; ".join(f"{p}: {'all' if len(queries) == corpus.count else ', '.join(queries)}"
                                             for p, queries in missing.items() if queries))
    for name, place in report.get("budgets", {}).items():
        if place["exceeded"]:
            first = place["first_exceeded"]
            found.append(f"{name}: {place['held_key']} above {place['budget_key']} in {place['exceeded']} of "
                         f"{place['samples']} samples, first in Q{first['query']} ({first['phase']}): "
                         f"{first['held']} > {first['budget']}")
    return found


def error_kind(error: str) -> str:
    """An error's class and message, without where in the SQL text it happened."""
    return (error or "").split(" | ")[0].strip()


def fails_as_plain(report, r) -> bool:
    """Whether ``r`` is an edited query that plain Spark cannot answer either (TPC-DS' Q12 of another year
    divides by an empty window's sum at sf 0.05) and that failed the same way with memphis, or plain Spark's
    failure itself: the edit made a query no engine answers, not a problem of memphis."""
    if r["ok"] or r["phase"] not in ("edited", "edited_off"):
        return False
    plain = next((p for p in report["runs"] if p["phase"] == "edited_off" and p["query"] == r["query"]
                  and p.get("session") == r.get("session")), None)
    return plain is not None and not plain["ok"] and error_kind(plain["error"]) == error_kind(r["error"])


def warnings(report) -> list:
    """The warm-up's failures, and the edited queries plain Spark cannot answer either: not memphis'
    problems, but news (plain Spark failing for want of memory, or an edit that made a query fail)."""
    return [f"{r['phase']}: Q{r['query']} failed after {r['seconds']} s: {r['error']}"
            for r in report["runs"] if not r["ok"] and (r["phase"] == "warmup" or fails_as_plain(report, r))]


def summary_table(report, factor: float = SLOW_FACTOR, slack_s: float = SLOW_SLACK_S, corpus=TPCH) -> str:
    """Markdown: per pass, plain Spark's and memphis' seconds and their ratio; one row per query with its
    seconds per phase (SLOW: see :func:`slow_runs`) and memphis over plain per pass; heap; budgets;
    counters; the slowest ratios; warnings and problems."""
    by = {(r["query"], r["phase"]): r for r in report["runs"] if r.get("session") == 0}  # the first session's
    slow = {(r["query"], r["phase"]) for r in slow_runs(report, factor, slack_s) if r.get("session") == 0}

    def cell(query, phase):
        r = by.get((query, phase))
        if r is None:
            return "-"
        if not r["ok"]:
            return f"FAILED {r['seconds']:.1f}"
        mark = (" UNCHECKED" if r.get("mismatch") == UNCHECKED else " WRONG" if r.get("mismatch")
                else " SLOW" if (query, phase) in slow else "")
        return f"{r['seconds']:.2f}{mark}"

    def ratio(query, phase):
        r, plain = by.get((query, phase)), by.get((query, plain_phase(report, phase, query)))
        ok = r and plain and r["ok"] and plain["ok"] and plain["seconds"] > 0
        return f"{r['seconds'] / plain['seconds']:.2f}" if ok else ""

    lines = [f"{corpus.name} sf {report['sf']:g}, driver memory {report['driver_memory']} (max heap "
             f"{report['max_heap_bytes'] / 2**20:.0f} MiB), {report['master']}, "
             f"{report['shuffle_partitions']} shuffle partitions; " +
             "".join(f"{k}={v}; " for k, v in sorted(report.get("confs", {}).items())) +
             ("after an untimed warm-up pass" if report["warmup"] else
              "no warm-up: the first queries run in a cold JVM (JIT), so their times read high") +
             f"; {report.get('sessions', 1)} session(s), plain Spark's passes and memphis' in alternating order; "
             f"the edited pass changes {len(report.get('edited', []))} of {corpus.count} queries (other years), "
             "the others asked as they were", "",
             "| pass | plain Spark s | memphis s | memphis / plain |", "|---|---|---|---|"]
    for name, figures in pass_ratios(report).items():
        sessions = figures["sessions"]
        share = (f"{figures['ratio']:.2f}" if len(sessions) == 1 else
                 f"{figures['ratio']:.2f} [{figures['low']:.2f}–{figures['high']:.2f}] over {len(sessions)} sessions")
        plain_s = ", ".join(f"{x['plain_s']:.2f}" for x in sessions)
        memphis_s = ", ".join(f"{x['memphis_s']:.2f}" for x in sessions)
        lines.append(f"| {name} | {plain_s} | {memphis_s} | {share} |")
    lines += ["", "| query | off s | on s | on/off | again off s | re-run s | re-run/off | edited off s | edited s | "
              "edited/off | rows |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for n in corpus.numbers:
        rows = next((by[(n, p)]["rows"] for p in PHASES if (n, p) in by and by[(n, p)]["ok"]), "")
        cells = [f"{cell(n, plain)} | {cell(n, on)} | {ratio(n, on)}" for _, plain, on in PASSES]
        lines.append(f"| Q{n}{'*' if n in report.get('edited', []) else ''} | {' | '.join(cells)} | {rows} |")
    lines.append("(* edited in the edited pass)")

    def mib(value):
        return f"{(value or 0) / 2**20:.0f}"

    lines += ["", "heap MiB, peak used / peak after GC / after a full GC at its end, per pass: " + ", ".join(
        f"{name} {mib(figures['peak_heap_bytes'])} / {mib(figures['peak_heap_after_gc_bytes'])} / "
        f"{mib(figures['heap_after_full_gc_bytes'])}" for name, figures in report["phases"].items())]
    checked = [n for n, place in report.get("budgets", {}).items() if place["checked"]]
    lines.append(f"budgets checked at {report.get('samples', 0)} samples: {', '.join(checked) or 'none'}; "
                 f"unchecked (keys not reported): {', '.join(report.get('unchecked_places', [])) or 'none'}")
    lines.append(f"counters: {json.dumps(report.get('counters'))}")
    lines.append("slowest with memphis, over the same pass's plain time: " +
                 ", ".join(f"Q{q} ({phase}) {r:.2f}×" for q, phase, r in slowest(report)))
    lines += [f"warning: {w}" for w in report.get("warnings", [])]
    lines += [f"problem: {p}" for p in report["problems"]] or ["no problems"]
    return "\n".join(lines) + "\n"


def main(argv=None, corpus=TPCH, description=__doc__, sf=0.1) -> int:
    """The command line of a corpus' script (this one's, tpcds_corpus.py's): ``description`` its help,
    ``sf`` its default scale."""
    from harness import add_conf_option, confs_of

    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sf", type=float, default=sf, help=f"{corpus.name} scale factor (default {sf:g})")
    parser.add_argument("--driver-memory", default="1g", help="spark.driver.memory of the JVM started here")
    parser.add_argument("--shuffle-partitions", type=int, default=4)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds a query may run before it is cancelled")
    parser.add_argument("--deadline", type=float, default=None,
                        help="seconds for the whole run: queries not started by then are reported as not run")
    parser.add_argument("--warmup", action="store_true",
                        help="run the queries once more first, memphis on and untimed (its holdings let go "
                             "after), so that no pass pays for the JIT's warm-up of Spark's code or memphis'")
    parser.add_argument("--plain-once", action="store_true",
                        help="plain Spark asks no query again as it was: the re-run, and the edited pass's "
                             "queries the edit leaves as they were, are compared with the first pass's plain run "
                             "(as the tests run it)")
    parser.add_argument("--sessions", type=int, default=1,
                        help="sessions to run, alternating whether plain Spark's passes or memphis' come first "
                             "(the ratios' intervals are over sessions)")
    parser.add_argument("--data-dir", default=corpus.data_root, help="where the generated tables are kept, per scale")
    add_conf_option(parser)
    parser.add_argument("--out", help="write the report (JSON) here, and the summary table next to it (.md)")
    args = parser.parse_args(argv)
    confs = confs_of(parser, args)

    report = run_corpus(args.sf, args.driver_memory, args.shuffle_partitions, args.master, args.timeout,
                        args.deadline, args.warmup, args.data_dir, confs, corpus, args.plain_once,
                        args.sessions)
    table = summary_table(report, corpus=corpus)
    log(table)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2, default=str)
        with open(os.path.splitext(args.out)[0] + ".md", "w") as f:
            f.write(table)
    print(json.dumps(report, default=str), flush=True)
    status = 1 if report["problems"] else 0
    if report["hung"]:
        sys.stderr.flush()
        os._exit(status)  # the stuck query's thread would keep the interpreter from exiting
    return status


if __name__ == "__main__":
    sys.exit(main())
