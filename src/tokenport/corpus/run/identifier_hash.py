"""The 64-bit hash of each identifier of a column (``identifiers``) and a table of them, in numba.

``hashes``: FNV-1a over each identifier's bytes, then splitmix64's finalizer, so every input bit reaches
every output bit; an empty identifier (none) hashes to 0. ``buckets``: the documents with an identifier
grouped by their hash's top bits (a counting sort: two passes, no comparison sort), each bucket's in
ascending order. The column's offsets are checked before it gets here.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["buckets", "hashes"]


@numba.njit(cache=True)
def hashes(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """The hash of identifier ``k`` (bytes ``data[offsets[k]:offsets[k + 1]]``) for each ``k``."""
    n = len(offsets) - 1
    out = np.zeros(n, dtype=np.uint64)
    prime = np.uint64(0x100000001B3)
    for k in range(n):
        low, high = offsets[k], offsets[k + 1]
        if high <= low:
            continue
        h = np.uint64(0xCBF29CE484222325)
        for i in range(low, high):
            h = (h ^ np.uint64(data[i])) * prime
        h = h ^ np.uint64(high - low)
        h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        out[k] = h ^ (h >> np.uint64(31))
    return out


@numba.njit(cache=True)
def buckets(hashes: np.ndarray, offsets: np.ndarray, shift: int) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
    """(``starts``, ``rows``): the documents with an identifier whose hash is ``b`` in its top bits
    (``hash >> shift``) are ``rows[starts[b]:starts[b + 1]]``, ascending."""
    size = (np.uint64(0xFFFFFFFFFFFFFFFF) >> np.uint64(shift)) + np.uint64(1)
    starts = np.zeros(np.int64(size) + 1, dtype=np.int64)
    for k in range(len(hashes)):
        if offsets[k + 1] > offsets[k]:
            starts[np.int64(hashes[k] >> np.uint64(shift)) + 1] += 1
    for b in range(1, len(starts)):
        starts[b] += starts[b - 1]
    rows = np.empty(starts[-1], dtype=np.int64)
    fill = starts[:-1].copy()
    for k in range(len(hashes)):
        if offsets[k + 1] > offsets[k]:
            b = np.int64(hashes[k] >> np.uint64(shift))
            rows[fill[b]] = k
            fill[b] += 1
    return starts, rows
