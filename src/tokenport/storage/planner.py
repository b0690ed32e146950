"""The prefetch planner of a remote source: `prefetch(ranges)` fetches the exact bytes of the leading
ranges first, then the blocks of the rest in order of first use, in background windows that double,
never more unread blocks ahead than the cache holds; `read_ranges` fetches each run of ranges that
fits the cache in few coalesced GETs. A source subclasses `PlannedSource` and fetches the blocks."""

from __future__ import annotations

import abc
import bisect
import concurrent.futures
import logging
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from .base import ByteSource, Range
from .blocks import MEMORY, BlockCache
from .fetchers import Fetcher
from .options import RemoteOptions

logger = logging.getLogger(__name__)

EXACT_GAP = 16 << 10
"""`prefetch`'s exact first window merges ranges this many bytes apart or closer into one GET."""

ExactSpans = tuple[list[int], list[int], list[Future[bytes]]]
"""Spans `prefetch` fetches exactly: their starts, their ends, their GETs."""


class PlannedSource(ByteSource):
    """A source whose reads are planned ahead: the plan's state and steps. Subclasses fetch blocks
    (`_acquire`), keep them (`_cache`, `_fetcher`) and issue the GETs (`_get_range`)."""

    options: RemoteOptions
    _lock: threading.Lock
    _plan_changed: threading.Condition
    _plan: int
    _pending: set[int]
    _plan_blocks: list[int]
    _plan_pos: dict[int, int]
    _plan_done: int
    _plan_window: int
    _reading: set[int]
    _exact: ExactSpans
    _cache: BlockCache
    _fetcher: Fetcher

    @abc.abstractmethod
    def _acquire(self, blocks: Sequence[int], gap_blocks: int, in_memory: bool) -> dict[int, bytes]:
        """Make sorted `blocks` available; the blocks held in memory."""

    @abc.abstractmethod
    def _get_range(self, start: int, end: int) -> bytes:
        """Bytes start..end-1 in one ranged GET, retried."""

    @abc.abstractmethod
    def _check_range(self, offset: int, length: int) -> None:
        """Refuse a range outside the object."""

    @abc.abstractmethod
    def _executor(self) -> ThreadPoolExecutor:
        """The pool that issues concurrent GETs."""

    @abc.abstractmethod
    def _filesystem(self) -> Any:
        """The store's client, made on first use."""

    @abc.abstractmethod
    def _pin(self) -> None:
        """Protect the blocks read next from eviction from the node cache."""

    def prefetch(self, ranges: Sequence[Range]) -> None:
        """Plan reads of `ranges` (in the order they will be read): start GETs of the exact bytes of
        the leading ranges (up to `options.first_exact_bytes`, nearby ones merged; a read of them waits
        for its own GET only), then fetch the blocks of the rest in the background in order of first
        use, in windows that double (from `options.first_window_blocks`), never more unread blocks
        ahead than half the cache. A new call replaces the plan."""
        bs = self.options.block_size
        for offset, length in ranges:
            self._check_range(offset, length)
        exact_end = self._fetch_exact(ranges)
        order: dict[int, None] = {}
        for offset, length in ranges[exact_end:]:
            if length:
                order.update(dict.fromkeys(range(offset // bs, (offset + length - 1) // bs + 1)))
        blocks = list(order)
        with self._lock:
            self._plan += 1
            plan = self._plan
            self._pending.clear()
            self._plan_blocks = blocks
            self._plan_pos = {block: i for i, block in enumerate(blocks)}
            self._plan_done = 0
            self._plan_window = self.options.first_window_blocks
            self._plan_changed.notify_all()
        if exact_end == 0:
            self._next_window(plan, wait=False)
        if self._plan_done < len(blocks):
            threading.Thread(target=self._run_plan, args=(plan,), name="tokenport-plan", daemon=True).start()

    def _prefetch(self, ranges: Sequence[Range], start: int) -> int:
        """Fetch the missing blocks of ranges[start:end], the longest run that fits the cache; return end."""
        bs = self.options.block_size
        budget = min(self.options.cache_bytes, MEMORY.capacity) // bs
        wanted: dict[int, None] = {}  # an ordered set, in read order
        end = start
        while end < len(ranges):
            offset, length = ranges[end]
            self._check_range(offset, length)
            if self._exact[0] and self._exact_span(offset, length) >= 0:
                end += 1
                continue
            blocks = range(offset // bs, (offset + length - 1) // bs + 1) if length else range(0)
            new = [i for i in blocks if i not in wanted]
            if len(wanted) + len(new) > budget:
                if end == start:
                    return start + 1  # larger than the cache: read() fetches it directly
                break
            wanted.update(dict.fromkeys(new))
            end += 1
        with self._lock:
            self._reading = set(wanted)
        self._pin()
        gap_blocks = self.options.coalesce_gap // bs
        fetched = self._acquire(sorted(wanted), gap_blocks, in_memory=False)
        self._store(fetched, list(wanted))
        return end

    def _store(self, fetched: dict[int, bytes], wanted: Sequence[int]) -> None:
        """Cache fetched blocks so LRU evicts gap fillers first, then wanted blocks needed last.

        `wanted` is in read order; wanted blocks that were cached already are refreshed too.
        """
        wanted_set = set(wanted)
        for index, data in fetched.items():
            if index not in wanted_set:
                self._cache.put(index, data)
        for index in reversed(wanted):
            if index in fetched:
                self._cache.put(index, fetched[index])
            else:
                self._cache.get(index)

    # --- internals ---

    def _fetch_exact(self, ranges: Sequence[Range]) -> int:
        """Start GETs (first in the pool's queue, in read order) of the bytes of the leading ranges, up to
        `first_exact_bytes`, not cached already, nearby ones merged; how many leading ranges that covers.
        Replaces the earlier spans."""
        limit, total, end = self.options.first_exact_bytes, 0, 0
        while end < len(ranges) and total + ranges[end][1] <= limit:
            total += ranges[end][1]
            end += 1
        first_use: dict[int, int] = {}  # span start -> place of its first range in the read order
        wanted = sorted((o, o + n, i) for i, (o, n) in enumerate(ranges[:end]) if n and not self._cached(o, n))
        spans: list[list[int]] = []
        spare = limit  # bytes of gaps the spans may bridge: the window moves at most twice
        for lo, hi, place in wanted:  # `first_exact_bytes`, however dense the ranges
            gap = max(0, lo - spans[-1][1]) if spans else 0
            if (
                spans
                and lo - spans[-1][1] <= EXACT_GAP
                and gap <= spare
                and hi - spans[-1][0] <= self.options.max_request_bytes
            ):
                spare -= gap
                spans[-1][1] = max(spans[-1][1], hi)
                first_use[spans[-1][0]] = min(first_use[spans[-1][0]], place)
            else:
                spans.append([lo, hi])
                first_use[lo] = place
        futures: list[Future[bytes]] = []
        if spans:
            self._filesystem()  # the client is made here once, not raced by the pool's threads
            pool = self._executor()
            by_use = sorted(range(len(spans)), key=lambda k: first_use[spans[k][0]])
            submitted = {k: pool.submit(self._get_range, *spans[k]) for k in by_use}
            futures = [submitted[k] for k in range(len(spans))]
        with self._lock:
            self._exact = ([lo for lo, _ in spans], [hi for _, hi in spans], futures)
        return end

    def _cached(self, offset: int, length: int) -> bool:
        """True when every block of the range is in memory or in the node cache."""
        bs = self.options.block_size
        for index in range(offset // bs, (offset + length - 1) // bs + 1):
            if self._cache.get(index) is None and not self._fetcher.on_disk(index):
                return False
        return True

    def _exact_span(self, offset: int, length: int) -> int:
        """The place of the exact span that holds the range, or -1."""
        starts, ends, _ = self._exact
        k = bisect.bisect_right(starts, offset) - 1
        return k if k >= 0 and offset + length <= ends[k] else -1

    def _from_exact(self, offset: int, length: int) -> memoryview | None:
        """The range from the spans `prefetch` fetches exactly (waiting for its GET), or None when they do
        not hold it. A failed GET raises its StorageError once; its span is then forgotten, so a later
        read of it fetches blocks."""
        starts, ends, futures = self._exact
        k = self._exact_span(offset, length)
        if k < 0:
            return None
        error = futures[k].exception()
        if error is not None:
            with self._lock:
                if self._exact[2][k : k + 1] == [futures[k]]:
                    self._exact = (
                        starts[:k] + starts[k + 1 :],
                        ends[:k] + ends[k + 1 :],
                        futures[:k] + futures[k + 1 :],
                    )
            raise error
        at = offset - starts[k]
        return memoryview(futures[k].result())[at : at + length]

    def _ahead_blocks(self) -> int:
        """How many planned blocks may wait unread: half of what the cache that keeps them holds."""
        return max(1, self._fetcher.ahead_bytes(self.options) // self.options.block_size // 2)

    def _end_plan(self) -> None:
        """Stop the running plan (call holding the lock)."""
        self._plan += 1
        self._pending.clear()
        self._plan_blocks, self._plan_pos, self._plan_done = [], {}, 0
        self._plan_changed.notify_all()

    def _run_plan(self, plan: int) -> None:
        """The background part of a plan: its windows in order, waiting while too many blocks are unread.
        It starts once the exact GETs are answered, so the first reads do not queue behind blocks."""
        concurrent.futures.wait(self._exact[2])
        try:
            while self._next_window(plan, wait=True):
                pass
        except Exception:  # the reads that need these blocks fetch them and raise there
            logger.debug("%s: background prefetch stopped", self.url, exc_info=True)

    def _next_window(self, plan: int, wait: bool, upto: int = 0) -> bool:
        """Fetch the plan's next window (at least through place `upto`); False when the plan is over.
        With `wait`, first wait until fewer than half the cache's blocks are fetched and unread."""
        ahead = self._ahead_blocks()
        with self._lock:
            while wait and self._plan == plan and len(self._pending) >= ahead:
                self._plan_changed.wait(1.0)
            if self._plan != plan or self._plan_done >= len(self._plan_blocks):
                return False
            size = self._plan_window if not wait else max(1, min(self._plan_window, ahead - len(self._pending)))
            start, end = self._plan_done, max(upto + 1, self._plan_done + size)
            window = self._plan_blocks[start:end]
            self._plan_done = start + len(window)
            self._plan_window = min(2 * self._plan_window, ahead, max(self.options.first_window_blocks, 64))
            self._pending.update(window)
        self._pin()
        gap_blocks = self.options.coalesce_gap // self.options.block_size
        fetched = self._acquire(sorted(window), gap_blocks, in_memory=False)
        self._store(fetched, window)
        return True

    def _pull(self, lo: int, hi: int) -> None:
        """A read of planned blocks the plan has not reached: fetch the plan through them now."""
        with self._lock:
            places = [p for i in range(lo, hi) if (p := self._plan_pos.get(i, -1)) >= self._plan_done]
            plan = self._plan
        if places:
            self._next_window(plan, wait=False, upto=max(places))
