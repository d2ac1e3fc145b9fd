"""Which way a public function reaches memphis's JVM side: py4j for a classic session, SQL for Spark Connect."""
import pytest

import memphis
from memphis.spark import jvm_access
from memphis.errors import MemphisSetupError


def connect_like(name: str, module: str):
    """An object of a class defined in ``module``, as Spark Connect's (or a subclass, as Databricks Connect's)."""
    return type(name, (), {"__module__": module})()


def test_connect_sessions_and_frames_are_told_by_their_class():
    assert jvm_access.is_connect(connect_like("SparkSession", "pyspark.sql.connect.session"))
    derived = type("DatabricksSession", (type(connect_like("SparkSession", "pyspark.sql.connect.session")),),
                   {"__module__": "databricks.connect.session"})()
    assert jvm_access.is_connect(derived)
    assert jvm_access.is_dataframe(connect_like("DataFrame", "pyspark.sql.connect.dataframe"))
    assert not jvm_access.is_dataframe(connect_like("DataFrame", "pandas.core.frame"))


def test_a_classic_session_goes_through_py4j(spark):
    df = spark.range(10).groupBy("id").count()
    assert not jvm_access.is_connect(spark) and not jvm_access.is_connect(df)
    assert isinstance(jvm_access.of(df), jvm_access.Py4jAccess)
    assert jvm_access.of(spark).stats()["hits"] >= 0


def test_the_sql_functions_answer_a_classic_session_as_py4j_does(spark):
    """The Connect path's SQL table functions, run on a classic session, give what py4j gives."""
    sql, py4j = jvm_access.SqlAccess(spark), jvm_access.Py4jAccess(spark)
    df = spark.range(1000).selectExpr("id % 10 AS k", "id").groupBy("k").count()
    joined = df.join(spark.range(10).withColumnRenamed("id", "k"), "k")
    assert sql.lineage_key(df) == py4j.lineage_key(df) is not None
    assert sql.explain_key(df) == py4j.explain_key(df)
    assert sql.subplans(joined) == py4j.subplans(joined) and len(sql.subplans(joined)) >= 2
    assert sql.lineage_key(spark.range(3).selectExpr("uuid() AS u")) is None


def test_memphis_sql_functions_say_what_they_take(spark):
    with pytest.raises(Exception, match="argument 1 must be TABLE"):
        spark.sql("SELECT * FROM memphis_lineage_key(1)").collect()
    with pytest.raises(Exception, match=r"memphis_persist_shared\(TABLE\(t\), key, reason\) takes 3 arguments, got 1"):
        spark.range(3).createOrReplaceTempView("t3")
        spark.sql("SELECT * FROM memphis_persist_shared(TABLE(t3))").collect()


def test_configure_spark_refuses_a_connect_builder(monkeypatch):
    from pyspark.sql import SparkSession

    # What .remote(url) sets, in the options every builder of the process shares: restored after.
    builder = SparkSession.builder
    monkeypatch.setitem(builder._options, "spark.remote", "sc://localhost:15002")
    with pytest.raises(MemphisSetupError, match="memphis connect-server"):
        memphis.configure_spark(builder)
