"""An exploratory session over TPC-H-like data: 32 related queries sharing joins and aggregates.

Also the corpus of tests/test_reuse_corpus.py (answers with memphis off and on). The expert
baseline caches the shared subplans by hand, as a Spark expert would, and unpersists them after.
"""
import os
from contextlib import contextmanager

from harness import Workload

SEGMENTS = ["AUTOMOBILE", "BUILDING", "FURNITURE", "HOUSEHOLD", "MACHINERY"]

# Related queries, as an exploratory session writes them: shared joins and aggregates under
# different filters, projections and orderings. Money is in integer cents, so sums are exact.
REVENUE = """SELECT c.segment, o.year, sum(l.price_cents * l.quantity) AS revenue, count(*) AS items
             FROM customer c JOIN orders o ON c.custkey = o.custkey JOIN lineitem l ON o.orderkey = l.orderkey
             GROUP BY c.segment, o.year"""
PER_CUSTOMER = """SELECT o.custkey, count(*) AS orders, sum(o.total_cents) AS spent
                  FROM orders o GROUP BY o.custkey"""
QUERIES = [
    f"SELECT * FROM ({REVENUE}) WHERE year = 2024",
    f"SELECT * FROM ({REVENUE}) WHERE year = 2025",
    f"SELECT segment, sum(revenue) FROM ({REVENUE}) GROUP BY segment",
    f"SELECT year, max(revenue) FROM ({REVENUE}) GROUP BY year",
    f"SELECT * FROM ({REVENUE}) WHERE items > 100",
    f"SELECT * FROM ({REVENUE}) ORDER BY revenue DESC, segment, year LIMIT 3",
    f"SELECT count(*) FROM ({REVENUE})",
    f"SELECT * FROM ({PER_CUSTOMER}) WHERE orders > 12",
    f"SELECT * FROM ({PER_CUSTOMER}) ORDER BY spent DESC, custkey LIMIT 10",
    f"SELECT orders, count(*) FROM ({PER_CUSTOMER}) GROUP BY orders",
    f"SELECT c.segment, sum(p.spent), count(*) FROM customer c JOIN ({PER_CUSTOMER}) p ON c.custkey = p.custkey GROUP BY c.segment",
    f"SELECT c.nation, sum(p.orders) FROM customer c JOIN ({PER_CUSTOMER}) p ON c.custkey = p.custkey GROUP BY c.nation",
    f"SELECT c.custkey FROM customer c LEFT ANTI JOIN ({PER_CUSTOMER}) p ON c.custkey = p.custkey",
    f"SELECT c.custkey FROM customer c LEFT SEMI JOIN ({PER_CUSTOMER}) p ON c.custkey = p.custkey AND p.orders > 15",
    "SELECT l.orderkey, sum(l.quantity) FROM lineitem l GROUP BY l.orderkey HAVING sum(l.quantity) > 120",
    "SELECT l.orderkey, sum(l.quantity) AS q FROM lineitem l GROUP BY l.orderkey ORDER BY q DESC, l.orderkey LIMIT 5",
    "SELECT DISTINCT l.partkey % 17 AS bucket FROM lineitem l",
    "SELECT count(DISTINCT l.partkey) FROM lineitem l WHERE l.quantity > 20",
    "SELECT o.year, o.status, count(*) FROM orders o GROUP BY o.year, o.status",
    "SELECT o.year, o.status, count(*) FROM orders o WHERE o.status = 'F' GROUP BY o.year, o.status",
    """SELECT custkey, orderkey, rank() OVER (PARTITION BY custkey ORDER BY total_cents DESC, orderkey) AS r
       FROM orders""",
    """SELECT * FROM (SELECT custkey, orderkey, rank() OVER (PARTITION BY custkey ORDER BY total_cents DESC, orderkey) AS r
       FROM orders) WHERE r = 1""",
    """SELECT custkey, sum(total_cents) OVER (PARTITION BY custkey ORDER BY orderkey
       ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS running FROM orders""",
    "SELECT c.segment, count(*) FROM customer c JOIN orders o ON c.custkey = o.custkey GROUP BY c.segment",
    "SELECT c.segment, o.year, count(*) FROM customer c JOIN orders o ON c.custkey = o.custkey GROUP BY c.segment, o.year",
    "SELECT o.orderkey, explode(array(o.year, o.year + 1)) AS y FROM orders o WHERE o.orderkey < 50",
    "SELECT y, count(*) FROM (SELECT explode(array(o.year, o.year + 1)) AS y FROM orders o) GROUP BY y",
    "SELECT nation, count(*) FROM customer GROUP BY nation UNION ALL SELECT -1, count(*) FROM customer",
    """SELECT c.custkey, (SELECT count(*) FROM orders o WHERE o.custkey = c.custkey) AS n
       FROM customer c WHERE c.custkey < 40""",
    "SELECT * FROM customer WHERE custkey IN (SELECT custkey FROM orders WHERE total_cents > 900000)",
    f"SELECT segment, year FROM ({REVENUE}) WHERE revenue * (SELECT count(*) FROM ({REVENUE})) > (SELECT sum(revenue) FROM ({REVENUE}))",
    "SELECT l.returnflag, sum(l.price_cents), sum(l.quantity), count(*) FROM lineitem l GROUP BY l.returnflag",
]

# What an expert caches by hand: the subplans several queries share.
SHARED = [REVENUE, PER_CUSTOMER, "SELECT l.orderkey, sum(l.quantity) AS q FROM lineitem l GROUP BY l.orderkey"]


def write_tables(spark, directory, scale=1.0):
    """customer, orders and lineitem as Parquet, registered as temp views; returns the directory."""
    customers, orders, items = int(15_000 * scale), int(150_000 * scale), int(600_000 * scale)
    segments = "array(" + ",".join(f"'{s}'" for s in SEGMENTS) + ")"
    tables = {
        "customer": spark.range(1, customers + 1).selectExpr(
            "id AS custkey", f"element_at({segments}, cast(id % 5 + 1 AS int)) AS segment", "id % 25 AS nation"),
        "orders": spark.range(1, orders + 1).selectExpr(
            "id AS orderkey", f"(id * 7) % {customers} + 1 AS custkey", "2020 + id % 6 AS year",
            "CASE WHEN id % 3 = 0 THEN 'F' ELSE 'O' END AS status", "(id * 7919) % 1000000 AS total_cents"),
        "lineitem": spark.range(1, items + 1).selectExpr(
            f"id % {orders} + 1 AS orderkey", "(id * 31) % 2000 AS partkey", "id % 50 + 1 AS quantity",
            "(id * 104729) % 10000 + 100 AS price_cents", "CASE WHEN id % 4 = 0 THEN 'R' ELSE 'N' END AS returnflag"),
    }
    for name, df in tables.items():
        path = os.path.join(directory, name)
        df.write.mode("overwrite").parquet(path)
    register(spark, directory)
    return directory


def register(spark, directory, cache=lambda df: df):
    for name in ("customer", "orders", "lineitem"):
        cache(spark.read.parquet(os.path.join(directory, name))).createOrReplaceTempView(name)


def answers(spark, queries):
    return [sorted(map(tuple, spark.sql(q).collect())) for q in queries]


@contextmanager
def cached_by_hand(spark, shared):
    """What an expert does: cache() the shared DataFrames (or SQL queries) before the session,
    unpersist() after. (Adaptive execution may coalesce the cached plans' partitions: the session
    tuning every benchmark mode has, harness.SESSION_TUNING.)"""
    cached = [(spark.sql(q) if isinstance(q, str) else q).cache() for q in shared]
    try:
        yield
    finally:
        for df in cached:
            df.unpersist()


def tpch_workload(directory, *, name, description, queries, shared):
    """A session of `queries` over the TPC-H-like tables; the expert caches `shared` by hand, the
    naive user caches every table and every shared subquery and leaves them cached."""
    def run(spark, directory):
        register(spark, directory)
        return answers(spark, queries)

    def naive(spark, directory):
        register(spark, directory, cache=lambda df: df.cache())
        for q in shared:
            spark.sql(q).cache()
        return answers(spark, queries)

    def expert(spark, directory):
        register(spark, directory)
        with cached_by_hand(spark, shared):
            return answers(spark, queries)

    return Workload(name=name, description=description, run=run, naive=naive, expert=expert,
                    prepare=lambda spark, scale: write_tables(spark, directory, scale))


def workload(directory):
    return tpch_workload(
        directory, name="tpch_exploration", queries=QUERIES, shared=SHARED,
        description=f"{len(QUERIES)} related SQL queries over TPC-H-like customer/orders/lineitem (Parquet)")
