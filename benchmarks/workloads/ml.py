"""Driver-side ML workloads on numpy arrays, written the way a user writes them: each trial calls
the whole pipeline again (fit per λ, PCA per K, base models per weight candidate), so any reuse
comes from the mode, not from hand-hoisted code. benchmarks/systemds/*.dml are the same workloads
in DML, with the same shapes and seeds.

Every workload is ``workload(X, y, wrap, cached) -> list of arrays``: ``wrap`` turns an input into
the array type of the mode (identity, ``memphis.array``); ``cached`` wraps the expensive helper
functions (identity, or ``joblib.Memory.cache``).
"""
import numpy as np

LAMBDAS = np.logspace(-3, 3, 10)
COLUMNS, BASE_COLUMNS, SUBSET_COLUMNS, SUBSETS, FOLDS = 200, 150, 10, 10, 4
PCA_KS = (10, 20, 30, 40, 60, 80, 100, 150)
# Base models of the ensemble: (first column, last column + 1, λ), over an 80/20 train/test split.
ENSEMBLE_BASES = ((0, 100, 1.0), (50, 150, 10.0), (100, 200, 0.1), (0, 200, 1.0))
ENSEMBLE_CANDIDATES = 12


def gram(X):
    return X.T @ X


def xty(X, y):
    return X.T @ y


def eigen(C):
    return np.linalg.eigh(C)


def ridge(X, y, lam, cached):
    return np.linalg.solve(cached(gram)(X) + lam * np.eye(X.shape[1]), cached(xty)(X, y))


def grid(X, y, wrap, cached):
    X, y = wrap(X), wrap(y)
    return [ridge(X, y, lam, cached) for lam in LAMBDAS]


def column_subsets(X, y, wrap, cached):
    """150 base columns plus 10 of the other 50: each subset's Gram matrix can be cut from XᵀX."""
    X, y = wrap(X), wrap(y)
    picks = np.random.default_rng(1).permuted(np.tile(np.arange(BASE_COLUMNS, COLUMNS), (SUBSETS, 1)), axis=1)
    subsets = [list(range(BASE_COLUMNS)) + sorted(p[:SUBSET_COLUMNS].tolist()) for p in picks]
    return [ridge(X[:, columns], y, 1.0, cached) for columns in subsets]


def cross_validation(X, y, wrap, cached):
    """4 folds × 10 λ; a fold's training rows are the other folds stacked (per-fold Gram sums)."""
    folds = [wrap(part) for part in np.array_split(X, FOLDS)]
    targets = [wrap(part) for part in np.array_split(y, FOLDS)]
    models = []
    for k in range(FOLDS):
        train = np.vstack([f for i, f in enumerate(folds) if i != k])
        target = np.concatenate([t for i, t in enumerate(targets) if i != k])
        models += [ridge(train, target, lam, cached) for lam in LAMBDAS]
    return models


def pca_classifier(X, labels, K, cached):
    """PCA to K components (eigendecomposition of the covariance), then a ridge classifier on them;
    returns the classifier's weights and its training accuracy."""
    centered = X - X.mean(axis=0)
    _, vectors = cached(eigen)(cached(gram)(centered) / (X.shape[0] - 1))
    Z = centered @ vectors[:, ::-1][:, :K]  # eigh sorts ascending: the top K are the last K
    w = ridge(Z, labels, 1.0, cached)
    return w, np.mean(np.sign(Z @ w) == labels)


def pca_sweep(X, y, wrap, cached):
    X, labels = wrap(X), wrap(np.sign(y))
    return [part for K in PCA_KS for part in pca_classifier(X, labels, K, cached)]


def ensemble_score(Xtrain, ytrain, Xtest, ytest, weights, cached):
    """Mean squared error on the test rows of the base models' predictions weighted by ``weights``."""
    predictions = [Xtest[:, a:b] @ ridge(Xtrain[:, a:b], ytrain, lam, cached) for a, b, lam in ENSEMBLE_BASES]
    combined = sum(w * p for w, p in zip(weights, predictions))
    return np.mean((combined - ytest) ** 2)


def ensemble_search(X, y, wrap, cached):
    """A search over candidate weights of a weighted ensemble, each candidate scored from scratch."""
    split = int(0.8 * X.shape[0])
    Xtrain, ytrain, Xtest, ytest = wrap(X[:split]), wrap(y[:split]), wrap(X[split:]), wrap(y[split:])
    candidates = np.random.default_rng(3).dirichlet(np.ones(len(ENSEMBLE_BASES)), ENSEMBLE_CANDIDATES)
    return [ensemble_score(Xtrain, ytrain, Xtest, ytest, weights.tolist(), cached) for weights in candidates]


def single_fit(X, y, wrap, cached):
    return [ridge(wrap(X), wrap(y), 1.0, cached)]


WORKLOADS = {"grid_10_lambda": grid, "column_subsets": column_subsets, "cv_4fold_10_lambda": cross_validation,
             "pca_k_sweep": pca_sweep, "ensemble_weights": ensemble_search, "no_reuse_overhead": single_fit}


def data(rows, seed):
    """``rows``×200 standard normal features and a linear target with noise."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((rows, COLUMNS))
    return X, X @ rng.standard_normal(COLUMNS) + rng.standard_normal(rows)
