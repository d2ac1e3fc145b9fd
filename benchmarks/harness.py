"""The benchmark harness: runs a workload in several modes in one process and reports times,
counters and agreement. Benchmarks and tests import it from benchmarks/ (it is not part of the
package memphis users install).

A mode is a set of session confs and the variant of the workload it runs: ``plain`` is plain Spark
(memphis off), ``memphis`` is memphis on, ``naive`` is plain Spark with ``cache()`` on every
DataFrame the workload uses more than once (Spark's own cache used naively), and ``expert`` is
plain Spark running the best a competent user writes by hand (``cache()``/``unpersist()`` or a
lineage cut placed where they pay); the last two where the workload has such a variant. Every
Spark mode runs with :data:`SESSION_TUNING`, the tuning memphis gives its own persists.

The runs follow :func:`rigor.balanced_order` (each mode preceded by each other mode equally often;
the first run is an untimed warm-up) and every run's answer, the warm-up's too, must equal the
first one's, or the run fails with :class:`rigor.AnswerMismatch`: a speedup with a different answer is
not a result.
"""
import datetime
import os
import platform
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import memphis
from memphis import __version__
from memphis.demo import pyplot
from memphis.spark.session import clear, difference, stats
from rigor import (DEFAULT_REPEATS, median_interval, provenance, ratio_interval, ratio_text,
                   run_checked, run_order, seconds_text)

# The tuning memphis gives its own persists (adaptive execution may coalesce a cached plan's
# partitions), set for the whole session so that every Spark baseline has it too: without it a
# hand-placed cache() keeps spark.sql.shuffle.partitions (200) partitions, and each read of it runs
# 200 tasks where plain Spark's adaptive execution runs a few.
SESSION_TUNING = {"spark.sql.optimizer.canChangeCachedPlanOutputPartitioning": "true"}
# The scripts' --quick runs (a check of the answers at a tiny scale, not a timing): small data, so few shuffle
# partitions, as a user sets for it (Spark's 200 took most of the restart benchmark's quick time).
QUICK_CONFS = {"spark.sql.shuffle.partitions": "4"}

MODES = {
    "plain": {"spark.memphis.enabled": "false"},
    "memphis": {"spark.memphis.enabled": "true"},
    "naive": {"spark.memphis.enabled": "false"},
    "expert": {"spark.memphis.enabled": "false"},
}

# The ratios of median times each report gives, (numerator, denominator): memphis against the best
# hand-written version is the headline.
RATIOS = (("memphis", "expert"), ("memphis", "plain"), ("expert", "plain"))


@dataclass
class Workload:
    """``prepare(spark, scale)`` builds the inputs (not timed); ``run(spark, inputs)`` is the timed
    work and returns an answer comparable with ``==`` (sorted rows, exact numbers); ``naive``, if
    given, is the same work with ``cache()`` on every DataFrame it uses more than once, and
    ``expert`` the same work as a competent user tunes it by hand."""

    name: str
    description: str
    prepare: Callable[[Any, float], Any]
    run: Callable[[Any, Any], Any]
    naive: Optional[Callable[[Any, Any], Any]] = None
    expert: Optional[Callable[[Any, Any], Any]] = None

    def modes(self):
        return ("plain", "memphis") + tuple(m for m in ("naive", "expert") if getattr(self, m))

    def variant(self, mode):
        """What ``mode`` runs: the naive or expert variant for those modes, else ``run``."""
        return getattr(self, mode) if mode in ("naive", "expert") else self.run


def session(master: str, confs: dict):
    """The benchmarks' Spark session: memphis loaded, :data:`SESSION_TUNING`, Spark's console
    progress off (run_workload's progress bar replaces it), then ``confs`` (which win)."""
    spark = memphis.session(master, app_name="memphis-bench",
                            **{"spark.ui.showConsoleProgress": "false", **SESSION_TUNING, **confs})
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def add_conf_option(parser) -> None:
    """``--conf KEY=VALUE`` (repeatable): a further Spark or spark.memphis.* setting of the session."""
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a further Spark or spark.memphis.* setting (repeatable), to compare settings")


def confs_of(parser, args) -> dict:
    """The ``--conf`` settings as a dict; a malformed one is the parser's error."""
    if any("=" not in c for c in args.conf):
        parser.error(f"--conf takes KEY=VALUE, not {next(c for c in args.conf if '=' not in c)!r}")
    return dict(c.split("=", 1) for c in args.conf)


def environment(spark) -> dict:
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "memphis": __version__,
        "spark": spark.version,
        "java": spark.sparkContext._jvm.System.getProperty("java.version"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "master": spark.sparkContext.master,
    }


def jobs_in_group(spark, group: str) -> tuple:
    """(Spark jobs, broadcast-building jobs) that job group ``group`` ran, once Spark's status store has
    seen them: Spark tags the jobs that collect a broadcast's build side "broadcast exchange (runId …)"."""
    sc = spark.sparkContext._jsc.sc()
    sc.listenerBus().waitUntilEmpty(30_000)  # the status store is fed by Spark's listeners, asynchronously
    listed = sc.statusStore().jobsList(None)
    jobs = [listed.apply(i) for i in range(listed.size())]
    mine = [j for j in jobs if j.jobGroup().isDefined() and j.jobGroup().get() == group]
    tags = [[j.jobTags().apply(k) for k in range(j.jobTags().size())] for j in mine]
    return len(mine), sum(any(t.startswith("broadcast exchange") for t in ts) for ts in tags)


def settle(spark, seconds: float = 1.0) -> None:
    """Collects the JVM's garbage and gives Spark's ContextCleaner a moment, so that the shuffle
    files and broadcasts of earlier runs are deleted now rather than during the next timed run,
    which would charge one mode for another's cleanup."""
    spark.sparkContext._jvm.System.gc()
    time.sleep(seconds)


def run_workload(spark, workload: Workload, *, scale: float = 1.0, modes=None, repeats: int = DEFAULT_REPEATS,
                 confs: Optional[dict] = None, progress: bool = True) -> dict:
    """Runs ``workload`` in ``modes`` (default: ``workload.modes()``) in the order
    :func:`rigor.balanced_order` gives, each run starting with Spark's and memphis' caches empty;
    ``confs`` are further session settings for these runs, unset after (``--pressure``'s storage
    cap, which only memphis reads).

    The order's first run is an untimed warm-up (JIT warm-up of the code each mode runs); then every
    mode runs at least ``repeats`` times. ``repeats=1`` is the quick mode: every mode once, no
    warm-up (its timings mean nothing). Every run's answer, the warm-up's too, is compared with the
    first run's: :class:`rigor.AnswerMismatch` if it differs.

    Returns ``{"workload", "description", "scale", "repeats", "order", "modes": {mode: {"seconds",
    "median_s", "interval_s", "counters"}}, "ratios": {"memphis/expert": [ratio, low, high], …},
    "provenance"}``; ``interval_s`` is the median's 95 % interval, ``counters`` the memphis
    counters of the mode's last run.

    Examples
    --------
    >>> w = Workload("count", "count a range", lambda spark, scale: int(1000 * scale),
    ...              lambda spark, n: spark.range(n).count())
    >>> run_workload(spark, w, repeats=1)["modes"]["memphis"]["median_s"]  # doctest: +SKIP
    0.08
    """
    modes = tuple(modes or workload.modes())
    inputs = workload.prepare(spark, scale)

    def timed_run(mode, index):
        for key, value in MODES[mode].items():
            spark.conf.set(key, value)
        spark.catalog.clearCache()
        clear(spark)
        settle(spark)
        before = stats(spark)
        start = time.perf_counter()
        answer = workload.variant(mode)(spark, inputs)
        seconds = time.perf_counter() - start
        return answer, (seconds, difference(before, stats(spark)))

    for key, value in (confs or {}).items():
        spark.conf.set(key, value)
    try:
        runs = run_checked(modes, timed_run, repeats=repeats, quick=repeats == 1, desc=workload.name,
                           progress=progress)
    finally:
        for key in confs or {}:
            spark.conf.unset(key)
    report = {"workload": workload.name, "description": workload.description, "scale": scale,
              "repeats": repeats, "order": run_order(modes, repeats, quick=repeats == 1), "modes": {}, "ratios": {}}
    for mode, results in runs.items():
        seconds = [s for s, _ in results]
        median, low, high = median_interval(seconds)
        report["modes"][mode] = {"seconds": seconds, "median_s": median, "interval_s": [low, high],
                                 "counters": results[-1][1]}
    for numerator, denominator in RATIOS:
        if numerator in runs and denominator in runs:
            report["ratios"][f"{numerator}/{denominator}"] = list(ratio_interval(
                report["modes"][numerator]["seconds"], report["modes"][denominator]["seconds"]))
    report["provenance"] = provenance()
    return report


def markdown_table(reports) -> str:
    """One row per workload and scale: the median seconds of each mode with their 95 % interval,
    the ratios of :data:`RATIOS` ("no difference" where the interval holds 1), memphis's counters
    (its last run's)."""
    modes = list(dict.fromkeys(m for r in reports for m in r["modes"]))
    ratios = [f"{n}/{d}" for n, d in RATIOS if any(f"{n}/{d}" in r["ratios"] for r in reports)]
    counters = ("hits", "persisted", "evicted")
    header = (["workload", "scale"] + [f"{m} s" for m in modes] + [r.replace("/", " / ") for r in ratios]
              + list(counters))
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in reports:
        cells = [r["workload"], f"{r['scale']:g}"]
        cells += [seconds_text(r["modes"][m]["seconds"]) if m in r["modes"] else "" for m in modes]
        cells += [ratio_text(r["ratios"][name]) if name in r["ratios"] else "" for name in ratios]
        held = r["modes"].get("memphis", {}).get("counters", {})
        cells += [str(held.get(k, "")) for k in counters]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def scaling_table(reports) -> str:
    """How each workload's time grows with the data: per workload and mode the median seconds at
    each scale and the ratio of successive scales' medians (with its interval), then memphis /
    expert at each scale."""
    scales = sorted({r["scale"] for r in reports})
    steps = list(zip(scales, scales[1:]))
    header = (["workload", "mode"] + [f"{s:g}" for s in scales]
              + [f"× from {a:g} to {b:g}" for a, b in steps])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name in dict.fromkeys(r["workload"] for r in reports):
        at = {r["scale"]: r for r in reports if r["workload"] == name}
        for mode in dict.fromkeys(m for r in at.values() for m in r["modes"]):
            def seconds(scale):
                return at[scale]["modes"][mode]["seconds"] if scale in at and mode in at[scale]["modes"] else None
            cells = [name, mode] + [seconds_text(seconds(s)) if seconds(s) else "" for s in scales]
            cells += [ratio_text(ratio_interval(seconds(b), seconds(a))) if seconds(a) and seconds(b) else ""
                      for a, b in steps]
            lines.append("| " + " | ".join(cells) + " |")
        headline = [ratio_text(at[s]["ratios"]["memphis/expert"]) if s in at and "memphis/expert" in at[s]["ratios"]
                    else "" for s in scales]
        if any(headline):
            lines.append("| " + " | ".join([name, "memphis / expert"] + headline + [""] * len(steps)) + " |")
    return "\n".join(lines) + "\n"


def grouped_bars(axes, groups, series: dict, *, ylabel: str, log: bool = False, line=None, legend=None):
    """Bars of ``series`` (label -> one value per group; None draws no bar) side by side in each
    group on matplotlib ``axes``: a log scale if ``log``, a horizontal line at ``line`` if given,
    ``legend`` the keyword arguments of the legend."""
    width = 0.8 / len(series)
    for i, (label, values) in enumerate(series.items()):
        offset = (i - (len(series) - 1) / 2) * width
        axes.bar([g + offset for g in range(len(groups))], [v or 0 for v in values], width, label=label)
    if line is not None:
        axes.axhline(line, color="black", linewidth=0.8)
    if log:
        from matplotlib.ticker import FuncFormatter

        axes.set_yscale("log")
        for axis in (axes.yaxis.set_major_formatter, axes.yaxis.set_minor_formatter):
            axis(FuncFormatter(lambda v, _: f"{v:g}"))  # 0.5, 2, 3 rather than 5×10⁻¹
    axes.set_ylabel(ylabel)
    axes.set_xticks(range(len(groups)), groups, rotation=15)
    axes.legend(**(legend or {"fontsize": "small"}))


def plot_speedups(reports, path: str, baseline: str = "plain") -> str:
    """Speedup over ``baseline`` (= 1) per workload and mode, as bars on a log scale, in ``path``."""
    plt = pyplot()
    several = len({r["scale"] for r in reports}) > 1
    names = [r["workload"] + (f" @{r['scale']:g}" if several else "") for r in reports]
    modes = [m for m in dict.fromkeys(m for r in reports for m in r["modes"]) if m != baseline]

    def speedup(r, mode):
        runs = r["modes"]
        return runs[baseline]["median_s"] / runs[mode]["median_s"] if mode in runs and baseline in runs else None

    figure, axes = plt.subplots(figsize=(10, 4.5), constrained_layout=True)
    grouped_bars(axes, names, {m: [speedup(r, m) for r in reports] for m in modes},
                 ylabel=f"speedup over {baseline} (×)", log=True, line=1)
    repeats = sorted({r["repeats"] for r in reports})
    scales = sorted({r["scale"] for r in reports})
    axes.set_title(f"benchmarks/run.py: speedup over {baseline} Spark, median of "
                   f"{'/'.join(map(str, repeats))}, scale {'/'.join(f'{s:g}' for s in scales)}")
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
