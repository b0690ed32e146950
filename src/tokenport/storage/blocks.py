"""The in-memory block caches of remote sources: one per source (LRU, bounded in bytes) under one
process-wide pool that bounds them all together, and the planner that merges wanted blocks into
the spans of few ranged GETs."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

from .._checks import check_int


class MemoryPool:
    """The in-memory blocks of every source in this process, bounded together (LRU across sources)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.nbytes = 0
        self.lock = threading.RLock()
        self.order: OrderedDict[tuple[int, int], BlockCache] = OrderedDict()

    def shrink(self) -> None:
        while self.nbytes > self.capacity and self.order:
            (_, index), cache = next(iter(self.order.items()))
            cache.drop(index)

    def after_fork(self) -> None:
        self.lock = threading.RLock()
        self.order.clear()
        self.nbytes = 0


MEMORY = MemoryPool(int(os.environ.get("TOKENPORT_REMOTE_MEMORY_BYTES", 512 << 20)))
"""The process-wide bound of remote block caches (TOKENPORT_REMOTE_MEMORY_BYTES, default 512 MiB)."""


def set_remote_memory_budget(nbytes: int) -> None:
    """Bound the in-memory block caches of all remote sources of this process together to `nbytes`."""
    nbytes = check_int("remote memory budget", nbytes, 1)
    with MEMORY.lock:
        MEMORY.capacity = nbytes
        MEMORY.shrink()


class BlockCache:
    """Blocks of one object held in memory: at most `capacity` bytes, and the process's pool bound
    across all sources; least recently used evicted first."""

    def __init__(self, capacity: int, pool: MemoryPool = MEMORY) -> None:
        self.capacity = capacity
        self.nbytes = 0
        self.pool = pool
        self._blocks: OrderedDict[int, bytes] = OrderedDict()

    def get(self, index: int) -> bytes | None:
        with self.pool.lock:
            data = self._blocks.get(index)
            if data is not None:
                self._blocks.move_to_end(index)
                self.pool.order.move_to_end((id(self), index))
            return data

    def put(self, index: int, data: bytes) -> None:
        with self.pool.lock:
            self.drop(index)
            self._blocks[index] = data
            self.pool.order[(id(self), index)] = self
            self.nbytes += len(data)
            self.pool.nbytes += len(data)
            while self.nbytes > self.capacity:
                self.drop(next(iter(self._blocks)))
            self.pool.shrink()

    def drop(self, index: int) -> None:
        with self.pool.lock:
            data = self._blocks.pop(index, None)
            if data is not None:
                self.nbytes -= len(data)
                self.pool.nbytes -= len(data)
                self.pool.order.pop((id(self), index), None)

    def clear(self) -> None:
        with self.pool.lock:
            for index in list(self._blocks):
                self.drop(index)


def plan_spans(
    blocks: Sequence[int], gap_blocks: int, max_blocks: int, bridge: Callable[[range], bool] | None = None
) -> list[tuple[int, int]]:
    """Merge sorted block ids into [lo, hi) spans, bridging gaps of <= gap_blocks (those `bridge`, when
    given, accepts), each <= max_blocks long."""
    spans: list[tuple[int, int]] = []
    for block in blocks:
        if spans:
            lo, hi = spans[-1]
            if block - hi <= gap_blocks and block + 1 - lo <= max_blocks:
                if block == hi or bridge is None or bridge(range(hi, block)):
                    spans[-1] = (lo, block + 1)
                    continue
        spans.append((block, block + 1))
    return spans
