"""The benchmark harness: runs a workload in several modes in one process and reports times,
counters and agreement. Benchmarks and tests import it from benchmarks/ (it is not part of the
package memphis users install).

A mode is a set of session confs and the variant of the workload it runs: ``plain`` is plain Spark
(memphis off), ``memphis`` is memphis on, ``naive`` is plain Spark with ``cache()`` on every
DataFrame the workload uses more than once (Spark's own cache used naively), and ``expert`` is
plain Spark running the workload's hand-tuned variant (``cache()``/``unpersist()`` placed by hand);
the last two where the workload has such a variant. Every mode must return the same answer as the first one, or the run
fails: a speedup with a different answer is not a result.
"""
import datetime
import os
import platform
import random
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from tqdm import tqdm

from memphis import __version__
from memphis.demo import pyplot
from memphis.session import clear, difference, stats

MODES = {
    "plain": {"spark.memphis.enabled": "false"},
    "memphis": {"spark.memphis.enabled": "true"},
    "naive": {"spark.memphis.enabled": "false"},
    "expert": {"spark.memphis.enabled": "false"},
}


class AnswerMismatch(AssertionError):
    """A mode answered differently from the first run's mode."""


@dataclass
class Workload:
    """``prepare(spark, scale)`` builds the inputs (not timed); ``run(spark, inputs)`` is the timed
    work and returns an answer comparable with ``==`` (sorted rows, exact numbers); ``naive``, if
    given, is the same work with ``cache()`` on every DataFrame it uses more than once, and
    ``expert`` the same work with ``cache()``/``unpersist()`` placed by hand."""

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


def run_workload(spark, workload: Workload, *, scale: float = 1.0, modes=None,
                 repeats: int = 3, warmup: bool = True, progress: bool = True) -> dict:
    """Runs ``workload`` ``repeats`` times per mode (default: ``workload.modes()``), each run
    starting with Spark's and memphis' caches empty.

    The modes take turns within each repeat, after one untimed warm-up run of every mode (JIT
    warm-up of the code each mode runs: Spark's scans of cached relations, memphis's own rules).
    Each repeat runs them in its own shuffled order (seeded, so reproducible): a run's time depends
    on the run before it (Spark's generated-code cache, files left to clean), by up to a third on
    a 2-core machine, and a fixed order would hand one mode the best predecessor every time.

    Returns ``{"workload", "description", "scale", "repeats", "modes": {mode: {"seconds",
    "median_s", "min_s", "max_s", "counters"}}}``; ``counters`` are those of the mode's last run.
    Raises :class:`AnswerMismatch` when a mode's answer differs from the first run's.

    Examples
    --------
    >>> w = Workload("count", "count a range", lambda spark, scale: int(1000 * scale),
    ...              lambda spark, n: spark.range(n).count())
    >>> run_workload(spark, w, repeats=1)["modes"]["memphis"]["median_s"]  # doctest: +SKIP
    0.08
    """
    modes = tuple(modes or workload.modes())
    inputs = workload.prepare(spark, scale)

    def timed_run(mode):
        for key, value in MODES[mode].items():
            spark.conf.set(key, value)
        spark.catalog.clearCache()
        clear(spark)
        settle(spark)
        before = stats(spark)
        work = workload.variant(mode)
        start = time.perf_counter()
        answer = work(spark, inputs)
        return time.perf_counter() - start, answer, difference(before, stats(spark))

    runs = {mode: [] for mode in modes}
    expected = first = None
    warmups = list(modes) if warmup else []
    with tqdm(total=len(modes) * repeats + len(warmups), desc=workload.name, unit="run", disable=not progress,
              file=sys.stderr) as bar:
        order = random.Random(0)
        schedule = warmups + [m for _ in range(repeats) for m in order.sample(modes, len(modes))]
        for i, mode in enumerate(schedule):
            seconds, answer, counters = timed_run(mode)
            if first is None:
                expected, first = answer, mode
            elif answer != expected:
                raise AnswerMismatch(f"{workload.name}: mode {mode} answered differently from mode {first}")
            if i >= len(warmups):
                runs[mode].append((seconds, counters))
            bar.update()
    report = {"workload": workload.name, "description": workload.description, "scale": scale,
              "repeats": repeats, "modes": {}}
    for mode, results in runs.items():
        seconds = [s for s, _ in results]
        report["modes"][mode] = {"seconds": seconds, "median_s": statistics.median(seconds),
                                 "min_s": min(seconds), "max_s": max(seconds), "counters": results[-1][1]}
    return report


def markdown_table(reports, baseline: str = "plain") -> str:
    """One row per workload: median seconds per mode, speedup over ``baseline``, memphis's time
    over the expert's (the target is at most 1.15), memphis counters."""
    modes = list(dict.fromkeys(m for r in reports for m in r["modes"]))
    others = [m for m in modes if m != baseline]
    versus_expert = "memphis" in modes and "expert" in modes
    header = (["workload", "scale"] + [f"{m} s" for m in modes] + [f"speedup {m}" for m in others]
              + ["memphis / expert"] * versus_expert + ["hits", "persisted", "evicted"])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in reports:
        runs = r["modes"]
        base = runs.get(baseline, {}).get("median_s")
        cells = [r["workload"], f"{r['scale']:g}"]
        cells += [f"{runs[m]['median_s']:.2f}" if m in runs else "" for m in modes]
        cells += [f"{base / runs[m]['median_s']:.2f}x" if base and m in runs else "" for m in others]
        if versus_expert:
            both = "memphis" in runs and "expert" in runs
            cells.append(f"{runs['memphis']['median_s'] / runs['expert']['median_s']:.2f}" if both else "")
        counters = runs.get("memphis", {}).get("counters", {})
        cells += [str(counters.get(k, "")) for k in ("hits", "persisted", "evicted")]
        lines.append("| " + " | ".join(cells) + " |")
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
    names = [r["workload"] for r in reports]
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
