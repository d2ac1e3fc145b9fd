import numpy as np
import pandas as pd
import pyarrow as pa

import memphis
import memphis.local as ml

calls = []


@memphis.reuse
def gram(X, scale=1.0):
    calls.append("gram")
    return (X.T @ X) * scale


def test_same_arguments_call_once(local_tier):
    calls.clear()
    X = np.random.default_rng(0).standard_normal((200, 5))
    first = gram(X)
    again = gram(X.copy(), scale=1.0)  # same content, same defaults
    assert calls == ["gram"] and np.array_equal(first, again)
    assert ml.stats()["hits"] == 1


def test_changed_content_recomputes(local_tier):
    calls.clear()
    X = np.ones((10, 3))
    gram(X)
    X[0, 0] = 2.0  # still writeable: it was never wrapped
    assert gram(X)[0, 0] == 13.0 and calls == ["gram", "gram"]


def test_changed_code_or_version_recomputes(local_tier):
    def make(version, body):
        namespace = {}
        exec(f"def f(x):\n    return {body}", namespace)
        return memphis.reuse(namespace["f"], version=version)

    f1, f2, f3 = make("1", "x + 1"), make("1", "x + 2"), make("2", "x + 1")
    assert f1(1) == 2 and f2(1) == 3 and f3(1) == 2
    assert ml.stats()["hits"] == 0 and ml.stats()["misses"] == 3
    assert make("1", "x + 1")(1) == 2 and ml.stats()["hits"] == 1


def test_frames_tables_and_containers_are_keys(local_tier):
    calls.clear()  # a module global: a closure's values are part of the key

    @memphis.reuse(version="x")
    def describe(frame, table, options):
        calls.append(1)
        return {"rows": len(frame) + table.num_rows, "names": list(options)}

    frame, table = pd.DataFrame({"a": [1, 2]}), pa.table({"b": [1.0]})
    assert describe(frame, table, {"k": (1, "v", None)}) == {"rows": 3, "names": ["k"]}
    result = describe(frame.copy(), table, {"k": (1, "v", None)})
    result["names"].append("mutated")  # the asker's copy only
    assert describe(frame, table, {"k": (1, "v", None)})["names"] == ["k"] and len(calls) == 1
    describe(pd.DataFrame({"a": [1, 3]}), table, {"k": (1, "v", None)})
    assert len(calls) == 2


def test_unsupported_argument_runs_without_reuse(local_tier):
    counted = []

    @memphis.reuse
    def size(thing):
        counted.append(1)
        return 1

    assert size(object()) == 1 and size(object()) == 1 and len(counted) == 2
    assert ml.stats()["refused"] == 2 and ml.stats()["misses"] == 0


def test_traced_arguments_give_traced_results(local_tier):
    X = memphis.array(np.random.default_rng(1).standard_normal((100, 4)))
    G = gram(X)
    assert isinstance(G, ml.TracedArray)
    np.testing.assert_allclose((G + 1).numpy(), X.numpy().T @ X.numpy() + 1)
    unseeded = ml.random((10, 2))
    refused = ml.stats()["refused"]
    gram(unseeded)
    assert ml.stats()["refused"] > refused and ml.stats()["hits"] == 0
