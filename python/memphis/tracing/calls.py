"""Traced calls: the lineage item of a numpy call, and its value from the cache or computed.

Below traced arrays (array.py) and the partial rewrites (partial.py), which both build on it. The
cache is the traced arrays' Runtime, passed in; the call-form memo here is process-wide, as it
holds literals only (what a call's form means is the same in every cache), never a value.
"""
import concurrent.futures
import functools
import inspect
import logging

import numpy as np
from xxhash import xxh3_128_digest

from memphis.backends import numpy_backend
from memphis.tiers.host import State
from memphis.tiers.runtime import Runtime
from memphis.tracing.lineage import LineageItem, array_leaf, bounded, encode, head_bytes

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
_binders = {}


class Operand:
    """An argument known by its lineage alone: the items of calls that a rewrite plans, before any runs."""

    __slots__ = ("lineage",)

    def __init__(self, lineage: LineageItem):
        self.lineage = lineage


class _Binder:
    """Binds a call's arguments to a function's parameters, defaults filled in, in parameter order:
    what ``inspect.Signature.bind`` + ``apply_defaults`` return, at a fraction of their cost (this
    runs for every traced call). Functions with ``*args`` or ``**kwargs`` go through inspect."""

    __slots__ = ("signature", "names", "defaults", "index", "positional", "positional_only")

    def __init__(self, function):
        self.signature = inspect.signature(function)
        parameters = list(self.signature.parameters.values())
        self.names, self.defaults, self.index = None, None, None
        if all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) for p in parameters):
            self.names = tuple(p.name for p in parameters)
            self.defaults = [p.default for p in parameters]
            self.index = {p.name: i for i, p in enumerate(parameters)}
            self.positional = sum(p.kind is not p.KEYWORD_ONLY for p in parameters)
            self.positional_only = sum(p.kind is p.POSITIONAL_ONLY for p in parameters)

    def bind(self, args, kwargs) -> tuple:
        if self.names is None or len(args) > self.positional:
            return self._bound(args, kwargs)
        values = list(self.defaults)
        values[:len(args)] = args
        for name, value in kwargs.items():
            i = self.index.get(name, -1)
            if i < self.positional_only or i < len(args):  # unknown, positional-only or given twice
                return self._bound(args, kwargs)
            values[i] = value
        if any(v is inspect.Parameter.empty for v in values):  # a required argument is missing
            return self._bound(args, kwargs)
        return tuple(zip(self.names, values))

    def _bound(self, args, kwargs) -> tuple:
        """inspect's binding: the irregular calls, and the TypeError of a call that is wrong."""
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return tuple(bound.arguments.items())


def _binder(function) -> _Binder:
    binder = _binders.get(function)
    if binder is None:
        binder = _binders[function] = _Binder(function)
    return binder


def trace_item(opcode: str, arguments) -> LineageItem:
    """The item of ``opcode`` applied to ``arguments`` (a tuple); raises Untraceable."""
    inputs = []
    literals = encode(arguments, inputs)
    return LineageItem(opcode, inputs=inputs, literals=(literals,))


# (function or (ufunc, method), form of a call) -> (its opcode, literals, where its inputs are, head_bytes): a
# loop calls a traced function in the same form again and again (``np.sum(a)``, ``X.T``, ``a + 1``),
# so its literals, and the bytes they put into its hash, are made once. The form of a call is the type
# and value of each plain argument as given, and the place of each data input (a traced array, or a
# raw numpy array, whose item is its content hash: ``G + lam * np.eye(d)``); a call with any other
# argument (a list, a dtype, a pandas frame) is encoded every time. Emptied when full.
_forms = {}
MAX_FORMS = 4096
_FORM_TYPES = {type(None), bool, int, str, type(np._NoValue)}  # values that equal only their own literal
_TRACED = "traced"


def _form_of(value):
    kind = type(value)
    if kind in _FORM_TYPES:
        return kind, value
    if kind is float:  # 0.0 == -0.0 and nan != nan: by its text, as its literal is
        return kind, repr(value)
    if (kind is np.ndarray and not value.dtype.hasobject) or type(getattr(value, "lineage", None)) is LineageItem:
        return _TRACED
    return None


def _input_item(value) -> LineageItem:
    """The item of a data input at a place of a call form: a traced array's lineage, a raw array's
    leaf (its content hash, as encode makes it)."""
    return array_leaf(value) if type(value) is np.ndarray else value.lineage


def _remember_form(form, opcode, literals, places):
    if len(_forms) >= MAX_FORMS:
        _forms.clear()
    _forms[form] = opcode, literals, tuple(places), head_bytes(opcode, literals)


def _call_form(function, args, kwargs):
    """The memo key of a call, None for a call whose literals must be encoded afresh."""
    form = [function]
    for value in args:
        part = _form_of(value)
        if part is None:
            return None
        form.append(part)
    for name, value in kwargs.items():
        part = _form_of(value)
        if part is None:
            return None
        form.append((name, part))
    return tuple(form)


def _remembered(form, args, kwargs):
    """(opcode, literals, the inputs' items, head bytes) of a call of ``form`` met before, else None
    (a form not met yet, or ``form`` None: a call encoded every time)."""
    known = _forms.get(form) if form is not None else None
    if known is None:
        return None
    opcode, literals, places, head = known
    return opcode, literals, [_input_item(args[p] if type(p) is int else kwargs[p]) for p in places], head


def known_call(memo, args, kwargs, runtime: Runtime):
    """``(item, found)`` of a call whose form was met before (``memo``: the function, or (ufunc,
    method)): its item with its hash taken, and ``(value, the item it is kept under)`` when
    ``runtime``'s host tier holds it, else None. None for a call of a new form, or one whose input's hash is still
    pending: the caller then makes its item as usual. A loop's recurring calls (``X.T @ X``,
    ``np.linalg.solve(G, b)``) take this way, at about half the cost of the general one: the item
    is made from the memo and its inputs' hashes, and probed directly."""
    known = _remembered(_call_form(memo, args, kwargs), args, kwargs)
    if known is None:
        return None
    opcode, literals, inputs, head = known
    parts = [head]
    for i in inputs:  # a loop, not a comprehension: it ends at a pending hash
        digest = i._digest
        if digest is None:
            if i.pending:
                return None
            digest = i.digest
        parts.append(digest)
    item = LineageItem(opcode, inputs=inputs, literals=literals, head=head, digest=xxh3_128_digest(b"".join(parts)))
    return item, (runtime.host().hit(item.key, item) if item.deterministic else None)


def function_item(function, args, kwargs) -> LineageItem:
    """The item of a call of a traced numpy function, as its canonical arguments: what trace_item
    makes of the (name, value) pairs, with the names' literals written directly (every call has
    several, most of them defaults)."""
    form = _call_form(function, args, kwargs)
    known = _remembered(form, args, kwargs)
    if known is not None:
        opcode, literals, inputs, head = known
        return LineageItem(opcode, inputs=inputs, literals=literals, head=head)
    binder = _binder(function)
    arguments = binder.bind(args, kwargs)  # (name, value) pairs, defaults filled in, so a.T == np.transpose(a, None)
    inputs = []
    literals = (("tuple", tuple([("tuple", (("str", repr(name)), encode(value, inputs))) for name, value in arguments])),)
    if form is not None and binder.names is not None:
        positions = [binder.index[name] for name, value in arguments if _form_of(value) is _TRACED]
        _remember_form(form, TRACED_FUNCTIONS[function], literals,
                       [i if i < len(args) else binder.names[i] for i in positions])
    return LineageItem(TRACED_FUNCTIONS[function], inputs=inputs, literals=literals)


_NO_KEYWORDS = ("tuple", ())
_BOUNDS = {int, type(None)}


def _basic_index_form(index):
    """The memo form of a basic index (ints, slices of ints or None, None, Ellipsis, or a tuple of
    these), None for any other (an index array, a list, a traced array: encoded every time)."""
    parts = index if type(index) is tuple else (index,)
    form = [type(index) is tuple]
    for part in parts:
        kind = type(part)
        if kind is slice:
            if type(part.start) not in _BOUNDS or type(part.stop) not in _BOUNDS or type(part.step) not in _BOUNDS:
                return None
            form.append((part.start, part.stop, part.step))
        elif kind is int or part is None or part is Ellipsis:
            form.append((kind, part))
        else:
            return None
    return tuple(form)


def getitem_item(array, index):
    """(the item of ``array[index]``, whether ``index`` is basic: views and ints only); raises Untraceable.
    A basic index's literals come from the call-form memo (``X[:, a:b]`` in a loop)."""
    form = _basic_index_form(index)
    memo = ("getitem", form) if form is not None else None
    known = _forms.get(memo) if memo is not None else None
    if known is not None:
        _, literals, _, head = known
        return LineageItem("getitem", inputs=[array.lineage], literals=literals, head=head), True
    item = trace_item("getitem", (array, index))
    if memo is not None:
        _remember_form(memo, "getitem", item.literals, ())
    return item, memo is not None


def ufunc_item(ufunc, method, inputs, kwargs) -> LineageItem:
    opcode = "ufunc." + ufunc.__name__ + ("" if method == "__call__" else "." + method)
    if not kwargs:  # the common call, encoded as trace_item would encode it, without its generality
        form = _call_form((ufunc, method), inputs, kwargs)
        known = _remembered(form, inputs, kwargs)
        if known is not None:
            _, literals, items, head = known
            return LineageItem(opcode, inputs=items, literals=literals, head=head)
        items, parts = [], []
        for value in inputs:
            lineage = getattr(value, "lineage", None)
            if type(lineage) is LineageItem:
                parts.append(("input", len(items)))
                items.append(lineage)
            else:
                parts.append(encode(value, items))
        literals = (("tuple", (("tuple", tuple(parts)), _NO_KEYWORDS)),)
        if form is not None:
            _remember_form(form, opcode, literals, [i for i, part in enumerate(form[1:]) if part is _TRACED])
        return LineageItem(opcode, inputs=items, literals=literals)
    return trace_item(opcode, (tuple(inputs), tuple(sorted(kwargs.items()))))


def transpose_item(item: LineageItem) -> LineageItem:
    """The item of ``X.T`` for ``X`` of ``item``: ``np.transpose(X)``'s, from literals made once
    (every ``X.T @ …`` in a loop makes one)."""
    opcode, literals, head = _plain_transpose()
    return LineageItem(opcode, inputs=(item,), literals=literals, head=head)


def is_plain_transpose(item: LineageItem) -> bool:
    """Whether ``item`` is what transpose_item makes of its input (``X.T``, no explicit axes): told by
    its opcode and literals, without making that item and hashing it (this runs for every product)."""
    return item.opcode == "transpose" and len(item.inputs) == 1 and item.literals == _plain_transpose()[1]


@functools.lru_cache(maxsize=1)
def _plain_transpose() -> tuple:
    """(opcode, literals, head bytes) of ``np.transpose(X)``, as function_item makes them."""
    item = function_item(np.transpose, (Operand(LineageItem("leaf")),), {})
    return item.opcode, item.literals, head_bytes(item.opcode, item.literals)


def product_item(left: LineageItem, right: LineageItem) -> LineageItem:
    """The item of ``L @ R`` for ``L`` of ``left`` and ``R`` of ``right``."""
    return ufunc_item(np.matmul, "__call__", (Operand(left), Operand(right)), {})


def held(item: LineageItem, runtime: Runtime) -> bool:
    """Whether ``runtime``'s host tier holds ``item``'s value (in memory or on disk)."""
    return runtime.host().state_of(item.key) in (State.CACHED, State.SPILLED)


def started_early(item: LineageItem, compute, runtime: Runtime):
    """``compute``, started now in a background thread when ``item`` waits on the content hash of a
    large raw input (see lineage.ContentDigest): the work then runs while the input is hashed.

    On a miss the caller waits for that work, as it would have run anyway; on a hit it returns the
    cached value and the early work's result is dropped (counted as ``started_early``). Host work
    only; a device has its own queue. One piece of work at a time, and none where numpy's BLAS takes
    every core: hashing beside a multi-threaded product leaves its threads fewer cores than they
    wait on each other for (a 4-fold cross-validation with two BLAS threads on two cores took 3.9×
    the hoisted loop's time with early work, 1.2× without).
    """
    if not item.pending or not item.deterministic or numpy_backend.blas_threads() >= numpy_backend.cores():
        return compute
    early = runtime.part("early", lambda: concurrent.futures.ThreadPoolExecutor(
        max_workers=1, thread_name_prefix="memphis-early"))
    runtime.host().count("started_early")
    log.debug("started %s while its input is hashed", item.opcode)
    return early.submit(compute).result


_A_FLOAT = ("float", "")


def signature(item: LineageItem, values) -> tuple:
    """What predicts an operation's cost: its opcode and literals, and the shapes of its arguments.

    A ufunc's float operands count as floats, whatever their value: a loop over weights or step sizes
    (``w * p``) would otherwise meet a new signature, and take the slow path, at every call. A
    wrong guess costs little: an operation found worth keeping after all is kept (HostTier.traced).
    """
    literals = item.literals
    if item.opcode.startswith("ufunc."):  # (("tuple", (("tuple", operands), keywords)),): see ufunc_item
        (kind, (operands, keywords)), = literals
        for operand in operands[1]:  # a loop, not any(): this runs for every miss of a ufunc
            if _is_float(operand):
                masked = tuple([_A_FLOAT if _is_float(part) else part for part in operands[1]])
                literals = ((kind, ((operands[0], masked), keywords)),)
                break
    return item.opcode, literals, tuple([getattr(v, "shape", None) for v in values])


def _is_float(part) -> bool:
    """Whether an operand's literal is a float's: Python's, np.float64 (a float subclass) or a numpy scalar."""
    return part[0] in ("float", "float64") or part[0].startswith("numpy.")


def cached(item: LineageItem, compute, *, runtime: Runtime, device=None, shapes_of=()):
    """(value, lineage): ``item``'s value, from ``runtime``'s cache or computed now, and the item it
    carries: cut below when a tier keeps it (the tier holds what lies below), else ``item`` (bounded).

    ``device``: the work runs on that device (see Runtime.traced, which routes it). Work that
    depends on unseeded randomness is computed and never held. ``shapes_of``: the arguments whose
    shapes, with the item's opcode and literals, predict the work's cost (see HostTier.traced).
    """
    if not item.deterministic:
        runtime.host().count("refused")
        log.debug("not cached %s: it depends on unseeded randomness", item.opcode)
        return compute(), bounded(item)
    value, kept = runtime.traced(item, compute, device=device, signature=lambda: signature(item, shapes_of))
    return value, kept if kept is not None else bounded(item)
