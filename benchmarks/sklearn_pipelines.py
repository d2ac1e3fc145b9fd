"""GridSearchCV over scikit-learn Pipelines: no memory, joblib.Memory, memphis's memory.

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=python .venv/bin/python benchmarks/sklearn_pipelines.py \\
        [--rows N] [--cases NAME,...] [--repeats N] [--quick] [--out DIR]

Cases (seeded generated data, --rows rows, default 200 000; GridSearchCV with 3 folds, one job):

- pca_ridge: Pipeline(StandardScaler, PCA, Ridge) on 40 features of rank 8 plus noise, over
  PCA(n_components) ∈ {4, 8, 16, 32} × Ridge(alpha) ∈ {0.01, 0.1, 1, 10, 100} (a decade apart, as
  alphas are usually searched): the transformers (the PCA) are the expensive part;
- poly_select_logistic: Pipeline(PolynomialFeatures(2), SelectKBest(f_classif), LogisticRegression)
  on 10 features (65 after the expansion), over k ∈ {5, 20, 40} × C ∈ {0.1, 1}: the final
  estimator, which no memory caches, weighs as much as the transformers.

Modes, the one Pipeline(memory=…) apart:

- none: ``memory=None``; every candidate fits every step on every fold;
- joblib: ``joblib.Memory`` on a fresh temporary folder per run, what scikit-learn's documentation
  shows: it hashes each step's inputs (pickled, md5) and writes each result to disk;
- memphis: ``memphis.sklearn.memory()``, its host tier cleared before each run (default budget:
  a quarter of RAM).

Each run is a whole search from empty caches; runs follow rigor.balanced_order (--repeats per mode
after an untimed warm-up) and every run's answer (best_params_ and every candidate's
mean_test_score, exactly) must equal the first run's, or the script fails. Reported per case:
median seconds with 95 % intervals, each mode's time over none's and over joblib's, the seconds
spent hashing data (joblib.hashing.hash for joblib, memphis's content hash for memphis, measured
around those functions), and memphis's hits and misses. Writes sklearn_pipelines.json and
sklearn_pipelines.md to --out. --quick: 3 000 rows, every mode once (timings mean nothing).
"""
import argparse
import os
import shutil
import tempfile
import time

import joblib
import joblib.hashing
import numpy as np

import memphis.local
import memphis.sklearn
from memphis.backends import numpy_backend
from rigor import (DEFAULT_REPEATS, provenance, provenance_line, ratios_to, run_checked, runs_text, seconds_summary,
                   write_results)

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
MODES = ("none", "joblib", "memphis")
FOLDS = 3


def pca_ridge(rows, seed=0):
    """(steps, grid, X, y): the PCA pipeline on rank-8 data with noise."""
    from sklearn.decomposition import PCA
    from sklearn.linear_model import Ridge
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(seed)
    latent = rng.standard_normal((rows, 8))
    X = latent @ rng.standard_normal((8, 40)) + 0.5 * rng.standard_normal((rows, 40))
    y = latent @ rng.standard_normal(8) + rng.standard_normal(rows)
    steps = lambda: [("scale", StandardScaler()), ("pca", PCA()), ("ridge", Ridge())]  # noqa: E731
    return steps, {"pca__n_components": [4, 8, 16, 32], "ridge__alpha": [0.01, 0.1, 1.0, 10.0, 100.0]}, X, y


def poly_select_logistic(rows, seed=0):
    """(steps, grid, X, y): the feature-selection pipeline on a nonlinear two-class problem."""
    from sklearn.feature_selection import SelectKBest, f_classif
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import PolynomialFeatures

    rng = np.random.default_rng(seed)
    X = rng.standard_normal((rows, 10))
    y = (X[:, 0] * X[:, 1] + X[:, 2] - X[:, 3] ** 2 + rng.standard_normal(rows) > 0).astype(int)
    steps = lambda: [("poly", PolynomialFeatures(degree=2, include_bias=False)),  # noqa: E731
                     ("select", SelectKBest(f_classif)), ("logistic", LogisticRegression(max_iter=200))]
    return steps, {"select__k": [5, 20, 40], "logistic__C": [0.1, 1.0]}, X, y


CASES = {"pca_ridge": pca_ridge, "poly_select_logistic": poly_select_logistic}


class Stopwatch:
    """Seconds spent inside ``module.name`` while in the ``with`` block (the function is wrapped there)."""

    def __init__(self, module, name):
        self.module, self.name, self.seconds = module, name, 0.0

    def __enter__(self):
        inner = self.inner = getattr(self.module, self.name)

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started
        setattr(self.module, self.name, timed)
        return self

    def __exit__(self, *exc):
        setattr(self.module, self.name, self.inner)


def memory_for(mode, scratch):
    """The Pipeline's memory in ``mode``, empty."""
    if mode == "joblib":
        return joblib.Memory(tempfile.mkdtemp(dir=scratch), verbose=0)
    if mode == "memphis":
        memphis.local.clear()
        return memphis.sklearn.memory()
    return None


def run(case, mode, scratch, hashing):
    """One search in ``mode``: (its answer, its figures); ``hashing`` is the mode's Stopwatch, if any."""
    from sklearn.model_selection import GridSearchCV
    from sklearn.pipeline import Pipeline

    steps, grid, X, y = case
    memory = memory_for(mode, scratch)
    hashing_before, before = (hashing.seconds if hashing else 0.0), memphis.local.stats()
    started = time.perf_counter()
    search = GridSearchCV(Pipeline(steps(), memory=memory), grid, cv=FOLDS).fit(X, y)
    seconds = time.perf_counter() - started
    after = memphis.local.stats()
    if mode == "joblib":
        shutil.rmtree(memory.location, ignore_errors=True)
    answer = (sorted(search.best_params_.items()), search.cv_results_["mean_test_score"].tolist())
    return answer, {"seconds": seconds, "hashing_seconds": (hashing.seconds if hashing else 0.0) - hashing_before,
                    **{n: after[n] - before[n] for n in ("hits", "misses", "refused")}}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--cases", default=",".join(CASES), help=f"any of {','.join(CASES)}")
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS)
    parser.add_argument("--quick", action="store_true", help="3 000 rows, every mode once (no warm-up)")
    parser.add_argument("--out", default=RESULTS)
    args = parser.parse_args(argv)
    names = args.cases.split(",")
    if unknown := set(names) - set(CASES):
        parser.error(f"unknown cases {sorted(unknown)}: expected any of {','.join(CASES)}")
    rows = 3_000 if args.quick else args.rows
    report = {"benchmark": "sklearn_pipelines", "rows": rows, "folds": FOLDS, "quick": args.quick,
              "answers_equal": True, "cases": {}, "provenance": provenance()}  # the code that runs, before it runs
    with (tempfile.TemporaryDirectory(prefix="memphis-sklearn-pipelines-") as scratch,
          Stopwatch(joblib.hashing, "hash") as joblib_hashing,
          Stopwatch(numpy_backend, "content_digest") as memphis_hashing):
        hashing = {"joblib": joblib_hashing, "memphis": memphis_hashing}
        for name in names:
            case = CASES[name](rows)
            samples = run_checked(MODES, lambda mode, i: run(case, mode, scratch, hashing.get(mode)),
                                  repeats=args.repeats, quick=args.quick, desc=f"sklearn {name}")
            report["cases"][name] = {
                "candidates": int(np.prod([len(v) for v in case[1].values()])),
                "modes": {m: {**seconds_summary(s), "hashing_s": float(np.median([x["hashing_seconds"] for x in s])),
                              **{k: s[-1][k] for k in ("hits", "misses", "refused")}} for m, s in samples.items()},
                "ratios": {**ratios_to(samples, "none"), **ratios_to(samples, "joblib")},
                "runs_per_mode": min(len(s) for s in samples.values())}
    lines = [f"# GridSearchCV over scikit-learn Pipelines ({rows:,} rows, {FOLDS} folds): no memory, joblib.Memory, "
             "memphis", "", "| case | memory | seconds, median [95 % interval] | time / none's | time / joblib's "
             "| hashing s (median) | memphis hits / misses |", "|---|---|---:|---:|---:|---:|---:|"]
    for name, result in report["cases"].items():
        for mode, r in result["modes"].items():
            lines.append(f"| {name} ({result['candidates']} candidates) | {mode} | {r['median_s']:.3g} "
                         f"[{r['low_s']:.3g}–{r['high_s']:.3g}] | {result['ratios'].get(f'{mode} / none', '1')} | "
                         f"{result['ratios'].get(f'{mode} / joblib', '1')} | {r['hashing_s']:.3f} | "
                         + (f"{r['hits']} / {r['misses']} |" if mode == "memphis" else "|"))
    lines += ["", f"Answers (best_params_, every candidate's mean_test_score) equal across all runs; "
              f"{runs_text(args.quick, min(r['runs_per_mode'] for r in report['cases'].values()))}, each from "
              "empty caches; one job, one BLAS thread. Hashing: seconds inside joblib.hashing.hash (joblib) or "
              "memphis's content hash (memphis) per run.", "", provenance_line(report["provenance"])]
    write_results(args.out, "sklearn_pipelines", report, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
