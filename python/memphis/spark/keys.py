"""Lineage keys of DataFrames: the identity of a result, as the JVM side computes it."""
from typing import Optional

import xxhash

from memphis.spark import jvm_access
from memphis.tracing.lineage import Untraceable, bytes_leaf, register_leaf


def lineage_key(df) -> Optional[str]:
    """The lineage key of ``df``'s result (32 hex digits), or ``None`` when it has none.

    Equal keys mean equal results: the key covers the canonical form of the analyzed plan (column
    ids and alias names normalized, commutative operands ordered), the sources' fingerprints (file
    listings, table versions, local data) and nothing that depends on the JVM. A plan with a
    non-deterministic part (unseeded ``rand()``, ``uuid()``, ``current_timestamp()``, …) or an
    unknown source has none; :func:`explain_key` says why.

    Examples
    --------
    >>> df = spark.range(100).selectExpr("id * 2 AS x")  # doctest: +SKIP
    >>> memphis.lineage_key(df) == memphis.lineage_key(spark.range(100).selectExpr("2 * id AS y"))  # doctest: +SKIP
    True
    """
    return jvm_access.of(df).lineage_key(df)


def explain_key(df) -> str:
    """The key of ``df`` with its canonical form and source fingerprints, or the reason it has none.

    Examples
    --------
    >>> print(memphis.explain_key(spark.range(3).selectExpr("uuid()")))  # doctest: +SKIP
    no lineage key: uuid is non-deterministic
    """
    return jvm_access.of(df).explain_key(df)


def _dataframe_leaf(df):
    """The leaf item of a Spark DataFrame passed to traced work (``@memphis.reuse``, a broadcast):
    its lineage key and its schema."""
    key = lineage_key(df)
    if key is None:
        raise Untraceable("the Spark DataFrame has no lineage key")
    # The key ignores column names (aliases); a function may read them, so they count here.
    return bytes_leaf("spark", xxhash.xxh3_128((key + df.schema.json()).encode()).hexdigest())


register_leaf(jvm_access.is_dataframe, _dataframe_leaf)
