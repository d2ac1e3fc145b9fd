import numpy as np

import memphis
from memphis.backends import numpy_backend
from memphis.tracing.lineage import MAX_TRACE_HEIGHT, LineageItem, Untraceable, encode, int_sequence_values, literal


def leaf(value):
    return LineageItem("leaf", literals=(literal(value),))


def test_equal_structure_gives_equal_items_and_keys():
    a, b = leaf(1), leaf(1)
    assert LineageItem("neg", inputs=(a,)) == LineageItem("neg", inputs=(b,))
    assert LineageItem("neg", inputs=(a,)).key == LineageItem("neg", inputs=(b,)).key
    assert LineageItem("neg", inputs=(a,)) != LineageItem("neg", inputs=(leaf(2),))
    assert leaf(1) != leaf(True) and leaf(1.0) != leaf(1)  # literals are typed


def test_int_sequences_key_by_their_values_and_their_type():
    assert leaf([1, 2, 3]) == leaf([1, 2, 3]) and leaf([1, 2, 3]) != leaf((1, 2, 3))
    assert leaf([1, 2]) != leaf([1, 2, 0]) and leaf([-1]) != leaf([2 ** 64 - 1]) and leaf([2 ** 63]) != leaf([0])
    assert leaf([1, True]) != leaf([1, 1]) and leaf([1, 2.0]) != leaf([1, 2])  # bools and floats keep their types
    for value in ([0, -1, 2 ** 63 - 1, -2 ** 63], (5,), [2 ** 70, 1]):
        assert int_sequence_values(literal(value)) == list(value)


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


def test_read_only_arrays_are_hashed_once_writeable_ones_at_each_use(monkeypatch):
    calls = []
    digest = numpy_backend.content_digest
    monkeypatch.setattr(numpy_backend, "content_digest", lambda a: calls.append(1) or digest(a))
    frozen = np.arange(1000.0)
    frozen.flags.writeable = False
    writeable = np.arange(1000.0)  # same content: it may change between uses
    for _ in range(3):
        encode((frozen, writeable), [])
    assert len(calls) == 1 + 3
    assert memphis.array(frozen).lineage == memphis.array(writeable).lineage


def test_views_hash_like_their_contiguous_copies(monkeypatch):
    monkeypatch.setattr(numpy_backend, "HASH_BLOCK_BYTES", 64)  # several blocks
    X = np.arange(300.0).reshape(20, 15)
    for view in (X[:, 3:11], X[::2], X.T, X[5]):
        assert numpy_backend.content_digest(view) == numpy_backend.content_digest(np.ascontiguousarray(view))
    assert numpy_backend.content_digest(X[:, :2]) != numpy_backend.content_digest(X[:, 1:3])


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
