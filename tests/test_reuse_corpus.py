"""Plugin on and off give identical answers over a corpus of related TPC-H-like queries."""
import pytest

import memphis
from conftest import memphis_off
from workloads.tpch_exploration import QUERIES, write_tables  # from benchmarks/, which conftest puts on the path


@pytest.fixture(scope="module")
def tpch(tmp_path_factory):
    """Small generated customer/orders/lineitem tables as Parquet."""
    spark = memphis.session("local[2]", app_name="memphis-tests",
                            **{"spark.ui.enabled": "false", "spark.driver.host": "127.0.0.1",
                               "spark.sql.shuffle.partitions": "4"})
    write_tables(spark, str(tmp_path_factory.mktemp("tpch")), scale=0.1)
    return spark


@pytest.mark.parametrize("adaptive", ["true", "false"])
def test_answers_equal_with_memphis_off_and_on(tpch, adaptive):
    spark = tpch
    assert len(QUERIES) >= 30
    spark.conf.set("spark.sql.adaptive.enabled", adaptive)
    try:
        expected = memphis_off(spark, lambda: [sorted(spark.sql(q).collect()) for q in QUERIES])
        memphis.clear(spark)
        before = memphis.stats(spark)
        for round_ in range(3):  # first sight (rows kept), persist or read the rows, serve
            for query, answer in zip(QUERIES, expected):
                assert sorted(spark.sql(query).collect()) == answer, f"round {round_}: {query}"
        after = memphis.stats(spark)
        # Served from a cached relation, or from the rows an earlier collect kept on the driver.
        served = sum(after[k] - before[k] for k in ("hits", "results_reused"))
        assert served >= len(QUERIES) // 2
    finally:
        memphis.clear(spark)
        spark.conf.unset("spark.sql.adaptive.enabled")
