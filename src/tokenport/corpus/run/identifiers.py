"""Input documents named by an identifier (a URL, a source id) that prepare keeps from a field of the input.

prepare records each input document's identifier in ``OUTPUT/provenance.npz`` as one string column:
``id_bytes`` (the UTF-8 bytes of every identifier, one after the other) and ``id_offsets`` (int64,
one more than the documents: document ``k``'s identifier is ``id_bytes[id_offsets[k]:id_offsets[k + 1]]``,
empty for none). A string is kept as it is, an integer as its decimal text; any other value (a list,
an object, a float, a bool) is no identifier and is counted. ``IdentifierIndex`` finds documents by
identifier through a table of 64-bit hashes built on demand, each candidate compared byte for byte.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["IdentifierIndex", "check_column", "encode", "pack", "text"]


def encode(value: object) -> bytes | None:
    """The recorded bytes of a field's value: a string's UTF-8, an integer's decimal text, b"" for none
    (missing, null or empty); None for a value of another type, which names no document."""
    if value is None:
        return b""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value).encode("ascii")
    return None


def pack(identifiers: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """(``id_bytes``, ``id_offsets``) of the identifiers in order."""
    offsets = np.zeros(len(identifiers) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in identifiers], out=offsets[1:])
    return np.frombuffer(b"".join(identifiers), dtype=np.uint8).copy(), offsets


def check_column(data: np.ndarray, offsets: np.ndarray, documents: int) -> str | None:
    """What is wrong with an identifier column of ``documents`` rows, or None if nothing."""
    if data.dtype != np.uint8 or data.ndim != 1:
        return f"id_bytes is {data.dtype} of {data.ndim} dimension(s), expected uint8 of 1"
    if offsets.dtype != np.int64 or offsets.shape != (documents + 1,):
        return f"id_offsets is {offsets.dtype} of shape {offsets.shape}, expected int64 of shape ({documents + 1},)"
    if offsets[0] != 0 or offsets[-1] != len(data) or np.any(np.diff(offsets) < 0):
        return f"id_offsets do not cut id_bytes ({len(data)} bytes) into consecutive identifiers"
    return None


def _hashes(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each identifier (0 for none): ``identifier_hash``'s kernel, loaded on first use
    (saying so when numba must compile it first)."""
    from ..._jit import announce_compilation

    announce_compilation(["tokenport.corpus.run.identifier_hash"])
    from .identifier_hash import hashes

    return np.asarray(hashes(np.ascontiguousarray(data, np.uint8), np.ascontiguousarray(offsets, np.int64)))


@dataclass(frozen=True)
class IdentifierIndex:
    """The documents of an identifier column in a table by hash: ``find`` looks in one bucket per identifier."""

    data: np.ndarray
    offsets: np.ndarray
    hashes: np.ndarray  # of every document (0: none)
    shift: int  # a hash's bucket is its top 64 - shift bits
    starts: np.ndarray  # bucket b holds rows[starts[b]:starts[b + 1]]
    rows: np.ndarray

    @classmethod
    def build(cls, data: np.ndarray, offsets: np.ndarray) -> IdentifierIndex:
        """The index of a checked column (``check_column``): O(its bytes) hashing, O(documents) bucketing."""
        from .identifier_hash import buckets

        hashes = _hashes(data, offsets)
        bits = min(max(int(len(hashes)).bit_length() - 1, 1), 27)  # one or two documents a bucket, at most 1 GiB
        starts, rows = buckets(hashes, np.ascontiguousarray(offsets, np.int64), 64 - bits)
        return cls(data, offsets, hashes, 64 - bits, np.asarray(starts), np.asarray(rows))

    def find(self, identifiers: Sequence[str]) -> list[np.ndarray]:
        """Per identifier, the documents (ascending) recorded with exactly it."""
        wanted = [identifier.encode("utf-8", "surrogatepass") for identifier in identifiers]
        hashes = _hashes(*pack(wanted))
        bucket = (hashes >> np.uint64(self.shift)).astype(np.int64)
        found = []
        for value, h, b in zip(wanted, hashes.tolist(), bucket.tolist()):
            candidates = self.rows[self.starts[b] : self.starts[b + 1]]
            rows = [int(r) for r in candidates[self.hashes[candidates] == np.uint64(h)] if self._bytes(int(r)) == value]
            found.append(np.array(rows, dtype=np.int64))
        return found

    def _bytes(self, row: int) -> bytes:
        return self.data[int(self.offsets[row]) : int(self.offsets[row + 1])].tobytes()


def text(data: np.ndarray, offsets: np.ndarray, row: int) -> str:
    """Document ``row``'s identifier as text (its recorded UTF-8; the column was checked as a whole, so
    only offsets cutting a character would leave bytes to show escaped)."""
    raw = data[int(offsets[row]) : int(offsets[row + 1])].tobytes()
    try:
        return raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return raw.decode("utf-8", "backslashreplace")
