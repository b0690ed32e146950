"""The 64-bit hash of each identifier of a column (``identifiers``), in numba: one pass over its bytes.

FNV-1a over each identifier's bytes, then splitmix64's finalizer, so every input bit reaches every
output bit; an empty identifier (none) hashes to 0. The column's offsets are checked before it gets here.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["hashes"]


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
