"""The index's promise, checked once: every sequence lies inside the .bin, end to end, in order.

Megatron's writers lay sequences out back to back, so the pointers are the running sum of the
lengths times the item size, and the last sequence ends exactly at the end of the .bin. Checking
that (and the document indices) when a store's index is first used is one vectorized pass, and it
is what lets every read after it (ds[i], get_many, the GPT kernel) trust pointers and lengths
without a check of its own: a corrupt index is refused before any token is read.
"""

from __future__ import annotations

import numpy as np

from ..errors import CorruptStoreError

_CHUNK = 1 << 22  # items checked at a time: 32 MiB of int64 temporaries


def check_index(
    lengths: np.ndarray,
    pointers: np.ndarray,
    documents: np.ndarray,
    itemsize: int,
    bin_size: int,
    idx_path: str,
    bin_path: str,
) -> None:
    """Raise CorruptStoreError naming the file and the first bad field, or return when all agree."""
    count = len(lengths)
    position = 0
    for start in range(0, count, _CHUNK):
        chunk = lengths[start : start + _CHUNK]
        if int(chunk.min()) < 0:
            bad = start + int(np.argmax(chunk < 0))
            raise _fault(idx_path, f"sequence_lengths: sequence {bad} has negative length {int(lengths[bad])}")
        ends = np.cumsum(chunk, dtype=np.int64)
        ends *= itemsize
        ends += position
        actual = pointers[start : start + _CHUNK]
        if int(actual[0]) != position or not np.array_equal(actual[1:], ends[:-1]):
            expected = np.concatenate(([position], ends[:-1]))
            bad = start + int(np.argmax(actual != expected))
            raise _fault(
                idx_path,
                f"sequence_pointers: sequence {bad} points at byte {int(pointers[bad])}, but the lengths "
                f"before it end at byte {int(expected[bad - start])}",
            )
        position = int(ends[-1])
    if position != bin_size:
        raise CorruptStoreError(
            f"{bin_path}: has {bin_size} bytes but its index ({idx_path}) describes {position}; "
            "the .bin is truncated, has junk appended or does not belong to this .idx: rebuild or re-download it"
        )
    check_documents(documents, count, idx_path)


def check_documents(documents: np.ndarray, count: int, idx_path: str) -> None:
    """Document indices start at 0, never decrease, and end at the sequence count."""
    if len(documents) == 0 or int(documents[0]) != 0:
        raise _fault(idx_path, "document_indices must start with 0")
    if int(documents[-1]) != count:
        raise _fault(idx_path, f"document_indices: the last document index is {int(documents[-1])}, not the sequence count {count}")
    for start in range(0, len(documents) - 1, _CHUNK):
        steps = np.diff(documents[start : start + _CHUNK + 1])
        if int(steps.min()) < 0:
            bad = start + int(np.argmax(steps < 0)) + 1
            raise _fault(
                idx_path, f"document_indices: document index {bad} ({int(documents[bad])}) is below the one before it"
            )


def _fault(idx_path: str, what: str) -> CorruptStoreError:
    return CorruptStoreError(f"{idx_path}: {what}; the index is corrupt: rebuild or re-download the store")
