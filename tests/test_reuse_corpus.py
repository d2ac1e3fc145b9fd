"""Plugin on and off give identical answers over a corpus of related TPC-H-like queries."""
import pytest

import memphis

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
    f"SELECT c.segment, avg(p.spent) FROM customer c JOIN ({PER_CUSTOMER}) p ON c.custkey = p.custkey GROUP BY c.segment",
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
    f"SELECT segment, year FROM ({REVENUE}) WHERE revenue > (SELECT avg(revenue) FROM ({REVENUE}))",
    "SELECT l.returnflag, sum(l.price_cents), sum(l.quantity), count(*) FROM lineitem l GROUP BY l.returnflag",
]


@pytest.fixture(scope="module")
def tpch(tmp_path_factory):
    """Small generated customer/orders/lineitem tables as Parquet."""
    spark = memphis.session("local[2]", app_name="memphis-tests",
                            **{"spark.ui.enabled": "false", "spark.driver.host": "127.0.0.1",
                               "spark.sql.shuffle.partitions": "4"})
    root = tmp_path_factory.mktemp("tpch")
    segments = "array(" + ",".join(f"'{s}'" for s in SEGMENTS) + ")"
    tables = {
        "customer": spark.range(1, 1501).selectExpr(
            "id AS custkey", f"element_at({segments}, cast(id % 5 + 1 AS int)) AS segment", "id % 25 AS nation"),
        "orders": spark.range(1, 15001).selectExpr(
            "id AS orderkey", "(id * 7) % 1500 + 1 AS custkey", "2020 + id % 6 AS year",
            "CASE WHEN id % 3 = 0 THEN 'F' ELSE 'O' END AS status", "(id * 7919) % 1000000 AS total_cents"),
        "lineitem": spark.range(1, 60001).selectExpr(
            "id % 15000 + 1 AS orderkey", "(id * 31) % 2000 AS partkey", "id % 50 + 1 AS quantity",
            "(id * 104729) % 10000 + 100 AS price_cents", "CASE WHEN id % 4 = 0 THEN 'R' ELSE 'N' END AS returnflag"),
    }
    for name, df in tables.items():
        df.write.mode("overwrite").parquet(str(root / name))
        spark.read.parquet(str(root / name)).createOrReplaceTempView(name)
    return spark


@pytest.mark.parametrize("adaptive", ["true", "false"])
def test_answers_equal_with_memphis_off_and_on(tpch, adaptive):
    spark = tpch
    assert len(QUERIES) >= 30
    spark.conf.set("spark.sql.adaptive.enabled", adaptive)
    try:
        spark.conf.set("spark.memphis.enabled", "false")
        expected = [sorted(spark.sql(q).collect()) for q in QUERIES]
        spark.conf.set("spark.memphis.enabled", "true")
        memphis.clear(spark)
        hits = memphis.stats(spark)["hits"]
        for round_ in range(3):  # first sight, persist, serve
            for query, answer in zip(QUERIES, expected):
                assert sorted(spark.sql(query).collect()) == answer, f"round {round_}: {query}"
        assert memphis.stats(spark)["hits"] - hits >= len(QUERIES) // 2
    finally:
        memphis.clear(spark)
        spark.conf.unset("spark.sql.adaptive.enabled")
