"""Traced calls: the lineage item of a numpy call, and its value from the cache or computed.

Below traced arrays (array.py) and the partial rewrites (partial.py), which both build on it.
"""
import concurrent.futures
import inspect
import logging

import numpy as np

from memphis.tiers.host import State
from memphis.tiers.runtime import default
from memphis.tracing.lineage import LineageItem, encode

log = logging.getLogger("memphis.local")

# numpy functions that are pure (same inputs, same output) and are traced; any other function on a
# traced array runs as plain numpy and returns a plain result (no reuse, never an error).
_NUMPY = ("all any sum mean std var min max amin amax prod argmin argmax cumsum cumprod nansum nanmean median "
          "percentile quantile transpose reshape ravel squeeze expand_dims dot vdot inner outer tensordot "
          "einsum trace diag diagonal tril triu kron concatenate hstack vstack column_stack stack where clip "
          "round sort argsort take cov corrcoef isclose allclose copy")
_LINALG = "solve inv pinv eigh eigvalsh eig eigvals svd lstsq qr cholesky det slogdet norm matrix_rank"
TRACED_FUNCTIONS = {
    **{getattr(np, name): name for name in _NUMPY.split()},
    **{getattr(np.linalg, name): "linalg." + name for name in _LINALG.split()},
}
_signatures = {}


class Operand:
    """An argument known by its lineage alone: the items of calls that a rewrite plans, before any runs."""

    __slots__ = ("lineage",)

    def __init__(self, lineage: LineageItem):
        self.lineage = lineage


def _canonical_arguments(function, args, kwargs):
    """(name, value) pairs with defaults filled in, so ``a.T`` and ``np.transpose(a, None)`` trace alike."""
    signature = _signatures.get(function)
    if signature is None:
        signature = _signatures[function] = inspect.signature(function)
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    return tuple(bound.arguments.items())


def trace_item(opcode: str, arguments) -> LineageItem:
    """The item of ``opcode`` applied to ``arguments`` (a tuple); raises Untraceable."""
    inputs = []
    literals = encode(arguments, inputs)
    return LineageItem(opcode, inputs=inputs, literals=(literals,))


def function_item(function, args, kwargs) -> LineageItem:
    """The item of a call of a traced numpy function, as its canonical arguments."""
    return trace_item(TRACED_FUNCTIONS[function], _canonical_arguments(function, args, kwargs))


def ufunc_item(ufunc, method, inputs, kwargs) -> LineageItem:
    opcode = "ufunc." + ufunc.__name__ + ("" if method == "__call__" else "." + method)
    return trace_item(opcode, (tuple(inputs), tuple(sorted(kwargs.items()))))


def transpose_item(item: LineageItem) -> LineageItem:
    """The item of ``X.T`` for ``X`` of ``item``."""
    return function_item(np.transpose, (Operand(item),), {})


def product_item(left: LineageItem, right: LineageItem) -> LineageItem:
    """The item of ``L @ R`` for ``L`` of ``left`` and ``R`` of ``right``."""
    return ufunc_item(np.matmul, "__call__", (Operand(left), Operand(right)), {})


def held(item: LineageItem) -> bool:
    """Whether the host tier holds ``item``'s value (in memory or on disk)."""
    return default.host().state_of(item.key) in (State.CACHED, State.SPILLED)


def started_early(item: LineageItem, compute):
    """``compute``, started now in a background thread when ``item`` waits on the content hash of a
    large raw input (see lineage.ContentDigest): the work then runs while the input is hashed.

    On a miss the caller waits for that work, as it would have run anyway; on a hit it returns the
    cached value and the early work's result is dropped (counted as ``started_early``). Host work
    only; a device has its own queue.
    """
    if not item.pending or not item.deterministic:
        return compute
    early = default.part("early", lambda: concurrent.futures.ThreadPoolExecutor(thread_name_prefix="memphis-early"))
    default.host().count("started_early")
    log.debug("started %s while its input is hashed", item.opcode)
    return early.submit(compute).result


def cached(item: LineageItem, compute, *, device=None):
    """(value, held): ``item``'s value, from the cache or computed now, and whether a tier keeps it.

    ``device``: the work runs on that device and is probed in its GPU tier (which asks the host
    tier before computing); host work asks the GPU tier before computing. Work that depends on
    unseeded randomness is computed and never held.
    """
    tier = default.host()
    if not item.deterministic:
        tier.count("refused")
        log.debug("not cached %s: it depends on unseeded randomness", item.opcode)
        return compute(), False
    if device is not None:
        if device.tier is None:  # a device without a tier (reconfigured away): plain device work
            return compute(), False
        return device.tier.get_or_compute(item.key, compute, item=item)
    if default.gpu is not None:
        compute = default.gpu.serving_host(item, compute)
    value = tier.get_or_compute(item.key, compute, item=item, min_cost_s=tier.worth_caching_s())
    return value, held(item)
