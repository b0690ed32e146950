"""The byte-source interface: random-access, read-only bytes of one file, wherever it lives."""

from __future__ import annotations

import abc
from typing import Sequence

import numpy as np

Range = tuple[int, int]
"""A byte range as (offset, length)."""


class ByteSource(abc.ABC):
    """Random-access read-only bytes of one file.

    Readers of token stores call only these methods, so a store reads the same
    from a local mmap, from `os.pread`, or from ranged object-store GETs.
    """

    url: str

    @property
    @abc.abstractmethod
    def size(self) -> int:
        """The file's size in bytes."""

    @abc.abstractmethod
    def read(self, offset: int, length: int) -> bytes | memoryview:
        """Exactly `length` bytes starting at `offset` (the caller keeps ranges in bounds)."""

    def read_array(self, offset: int, count: int, dtype: np.dtype) -> np.ndarray:
        """`count` items of `dtype` starting at byte `offset`; zero-copy where the source allows."""
        dtype = np.dtype(dtype)
        return np.frombuffer(self.read(offset, count * dtype.itemsize), dtype=dtype, count=count)

    def read_ranges(self, ranges: Sequence[Range]) -> list[bytes | memoryview]:
        """The bytes of several ranges; remote sources coalesce them into few requests."""
        return [self.read(offset, length) for offset, length in ranges]

    def prefetch(self, ranges: Sequence[Range]) -> None:
        """Hint that `ranges` will be read soon. Local sources ignore it."""

    def close(self) -> None:
        """Release handles; the source reopens lazily if read again."""

    def __enter__(self) -> "ByteSource":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
