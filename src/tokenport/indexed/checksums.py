"""Checksums for manifests: xxh3-64 when `xxhash` is installed, blake2b otherwise."""

from __future__ import annotations

import hashlib
import importlib.util
from collections.abc import Callable
from typing import Protocol

from ..errors import CorruptStoreError

DEFAULT_BLOCK_SIZE = 64 * 1024 * 1024


class Hasher(Protocol):
    def update(self, data: bytes | memoryview) -> None: ...

    def hexdigest(self) -> str: ...


def _blake2b() -> Hasher:
    return hashlib.blake2b(digest_size=16)


def _xxh3() -> Hasher:
    import xxhash

    return xxhash.xxh3_64()


def available_algorithm() -> str:
    """The fastest checksum algorithm installed here."""
    return "xxh3-64" if importlib.util.find_spec("xxhash") is not None else "blake2b-128"


_FACTORIES: dict[str, Callable[[], Hasher]] = {"blake2b-128": _blake2b, "xxh3-64": _xxh3}


def new_hasher(algorithm: str, context: str = "manifest") -> Hasher:
    """A fresh hasher for `algorithm`; a clear error when it is unknown or not installed."""
    factory = _FACTORIES.get(algorithm)
    if factory is None:
        raise CorruptStoreError(f"{context}: unknown checksum algorithm {algorithm!r}")
    try:
        return factory()
    except ImportError:
        raise CorruptStoreError(
            f"{context}: checksums use {algorithm}, which needs `pip install xxhash` "
            "(or `pip install 'tokenport[fast]'`)"
        ) from None


class BlockHasher:
    """Hashes a byte stream in fixed-size blocks as it is written, one digest per block."""

    def __init__(self, algorithm: str, block_size: int = DEFAULT_BLOCK_SIZE) -> None:
        self.algorithm = algorithm
        self.block_size = block_size
        self.digests: list[str] = []
        self._current = new_hasher(algorithm)
        self._filled = 0

    def update(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data).cast("B")
        while len(view):
            take = min(len(view), self.block_size - self._filled)
            self._current.update(view[:take])
            self._filled += take
            view = view[take:]
            if self._filled == self.block_size:
                self._finish_block()

    def finish(self) -> list[str]:
        if self._filled:
            self._finish_block()
        return self.digests

    def _finish_block(self) -> None:
        self.digests.append(self._current.hexdigest())
        self._current = new_hasher(self.algorithm)
        self._filled = 0
