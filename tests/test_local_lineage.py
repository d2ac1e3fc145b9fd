import numpy as np

import memphis
from memphis.local import numpy_backend
from memphis.local.lineage import MAX_TRACE_HEIGHT, LineageItem, Untraceable, encode, literal


def leaf(value):
    return LineageItem("leaf", literals=(literal(value),))


def test_equal_structure_gives_equal_items_and_keys():
    a, b = leaf(1), leaf(1)
    assert LineageItem("neg", inputs=(a,)) == LineageItem("neg", inputs=(b,))
    assert LineageItem("neg", inputs=(a,)).key == LineageItem("neg", inputs=(b,)).key
    assert LineageItem("neg", inputs=(a,)) != LineageItem("neg", inputs=(leaf(2),))
    assert leaf(1) != leaf(True) and leaf(1.0) != leaf(1)  # literals are typed


def test_a_hash_collision_does_not_make_items_equal():
    real = LineageItem("add", inputs=(leaf(1), leaf(2)))
    forged = LineageItem("mul", inputs=(leaf(1), leaf(2)), digest=real.digest)
    assert forged.key == real.key
    assert forged != real


def test_deep_traces_compare_quickly_and_are_cut():
    a = b = leaf(0)
    for i in range(5000):
        a = LineageItem("inc", inputs=(a, a))
        b = LineageItem("inc", inputs=(b, b))
        if a.height > MAX_TRACE_HEIGHT:  # what traced arrays do in a loop
            a, b = a.cut(), b.cut()
    assert a == b and a.height <= MAX_TRACE_HEIGHT + 1


def test_unseeded_randomness_spreads_to_everything_built_on_it():
    noise = LineageItem("random", deterministic=False)
    assert not LineageItem("add", inputs=(leaf(1), LineageItem("neg", inputs=(noise,)))).deterministic


def test_raw_arrays_are_hashed_once_while_frozen(monkeypatch):
    calls = []
    digest = numpy_backend.content_digest
    monkeypatch.setattr(numpy_backend, "content_digest", lambda a: calls.append(1) or digest(a))
    x = memphis.array(np.arange(1000.0))
    y = np.arange(1000.0)  # same content, writeable: hashed on every use
    for _ in range(3):
        encode((x.numpy(), y), [])
    assert len(calls) == 1 + 3  # x once, when wrapped; y at each use


def test_content_identifies_arrays():
    a, b = [], []
    encode(np.arange(4.0), a)
    encode(np.arange(4.0).reshape(2, 2), b)
    assert a[0] != b[0]  # same bytes, another shape
    c = []
    encode(np.arange(4.0), c)
    assert a[0] == c[0]


def test_unsupported_values_have_no_literal():
    try:
        encode(object(), [])
    except Untraceable:
        return
    raise AssertionError("object() was encoded")
