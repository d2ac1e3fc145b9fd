"""A Spark DataFrame's result collected to the driver (and the GPU) through Arrow once, held by lineage key."""
import logging

from memphis.spark import background, jvm_access
from memphis.backends.numpy_backend import float_matrix
from memphis.spark.keys import lineage_key
from memphis.tiers.runtime import default
from memphis.tracing.lineage import LineageItem

log = logging.getLogger("memphis.local")

FORMATS = ("arrow", "numpy", "pandas")


def collect(df, *, device: str = "host", prefetch: bool = False, as_: str = "arrow"):
    """The result of ``df`` on the driver, collected once per lineage key and reused after.

    The result is fetched through Arrow (``df.toArrow()``, or its equal on pyspark 3.5) and held in
    the host tier under the DataFrame's JVM lineage key (:func:`memphis.lineage_key`) and its column
    names and types (the key ignores aliases): collecting the same data again, through any
    DataFrame with that key, runs no Spark job. When collecting took longer than writing and
    reading the table back, it is kept in the durable tier too (:func:`memphis.local.configure`),
    so that a new process (a restarted notebook) collects it without a Spark job. A changed source (a file added, a table written)
    changes the key, so it is collected fresh. Threads asking for a key being collected wait for
    that one collection. A DataFrame without a key (unseeded ``rand()``, an unknown source) is
    collected every time and counted as ``refused`` in :func:`memphis.local.stats`.

    Parameters
    ----------
    df : pyspark.sql.DataFrame
    device : ``"host"`` (driver memory) or ``"gpu"``: the host result (collected as above, or
        found in the host tier) copied once to the device of the GPU tier (:mod:`memphis.gpu`) and
        kept there under the same key plus the format, so a second collect copies nothing. Without
        a GPU tier it raises :class:`memphis.gpu.NoGpuError`.
    prefetch : when true, the collection starts in a background thread (with the caller's job
        group and scheduler pool) and a ``concurrent.futures.Future`` of the result is returned at
        once, so the driver goes on while Spark computes. It is keyed and held like any collect: a
        collect of the same data asked while it runs waits for it and runs no Spark job of its own.
    as_ : ``"arrow"`` (a ``pyarrow.Table``, shared with the cache: it is immutable), ``"pandas"``
        (a new DataFrame per call) or ``"numpy"`` (a new 2-D float64 array of the columns, which
        must all be numeric: integers, floats, decimals, booleans; nulls become NaN). On the GPU,
        ``"numpy"`` gives a device array (cupy, or the simulated device's) shared with the cache,
        ``"arrow"`` and ``"pandas"`` a cudf DataFrame (cupy device with cudf installed).

    Examples
    --------
    >>> df = spark.range(100_000).selectExpr("id", "id * 0.5 AS half")  # doctest: +SKIP
    >>> X = memphis.collect(df, as_="numpy")  # doctest: +SKIP
    >>> X = memphis.collect(df, as_="numpy")  # no Spark job this time  # doctest: +SKIP
    >>> future = memphis.collect(df, prefetch=True)  # doctest: +SKIP
    >>> table = future.result()  # doctest: +SKIP
    >>> X = memphis.collect(df, device="gpu", as_="numpy")  # one host → device copy  # doctest: +SKIP
    """
    if not jvm_access.is_dataframe(df):
        raise TypeError(f"memphis.collect: df of type {type(df).__name__}; expected a pyspark.sql.DataFrame")
    if not isinstance(prefetch, bool):
        raise TypeError(f"prefetch={prefetch!r}: expected True or False")
    if device not in ("host", "gpu"):
        raise ValueError(f"device={device!r}: expected 'host' or 'gpu'")
    if as_ not in FORMATS:
        raise ValueError(f"as_={as_!r}: expected one of {', '.join(FORMATS)}")
    if prefetch:
        return background.submit(collect, df, device=device, as_=as_)
    if device == "gpu":
        return _on_gpu(df, as_)
    return _convert(_table(df), as_)


def _collect_item(df):
    """The item of ``df``'s collected result: its JVM lineage key and schema; None without a key."""
    key = lineage_key(df)
    if key is None:
        default.host().count("refused")
        log.debug("collected without reuse: the DataFrame has no lineage key")
        return None
    return LineageItem("collect", literals=(("key", key), ("schema", df.schema.json())))


def to_arrow(df):
    """``df``'s result as an Arrow table: ``DataFrame.toArrow()``, or on pyspark 3.5, which lacks it,
    a table of the Arrow batches ``toPandas()`` collects."""
    if hasattr(df, "toArrow"):
        return df.toArrow()
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    batches = df._collect_as_arrow()
    return pa.Table.from_batches(batches) if batches else to_arrow_schema(df.schema).empty_table()


def _table(df, item=None):
    """``df``'s result as an Arrow table, from the host tier when its key was collected before."""
    item = item or _collect_item(df)
    if item is None:
        return to_arrow(df)
    # durable: the key (JVM lineage key, schema) means the same in every process, and its sources'
    # fingerprints are taken afresh, so a later process may read the table instead of running Spark.
    return default.host().get_or_compute(item.key, lambda: to_arrow(df), item=item, durable=True)


def _on_gpu(df, as_: str):
    """``df``'s result on the GPU tier's device: one host → device copy per key and format."""
    gpu = default.gpu_tier(required=True)
    form = "numpy" if as_ == "numpy" else "frame"

    def transfer(item):
        table = _table(df, item)
        if form == "frame":
            return gpu.device.frame_from_arrow(table)
        return gpu.device.stack_columns(_float_columns(table), table.num_rows)
    item = _collect_item(df)
    if item is None:
        return transfer(None)
    on_device = LineageItem("to_device", inputs=(item,), literals=(("as", form),))
    value, _ = gpu.get_or_compute(on_device.key, lambda: transfer(item), item=on_device, opcode="collect",
                                  delayed=False)
    return value


def _convert(table, as_: str):
    if as_ == "arrow":
        return table
    if as_ == "pandas":
        return table.to_pandas()
    return float_matrix(_float_columns(table), table.num_rows)


def _float_columns(table) -> list:
    """``table``'s columns as float64 numpy arrays (nulls become NaN); a TypeError if one is not numeric."""
    import pyarrow as pa

    numeric = (pa.types.is_integer, pa.types.is_floating, pa.types.is_decimal, pa.types.is_boolean)
    others = [f"{field.name} ({field.type})" for field in table.schema
              if not any(is_kind(field.type) for is_kind in numeric)]
    if others:
        raise TypeError(f"as_='numpy' needs numeric columns; not numeric: {', '.join(others)}. "
                        "Select or cast the numeric columns first, or collect as 'arrow' or 'pandas'.")
    return [column.cast(pa.float64()).to_numpy() for column in table.columns]  # cast in Arrow
