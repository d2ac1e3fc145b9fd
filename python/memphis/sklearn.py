"""scikit-learn's ``memory=``: each step of a Pipeline fitted once per (parameters, data), across a
whole search, held in memphis's host tier.

``Pipeline(memory=memphis.sklearn.memory())`` (imbalanced-learn's Pipeline alike) caches what
``Pipeline._fit`` hands its memory, ``(transformer, X, y, …) -> (Xt, fitted transformer)``, by
lineage: the function (module, name, a hash of its code), the unfitted estimator (its class, with a
hash of the code of its methods, and its ``get_params()``, nested estimators included) and the
lineage of the data:

- an ``Xt`` this memory handed out (the input of the next step) by the call that made it: never hashed;
- a traced array (:func:`memphis.array`) by its lineage: GridSearchCV's fold ``X[train]`` of a traced
  ``X`` is traced too, keyed by ``X``'s hash (computed once) and the hash of the fold's indices;
- a plain array, a pandas frame or series by content (xxh3 of shape, dtype and bytes; pandas: values,
  index, columns and dtypes), once per call: a fold of a plain ``X`` is a fresh array in each task;
- scalars, strings, functions, lists and dicts of these by value.

Values live in the host tier (its budget, cost/size eviction and spill to the disk tier, counted in
:func:`memphis.local.stats`): the top-level arrays of a result as arrays, the rest (the fitted
estimator) as a pickle signed with a key that lives only in this process, so that only bytes this
process pickled are ever unpickled, even when they come back from a spill file. Every hit hands out
a fresh copy of the fitted estimator; arrays are read-only and shared.

A call is computed and not held (counted as ``refused``, its reason logged at debug level on
``memphis.sklearn``) when an argument has no key (an object that is neither data, an estimator, a
function nor a plain value), when ``get_params()`` changes while fitting, when an estimator with
``random_state=None`` drew from numpy's global random state while fitting (said once per class at
INFO level; one that did not draw, e.g. ``PCA()`` with an exact solver, is reused), or when the
result cannot be pickled. An error of memphis's own is counted in ``internal_errors``, logged, and
the call computed as without a memory; the estimator's own errors reach the caller unchanged.

Threads (GridSearchCV with joblib's threading backend) share one cache: a second thread asking for
a step being fitted waits for it. Process workers (loky, the default backend with ``n_jobs``) each
get their own copy of the memory, on their own process's host tier: nothing is shared between them
or with the parent, and each worker holds up to its own budget.

Examples
--------
>>> import numpy as np, memphis.sklearn
>>> from sklearn.decomposition import PCA
>>> from sklearn.linear_model import Ridge
>>> from sklearn.model_selection import GridSearchCV
>>> from sklearn.pipeline import Pipeline
>>> from sklearn.preprocessing import StandardScaler
>>> X = np.random.default_rng(0).standard_normal((300, 8))
>>> y = X @ np.arange(8.0)
>>> pipe = Pipeline([("scale", StandardScaler()), ("pca", PCA()), ("ridge", Ridge())],
...                 memory=memphis.sklearn.memory())
>>> search = GridSearchCV(pipe, {"pca__n_components": [2, 4], "ridge__alpha": [0.1, 1.0, 10.0]}, cv=3)
>>> search.fit(X, y).best_params_  # the scaler fitted 3 + 1 times, not 18 + 1
{'pca__n_components': 4, 'ridge__alpha': 10.0}
"""
import functools
import hashlib
import hmac
import inspect
import logging
import os
import pickle
import threading
import weakref

import numpy as np

from memphis.tiers.runtime import Runtime, default
from memphis.tracing.lineage import LineageItem, Untraceable, code_digest, encode, function_identity, literal

log = logging.getLogger("memphis.sklearn")

# The key of the signatures on pickled parts: it never leaves this process, so a spill file (or
# anything else) that this process did not write cannot pass as one of its pickles.
_SECRET = os.urandom(32)
_MAC_BYTES = 32


class Memory:
    """An object for scikit-learn's ``memory=`` parameter, caching in memphis's host tier.

    It has what ``sklearn.utils.validation.check_memory`` asks of a memory: ``cache(func)``; and a
    ``location`` that is not None, so that Pipeline clones each step before fitting it, as it does
    for ``joblib.Memory``. Copies (scikit-learn's ``clone`` deep-copies it) are the memory itself;
    in another process it unpickles as a memory of that process's cache.

    Examples
    --------
    >>> import memphis.sklearn
    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn.preprocessing import StandardScaler
    >>> from sklearn.linear_model import LogisticRegression
    >>> pipe = make_pipeline(StandardScaler(), LogisticRegression(), memory=memphis.sklearn.memory())
    """

    location = "memphis"

    def __init__(self, runtime: Runtime = default):
        self.runtime = runtime  # the cache it keeps results in

    def cache(self, func=None, ignore=None):
        """``func`` cached by the lineage of its arguments, those named in ``ignore`` left out of the
        key (as ``joblib.Memory.cache``); without ``func``, a decorator.

        Examples
        --------
        >>> from memphis.sklearn import Memory
        >>> @Memory().cache(ignore=["verbose"])
        ... def total(X, verbose=False):
        ...     return X.sum(axis=0)
        """
        if func is None:
            return functools.partial(self.cache, ignore=ignore)
        if isinstance(ignore, str) or not all(isinstance(name, str) for name in ignore or ()):
            raise TypeError(f"memphis.sklearn: ignore={ignore!r}: expected a list of argument names")
        signature = inspect.signature(func)
        unknown = sorted(set(ignore or ()) - set(signature.parameters))
        if unknown:
            raise ValueError(f"memphis.sklearn: ignore={list(ignore)!r}: {func.__qualname__} has no argument "
                             f"named {', '.join(unknown)}")

        @functools.wraps(func)
        def cached(*args, **kwargs):
            return _call(func, signature, frozenset(ignore or ()), args, kwargs, self.runtime)

        return cached

    def __deepcopy__(self, memo):
        return self

    def __copy__(self):
        return self

    def __reduce__(self):
        return Memory, ()

    def __repr__(self):
        return "memphis.sklearn.Memory()"


memory = Memory  # the name memphis's public contract gives it: ``memphis.sklearn.memory()``


# --- one call --------------------------------------------------------------------------------------

class _NotHeld(Exception):
    """Raised out of a computation whose result is right but must not be held: the tier drops the
    entry, and the caller gets ``result``."""

    def __init__(self, result, why: str):
        super().__init__(why)
        self.result = result


def _call(func, signature, ignore, args, kwargs, runtime: Runtime):
    tier = runtime.host()
    results = results_of(runtime)
    name = func.__qualname__
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:  # the caller's mistake: the function itself says what it is
        return func(*args, **kwargs)
    try:
        key = _Key(func, bound, ignore, results)
    except Untraceable as why:
        tier.count("refused")
        log.debug("refused %s: %s", name, why)
        return func(*args, **kwargs)
    except Exception as error:  # a bug of memphis's (or a broken get_params): fit as without a memory
        tier.count("internal_errors")
        log.warning("memphis.sklearn: cannot key a call of %s (%s: %s); computed without reuse", name,
                    type(error).__name__, error)
        return func(*args, **kwargs)

    def compute():
        before = _global_random_state() if key.unseeded else None
        result = func(*args, **kwargs)  # the estimator's own errors reach the caller
        why = key.not_reusable(before)
        if why is None:
            try:
                return _held(result, key.arrays)
            except Exception as error:
                why = f"its result cannot be held ({type(error).__name__}: {error})"
        raise _NotHeld(result, why)

    try:
        value = tier.get_or_compute(key.item.key, compute, item=key.item, opcode=f"sklearn:{name}({key.names})")
    except _NotHeld as not_held:
        tier.count("refused")
        log.debug("not held %s(%s): %s", name, key.names, not_held)
        return not_held.result
    try:
        return _handed_out(value, key.item, results)
    except Exception as error:  # a signature that does not verify, a pickle that does not load
        tier.count("internal_errors")
        log.warning("memphis.sklearn: cannot hand out the cached result of %s(%s) (%s: %s); computed anew",
                    name, key.names, type(error).__name__, error)
        return func(*args, **kwargs)


def _global_random_state():
    """Where numpy's global random state stands: what ``random_state=None`` draws from."""
    _, keys, position, has_gauss, gauss = np.random.get_state()
    return keys.tobytes(), position, has_gauss, gauss


_said_unseeded = set()  # estimator classes whose irreproducible fits were logged once


class _Key:
    """The lineage of one call: ``item`` (its key), ``names`` of the estimators in it, ``unseeded``
    (those with ``random_state=None``) and ``arrays`` (the data arguments' arrays)."""

    def __init__(self, func, bound, ignore, results: "HandedOut"):
        self._results = results  # the arrays handed out before, keyed by lineage, not by content
        bound.apply_defaults()  # an argument left at its default keys as one given
        self.unseeded, self.estimators = set(), []  # estimators: (estimator, its item) among the arguments
        inputs, literals = [], []
        identity = function_identity(func, inputs)
        for name, value in bound.arguments.items():
            if name not in ignore:
                literals.append((name, self._value(value, inputs)))
                if _is_estimator(value):
                    self.estimators.append((value, inputs[-1]))
        self.item = LineageItem("sklearn", inputs=inputs, literals=(identity, tuple(literals)))
        self.names = ",".join(type(e).__name__ for e, _ in self.estimators)
        # What a result's arrays may alias (a transformer that returns its input).
        self.arrays = [np.asarray(v) for v in bound.arguments.values()
                       if isinstance(v, np.ndarray) or isinstance(getattr(v, "lineage", None), LineageItem)]

    def _value(self, value, inputs):
        """The literal form of ``value``, its estimators and data appended to ``inputs`` as items."""
        if _is_estimator(value):
            inputs.append(self._estimator(value))
            return ("input", len(inputs) - 1)
        if isinstance(value, Memory):  # a nested Pipeline's memory: where results are kept, not what they are
            return ("memory",)
        if isinstance(value, np.ndarray):
            known = self._results.lineage_of(value)
            if known is not None:
                inputs.append(known)
                return ("input", len(inputs) - 1)
        if type(value) in (tuple, list):
            return (type(value).__name__, tuple(self._value(v, inputs) for v in value))
        if isinstance(value, dict):
            pairs = sorted(((literal(k), v) for k, v in value.items()), key=lambda kv: repr(kv[0]))
            return ("dict", tuple((k, self._value(v, inputs)) for k, v in pairs))
        return encode(value, inputs)

    def _estimator(self, estimator) -> LineageItem:
        """An estimator as an item: its class and its parameters (nested estimators as items of their own)."""
        params = estimator.get_params(deep=False)
        if "random_state" in params and params["random_state"] is None:
            self.unseeded.add(type(estimator).__name__)
        inputs, literals = [], []
        for name in sorted(params):
            try:
                literals.append((name, self._value(params[name], inputs)))
            except Untraceable as why:
                raise Untraceable(f"{type(estimator).__name__}.{name}: {why}") from None
        return LineageItem("estimator", inputs=inputs, literals=(_class_identity(type(estimator)), tuple(literals)))

    def not_reusable(self, random_state_before):
        """Why the call just made must not be reused, or None."""
        if random_state_before is not None and _global_random_state() != random_state_before:
            classes = sorted(self.unseeded)
            first = [c for c in classes if c not in _said_unseeded]
            _said_unseeded.update(first)
            if first:
                log.info("memphis.sklearn: %s with random_state=None drew from numpy's global random state while "
                         "fitting: not reproducible, so not reused (give it an int random_state to reuse it)",
                         ", ".join(first))
            return f"{', '.join(classes)} with random_state=None drew from numpy's global random state"
        for estimator, item in self.estimators:
            try:
                same = self._estimator(estimator) == item
            except Exception:  # a parameter that fitting made unkeyable has changed too
                same = False
            if not same:
                return f"{type(estimator).__name__}.get_params() changed while fitting"
        return None


def _is_estimator(value) -> bool:
    return hasattr(value, "get_params") and not isinstance(value, type)


_class_identities = weakref.WeakKeyDictionary()


def _class_identity(cls) -> tuple:
    """A class as a literal: module, qualified name, and a hash of the code of every method along
    its MRO (unwrapped from decorators), so that a class redefined in a notebook keys anew."""
    known = _class_identities.get(cls)
    if known is None:
        h = hashlib.blake2b(digest_size=16)
        for klass in cls.__mro__[:-1]:  # all but object
            for name, member in sorted(vars(klass).items()):
                # class and static methods hold their function in __func__, properties in fget
                member = getattr(member, "__func__", getattr(member, "fget", member))
                code = getattr(inspect.unwrap(member), "__code__", None) if callable(member) else None
                if code is not None:
                    h.update(f"{klass.__qualname__}.{name}:{code_digest(code)};".encode())
        known = _class_identities[cls] = ("class", cls.__module__, cls.__qualname__, h.hexdigest())
    return known


# --- what the tier holds ---------------------------------------------------------------------------

def _held(result, arguments) -> tuple:
    """What the host tier holds for ``result``: a signed pickle of all but its top-level arrays, then those
    arrays (so the value is measured, and spilled as ``.npz``, by the tier). An array that shares memory
    with an argument is copied, so that freezing it freezes no array of the caller's."""
    parts = result if type(result) is tuple else (result,)
    positions = [i for i, p in enumerate(parts) if type(p) is np.ndarray and not p.dtype.hasobject]
    arrays = [parts[i].copy() if any(np.may_share_memory(parts[i], a) for a in arguments) else parts[i]
              for i in positions]
    rest = tuple(None if i in positions else p for i, p in enumerate(parts))
    blob = pickle.dumps((type(result) is tuple, rest, positions), protocol=pickle.HIGHEST_PROTOCOL)
    mac = hashlib.blake2b(blob, key=_SECRET, digest_size=_MAC_BYTES).digest()
    return (np.frombuffer(mac + blob, dtype=np.uint8), *arrays)


def _handed_out(value, item: LineageItem, results: "HandedOut"):
    """The result a held ``value`` stands for, its estimators unpickled afresh; its arrays are
    remembered as outputs of ``item``, so the next step keys them without hashing."""
    signed = value[0].tobytes()
    mac, blob = signed[:_MAC_BYTES], signed[_MAC_BYTES:]
    if not hmac.compare_digest(mac, hashlib.blake2b(blob, key=_SECRET, digest_size=_MAC_BYTES).digest()):
        raise ValueError("the signature of the held result does not verify")
    is_tuple, rest, positions = pickle.loads(blob)
    parts = list(rest)
    for position, array in zip(positions, value[1:]):
        parts[position] = array
        results.remember(array, LineageItem("output", inputs=(item.cut(),), literals=(literal(position),)))
    return tuple(parts) if is_tuple else parts[0]


class HandedOut:
    """The arrays the memories of one Runtime handed out, with their lineage (its part
    "sklearn results"), while they live: id -> (weak reference, shape, strides, item). They are
    read-only, with read-only bases (the tier froze them), so their bytes cannot change."""

    def __init__(self):
        self._lock = threading.Lock()
        self._arrays = {}

    def remember(self, array, item: LineageItem):
        oid = id(array)

        def forget(ref):
            with self._lock:
                if self._arrays.get(oid, (None,))[0] is ref:
                    del self._arrays[oid]

        with self._lock:
            self._arrays[oid] = (weakref.ref(array, forget), array.shape, array.strides, item)

    def lineage_of(self, array):
        """The item of ``array`` when it was handed out (and still is the same view), else None."""
        with self._lock:
            known = self._arrays.get(id(array))
        if known is not None and known[0]() is array and (array.shape, array.strides) == known[1:3]:
            return known[3]
        return None

    def clear(self):
        with self._lock:
            self._arrays.clear()


def results_of(runtime: Runtime) -> HandedOut:
    """The arrays the memories of ``runtime`` handed out."""
    return runtime.part("sklearn results", HandedOut)
