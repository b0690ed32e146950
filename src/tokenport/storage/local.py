"""Local byte sources: a memory map (zero-copy views) or positioned reads (`os.pread`)."""

from __future__ import annotations

import mmap
import os
from typing import BinaryIO

import numpy as np
from numpy.typing import DTypeLike

from ..errors import StorageError
from .base import ByteSource
from .handles import LazyHandle, close_fd


def _stat_size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        raise StorageError(f"{path}: file not found; check the path or prefix") from None
    except OSError as exc:
        raise StorageError(f"{path}: cannot stat file ({exc.strerror})") from None


def _open_stream(path: str, buffer_size: int) -> BinaryIO:
    """The file itself, buffered: a local stream needs no adapter over the source."""
    try:
        return open(path, "rb", buffering=buffer_size)
    except OSError as exc:
        raise StorageError(f"{path}: cannot open ({exc.strerror or exc}); check that it still exists") from None


def _unmap(mapping: mmap.mmap | bytes) -> None:
    """Unmap now if nothing views the mapping; otherwise Python unmaps it with the last view."""
    if isinstance(mapping, mmap.mmap):
        try:
            mapping.close()
        except BufferError:
            pass


class MmapSource(ByteSource):
    """A file read through a shared read-only memory map; `read_array` returns views, not copies."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.url = os.fspath(path)
        self._size = _stat_size(self.url)
        self._handle = LazyHandle(self._map, _unmap)

    def _map(self) -> mmap.mmap | bytes:
        if self._size == 0:
            return b""
        try:
            with open(self.url, "rb") as f:
                return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except FileNotFoundError:
            raise StorageError(f"{self.url}: file disappeared while in use") from None
        except (OSError, ValueError) as exc:
            raise StorageError(f"{self.url}: cannot memory-map ({exc}); open the store with mode='pread'") from None

    @property
    def size(self) -> int:
        return self._size

    def buffer(self) -> mmap.mmap | bytes:
        """The whole file as a buffer (a memory map, opened on demand)."""
        return self._handle.get()

    def read(self, offset: int, length: int) -> memoryview:
        return memoryview(self._handle.get())[offset : offset + length]

    def read_array(self, offset: int, count: int, dtype: DTypeLike) -> np.ndarray:
        return np.frombuffer(self._handle.get(), dtype=dtype, count=count, offset=offset)

    def stream(self, buffer_size: int = 1 << 20) -> BinaryIO:
        return _open_stream(self.url, buffer_size)

    def close(self) -> None:
        self._handle.close()


class PreadSource(ByteSource):
    """A file read with positioned reads, for file systems where mmap fails or is limited."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.url = os.fspath(path)
        self._size = _stat_size(self.url)
        self._handle = LazyHandle(self._open, close_fd)

    def _open(self) -> int:
        try:
            return os.open(self.url, os.O_RDONLY)
        except OSError as exc:
            raise StorageError(f"{self.url}: cannot open ({exc.strerror})") from None

    @property
    def size(self) -> int:
        return self._size

    def read(self, offset: int, length: int) -> bytes:
        fd = self._handle.get()
        data = os.pread(fd, length, offset)
        if len(data) == length:
            return data
        parts = [data]
        got = len(data)
        while got < length:
            chunk = os.pread(fd, length - got, offset + got)
            if not chunk:
                raise StorageError(
                    f"{self.url}: file ended at byte {offset + got}, expected {offset + length}; "
                    "the file is truncated or changed while open"
                )
            parts.append(chunk)
            got += len(chunk)
        return b"".join(parts)

    def stream(self, buffer_size: int = 1 << 20) -> BinaryIO:
        return _open_stream(self.url, buffer_size)

    def close(self) -> None:
        self._handle.close()
