"""Lineage keys seen from Python: equal keys for equal results, none for what cannot repeat."""
import os
from concurrent.futures import ThreadPoolExecutor

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

import memphis
from conftest import run_python


def same_key_and_answer(a, b):
    ka, kb = memphis.lineage_key(a), memphis.lineage_key(b)
    assert ka is not None and ka == kb, memphis.explain_key(a) + "\n" + memphis.explain_key(b)
    assert sorted(a.collect()) == sorted(b.collect())


def test_equivalent_queries_share_a_key(spark):
    same_key_and_answer(spark.range(300).select((F.col("id") * 2).alias("x")),
                        spark.range(300).select((2 * F.col("id")).alias("y")))
    same_key_and_answer(spark.range(300).where("id % 3 = 0 AND id > 10"),
                        spark.range(300).where("id > 10 AND id % 3 = 0"))


def test_python_udf_bodies_are_part_of_the_key(spark):
    def plus(n):
        return F.udf(lambda x: x + n, "long")

    base = spark.range(50)
    assert memphis.lineage_key(base.select(plus(1)("id"))) == memphis.lineage_key(base.select(plus(1)("id")))
    assert memphis.lineage_key(base.select(plus(1)("id"))) != memphis.lineage_key(base.select(plus(2)("id")))
    times = F.udf(lambda x: x * 2, "long")
    assert memphis.lineage_key(base.select(times("id"))) != memphis.lineage_key(base.select(plus(1)("id")))
    random_udf = F.udf(lambda x: x, "long").asNondeterministic()
    assert memphis.lineage_key(base.select(random_udf("id"))) is None
    assert "non-deterministic" in memphis.explain_key(base.select(random_udf("id")))


def test_pandas_udf_and_map_in_pandas_are_keyed_by_their_code(spark):
    from pyspark.sql.functions import pandas_udf

    @pandas_udf("long")
    def double(s: pd.Series) -> pd.Series:
        return s * 2

    df = spark.range(40)
    keyed = memphis.lineage_key(df.select(double("id")))
    assert keyed is not None and keyed != memphis.lineage_key(df.select(F.col("id") * 2))
    mapped = df.mapInPandas(lambda batches: (b.assign(id=b.id + 1) for b in batches), "id long")
    assert memphis.lineage_key(mapped) is not None


def test_explain_key_shows_form_and_sources_or_the_reason(spark, tmp_path):
    path = str(tmp_path / "t")
    spark.range(20).write.parquet(path)
    text = memphis.explain_key(spark.read.parquet(path).where("id > 3"))
    assert text.startswith(f"lineage key {memphis.lineage_key(spark.read.parquet(path).where('id > 3'))}")
    assert "Filter" in text and f"source: file:{path}" in text and "files" in text
    assert memphis.explain_key(spark.range(3).selectExpr("uuid()")) == "no lineage key: uuid is non-deterministic"
    assert memphis.lineage_key(spark.range(3).selectExpr("current_timestamp()")) is None


def test_a_parquet_directory_changed_outside_spark_changes_the_key(spark, tmp_path):
    path = str(tmp_path / "grows")
    spark.range(100).repartition(2).write.parquet(path)
    before = memphis.lineage_key(spark.read.parquet(path))
    spark.range(100, 150).write.mode("append").parquet(path)
    assert memphis.lineage_key(spark.read.parquet(path)) != before


KEY_APP = """
import json, sys
import memphis
spark = memphis.session("local[2]", **{"spark.ui.enabled": "false"})
from pyspark.sql import functions as F
df = spark.read.parquet(sys.argv[1]).where("id > 7").groupBy((F.col("id") % 3).alias("g")).count()
print(json.dumps(memphis.lineage_key(df)))
"""


def test_keys_are_equal_across_jvms(spark, tmp_path):
    path = str(tmp_path / "shared")
    spark.range(1000).write.parquet(path)
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    with ThreadPoolExecutor(2) as pool:  # two JVMs at once: each start is mostly one core's work
        first, second = pool.map(lambda _: run_python(KEY_APP, path, env=env), range(2))
    here = memphis.lineage_key(spark.read.parquet(path).where("id > 7").groupBy((F.col("id") % 3).alias("g")).count())
    assert first == second == here and here is not None


# Property tests: plans built from random operation lists.
OPERATIONS = st.lists(st.one_of(
    st.tuples(st.just("filter"), st.integers(0, 50)),
    st.tuples(st.just("add"), st.integers(-5, 5)),
    st.tuples(st.just("mul"), st.integers(1, 4)),
    st.tuples(st.just("group"), st.integers(2, 6)),
    st.tuples(st.just("distinct"), st.just(0)),
    st.tuples(st.just("sort"), st.just(0)),
), min_size=1, max_size=6)


def build(spark, operations, suffix):
    """The same plan every time; column names carry ``suffix``, so aliases and expression ids differ."""
    df = spark.range(200).select(F.col("id").alias(f"v{suffix}"))
    for op, n in operations:
        v = F.col(df.columns[0])
        if op == "filter":
            df = df.where(v > n)
        elif op == "add":
            df = df.select((v + n).alias(f"v{suffix}"))
        elif op == "mul":
            df = df.select((F.lit(n) * v).alias(f"v{suffix}"))
        elif op == "group":
            df = df.groupBy((v % n).alias(f"v{suffix}")).count().select(F.col(f"v{suffix}"))
        elif op == "distinct":
            df = df.distinct()
        else:
            df = df.orderBy(v)
    return df


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=OPERATIONS)
def test_key_is_a_function_of_the_plan(spark, operations):
    first = build(spark, operations, "a")
    key = memphis.lineage_key(first)
    assert key is not None
    assert memphis.lineage_key(first) == key  # every time
    spark.range(5).selectExpr("id + 1 AS unrelated").columns  # new expression ids in between
    assert memphis.lineage_key(build(spark, operations, "b")) == key  # renumbered ids, other aliases


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=OPERATIONS, extra=st.integers(51, 99))
def test_an_extra_filter_changes_the_key(spark, operations, extra):
    df = build(spark, operations, "a")
    assert memphis.lineage_key(df.where(F.col(df.columns[0]) > extra)) != memphis.lineage_key(df)
