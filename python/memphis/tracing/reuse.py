"""Multi-level reuse: a whole deterministic function cached by its identity and its arguments' lineage."""
import functools
import inspect
import logging

from memphis.backends import numpy_backend
from memphis.tiers.runtime import Runtime
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


def _traced(value, item, runtime: Runtime):
    """Arrays of a result (itself, or the elements of a tuple/list) as traced arrays of the call."""
    if isinstance(value, numpy_backend.ARRAY_TYPES):
        return TracedArray(value, item, runtime)
    if type(value) in (tuple, list):
        return type(value)(_traced(v, LineageItem("output", inputs=(item,), literals=(literal(i),)), runtime)
                           for i, v in enumerate(value))
    return value


def reuse(function=None, *, version=None, runtime: Runtime):
    """``function`` cached in ``runtime`` (see :func:`memphis.local.reuse`)."""
    if not (version is None or isinstance(version, (str, int)) and not isinstance(version, bool)):
        raise TypeError(f"memphis.reuse: version={version!r}: expected a string, an int or None")
    if function is None:
        return functools.partial(reuse, version=version, runtime=runtime)
    if not callable(function):
        raise TypeError(f"memphis.reuse: {function!r} (type {type(function).__name__}) is not callable; expected "
                        "a function (use @memphis.reuse or @memphis.reuse(version=...))")
    signature = inspect.signature(function)
    qualified = f"{function.__module__}.{function.__qualname__}"

    @functools.wraps(function)
    def cached(*args, **kwargs):
        tier = runtime.host()
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
        return _traced(value, item.cut(), runtime) if _has_traced(bound.arguments.values()) else value

    return cached


def _has_traced(values) -> bool:
    return any(isinstance(v, TracedArray) or (type(v) in (tuple, list, dict) and
                                              _has_traced(v.values() if isinstance(v, dict) else v))
               for v in values)
