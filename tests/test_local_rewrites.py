"""The partial-reuse rewrites (memphis.tracing.partial) and deferred arrays: every answer equals
direct numpy, whatever the inputs' dtype and layout, and the work each rewrite saves is counted."""
import importlib
import itertools
import time
from types import SimpleNamespace

import numpy as np
import pytest

import memphis
import memphis.local as ml

calls = importlib.import_module("memphis.tracing.calls")
host = importlib.import_module("memphis.tiers.host")

ROWS, COLUMNS = 3000, 40

# The layouts and dtypes a rewrite must treat alike: (name, make X from a C-ordered float64 matrix, rtol).
LAYOUTS = [
    ("c-float64", lambda M: M, 1e-10),
    ("float32", lambda M: M.astype(np.float32), 1e-4),
    ("fortran", lambda M: np.asfortranarray(M), 1e-10),
    ("strided-rows", lambda M: np.repeat(M, 2, axis=0)[::2], 1e-10),
    ("transposed", lambda M: np.ascontiguousarray(M.T).T, 1e-10),
]


@pytest.fixture
def data():
    rng = np.random.default_rng(11)
    return rng.standard_normal((ROWS, COLUMNS)), rng.standard_normal(ROWS)


def count_products(monkeypatch):
    """(item key, multiply-adds) of every product the traced arrays and the rewrites compute."""
    computed = []
    cached = calls.cached

    def counting(item, compute, **options):
        if item.opcode != "ufunc.matmul":
            return cached(item, compute, **options)

        def measured():
            value = compute()
            computed.append(item.key)
            return value
        return cached(item, measured, **options)
    for module in ("memphis.tracing.array", "memphis.tracing.partial"):
        monkeypatch.setattr(importlib.import_module(module), "cached", counting)
    return computed


@pytest.mark.parametrize("name,layout,rtol", LAYOUTS, ids=[name for name, _, _ in LAYOUTS])
def test_every_rewrite_equals_direct_numpy(local_tier, data, name, layout, rtol):
    X, y = layout(data[0]), data[1].astype(layout(data[0]).dtype)
    tX, ty = memphis.array(X), memphis.array(y)
    atol = rtol * ROWS
    tX.T @ tX, tX.T @ ty  # the cached products the selections are cut from
    for columns in ([0, 3, 5, 7] + list(range(10, 40)), [39, 1, 2, 30] + list(range(5, 25))):
        S = tX[:, columns]
        np.testing.assert_allclose((S.T @ S).numpy(), X[:, columns].T @ X[:, columns], rtol=rtol, atol=atol)
        np.testing.assert_allclose((S.T @ ty).numpy(), X[:, columns].T @ y, rtol=rtol, atol=atol)
        assert S.deferred  # answered from XᵀX and Xᵀy: the gather was never made
        np.testing.assert_array_equal(S.numpy(), X[:, columns])
    parts = np.array_split(X, 3)
    folds = [memphis.array(p) for p in parts]
    for k in range(3):
        train = np.vstack([f for i, f in enumerate(folds) if i != k])
        rest = np.vstack([p for i, p in enumerate(parts) if i != k])
        np.testing.assert_allclose((train.T @ train).numpy(), rest.T @ rest, rtol=rtol, atol=atol)
        w = memphis.array(np.linspace(-1, 1, COLUMNS).astype(X.dtype))
        np.testing.assert_allclose((train @ w).numpy(), rest @ np.asarray(w), rtol=rtol, atol=atol)
        assert train.deferred
        np.testing.assert_array_equal(train.numpy(), rest)
    V = memphis.array(np.linalg.qr(np.random.default_rng(3).standard_normal((COLUMNS, COLUMNS)))[0].astype(X.dtype))
    for K in (5, 12, 30, 12, 40):  # ascending, then a smaller K again, then the widest
        B = V[:, :K] * 2.0
        Z = tX @ B
        direct = X @ (np.asarray(V)[:, :K] * 2.0)
        np.testing.assert_allclose((Z.T @ Z).numpy(), direct.T @ direct, rtol=rtol, atol=atol)
        np.testing.assert_allclose((Z.T @ ty).numpy(), direct.T @ y, rtol=rtol, atol=atol)
        np.testing.assert_allclose((Z @ np.ones(K, X.dtype)).numpy(), direct @ np.ones(K, X.dtype), rtol=rtol,
                                   atol=atol)
        np.testing.assert_allclose(Z.numpy(), direct, rtol=rtol, atol=atol)


def test_a_sweep_over_k_computes_each_column_of_the_projection_once(local_tier, data, monkeypatch):
    computed = count_products(monkeypatch)
    X, y = data
    tX, ty = memphis.array(X), memphis.array(y)
    V = memphis.array(np.random.default_rng(4).standard_normal((COLUMNS, COLUMNS)))
    for K in (10, 20, 30, 40):  # each at least partial.PREFIX_MIN_WORK multiply-adds
        Z = tX @ V[:, :K]
        (Z.T @ Z).numpy(), (Z.T @ ty).numpy()
        assert Z.deferred == (K > 10)  # assembled from column blocks, never copied side by side
    # The 4 projection blocks of 10 columns each (40 in all, as one product of the widest K);
    # per K the new blocks of the Gram matrix (the new block against every block) and of Zᵀy.
    assert len(computed) == 4 + (1 + 2 + 3 + 4) + 4
    assert ml.stats()["partial_hits"] == 3 * 3  # K = 20, 30, 40: the projection, its Gram and Zᵀy


def test_a_sweep_from_the_widest_k_cuts_every_smaller_one(local_tier, data, monkeypatch):
    computed = count_products(monkeypatch)
    X, y = data
    tX, ty = memphis.array(X), memphis.array(y)
    V = memphis.array(np.random.default_rng(5).standard_normal((COLUMNS, COLUMNS)))
    for K in (40, 20, 10):
        Z = tX @ V[:, :K]
        direct = X @ np.asarray(V)[:, :K]
        np.testing.assert_allclose((Z.T @ Z).numpy(), direct.T @ direct, rtol=1e-10, atol=1e-8)
        np.testing.assert_allclose((Z.T @ ty).numpy(), direct.T @ y, rtol=1e-10, atol=1e-8)
    assert len(computed) == 3  # the widest projection, its Gram matrix and Zᵀy; every smaller K is cut
    assert ml.stats()["partial_hits"] == 2 + 2 * 2


@pytest.mark.parametrize("name,layout,rtol", LAYOUTS, ids=[name for name, _, _ in LAYOUTS])
def test_a_projection_of_data_whose_gram_is_held_is_answered_through_it(local_tier, data, name, layout, rtol):
    X, y = layout(data[0]), data[1].astype(layout(data[0]).dtype)
    tX, ty = memphis.array(X), memphis.array(y)
    atol = rtol * ROWS
    tX.T @ tX  # held: every use of a projection below goes through it
    V = np.random.default_rng(7).standard_normal((COLUMNS, 2 * COLUMNS))
    for K in (10, 20, 40, 60):  # 60 > COLUMNS: wider than the data, still cheaper through XᵀX
        B = layout(V[:, :K])
        Z = tX @ B
        direct = X @ B
        w, W = np.linspace(-1, 1, K).astype(X.dtype), np.ones((K, 3), X.dtype)
        np.testing.assert_allclose((Z.T @ Z).numpy(), direct.T @ direct, rtol=rtol, atol=atol * K)
        np.testing.assert_allclose((Z.T @ ty).numpy(), direct.T @ y, rtol=rtol, atol=atol)
        np.testing.assert_allclose((Z @ w).numpy(), direct @ w, rtol=rtol, atol=atol)
        np.testing.assert_allclose((Z @ W).numpy(), direct @ W, rtol=rtol, atol=atol)
        assert Z.deferred  # answered from XᵀX, Xᵀy and X: the projection was never made
        assert np.array_equal((Z.T @ Z).numpy(), (Z.T @ Z).numpy().T)  # symmetric, as numpy's
    assert ml.stats()["partial_hits"] == 4 + 3  # every Gram matrix from XᵀX; Zᵀy from Xᵀy after the first K
    C = layout(V[:, 60:75])
    np.testing.assert_allclose((Z.T @ (tX @ C)).numpy(), direct.T @ (X @ C), rtol=rtol, atol=atol * 60)
    assert ml.stats()["partial_hits"] == 4 + 3 + 1  # (XB)ᵀ(XC) = Bᵀ(XᵀX)C
    np.testing.assert_allclose(np.asarray(Z), direct, rtol=rtol, atol=atol)  # read: made, and equal
    assert not Z.deferred
    np.testing.assert_allclose((Z.T @ memphis.array(y[::-1].copy())).numpy(), direct.T @ y[::-1],
                               rtol=rtol, atol=atol)


def test_a_sweep_through_a_held_gram_reads_the_data_once_per_k(local_tier, data, monkeypatch):
    computed = count_products(monkeypatch)
    X, y = data
    tX, ty = memphis.array(X), memphis.array(y)
    gram, Xty = tX.T @ tX, tX.T @ ty
    V = np.random.default_rng(8).standard_normal((COLUMNS, COLUMNS))
    for K in (10, 20, 30, 40):
        Z = tX @ V[:, :K]
        w = np.linalg.solve(Z.T @ Z + np.eye(K), Z.T @ ty)
        Z @ w
        assert Z.deferred
    # XᵀX, Xᵀy, and per K only X @ (Bw): no projection, no n-row Gram matrix, no n-row Zᵀy.
    assert computed[:2] == [gram.lineage.key, Xty.lineage.key] and len(computed) == 2 + 4
    assert ml.stats()["partial_hits"] == 4 * 2


def test_a_projection_is_made_where_going_through_the_gram_is_not_cheaper(local_tier, data):
    rng = np.random.default_rng(9)
    square = rng.standard_normal((300, 200))  # not much taller than wide: d²k + dk² > nk²
    t = memphis.array(square)
    t.T @ t
    Z = t @ rng.standard_normal((200, 100))
    assert not Z.deferred
    (Z.T @ Z).numpy()
    assert ml.stats()["partial_hits"] == 0
    X, y = data
    tX = memphis.array(X)
    tX.T @ tX
    assert not (tX @ np.ones((COLUMNS, 2))).deferred  # too small to be worth leaving unmade
    single = memphis.array(X.astype(np.float32))
    single.T @ single
    assert not (single @ np.ones((COLUMNS, 10))).deferred  # in float64: its float32 Gram would lose precision
    Z = tX @ np.ones((COLUMNS, 10))
    assert Z.deferred
    np.asarray(Z)  # made: now Zᵀy is cheaper directly (nk) than through Xᵀy (nd + dk), which is not held
    (Z.T @ memphis.array(y)).numpy()
    assert ml.stats()["partial_hits"] == 0


def test_a_plain_right_operand_changed_in_place_after_an_unmade_product_is_never_seen(local_tier, data):
    X, _ = data
    tX = memphis.array(X)
    tX.T @ tX
    B = np.random.default_rng(10).standard_normal((COLUMNS, 20))
    Z = tX @ B
    expected = X @ B
    B += 1.0
    assert Z.deferred
    np.testing.assert_allclose(np.asarray(Z), expected, rtol=1e-10)


def test_a_plain_right_operand_changed_in_place_is_never_mistaken(local_tier, data):
    X, _ = data
    tX = memphis.array(X)
    B = np.random.default_rng(6).standard_normal((COLUMNS, 20))
    first = (tX @ B[:, :10]).numpy().copy()
    B[:, :10] += 1.0  # the same array object, other values
    np.testing.assert_allclose((tX @ B).numpy(), X @ B, rtol=1e-10)
    np.testing.assert_allclose(first, X @ (B[:, :10] - 1.0), rtol=1e-10)


def test_a_deferred_array_is_made_once_when_read(local_tier, data):
    X, _ = data
    S = memphis.array(X)[:, [2, 4, 6]]
    assert S.deferred and S.shape == (ROWS, 3) and S.dtype == X.dtype
    np.testing.assert_array_equal((S * 2.0).numpy(), X[:, [2, 4, 6]] * 2.0)  # any other use makes it
    assert not S.deferred
    assert S.numpy() is S.numpy() and not S.numpy().flags.writeable


def test_only_a_plain_transpose_is_read_as_the_left_of_a_crossproduct(local_tier, data):
    X = data[0]
    top, bottom = memphis.array(X[:1000]), memphis.array(X[1000:])
    stacked = np.vstack([top, bottom])
    top.T @ top, bottom.T @ bottom  # the parts' Grams, cached: a row-stacked Gram is their sum
    assert calls.is_plain_transpose(stacked.T.lineage) and calls.is_plain_transpose(np.transpose(top, None).lineage)
    assert not calls.is_plain_transpose(np.transpose(top, (1, 0)).lineage) and not calls.is_plain_transpose(top.lineage)
    before = ml.stats()["partial_hits"]
    np.testing.assert_allclose((stacked.T @ stacked).numpy(), X.T @ X, rtol=1e-10)
    assert ml.stats()["partial_hits"] == before + 1  # summed from the parts
    # The same transpose spelled with explicit axes is computed as a plain product, with the same answer.
    np.testing.assert_allclose((np.transpose(stacked, (1, 0)) @ stacked).numpy(), X.T @ X, rtol=1e-10)
    assert ml.stats()["partial_hits"] == before + 1


def test_a_cheap_operation_is_not_kept_and_a_recurring_one_is(data, monkeypatch):
    tier = ml.configure(host_max_bytes=64 << 20, disk_max_bytes=0)
    try:
        a, b = memphis.array(data[0]), memphis.array(data[0] * 2)
        tier.overhead_s, tier.first_touch_s = 0.0, 1.0  # keeping a byte costs a second: never worth it
        for _ in range(3):
            a + b
        assert not tier.entries() and tier.stats()["misses"] == 3 and tier.stats()["hits"] == 0
        tier.first_touch_s = 0.0  # now keeping is free: the next computation is kept, the one after is a hit
        a + b
        a + b
        assert len(tier.entries()) == 1 and tier.stats()["hits"] == 1
        tier.clear()
        # The tier's clock, read by it alone, moves 1 ms between readings: every computation takes 1 ms
        # (a policy test; a measured one would be as noisy as the machine).
        clock = itertools.count(0.0, 1e-3)
        monkeypatch.setattr(host, "time", SimpleNamespace(perf_counter=lambda: next(clock), monotonic=time.monotonic))
        tier.overhead_s = 10e-3  # keeping costs ten computations: kept once computed about ten times (LIMA)
        kept_at = next(n for n in range(1, 100) if (a + b, tier.entries())[1])
        assert kept_at == 10 and tier.stats()["hits"] == 1
    finally:
        ml.configure()


def test_a_loop_over_float_weights_learns_its_products_cost_once(monkeypatch):
    tier = ml.configure(host_max_bytes=64 << 20, disk_max_bytes=0)
    try:
        tier.overhead_s, tier.first_touch_s = 0.0, 1.0  # never worth keeping: each product is computed anew
        p = memphis.array(np.arange(50.0))
        through_placeholder = []
        probe = tier.get_or_compute
        monkeypatch.setattr(tier, "get_or_compute", lambda *a, **k: through_placeholder.append(1) or probe(*a, **k))
        for weight in [0.1, 0.7, 1.3, np.float64(0.2), np.float64(2.5)]:
            np.testing.assert_array_equal((weight * p).numpy(), weight * np.arange(50.0))
        # Only the first weight of each kind (a float; a numpy scalar, of shape ()) took the path with a
        # placeholder: the others' cost was known.
        assert len(through_placeholder) == 2 and tier.stats()["misses"] == 5 and not tier.entries()
        assert calls.signature((0.1 * p).lineage, (0.1, p)) == calls.signature((0.7 * p).lineage, (0.7, p))
        assert calls.signature((2 * p).lineage, (2, p)) != calls.signature((3 * p).lineage, (3, p))  # ints by value
    finally:
        ml.configure()


def test_a_basic_index_keys_as_its_general_encoding(local_tier):
    t = memphis.array(np.arange(24.0).reshape(4, 6))
    keys = set()
    for index in ((slice(None), slice(1, 3)), (slice(None), slice(1, 4)), slice(1, 3), 1, -1, (1, 2), (Ellipsis, 0),
                  (None, slice(None, None, 2)), (slice(0, 2), None), True, np.int64(1), [1, 2], (slice(None), [0, 5])):
        general = calls.trace_item("getitem", (t, index))
        for _ in range(2):  # the second from the memo of its form, where the index is basic
            item, basic = calls.getitem_item(t, index)
            assert item == general and item.key == general.key
        assert basic == (type(index) in (int, slice) or type(index) is tuple and all(
            type(i) in (int, slice) or i is None or i is Ellipsis for i in index))
        np.testing.assert_array_equal(t[index].numpy(), t.numpy()[index])
        keys.add(item.key)
    assert len(keys) == 13  # 1, True and np.int64(1) index alike but are different literals


def test_calls_bind_like_numpy(local_tier, data):
    t = memphis.array(data[0])
    assert np.sum(t, 0).lineage == np.sum(t, axis=0).lineage == t.sum(axis=0).lineage
    assert np.transpose(t).lineage == t.T.lineage == np.transpose(t, None).lineage
    with pytest.raises(TypeError):
        np.sum(t, bogus=1)
    with pytest.raises(TypeError):
        np.sum(t, 0, axis=0)


def test_a_ufunc_call_keys_as_its_general_encoding(local_tier):
    a, b, plain = memphis.array(np.ones(3)), memphis.array(np.zeros(3)), np.arange(3.0)
    keys = set()
    for ufunc, arguments in ((np.add, (a, a)), (np.multiply, (a, 2.0)), (np.subtract, (3, a)), (np.subtract, (a, 3)),
                             (np.add, (a, plain)), (np.exp, (a,)), (np.add, (a, 1)), (np.add, (a, True)),
                             (np.add, (a, 1.0)), (np.add, (b, 1)), (np.add, (a, -0.0)), (np.add, (a, 0.0))):
        general = calls.trace_item("ufunc." + ufunc.__name__, (tuple(arguments), ()))
        for _ in range(2):  # the second from the memo of its call's form (not for a plain array)
            item = calls.ufunc_item(ufunc, "__call__", arguments, {})
            assert item == general and item.key == general.key and item.inputs
        keys.add(item.key)
    assert len(keys) == 12  # 1, True and 1.0 (and 0.0 and -0.0) are different literals


def test_a_function_call_keys_as_its_general_encoding(local_tier):
    t = memphis.array(np.ones((3, 2)))
    for function, args, kwargs in ((np.sum, (t,), {"axis": 0}), (np.transpose, (t,), {}),
                                   (np.concatenate, ((t, t),), {"axis": 1}), (np.linalg.solve, (t.T @ t, t.T[0]), {})):
        general = calls.trace_item(calls.TRACED_FUNCTIONS[function], calls._binder(function).bind(args, kwargs))
        for _ in range(2):  # the second from the memo of its call's form
            item = calls.function_item(function, args, kwargs)
            assert item == general and item.key == general.key


def test_a_call_in_a_known_form_takes_its_own_inputs_and_literals(local_tier):
    rng = np.random.default_rng(3)
    a, b = (memphis.array(rng.standard_normal((3, 3))) for _ in range(2))
    y = memphis.array(rng.standard_normal(3))

    def key(function, *args, **kwargs):
        item = calls.function_item(function, args, kwargs)
        general = calls.trace_item(calls.TRACED_FUNCTIONS[function], calls._binder(function).bind(args, kwargs))
        assert item == general
        return item.key

    assert key(np.dot, a, b) != key(np.dot, b, a) == key(np.dot, b, a)
    assert key(np.linalg.solve, a, y) == key(np.linalg.solve, b=y, a=a) == key(np.linalg.solve, a, b=y)
    assert key(np.linalg.solve, a, y) != key(np.linalg.solve, b=y, a=b)
    # Values that compare equal but are different literals are different forms.
    assert key(np.clip, a, 0.0, 1) != key(np.clip, a, -0.0, 1) != key(np.clip, a, 0.0, 1.0)
    assert key(np.sum, a, axis=1) != key(np.sum, a, axis=True)
    for left, right in ((a, b), (b, a)):
        assert np.array_equal(np.dot(left, right).numpy(), np.dot(left.numpy(), right.numpy()))
