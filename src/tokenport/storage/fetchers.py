"""Where a remote source's missing blocks come from and where they land, chosen once at open: in
memory only (`MemoryFetcher`), or through the node cache on disk shared by the machine's processes
(`NodeFetcher`: each block claimed by one process, published to disk, read by all). Both serve the
same calls of the source; the source itself never asks which one it has."""

from __future__ import annotations

import abc
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from .._checks import check_int
from ..errors import CorruptStoreError
from .blocks import MEMORY, BlockCache, plan_spans
from .nodecache import DamagedBlock, NodeCache
from .options import RemoteOptions

logger = logging.getLogger(__name__)

T = TypeVar("T")


class FetchingSource(Protocol):
    """What a fetcher uses of the source it fetches for (`remote.ObjectStoreSource`)."""

    options: RemoteOptions
    _lock: threading.Lock
    _cache: BlockCache
    _pending: set[int]  # blocks the plan fetched that are not read yet: kept on disk over others
    _refetched: set[int]  # blocks dropped from the node cache as damaged and fetched again

    def _acquire(self, blocks: Sequence[int], gap_blocks: int, in_memory: bool) -> dict[int, bytes]: ...

    def _get_span(self, lo: int, hi: int) -> dict[int, bytes]: ...

    def _map(self, fn: Callable[[tuple[int, int]], T], spans: list[tuple[int, int]]) -> list[T]: ...

    def _done(self, index: int, mine: set[int]) -> None: ...

    def _count_lookups(self, hits: int, misses: int) -> None: ...

    def _max_blocks(self) -> int: ...


_LOADER_WORKERS = [1]


def set_loader_workers(count: int) -> None:
    """How many loader worker processes of one loader this process is (1 outside a worker): they
    share a node cache's budget, so each plans at most its share ahead. Set by `integrations`."""
    _LOADER_WORKERS[0] = check_int("loader workers", count, 1)


def loader_workers() -> int:
    """The count `set_loader_workers` set in this process (1 unless set)."""
    return _LOADER_WORKERS[0]


class Fetcher(abc.ABC):
    """How a source fetches the blocks it lacks, and where the fetched blocks are kept."""

    @abc.abstractmethod
    def fetch(
        self, source: FetchingSource, mine: Sequence[int], gap_blocks: int, in_memory: bool, hits: int
    ) -> tuple[dict[int, bytes], list[int]]:
        """Fetch the sorted blocks `mine` (this thread holds them in flight) in few ranged GETs, missing
        neighbours `gap_blocks` apart or closer sharing one; count a read's lookups (`in_memory`, with
        `hits` found already). Returns the blocks held in memory and those another process fetches."""

    def await_elsewhere(self, source: FetchingSource, elsewhere: list[int]) -> dict[int, bytes]:
        """Wait for the blocks another process fetches; those it did not keep, fetched here."""
        return {}

    def on_disk(self, index: int) -> bool:
        """True when block `index` is in the node cache."""
        return False

    def read(self, source: FetchingSource, index: int, start: int, length: int) -> bytes | memoryview | None:
        """Bytes of a block from the node cache, checked; None when it is not there."""
        return None

    def pin(self, blocks: set[int]) -> None:  # noqa: B027 (an optional hook: memory keeps nothing to pin)
        """Protect `blocks` (read next) from eviction from the node cache by any process."""

    @abc.abstractmethod
    def ahead_bytes(self, options: RemoteOptions) -> int:
        """Bytes of the cache that keeps a plan's fetched blocks until they are read."""


class MemoryFetcher(Fetcher):
    """Blocks fetched into the source's in-memory cache, gap fillers too (evicted first)."""

    def fetch(
        self, source: FetchingSource, mine: Sequence[int], gap_blocks: int, in_memory: bool, hits: int
    ) -> tuple[dict[int, bytes], list[int]]:
        if in_memory:  # a read's lookups (prefetches are not counted)
            source._count_lookups(hits, len(mine))
        found: dict[int, bytes] = {}
        if not mine:
            return found, []
        mine_set = set(mine)

        def land(span: tuple[int, int]) -> dict[int, bytes]:
            got = source._get_span(*span)
            for index, data in got.items():
                source._cache.put(index, data)
                source._done(index, mine_set)
            return got

        for held in source._map(land, plan_spans(mine, gap_blocks, source._max_blocks())):
            found.update(held)
        return found, []

    def ahead_bytes(self, options: RemoteOptions) -> int:
        return min(options.cache_bytes, MEMORY.capacity)


class NodeFetcher(Fetcher):
    """Blocks fetched by the one process that claims each, published to the node cache on disk;
    blocks the budget cannot keep are held in memory instead."""

    def __init__(self, node: NodeCache, key: str) -> None:
        self.node, self.key = node, key

    def fetch(
        self, source: FetchingSource, mine: Sequence[int], gap_blocks: int, in_memory: bool, hits: int
    ) -> tuple[dict[int, bytes], list[int]]:
        claims: dict[int, int] = {}
        try:
            todo, elsewhere, hits = self._claim(mine, claims, hits)
            if in_memory:  # a read's lookups (prefetches are not counted)
                source._count_lookups(hits, len(todo))
            found = self._land(source, todo, gap_blocks, claims, in_memory, set(mine)) if todo else {}
        finally:
            for fd in claims.values():
                self.node.release(fd)
        return found, elsewhere

    def _claim(self, mine: Sequence[int], claims: dict[int, int], hits: int) -> tuple[list[int], list[int], int]:
        """Claim the blocks of `mine` not on disk (into `claims`): those to fetch here, those another
        process fetches, and `hits` with the blocks found on disk."""
        todo: list[int] = []
        elsewhere: list[int] = []
        for index in mine:
            if self.node.has(self.key, index):
                hits += 1
                continue
            fd = self.node.try_claim(self.key, index)
            if fd is None:
                elsewhere.append(index)
            elif self.node.has(self.key, index):  # published between the look and the claim
                self.node.release(fd)
                hits += 1
            else:
                claims[index] = fd
                todo.append(index)
        return todo, elsewhere, hits

    def _land(
        self,
        source: FetchingSource,
        todo: list[int],
        gap_blocks: int,
        claims: dict[int, int],
        in_memory: bool,
        mine: set[int],
    ) -> dict[int, bytes]:
        """Fetch the claimed blocks `todo`, publish each span's blocks and release their claims at once."""
        with source._lock:
            keep = {(self.key, i) for i in source._pending}

        def land(span: tuple[int, int]) -> dict[int, bytes]:
            got = source._get_span(*span)
            held: dict[int, bytes] = {}
            ours = {index: data for index, data in got.items() if index in claims}
            published = self.node.put(self.key, ours, keep) if ours else set()
            for index, data in ours.items():
                if index not in published:  # over the budget: memory only
                    source._cache.put(index, data)
                    held[index] = data
                elif in_memory:
                    held[index] = data
                self.node.release(claims.pop(index))
                source._done(index, mine)
            return held

        found: dict[int, bytes] = {}
        for held in source._map(land, self._spans(source, todo, gap_blocks, claims)):
            found.update(held)
        return found

    def _spans(
        self, source: FetchingSource, todo: Sequence[int], gap_blocks: int, claims: dict[int, int]
    ) -> list[tuple[int, int]]:
        """Spans over the claimed blocks `todo`, bridging a gap only with blocks this process claims and
        can keep on disk without evicting (added to `claims`): a gap filler that no cache keeps is bytes
        moved for nothing, and one another process fetches or has published is a second download."""
        room: list[int] = []  # blocks the budget still holds beside `todo`, read at the first gap

        def bridge(gap: range) -> bool:
            if not room:
                room.append((self.node.budget_bytes - self.node.used_bytes()) // source.options.block_size - len(todo))
            if len(gap) > room[0] or not self._claim_gap(gap, claims):
                return False
            room[0] -= len(gap)
            return True

        return plan_spans(todo, gap_blocks, source._max_blocks(), bridge)

    def _claim_gap(self, gap: range, claims: dict[int, int]) -> bool:
        """Claim every block of `gap` (none on disk, none being fetched elsewhere), or none of them."""
        taken: dict[int, int] = {}
        for index in gap:
            fd = None if self.node.has(self.key, index) else self.node.try_claim(self.key, index)
            if fd is not None and self.node.has(self.key, index):
                self.node.release(fd)
                fd = None
            if fd is None:
                for held in taken.values():
                    self.node.release(held)
                return False
            taken[index] = fd
        claims.update(taken)
        return True

    def await_elsewhere(self, source: FetchingSource, elsewhere: list[int]) -> dict[int, bytes]:
        found: dict[int, bytes] = {}
        for index in elsewhere:  # another process fetches it: wait for its claim, then look again
            self.node.release(self.node.wait_claim(self.key, index))
            if not self.node.has(self.key, index):
                found.update(source._acquire([index], 0, True))
        return found

    def on_disk(self, index: int) -> bool:
        return self.node.has(self.key, index)

    def read(self, source: FetchingSource, index: int, start: int, length: int) -> bytes | memoryview | None:
        """Bytes of a block from the node cache, checked; None when it is not there or was damaged (then
        dropped, to be fetched again). A block damaged again after it was fetched again is refused."""
        try:
            return self.node.read(self.key, index, start, length)
        except DamagedBlock as exc:
            with source._lock:
                again = index in source._refetched
                source._refetched.add(index)
            if again:
                raise CorruptStoreError(
                    f"{exc}. It was dropped and fetched again once already and is damaged again: the disk "
                    f"damages what is written to it; delete {self.node.directory} and check that disk, or "
                    "read without it (RemoteOptions.node_cache_dir=None)"
                ) from None
            logger.warning("%s; dropping it and fetching the block again", exc)
            self.node.drop(self.key, index)
            return None

    def pin(self, blocks: set[int]) -> None:
        self.node.pin({(self.key, i) for i in blocks})

    def ahead_bytes(self, options: RemoteOptions) -> int:
        return self.node.budget_bytes // loader_workers()  # the node's budget is shared by a loader's workers
