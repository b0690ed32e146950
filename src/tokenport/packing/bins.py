"""Bin packing of sequences into fixed-capacity bins: best fit, first fit and next fit, decreasing.

Every packer takes ``lengths`` (token counts, one per item) and a bin ``capacity`` in tokens,
cuts the items into pieces, sorts the pieces longest first (ties by item id, then offset:
stable and deterministic) and places them one by one. A piece is ``(item, offset, length)``:
tokens ``[offset, offset + length)`` of item ``item``. Without ``split_long`` every item is one
piece and an item longer than ``capacity`` is a ConfigError. With ``split_long=True`` (bfd_split,
Ding et al. 2024, "Fewer Truncations Improve Language Modeling") an item longer than
``capacity`` is first cut into capacity-sized chunks plus a remainder, each packed as an item.
Zero-length items are pieces of length 0, placed like any other.

The ``*_arrays`` forms return four int64 arrays, one entry per piece, grouped by bin (bins
numbered in the order they were opened) and in placement order inside a bin:
``(bin_of_piece, item, offset, length)``. The list forms are built from them.

Best fit uses a segment tree over *room values* 0..capacity (bins are integers, so the room
left in a bin is one of capacity + 1 values): each leaf counts the bins with that much room,
each inner node the bins under it. The best bin for a piece of length L is the smallest room
value >= L with a nonzero count, found by one walk up and one down the tree: O(log capacity)
per piece. Bins with equal room wait in a FIFO queue per room value, so ties go to the bin
that has had that room longest. First fit uses a max segment tree over bin ids whose leaves
start at ``capacity`` (unopened bins are empty), so "the leftmost bin with room >= L" also
opens the next new bin when no open bin fits: O(log n) per piece. Both loops are sequential
(each choice depends on the last) and run in numba.
"""

from __future__ import annotations

from collections.abc import Sequence

import numba
import numpy as np

from .._checks import check_int
from ..errors import ConfigError

Bins = list[list[tuple[int, int, int]]]
PackArrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]

# Best fit keeps O(capacity) state (the room-value tree and queues): 2**24 tokens ~ 400 MB.
MAX_BEST_FIT_CAPACITY = 1 << 24


# -- validation and pieces --------------------------------------------------------------------------


def _check_capacity(capacity: int) -> int:
    """The capacity as an int, or a ConfigError if it is not an integer >= 1."""
    return check_int("capacity", capacity, 1, what="tokens per bin")


def check_lengths(lengths: Sequence[int] | np.ndarray) -> np.ndarray:
    """The lengths as a 1-D int64 array, or a ConfigError naming the first bad item."""
    array = np.asarray(lengths)
    if array.ndim != 1:
        raise ConfigError(f"lengths: expected a 1-D sequence of token counts, got shape {array.shape}")
    if array.size == 0:
        return np.zeros(0, dtype=np.int64)
    if array.dtype.kind not in "iu":
        raise ConfigError(f"lengths: expected integer token counts, got dtype {array.dtype}")
    if array.dtype.kind == "u" and array.dtype.itemsize == 8 and int(array.max()) > np.iinfo(np.int64).max:
        raise ConfigError("lengths: a length does not fit in int64")
    array = array.astype(np.int64, copy=False)
    negative = np.flatnonzero(array < 0)
    if negative.size:
        item = int(negative[0])
        raise ConfigError(f"lengths[{item}] = {int(array[item])}: lengths must be >= 0")
    return array


def _pieces(lengths: np.ndarray, capacity: int, split_long: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Items cut into pieces (item, offset, length), sorted longest first, ties by item then offset."""
    too_long = np.flatnonzero(lengths > capacity)
    if too_long.size and not split_long:
        first = int(too_long[0])
        raise ConfigError(
            f"lengths[{first}] = {int(lengths[first])} is longer than capacity={capacity} "
            f"({too_long.size} item(s) are): pass split_long=True to cut long items into capacity-sized pieces"
        )
    if too_long.size:
        counts = np.maximum(1, -(-lengths // capacity))  # ceil(L / C), at least one piece per item
        item = np.repeat(np.arange(lengths.size, dtype=np.int64), counts)
        starts = np.cumsum(counts) - counts
        offset = (np.arange(item.size, dtype=np.int64) - np.repeat(starts, counts)) * capacity
        length = np.minimum(capacity, lengths[item] - offset)
    else:
        item = np.arange(lengths.size, dtype=np.int64)
        offset = np.zeros(lengths.size, dtype=np.int64)
        length = lengths
    order = np.argsort(-length, kind="stable")  # pieces are generated in (item, offset) order
    return item[order], offset[order], length[order]


def _by_bin(bin_of: np.ndarray, item: np.ndarray, offset: np.ndarray, length: np.ndarray) -> PackArrays:
    """The placed pieces regrouped by bin, placement order kept inside each bin."""
    order = np.argsort(bin_of, kind="stable")
    return bin_of[order], item[order], offset[order], length[order]


def _pack(kernel, lengths, capacity: int, split_long: bool) -> PackArrays:
    """Validate, cut into sorted pieces, place them with `kernel`, regroup by bin."""
    capacity = _check_capacity(capacity)
    item, offset, length = _pieces(check_lengths(lengths), capacity, split_long)
    if kernel is _best_fit and capacity > MAX_BEST_FIT_CAPACITY:
        raise ConfigError(
            f"capacity={capacity}: best fit keeps state per token of capacity, at most "
            f"{MAX_BEST_FIT_CAPACITY}; use pack_first_fit for larger bins"
        )
    if item.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    return _by_bin(kernel(length, capacity), item, offset, length)


def arrays_to_bins(arrays: PackArrays) -> Bins:
    """The list form (a list of bins, each a list of (item, offset, length)) of packing arrays."""
    bin_of, item, offset, length = arrays
    if bin_of.size == 0:
        return []
    bounds = (np.flatnonzero(np.diff(bin_of)) + 1).tolist()
    pieces = list(zip(item.tolist(), offset.tolist(), length.tolist()))
    return [pieces[a:b] for a, b in zip([0] + bounds, bounds + [len(pieces)])]


# -- public packers ---------------------------------------------------------------------------------


def pack_best_fit_arrays(lengths: Sequence[int] | np.ndarray, capacity: int, *, split_long: bool = False) -> PackArrays:
    """Best-fit decreasing as arrays (bin_of_piece, item, offset, length), grouped by bin."""
    return _pack(_best_fit, lengths, capacity, split_long)


def pack_first_fit_arrays(
    lengths: Sequence[int] | np.ndarray, capacity: int, *, split_long: bool = False
) -> PackArrays:
    """First-fit decreasing as arrays (bin_of_piece, item, offset, length), grouped by bin."""
    return _pack(_first_fit, lengths, capacity, split_long)


def pack_next_fit_arrays(lengths: Sequence[int] | np.ndarray, capacity: int, *, split_long: bool = False) -> PackArrays:
    """Next-fit decreasing as arrays (bin_of_piece, item, offset, length), grouped by bin."""
    return _pack(_next_fit, lengths, capacity, split_long)


def pack_best_fit(lengths: Sequence[int] | np.ndarray, capacity: int, *, split_long: bool = False) -> Bins:
    """Best-fit decreasing: each piece, longest first, goes to the open bin it leaves least room in.

    Returns a list of bins, each a list of (item, offset, length) pieces. See the module doc.
    """
    return arrays_to_bins(pack_best_fit_arrays(lengths, capacity, split_long=split_long))


def pack_first_fit(lengths: Sequence[int] | np.ndarray, capacity: int, *, split_long: bool = False) -> Bins:
    """First-fit decreasing: each piece, longest first, goes to the oldest open bin with room."""
    return arrays_to_bins(pack_first_fit_arrays(lengths, capacity, split_long=split_long))


def pack_next_fit(lengths: Sequence[int] | np.ndarray, capacity: int, *, split_long: bool = False) -> Bins:
    """Next-fit decreasing: each piece, longest first, goes to the newest bin, or opens one."""
    return arrays_to_bins(pack_next_fit_arrays(lengths, capacity, split_long=split_long))


# -- kernels ----------------------------------------------------------------------------------------


@numba.njit(cache=True)
def _tree_add(tree: np.ndarray, size: int, leaf: int, delta: int) -> None:
    """Add `delta` to a leaf of a count tree and to every node above it."""
    node = leaf + size
    while node >= 1:
        tree[node] += delta
        node >>= 1


@numba.njit(cache=True)
def _first_nonzero_from(tree: np.ndarray, size: int, leaf: int) -> int:
    """The smallest leaf >= `leaf` with a nonzero count, or -1 if there is none.

    Walk up from the leaf until we are a left child whose right sibling holds a count (that
    sibling covers the nearest leaves to the right), then down into its leftmost nonzero leaf.
    """
    node = leaf + size
    if tree[node] > 0:
        return leaf
    while node > 1:
        if node & 1 == 0 and tree[node + 1] > 0:
            node += 1
            while node < size:
                node = 2 * node if tree[2 * node] > 0 else 2 * node + 1
            return node - size
        node >>= 1
    return -1


@numba.njit(cache=True)
def _best_fit(sizes: np.ndarray, capacity: int) -> np.ndarray:
    """The bin of each piece (in the given order) under best fit; ties: the longest-waiting bin."""
    n = sizes.shape[0]
    size = 1
    while size < capacity + 1:
        size <<= 1
    tree = np.zeros(2 * size, dtype=np.int32)  # leaf v: how many bins have exactly v tokens of room
    head = np.full(capacity + 1, -1, dtype=np.int64)  # FIFO queue of bins per room value
    tail = np.full(capacity + 1, -1, dtype=np.int64)
    following = np.full(n, -1, dtype=np.int64)  # the next bin in the same queue
    bin_of = np.empty(n, dtype=np.int64)
    bins = 0
    for i in range(n):
        need = sizes[i]
        room = _first_nonzero_from(tree, size, need)  # the tightest room that still fits
        if room < 0:
            b = bins
            bins += 1
            left = capacity - need
        else:
            b = head[room]
            head[room] = following[b]
            if head[room] < 0:
                tail[room] = -1
            _tree_add(tree, size, room, -1)
            left = room - need
        following[b] = -1
        if tail[left] < 0:
            head[left] = b
        else:
            following[tail[left]] = b
        tail[left] = b
        _tree_add(tree, size, left, 1)
        bin_of[i] = b
    return bin_of


@numba.njit(cache=True)
def _first_fit(sizes: np.ndarray, capacity: int) -> np.ndarray:
    """The bin of each piece (in the given order) under first fit: the leftmost bin with room."""
    n = sizes.shape[0]
    size = 1
    while size < n:
        size <<= 1
    # max tree of room over bin ids; unopened bins have full room, so the leftmost bin with
    # room >= need is an open bin if one fits, else the next bin to open
    tree = np.full(2 * size, capacity, dtype=np.int64)
    bin_of = np.empty(n, dtype=np.int64)
    for i in range(n):
        need = sizes[i]
        node = 1
        while node < size:
            node = 2 * node if tree[2 * node] >= need else 2 * node + 1
        bin_of[i] = node - size
        tree[node] -= need
        node >>= 1
        while node >= 1:
            tree[node] = max(tree[2 * node], tree[2 * node + 1])
            node >>= 1
    return bin_of


@numba.njit(cache=True)
def _next_fit(sizes: np.ndarray, capacity: int) -> np.ndarray:
    """The bin of each piece (in the given order) under next fit: the newest bin, or a new one."""
    n = sizes.shape[0]
    bin_of = np.empty(n, dtype=np.int64)
    b = -1
    room = 0
    for i in range(n):
        if b < 0 or sizes[i] > room:
            b += 1
            room = capacity
        room -= sizes[i]
        bin_of[i] = b
    return bin_of
