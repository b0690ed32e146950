"""The numba gather behind IndexedDataset.get_many on a memory-mapped store: one pass, one output.

Reading 1,024 random documents is bound by memory latency (a pointer, then the tokens it points
at, both random), so both are prefetched ahead: pointers 2 * _AHEAD documents early, the first
line of the tokens _AHEAD early. Sequential ids (a scan) are one copy; copies go through
unit-stride views, which LLVM vectorizes.
"""

from __future__ import annotations

import numba
import numpy as np

from ..rng.prefetch import prefetch

_AHEAD = 16  # documents between prefetching a document's tokens and copying them


@numba.njit(cache=True, nogil=True, boundscheck=False)
def gather_sequences(
    tokens: np.ndarray, lengths: np.ndarray, pointers: np.ndarray, ids: np.ndarray, shift: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """(tokens of sequences `ids` concatenated, their int64 offsets, -1), or (empty, offsets, k)
    when ids[k] is out of range. Negative ids count from the end, as numpy's indexing does.
    `pointers` are byte offsets; `shift` is log2 of the token size. The index must have passed
    bounds.check_index, so every sequence lies inside `tokens`."""
    n = len(ids)
    count = len(lengths)
    offsets = np.zeros(n + 1, dtype=np.int64)
    rows = np.empty(n, dtype=np.int64)
    sequential = True  # ids i, i + 1, ...: the checked index puts their tokens back to back
    for k in range(n):
        i = ids[k]
        if i < 0:
            i += count
        if not 0 <= i < count:
            return np.empty(0, dtype=tokens.dtype), offsets, k
        rows[k] = i
        if k and i != rows[k - 1] + 1:
            sequential = False
    for k in range(min(2 * _AHEAD, n)):
        prefetch(lengths, rows[k])  # type: ignore[call-arg]  # a numba intrinsic: numba passes typingctx
        prefetch(pointers, rows[k])
    total = 0
    for k in range(n):
        if k + 2 * _AHEAD < n:
            prefetch(lengths, rows[k + 2 * _AHEAD])  # type: ignore[call-arg]  # a numba intrinsic: numba passes typingctx
            prefetch(pointers, rows[k + 2 * _AHEAD])
        total += lengths[rows[k]]
        offsets[k + 1] = total
    out = np.empty(total, dtype=tokens.dtype)
    if sequential and n:  # a scan: one copy
        start = pointers[rows[0]] >> shift
        source = tokens[start : start + total]
        for t in range(total):
            out[t] = source[t]
        return out, offsets, -1
    for k in range(min(_AHEAD, n)):
        prefetch(tokens, pointers[rows[k]] >> shift)  # type: ignore[call-arg]  # a numba intrinsic: numba passes typingctx
    for k in range(n):
        if k + _AHEAD < n:
            prefetch(tokens, pointers[rows[k + _AHEAD]] >> shift)  # type: ignore[call-arg]  # a numba intrinsic: numba passes typingctx
        start = pointers[rows[k]] >> shift
        size = offsets[k + 1] - offsets[k]
        source = tokens[start : start + size]
        target = out[offsets[k] : offsets[k + 1]]
        for t in range(size):
            target[t] = source[t]
    return out, offsets, -1
