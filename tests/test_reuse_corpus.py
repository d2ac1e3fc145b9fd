"""Plugin on and off give identical answers over a corpus of related TPC-H-like queries."""
import os
import sys

import pytest

import memphis

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
from workloads.tpch_exploration import QUERIES, write_tables  # noqa: E402


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
