"""How the public functions reach memphis's JVM side from a session or DataFrame: py4j for a classic
session, SQL table functions (``memphis_stats()``, ``memphis_lineage_key(TABLE(…))``, …) for a
Spark Connect one, whose client has no JVM. Both call the same code on the driver."""
import json

from memphis.spark import jvm


def is_connect(spark_or_df) -> bool:
    """Whether ``spark_or_df`` (a SparkSession or DataFrame) is Spark Connect's: its class, or a class
    it derives from (Databricks Connect's), comes from ``pyspark.sql.connect``. Nothing is imported."""
    return any(cls.__module__.startswith("pyspark.sql.connect.") for cls in type(spark_or_df).__mro__)


def is_dataframe(value) -> bool:
    """Whether ``value`` is a PySpark DataFrame, classic or Spark Connect (which on pyspark 3.5 does not
    derive from ``pyspark.sql.DataFrame``)."""
    return any(cls.__module__.startswith("pyspark.sql") and cls.__name__ == "DataFrame" for cls in type(value).__mro__)


def of(spark_or_df):
    """The access to memphis's JVM side for ``spark_or_df``, a SparkSession or a DataFrame."""
    session = spark_or_df.sparkSession if is_dataframe(spark_or_df) else spark_or_df
    return SqlAccess(session) if is_connect(spark_or_df) else Py4jAccess(session)


class Py4jAccess:
    """A classic session's: ``io.memphis.PythonFacade`` over py4j, one round trip per call."""

    def __init__(self, spark):
        self._spark = spark
        self._facade = jvm.facade(spark)

    def stats(self) -> dict:
        return json.loads(self._facade.statsJson(self._spark._jsparkSession))

    def clear(self, durable: bool = False) -> None:
        if durable:
            self._facade.clearDurable(self._spark._jsparkSession)
        else:
            self._facade.clear(self._spark._jsparkSession)

    def lineage_key(self, df):
        return self._facade.lineageKey(df._jdf)

    def explain_key(self, df) -> str:
        return self._facade.explainKey(df._jdf)

    def subplans(self, df) -> list:
        return json.loads(self._facade.subplanKeys(df._jdf))

    def persist_shared(self, df, key: str, reason: str) -> bool:
        return self._facade.persistShared(df._jdf, key, reason)


class SqlAccess:
    """A Spark Connect session's: memphis's SQL table functions, a DataFrame passed as ``TABLE({df})``.

    Each call is one ``spark.sql`` and one collect, each a round trip to the server; the functions run
    when the server analyzes the query (see io.memphis.MemphisTableFunctions).
    """

    def __init__(self, spark):
        self._spark = spark

    def _rows(self, query: str, args: dict = None, **frames) -> list:
        return self._spark.sql(query, args=args, **frames).collect()

    def stats(self) -> dict:
        return {row["name"]: row["value"] for row in self._rows("SELECT name, value FROM memphis_stats()")}

    def clear(self, durable: bool = False) -> None:
        self._rows(f"SELECT * FROM {'memphis_clear_durable' if durable else 'memphis_clear'}()")

    def lineage_key(self, df):
        return self._rows("SELECT key FROM memphis_lineage_key(TABLE({df}))", df=df)[0]["key"]

    def explain_key(self, df) -> str:
        return self._rows("SELECT explain FROM memphis_lineage_key(TABLE({df}))", df=df)[0]["explain"]

    def subplans(self, df) -> list:
        return [{"key": row["key"], "height": row["height"], "within": list(row["within"])}
                for row in self._rows("SELECT key, height, within FROM memphis_subplans(TABLE({df}))", df=df)]

    def persist_shared(self, df, key: str, reason: str) -> bool:
        held = self._rows("SELECT held FROM memphis_persist_shared(TABLE({df}), :key, :reason)",
                          args={"key": key, "reason": reason}, df=df)
        return bool(held[0]["held"])
