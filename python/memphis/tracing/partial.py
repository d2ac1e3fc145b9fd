"""Partial reuse (LIMA): products of concatenated matrices assembled from cached products of their parts.

The rewrites take traced arrays (array.py) as they come, by their ``lineage`` and ``np.asarray``
value, and return (value, held) for array.py to wrap.
"""
import logging
import threading
import time
import weakref

import numpy as np

from memphis.tiers.runtime import default
from memphis.tracing.calls import cached, held, product_item, transpose_item
from memphis.tracing.lineage import LineageItem, encode, literal

log = logging.getLogger("memphis.local")

# Column selections ``P[:, cols]`` -> (their source P, cols), while P lives: a product of selections
# is then cut from the product of P (``P[:, a]ᵀ P[:, b] = (PᵀP)[a, b]``). Keyed by the selection's key.
_selections = {}
_selections_lock = threading.Lock()


def note_column_selection(source, index, selected):
    """Remembers where ``selected = source[index]`` came from when index picks columns ``[:, list]``."""
    # isinstance first: an index array (plain or traced) compares elementwise with a slice.
    if not (type(index) is tuple and len(index) == 2 and isinstance(index[0], slice) and index[0] == slice(None)
            and source.ndim == 2):
        return
    columns = np.asarray(index[1])
    if columns.ndim != 1 or columns.dtype.kind not in "iu" or not len(columns):
        return
    key, ref = selected.lineage.key, weakref.ref(source)
    columns = tuple(int(c) % source.shape[1] for c in columns)
    with _selections_lock:
        _selections[key] = (ref, columns)
    weakref.finalize(source, _selections.pop, key, None)


def _selection(item: LineageItem):
    """(source traced array, columns) when ``item`` is a column selection whose source lives, else None."""
    with _selections_lock:
        known = _selections.get(item.key)
    source = known[0]() if known else None
    return (source, known[1]) if source is not None else None


def column_selection_product(item: LineageItem, left_item: LineageItem, right):
    """``P[:, a]ᵀ R`` as ``(PᵀR)[a]``, and ``P[:, a]ᵀ P[:, b]`` as ``(PᵀP)[a][:, b]``: (value,
    held), or None.

    Taken when the product of the source P is cached (a partial hit) or costs at most twice the
    direct product (then it is computed, cached, and serves every later selection of P).
    """
    left = _selection(left_item)
    if left is None:
        return None
    source, a = left
    right_item = getattr(right, "lineage", None)  # a traced array's
    right_selection = _selection(right_item) if right_item is not None else None
    if right_selection is not None and right_selection[0].lineage.key == source.lineage.key:
        b = right_selection[1]
        other, direct, through_source = source, len(a) * len(b), source.shape[1] ** 2
    elif right_item is not None and right.ndim in (1, 2) and right.shape[0] == source.shape[0]:
        b = None
        other, direct, through_source = right, len(a), source.shape[1]
    else:
        return None
    whole = product_item(transpose_item(source.lineage), other.lineage)
    tier = default.host()
    reused = held(whole)
    if not reused and through_source > 2 * direct:
        return None
    start = time.perf_counter()
    product, _ = cached(whole, lambda: np.asarray(source).T @ np.asarray(other))
    value = product[list(a)] if b is None else product[np.ix_(a, b)]
    if reused:
        tier.count("partial_hits")
        log.debug("partial hit %s: a selection of the cached product %s", item.key, whole.key)
    value = tier.get_or_compute(item.key, lambda: value, item=item, cost_hint=time.perf_counter() - start)
    return value, held(item)


def canonical_concatenation(function, args, kwargs):
    """One item for every spelling of a 1-D/2-D concatenation along axis 0 or 1, or None.

    ``np.hstack((X, v))``, ``np.column_stack((X, v))`` and ``np.concatenate((X, v), axis=1)`` of
    2-D parts are the same value, so they get the same item, which records the parts' widths.
    """
    if function not in (np.concatenate, np.hstack, np.vstack, np.column_stack) or len(args) != 1:
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


def sections(item: LineageItem, axis: int):
    """[(part item, slice along axis)] when ``item`` concatenates along ``axis``, else None."""
    if item.opcode != "concatenate" or item.literals[0] != literal(axis):
        return None
    bounds = np.cumsum([0] + [int(w) for _, w in item.literals[1][1]])
    return [(part, slice(bounds[i], bounds[i + 1])) for i, part in enumerate(item.inputs)]


def _take(value, axis, where):
    return value[where] if axis == 0 else value[:, where]


def crossproduct(item: LineageItem, left_t, right):
    """``Lᵀ R`` from products of the parts of L and R when either is a concatenation, else None.

    Row-appended (``L = [L1; L2]``, ``R = [R1; R2]``, same splits): ``Σ Liᵀ Ri``; column-appended:
    the block matrix ``[Liᵀ Rj]`` (``[X v]ᵀ[X v]`` from ``XᵀX``, ``Xᵀv``, ``vᵀv``; a ones column is
    just a part). Each block is an ordinary traced product: probed, computed once, cached, so it
    serves the next request too. Counted as a partial hit when some block came from the cache.
    ``left_t`` is a traced array, ``right`` a traced or plain one; returns (value, held) or None.
    """
    tier = default.host()
    if tier.state_of(item.key) is not None:
        return None  # a full hit (or a computation under way) is better than any rewrite
    left = np.asarray(left_t).T
    right_value = np.asarray(right)
    if left_t.ndim != 2 or right_value.ndim not in (1, 2) or left_t.lineage.opcode != "transpose":
        return None
    left_item, right_item = left_t.lineage.inputs[0], item.inputs[1]
    if transpose_item(left_item) != left_t.lineage:
        return None  # a transpose with explicit axes
    selected = column_selection_product(item, left_item, right)
    if selected is not None:
        return selected
    rows = sections(left_item, 0), sections(right_item, 0)
    gram = left_item == right_item
    if rows[0] and rows[1] and [s for _, s in rows[0]] == [s for _, s in rows[1]]:
        summed = True
        pairs = [[((p, _take(left, 0, s)), (q, _take(right_value, 0, s)))] for (p, s), (q, _) in zip(*rows)]
    else:
        left_parts = sections(left_item, 1) or [(left_item, slice(None))]
        right_parts = (sections(right_item, 1) if right_value.ndim == 2 else None) or [(right_item, slice(None))]
        if len(left_parts) == len(right_parts) == 1:
            return None
        summed = False
        pairs = [[((p, _take(left, 1, s)), (q, right_value if right_value.ndim == 1 else _take(right_value, 1, t)))
                  for q, t in right_parts] for p, s in left_parts]

    start, reused, blocks = time.perf_counter(), 0, []
    for i, row in enumerate(pairs):
        blocks.append([])
        for j, ((p, p_value), (q, q_value)) in enumerate(row):
            if gram and len(row) > 1 and j < i:
                blocks[i].append(blocks[j][i].T)  # (Xᵀv)ᵀ = vᵀX: a Gram matrix is symmetric
                continue
            block_item = product_item(transpose_item(p), q)
            reused += tier.state_of(block_item.key) is not None
            blocks[i].append(cached(block_item, lambda a=p_value.T, b=q_value: a @ b)[0])
    if summed:
        value = sum(row[0] for row in blocks)  # row-appended: a sum of the parts' products
    elif right_value.ndim == 1:
        value = np.concatenate([row[0] for row in blocks])
    else:
        value = np.block(blocks)
    elapsed = time.perf_counter() - start
    if reused:
        tier.count("partial_hits")
        log.debug("partial hit %s: %d of %d blocks reused", item.key, reused, sum(map(len, pairs)))
    value = tier.get_or_compute(item.key, lambda: value, item=item, cost_hint=elapsed)
    return value, held(item)
