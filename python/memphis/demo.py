"""The showcase: an exploratory ML session on Spark, run with memphis off, then on.

Feature exploration (related DataFrame queries), a ridge grid search over λ, cross-validation and
an ensemble weight search, each stage written as a notebook cell would be: it collects the
features it needs and prepares them itself. The same code runs twice: with memphis off (plain
PySpark, ``toArrow()`` and plain numpy) and on (``memphis.collect`` and ``memphis.array``); the
answers must agree. The exploration queries are also the ``exploration`` benchmark workload
(``benchmarks/workloads/exploration.py``). Progress shows as tqdm's bar when tqdm is installed,
else as a line per stage.
"""
import os
import sys
import tempfile
import time

import numpy as np
from pyspark.sql import functions as F

import memphis
from memphis.spark.collect import to_arrow
from memphis.spark.session import difference

LAMBDAS = np.logspace(-2, 4, 13)
GROUPS = 64  # product groups: the feature columns (Spark pivots them, so each costs it an aggregate)
FOLDS = 5
MEMBERS, MEMBER_COLUMNS = 4, 48  # ensemble: ridge models on column subsets
STAGES = ("exploration", "grid search", "cross-validation", "ensemble")


def write_sales(spark, rows: int, path: str) -> str:
    """Generated sales as Parquet: integer cents, so that sums are exact and answers comparable."""
    ids = F.col("id")
    (spark.range(rows, numPartitions=4)
     .select(
         (ids % 20_000).alias("customer"),
         (ids % 7).alias("region"),
         ((ids * 31) % 500).alias("product"),
         ((ids * 2_654_435_761) % 10_000 + 100).alias("price_cents"),
         ((ids * 7) % 10 + 1).alias("quantity"),
         (ids % 365).alias("day"))
     .write.mode("overwrite").parquet(path))
    return path


def sales_and_customers(spark, path: str, cache=lambda df: df):
    """The sales with their revenue, and the per-customer aggregate every stage starts from.
    ``cache`` marks the DataFrames used more than once (the naive-cache benchmark mode passes
    ``DataFrame.cache``)."""
    sales = cache(spark.read.parquet(path).withColumn("revenue", F.col("price_cents") * F.col("quantity")))
    per_customer = cache(sales.groupBy("customer", "region").agg(
        F.sum("revenue").alias("revenue"), F.count("*").alias("orders")))
    return sales, per_customer


def exploration_questions(spark, path: str, cache=lambda df: df) -> list:
    """The DataFrames of a data scientist's session: the same per-customer aggregate looked at from several sides."""
    sales, per_customer = sales_and_customers(spark, path, cache)
    per_region = cache(per_customer.groupBy("region").agg(
        F.sum("revenue").alias("region_revenue"), F.count("*").alias("customers")))
    return [
        per_region.orderBy("region"),
        per_customer.orderBy(F.desc("revenue"), "customer", "region").limit(10),
        per_customer.where(F.col("orders") >= 20).groupBy("region").count().orderBy("region"),
        per_customer.join(per_region, "region")
        .where(F.col("revenue") * F.col("customers") > F.col("region_revenue") * 2)
        .groupBy("region").count().orderBy("region"),
        sales.groupBy("region").agg(F.countDistinct("product").alias("products")).orderBy("region"),
    ]


def explore(spark, path: str, cache=lambda df: df) -> list:
    """The exploration's answers, each question collected in turn."""
    return [[tuple(row) for row in question.collect()] for question in exploration_questions(spark, path, cache)]


def features(spark, path: str):
    """Per customer: the target (revenue in the last 65 days), the number of orders and spend per
    product group in the days before; one row per customer, ordered by customer."""
    sales, per_customer = sales_and_customers(spark, path)
    past = sales.where("day < 300").withColumn("grp", F.col("product") % GROUPS)
    spend = past.groupBy("customer").pivot("grp", list(range(GROUPS))).agg(F.sum("revenue"))
    target = sales.where("day >= 300").groupBy("customer").agg(F.sum("revenue").alias("target"))
    orders = per_customer.groupBy("customer").agg(F.sum("orders").alias("orders"))
    return (orders.join(target, "customer", "left").join(spend, "customer", "left").fillna(0)
            .orderBy("customer").select("target", "orders", *[F.col(str(g)) for g in range(GROUPS)]))


class Tools:
    """How a stage collects a DataFrame and wraps an array: memphis's, or plain PySpark and numpy."""

    def __init__(self, memphis_on: bool):
        self.collect = (lambda df: memphis.collect(df, as_="numpy")) if memphis_on else \
            (lambda df: to_arrow(df).to_pandas().to_numpy(dtype=float))
        self.array = memphis.array if memphis_on else np.asarray


def standardized(spark, path, tools):
    """The features collected and standardized, and the centred target."""
    Z = tools.array(tools.collect(features(spark, path)))
    X, y = Z[:, 1:], Z[:, 0]
    return (X - X.mean(axis=0)) / (X.std(axis=0) + 1e-9), y - y.mean()


def ridge(X, y, lam):
    return np.linalg.solve(X.T @ X + lam * np.eye(X.shape[1]), X.T @ y)


def error(X, y, w) -> float:
    return float(np.mean((X @ w - y) ** 2))


def split(X, y):
    """The first four fifths to train on, the last fifth to validate on."""
    n = len(y) * 4 // 5
    return X[:n], y[:n], X[n:], y[n:]


def grid_search(spark, path, tools):
    """Validation error of ridge regression for every λ."""
    Xt, yt, Xv, yv = split(*standardized(spark, path, tools))
    return np.array([error(Xv, yv, ridge(Xt, yt, lam)) for lam in LAMBDAS])


def cross_validation(spark, path, tools):
    """Mean validation error over ``FOLDS`` folds for every λ."""
    X, y = standardized(spark, path, tools)
    bounds = np.linspace(0, len(y), FOLDS + 1).astype(int)
    folds = [(X[a:b], y[a:b]) for a, b in zip(bounds, bounds[1:])]
    errors = np.zeros(len(LAMBDAS))
    for k, (Xv, yv) in enumerate(folds):
        Xt = np.vstack([f[0] for i, f in enumerate(folds) if i != k])
        yt = np.concatenate([f[1] for i, f in enumerate(folds) if i != k])
        errors += [error(Xv, yv, ridge(Xt, yt, lam)) for lam in LAMBDAS]
    return errors / FOLDS


def ensemble(spark, path, tools, lam):
    """Ridge models on random column subsets, and the convex weights (steps of 0.1) that blend
    their validation predictions best; returns (error, weights)."""
    Xt, yt, Xv, yv = split(*standardized(spark, path, tools))
    rng = np.random.default_rng(0)
    subsets = [sorted(rng.choice(Xt.shape[1], MEMBER_COLUMNS, replace=False).tolist()) for _ in range(MEMBERS)]
    models = [ridge(Xt[:, s], yt, lam) for s in subsets]
    grid = [w for w in np.ndindex(*(11,) * (MEMBERS - 1)) if sum(w) <= 10]
    best = (np.inf, None)
    for w in grid:
        weights = [v / 10 for v in w] + [1 - sum(w) / 10]
        prediction = sum(a * (Xv[:, s] @ m) for a, s, m in zip(weights, subsets, models))
        best = min(best, (float(np.mean((prediction - yv) ** 2)), weights), key=lambda b: b[0])
    return best


def session(spark, path, memphis_on: bool, bar, *, tools=None, cache=lambda df: df):
    """Every stage once; returns ({stage: answer}, {stage: seconds}). ``tools`` and ``cache`` replace
    how stages collect and wrap arrays and what exploration keeps (benchmarks/restart.py's expert)."""
    tools = tools or Tools(memphis_on)
    stages = {
        "exploration": lambda: explore(spark, path, cache),
        "grid search": lambda: grid_search(spark, path, tools),
        "cross-validation": lambda: cross_validation(spark, path, tools),
        "ensemble": lambda: ensemble(spark, path, tools, LAMBDAS[int(np.argmin(answers["grid search"]))]),
    }
    answers, seconds = {}, {}
    for stage, run in stages.items():
        bar.set_postfix_str(f"memphis {'on' if memphis_on else 'off'}: {stage}")
        start = time.perf_counter()
        answers[stage] = run()
        seconds[stage] = time.perf_counter() - start
        bar.update()
    return answers, seconds


def agree(a, b) -> bool:
    """Spark answers exactly; numpy answers to floating-point tolerance (memphis sums cached parts,
    which round differently)."""
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(agree(x, y) for x, y in zip(a, b))
    if isinstance(a, (float, np.ndarray)):
        return bool(np.allclose(a, b, rtol=1e-6, atol=1e-9))
    return a == b


# What the table shows of memphis.stats(spark): a column and the counters that add up to it.
COLUMNS = {
    "Spark hits": ("hits",),
    "host hits": ("local_hits", "local_partial_hits", "-local_reloaded"),
    "disk hits": ("local_reloaded",),
    "GPU hits": ("local_gpu_hits",),
    "MiB held": ("bytes_held", "bytes_held_host", "bytes_held_disk", "bytes_held_gpu"),
    "evictions": ("evicted", "local_evicted", "local_evicted_to_host"),
}


def column(counters: dict, names) -> int:
    total = sum(-counters[n[1:]] if n.startswith("-") else counters[n] for n in names)
    return round(total / 2 ** 20) if names[0].startswith("bytes") else total


def pyplot():
    """matplotlib's pyplot drawing to files only (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot(seconds: dict, path: str) -> str:
    """Seconds per stage with memphis off and on, as a bar chart in ``path``."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    x = np.arange(len(STAGES))
    for i, mode in enumerate(seconds):
        ax.bar(x + (i - 0.5) * 0.4, [seconds[mode][s] for s in STAGES], 0.4, label=mode)
    ax.set_xticks(x, STAGES)
    ax.set_ylabel("seconds")
    ax.set_title("memphis demo: time per stage")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


class PlainProgress:
    """The progress of the stages as a line each on stderr, for a machine without tqdm (the
    subset of tqdm's bar that the demo uses)."""

    def __init__(self, total: int):
        self.total, self.done, self.note = total, 0, ""

    def __enter__(self):
        return self

    def __exit__(self, *failure):
        return False

    def set_postfix_str(self, note: str):
        self.note = note

    def update(self):
        self.done += 1
        print(f"demo: {self.done}/{self.total} stages done ({self.note})", file=sys.stderr, flush=True)


def progress(total: int):
    """A progress bar of ``total`` stages: tqdm's when it is installed (a dev dependency), else plain lines."""
    try:
        from tqdm import tqdm
    except ImportError:
        return PlainProgress(total)
    return tqdm(total=total, desc="demo", unit="stage", file=sys.stderr)


def main(master: str = "local[*]", rows: int = 400_000, plot_path: str = "memphis-demo.png",
         remote: str = None) -> str:
    """The demo on a local session of ``master``, or on the Spark Connect server at ``remote``
    (``sc://host:port``, started by ``memphis connect-server`` on this machine: the data is written
    to a local temporary folder). Returns what it printed: a heading and the tables (markdown)."""
    if remote:
        from pyspark.sql import SparkSession

        spark, where = SparkSession.builder.remote(remote).getOrCreate(), remote
    else:
        # The progress bar below replaces Spark's, which would interleave with it.
        spark = memphis.session(master, app_name="memphis-demo", **{"spark.ui.showConsoleProgress": "false"})
        spark.sparkContext.setLogLevel("ERROR")
        where = spark.sparkContext.master
    try:
        with tempfile.TemporaryDirectory(prefix="memphis-demo-") as directory, \
                progress(3 * len(STAGES)) as bar:
            # A twentieth of the rows, at most 20 000: the JIT warms on the operations, not on the data.
            warmup = write_sales(spark, min(rows // 20, 20_000), os.path.join(directory, "warmup"))
            path = write_sales(spark, rows, os.path.join(directory, "sales"))
            results = {}
            # An untimed run on small data first, so that neither mode gains from JIT warm-up.
            for mode in ("warm-up", "memphis off", "memphis on"):
                on = mode == "memphis on"
                spark.conf.set("spark.memphis.enabled", str(on).lower())
                spark.catalog.clearCache()
                memphis.clear(spark)
                before = memphis.stats(spark)
                answers, seconds = session(spark, warmup if mode == "warm-up" else path, on, bar)
                results[mode] = (answers, seconds, difference(before, memphis.stats(spark)))
        del results["warm-up"]
        (off, off_s, _), (on, on_s, _) = results.values()
        for stage in STAGES:
            if not agree(off[stage], on[stage]):
                raise AssertionError(f"memphis demo: {stage} answered differently with memphis on")
        heading = (f"memphis {memphis.__version__} demo on Spark {spark.version}, {where}, "
                   f"{rows} sales rows; every stage answers the same with memphis off and on")
        lines = ["| stage | " + " | ".join(f"{m} s" for m in results) + " | speedup |", "|---|---|---|---|"]
        for stage in STAGES + ("total",):
            a, b = (sum(s.values()) if stage == "total" else s[stage] for s in (off_s, on_s))
            lines.append(f"| {stage} | {a:.2f} | {b:.2f} | {a / b:.2f}x |")
        lines += ["", "| mode | seconds | speedup | " + " | ".join(COLUMNS) + " |", "|" + "---|" * (3 + len(COLUMNS))]
        total_off = sum(off_s.values())
        for mode, (_, seconds, counters) in results.items():
            cells = [str(column(counters, names)) for names in COLUMNS.values()]
            total = sum(seconds.values())
            lines.append(f"| {mode} | {total:.2f} | {total_off / total:.2f}x | " + " | ".join(cells) + " |")
        tables = "\n".join(lines) + "\n"
        print(f"\n{heading}\n\n{tables}")
        try:
            print(f"\nplot: {os.path.abspath(plot(dict(zip(results, (off_s, on_s))), plot_path))}")
        except ImportError:  # the plot is optional for a pip install without the demo extra
            print("\nno plot: matplotlib is not installed (pip install 'memphis-spark[demo]')")
        return f"{heading}\n\n{tables}"
    finally:
        spark.stop()
