"""Runs a benchmark's modes in a balanced order and checks that they answer alike: what
run_all.py, broadcast_joins.py and kmeans_loop.py share (on top of rigor.py).
"""
import sys

from tqdm import tqdm

from harness import AnswerMismatch
from rigor import DEFAULT_REPEATS, balanced_order, median_interval, ratio_interval, ratio_text

# The session tuning memphis gives itself for its own persists, given to every mode: a cached
# plan may then change its output partitioning, as memphis's persisted subplans do.
TUNING = {"spark.sql.optimizer.canChangeCachedPlanOutputPartitioning": "true"}


def run_modes(modes, run_one, *, repeats=DEFAULT_REPEATS, quick=False, desc="runs") -> dict:
    """Runs ``run_one(mode, index) -> (answer, figures)`` over ``rigor.balanced_order(modes,
    repeats)`` (its first run untimed: a warm-up), or with ``quick`` every mode once, all kept.

    Returns ``{mode: [figures of its timed runs]}``. Raises :class:`harness.AnswerMismatch` as soon
    as a run answers differently from the first run.
    """
    order = list(modes) if quick else balanced_order(modes, repeats)
    kept = {mode: [] for mode in modes}
    first = expected = None
    for index, mode in enumerate(tqdm(order, desc=desc, unit="run", file=sys.stderr)):
        answer, figures = run_one(mode, index)
        if first is None:
            first, expected = mode, answer
        elif answer != expected:
            raise AnswerMismatch(f"{desc}: run {index} ({mode}) answered differently from run 0 ({first})")
        if quick or index > 0:
            kept[mode].append(figures)
    return kept


def runs_text(quick: bool, runs_per_mode: int) -> str:
    """How the modes ran, for a results file."""
    return "every mode once (--quick)" if quick else f"{runs_per_mode} runs per mode in a balanced order"


def seconds_summary(samples: list) -> dict:
    """The seconds of a mode's runs with their median and its 95 % interval."""
    seconds = [s["seconds"] for s in samples]
    median, low, high = median_interval(seconds)
    return {"seconds": [round(s, 3) for s in seconds], "median_s": median, "low_s": low, "high_s": high}


def ratios_to(runs: dict, baseline: str) -> dict:
    """Every other mode's time over ``baseline``'s, as ``rigor.ratio_text`` writes it."""
    base = [s["seconds"] for s in runs[baseline]]
    return {f"{mode} / {baseline}": ratio_text(ratio_interval([s["seconds"] for s in samples], base))
            for mode, samples in runs.items() if mode != baseline}
