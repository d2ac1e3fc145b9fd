"""Partial reuse (LIMA): products served from cached products of their parts, proven equal.

- A column selection's products are cut from its source's: ``X[:, c]ᵀ X[:, c] = (XᵀX)[c][:, c]``,
  ``X[:, c]ᵀ y = (Xᵀy)[c]`` (column_selection_product).
- Concatenations: rows appended, ``[L1; L2]ᵀ[R1; R2] = Σ Liᵀ Ri``, so every fold's training set
  sums the same per-part Grams; columns appended, the block matrix ``[Liᵀ Rj]`` (crossproduct).
  ``[A1 A2] @ w = A1 @ w1 + A2 @ w2`` and ``[A1; A2] @ w = [A1 @ w; A2 @ w]`` (blockwise_product).
- Column prefixes: ``A @ B`` where ``B``'s first columns equal an earlier right operand ``C`` of
  ``A`` (compared value by value) is ``[A @ C | A @ B[:, w:]]``, assembled from blocks; where
  ``B`` equals ``C``'s first columns it is ``(A @ C)[:, :k]``, a column selection of it
  (prefix_product). So a sweep over K reuses the projection of every smaller or larger K.
- Through a held Gram matrix: ``Z = A @ B`` (A n×d, n ≫ d) is left unmade while ``AᵀA`` is held
  (unmade_product); its uses go through A: ``ZᵀZ = Bᵀ(AᵀA)B``, ``Zᵀy = Bᵀ(Aᵀy)`` with ``Aᵀy``
  cached for every B (product_crossproduct), ``Z @ w = A @ (Bw)`` (associative_product), each
  taken when it costs fewer multiply-adds than the direct product (making Z included). So a PCA
  sweep over K reads A once per K (for ``Z @ w``) instead of once per product.

The rewrites take traced arrays (array.py) as they come, by their ``lineage``, shape and value,
and never make a deferred array (a gather, a concatenation) they can answer from its parts. What
they remember is a part of the traced arrays' Runtime (Rewrites), emptied by its clear().
"""
import collections
import logging
import threading
import time
import weakref

import numpy as np

from memphis.backends import numpy_backend
from memphis.tiers.runtime import Runtime
from memphis.tracing.calls import (cached, held, is_plain_transpose, product_item, started_early, trace_item,
                                   transpose_item)
from memphis.tracing.lineage import LineageItem, encode, int_sequence_values, literal

log = logging.getLogger("memphis.local")

# Products of at least this many multiply-adds look for an earlier product with a column prefix
# (below it, comparing the right operands costs as much as the product itself).
PREFIX_MIN_WORK = 1 << 20
# Below this many multiply-adds (a few µs of BLAS) no rewrite is asked for: it could save at most
# the product's own time, and asking takes about 5 µs.
REWRITE_MIN_WORK = 1 << 14
# The right operands one Runtime keeps to compare prefixes with, all together: a budget of their own,
# beside the host tier's (they are copies of operands, not results; the tier never sees them).
MAX_PREFIX_BYTES = 16 << 20
MAX_COMPOSITIONS = 1024


class Rewrites:
    """What the rewrites of one Runtime remember (its part "rewrites"); :meth:`clear` forgets it all.

    All guarded by ``lock``. Column selections: id of the selection's item -> (that item, the
    source's item, the columns, a weak reference to the source array or None), while the selection
    lives (the entry holds the item, so no other object takes its id meanwhile). By identity,
    because noting a selection must not force its source's content hash (the first product then
    runs while the source is hashed, see started_early); an item whose key was known when it was
    noted is found by its key too (a cut trace meets it as another object). Compositions: the key
    of a product assembled from column blocks -> ((block item, width), ...), at most
    MAX_COMPOSITIONS. Prefix products: the left operand's key -> [_Product], whose right operands
    take at most MAX_PREFIX_BYTES (``prefix_bytes``); oldest forgotten first.
    """

    def __init__(self):
        self.lock = threading.Lock()
        self.selections = {}
        self.selections_by_key = {}
        self.compositions = collections.OrderedDict()
        self.products = collections.OrderedDict()
        self.prefix_bytes = 0

    def clear(self):
        with self.lock:
            self.selections.clear()
            self.selections_by_key.clear()
            self.compositions.clear()
            self.products.clear()
            self.prefix_bytes = 0

    def forget_selection(self, identity, key):
        with self.lock:
            entry = self.selections.pop(identity, None)
            if entry is not None and key is not None and self.selections_by_key.get(key) is entry:  # not cleared since
                del self.selections_by_key[key]

    def remember_product(self, left_key: str, product: "_Product"):
        with self.lock:
            self.products.setdefault(left_key, []).append(product)
            self.products.move_to_end(left_key)
            self.prefix_bytes += product.right.nbytes
            while self.prefix_bytes > MAX_PREFIX_BYTES and self.products:
                oldest = next(iter(self.products))
                forgotten = self.products[oldest].pop(0)
                self.prefix_bytes -= forgotten.right.nbytes
                if not self.products[oldest]:
                    del self.products[oldest]


def rewrites_of(runtime: Runtime) -> Rewrites:
    """What the rewrites remember in ``runtime``."""
    return runtime.part("rewrites", Rewrites)


def selected_columns(source, index):
    """The columns ``source[index]`` picks when index is ``[:, list or int array]`` of a 2-D array, else None."""
    # isinstance first: an index array (plain or traced) compares elementwise with a slice.
    if not (type(index) is tuple and len(index) == 2 and isinstance(index[0], slice) and index[0] == slice(None)
            and source.ndim == 2):
        return None
    columns = np.asarray(index[1])
    if columns.ndim != 1 or columns.dtype.kind not in "iu" or not len(columns):
        return None
    width = source.shape[1]
    if columns.min() < -width or columns.max() >= width:
        return None  # out of range: numpy's IndexError, from the plain getitem
    return tuple((columns % width).tolist())


def note_column_selection(source, columns, selected, *, source_item=None):
    """Remembers that ``selected`` is ``source[:, columns]`` (``source`` a traced array, or None with
    the source's ``source_item`` when only its cached products can serve)."""
    item = selected.lineage
    key = None if item.pending else item.key
    ref = weakref.ref(source) if source is not None else None
    picked = np.array(columns, dtype=np.intp)  # an index array: take() gathers 3× faster than np.ix_
    picked.flags.writeable = False
    entry = (item, source.lineage if source is not None else source_item, picked, ref)
    rewrites = rewrites_of(selected.runtime)
    with rewrites.lock:
        rewrites.selections[id(item)] = entry
        if key is not None:
            rewrites.selections_by_key[key] = entry
    weakref.finalize(selected, rewrites.forget_selection, id(item), key)


def _selection(item: LineageItem, rewrites: Rewrites):
    """(source item, columns, source array or None) when ``item`` is a known column selection, else None."""
    if not rewrites.selections:  # none noted (read under the GIL): every product asks
        return None
    with rewrites.lock:
        known = rewrites.selections.get(id(item))
    if known is None and not item.pending:
        with rewrites.lock:
            known = rewrites.selections_by_key.get(item.key)
    return None if known is None else (known[1], known[2], known[3]() if known[3] is not None else None)


def column_selection_product(item: LineageItem, left_item: LineageItem, right, runtime: Runtime):
    """``P[:, a]ᵀ R`` as ``(PᵀR)[a]``, and ``P[:, a]ᵀ P[:, b]`` as ``(PᵀP)[a][:, b]``: (value,
    held), or None.

    Taken when the product of the source P is cached (a partial hit) or, while P lives, costs at
    most twice the direct product (then it is computed, cached, and serves every later selection).
    """
    rewrites = rewrites_of(runtime)
    left = _selection(left_item, rewrites)
    if left is None:
        return None
    source_item, a, source = left
    right_item = getattr(right, "lineage", None)  # a traced array's
    right_selection = _selection(right_item, rewrites) if right_item is not None else None
    if right_selection is not None and right_selection[0] == source_item:  # identical first: no hash forced
        b = right_selection[1]
        other_item, other = source_item, source
        direct, through_source = len(a) * len(b), (source.shape[1] ** 2 if source is not None else None)
    elif right_item is not None and right.ndim in (1, 2) and (source is None or right.shape[0] == source.shape[0]):
        b = None
        other_item, other = right_item, right
        direct, through_source = len(a), (source.shape[1] if source is not None else None)
    else:
        return None
    whole = product_item(transpose_item(source_item), other_item)
    tier = runtime.host()
    start = time.perf_counter()
    if source is None:  # only the source's cached product can serve: never computed here
        found = tier.peek(whole.key, item=whole)
        if found is None:
            return None
        product, reused = found[0], True
    else:
        compute = lambda: np.asarray(source).T @ np.asarray(other)  # noqa: E731
        if through_source <= 2 * direct:
            compute = started_early(whole, compute, runtime)  # while P is hashed, if it is
        reused = held(whole, runtime)
        if not reused and through_source > 2 * direct:
            return None
        product, _ = cached(whole, compute, runtime=runtime)
    value = product.take(a, axis=0) if b is None else product.take(a, axis=0).take(b, axis=1)
    if reused:
        tier.count("partial_hits")
        log.debug("partial hit %s: a selection of the cached product %s", item.key, whole.key)
    return _answer(item, value, time.perf_counter() - start, runtime)


def _answer(item: LineageItem, value, seconds: float, runtime: Runtime):
    """(value, held) of a rewrite's result, which took ``seconds`` to derive: kept by the rule of
    traced results (HostTier.worth_caching_s), as the direct product would have been, so that a cut
    from a held product that is cheaper to cut again than to hold is not held."""
    value = runtime.host().get_or_compute(item.key, lambda: value, item=item, cost_hint=seconds, min_cost_s=None)
    return value, held(item, runtime)


def product_work(left, right) -> int:
    """The multiply-adds of ``left @ right``, 0 for shapes no rewrite takes: the rewrites are asked
    from REWRITE_MIN_WORK on, those over a column prefix or through a held Gram matrix
    (prefix_product, unmade_product) from PREFIX_MIN_WORK on."""
    left_shape, right_shape = left.shape, getattr(right, "shape", ())
    if len(left_shape) != 2 or len(right_shape) not in (1, 2):
        return 0
    return left_shape[0] * left_shape[1] * (right_shape[1] if len(right_shape) == 2 else 1)


CONCATENATIONS = (np.concatenate, np.hstack, np.vstack, np.column_stack)


def canonical_concatenation(function, args, kwargs):
    """One item for every spelling of a 1-D/2-D concatenation along axis 0 or 1, or None.

    ``np.hstack((X, v))``, ``np.column_stack((X, v))`` and ``np.concatenate((X, v), axis=1)`` of
    2-D parts are the same value, so they get the same item, which records the parts' widths.
    """
    if function not in CONCATENATIONS or len(args) != 1:
        return None
    if set(kwargs) - ({"axis"} if function is np.concatenate else set()):
        return None
    parts = args[0]
    if not isinstance(parts, (tuple, list)) or not parts:
        return None
    ndims = {np.ndim(p) for p in parts}
    if len(ndims) != 1 or ndims & {0} or ndims - {1, 2}:
        return None
    ndim = ndims.pop()
    if function is np.concatenate:
        axis = kwargs.get("axis", 0)
    elif function is np.hstack:
        axis = 0 if ndim == 1 else 1
    elif ndim == 2:
        axis = 0 if function is np.vstack else 1
    else:
        return None  # vstack and column_stack of vectors make new axes
    if not isinstance(axis, int) or not 0 <= axis < ndim:
        return None
    inputs = []
    encode(tuple(parts), inputs)
    widths = tuple(int(np.shape(p)[axis]) for p in parts)
    return LineageItem("concatenate", inputs=inputs, literals=(literal(axis), literal(widths)))


def literal_axis(item: LineageItem) -> int:
    """The axis of a concatenation item (see canonical_concatenation)."""
    return int(item.literals[0][1])


def sections(item: LineageItem, axis: int, rewrites: Rewrites):
    """[(part item, slice along axis)] when ``item`` concatenates along ``axis`` (a concatenation, or a
    product assembled from column blocks), else None."""
    if item.opcode == "concatenate":
        if item.literals[0] != literal(axis):
            return None
        parts = zip(item.inputs, int_sequence_values(item.literals[1]))
    else:
        # Noted under computed keys: a pending one's is not forced.
        if axis != 1 or not rewrites.compositions or item.pending:
            return None
        with rewrites.lock:
            composed = rewrites.compositions.get(item.key)
        if composed is None:
            return None
        parts = composed
    found, start = [], 0
    for part, width in parts:
        found.append((part, slice(start, start + width)))
        start += width
    return found


def _take(value, axis, where):
    return value[where] if axis == 0 else value[:, where]


def _pieces(array, axis, parts):
    """[(part item, part value)] of ``array`` along ``axis``: a deferred array's own parts, so that
    the whole is never made, else slices of its value."""
    own = getattr(array, "parts", None)
    if own is not None and getattr(array, "axis", None) == axis and len(own) == len(parts):
        return [(p, np.asarray(value)) for (p, _), value in zip(parts, own)]
    whole = np.asarray(array)
    return [(p, _take(whole, axis, where)) for p, where in parts]


def crossproduct(item: LineageItem, left_t, right):
    """``Lᵀ R`` from products of the parts of L and R when either is a concatenation, else None.

    Row-appended (``L = [L1; L2]``, ``R = [R1; R2]``, same splits): ``Σ Liᵀ Ri``; column-appended:
    the block matrix ``[Liᵀ Rj]`` (``[X v]ᵀ[X v]`` from ``XᵀX``, ``Xᵀv``, ``vᵀv``; a ones column is
    just a part). Each block is an ordinary traced product: probed, computed once, cached, so it
    serves the next request too. Counted as a partial hit when some block came from the cache.
    ``left_t`` is a traced array, ``right`` a traced or plain one; returns (value, held) or None.
    Asked only for a product without an entry (TracedArray.__array_ufunc__ probes first): a full hit,
    or a computation under way, is better than any rewrite.
    """
    right_ndim = getattr(right, "ndim", None)
    if left_t.lineage.opcode != "transpose" or left_t.ndim != 2 or right_ndim not in (1, 2):
        return None
    left_item, right_item = left_t.lineage.inputs[0], item.inputs[1]
    runtime = left_t.runtime
    rewrites = rewrites_of(runtime)
    source = getattr(left_t, "source", None)  # L of a deferred Lᵀ: its parts, not its value
    in_parts = source is not None or bool(rewrites.compositions) or left_item.opcode == "concatenate" \
        or right_item.opcode == "concatenate"
    if not in_parts and not rewrites.selections:
        return None  # the common product: told before anything is looked up
    if not is_plain_transpose(left_t.lineage):
        return None  # a transpose with explicit axes
    selected = column_selection_product(item, left_item, right, runtime)
    if selected is not None or not in_parts:
        return selected
    tier = runtime.host()
    through_factors = product_crossproduct(item, source, right) if getattr(source, "factors", None) else None
    if through_factors is not None:
        return through_factors
    rows = sections(left_item, 0, rewrites), sections(right_item, 0, rewrites)
    summed = bool(rows[0] and rows[1] and [s for _, s in rows[0]] == [s for _, s in rows[1]])
    columns = None if summed else (sections(left_item, 1, rewrites),
                                   sections(right_item, 1, rewrites) if right_ndim == 2 else None)
    if not summed and not columns[0] and not columns[1]:
        return None
    left = source if source is not None else np.asarray(left_t).T
    gram = left_item == right_item
    if summed:
        pairs = [[pair] for pair in zip(_pieces(left, 0, rows[0]), _pieces(right, 0, rows[1]))]
    else:
        lefts = _pieces(left, 1, columns[0]) if columns[0] else [(left_item, np.asarray(left))]
        rights = _pieces(right, 1, columns[1]) if columns[1] else [(right_item, np.asarray(right))]
        pairs = [[(p, q) for q in rights] for p in lefts]

    start, reused, blocks = time.perf_counter(), 0, []
    for i, row in enumerate(pairs):
        blocks.append([])
        for j, ((p, p_value), (q, q_value)) in enumerate(row):
            if gram and len(row) > 1 and j < i:
                blocks[i].append(blocks[j][i].T)  # (Xᵀv)ᵀ = vᵀX: a Gram matrix is symmetric
                continue
            block_item = product_item(transpose_item(p), q)
            compute = started_early(block_item, lambda a=p_value.T, b=q_value: a @ b, runtime)
            reused += tier.state_of(block_item.key) is not None
            blocks[i].append(cached(block_item, compute, runtime=runtime)[0])
    if summed:
        value = sum(row[0] for row in blocks)  # row-appended: a sum of the parts' products
    elif right_ndim == 1:
        value = np.concatenate([row[0] for row in blocks])
    else:
        value = np.block(blocks)
    elapsed = time.perf_counter() - start
    if reused:
        tier.count("partial_hits")
        log.debug("partial hit %s: %d of %d blocks reused", item.key, reused, sum(map(len, pairs)))
    return _answer(item, value, elapsed, runtime)


def blockwise_product(left, right):
    """How to compute ``left @ right`` from the parts of a deferred concatenation ``left`` without
    making it (``[A1 A2] @ w = A1 @ w1 + A2 @ w2``, ``[A1; A2] @ w = [A1 @ w; A2 @ w]``), or None."""
    if not getattr(left, "deferred", False) or left.ndim != 2 or getattr(right, "ndim", None) not in (1, 2):
        return None
    rewrites = rewrites_of(left.runtime)
    for axis in (0, 1):
        parts = sections(left.lineage, axis, rewrites)
        if parts:
            break
    else:
        return None

    def compute():
        pieces = _pieces(left, axis, parts)
        other = np.asarray(right)
        if axis == 0:
            return np.concatenate([value @ other for _, value in pieces])
        return sum(value @ other[where] for (_, value), (_, where) in zip(pieces, parts))
    return compute


class _Product:
    """A product ``A @ C`` of a left operand A: C's value and the column blocks it is made of,
    each (block item, the right operand it was computed from, its columns there)."""

    __slots__ = ("right", "blocks")

    def __init__(self, right, blocks):
        self.right, self.blocks = right, blocks


def prefix_product(item: LineageItem, left, right):
    """``left @ right`` from ``left``'s earlier products whose right operands share a column prefix
    with ``right`` (compared value by value), or None (then it is computed directly, and remembered).

    Returns ("blocks", [(block item, value)]): the product is the blocks side by side (never made
    unless read; see DeferredArray); or ("columns", value, source item, k): the first k columns of
    the cached product of that item (a column selection of it).
    """
    if getattr(right, "ndim", None) != 2 or left.ndim != 2 or left.shape[1] != right.shape[0] \
            or right.shape[0] >= left.shape[0] or right.nbytes > MAX_PREFIX_BYTES // 16 \
            or left.shape[0] * right.size < PREFIX_MIN_WORK or getattr(right, "deferred", False):
        return None  # only a tall A times a narrow B (a projection), whose B is cheap to compare
    runtime = left.runtime
    rewrites = rewrites_of(runtime)
    tier = runtime.host()
    if tier.state_of(item.key) is not None:
        return None  # a full hit (or a computation under way) is better than any rewrite
    b = np.asarray(right)
    if not numpy_backend.immutable(b):
        b = b.copy()  # compared with later operands: a plain array may change in place
    k = b.shape[1]
    with rewrites.lock:
        products = list(rewrites.products.get(left.lineage.key, ()))
    longer = shorter = None  # the narrowest product at least as wide, the widest narrower one
    for product in products:
        c = product.right
        if c.shape[0] != b.shape[0] or c.dtype != b.dtype:
            continue
        width = c.shape[1]
        if width >= k and np.array_equal(c[:, :k], b) and (longer is None or width < longer.right.shape[1]):
            longer = product
        elif width < k and np.array_equal(b[:, :width], c) and (shorter is None or width > shorter.right.shape[1]):
            shorter = product
    if longer is not None and longer.right.shape[1] == k:
        if len(longer.blocks) == 1:
            return None  # the same product, computed whole: a full hit
        blocks = longer.blocks  # the same product, assembled before
    elif longer is not None and len(longer.blocks) == 1 and held(longer.blocks[0][0], runtime):
        source_item = longer.blocks[0][0]
        whole = cached(source_item, lambda: np.asarray(left) @ longer.right, runtime=runtime)[0]
        tier.count("partial_hits")
        log.debug("partial hit %s: the first %d columns of the cached product %s", item.key, k, source_item.key)
        return "columns", whole[:, :k], source_item, k
    elif shorter is None:
        rewrites.remember_product(left.lineage.key, _Product(b, ((item, b, slice(0, k)),)))
        return None
    else:
        width = shorter.right.shape[1]
        extension = trace_item("getitem", (right, (slice(None), slice(width, k))))
        blocks = shorter.blocks + ((product_item(left.lineage, extension), b, slice(width, k)),)
        rewrites.remember_product(left.lineage.key, _Product(b, blocks))
        with rewrites.lock:
            rewrites.compositions[item.key] = tuple((block, where.stop - where.start) for block, _, where in blocks)
            while len(rewrites.compositions) > MAX_COMPOSITIONS:
                rewrites.compositions.popitem(last=False)
    values, reused = [], 0
    for block_item, source, where in blocks:
        reused += held(block_item, runtime)
        values.append((block_item, cached(block_item, lambda s=source, w=where: np.asarray(left) @ s[:, w],
                                          runtime=runtime)[0]))
    if reused:
        tier.count("partial_hits")
        log.debug("partial hit %s: %d of %d column blocks reused", item.key, reused, len(blocks))
    return "blocks", values


def gram_of(item: LineageItem) -> LineageItem:
    """The item of ``AᵀA`` for ``A`` of ``item``."""
    return product_item(transpose_item(item), item)


def unmade_product(item: LineageItem, left, right):
    """The right operand to keep for ``left @ right`` when the product is better left unmade (a
    copy of a plain writeable one, so that a change in place never reaches it), else None.

    Left unmade when ``AᵀA`` of the left operand A (n×d) is held and its Gram matrix is cheaper
    through it (``Bᵀ(AᵀA)B``, d²k + dk² multiply-adds, against nk²: A much taller than wide), for
    products of at least PREFIX_MIN_WORK multiply-adds. The uses of a projection (its Gram matrix,
    ``Zᵀy``, ``Z @ w``) are then answered through A (product_crossproduct, associative_product).
    """
    if getattr(right, "ndim", None) != 2 or left.ndim != 2 or left.shape[1] != right.shape[0] \
            or getattr(right, "deferred", False):
        return None
    (n, d), k = left.shape, right.shape[1]
    if n * d * k < PREFIX_MIN_WORK or d * d * k + d * k * k >= n * k * k:
        return None
    if np.result_type(left.dtype, right.dtype) != left.dtype:
        return None  # B of a wider dtype: the product is computed in it, AᵀA was in A's narrower one
    if left.runtime.host().state_of(item.key) is not None or not held(gram_of(left.lineage), left.runtime):
        return None  # a full hit (or a computation under way) is better than any rewrite
    b = np.asarray(right)
    return b if numpy_backend.immutable(b) else b.copy()


def product_crossproduct(item: LineageItem, product, right):
    """``(AB)ᵀ R`` as ``Bᵀ(AᵀR)``, and ``(AB)ᵀ(AC)`` as ``Bᵀ(AᵀA)C``: (value, held), or None.

    ``product`` is a deferred ``A @ B`` (see unmade_product; made since, or not). The inner
    product ``AᵀR`` (or ``AᵀA``) is an ordinary traced product, cached, so every B of a sweep over
    K shares it; taken when cheaper than the direct product (making ``AB`` first if it is unmade).
    Counted as a partial hit when the inner product came from the cache.
    """
    a, b = product.factors
    runtime = product.runtime
    right_factors = getattr(right, "factors", None)
    c = right_factors[1] if right_factors is not None and right_factors[0].lineage == a.lineage else None
    inner = gram_of(a.lineage) if c is not None else product_item(transpose_item(a.lineage), item.inputs[1])
    (n, d), k = a.shape, b.shape[1]
    m = right.shape[1] if right.ndim == 2 else 1
    direct = n * k * m + (n * d * k if product.deferred else 0)  # making the product first, while unmade
    if c is not None and right is not product and right.deferred:
        direct += n * d * m  # and the other one
    inner_width = d if c is not None else m
    reused = held(inner, runtime)
    through = (0 if reused else n * d * inner_width) + k * d * inner_width + (k * d * m if c is not None else 0)
    if through >= direct:
        return None
    start = time.perf_counter()
    other = a if c is not None else right
    inner_value, _ = cached(inner, lambda: np.asarray(a).T @ np.asarray(other), runtime=runtime)
    value = np.asarray(b).T @ inner_value
    if c is not None:
        value = value @ np.asarray(c)
        if right.lineage == product.lineage:  # a Gram matrix: symmetric, as the direct product (syrk) makes it
            value = np.triu(value) + np.triu(value, 1).T
    if reused:
        runtime.host().count("partial_hits")
        log.debug("partial hit %s: through the cached product %s", item.key, inner.key)
    return _answer(item, value, time.perf_counter() - start, runtime)


def associative_product(left, right):
    """How to compute ``(AB) @ W`` as ``A @ (BW)`` for an unmade product ``left = A @ B`` (see
    unmade_product) when that is cheaper than making it, or None."""
    factors = getattr(left, "factors", None)
    if factors is None or not left.deferred or getattr(right, "ndim", None) not in (1, 2):
        return None
    a, b = factors
    (n, d), k = a.shape, b.shape[1]
    m = right.shape[1] if right.ndim == 2 else 1
    if d * k * m + n * d * m >= n * d * k + n * k * m:
        return None
    return lambda: np.asarray(a) @ (b @ np.asarray(right))
