"""Lineage items of driver-side work: the identity of a local value, built before it is computed.

Its memos (the heads of items, at most MAX_HEADS; the content digests of live arrays; the digests
of live code objects) are process-wide, not a Runtime's: each maps its key to what a pure function
makes of it, the same in every cache, and none holds a cached value.
"""
import hashlib
import math
import sys
import threading
import weakref
from array import array as packed_ints

import numpy as np
import xxhash

from memphis.backends import device_backend, numpy_backend

# Traces deeper than this are cut (see LineageItem.cut) so that loops cannot grow them without bound.
MAX_TRACE_HEIGHT = 64


class Untraceable(TypeError):
    """A value that has no lineage: its operation runs without reuse."""


class LineageItem:
    """One node of a lineage trace: an opcode, ordered input items, typed literals.

    The hash (xxh3-128, as of raw arrays' content, over opcode, literals and the inputs' hashes) is
    computed once, when first needed (a large raw array's content hash is computed then too, see ContentDigest);
    ``key`` is its hex form, the key of the cache. Equality is structural: opcode,
    literals and inputs compared recursively, with the hash as pre-filter and identical objects
    short-cut, so a collision of hashes never makes two different values equal. A ``cut`` item
    (opcode ``cut``, no inputs) stands for a deeper trace by its hash alone; it equals any item of
    that hash. Traces are cut below cached keys and beyond MAX_TRACE_HEIGHT (see :meth:`cut`).
    ``deterministic`` is false when the item or any input depends on unseeded randomness: such
    values are never cached.

    Examples
    --------
    >>> x = LineageItem("leaf", literals=(("int", "1"),))
    >>> LineageItem("neg", inputs=(x,)) == LineageItem("neg", inputs=(x,))
    True
    """

    __slots__ = ("opcode", "inputs", "literals", "deterministic", "height", "_digest", "_head", "_key", "_leaf",
                 "__weakref__")

    def __init__(self, opcode: str, *, inputs=(), literals=(), deterministic: bool = True, digest: bytes = None,
                 head: bytes = None):
        """``head``: the bytes of ``(opcode, literals)`` in the hash (see identity), when the caller has them."""
        self.opcode = opcode
        self.inputs = inputs = tuple(inputs)
        self.literals = tuple(literals)
        height = 0  # a plain loop: this runs for every traced operation
        for i in inputs:
            deterministic = deterministic and i.deterministic
            if i.height > height:
                height = i.height
        self.deterministic = deterministic
        self.height = height + 1
        self._digest = digest
        self._head = head
        self._key = None
        self._leaf = None

    @property
    def digest(self) -> bytes:
        if self._digest is None:  # two threads may both compute it: same bytes, no harm
            self._digest = xxhash.xxh3_128_digest(self.identity())
        return self._digest

    def identity(self) -> bytes:
        """The bytes the hash is taken of: opcode and literals (their repr, which no process's hash
        seed or addresses enter), then the inputs' hashes. The durable tier keeps them beside a
        value and compares them on a hit, as ``==`` compares items within a process. A ``cut``
        leaf stands for a trace it no longer holds: it has none (None).

        Examples
        --------
        >>> item = LineageItem("neg", inputs=(LineageItem("leaf"),))
        >>> xxhash.xxh3_128_digest(item.identity()) == item.digest
        True
        """
        if self.opcode == "cut":
            return None
        return (self._head or head_bytes(self.opcode, self.literals)) + b"".join([i.digest for i in self.inputs])

    @property
    def pending(self) -> bool:
        """True while the content hash of a raw array in this trace is still to be computed: work
        on it may start before its key is known (see memphis.tracing.calls.started_early)."""
        if self._digest is not None:
            return False
        if self.opcode == "array":
            return isinstance(self.literals[0][1], ContentDigest) and not self.literals[0][1].done
        for i in self.inputs:  # a loop, not any(): this runs for every traced call
            if i.pending:
                return True
        return False

    @property
    def key(self) -> str:
        """The cache key: 32 hex digits of the hash (made once: a product's probes ask for it several times)."""
        if self._key is None:
            self._key = self.digest.hex()
        return self._key

    def __hash__(self):
        return int.from_bytes(self.digest[:8], "little")

    def leaf(self) -> "LineageItem":
        """A ``cut`` leaf with this item's hash and nothing below it (made once: a loop's every kept
        result cuts its inputs, the same arrays again and again)."""
        if self.opcode == "cut":
            return self
        if self._leaf is None:
            self._leaf = LineageItem("cut", literals=(("opcode", self.opcode),), deterministic=self.deterministic,
                                     digest=self.digest)
        return self._leaf

    def cut(self) -> "LineageItem":
        """This item with its inputs replaced by their ``cut`` leaves: what a trace keeps below a cached key.

        The opcode and literals stay (rewrites read them, equality compares them); what lies below
        is known by hash only, so traces in loops stay two levels deep.
        """
        if all(i.opcode == "cut" for i in self.inputs):
            return self
        return LineageItem(self.opcode, inputs=[i.leaf() for i in self.inputs], literals=self.literals,
                           deterministic=self.deterministic, digest=self.digest)

    def __eq__(self, other):
        if self is other:
            return True
        if not isinstance(other, LineageItem):
            return NotImplemented
        # Most comparisons end one level down, at cut items (a kept entry's item is cut: see
        # memphis.tiers.core.kept_form), compared inline (every hit compares its item); deeper traces
        # are walked iteratively, each shared pair once.
        below = _below(self, other)
        if below is None:
            return False
        stack = []
        for a, b in below:
            if a is b:
                continue
            if (a._digest or a.digest) != (b._digest or b.digest):
                return False
            if a.opcode != "cut" and b.opcode != "cut":
                stack.append((a, b))
        if not stack:
            return True
        seen = set()
        while stack:
            a, b = pair = stack.pop()
            if (id(a), id(b)) in seen:
                continue
            seen.add((id(a), id(b)))
            deeper = _below(*pair)
            if deeper is None:
                return False
            stack.extend(deeper)
        return True

    def __repr__(self):
        return f"LineageItem({self.opcode!r}, key={self.key[:12]}…, height={self.height})"


# (opcode, literals) -> the bytes the hash of an item starts with: the same few operations recur in
# every loop, and their repr is most of an item's hashing time. Never for raw arrays (a content
# digest that is not computed yet must not be forced by a dictionary lookup), and emptied when full.
_heads = {}
MAX_HEADS = 4096


def head_bytes(opcode: str, literals: tuple) -> bytes:
    """The bytes an item's hash starts with: its opcode and literals (see LineageItem.identity)."""
    if opcode == "array":
        return repr((opcode, literals)).encode()
    found = _heads.get((opcode, literals))
    if found is None:
        if len(_heads) >= MAX_HEADS:
            _heads.clear()
        found = _heads[(opcode, literals)] = repr((opcode, literals)).encode()
    return found


def _below(a: LineageItem, b: LineageItem):
    """None when ``a`` and ``b`` differ at their own level, else their input pairs still to compare."""
    if a is b:
        return ()
    if (a._digest or a.digest) != (b._digest or b.digest):  # the hash at hand, else made
        return None
    if a.opcode == "cut" or b.opcode == "cut":
        return ()  # below a cut only the hash is known
    if a.opcode != b.opcode or a.literals != b.literals or len(a.inputs) != len(b.inputs):
        return None
    return zip(a.inputs, b.inputs)


def bounded(item: LineageItem) -> LineageItem:
    """``item``, or its cut form when its trace has grown past MAX_TRACE_HEIGHT."""
    return item.cut() if item.height > MAX_TRACE_HEIGHT else item


# --- literals ------------------------------------------------------------------------------------

_INT = {int}


def literal(value):
    """A typed, hashable, exact form of a plain value (type name + value), or Untraceable.

    Examples
    --------
    >>> literal(0.1)
    ('float', '0.1')
    >>> literal(slice(None, 3))
    ('slice', (('NoneType', 'None'), ('int', '3'), ('NoneType', 'None')))
    """
    if value is None or value is Ellipsis or isinstance(value, (bool, int, float, complex, str, bytes)):
        if isinstance(value, float) and math.isnan(value):
            return ("float", "nan")
        return (type(value).__name__, repr(value))
    if value is np._NoValue:  # numpy's "argument not given" default
        return ("NoValue", "")
    if isinstance(value, np.generic):
        return ("numpy." + value.dtype.str, value.tobytes().hex())
    if isinstance(value, np.dtype):
        return ("dtype", value.str)
    if isinstance(value, type) and (value in (bool, int, float, complex) or issubclass(value, np.generic)):
        return ("type", np.dtype(value).str)
    if isinstance(value, slice):
        return ("slice", tuple(literal(v) for v in (value.start, value.stop, value.step)))
    if isinstance(value, (tuple, list)):
        if value and type(value[0]) is int and set(map(type, value)) == _INT:  # column lists, shapes
            return int_sequence(value)
        return (type(value).__name__, tuple(literal(v) for v in value))
    raise Untraceable(f"no literal form for {type(value).__name__}")


def int_sequence(value) -> tuple:
    """The literal of a non-empty list or tuple of ints (column lists, shapes, widths): their int64
    bytes (little-endian) in hex, which a column list of hundreds makes and hashes in microseconds;
    ints beyond int64 one by one."""
    try:
        packed = packed_ints("q", value)
    except OverflowError:
        return (type(value).__name__, tuple([literal(v) for v in value]))
    if sys.byteorder != "little":
        packed.byteswap()
    return (type(value).__name__, ("int64", packed.tobytes().hex()))


def int_sequence_values(form) -> list:
    """The ints of an int_sequence literal."""
    if form[1][0] != "int64":
        return [int(v) for _, v in form[1]]
    packed = packed_ints("q", bytes.fromhex(form[1][1]))
    if sys.byteorder != "little":
        packed.byteswap()
    return packed.tolist()


# --- leaves of raw data --------------------------------------------------------------------------

_content_memo = {}  # id(array) -> (weakref to it, layout, digest); entries leave when the array dies
_memo_lock = threading.Lock()


# A raw array at least this large is hashed when its key is first needed rather than when it is
# met, so that the first operation on it can run while it is hashed (about 6 ms per 160 MB).
LAZY_HASH_BYTES = 1 << 20


class ContentDigest:
    """The content hash of a raw array (see content_digest), computed once, on first use.

    It stands in an ``array`` leaf's literals in place of the hex digest and compares, hashes
    and prints as that digest, so a leaf keys alike whether its hash was computed early or late.
    """

    __slots__ = ("_array", "_remember", "_hex", "_lock")

    def __init__(self, array, remember):
        self._array, self._remember, self._hex = array, remember, None
        self._lock = threading.Lock()

    @property
    def done(self) -> bool:
        return self._hex is not None

    def hex(self) -> str:
        with self._lock:
            if self._hex is None:
                self._hex = numpy_backend.content_digest(self._array)
                if self._remember:
                    _remember(self._array, self._hex)
                self._array = None
        return self._hex

    def __eq__(self, other):
        return self.hex() == (other.hex() if isinstance(other, ContentDigest) else other)

    def __hash__(self):
        return hash(self.hex())

    def __repr__(self):
        return repr(self.hex())


def _layout(array):
    return array.__array_interface__["data"][0], array.shape, array.strides, array.dtype.str


def _remember(array, digest):
    oid = id(array)
    ref = weakref.ref(array, lambda _r, oid=oid: _content_memo.pop(oid, None))
    with _memo_lock:
        _content_memo[oid] = (ref, _layout(array), digest)


def array_leaf(array) -> LineageItem:
    """The leaf item of a raw numpy array: its content hash (shape, dtype, bytes; see content_digest).

    The hash is remembered for the object while nobody can write its bytes (it and its bases are
    read-only) and its layout (data pointer, shape, strides, dtype) is the one hashed. A writeable
    array is hashed anew each time it is met, at memory speed, so that a change in place is never
    missed; it is neither copied nor made read-only. From LAZY_HASH_BYTES on, the hash is computed
    when the leaf's key is first needed (ContentDigest).
    """
    if array.dtype.hasobject:
        raise Untraceable("an array of Python objects has no content hash")
    memo = numpy_backend.immutable(array)
    if memo:
        with _memo_lock:
            known = _content_memo.get(id(array))
        if known is not None and known[0]() is array and known[1] == _layout(array):
            return LineageItem("array", literals=(("xxh3", known[2]),))
    if array.nbytes >= LAZY_HASH_BYTES:
        return LineageItem("array", literals=(("xxh3", ContentDigest(array, memo)),))
    digest = numpy_backend.content_digest(array)
    if memo:
        _remember(array, digest)
    return LineageItem("array", literals=(("xxh3", digest),))


def bytes_leaf(kind: str, payload_digest: str) -> LineageItem:
    """The leaf item of a non-array value (a frame, a table, a Spark DataFrame) by its content key."""
    return LineageItem(kind, literals=(("key", payload_digest),))


# --- encoding arguments --------------------------------------------------------------------------

_PLAIN_TYPES = {type(None), bool, int, float, complex, str, bytes, type(np._NoValue)}


def encode(value, inputs: list):
    """The literal form of ``value`` with every data value in it replaced by ``("input", i)``.

    Data values (traced arrays, numpy arrays, pandas and Arrow data, Spark DataFrames) become items
    appended to ``inputs``; functions are encoded by :func:`function_identity`. Anything else
    without a literal form raises :class:`Untraceable`.
    """
    kind = type(value)  # the most common arguments first: this runs for every traced call
    if kind in _PLAIN_TYPES:
        return literal(value)
    if kind is slice:  # indexing: X[:, a:b]
        return ("slice", (literal(value.start), literal(value.stop), literal(value.step)))
    if kind is tuple or kind is list:
        if value and type(value[0]) is int and set(map(type, value)) == _INT:
            return int_sequence(value)
        return (kind.__name__, tuple([encode(v, inputs) for v in value]))
    item = getattr(value, "lineage", None)
    if not isinstance(item, LineageItem):
        item = _data_leaf(value)
    if item is not None:
        inputs.append(item)
        return ("input", len(inputs) - 1)
    if isinstance(value, (tuple, list)) and not isinstance(value, np.ndarray):
        return (type(value).__name__, tuple(encode(v, inputs) for v in value))
    if isinstance(value, dict):
        pairs = [(literal(k), v) for k, v in value.items()]
        pairs.sort(key=lambda kv: repr(kv[0]))
        return ("dict", tuple((k, encode(v, inputs)) for k, v in pairs))
    if callable(value) and not isinstance(value, type):
        return function_identity(value, inputs)
    return literal(value)


# Kinds of data that a layer above knows, as (is_kind(value), leaf(value)): memphis.spark.keys adds
# Spark DataFrames (by their JVM lineage key), which tracing itself never imports.
_leaf_kinds = []


def register_leaf(is_kind, leaf):
    """Declares the values for which ``is_kind(value)`` holds data, keyed by the item ``leaf(value)``
    (which raises :class:`Untraceable` for a value of that kind without a key)."""
    _leaf_kinds.append((is_kind, leaf))


def _data_leaf(value):
    """The leaf item of a raw data value, None for a value that is not data."""
    if isinstance(value, numpy_backend.ARRAY_TYPES):
        return array_leaf(value)
    device = device_backend.device_of(value)
    if device is not None:  # hashed through a host copy: the key of the same data on the host
        return array_leaf(device.copy_to_host(value))
    module = type(value).__module__
    if module.startswith("pandas"):
        import pandas as pd

        if isinstance(value, (pd.DataFrame, pd.Series, pd.Index)):
            h = xxhash.xxh3_128(pd.util.hash_pandas_object(value, index=not isinstance(value, pd.Index)).to_numpy())
            frame = value.to_frame() if isinstance(value, (pd.Series, pd.Index)) else value
            h.update(repr((type(value).__name__, list(frame.columns), [str(t) for t in frame.dtypes],
                           frame.index.names, str(frame.index.dtype))).encode())
            return bytes_leaf("pandas", h.hexdigest())
    if module.startswith("pyarrow"):
        import pyarrow as pa

        if isinstance(value, (pa.Table, pa.RecordBatch)):
            sink = pa.BufferOutputStream()  # the IPC stream is canonical: slices and chunking aside, same bytes
            with pa.ipc.new_stream(sink, value.schema) as writer:
                writer.write(value)
            return bytes_leaf("arrow", xxhash.xxh3_128(sink.getvalue()).hexdigest())
    for is_kind, leaf in _leaf_kinds:
        if is_kind(value):
            return leaf(value)
    return None


def function_identity(function, inputs: list):
    """A function as a literal: module, qualified name, a hash of its code, and its closure's values."""
    if isinstance(function, np.ufunc):
        return ("ufunc", function.__name__)
    code = getattr(function, "__code__", None)
    if code is None:
        if type(function).__name__ == "builtin_function_or_method":
            return ("builtin", function.__module__ or "", function.__qualname__)
        raise Untraceable(f"cannot identify the callable {function!r}")
    closure = tuple(encode(cell.cell_contents, inputs) for cell in function.__closure__ or ())
    defaults = encode((function.__defaults__, function.__kwdefaults__), inputs)
    return ("function", function.__module__, function.__qualname__, code_digest(code), closure, defaults)


_code_digests = weakref.WeakKeyDictionary()


def code_digest(code) -> str:
    """A hash of bytecode, names and constants, nested code objects included (memoized per code object)."""
    known = _code_digests.get(code)
    if known is None:
        h = hashlib.blake2b(digest_size=16)
        h.update(code.co_code)
        h.update(repr(code.co_names).encode())
        for const in code.co_consts:
            h.update(_constant_form(const).encode())
        known = _code_digests[code] = h.hexdigest()
    return known


def _constant_form(const) -> str:
    """A code constant as text that is the same in every process: a frozenset (``x in {"a", "b"}``)
    prints in an order that the process's string-hash seed decides, so its elements are sorted."""
    if hasattr(const, "co_code"):
        return code_digest(const)
    if isinstance(const, frozenset):
        return "frozenset(" + repr(sorted(_constant_form(c) for c in const)) + ")"
    if isinstance(const, tuple):
        return "(" + ", ".join(_constant_form(c) for c in const) + ",)"
    return repr(const)
