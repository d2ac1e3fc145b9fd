"""Traced arrays: numpy work on the driver, recorded as lineage and probed in the cache before it runs.

A traced array carries the Runtime it was made in (its cache); work on it runs there: that of the
traced operand numpy dispatches to (the first one).
"""
import logging

import numpy as np

from memphis.backends import device_backend, numpy_backend
from memphis.tiers.runtime import Runtime
from memphis.tracing import partial
from memphis.tracing.calls import (TRACED_FUNCTIONS, cached, function_item, getitem_item, known_call,
                                   started_early, transpose_item, ufunc_item)
from memphis.tracing.lineage import LineageItem, Untraceable, array_leaf, bounded, literal

log = logging.getLogger("memphis.local")

# Results that are views of their input: remade in no time, never cached, and never cut, so that
# the rewrites in partial.py see what ``X.T`` is the transpose of.
VIEW_OPCODES = {"transpose", "reshape", "ravel", "squeeze", "expand_dims", "diagonal"}
# Host calls whose item is probed as soon as it is made (calls.known_call): not views (never
# probed), nor concatenations (their item is partial.canonical_concatenation's, made later).
_PROBED_DIRECTLY = {function for function, opcode in TRACED_FUNCTIONS.items()
                    if opcode not in VIEW_OPCODES and function not in partial.CONCATENATIONS}


def _unwrap(value, device=None):
    """Plain values of traced arrays; for work on ``device``, host arrays are copied to it (counted)."""
    if isinstance(value, TracedArray):
        value = value._value
    if device is not None and isinstance(value, np.ndarray):
        return device.copy_to_device(value)
    if type(value) in (tuple, list):
        return type(value)(_unwrap(v, device) for v in value)
    if type(value) is dict:
        return {k: _unwrap(v, device) for k, v in value.items()}
    return value


_CONTAINERS = (tuple, list, dict)


def _call(function, args, kwargs, device=None):
    """``function`` applied to the plain values of ``args`` and ``kwargs`` (see _unwrap); the common
    call (traced arrays and plain values on the host, no keywords) first: this runs for every traced call."""
    if device is None and not kwargs:
        values = []
        for value in args:
            if type(value) is TracedArray:
                value = value._value
            elif type(value) in _CONTAINERS or isinstance(value, TracedArray):
                value = _unwrap(value)
            values.append(value)
        return function(*values)
    return function(*_unwrap(args, device), **_unwrap(kwargs, device))


def run(item: LineageItem, compute, runtime: Runtime, *, view: bool = False, device=None, shapes_of=()):
    """Probes ``runtime``'s cache for ``item``, computes on a miss, and wraps the result with its lineage.

    ``view``: a result that is never cached (views, indexing): computed and wrapped, no probe.
    ``device``, ``shapes_of``: see :func:`memphis.tracing.calls.cached`.
    """
    if view:
        return wrap(compute(), bounded(item), runtime)
    # Cut the trace at a cached key: the cache holds the structure, the trace keeps only its hash.
    return wrap(*cached(item, compute, runtime=runtime, device=device, shapes_of=shapes_of), runtime)


def _traced_call(memo, args, kwargs, probe: bool, make, runtime: Runtime):
    """``(item, None)`` of a traced call, or ``(item, its traced value)`` when ``probe`` and the host
    tier holds it (calls.known_call: a call of a form met before, probed from its memo and its
    inputs' hashes). ``make()`` makes the item of any other call (and raises for one that has none)."""
    known = known_call(memo, args, kwargs, runtime) if probe else None
    if known is None:
        return make(), None
    item, found = known
    return item, (None if found is None else
                  wrap(found[0], found[1] if found[1] is not None else bounded(item), runtime))


def wrap(value, item: LineageItem, runtime: Runtime):
    """Arrays become traced arrays of ``runtime``; tuples of results (eigh, svd, lstsq) are wrapped per element."""
    if isinstance(value, (np.ndarray, np.generic)):
        return TracedArray(np.asarray(value), item, runtime)
    if device_backend.is_device_array(value):
        return TracedArray(value, item, runtime)
    if isinstance(value, tuple):
        parts = [wrap(v, LineageItem("output", inputs=(item,), literals=(literal(i),)), runtime)
                 for i, v in enumerate(value)]
        return type(value)(*parts) if hasattr(value, "_fields") else tuple(parts)
    return value


def _plain(function, args, kwargs, why, runtime: Runtime):
    if isinstance(why, Untraceable):  # an argument without a lineage: a refused reuse, not an error
        runtime.host().count("refused")
    log.debug("untraced %s (%s): runs as plain numpy, no reuse", getattr(function, "__name__", function), why)
    return function(*_unwrap(args), **_unwrap(kwargs))


class TracedArray(np.lib.mixins.NDArrayOperatorsMixin):
    """A numpy array with its lineage; operations on it are traced and reused from the cache.

    Get one with :func:`memphis.array`. Operators (``+ - * / @ ** < ==`` …), ``.T``, indexing,
    reductions and the numpy and ``np.linalg`` functions in ``TRACED_FUNCTIONS`` return traced
    arrays; other functions run as plain numpy and return plain results. Values are read-only
    (they are shared with the cache); ``.numpy()`` or ``np.asarray(t)`` unwraps.

    Examples
    --------
    >>> import numpy as np, memphis
    >>> X = memphis.array(np.arange(6.0).reshape(3, 2))
    >>> (X.T @ X).numpy()
    array([[20., 26.],
           [26., 35.]])
    """

    __slots__ = ("_value", "lineage", "runtime", "_transposed", "__weakref__")
    deferred = False  # see DeferredArray

    def __init__(self, value: np.ndarray, lineage: LineageItem, runtime: Runtime):
        self._value = value
        self.lineage = lineage
        self.runtime = runtime  # the cache its work runs in
        self._transposed = None

    # --- numpy dispatch ---------------------------------------------------------------------

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        out = kwargs.pop("out", None)
        runtime = self.runtime
        if out is not None and not all(isinstance(o, TracedArray) for o in out):
            return _plain(getattr(ufunc, method), inputs, {**kwargs, "out": out}, "writes into a plain array", runtime)
        # Into a traced array (``t += 1``): computed anew, and the name is bound to the result.
        device = device_backend.device_among((*inputs, *kwargs.values()))
        try:
            item, held = _traced_call((ufunc, method), inputs, kwargs, device is None and not kwargs,
                                      lambda: ufunc_item(ufunc, method, inputs, kwargs), runtime)
        except Untraceable as why:
            return _plain(getattr(ufunc, method), _unwrap(inputs, device), kwargs, why, runtime)
        if held is not None:
            return held
        function = ufunc if method == "__call__" else getattr(ufunc, method)
        compute = lambda: _call(function, inputs, kwargs, device)  # noqa: E731
        # A product large enough to ask its rewrites (partial.product_work): a held one is a plain hit,
        # which no rewrite can beat (probed already when its form was met before: a second probe then
        # costs a lookup); one under way is waited for (run); without an entry, the rewrites (a
        # pending key is not forced here: there is no entry for it yet).
        work = partial.product_work(*inputs) if (device is None and ufunc is np.matmul and method == "__call__"
                                                 and not kwargs and len(inputs) == 2
                                                 and isinstance(inputs[0], TracedArray)) else 0
        if work >= partial.REWRITE_MIN_WORK:
            tier = runtime.host()
            found = None if item.pending else tier.hit(item.key, item)
            if found is not None:
                value, kept = found
                return wrap(value, kept if kept is not None else bounded(item), runtime)
            if item.pending or tier.state_of(item.key) is None:
                # Rewrites are asked before any work starts early: the work they start early instead
                # (XᵀX for a column selection's Gram, the parts' Grams for a fold's) is what they read.
                rewritten = partial.crossproduct(item, *inputs)  # the rewrites assemble host blocks
                if rewritten is not None:
                    value, in_tier = rewritten
                    return wrap(value, item.cut() if in_tier else item, runtime)
                unmade = (partial.blockwise_product(*inputs) or partial.associative_product(*inputs)) \
                    if inputs[0].deferred else None  # both take a deferred left operand only
                if unmade is not None:
                    compute = unmade
                elif work >= partial.PREFIX_MIN_WORK:
                    left, right = inputs
                    kept = partial.unmade_product(item, left, right)
                    if kept is None:
                        return _product(item, started_early(item, compute, runtime), left, right)
                    return DeferredArray(lambda: np.asarray(_product(item, lambda: left._value @ kept, left, kept)),
                                         bounded(item), runtime, shape=(left.shape[0], kept.shape[1]),
                                         dtype=np.result_type(left.dtype, kept.dtype), factors=(left, kept))
        if device is None:
            compute = started_early(item, compute, runtime)
        return run(item, compute, runtime, device=device, shapes_of=inputs)

    def __array_function__(self, function, types, args, kwargs):
        runtime = self.runtime
        if function not in TRACED_FUNCTIONS:
            return _plain(function, args, kwargs, "not a traced function", runtime)
        device = device_backend.device_among((*args, *kwargs.values()))
        try:
            item, held = _traced_call(function, args, kwargs, device is None and function in _PROBED_DIRECTLY,
                                      lambda: function_item(function, args, kwargs), runtime)
        except (Untraceable, TypeError) as why:
            return _plain(function, _unwrap(args, device), _unwrap(kwargs, device), why, runtime)
        if held is not None:
            return held
        view = item.opcode in VIEW_OPCODES
        compute = lambda: _call(function, args, kwargs, device)  # noqa: E731
        if device is None:
            deferred = _deferred(function, item, args, kwargs, compute, runtime)
            if deferred is not None:
                return deferred
            if not view:
                compute = started_early(item, compute, runtime)
        return run(item, compute, runtime, view=view, device=device, shapes_of=args)

    def __array__(self, dtype=None, copy=None):
        if device_backend.is_device_array(self._value):
            raise TypeError("a traced device array does not convert to numpy implicitly; use memphis.gpu.to_host(x)")
        if copy:
            return np.array(self._value, dtype=dtype, copy=True)
        return self._value if dtype is None else self._value.astype(dtype, copy=False)

    def numpy(self) -> np.ndarray:
        """The value, read-only (it may be shared with the cache); copy it to change it. For a traced
        device array: the device array (a cupy or simulated array), not to be changed either."""
        return self._value

    # --- array surface ----------------------------------------------------------------------

    shape = property(lambda self: self._value.shape)
    dtype = property(lambda self: self._value.dtype)
    ndim = property(lambda self: self._value.ndim)
    size = property(lambda self: self._value.size)
    nbytes = property(lambda self: self._value.nbytes)

    @property
    def T(self):
        # Made once: a loop's ``X.T @ X`` then traces its product only (the values are read-only);
        # directly, as np.transpose(self) would trace it (a view: never probed), without numpy's dispatch.
        if self._transposed is None:
            self._transposed = TracedArray(self._value.T, bounded(transpose_item(self.lineage)), self.runtime)
        return self._transposed

    def __getitem__(self, index):
        try:
            item, basic = getitem_item(self, index)
        except Untraceable as why:
            return _plain(lambda a, i: a[i], (self, index), {}, why, self.runtime)
        # Never cached: a view costs nothing, and a gather (X[:, columns]) is remade at memory speed,
        # while holding each one would take fresh memory (page faults cost as much as the gather).
        if basic:  # slices and ints: a view, and no column selection (what run(view=True) does, without its closure)
            return wrap(self._value[index], bounded(item), self.runtime)
        device = None if self.deferred else device_backend.device_of(self._value)
        if device is None:
            columns = partial.selected_columns(self, index)
            if columns is not None:  # deferred: the rewrites often answer what uses it from XᵀX
                selected = DeferredArray(lambda: self._value[:, list(columns)], bounded(item), self.runtime,
                                         shape=(self.shape[0], len(columns)), dtype=self.dtype)
                partial.note_column_selection(self, columns, selected)
                return selected
        return run(item, lambda: self._value[_unwrap(index, device)], self.runtime, view=True)

    def __len__(self):
        return len(self._value)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __bool__(self):
        return bool(self._value)

    def __float__(self):
        return float(self._value)

    def __int__(self):
        return int(self._value)

    def __index__(self):
        return self._value.__index__()

    def __repr__(self):
        return f"TracedArray({self._value!r}, lineage={self.lineage.key[:12]}…)"


def _method(function):
    def method(self, *args, **kwargs):
        return function(self, *args, **kwargs)
    method.__name__ = function.__name__
    method.__doc__ = f"Traced ``np.{function.__name__}`` of this array."
    return method


for _name in ("all any sum mean std var min max prod argmin argmax cumsum cumprod transpose reshape ravel "
              "squeeze dot trace diagonal clip round sort argsort take copy").split():
    setattr(TracedArray, _name, _method(getattr(np, _name)))


# Operands numpy hands to __array_ufunc__ as they are (none has an override of its own): for these,
# the arithmetic operators call it directly, without numpy's dispatch (0.8 µs of a 5 µs hit); any other
# operand (a pandas Series, a device array) goes the mixin's way.
_DIRECT_OPERANDS = {float, int, bool, np.ndarray, np.float64}


def _operator(ufunc, name: str, reflected: bool):
    by_numpy = getattr(np.lib.mixins.NDArrayOperatorsMixin, name)

    def operator(self, other):
        if type(other) in _DIRECT_OPERANDS or isinstance(other, TracedArray):
            return self.__array_ufunc__(ufunc, "__call__", *((other, self) if reflected else (self, other)))
        return by_numpy(self, other)
    operator.__name__ = name
    return operator


for _name, _ufunc in (("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("truediv", np.true_divide),
                      ("pow", np.power), ("matmul", np.matmul)):
    setattr(TracedArray, f"__{_name}__", _operator(_ufunc, f"__{_name}__", reflected=False))
    setattr(TracedArray, f"__r{_name}__", _operator(_ufunc, f"__r{_name}__", reflected=True))


class DeferredArray(TracedArray):
    """A traced host array made when its value is first read: a column gather ``X[:, columns]``, a
    concatenation, a product assembled from blocks or left unmade (partial.py), or the transpose
    of one of these.

    The rewrites in partial.py answer the common uses (``Aᵀ A``, ``Aᵀ y``, ``A @ w``) from the
    cached products of its source, parts or factors, so the copy it stands for is often never made.
    ``parts``: the arrays it concatenates along ``axis`` (None otherwise); ``source``: for a
    transpose, the deferred array it transposes; ``factors``: (A, B) of a product ``A @ B``.
    """

    __slots__ = ("_make", "_shape", "_dtype", "parts", "axis", "source", "factors")
    deferred = True

    def __init__(self, make, lineage: LineageItem, runtime: Runtime, *, shape, dtype, parts=None, axis=None,
                 source=None, factors=None):
        _VALUE.__set__(self, None)
        self.lineage = lineage
        self.runtime = runtime
        self._make, self._shape, self._dtype = make, tuple(shape), np.dtype(dtype)
        self.parts, self.axis, self.source, self.factors = parts, axis, source, factors

    @property
    def deferred(self) -> bool:
        return _VALUE.__get__(self) is None

    @property
    def _value(self):
        value = _VALUE.__get__(self)
        if value is None:  # two threads may both make it: equal values, one is kept
            value = numpy_backend.read_only_view(np.asarray(self._make()))
            _VALUE.__set__(self, value)
        return value

    shape = property(lambda self: self._shape)
    dtype = property(lambda self: self._dtype)
    ndim = property(lambda self: len(self._shape))
    size = property(lambda self: int(np.prod(self._shape)))
    nbytes = property(lambda self: self.size * self._dtype.itemsize)
    T = property(lambda self: self.transpose())

    def transpose(self, *axes):
        if axes not in ((), (None,)):
            return np.transpose(self, *axes)
        return DeferredArray(lambda: self._value.T, bounded(transpose_item(self.lineage)), self.runtime,
                             shape=self._shape[::-1], dtype=self._dtype, source=self)


_VALUE = TracedArray._value  # the slot a deferred array fills when it is made


def _deferred(function, item, args, kwargs, compute, runtime: Runtime):
    """A deferred result of a host call, or None: concatenations (one item for every spelling,
    see partial.canonical_concatenation) and the transpose of a deferred array."""
    if function is np.transpose and item.opcode == "transpose" and getattr(args[0], "deferred", False) \
            and len(args) == 1 and kwargs.get("axes") is None:
        return args[0].transpose()
    concatenation = partial.canonical_concatenation(function, args, kwargs)
    if concatenation is None:
        return None
    parts = args[0]
    if not all(isinstance(p, (TracedArray, np.ndarray)) for p in parts):
        return None
    axis = partial.literal_axis(concatenation)
    first = parts[0].shape
    shape = first[:axis] + (sum(p.shape[axis] for p in parts),) + first[axis + 1:]
    return DeferredArray(compute, bounded(concatenation), runtime, shape=shape,
                         dtype=np.result_type(*[p.dtype for p in parts]), parts=tuple(parts), axis=axis)


def _product(item: LineageItem, compute, left, right) -> TracedArray:
    """``left @ right``: from earlier products over a column prefix (partial.prefix_product), else computed."""
    prefix = partial.prefix_product(item, left, right)
    if prefix is not None:
        return _assembled(item, prefix, left, right)
    return run(item, compute, left.runtime, shapes_of=(left, right))


def _assembled(item: LineageItem, prefix, left, right) -> TracedArray:
    """The traced result of a product that partial.prefix_product served from earlier products."""
    if prefix[0] == "columns":  # the first columns of a cached wider product
        _, value, source_item, k = prefix
        selected = TracedArray(value, bounded(item), left.runtime)
        partial.note_column_selection(None, range(k), selected, source_item=source_item)
        return selected
    blocks = prefix[1]  # column blocks side by side
    return DeferredArray(lambda: np.concatenate([value for _, value in blocks], axis=1), bounded(item), left.runtime,
                         shape=(left.shape[0], right.shape[1]), dtype=np.result_type(left.dtype, right.dtype),
                         parts=tuple(TracedArray(value, block, left.runtime) for block, value in blocks), axis=1)


def array(value, *, runtime: Runtime) -> TracedArray:
    """``value`` as a traced array of ``runtime`` (see :func:`memphis.local.array`)."""
    if isinstance(value, TracedArray):
        return value
    device = device_backend.device_of(value)
    if device is not None:  # hashed through a host copy: the key of the same data on the host
        return TracedArray(value, array_leaf(device.copy_to_host(value)), runtime)
    kind = type(value).__name__
    value = np.asarray(value)
    try:
        leaf = array_leaf(value)
    except Untraceable:
        raise TypeError(f"memphis.array: value of type {kind} becomes an array of dtype object, which has no content "
                        "hash; expected a numpy array of numbers, booleans or strings (or data "
                        "np.asarray turns into one), or a device array") from None
    return TracedArray(numpy_backend.read_only_view(value), leaf, runtime)


def _creation(runtime: Runtime, opcode: str, make, deterministic: bool = True, **arguments) -> TracedArray:
    """A traced array of ``runtime`` made from literals only (constants, seeded random data)."""
    item = LineageItem(opcode, literals=(literal(tuple(sorted(arguments.items()))),), deterministic=deterministic)
    return run(item, lambda: make(**arguments), runtime)


def eye(n: int, m: int = None, k: int = 0, dtype=float, *, runtime: Runtime) -> TracedArray:
    """A traced ``np.eye`` of ``runtime``: identified by its arguments, never hashed."""
    return _creation(runtime, "eye", np.eye, N=n, M=m, k=k, dtype=np.dtype(dtype))


def full(shape, fill_value, dtype=None, *, runtime: Runtime) -> TracedArray:
    """A traced ``np.full`` (``ones``/``zeros`` alike) of ``runtime``: identified by its arguments."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    return _creation(runtime, "full", np.full, shape=shape, fill_value=fill_value,
                     dtype=np.dtype(dtype if dtype is not None else np.asarray(fill_value).dtype))


def random(shape, *, seed=None, distribution: str = "standard_normal", runtime: Runtime) -> TracedArray:
    """Random data of ``runtime`` from ``np.random.default_rng(seed)`` (see :func:`memphis.local.random`)."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)

    def make(shape, seed, distribution):
        return getattr(np.random.default_rng(seed), distribution)(size=shape)
    return _creation(runtime, "random", make, deterministic=seed is not None, shape=shape, seed=seed,
                     distribution=distribution)
