"""numba passes of bounds.check_index for large indexes: one fused read of each array, no temporaries.

About 5x faster than the chunked numpy pass on 10^8 sequences (measured), worth loading numba for.
"""

from __future__ import annotations

import numba


@numba.njit(cache=True, nogil=True)
def first_bad_sequence(lengths, pointers, itemsize):
    """(first sequence whose length is negative or whose pointer is not where the ones before it
    end, or -1; that end position, or the end of the last sequence when all are good)."""
    position = 0
    for i in range(len(lengths)):
        length = lengths[i]
        if length < 0 or pointers[i] != position:
            return i, position
        position += length * itemsize
    return -1, position


@numba.njit(cache=True, nogil=True)
def first_drop(documents):
    """The first document index below the one before it, or -1."""
    for i in range(1, len(documents)):
        if documents[i] < documents[i - 1]:
            return i
    return -1
