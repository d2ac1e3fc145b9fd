"""Bad input to the Python API: a clear error naming the argument, the value and what is allowed, or
the documented fallback (the work runs without reuse, counted as refused)."""
import fractions

import numpy as np
import pytest

import memphis
import memphis.gpu
import memphis.local as ml

BYTE_SIZE = "expected a byte size"


@pytest.mark.parametrize("arguments, message", [
    ({"host_max_bytes": "lots"}, "host_max_bytes='lots': " + BYTE_SIZE),
    ({"host_max_bytes": -1}, "host_max_bytes=-1: " + BYTE_SIZE),
    ({"host_max_bytes": 1.5}, "host_max_bytes=1.5: " + BYTE_SIZE),
    ({"disk_max_bytes": True}, "disk_max_bytes=True: " + BYTE_SIZE),
    ({"disk_dir": 42}, "disk_dir=42: expected a directory path"),
    ({"min_cost_s": -0.1}, "min_cost_s=-0.1: expected a non-negative number of seconds"),
    ({"min_cost_s": float("nan")}, "min_cost_s=nan: expected a non-negative number of seconds"),
    ({"min_cost_s": "1ms"}, "min_cost_s='1ms': expected a non-negative number of seconds"),
])
def test_local_configure_names_the_bad_argument(local_tier, arguments, message):
    with pytest.raises(ValueError) as error:
        ml.configure(**arguments)
    assert str(error.value).startswith(message)
    assert ml.tier() is local_tier  # nothing was replaced


@pytest.mark.parametrize("arguments, message", [
    ({"device": "tpu"}, "device='tpu': expected one of auto, cupy, simulated, none"),
    ({"device": "simulated", "memory_fraction": 0}, "memory_fraction=0: expected a fraction in (0, 1]"),
    ({"device": "simulated", "memory_fraction": "most"}, "memory_fraction='most': expected a fraction in (0, 1]"),
    ({"device": "simulated", "budget_bytes": "1 GB please"}, "budget_bytes='1 GB please': " + BYTE_SIZE),
    ({"device": "simulated", "capacity_bytes": [1]}, "capacity_bytes=[1]: " + BYTE_SIZE),
    ({"device": "simulated", "copy_bytes_per_s": 0}, "copy_bytes_per_s=0: expected a positive number"),
])
def test_gpu_configure_names_the_bad_argument(local_tier, arguments, message):
    before = memphis.gpu.configure(device="simulated", capacity_bytes="1m")
    try:
        with pytest.raises(ValueError) as error:
            memphis.gpu.configure(**arguments)
        assert str(error.value).startswith(message)
        assert memphis.gpu.tier() is before  # nothing was replaced
    finally:
        memphis.gpu.configure(device="none")


@pytest.mark.parametrize("actions, arguments, kind, message", [
    (42, {}, TypeError, "actions=42: expected an iterable of DataFrames or zero-argument callables"),
    ("abc", {}, TypeError, "actions='abc': expected an iterable"),
    ([lambda: 1, 7], {}, TypeError, "actions[1]=7: expected a DataFrame or a zero-argument callable"),
    ([lambda: 1], {"max_parallel": 0}, ValueError, "max_parallel=0: expected a positive whole number"),
    ([lambda: 1], {"max_parallel": "2"}, ValueError, "max_parallel='2': expected a positive whole number"),
    ([lambda: 1], {"max_parallel": True}, ValueError, "max_parallel=True: expected a positive whole number"),
    ([lambda: 1], {"pool": 3}, TypeError, "pool=3: expected the name of a scheduler pool"),
])
def test_run_all_names_the_bad_argument(actions, arguments, kind, message):
    with pytest.raises(kind) as error:
        memphis.run_all(actions, **arguments)
    assert str(error.value).startswith(message)


def test_collect_and_broadcast_name_the_bad_argument(spark):
    df = spark.range(3)
    cases = [
        (lambda: memphis.collect([1, 2]), TypeError, "memphis.collect: df of type list; expected a pyspark.sql"),
        (lambda: memphis.collect(df, device="tpu"), ValueError, "device='tpu': expected 'host' or 'gpu'"),
        (lambda: memphis.collect(df, as_="json"), ValueError, "as_='json': expected one of arrow, numpy, pandas"),
        (lambda: memphis.collect(df, prefetch="yes"), TypeError, "prefetch='yes': expected True or False"),
        (lambda: memphis.broadcast(np.zeros(3), spark), TypeError, "memphis.broadcast: spark=array"),
    ]
    for call, kind, message in cases:
        with pytest.raises(kind) as error:
            call()
        assert str(error.value).startswith(message)


def test_array_of_python_objects_is_a_clear_error():
    for value in (object(), [1, "a", None], {"a": 1}):
        with pytest.raises(TypeError, match=f"memphis.array: value of type {type(value).__name__} becomes an "
                                            "array of dtype object, which has no content hash; expected"):
            memphis.array(value)
    assert memphis.array(["a", "b"]).dtype.kind == "U"  # strings have a content hash


def test_reuse_of_a_non_function_or_a_bad_version_is_a_clear_error():
    with pytest.raises(TypeError, match=r"memphis.reuse: 42 \(type int\) is not callable; expected a function"):
        memphis.reuse(42)
    with pytest.raises(TypeError, match=r"memphis.reuse: version=1.5: expected a string, an int or None"):
        memphis.reuse(version=1.5)


class Position:
    """An index numpy accepts (``__index__``) that has no literal form in a lineage."""

    def __init__(self, i):
        self.i = i

    def __index__(self):
        return self.i


def test_a_traced_operation_with_an_untraceable_argument_runs_without_reuse(local_tier):
    X = memphis.array(np.arange(12.0).reshape(3, 4))
    refused = ml.stats()["refused"]
    for _ in range(2):
        taken = np.take(X, Position(5))  # a traced function, an argument without a lineage
        row = X[Position(1)]
        assert float(taken) == 5.0 and not isinstance(taken, ml.TracedArray)
        np.testing.assert_array_equal(row, [4.0, 5.0, 6.0, 7.0])
    assert ml.stats()["refused"] == refused + 4 and ml.stats()["hits"] == 0


def test_a_traced_operation_numpy_rejects_raises_numpys_error_and_caches_nothing(local_tier):
    X = memphis.array(np.ones(3))
    with pytest.raises(TypeError):
        X + object()  # not traceable, then numpy itself refuses it: its own error, unchanged
    assert ml.entries().empty


def test_a_reused_function_with_an_unsupported_argument_runs_without_reuse(local_tier):
    @memphis.reuse
    def scaled(x, factor):
        return x * factor

    x = np.arange(3.0)
    for _ in range(2):
        np.testing.assert_array_equal(scaled(x, fractions.Fraction(1, 2)), x / 2)
    assert ml.stats()["refused"] == 2 and ml.stats()["misses"] == 0
