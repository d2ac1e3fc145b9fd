"""memphis.sklearn.memory() as scikit-learn's memory=: a search answers as without it, each step is
fitted once per (parameters, fold) across the search, the host tier bounds what is held, and what
cannot be reused is computed, counted and said."""
import collections
import copy
import logging
import pickle
import sys
import threading
import time

import joblib
import numpy as np
import pandas as pd
import pytest
import xxhash
from sklearn.base import BaseEstimator, TransformerMixin, clone
from sklearn.decomposition import PCA
from sklearn.feature_selection import SelectKBest, f_classif
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer, PolynomialFeatures, StandardScaler
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_memory

import memphis
import memphis.local as ml
import memphis.sklearn
from memphis.backends import numpy_backend

FITS = collections.Counter()  # (class, parameters, digest of the data) -> fits
_fits_lock = threading.Lock()


@pytest.fixture(autouse=True)
def no_fits_yet():
    FITS.clear()


def count_fit(estimator, X):
    data = xxhash.xxh3_64(np.ascontiguousarray(np.asarray(X))).hexdigest()
    with _fits_lock:
        FITS[(type(estimator).__name__, repr(sorted(estimator.get_params().items())), data)] += 1


class Counting:
    """Counts its fits by (class, parameters, data): how often each distinct step was fitted."""

    def fit_transform(self, X, y=None, **params):
        count_fit(self, X)
        return super().fit_transform(X, y, **params)


class CountingScaler(Counting, StandardScaler):
    pass


class CountingPCA(Counting, PCA):
    pass


class CountingPoly(Counting, PolynomialFeatures):
    pass


class CountingSelect(Counting, SelectKBest):
    pass


class SlowScaler(Counting, StandardScaler):
    """Takes 20 ms: dearer to recompute than a disk round trip, so the tier spills it."""

    def fit_transform(self, X, y=None, **params):
        time.sleep(0.02)
        return super().fit_transform(X, y, **params)


class Drifting(TransformerMixin, BaseEstimator):
    """Breaks scikit-learn's contract: fitting changes a parameter."""

    def __init__(self, scale=1.0):
        self.scale = scale

    def fit(self, X, y=None):
        count_fit(self, X)
        self.scale = self.scale * 2
        return self

    def transform(self, X):
        return np.asarray(X) * self.scale


class RandomProjection(TransformerMixin, BaseEstimator):
    """Draws its projection from ``random_state`` (numpy's global state when it is None)."""

    def __init__(self, n_components=2, random_state=None):
        self.n_components, self.random_state = n_components, random_state

    def fit(self, X, y=None):
        count_fit(self, X)
        self.components_ = check_random_state(self.random_state).standard_normal((X.shape[1], self.n_components))
        return self

    def transform(self, X):
        return np.asarray(X) @ self.components_


class Opaque:
    """A parameter value with no key: not data, not an estimator, not a function, not a plain value."""


class Shifted(TransformerMixin, BaseEstimator):
    def __init__(self, option=None):
        self.option = option

    def fit(self, X, y=None):
        count_fit(self, X)
        return self

    def transform(self, X):
        return np.asarray(X) + 1.0


def fit_transform(transformer, X, y):
    """What Pipeline hands its memory, in short: the transformed data and the fitted transformer."""
    return transformer.fit_transform(X, y), transformer


def regression(n=240, d=8, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * np.arange(1, d + 1)
    return X, X @ rng.standard_normal(d) + rng.standard_normal(n)


def classification(n=300, d=5, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    return X, (X[:, 0] * X[:, 1] + X[:, 2] + 0.3 * rng.standard_normal(n) > 0).astype(int)


def search(steps, grid, X, y, memory, **options):
    return GridSearchCV(Pipeline(steps, memory=memory), grid, cv=3, **options).fit(X, y)


def assert_same_search(cached, plain):
    assert cached.best_params_ == plain.best_params_
    assert cached.cv_results_["params"] == plain.cv_results_["params"]
    scores = [k for k in plain.cv_results_ if k.startswith(("split", "mean_test", "std_test", "rank_test"))]
    assert scores
    for name in scores:
        assert np.array_equal(cached.cv_results_[name], plain.cv_results_[name]), name


def counters(*names):
    stats = ml.stats()
    return {n: stats[n] for n in names}


def scaler_pca_ridge():
    return [("scale", CountingScaler()), ("pca", CountingPCA()), ("ridge", Ridge())]


PCA_GRID = {"pca__n_components": [2, 3, 5], "ridge__alpha": [0.1, 1.0, 10.0]}


# --- reuse across a search -----------------------------------------------------------------------

def test_a_search_over_scaler_pca_ridge_answers_as_without_memory_and_fits_each_step_once_per_fold(local_tier):
    X, y = regression()
    plain = search(scaler_pca_ridge(), PCA_GRID, X, y, None)
    assert max(FITS.values()) == 9  # without memory: the scaler once per candidate and fold
    FITS.clear()
    cached = search(scaler_pca_ridge(), PCA_GRID, X, y, memphis.sklearn.memory())
    assert_same_search(cached, plain)
    assert set(FITS.values()) == {1}
    fitted = collections.Counter(name for name, _, _ in FITS)
    assert fitted == {"CountingScaler": 3 + 1, "CountingPCA": 3 * 3 + 1}  # per fold, and the refit on all of X
    # 9 candidates × 3 folds × 2 steps + the refit's 2: 14 computed, the rest served. PCA() has
    # random_state=None but its exact solver draws nothing, so it is reused.
    assert counters("misses", "hits", "refused", "internal_errors") == {"misses": 14, "hits": 42, "refused": 0,
                                                                       "internal_errors": 0}
    assert np.array_equal(cached.predict(X), plain.predict(X))


def test_a_search_over_a_feature_selection_pipeline_answers_as_without_memory(local_tier):
    X, y = classification()
    steps = lambda: [("poly", CountingPoly(degree=2, include_bias=False)),  # noqa: E731
                     ("select", CountingSelect(f_classif)), ("logistic", LogisticRegression())]
    grid = {"select__k": [3, 6, 10], "logistic__C": [0.1, 1.0]}
    plain = search(steps(), grid, X, y, None)
    FITS.clear()
    cached = search(steps(), grid, X, y, memphis.sklearn.memory())
    assert_same_search(cached, plain)
    assert set(FITS.values()) == {1}
    assert collections.Counter(name for name, _, _ in FITS) == {"CountingPoly": 3 + 1, "CountingSelect": 3 * 3 + 1}
    assert counters("misses", "hits", "refused") == {"misses": 14, "hits": 6 * 3 * 2 + 2 - 14, "refused": 0}


def test_a_small_budget_evicts_and_the_answers_stay_right(local_tier):
    ml.configure(host_max_bytes="40k", disk_max_bytes=0, min_cost_s=0.0)
    X, y = regression()
    plain = search(scaler_pca_ridge(), PCA_GRID, X, y, None)
    FITS.clear()
    cached = search(scaler_pca_ridge(), PCA_GRID, X, y, memphis.sklearn.memory())
    assert_same_search(cached, plain)
    stats = ml.stats()
    assert stats["evicted"] > 0 and stats["bytes_held_host"] <= 40 << 10
    assert max(FITS.values()) > 1  # what was evicted was fitted again


def test_spilled_steps_come_back_from_disk_equal(local_tier, tmp_path):
    # Room for one fold's scaled data: each new fold spills the one before (it took 20 ms to make).
    ml.configure(host_max_bytes="16k", disk_dir=str(tmp_path / "spill"), disk_max_bytes="10m", min_cost_s=0.0)
    X, y = regression()
    steps = lambda: [("scale", SlowScaler()), ("ridge", Ridge())]  # noqa: E731
    grid = {"ridge__alpha": [0.1, 1.0, 10.0]}
    plain = search(steps(), grid, X, y, None)
    FITS.clear()
    cached = search(steps(), grid, X, y, memphis.sklearn.memory())
    assert_same_search(cached, plain)
    stats = ml.stats()
    assert stats["spilled"] > 0 and stats["reloaded"] > 0 and stats["internal_errors"] == 0
    assert set(FITS.values()) == {1}


# --- threads ---------------------------------------------------------------------------------------

def test_a_threaded_search_fits_each_step_once(local_tier):
    X, y = regression()
    plain = search(scaler_pca_ridge(), PCA_GRID, X, y, None)
    FITS.clear()
    with joblib.parallel_backend("threading", n_jobs=2):
        cached = search(scaler_pca_ridge(), PCA_GRID, X, y, memphis.sklearn.memory(), n_jobs=2)
    assert_same_search(cached, plain)
    assert set(FITS.values()) == {1} and len(FITS) == 4 + 10


def test_two_threads_asking_for_one_step_at_once_fit_it_once(local_tier):
    X, _ = regression()
    fit = memphis.sklearn.memory().cache(fit_transform)
    start, results = threading.Barrier(2), []

    def ask():
        start.wait()
        results.append(fit(SlowScaler(), X, None))

    threads = [threading.Thread(target=ask) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(FITS.values()) == 1
    assert np.array_equal(results[0][0], results[1][0])
    assert results[0][1] is not results[1][1]  # each asker gets its own fitted scaler
    assert counters("misses", "hits") == {"misses": 1, "hits": 1}


# --- hashing ---------------------------------------------------------------------------------------

@pytest.fixture
def hashed(monkeypatch):
    """The shapes of the arrays hashed by content, in order."""
    shapes = []
    digest = numpy_backend.content_digest
    monkeypatch.setattr(numpy_backend, "content_digest", lambda a: shapes.append(a.shape) or digest(a))
    return shapes


def test_a_fold_of_a_traced_x_twice_does_not_hash_x_again(local_tier, hashed):
    X = memphis.array(regression(n=400, d=6)[0])
    assert hashed == [(400, 6)]
    train = np.arange(0, 400, 2)
    fit = memphis.sklearn.memory().cache(fit_transform)
    first, second = fit(CountingScaler(), X[train], None), fit(CountingScaler(), X[train], None)
    assert hashed == [(400, 6), (200,), (200,)]  # then only the indices of each fold
    assert sum(FITS.values()) == 1 and np.array_equal(first[0], second[0])


def test_a_search_over_traced_inputs_hashes_x_once_and_answers_as_over_plain_ones(local_tier, hashed):
    X, y = regression()
    plain = search(scaler_pca_ridge(), PCA_GRID, X, y, None)
    FITS.clear()
    hashed.clear()
    cached = search(scaler_pca_ridge(), PCA_GRID, memphis.array(X), memphis.array(y), memphis.sklearn.memory())
    assert_same_search(cached, plain)
    assert set(FITS.values()) == {1} and len(FITS) == 4 + 10
    assert hashed.count(X.shape) == 1 and all(shape[1:] != X.shape[1:] for shape in hashed if shape != X.shape)


def test_a_plain_fold_is_hashed_once_per_fit_and_the_steps_after_it_not_at_all(local_tier, hashed):
    X, y = regression(n=400, d=6)
    train = np.arange(0, 400, 2)
    pipe = Pipeline(scaler_pca_ridge(), memory=memphis.sklearn.memory())
    first = pipe.fit(X[train], y[train]).predict(X)
    second = clone(pipe).fit(X[train], y[train]).predict(X)  # a fresh fold array, as each search task makes
    assert hashed.count((200, 6)) == 2  # the fold, once per fit; the scaled fold the PCA gets, never
    assert set(FITS.values()) == {1} and np.array_equal(first, second)


def test_pandas_frames_key_by_content_once_per_fit(local_tier, monkeypatch):
    X, y = classification()
    frame = pd.DataFrame(X, columns=list("abcde"))
    hashes = []
    hash_frame = pd.util.hash_pandas_object
    monkeypatch.setattr(pd.util, "hash_pandas_object", lambda *a, **k: hashes.append(1) or hash_frame(*a, **k))
    steps = lambda: [("scale", CountingScaler()), ("pca", CountingPCA(n_components=3)),  # noqa: E731
                     ("logistic", LogisticRegression())]
    pipe = Pipeline(steps(), memory=memphis.sklearn.memory())
    first = pipe.fit(frame, y).predict_proba(frame)
    assert len(hashes) == 1  # the frame, at the first step; the PCA gets the scaler's array
    again = clone(pipe).fit(frame.copy(), y).predict_proba(frame)
    assert np.array_equal(first, again) and set(FITS.values()) == {1}
    renamed = clone(pipe).fit(frame.set_axis(list("vwxyz"), axis=1), y)  # same values, other columns: another key
    assert max(FITS.values()) == 2 and list(renamed.feature_names_in_) == list("vwxyz")
    plain = search(steps(), {"logistic__C": [0.1, 1.0]}, frame, y, None)
    assert_same_search(search(steps(), {"logistic__C": [0.1, 1.0]}, frame, y, memphis.sklearn.memory()), plain)


def test_pandas_output_comes_back_as_frames(local_tier):
    X, y = classification()
    frame = pd.DataFrame(X, columns=list("abcde"))
    make = lambda memory: Pipeline([("scale", CountingScaler()), ("logistic", LogisticRegression())],  # noqa: E731
                                   memory=memory).set_output(transform="pandas")
    plain = make(None).fit(frame, y)
    for _ in range(2):
        cached = make(memphis.sklearn.memory()).fit(frame, y)
        assert np.array_equal(cached.predict_proba(frame), plain.predict_proba(frame))
    assert counters("misses", "hits") == {"misses": 1, "hits": 1}


def test_a_step_that_writes_in_place_gets_the_read_only_xt_and_answers_right(local_tier):
    X, y = regression()
    steps = lambda: [("scale", CountingScaler()), ("in_place", StandardScaler(copy=False)),  # noqa: E731
                     ("ridge", Ridge())]
    plain = Pipeline(steps()).fit(X.copy(), y).predict(X)
    for _ in range(2):  # a miss and a hit hand on the same read-only Xt
        assert np.array_equal(Pipeline(steps(), memory=memphis.sklearn.memory()).fit(X, y).predict(X), plain)
    assert counters("misses", "hits") == {"misses": 2, "hits": 2}


# --- what cannot be reused -------------------------------------------------------------------------

def test_a_transformer_whose_parameters_change_while_fitting_is_not_reused(local_tier, caplog):
    X, y = regression()
    steps = lambda: [("drift", Drifting()), ("ridge", Ridge())]  # noqa: E731
    grid = {"ridge__alpha": [0.1, 1.0]}
    plain = search(steps(), grid, X, y, None)
    fits = sum(FITS.values())
    with caplog.at_level(logging.DEBUG, logger="memphis.sklearn"):
        cached = search(steps(), grid, X, y, memphis.sklearn.memory())
    assert_same_search(cached, plain)
    assert sum(FITS.values()) == 2 * fits  # every fit ran, as without memory
    assert counters("hits", "refused") == {"hits": 0, "refused": fits}
    assert "Drifting.get_params() changed while fitting" in caplog.text


def test_an_unseeded_estimator_that_draws_is_not_reused_and_said_once(local_tier, caplog):
    X, y = regression()
    steps = lambda: [("project", RandomProjection(n_components=3)), ("ridge", Ridge())]  # noqa: E731
    grid = {"ridge__alpha": [0.1, 1.0, 10.0]}
    np.random.seed(0)
    plain = search(steps(), grid, X, y, None)
    fits = sum(FITS.values())
    np.random.seed(0)  # the same draws again: each fit must draw as it would without memory
    with caplog.at_level(logging.INFO, logger="memphis.sklearn"):
        cached = search(steps(), grid, X, y, memphis.sklearn.memory())
    assert_same_search(cached, plain)
    assert sum(FITS.values()) == 2 * fits
    assert counters("hits", "refused") == {"hits": 0, "refused": fits}
    said = [r for r in caplog.records if r.levelno == logging.INFO and "RandomProjection" in r.getMessage()]
    assert len(said) == 1 and "random_state=None" in said[0].getMessage()
    FITS.clear()
    seeded = lambda: [("project", RandomProjection(n_components=3, random_state=7)), ("ridge", Ridge())]  # noqa: E731
    search(seeded(), grid, X, y, memphis.sklearn.memory())
    assert set(FITS.values()) == {1}  # an int random_state is reused


def test_randomized_pca_without_a_seed_is_not_reused(local_tier):
    X, y = regression(n=600, d=40)
    pca = PCA(n_components=3, svd_solver="randomized")
    fit = memphis.sklearn.memory().cache(fit_transform)
    fit(pca, X, None)
    fit(clone(pca), X, None)
    assert counters("hits", "refused") == {"hits": 0, "refused": 2}
    fit(clone(pca).set_params(random_state=0), X, None)
    fit(clone(pca).set_params(random_state=0), X, None)
    assert counters("hits", "misses") == {"hits": 1, "misses": 2 + 1}


@pytest.mark.parametrize("option", [Opaque(), np.random.RandomState(0), {1, 2}], ids=["object", "RandomState", "set"])
def test_a_parameter_without_a_key_is_computed_counted_and_said(local_tier, caplog, option):
    X, y = regression()
    steps = lambda: [("shift", Shifted(option=option)), ("ridge", Ridge())]  # noqa: E731
    plain = search(steps(), {"ridge__alpha": [0.1, 1.0]}, X, y, None)
    fits = sum(FITS.values())
    with caplog.at_level(logging.DEBUG, logger="memphis.sklearn"):
        cached = search(steps(), {"ridge__alpha": [0.1, 1.0]}, X, y, memphis.sklearn.memory())
    assert_same_search(cached, plain)
    assert sum(FITS.values()) == 2 * fits
    assert counters("hits", "refused", "internal_errors") == {"hits": 0, "refused": fits, "internal_errors": 0}
    assert f"Shifted.option: no literal form for {type(option).__name__}" in caplog.text


def test_a_result_that_cannot_be_pickled_is_computed_and_not_held(local_tier, caplog):
    X, y = regression()
    steps = lambda: [("double", FunctionTransformer(lambda X: X * 2.0)), ("ridge", Ridge())]  # noqa: E731
    with caplog.at_level(logging.DEBUG, logger="memphis.sklearn"):
        for _ in range(2):
            cached = Pipeline(steps(), memory=memphis.sklearn.memory()).fit(X, y)
    assert np.array_equal(cached.predict(X), Pipeline(steps()).fit(X, y).predict(X))
    assert counters("hits", "refused", "internal_errors") == {"hits": 0, "refused": 2, "internal_errors": 0}
    assert "its result cannot be held" in caplog.text


def test_a_held_result_whose_signature_does_not_verify_is_never_unpickled(local_tier, monkeypatch):
    X, _ = regression()
    fit = memphis.sklearn.memory().cache(fit_transform)
    first = fit(CountingScaler(), X, None)
    monkeypatch.setattr(memphis.sklearn, "_SECRET", bytes(32))  # as if the held bytes came from elsewhere
    unpickled = []
    loads = pickle.loads
    monkeypatch.setattr(pickle, "loads", lambda *a, **k: unpickled.append(1) or loads(*a, **k))
    again = fit(CountingScaler(), X, None)
    assert unpickled == [] and np.array_equal(again[0], first[0]) and again[1].mean_.tolist() == first[1].mean_.tolist()
    assert sum(FITS.values()) == 2 and counters("hits", "internal_errors") == {"hits": 1, "internal_errors": 1}


def test_a_transformer_returning_its_input_leaves_the_callers_array_writeable(local_tier):
    X, y = regression()
    steps = lambda: [("same", FunctionTransformer()), ("ridge", Ridge())]  # noqa: E731
    first = Pipeline(steps(), memory=memphis.sklearn.memory()).fit(X, y).predict(X)
    assert X.flags.writeable
    X[0, 0] += 1.0  # a change in place is a new key, not a stale hit
    changed = Pipeline(steps(), memory=memphis.sklearn.memory()).fit(X, y).predict(X)
    assert np.array_equal(changed, Pipeline(steps()).fit(X, y).predict(X)) and not np.array_equal(changed, first)
    assert counters("misses", "hits") == {"misses": 2, "hits": 0}


def test_a_class_redefined_with_other_code_keys_anew(local_tier, monkeypatch):
    X, _ = regression()
    fit = memphis.sklearn.memory().cache(fit_transform)
    for factor in (2.0, 3.0):  # as a notebook cell run again after an edit: same module, same name
        namespace = {}
        exec(f"class Scaled(TransformerMixin, BaseEstimator):\n"
             f"    def fit(self, X, y=None):\n        return self\n"
             f"    def transform(self, X):\n        return np.asarray(X) * {factor}\n", dict(globals()), namespace)
        monkeypatch.setattr(sys.modules[__name__], "Scaled", namespace["Scaled"], raising=False)  # so it pickles
        assert np.array_equal(fit(namespace["Scaled"](), X, None)[0], X * factor)
    assert counters("misses", "hits", "refused") == {"misses": 2, "hits": 0, "refused": 0}


# --- the memory contract ---------------------------------------------------------------------------

def test_it_is_a_memory_as_scikit_learn_checks_and_clones_it():
    memory = memphis.sklearn.memory()
    assert check_memory(memory) is memory and memory.location is not None
    assert clone(Pipeline([("scale", StandardScaler())], memory=memory)).memory is memory
    assert copy.deepcopy(memory) is memory and copy.copy(memory) is memory
    assert isinstance(pickle.loads(pickle.dumps(memory)), memphis.sklearn.Memory)
    with pytest.raises(ValueError, match="no argument named nope"):
        memory.cache(fit_transform, ignore=["nope"])
    with pytest.raises(TypeError, match="expected a list of argument names"):
        memory.cache(fit_transform, ignore="y")


SUMS = []


@memphis.sklearn.memory().cache(ignore=["verbose"])
def column_sums(X, verbose=False):
    SUMS.append(verbose)  # a global: a closure's values would be part of the key
    return X.sum(axis=0)


def test_ignored_arguments_are_left_out_of_the_key_and_the_decorator_form_works(local_tier):
    SUMS.clear()
    X, _ = regression()
    assert np.array_equal(column_sums(X), column_sums(X, verbose=True)) and SUMS == [False]
    assert np.array_equal(column_sums(X * 2), 2 * column_sums(X)) and SUMS == [False, False]
    with pytest.raises(TypeError):
        column_sums(X, 1, 2)  # the caller's mistake reaches the caller


def test_process_workers_answer_as_without_memory(local_tier):
    X, y = regression()
    grid = {"pca__n_components": [2, 3]}
    plain = search(scaler_pca_ridge(), grid, X, y, None)
    assert_same_search(search(scaler_pca_ridge(), grid, X, y, memphis.sklearn.memory(), n_jobs=2), plain)
    # The workers cached in their own processes: this one fitted only the refit's two steps.
    assert counters("misses", "hits") == {"misses": 2, "hits": 0}


def test_imbalanced_learns_pipeline_resamples_once_per_fold(local_tier):
    imblearn_pipeline = pytest.importorskip("imblearn.pipeline")
    from imblearn.under_sampling import RandomUnderSampler

    X, y = classification()
    steps = lambda: [("under", RandomUnderSampler(random_state=0)),  # noqa: E731
                     ("poly", CountingPoly(include_bias=False)), ("select", CountingSelect(f_classif)),
                     ("logistic", LogisticRegression())]
    grid = {"select__k": [3, 6], "logistic__C": [0.1, 1.0]}
    plain = GridSearchCV(imblearn_pipeline.Pipeline(steps()), grid, cv=3).fit(X, y)
    FITS.clear()
    cached = GridSearchCV(imblearn_pipeline.Pipeline(steps(), memory=memphis.sklearn.memory()), grid, cv=3).fit(X, y)
    assert_same_search(cached, plain)
    assert set(FITS.values()) == {1}
    assert collections.Counter(n for n, _, _ in FITS) == {"CountingPoly": 3 + 1, "CountingSelect": 2 * 3 + 1}
    resampled = ml.entries().query("opcode.str.startswith('sklearn:_fit_resample_one')")
    assert len(resampled) == 3 + 1 and resampled["misses"].sum() == 4 and resampled["hits"].sum() == 4 * 3 - 3
