"""What every benchmark script shares to make its claims hold on a noisy machine: a balanced order
of runs, medians with 95 % intervals, ratios that say "no difference" when their interval holds 1,
and where a result came from (commit, date, machine).

Why balanced: a run's time depends on the run before it (Spark's generated-code cache, files and
broadcasts left for the cleaner, the BLAS threads' state), by up to a third on a 2-core machine.
In :func:`balanced_order` every mode follows every other mode equally often, so no mode gets the
best predecessor more often than another.

Examples
--------
>>> balanced_order(["a", "b"], repeats=2)
['a', 'b', 'a', 'b', 'a']
>>> median_interval([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0])
(5.5, 2.0, 9.0)
>>> ratio_text(ratio_interval([2.0] * 10, [1.0] * 10))
'2.00× [2.00–2.00]'
>>> ratio_text((1.02, 0.95, 1.10))
'no difference (1.02× [0.95–1.10])'
"""
import datetime
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys

from tqdm import tqdm

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_REPEATS = 10  # runs per mode where a run is under a minute

# Every benchmark compares modes of one workload run by run: memphis's durable tier (on by default for a
# local master) would let a run read what an earlier run wrote. It is off in every JVM a benchmark starts
# (a system property through spark-submit, which SparkConf reads); restart.py sets it per mode, which wins.
os.environ["SPARK_SUBMIT_OPTS"] = " ".join(
    filter(None, [os.environ.get("SPARK_SUBMIT_OPTS"), "-Dspark.memphis.durable.dir=none"]))
LEVEL = 0.95


def balanced_order(modes, repeats: int = DEFAULT_REPEATS, seed: int = 0) -> list:
    """The order to run ``modes`` in: the first entry is an untimed warm-up, then every mode runs at
    least ``repeats`` times, and every ordered pair of distinct modes is adjacent equally often.

    It is a walk that takes every edge of the complete directed graph over the modes once (an
    Eulerian circuit), as many times as ``repeats`` needs; the circuit is shuffled by ``seed``. With
    one mode it is that mode ``repeats + 1`` times.
    """
    modes = list(modes)
    if len(modes) == 1:
        return modes * (repeats + 1)
    rng = random.Random(seed)
    circuits = math.ceil(repeats / (len(modes) - 1))
    order = [modes[0]]
    for _ in range(circuits):
        order += _circuit(modes, rng)[1:]
    return order


def run_order(modes, repeats: int = DEFAULT_REPEATS, *, quick: bool = False, seed: int = 0) -> list:
    """:func:`balanced_order`, or with ``quick`` every mode once and no warm-up (timings that mean
    nothing, answers that still must agree)."""
    return list(modes) if quick else balanced_order(modes, repeats, seed)


class AnswerMismatch(AssertionError):
    """A run answered differently from the first run."""


def run_checked(modes, run_one, *, repeats: int = DEFAULT_REPEATS, quick: bool = False, desc: str = "runs",
                progress: bool = True) -> dict:
    """Runs ``run_one(mode, index) -> (answer, figures)`` over :func:`run_order` and keeps the figures
    of the timed runs (all with ``quick``, all but the warm-up otherwise).

    Returns ``{mode: [figures, …]}``. Raises :class:`AnswerMismatch` as soon as a run, the warm-up's
    included, answers differently from the first: a speedup with a different answer is not a result.
    """
    order = run_order(modes, repeats, quick=quick)
    kept = {mode: [] for mode in modes}
    expected = None
    for index, mode in enumerate(tqdm(order, desc=desc, unit="run", disable=not progress, file=sys.stderr)):
        answer, figures = run_one(mode, index)
        if index == 0:
            expected = answer
        elif answer != expected:
            raise AnswerMismatch(f"{desc}: mode {mode} (run {index + 1}) answered differently from mode "
                                 f"{order[0]} (run 1)")
        if quick or index > 0:
            kept[mode].append(figures)
    return kept


def runs_text(quick: bool, runs_per_mode: int) -> str:
    """How the modes ran, for a results file."""
    return "every mode once (--quick)" if quick else f"{runs_per_mode} runs per mode in a balanced order"


def _circuit(modes, rng) -> list:
    """An Eulerian circuit from modes[0] over every ordered pair of distinct modes (Hierholzer)."""
    unused = {m: rng.sample([n for n in modes if n != m], len(modes) - 1) for m in modes}
    stack, circuit = [modes[0]], []
    while stack:
        if unused[stack[-1]]:
            stack.append(unused[stack[-1]].pop())
        else:
            circuit.append(stack.pop())
    return circuit[::-1]


def median_interval(values, level: float = LEVEL) -> tuple:
    """(median, low, high): the median and a distribution-free interval for it from order statistics
    (the binomial ranks that hold the median with probability ``level``; with under 6 values it
    is the whole range, which then holds it with less)."""
    xs = sorted(values)
    n = len(xs)
    # The largest k with P(Binomial(n, 1/2) < k) <= (1 - level) / 2: the interval is [x_k, x_(n-k+1)].
    k, tail = 0, 0.0
    while k < n // 2:
        tail_next = tail + math.comb(n, k) / 2 ** n
        if tail_next > (1 - level) / 2:
            break
        tail, k = tail_next, k + 1
    low = xs[max(k - 1, 0)]
    return statistics.median(xs), low, xs[n - max(k, 1)]


def ratio_interval(numerator, denominator, level: float = LEVEL, resamples: int = 2000, seed: int = 0) -> tuple:
    """(ratio, low, high): median(numerator) / median(denominator) and a percentile bootstrap
    interval for it, each sample resampled on its own (seeded: the same data give the same interval)."""
    rng = random.Random(seed)
    ratio = statistics.median(numerator) / statistics.median(denominator)
    boot = sorted(statistics.median(rng.choices(numerator, k=len(numerator)))
                  / statistics.median(rng.choices(denominator, k=len(denominator))) for _ in range(resamples))
    return ratio, boot[int(resamples * (1 - level) / 2)], boot[int(resamples * (1 + level) / 2) - 1]


def ratio_text(interval) -> str:
    """A ratio with its interval, or "no difference" when the interval holds 1."""
    ratio, low, high = interval
    text = f"{ratio:.2f}× [{low:.2f}–{high:.2f}]"
    return f"no difference ({text})" if low <= 1 <= high else text


def seconds_text(values) -> str:
    """A median of seconds with its interval: ``1.23 [1.10–1.40]``."""
    median, low, high = median_interval(values)
    return f"{median:.3g} [{low:.3g}–{high:.3g}]"


def seconds_summary(samples: list) -> dict:
    """The seconds of a mode's runs (figures with a ``"seconds"`` key) with their median and its
    95 % interval."""
    seconds = [s["seconds"] for s in samples]
    median, low, high = median_interval(seconds)
    return {"seconds": [round(s, 3) for s in seconds], "median_s": median, "low_s": low, "high_s": high}


def ratios_to(runs: dict, baseline: str) -> dict:
    """Every other mode's median time over ``baseline``'s, as :func:`ratio_text` writes it."""
    base = [s["seconds"] for s in runs[baseline]]
    return {f"{mode} / {baseline}": ratio_text(ratio_interval([s["seconds"] for s in samples], base))
            for mode, samples in runs.items() if mode != baseline}


def provenance() -> dict:
    """Where a result comes from: the git commit (with ``+changes`` when the tree outside
    benchmarks/results differs from it), the date, and the machine."""
    def git(*args):
        try:
            return subprocess.run(["git", "-C", HERE, *args], capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    # Results files a run rewrites are not changes to the code that made them.
    if git("status", "--porcelain", "--untracked-files=no", "--", ":(top)", ":(top,exclude)benchmarks/results"):
        commit += "+changes"
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = None
    return {"commit": commit, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": {"platform": platform.platform(), "processor": _cpu_model(), "cpus": os.cpu_count(),
                        "memory_bytes": memory, "python": sys.version.split()[0]}}


def write_results(out: str, name: str, report: dict, lines: list):
    """Writes ``report`` to ``out``/``name``.json and ``lines`` (the table) to ``out``/``name``.md, and prints the table."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"{name}.json"), "w") as f:
        json.dump(report, f, indent=2)
    with open(os.path.join(out, f"{name}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), platform.processor())
    except OSError:
        return platform.processor()


def provenance_line(p: dict) -> str:
    """One line for a results file: commit, date and machine."""
    m = p["machine"]
    memory = f", {m['memory_bytes'] / 2 ** 30:.0f} GiB" if m.get("memory_bytes") else ""
    return f"commit {p['commit']}, {p['date']}, {m['cpus']} CPUs ({m['processor']}){memory}, {m['platform']}"
