"""The byte-source interface: random-access, read-only bytes of one file, wherever it lives."""

from __future__ import annotations

import abc
import io
from collections.abc import Sequence
from typing import BinaryIO

import numpy as np
from numpy.typing import DTypeLike

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

    def read_array(self, offset: int, count: int, dtype: DTypeLike) -> np.ndarray:
        """`count` items of `dtype` starting at byte `offset`; zero-copy where the source allows."""
        dtype = np.dtype(dtype)
        return np.frombuffer(self.read(offset, count * dtype.itemsize), dtype=dtype, count=count)

    def read_ranges(self, ranges: Sequence[Range]) -> list[bytes | memoryview]:
        """The bytes of several ranges; remote sources coalesce them into few requests."""
        return [self.read(offset, length) for offset, length in ranges]

    def prefetch(self, ranges: Sequence[Range]) -> None:  # noqa: B027 (an optional hook: no-op by default)
        """Hint that `ranges` will be read soon. Local sources ignore it."""

    def read_once(self, offset: int, length: int) -> bytes | memoryview:
        """Like `read`, for bytes read once (a stream): remote sources keep them out of their cache."""
        return self.read(offset, length)

    def stream(self, buffer_size: int = 1 << 20) -> BinaryIO:
        """The bytes as a buffered, seekable binary file (for decompressors, parquet, line readers)."""
        return io.BufferedReader(_SourceStream(self), buffer_size)

    def close(self) -> None:  # noqa: B027 (an optional hook: no-op by default)
        """Release handles; the source reopens lazily if read again."""

    def __enter__(self) -> ByteSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _SourceStream(io.RawIOBase):
    """A read-only file over a ByteSource: each read is one `read_once` at the current position."""

    def __init__(self, source: ByteSource) -> None:
        self._source = source
        self._position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        n = max(0, min(len(buffer), self._source.size - self._position))
        if n:
            memoryview(buffer).cast("B")[:n] = self._source.read_once(self._position, n)
            self._position += n
        return n

    def readall(self) -> bytes:
        """The rest of the bytes in one `read_once` (RawIOBase's default would read 8 KiB at a time)."""
        n = max(0, self._source.size - self._position)
        data = bytes(self._source.read_once(self._position, n)) if n else b""
        self._position += n
        return data

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._source.size}[whence]
        if base + offset < 0:
            raise ValueError(f"{self._source.url}: seek to a negative position ({base + offset})")
        self._position = base + offset
        return self._position

    def tell(self) -> int:
        return self._position
