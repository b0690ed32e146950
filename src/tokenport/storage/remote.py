"""Object-store byte sources: `ObjectStoreSource` reads one object of an fsspec store with ranged GETs
through a bounded block cache (in memory, `blocks.py`; on disk shared by a node, `nodecache.py`,
chosen at open: `fetchers.py`), plans reads ahead (`planner.py`), retries transient faults
(`retries.py`) and survives fork and spawn (`forking.py`); `FsspecScheme` serves every URL scheme
no registered backend claims (the fsspec layer: `objects.py`)."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, BinaryIO, TypeVar

from ..errors import ConfigError, StorageError
from ..metrics import live
from . import forking
from .base import ByteSource, Range
from .blocks import MEMORY, BlockCache, plan_spans, set_remote_memory_budget
from .fetchers import Fetcher, MemoryFetcher, NodeFetcher
from .forking import _FORKED_CLIENTS
from .nodecache import NodeCache
from .objects import _stat, child_session, fetch_cached, find_objects, get_bytes, open_fs, pin_of, read_small_object
from .options import RemoteOptions, RemoteStats
from .planner import ExactSpans, PlannedSource
from .retries import classify, with_retries
from .schemes import FileInfo, Scheme

__all__ = [  # besides the source and the scheme, the names other rooms and tests import from here
    "FSSPEC",
    "MEMORY",
    "_FORKED_CLIENTS",
    "FsspecScheme",
    "ObjectStoreSource",
    "RemoteOptions",
    "RemoteStats",
    "classify",
    "fetch_cached",
    "open_fs",
    "plan_spans",
    "set_remote_memory_budget",
    "with_retries",
]

T = TypeVar("T")

logger = logging.getLogger(__name__)

_MEMORY_ONLY = MemoryFetcher()


class ObjectStoreSource(PlannedSource):
    """One object in an fsspec store, read with ranged GETs through a bounded block cache: in memory
    (bounded per source and, across sources, per process) and, with `options.node_cache_dir`, on
    local disk shared by every process of the machine (each block downloaded once per node).

    `prefetch(ranges)` plans reads in the order given: it returns once the first window of blocks
    is cached and fetches the rest in the background in growing windows, never further ahead than
    the cache holds; a `read` of a block in flight waits for it rather than fetching it again.
    `read_ranges` fetches its ranges' blocks in few coalesced GETs. Thread-safe, and safe to use
    in forked or spawned worker processes (each process makes its own client, threads and locks).
    When `fs` is given it is used as is (re-made from its arguments in a forked child), and its own
    retry settings stay in force beneath ours. The size and ETag are read once at open and pin the
    object: on S3 every ranged GET is conditional on that ETag (If-Match), so an object replaced
    while open raises StorageError (reopen it) and is never read as a mix of versions; the node cache
    keys blocks by the ETag, so a replaced object never serves old blocks. Each block read from the
    node cache is checked against the checksums written with it: a damaged block is dropped and
    fetched again once, and refused with CorruptStoreError if it fails again.
    """

    def __init__(
        self,
        url: str,
        options: RemoteOptions | None = None,
        *,
        fs: Any = None,
        **storage_options: Any,
    ) -> None:
        if options is not None and not isinstance(options, RemoteOptions):
            raise ConfigError(f"{url}: options must be a RemoteOptions, got {type(options).__name__}")
        self.url = url
        self.options = options or RemoteOptions()
        self._storage_options = {**self.options.storage_options, **storage_options}
        self._given_fs = fs
        self._setup()
        self._size, self.etag = _stat(self._filesystem(), self._path, url, self.options)
        self._match = pin_of(self._filesystem(), self.etag)
        self._setup_node_cache()

    def _setup(self) -> None:
        self._fs: Any = None
        self._session: Any = None  # in a forked child: the session its new S3 client starts from
        self._path = self._given_fs._strip_protocol(self.url) if self._given_fs is not None else ""
        self.stats = RemoteStats()
        self._cache = BlockCache(self.options.cache_bytes)
        self._reset_threads()
        forking.track(self)

    def _reset_threads(self) -> None:
        """New locks and no threads, no blocks in flight, no plan: at open and in a forked child."""
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._inflight: dict[int, threading.Event] = {}
        self._plan_changed = threading.Condition(self._lock)
        self._plan = 0  # generation of the running prefetch plan; a new plan stops the old one
        self._pending: set[int] = set()  # blocks the plan fetched that are not read yet
        self._plan_blocks: list[int] = []  # the plan: blocks in order of first use
        self._plan_pos: dict[int, int] = {}  # block -> its place in the plan
        self._plan_done = 0  # plan blocks before this place are fetched or being fetched
        self._plan_window = 1  # blocks in the plan's next window
        self._reading: set[int] = set()  # blocks of the ranges `read_ranges` is reading now
        self._pin_lock = threading.Lock()  # one pin update at a time, so the newest set is written last
        self._exact: ExactSpans = ([], [], [])  # spans `prefetch` fetches exactly: starts, ends, their GETs
        self._refetched: set[int] = set()  # blocks dropped from the node cache as damaged and fetched again

    def _after_fork(self) -> None:
        if self._fs is not None:  # fsspec clients are not fork-safe: made anew on first use; the
            forking.keep_client(self._fs)  # parent's is kept: collecting it waits 1 s for a loop
            if self._given_fs is None:  # the new client reuses the service models the parent parsed
                self._session = child_session(self._fs)
        self._fs = None  # thread that did not survive the fork (s3fs's close_session finalizer)
        self._cache = BlockCache(self.options.cache_bytes)
        self._reset_threads()

    def _setup_node_cache(self) -> None:
        """Choose, once, where fetched blocks land: the node cache on disk, or memory only."""
        self._node: NodeCache | None = None
        self._key = ""
        self._fetcher: Fetcher = _MEMORY_ONLY
        options = self.options
        if options.node_cache_dir is None:
            return
        if self.etag is None and options.node_cache_defaulted:  # nothing to key its blocks by: a rewrite of
            logger.info("%s: the store gives no version tag; read without the node cache", self.url)
            return  # the same size would be served stale blocks
        try:
            self._node = NodeCache(options.node_cache_dir, options.node_cache_bytes)
        except StorageError as exc:
            if not options.node_cache_defaulted:
                raise
            logger.warning("%s; reading %s through memory only", exc, self.url)
            return
        self._key = NodeCache.key(self.url, self._size, self.etag, options.block_size)
        self._fetcher = NodeFetcher(self._node, self._key)

    def _filesystem(self) -> Any:
        fs = self._fs
        if fs is None:
            given = self._given_fs
            if given is None:
                session = {"session": self._session} if self._session is not None else {}
                fs, self._path = open_fs(self.url, {**self._storage_options, **session})
            elif getattr(given, "_pid", os.getpid()) != os.getpid():  # made before a fork: make our own
                fs = type(given)(*given.storage_args, **given.storage_options)
            else:
                fs = given
            self._fs = fs
        return fs

    def __getstate__(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "options": self.options,
            "storage_options": self._storage_options,
            "fs": self._given_fs,
            "size": self._size,
            "etag": self.etag,
            "pin": self._match,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.url, self.options = state["url"], state["options"]
        self._storage_options, self._given_fs = state["storage_options"], state["fs"]
        self._size, self.etag, self._match = state["size"], state["etag"], state["pin"]
        self._setup()
        self._setup_node_cache()

    def __del__(self) -> None:
        cache = getattr(self, "_cache", None)
        if cache is not None:
            cache.clear()

    @property
    def size(self) -> int:
        return self._size

    @property
    def cached_bytes(self) -> int:
        """Bytes now held in the in-memory block cache (never more than `options.cache_bytes`)."""
        return self._cache.nbytes

    def read(self, offset: int, length: int) -> bytes | memoryview:
        self._check_range(offset, length)
        if length == 0:
            return b""
        exact = self._from_exact(offset, length)
        if exact is not None:
            return exact
        bs = self.options.block_size
        first, last = offset // bs, (offset + length - 1) // bs
        on_disk = None
        if first == last:  # most reads, once the node cache has the block
            on_disk = self._fetcher.read(self, first, offset - first * bs, length)
            if on_disk is not None:
                self._count_lookups(1, 0)
        data = on_disk if on_disk is not None else self._read_blocks(offset, length, first, last)
        if self._pending:
            with self._lock:
                self._pending.difference_update(range(first, last + 1))
                self._plan_changed.notify_all()
        return data

    def _read_blocks(self, offset: int, length: int, first: int, last: int) -> bytes | memoryview:
        bs = self.options.block_size
        blocks = self._blocks(first, last + 1)
        parts = []
        for i in range(first, last + 1):
            lo = max(offset, i * bs) - i * bs
            hi = min(offset + length, (i + 1) * bs) - i * bs
            data = blocks.get(i)
            part = memoryview(data)[lo:hi] if data is not None else self._from_disk(i, lo, hi)
            parts.append(part)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def read_ranges(self, ranges: Sequence[Range]) -> list[bytes | memoryview]:
        out: list[bytes | memoryview] = []
        done = 0
        while done < len(ranges):
            end = self._prefetch(ranges, done)
            out.extend(self.read(offset, length) for offset, length in ranges[done:end])
            done = end
        return out

    def read_once(self, offset: int, length: int) -> bytes | memoryview:
        """`length` bytes at `offset` in ranged GETs of at most `max_request_bytes`, not cached."""
        self._check_range(offset, length)
        step = self.options.max_request_bytes
        parts = [
            self._get_range(start, min(start + step, offset + length)) for start in range(offset, offset + length, step)
        ]
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def stream(self, buffer_size: int | None = None) -> BinaryIO:
        """The object as a seekable binary file; each refill of the buffer (by default
        `max_request_bytes`, as large as fsspec's own read-ahead) is one retried ranged GET."""
        return super().stream(buffer_size or min(self.options.max_request_bytes, max(1, self._size)))

    def close(self) -> None:
        with self._lock:
            self._exact = ([], [], [])
            self._end_plan()
            self._plan_changed.notify_all()
            pool, self._pool = self._pool, None
        self._cache.clear()
        if pool is not None:
            pool.shutdown(wait=True)
        with self._lock:
            self._reading = set()
        self._pin()

    # --- internals ---

    def _check_range(self, offset: int, length: int) -> None:
        if offset < 0 or length < 0 or offset + length > self._size:
            raise StorageError(
                f"{self.url}: read of {length} bytes at offset {offset} is outside the object "
                f"({self._size} bytes); the index does not match this file"
            )

    def _from_disk(self, index: int, lo: int, hi: int) -> bytes | memoryview:
        """Bytes lo..hi-1 of a block from the node cache, fetching the block again if it was evicted."""
        data = self._fetcher.read(self, index, lo, hi - lo)
        while data is None:
            got = self._acquire([index], 0, in_memory=True).get(index)
            data = got[lo:hi] if got is not None else self._fetcher.read(self, index, lo, hi - lo)
        return data

    def _blocks(self, lo: int, hi: int) -> dict[int, bytes]:
        """Blocks lo..hi-1 held in memory; those not returned are in the node cache."""
        if self._plan_pos:
            self._pull(lo, hi)
        return self._acquire(list(range(lo, hi)), 0, in_memory=True)

    def _acquire(self, blocks: Sequence[int], gap_blocks: int, in_memory: bool) -> dict[int, bytes]:
        """Make sorted `blocks` available: from memory, the node cache, another fetcher, or ranged GETs
        (missing neighbours `gap_blocks` apart or closer share one GET). Returns blocks held in memory
        (all fetched ones when `in_memory`); the rest are on disk in the node cache."""
        found, mine, waits, hits = self._take(blocks)
        try:
            fetched, elsewhere = self._fetcher.fetch(self, mine, gap_blocks, in_memory, hits)
            found.update(fetched)
        finally:
            with self._lock:
                for index in mine:
                    event = self._inflight.pop(index, None)
                    if event is not None:
                        event.set()
        if not in_memory:  # a prefetch leaves blocks another thread or process fetches to it: a wait
            return found  # here would stall the plan's next window, and the read waits if it must
        for event in waits:
            event.wait()
        found.update(self._fetcher.await_elsewhere(self, elsewhere))
        for index in blocks:
            if index not in found and not self._fetcher.on_disk(index):
                data = self._cache.get(index)
                found.update({index: data} if data is not None else self._acquire([index], 0, True))
        return found

    def _take(self, blocks: Sequence[int]) -> tuple[dict[int, bytes], list[int], list[threading.Event], int]:
        """The blocks in memory, the blocks this thread now fetches (marked in flight), the events of
        those another thread fetches, and how many were hits."""
        found: dict[int, bytes] = {}
        mine: list[int] = []
        waits: list[threading.Event] = []
        hits = 0
        with self._lock:
            for index in blocks:
                data = self._cache.get(index)
                if data is not None:
                    found[index] = data
                    hits += 1
                elif index in self._inflight:
                    waits.append(self._inflight[index])
                    hits += 1
                else:
                    self._inflight[index] = threading.Event()
                    mine.append(index)
        return found, mine, waits, hits

    def _count_lookups(self, hits: int, misses: int) -> None:
        with self._lock:
            self.stats.cache_hits += hits
            self.stats.cache_misses += misses
        if (recorder := live.recorder) is not None:
            recorder.storage_cache(hits, misses)

    def _pin(self) -> None:
        """Protect the blocks this source reads next (the ranges being read, the plan's fetched and
        unread blocks) from eviction from the node cache by any process."""
        with self._pin_lock:
            with self._lock:
                blocks = self._pending | self._reading
            self._fetcher.pin(blocks)

    def _max_blocks(self) -> int:
        return self.options.max_request_bytes // self.options.block_size

    def _map(self, fn: Callable[[tuple[int, int]], T], spans: list[tuple[int, int]]) -> list[T]:
        """`fn` of each span, concurrently (one ranged GET each) when several."""
        if len(spans) == 1 or self.options.max_concurrency == 1:
            return [fn(span) for span in spans]
        return list(self._executor().map(fn, spans))

    def _done(self, index: int, mine: set[int]) -> None:
        """Wake the readers waiting for a block this thread fetched."""
        if index in mine:
            with self._lock:
                event = self._inflight.pop(index, None)
            if event is not None:
                event.set()

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.options.max_concurrency, thread_name_prefix="tokenport")
            return self._pool

    def _get_span(self, lo: int, hi: int) -> dict[int, bytes]:
        bs = self.options.block_size
        data = self._get_range(lo * bs, min(hi * bs, self._size))
        return {i: data[(i - lo) * bs : (i - lo + 1) * bs] for i in range(lo, hi)}

    def _get_range(self, start: int, end: int) -> bytes:
        """Bytes start..end-1 in one ranged GET, retried; StorageError when the object changed."""
        data = with_retries(
            lambda: self._ranged_get(start, end),
            url=self.url,
            what=f"reading bytes {start}-{end}",
            options=self.options,
            on_retry=self._count_retry,
        )
        if len(data) != end - start:
            raise StorageError(
                f"{self.url}: got {len(data)} bytes for range {start}-{end}; the object changed "
                f"since it was opened (ETag {self.etag}); reopen the store"
            )
        return data

    def _ranged_get(self, start: int, end: int) -> bytes:
        with self._lock:
            self.stats.requests += 1
        if (recorder := live.recorder) is not None:
            recorder.storage_requests.inc()
        data = get_bytes(self._filesystem(), self._path, start, end, self._match)
        with self._lock:
            self.stats.bytes_fetched += len(data)
        if (recorder := live.recorder) is not None:
            recorder.storage_bytes.inc(len(data))
        return data

    def _count_retry(self) -> None:
        with self._lock:
            self.stats.retries += 1
        if (recorder := live.recorder) is not None:
            recorder.storage_retries.inc()


class FsspecScheme(Scheme):
    """Every URL scheme fsspec knows (s3://, gs://, az://, http://, ...), with our retries and block cache."""

    def open(self, url: str, **options: Any) -> ByteSource:
        return ObjectStoreSource(url, **options)

    def find(self, url: str, **options: Any) -> list[FileInfo]:
        return find_objects(url, **options)

    def local_copy(self, url: str, cache_dir: str | None, **options: Any) -> str | None:
        return fetch_cached(url, cache_dir=cache_dir, **options)

    def read_small(self, url: str, **options: Any) -> bytes | None:
        return read_small_object(url, **options)


FSSPEC = FsspecScheme()
