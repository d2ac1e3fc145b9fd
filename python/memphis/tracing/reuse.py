"""Multi-level reuse: a whole deterministic function cached by its identity and its arguments' lineage."""
import functools
import inspect
import logging

from memphis.backends import numpy_backend
from memphis.tiers.runtime import default
from memphis.tracing.array import TracedArray
from memphis.tracing.lineage import LineageItem, Untraceable, encode, function_identity, literal

log = logging.getLogger("memphis.local")


def _storable(result):
    """The result with traced arrays unwrapped: the tier holds plain values."""
    if isinstance(result, TracedArray):
        return result.numpy()
    if type(result) in (tuple, list):
        return type(result)(_storable(r) for r in result)
    return result


def _traced(value, item):
    """Arrays of a result (itself, or the elements of a tuple/list) as traced arrays of the call."""
    if isinstance(value, numpy_backend.ARRAY_TYPES):
        return TracedArray(value, item)
    if type(value) in (tuple, list):
        return type(value)(_traced(v, LineageItem("output", inputs=(item,), literals=(literal(i),)))
                           for i, v in enumerate(value))
    return value


def reuse(function=None, *, version=None):
    """Caches a deterministic function by its identity and the lineage of its arguments.

    The identity is the module, the qualified name, a hash of the code and constants (nested
    functions included), the values its closure holds, and ``version`` (bump it when something the
    code reads besides its arguments changes, e.g. a global). Arguments may be traced arrays, numpy
    arrays (hashed by content), pandas and Arrow data, Spark DataFrames (by their lineage key),
    scalars, strings, None, and tuples, lists and dicts of these. A call with any other argument,
    or with unseeded randomness in its lineage, runs without reuse (counted as ``refused``).
    Arrays in the result are read-only; when an argument is a traced array, arrays of the result
    come back traced.

    Examples
    --------
    >>> import numpy as np, memphis
    >>> @memphis.reuse
    ... def gram(X):
    ...     return X.T @ X
    >>> X = np.ones((100, 3))
    >>> bool((gram(X) == gram(X)).all())  # the second call is a hit
    True
    >>> @memphis.reuse(version="2")
    ... def scaled(X, factor=2.0):
    ...     return X * factor
    """
    if not (version is None or isinstance(version, (str, int)) and not isinstance(version, bool)):
        raise TypeError(f"memphis.reuse: version={version!r}: expected a string, an int or None")
    if function is None:
        return functools.partial(reuse, version=version)
    if not callable(function):
        raise TypeError(f"memphis.reuse: {function!r} (type {type(function).__name__}) is not callable; expected "
                        "a function (use @memphis.reuse or @memphis.reuse(version=...))")
    signature = inspect.signature(function)
    qualified = f"{function.__module__}.{function.__qualname__}"

    @functools.wraps(function)
    def cached(*args, **kwargs):
        tier = default.host()
        try:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            inputs = []
            identity = function_identity(function, inputs)
            arguments = encode(tuple(bound.arguments.items()), inputs)
            item = LineageItem("call", inputs=inputs, literals=(identity, literal(version), arguments))
        except (Untraceable, TypeError) as why:
            tier.count("refused")
            log.debug("refused reuse of %s: %s", qualified, why)
            return function(*args, **kwargs)
        if not item.deterministic:
            tier.count("refused")
            log.debug("refused reuse of %s: an argument depends on unseeded randomness", qualified)
            return function(*args, **kwargs)
        value = tier.get_or_compute(item.key, lambda: _storable(function(*args, **kwargs)), item=item,
                                    opcode="call:" + qualified, durable=True)
        return _traced(value, item.cut()) if _has_traced(bound.arguments.values()) else value

    return cached


def _has_traced(values) -> bool:
    return any(isinstance(v, TracedArray) or (type(v) in (tuple, list, dict) and
                                              _has_traced(v.values() if isinstance(v, dict) else v))
               for v in values)
