"""An exploratory session as the reuse benchmark describes it: 24 related queries over three shared
joins and aggregates of TPC-H-like data, each asked under different final filters and projections.

Where tpch_exploration mixes in queries that share nothing, this one is what an analyst does after
writing a join: look at it from many sides. The expert caches the three shared DataFrames by hand.
"""
from workloads.tpch_exploration import tpch_workload

# Revenue per customer (customer ⋈ orders ⋈ lineitem): the widest shared aggregate.
PER_CUSTOMER = """SELECT c.custkey, c.segment, c.nation, count(DISTINCT o.orderkey) AS orders,
                         sum(l.price_cents * l.quantity) AS revenue, sum(l.quantity) AS items
                  FROM customer c JOIN orders o ON c.custkey = o.custkey JOIN lineitem l ON o.orderkey = l.orderkey
                  GROUP BY c.custkey, c.segment, c.nation"""
# Lines per order (orders ⋈ lineitem).
PER_ORDER = """SELECT o.orderkey, o.custkey, o.year, o.status, count(*) AS lines, sum(l.quantity) AS items,
                      sum(l.price_cents * l.quantity) AS value
               FROM orders o JOIN lineitem l ON o.orderkey = l.orderkey
               GROUP BY o.orderkey, o.custkey, o.year, o.status"""
# Sales per part and return flag, by year.
PER_PART = """SELECT l.partkey, l.returnflag, o.year, sum(l.quantity) AS items, count(*) AS lines
              FROM lineitem l JOIN orders o ON o.orderkey = l.orderkey
              GROUP BY l.partkey, l.returnflag, o.year"""

QUERIES = [
    f"SELECT segment, sum(revenue), sum(orders) FROM ({PER_CUSTOMER}) GROUP BY segment",
    f"SELECT nation, avg(revenue) FROM ({PER_CUSTOMER}) GROUP BY nation",
    f"SELECT * FROM ({PER_CUSTOMER}) ORDER BY revenue DESC, custkey LIMIT 10",
    f"SELECT count(*) FROM ({PER_CUSTOMER}) WHERE items > 2000",
    f"SELECT segment, nation, max(revenue) FROM ({PER_CUSTOMER}) WHERE segment <> 'BUILDING' GROUP BY segment, nation",
    f"SELECT orders, count(*) FROM ({PER_CUSTOMER}) GROUP BY orders",
    f"SELECT custkey, revenue / items FROM ({PER_CUSTOMER}) WHERE nation = 7 ORDER BY custkey LIMIT 20",
    f"SELECT percentile_approx(revenue, 0.5), min(revenue), max(revenue) FROM ({PER_CUSTOMER})",
    f"SELECT year, status, sum(value) FROM ({PER_ORDER}) GROUP BY year, status",
    f"SELECT lines, count(*) FROM ({PER_ORDER}) GROUP BY lines",
    f"SELECT * FROM ({PER_ORDER}) ORDER BY value DESC, orderkey LIMIT 10",
    f"SELECT year, avg(items) FROM ({PER_ORDER}) WHERE status = 'F' GROUP BY year",
    f"SELECT custkey, count(*) FROM ({PER_ORDER}) WHERE value > 1000000 GROUP BY custkey ORDER BY 2 DESC, 1 LIMIT 10",
    f"SELECT count(*), sum(items) FROM ({PER_ORDER}) WHERE year = 2024",
    f"SELECT status, max(lines), min(lines) FROM ({PER_ORDER}) GROUP BY status",
    f"SELECT year, count(DISTINCT custkey) FROM ({PER_ORDER}) GROUP BY year",
    f"SELECT year, sum(items) FROM ({PER_PART}) GROUP BY year",
    f"SELECT partkey, sum(items) AS n FROM ({PER_PART}) GROUP BY partkey ORDER BY n DESC, partkey LIMIT 10",
    f"SELECT returnflag, sum(lines) FROM ({PER_PART}) GROUP BY returnflag",
    f"SELECT count(*) FROM ({PER_PART}) WHERE items > 200",
    f"SELECT year, returnflag, avg(items) FROM ({PER_PART}) GROUP BY year, returnflag",
    f"SELECT partkey % 10, sum(lines) FROM ({PER_PART}) WHERE returnflag = 'R' GROUP BY partkey % 10",
    f"SELECT * FROM ({PER_PART}) WHERE partkey < 3 ORDER BY partkey, returnflag, year",
    f"SELECT max(items), min(items) FROM ({PER_PART}) WHERE year = 2022",
]
SHARED = [PER_CUSTOMER, PER_ORDER, PER_PART]


def quick_questions(per_shared=3):
    """The first ``per_shared`` questions over each shared aggregate, in order: a quick run's (each aggregate
    recurs, so memphis persists it at its second occurrence and serves it at its third)."""
    return [question for shared in SHARED
            for question in [q for q in QUERIES if f"({shared})" in q][:per_shared]]


def workload(directory):
    return tpch_workload(
        directory, name="tpch_session", queries=QUERIES, shared=SHARED,
        description=f"{len(QUERIES)} queries over 3 shared joins and aggregates of TPC-H-like data (Parquet)")
