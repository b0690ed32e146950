"""A bounded pool of open OS handles (mmaps, file descriptors), so thousands of stores can be open.

Each `LazyHandle` opens on first use. When more than `capacity` are open, the pool
closes idle ones using the CLOCK (second-chance) rule: a handle used since the last
sweep survives one more round. Arrays already handed out keep their mapping alive,
so eviction never invalidates data a caller holds.
"""

from __future__ import annotations

import os
import resource
import threading
from collections.abc import Callable
from typing import Any


def _default_capacity() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        soft = 4096
    return max(16, min(4096, soft // 4))


class HandlePool:
    """Keeps at most `capacity` handles open, closing the least recently used first (CLOCK)."""

    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = capacity or _default_capacity()
        self._open: list[LazyHandle] = []
        self._hand = 0
        self._lock = threading.Lock()

    def admit(self, handle: LazyHandle) -> None:
        with self._lock:
            while len(self._open) >= self.capacity:
                self._evict_one()
            self._open.append(handle)

    def forget(self, handle: LazyHandle) -> None:
        with self._lock:
            try:
                self._open.remove(handle)
            except ValueError:
                pass

    @property
    def open_count(self) -> int:
        return len(self._open)

    def _evict_one(self) -> None:
        while True:
            if self._hand >= len(self._open):
                self._hand = 0
            candidate = self._open[self._hand]
            if candidate.referenced:
                candidate.referenced = False
                self._hand += 1
                continue
            self._open.pop(self._hand)
            candidate._release()
            return


POOL = HandlePool()


class LazyHandle:
    """An OS resource opened on demand by `opener` and released by `closer` when idle."""

    __slots__ = ("_opener", "_closer", "value", "referenced", "__weakref__")

    def __init__(self, opener: Callable[[], Any], closer: Callable[[Any], None]) -> None:
        self._opener = opener
        self._closer = closer
        self.value: Any = None  # the open resource, or None; hot paths read it, then call get() on None
        self.referenced = False

    def get(self) -> Any:
        value = self.value
        if value is None:
            value = self._opener()
            POOL.admit(self)
            self.value = value
        self.referenced = True
        return value

    @property
    def is_open(self) -> bool:
        return self.value is not None

    def close(self) -> None:
        if self.value is not None:
            POOL.forget(self)
            self._release()

    def _release(self) -> None:
        value, self.value = self.value, None
        if value is not None:
            self._closer(value)


def close_fd(fd: int) -> None:
    os.close(fd)
