import dataclasses
import importlib

import numpy as np
import pytest

import memphis
import memphis.local as ml

calls = importlib.import_module("memphis.tracing.calls")


@pytest.fixture
def data():
    rng = np.random.default_rng(7)
    return rng.standard_normal((2000, 30)), rng.standard_normal(2000)


def count_matmuls(monkeypatch):
    """Counts the products traced arrays actually compute (not the ones served from the cache)."""
    computed = []
    cached = calls.cached

    def counting(item, compute, **options):
        if item.opcode == "ufunc.matmul":
            return cached(item, lambda: computed.append(item.key) or compute(), **options)
        return cached(item, compute, **options)
    for module in ("memphis.tracing.array", "memphis.tracing.partial"):  # the traced products and the rewrites'
        monkeypatch.setattr(importlib.import_module(module), "cached", counting)
    return computed


def ridge(X, y, lam):
    return np.linalg.solve(X.T @ X + lam * np.eye(X.shape[1]), X.T @ y)


def test_grid_search_computes_the_gram_matrix_once(local_tier, data, monkeypatch):
    computed = count_matmuls(monkeypatch)
    X, y = data
    tX, ty = memphis.array(X), memphis.array(y)
    lambdas = np.logspace(-3, 3, 10)
    traced = [ridge(tX, ty, lam) for lam in lambdas]
    assert len(computed) == 2  # XᵀX and Xᵀy, once each
    assert ml.stats()["hits"] >= 18
    for lam, w in zip(lambdas, traced):
        assert isinstance(w, ml.TracedArray)
        np.testing.assert_allclose(w.numpy(), ridge(X, y, lam), rtol=1e-10)


def test_column_appended_gram_reuses_its_parts(local_tier, data):
    X, _ = data
    tX = memphis.array(X)
    v = memphis.array(np.random.default_rng(1).standard_normal((2000, 2)))
    tX.T @ tX  # the cached left part
    for stack in (lambda a, b: np.hstack([a, b]), lambda a, b: np.concatenate([a, b], axis=1),
                  lambda a, b: np.column_stack([a, b])):
        Xv = stack(tX, v)
        before = ml.stats()["partial_hits"]
        G = Xv.T @ Xv
        full = np.hstack([X, v.numpy()])
        np.testing.assert_allclose(G.numpy(), full.T @ full, rtol=1e-12, atol=1e-9)
        assert ml.stats()["partial_hits"] == before + (1 if before == 0 else 0)  # later: a full hit
    assert ml.stats()["partial_hits"] == 1


def test_products_of_column_subsets_are_cut_from_the_full_products(local_tier, data, monkeypatch):
    computed = count_matmuls(monkeypatch)
    X, y = data
    tX, ty = memphis.array(X), memphis.array(y)
    rng = np.random.default_rng(2)
    subsets = [sorted(rng.choice(30, size=25, replace=False).tolist()) for _ in range(4)]
    for cols in subsets:
        S = tX[:, cols]
        np.testing.assert_allclose((S.T @ S).numpy(), X[:, cols].T @ X[:, cols], rtol=1e-10)
        np.testing.assert_allclose((S.T @ ty).numpy(), X[:, cols].T @ y, rtol=1e-10)
    assert len(computed) == 2  # XᵀX and Xᵀy of all columns, once; every subset is cut from them
    assert ml.stats()["partial_hits"] == 2 * (len(subsets) - 1)


def test_a_small_column_subset_is_computed_directly(local_tier, data, monkeypatch):
    computed = count_matmuls(monkeypatch)
    X, _ = data
    tX = memphis.array(X)
    S = tX[:, [1, 5, 7]]
    np.testing.assert_allclose((S.T @ S).numpy(), X[:, [1, 5, 7]].T @ X[:, [1, 5, 7]], rtol=1e-12)
    assert len(computed) == 1 and ml.stats()["partial_hits"] == 0  # XᵀX would cost 100 times more


def test_a_product_too_small_to_gain_from_a_rewrite_is_computed_directly(local_tier, monkeypatch):
    from memphis.tracing import partial

    computed = count_matmuls(monkeypatch)
    X = np.random.default_rng(8).standard_normal((50, 5))
    tX = memphis.array(X)
    tX.T @ tX  # held: the selection's Gram could be cut from it, but asking would cost more than computing
    S = tX[:, [0, 1, 3, 4]]
    np.testing.assert_allclose((S.T @ S).numpy(), X[:, [0, 1, 3, 4]].T @ X[:, [0, 1, 3, 4]], rtol=1e-12)
    assert len(computed) == 2 and ml.stats()["partial_hits"] == 0
    monkeypatch.setattr(partial, "REWRITE_MIN_WORK", 1)  # any product asks: now it is cut from XᵀX
    T = tX[:, [0, 1, 3]]
    np.testing.assert_allclose((T.T @ T).numpy(), X[:, [0, 1, 3]].T @ X[:, [0, 1, 3]], rtol=1e-12)
    assert len(computed) == 2 and ml.stats()["partial_hits"] == 1


def test_rows_picked_by_an_index_array_are_no_column_selection(local_tier, data):
    X, _ = data
    tX = memphis.array(X)
    rows = np.array([0, 2, 3])
    for index in ((rows, slice(1, 3)), (memphis.array(rows), slice(None)), (rows, [1, 4, 2])):
        S = tX[index]
        expected = X[tuple(np.asarray(i) if not isinstance(i, slice) else i for i in index)]
        np.testing.assert_array_equal(S.numpy(), expected)
        np.testing.assert_allclose((S.T @ S).numpy(), expected.T @ expected, rtol=1e-12)
    assert ml.stats()["partial_hits"] == 0


def test_appended_ones_column(local_tier, data):
    X, y = data
    tX, ty = memphis.array(X), memphis.array(y)
    tX.T @ tX, tX.T @ ty  # cached parts
    X1 = np.hstack([tX, ml.full((2000, 1), 1.0)])
    full = np.hstack([X, np.ones((2000, 1))])
    np.testing.assert_allclose((X1.T @ X1).numpy(), full.T @ full, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose((X1.T @ ty).numpy(), full.T @ y, rtol=1e-12, atol=1e-9)
    assert ml.stats()["partial_hits"] == 2


def test_row_appended_gram_is_the_sum_of_the_folds(local_tier, data, monkeypatch):
    computed = count_matmuls(monkeypatch)
    X, y = data
    folds = [memphis.array(part) for part in np.array_split(X, 4)]
    targets = [memphis.array(part) for part in np.array_split(y, 4)]
    for k in range(4):
        train = np.vstack([f for i, f in enumerate(folds) if i != k])
        target = np.concatenate([t for i, t in enumerate(targets) if i != k])
        rest = np.vstack([f for i, f in enumerate(np.array_split(X, 4)) if i != k])
        np.testing.assert_allclose((train.T @ train).numpy(), rest.T @ rest, rtol=1e-10, atol=1e-9)
        np.testing.assert_allclose((train.T @ target).numpy(), rest.T @ np.concatenate(
            [t for i, t in enumerate(np.array_split(y, 4)) if i != k]), rtol=1e-10, atol=1e-9)
    assert len(computed) == 8  # one Gram and one Xᵀy per fold, reused by the others
    assert ml.stats()["partial_hits"] == 6  # folds 2..4 reuse, for both products


def test_seeded_random_is_reused_unseeded_is_not(local_tier):
    def pipeline(noise):
        return (noise.T @ noise).sum()
    pipeline(ml.random((500, 20), seed=42))
    hits = ml.stats()["hits"]
    pipeline(ml.random((500, 20), seed=42))
    assert ml.stats()["hits"] > hits
    a = pipeline(ml.random((500, 20)))
    hits, refused = ml.stats()["hits"], ml.stats()["refused"]
    b = pipeline(ml.random((500, 20)))
    assert ml.stats()["hits"] == hits and ml.stats()["refused"] > refused
    assert float(a) != float(b)


def test_linalg_results_equal_numpy(local_tier, data):
    X, y = data
    A = X.T @ X + np.eye(30)
    tA, ty = memphis.array(A), memphis.array(X.T @ y)
    np.testing.assert_array_equal(np.linalg.inv(tA).numpy(), np.linalg.inv(A))
    w, V = np.linalg.eigh(tA)
    np.testing.assert_array_equal(w.numpy(), np.linalg.eigh(A).eigenvalues)
    assert np.linalg.eigh(tA).eigenvectors.shape == V.shape
    u, s, vt = np.linalg.svd(tA)
    np.testing.assert_array_equal(s.numpy(), np.linalg.svd(A)[1])
    solution = np.linalg.lstsq(tA, ty, rcond=None)
    np.testing.assert_array_equal(solution[0].numpy(), np.linalg.lstsq(A, X.T @ y, rcond=None)[0])
    np.testing.assert_array_equal(tA[2:5, [0, 3]].numpy(), A[2:5, [0, 3]])
    np.testing.assert_array_equal(tA.sum(axis=0).numpy(), A.sum(axis=0))
    assert float(tA.mean()) == A.mean()


def test_untraced_functions_fall_back_to_numpy(local_tier):
    t = memphis.array(np.arange(8.0))
    result = np.fft.fft(t)  # not traced: plain numpy, no error
    assert isinstance(result, np.ndarray) and np.allclose(result, np.fft.fft(np.arange(8.0)))


def test_traced_values_are_read_only_and_in_place_operators_rebind(local_tier):
    raw = np.arange(4.0)
    t = memphis.array(raw)
    with pytest.raises(ValueError):
        t.numpy()[0] = 1  # traced values may be shared with the cache
    u = t
    u += 1
    assert u.numpy().tolist() == [1, 2, 3, 4] and t.numpy().tolist() == [0, 1, 2, 3]


def test_wrapping_neither_copies_nor_freezes_the_raw_array(local_tier):
    raw = np.arange(6.0).reshape(3, 2)
    t = memphis.array(raw)
    assert raw.flags.writeable and np.shares_memory(t.numpy(), raw)


def test_a_raw_array_changed_in_place_is_computed_fresh(local_tier):
    raw = np.arange(6.0).reshape(3, 2)
    X = memphis.array(raw)
    first = (X.T @ X).numpy().copy()
    raw[0, 0] = 100.0
    X = memphis.array(raw)  # wrapped again after the change: hashed again
    assert np.array_equal((X.T @ X).numpy(), raw.T @ raw) and not np.array_equal(first, raw.T @ raw)
    v = np.ones(3)
    before = (X.T @ v).numpy().copy()
    v[1] = 5.0  # a plain array mixed into traced work is hashed where it is met
    assert np.array_equal((X.T @ v).numpy(), raw.T @ v) and not np.array_equal(before, raw.T @ v)


def test_work_on_a_large_fresh_array_starts_while_it_is_hashed(local_tier, monkeypatch):
    from memphis.backends import numpy_backend
    from memphis.tracing import lineage

    monkeypatch.setattr(numpy_backend, "blas_threads", lambda: numpy_backend.cores() - 1)  # a core to hash on

    # Below the threshold the hash is computed at wrap time; from it on, when the key is first needed.
    X = np.random.default_rng(3).standard_normal((4000, 50))  # 1.6 MB
    monkeypatch.setattr(lineage, "LAZY_HASH_BYTES", 1 << 30)
    eager = memphis.array(X).lineage
    monkeypatch.setattr(lineage, "LAZY_HASH_BYTES", 1 << 20)
    lazy = memphis.array(X.copy()).lineage
    assert lazy.pending and not eager.pending
    assert lazy.key == eager.key and lazy == eager and not lazy.pending

    before = ml.stats()
    first = memphis.array(X.copy())
    gram = first.T @ first  # a view, then the product: started early, a miss, computed once
    np.testing.assert_allclose(gram.numpy(), X.T @ X, rtol=1e-12)
    again = memphis.array(X.copy())  # a new writeable object: hashed anew, found cached
    served = again.T @ again
    after = ml.stats()
    assert after["started_early"] - before["started_early"] == 2
    assert after["hits"] - before["hits"] == 1 and after["computed"] - before["computed"] == 1
    assert np.array_equal(served.numpy(), gram.numpy())

    changed = X.copy()
    changed[0, 0] += 1.0
    other = memphis.array(changed)
    np.testing.assert_allclose((other.T @ other).numpy(), changed.T @ changed, rtol=1e-12)
    assert ml.stats()["computed"] - after["computed"] == 1  # different content: never the cached one

    # BLAS on every core: hashing beside a product would leave its threads short of cores, so nothing starts early.
    monkeypatch.setattr(numpy_backend, "blas_threads", numpy_backend.cores)
    before = ml.stats()
    fresh = memphis.array(X * 2)
    np.testing.assert_allclose((fresh.T @ fresh).numpy(), 4 * (X.T @ X), rtol=1e-12)
    assert ml.stats()["started_early"] == before["started_early"] and ml.stats()["computed"] - before["computed"] == 1


def test_rewrites_of_fresh_arrays_start_the_products_they_read_while_the_inputs_are_hashed(local_tier, monkeypatch):
    from memphis.backends import numpy_backend

    monkeypatch.setattr(numpy_backend, "blas_threads", lambda: numpy_backend.cores() - 1)  # a core to hash on
    computed = count_matmuls(monkeypatch)
    X = np.random.default_rng(4).standard_normal((6000, 40))  # 1.9 MB: hashed when its key is first needed
    tX = memphis.array(X)
    columns = list(range(0, 40, 4)) + list(range(39, 17, -1))  # 32 of 40: cut from XᵀX (see column_selection_product)
    S = tX[:, columns]
    assert tX.lineage.pending  # noting the selection does not hash its source
    before = ml.stats()
    np.testing.assert_allclose((S.T @ S).numpy(), X[:, columns].T @ X[:, columns], rtol=1e-12)
    after = ml.stats()
    # XᵀX started while X was hashed, and the selection's Gram cut from it: its own product never started.
    assert after["started_early"] - before["started_early"] == 1 and len(computed) == 1
    assert computed == [(tX.T @ tX).lineage.key]

    folds = [memphis.array(part) for part in np.array_split(np.random.default_rng(5).standard_normal((12000, 40)), 3)]  # 1.3 MB each
    train = np.vstack(folds[:2])
    before, computed[:] = ml.stats(), []
    np.testing.assert_allclose((train.T @ train).numpy(), train.numpy().T @ train.numpy(), rtol=1e-10)
    # Each part's Gram started while that part was hashed; the stacked product was never computed whole.
    assert ml.stats()["started_early"] - before["started_early"] == 2
    assert sorted(computed) == sorted((f.T @ f).lineage.key for f in folds[:2])


def test_a_column_list_out_of_range_raises_as_numpy_does(local_tier, data):
    X, _ = data
    tX = memphis.array(X)
    for columns in ([0, 30], [-31], np.array([2, 40])):
        with pytest.raises(IndexError):
            tX[:, columns]
    np.testing.assert_array_equal(tX[:, [-1, 0, -30]].numpy(), X[:, [-1, 0, -30]])


def test_the_transpose_of_a_traced_array_is_made_once_and_keys_as_np_transpose(local_tier):
    X = memphis.array(np.arange(6.0).reshape(3, 2))
    assert X.T is X.T
    assert X.T.lineage == np.transpose(X).lineage and np.array_equal(X.T.numpy(), X.numpy().T)
    assert np.array_equal((X.T @ X).numpy(), X.numpy().T @ X.numpy())


def test_a_recurring_call_is_served_from_its_form_and_its_inputs_hashes(local_tier, monkeypatch):
    a, b = memphis.array(np.arange(5.0)), memphis.array(np.ones(5))
    first = np.linalg.solve(np.outer(a, a) + np.eye(5), a * 2.0 + b)  # every form met, every result kept
    hits = ml.stats()["hits"]

    def unexpected(*args):
        raise AssertionError("the item of a recurring call was made the general way")
    traced = importlib.import_module("memphis.tracing.array")
    monkeypatch.setattr(traced, "ufunc_item", unexpected)
    monkeypatch.setattr(traced, "function_item", unexpected)
    scaled = a * 2.0  # served by calls.known_call, from the form memo and the inputs' hashes (np.eye(5)'s too)
    again = np.linalg.solve(np.outer(a, a) + np.eye(5), scaled + b)
    assert ml.stats()["hits"] - hits == 5  # a * 2.0, outer, + eye, + b, solve
    entries = {row["key"] for row in ml.tier().entries()}
    assert scaled.lineage.key in entries and again.lineage.key == first.lineage.key
    want = np.linalg.solve(np.outer(np.arange(5.0), np.arange(5.0)) + np.eye(5), np.arange(5.0) * 2.0 + 1)
    assert np.array_equal(again.numpy(), want) and np.array_equal(first.numpy(), want)


def test_an_entry_of_the_same_hash_and_another_lineage_is_never_served(local_tier):
    a, b = memphis.array(np.arange(4.0)), memphis.array(np.full(4, 3.0))
    total = a + b
    memphis.array(np.zeros(4)) - memphis.array(np.ones(4))  # the form of a - b is met: a probe by calls.known_call
    difference_key = calls.ufunc_item(np.subtract, "__call__", (a, b), {}).key
    tier = ml.tier()
    kept = tier._entries[total.lineage.key]
    tier._entries[difference_key] = dataclasses.replace(kept, key=difference_key)  # as if a - b hashed like a + b
    refused = ml.stats()["refused"]
    difference = a - b
    assert np.array_equal(difference.numpy(), np.arange(4.0) - 3.0) and ml.stats()["refused"] == refused + 1


def test_operators_take_numpy_operands_directly_and_leave_others_to_theirs(local_tier):
    raw = np.arange(1.0, 7.0).reshape(2, 3)
    t, square = memphis.array(raw), memphis.array(np.eye(3))
    operands = {"traced": memphis.array(raw + 1), "float": 2.5, "int": 3, "numpy float": np.float64(0.5),
                "array": raw + 10}
    for name, other in operands.items():
        plain = other.numpy() if name == "traced" else other
        for result, want in ((t + other, raw + plain), (other + t, plain + raw), (t - other, raw - plain),
                             (other - t, plain - raw), (t * other, raw * plain), (t / other, raw / plain),
                             (other / t, plain / raw), (t ** 2, raw ** 2), (2 ** t, 2 ** raw)):
            assert isinstance(result, ml.TracedArray), name
            assert np.array_equal(result.numpy(), want), name
    assert np.array_equal((t @ square).numpy(), raw) and np.array_equal((raw.T @ t).numpy(), raw.T @ raw)
    assert sum([t, t, t]).lineage == (0 + t + t + t).lineage  # sum() starts from 0: 0 + t

    class OwnAddition:  # an operand that takes its own operations: numpy's rule gives it the call
        __array_ufunc__ = None

        def __radd__(self, other):
            return "its own"
    assert t + OwnAddition() == "its own"
