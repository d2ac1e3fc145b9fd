"""Driver-side ML workloads on numpy arrays, in three versions each.

``WORKLOADS``: written the way a user writes them: each trial calls the whole pipeline again (fit
per λ, PCA per K, base models per weight candidate), so any reuse comes from the mode, not from
hand-hoisted code. Each is ``workload(X, y, wrap, cached) -> list of arrays``: ``wrap`` turns an
input into the array type of the mode (identity, ``memphis.array``); ``cached`` wraps the
expensive helper functions (identity, or the ``joblib.Memory``-decorated twin of each).

``HOISTED``: the best a competent numpy user writes by hand, ``hoisted(X, y) -> the same list``:
every shared product computed once and sliced or combined per trial.

``SKLEARN``: what a scikit-learn user reaches for, ``peer(X, y, memory) -> the same list``
(``memory``: a ``joblib.Memory`` for ``Pipeline(memory=...)``), only where it computes the same
answer (same λ, folds and ``fit_intercept=False``). Left out, because sklearn has no tool that
computes these answers: ``RidgeCV`` (its efficient leave-one-out/GCV, or ``cv=KFold``) returns
the best λ's model only, not every λ's model the grid and CV workloads answer; ``GridSearchCV``
returns scores only, so it stands in for the ensemble search alone (whose answer is a score per
candidate), and the column-subset and PCA peers fit the same cached Pipeline per candidate
themselves (the fits GridSearchCV would run, keeping the weights the answer holds); the single
fit has no sklearn twin worth timing.

benchmarks/systemds/<workload>.dml are the same workloads in DML, with the same shapes (run by
benchmarks/systemds/bench.dml).
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


def subset_columns():
    """150 base columns plus 10 of the other 50, for each of the 10 subsets."""
    picks = np.random.default_rng(1).permuted(np.tile(np.arange(BASE_COLUMNS, COLUMNS), (SUBSETS, 1)), axis=1)
    return [list(range(BASE_COLUMNS)) + sorted(p[:SUBSET_COLUMNS].tolist()) for p in picks]


def column_subsets(X, y, wrap, cached):
    """Each subset's Gram matrix can be cut from XᵀX."""
    X, y = wrap(X), wrap(y)
    return [ridge(X[:, columns], y, 1.0, cached) for columns in subset_columns()]


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


def top_components(vectors, K):
    """The eigenvectors of the K largest eigenvalues (eigh sorts ascending: the last K), each signed
    so that its largest entry is positive: eigenvectors are defined up to sign, and this is
    scikit-learn's PCA convention (svd_flip on the components), so the answers compare across both."""
    top = vectors[:, ::-1][:, :K]
    return top * np.sign(top.max(axis=0) + top.min(axis=0))  # > 0 where the largest entry is positive


def pca_classifier(X, labels, K, cached):
    """PCA to K components (eigendecomposition of the covariance), then a ridge classifier on them;
    returns the classifier's weights and its training accuracy."""
    centered = X - X.mean(axis=0)
    _, vectors = cached(eigen)(cached(gram)(centered) / (X.shape[0] - 1))
    Z = centered @ top_components(vectors, K)
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


def ensemble_candidates():
    return np.random.default_rng(3).dirichlet(np.ones(len(ENSEMBLE_BASES)), ENSEMBLE_CANDIDATES)


def ensemble_search(X, y, wrap, cached):
    """A search over candidate weights of a weighted ensemble, each candidate scored from scratch."""
    split = int(0.8 * X.shape[0])
    Xtrain, ytrain, Xtest, ytest = wrap(X[:split]), wrap(y[:split]), wrap(X[split:]), wrap(y[split:])
    return [ensemble_score(Xtrain, ytrain, Xtest, ytest, weights.tolist(), cached) for weights in ensemble_candidates()]


def single_fit(X, y, wrap, cached):
    return [ridge(wrap(X), wrap(y), 1.0, cached)]


# --- hoisted by hand ----------------------------------------------------------------------------

def solve_ridge(G, b, lam):
    """The ridge fit from its Gram matrix G = XᵀX and b = Xᵀy."""
    return np.linalg.solve(G + lam * np.eye(G.shape[0]), b)


def grid_hoisted(X, y):
    G, b = gram(X), xty(X, y)
    return [solve_ridge(G, b, lam) for lam in LAMBDAS]


def column_subsets_hoisted(X, y):
    G, b = gram(X), xty(X, y)
    return [solve_ridge(G[np.ix_(columns, columns)], b[columns], 1.0) for columns in subset_columns()]


def cross_validation_hoisted(X, y):
    """One Gram matrix (and Xᵀy) per fold; a training set's is their sum minus the held-out fold's."""
    grams = [gram(part) for part in np.array_split(X, FOLDS)]
    xtys = [xty(part, target) for part, target in zip(np.array_split(X, FOLDS), np.array_split(y, FOLDS))]
    G, b = sum(grams), sum(xtys)
    return [solve_ridge(G - grams[k], b - xtys[k], lam) for k in range(FOLDS) for lam in LAMBDAS]


def pca_sweep_hoisted(X, y):
    """One eigendecomposition, one projection onto the largest K; a smaller K's Gram matrix is a
    corner of that projection's."""
    labels = np.sign(y)
    centered = X - X.mean(axis=0)
    _, vectors = eigen(gram(centered) / (X.shape[0] - 1))
    Z = centered @ top_components(vectors, max(PCA_KS))
    G, b = gram(Z), xty(Z, labels)
    answer = []
    for K in PCA_KS:
        w = solve_ridge(G[:K, :K], b[:K], 1.0)
        answer += [w, np.mean(np.sign(Z[:, :K] @ w) == labels)]
    return answer


def ensemble_search_hoisted(X, y):
    """Each base model's test predictions once; a candidate only weighs them."""
    split = int(0.8 * X.shape[0])
    Xtrain, ytrain, Xtest, ytest = X[:split], y[:split], X[split:], y[split:]
    predictions = [Xtest[:, a:b] @ solve_ridge(gram(Xtrain[:, a:b]), xty(Xtrain[:, a:b], ytrain), lam)
                   for a, b, lam in ENSEMBLE_BASES]
    return [np.mean((sum(w * p for w, p in zip(weights.tolist(), predictions)) - ytest) ** 2)
            for weights in ensemble_candidates()]


def single_fit_hoisted(X, y):
    return [solve_ridge(gram(X), xty(X, y), 1.0)]


# --- scikit-learn -------------------------------------------------------------------------------

def every_lambda(X, y):
    """Ridge with one λ per copy of the target: sklearn's way to fit every λ from one XᵀX (its
    Cholesky solver computes XᵀX once and solves per target)."""
    from sklearn.linear_model import Ridge

    return Ridge(alpha=LAMBDAS, fit_intercept=False, solver="cholesky").fit(X, np.tile(y[:, None], len(LAMBDAS)))


def grid_sklearn(X, y, memory):
    return list(every_lambda(X, y).coef_)


def column_subsets_sklearn(X, y, memory):
    """A cached Pipeline per subset: a column-selecting transformer, then Ridge."""
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import Ridge
    from sklearn.pipeline import Pipeline

    return [Pipeline([("select", ColumnTransformer([("columns", "passthrough", columns)])),
                      ("ridge", Ridge(alpha=1.0, fit_intercept=False, solver="cholesky"))],
                     memory=memory).fit(X, y)[-1].coef_ for columns in subset_columns()]


def cross_validation_sklearn(X, y, memory):
    """cross_validate over KFold(4) (unshuffled: the same contiguous folds), every λ per fold at once."""
    from sklearn.linear_model import Ridge
    from sklearn.model_selection import KFold, cross_validate

    Y = np.tile(y[:, None], len(LAMBDAS))
    folds = cross_validate(Ridge(alpha=LAMBDAS, fit_intercept=False, solver="cholesky"), X, Y, cv=KFold(FOLDS),
                           return_estimator=True)["estimator"]
    return [w for model in folds for w in model.coef_]


def pca_sweep_sklearn(X, y, memory):
    """A cached Pipeline PCA(K) → RidgeClassifier per K; PCA's covariance_eigh solver is the same
    eigendecomposition of the covariance (and what its 'auto' picks for data this tall)."""
    from sklearn.decomposition import PCA
    from sklearn.linear_model import RidgeClassifier
    from sklearn.pipeline import Pipeline

    labels = np.sign(y)
    answer = []
    for K in PCA_KS:
        pipeline = Pipeline([("pca", PCA(K, svd_solver="covariance_eigh")),
                             ("classifier", RidgeClassifier(alpha=1.0, fit_intercept=False, solver="cholesky"))],
                            memory=memory).fit(X, labels)
        answer += [pipeline[-1].coef_.ravel(), pipeline.score(X, labels)]
    return answer


def ensemble_search_sklearn(X, y, memory):
    """GridSearchCV over VotingRegressor's weights, on the one 80/20 split; each base model a cached
    Pipeline (column selection → Ridge)."""
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import VotingRegressor
    from sklearn.linear_model import Ridge
    from sklearn.model_selection import GridSearchCV
    from sklearn.pipeline import Pipeline

    split = int(0.8 * X.shape[0])
    bases = [(f"base{i}", Pipeline([("select", ColumnTransformer([("columns", "passthrough", list(range(a, b)))])),
                                    ("ridge", Ridge(alpha=lam, fit_intercept=False, solver="cholesky"))],
                                   memory=memory)) for i, (a, b, lam) in enumerate(ENSEMBLE_BASES)]
    search = GridSearchCV(VotingRegressor(bases), {"weights": [w.tolist() for w in ensemble_candidates()]},
                          scoring="neg_mean_squared_error", cv=[(np.arange(split), np.arange(split, X.shape[0]))],
                          refit=False).fit(X, y)
    return list(-search.cv_results_["mean_test_score"])


WORKLOADS = {"grid_10_lambda": grid, "column_subsets": column_subsets, "cv_4fold_10_lambda": cross_validation,
             "pca_k_sweep": pca_sweep, "ensemble_weights": ensemble_search, "no_reuse_overhead": single_fit}
HOISTED = {"grid_10_lambda": grid_hoisted, "column_subsets": column_subsets_hoisted,
           "cv_4fold_10_lambda": cross_validation_hoisted, "pca_k_sweep": pca_sweep_hoisted,
           "ensemble_weights": ensemble_search_hoisted, "no_reuse_overhead": single_fit_hoisted}
SKLEARN = {"grid_10_lambda": grid_sklearn, "column_subsets": column_subsets_sklearn,
           "cv_4fold_10_lambda": cross_validation_sklearn, "pca_k_sweep": pca_sweep_sklearn,
           "ensemble_weights": ensemble_search_sklearn}


def data(rows, seed):
    """``rows``×200 standard normal features and a linear target with noise."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((rows, COLUMNS))
    return X, X @ rng.standard_normal(COLUMNS) + rng.standard_normal(rows)
