"""Spark → driver exchange: a DataFrame's result collected through Arrow once, held in the host tier."""
import concurrent.futures
import logging
import threading

import numpy as np

from memphis.local import config
from memphis.local.lineage import LineageItem

log = logging.getLogger("memphis.local")

FORMATS = ("arrow", "numpy", "pandas")
_pool = None  # threads for prefetch=True, made on first use; guarded by _pool_lock
_pool_lock = threading.Lock()


def collect(df, *, device: str = "host", prefetch: bool = False, as_: str = "arrow"):
    """The result of ``df`` on the driver, collected once per lineage key and reused after.

    The result is fetched through Arrow (``df.toArrow()``) and held in the host tier under the
    DataFrame's JVM lineage key (:func:`memphis.lineage_key`) and its column names and types (the
    key ignores aliases): collecting the same data again, through any DataFrame with that key,
    runs no Spark job. A changed source (a file added, a table written) changes the key, so it is
    collected fresh. Threads asking for a key being collected wait for that one collection. A
    DataFrame without a key (unseeded ``rand()``, an unknown source) is collected every time and
    counted as ``refused`` in :func:`memphis.local.stats`.

    Parameters
    ----------
    df : pyspark.sql.DataFrame
    device : ``"host"`` (driver memory). ``"gpu"`` needs the GPU tier, not available in this version.
    prefetch : when true, the collection starts in a background thread and a
        ``concurrent.futures.Future`` of the result is returned at once.
    as_ : ``"arrow"`` (a ``pyarrow.Table``, shared with the cache: it is immutable), ``"pandas"``
        (a new DataFrame per call) or ``"numpy"`` (a new 2-D float64 array of the columns, which
        must all be numeric: integers, floats, decimals, booleans; nulls become NaN).

    Examples
    --------
    >>> df = spark.range(100_000).selectExpr("id", "id * 0.5 AS half")  # doctest: +SKIP
    >>> X = memphis.collect(df, as_="numpy")  # doctest: +SKIP
    >>> X = memphis.collect(df, as_="numpy")  # no Spark job this time  # doctest: +SKIP
    >>> future = memphis.collect(df, prefetch=True)  # doctest: +SKIP
    >>> table = future.result()  # doctest: +SKIP
    """
    if device == "gpu":
        raise NotImplementedError("device='gpu' needs the GPU tier, not available in this version; "
                                  "use device='host'")
    if device != "host":
        raise ValueError(f"device={device!r}: expected 'host'")
    if as_ not in FORMATS:
        raise ValueError(f"as_={as_!r}: expected one of {', '.join(FORMATS)}")
    if prefetch:
        return _executor().submit(collect, df, device=device, as_=as_)
    return _convert(_table(df), as_)


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(thread_name_prefix="memphis-prefetch")
        return _pool


def _table(df):
    """``df``'s result as an Arrow table, from the host tier when its key was collected before."""
    from memphis.lineage import lineage_key

    tier = config.tier()
    key = lineage_key(df)
    if key is None:
        tier.count("refused")
        log.debug("collected without reuse: the DataFrame has no lineage key")
        return df.toArrow()
    item = LineageItem("collect", literals=(("key", key), ("schema", df.schema.json())))
    return tier.get_or_compute(item.key, df.toArrow, item=item)


def _convert(table, as_: str):
    if as_ == "arrow":
        return table
    if as_ == "pandas":
        return table.to_pandas()
    import pyarrow as pa

    numeric = (pa.types.is_integer, pa.types.is_floating, pa.types.is_decimal, pa.types.is_boolean)
    others = [f"{field.name} ({field.type})" for field in table.schema
              if not any(is_kind(field.type) for is_kind in numeric)]
    if others:
        raise TypeError(f"as_='numpy' needs numeric columns; not numeric: {', '.join(others)}. "
                        "Select or cast the numeric columns first, or collect as 'arrow' or 'pandas'.")
    out = np.empty((table.num_rows, table.num_columns), dtype=np.float64)
    for i, column in enumerate(table.columns):
        out[:, i] = column.cast(pa.float64()).to_numpy()  # cast in Arrow: nulls become NaN
    return out
