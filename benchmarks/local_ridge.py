"""Fine-grained reuse of driver-side numpy work: ridge regression with and without memphis.

    PYTHONPATH=python .venv/bin/python benchmarks/local_ridge.py [--scale S] [--repeats R] [--out DIR]

Side by side in one process, on seeded data of 100 000×200 rows×columns (times ``--scale`` rows):
plain numpy (no reuse), memphis traced arrays, and ``joblib.Memory`` caching the same functions
(Gram matrix and Xᵀy). Workloads: a 10-λ grid; 10 column subsets (150 base columns plus 10 of
the other 50: partial reuse of XᵀX of the base); 4-fold cross-validation × 10 λ (per-fold Gram
sums: the row-append rewrite); and a no-reuse run on fresh data, whose difference is the cost of
tracing (hashing the input included). Every run starts from an empty cache (memphis.local.clear(),
a fresh joblib directory). Medians of ``--repeats``; writes local_ridge.json and .md to --out.
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np
from tqdm import tqdm

import memphis
import memphis.local

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
LAMBDAS = np.logspace(-3, 3, 10)
COLUMNS, BASE_COLUMNS, SUBSET_COLUMNS, SUBSETS, FOLDS = 200, 150, 10, 10, 4


def gram(X):
    return X.T @ X


def xty(X, y):
    return X.T @ y


def ridge(X, y, lam, *, gram=gram, xty=xty):
    return np.linalg.solve(gram(X) + lam * np.eye(X.shape[1]), xty(X, y))


def grid(X, y, wrap, **functions):
    X, y = wrap(X), wrap(y)
    return [ridge(X, y, lam, **functions) for lam in LAMBDAS]


def column_subsets(X, y, wrap, **functions):
    base, extra, y = wrap(X[:, :BASE_COLUMNS]), wrap(X[:, BASE_COLUMNS:]), wrap(y)
    picks = np.random.default_rng(1).permuted(np.tile(np.arange(COLUMNS - BASE_COLUMNS), (SUBSETS, 1)), axis=1)
    return [ridge(np.hstack([base, extra[:, sorted(p[:SUBSET_COLUMNS].tolist())]]), y, 1.0, **functions)
            for p in picks]


def cross_validation(X, y, wrap, **functions):
    folds = [wrap(part) for part in np.array_split(X, FOLDS)]
    targets = [wrap(part) for part in np.array_split(y, FOLDS)]
    models = []
    for k in range(FOLDS):
        train = np.vstack([f for i, f in enumerate(folds) if i != k])
        target = np.concatenate([t for i, t in enumerate(targets) if i != k])
        models += [ridge(train, target, lam, **functions) for lam in LAMBDAS]
    return models


def single_fit(X, y, wrap, **functions):
    return [ridge(wrap(X), wrap(y), 1.0, **functions)]


WORKLOADS = {"grid_10_lambda": grid, "column_subsets": column_subsets, "cv_4fold_10_lambda": cross_validation,
             "no_reuse_overhead": single_fit}


def data(rows, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((rows, COLUMNS))
    return X, X @ rng.standard_normal(COLUMNS) + rng.standard_normal(rows)


def run_mode(workload, mode, X, y):
    """Seconds of one run of ``workload`` in ``mode``, from an empty cache, and its models."""
    memphis.local.clear()
    location = tempfile.mkdtemp(prefix="joblib-bench-")
    try:
        if mode == "numpy":
            run = lambda: workload(X, y, lambda a: a)  # noqa: E731
        elif mode == "memphis":
            run = lambda: [np.asarray(w) for w in workload(X, y, memphis.array)]  # noqa: E731
        else:
            import joblib

            memory = joblib.Memory(location, verbose=0)
            run = lambda: workload(X, y, lambda a: a, gram=memory.cache(gram), xty=memory.cache(xty))  # noqa: E731
        start = time.perf_counter()
        models = run()
        return time.perf_counter() - start, models
    finally:
        shutil.rmtree(location, ignore_errors=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0, help="rows = 100 000 × scale")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=RESULTS)
    args = parser.parse_args(argv)
    rows = int(100_000 * args.scale)
    memphis.local.configure()
    times = {name: {"numpy": [], "memphis": [], "joblib": []} for name in WORKLOADS}
    with tqdm(total=len(WORKLOADS) * 3 * args.repeats, desc="local ridge", file=sys.stderr) as bar:
        for repeat in range(args.repeats):
            for name, workload in WORKLOADS.items():
                # The overhead run gets fresh data every time: nothing to reuse, not even the hash.
                X, y = data(rows, seed=100 + repeat if name == "no_reuse_overhead" else 0)
                reference = None
                for mode in ("numpy", "memphis", "joblib"):
                    seconds, models = run_mode(workload, mode, X.copy(), y.copy())
                    if reference is None:
                        reference = models
                    assert all(np.allclose(m, r, rtol=1e-6, atol=1e-8) for m, r in zip(models, reference)), mode
                    times[name][mode].append(seconds)
                    bar.update()
    results = {"rows": rows, "columns": COLUMNS, "repeats": args.repeats, "lambdas": len(LAMBDAS),
               "environment": {"python": sys.version.split()[0], "numpy": np.__version__,
                               "platform": platform.platform(), "cpus": os.cpu_count()},
               "workloads": {}}
    for name, modes in times.items():
        median = {mode: statistics.median(ts) for mode, ts in modes.items()}
        results["workloads"][name] = {
            "median_s": median,
            "speedup_memphis_vs_numpy": median["numpy"] / median["memphis"],
            "speedup_memphis_vs_joblib": median["joblib"] / median["memphis"],
        }
    overhead = results["workloads"]["no_reuse_overhead"]["median_s"]
    results["tracing_overhead"] = overhead["memphis"] / overhead["numpy"] - 1
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "local_ridge.json"), "w") as f:
        json.dump(results, f, indent=2)
    lines = [f"# Local ridge regression, {rows}×{COLUMNS}, median of {args.repeats}", "",
             "| workload | numpy (s) | memphis (s) | joblib.Memory (s) | memphis vs numpy | memphis vs joblib |",
             "|---|---|---|---|---|---|"]
    for name, r in results["workloads"].items():
        m = r["median_s"]
        lines.append(f"| {name} | {m['numpy']:.3f} | {m['memphis']:.3f} | {m['joblib']:.3f} | "
                     f"{r['speedup_memphis_vs_numpy']:.2f}× | {r['speedup_memphis_vs_joblib']:.2f}× |")
    lines += ["", f"Tracing overhead with nothing to reuse (fresh data, hashing included): "
                  f"{results['tracing_overhead'] * 100:+.1f}%", ""]
    with open(os.path.join(args.out, "local_ridge.md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
