"""Object-store byte sources: ranged GETs through fsspec, block caches (in memory, bounded per
source and per process; on disk, shared by a node: `nodecache.py`), a prefetch planner that
fetches in order of first use and coalesces nearby ranges, and retries with backoff for transient
faults that honour a store's Retry-After and stop at `retry_deadline`. Sources survive fork and spawn.

Retries are ours alone: for S3 the botocore client is built with one attempt and s3fs's
own retry loop is set to one pass, so every transient fault reaches `with_retries`, is
counted in `stats.retries` and backs off with full jitter. Two lower layers remain: s3fs
sleeps 0.1 s once after a connection-level fault or a SlowDown before handing it to us, and
aiohttp resends an idempotent request once when a reused keep-alive connection drops (RFC 9112).
"""

from __future__ import annotations

import bisect
import concurrent.futures
import errno
import hashlib
import logging
import os
import random
import sys
import tempfile
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from .._checks import check_int
from .._files import publish_mode
from .._fork import keep_forked_heaps_shared
from ..errors import ConfigError, CorruptStoreError, StorageError
from ..metrics import live
from .base import ByteSource, Range
from .nodecache import DamagedBlock, NodeCache
from .schemes import GLOB_CHARS, FileInfo, Scheme

logger = logging.getLogger(__name__)

T = TypeVar("T")

INSTALL_HINT = "pip install 'tokenport[s3]'"


@dataclass(frozen=True)
class RemoteOptions:
    """How an object-store source reads: block and cache sizes, request coalescing, retries."""

    block_size: int = 1 << 20  # bytes per cached block; every GET covers whole blocks
    cache_bytes: int = 256 << 20  # bound of the LRU block cache, per source
    max_retries: int = 6  # retries after the first attempt, for transient faults only
    backoff_initial: float = 0.1  # seconds; the n-th retry waits uniform(0, min(max, initial * 2**n))
    backoff_max: float = 10.0
    coalesce_gap: int = 1 << 20  # prefetch merges wanted blocks this many bytes apart or closer
    max_request_bytes: int = 64 << 20  # the largest single ranged GET
    max_concurrency: int = 8  # threads issuing a prefetch's GETs
    retry_deadline: float = 120.0  # seconds one read may spend retrying before it fails with StorageError
    first_exact_bytes: int = 256 << 10  # `prefetch` fetches exactly the bytes of its leading ranges, up to this
    # many, in coalesced GETs and returns; the rest comes in whole blocks in the background (0: blocks only)
    first_window_blocks: int = 32  # blocks in the plan's first window of whole blocks; later windows double (to 64)
    node_cache_dir: str | None = None  # a block cache on disk shared by the machine's processes (None: off)
    node_cache_bytes: int = 32 << 30  # bound of the block data kept in node_cache_dir
    storage_options: Mapping[str, Any] = field(default_factory=dict)  # fsspec options: endpoint_url, key, ...

    def __post_init__(self) -> None:
        object.__setattr__(self, "block_size", check_int("RemoteOptions.block_size", self.block_size, 1))
        for name, minimum in (
            ("cache_bytes", self.block_size),
            ("max_retries", 0),
            ("coalesce_gap", 0),
            ("max_request_bytes", self.block_size),
            ("max_concurrency", 1),
            ("first_window_blocks", 1),
            ("first_exact_bytes", 0),
            ("node_cache_bytes", self.block_size),
        ):
            what = "at least block_size" if minimum == self.block_size and name not in _COUNTS else ""
            object.__setattr__(self, name, check_int(f"RemoteOptions.{name}", getattr(self, name), minimum, what=what))
        _check_number("backoff_initial", self.backoff_initial, 0.0)
        _check_number("backoff_max", self.backoff_max, self.backoff_initial, "backoff_initial")
        _check_number("retry_deadline", self.retry_deadline, 0.0)
        if self.node_cache_dir is not None:
            if not isinstance(self.node_cache_dir, (str, os.PathLike)):
                raise ConfigError(
                    f"RemoteOptions.node_cache_dir={self.node_cache_dir!r}: give a directory path, "
                    "or None for no disk cache"
                )
            object.__setattr__(self, "node_cache_dir", os.fspath(self.node_cache_dir))
        if not isinstance(self.storage_options, Mapping):
            raise ConfigError(
                f"RemoteOptions.storage_options must be a mapping of fsspec options, "
                f"got {type(self.storage_options).__name__}"
            )
        object.__setattr__(self, "storage_options", dict(self.storage_options))


_COUNTS = ("max_concurrency", "first_window_blocks")

EXACT_GAP = 16 << 10
"""`prefetch`'s exact first window merges ranges this many bytes apart or closer into one GET."""


def _check_number(name: str, value: object, minimum: float, minimum_name: str | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= minimum:
        bound = f"{minimum_name} ({minimum})" if minimum_name else str(minimum)
        raise ConfigError(f"RemoteOptions.{name}={value!r}: must be a number >= {bound}")


@dataclass
class RemoteStats:
    """Counters of one source: ranged GETs issued (retries included), bytes received, block lookups."""

    requests: int = 0
    bytes_fetched: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    retries: int = 0


# --- classifying failures -------------------------------------------------------------

_TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "TooManyRequests",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "RequestTimeout",
        "RequestTimeoutException",
        "InternalError",
        "ServiceUnavailable",
    }
)
"""Error codes (S3 and other AWS-style stores) that mean 'try again later'."""

_TRANSIENT_TYPES = frozenset(
    {
        "ConnectionError",  # builtin (reset, refused, aborted, broken pipe) and botocore's
        "TimeoutError",  # builtin, socket.timeout, asyncio/fsspec timeouts
        "HTTPClientError",  # botocore: connection closed, read timeout, streaming error
        "IncompleteReadError",
        "ResponseParserError",  # throttling replies with truncated XML
        "IncompleteRead",  # http.client
        "RemoteDisconnected",
        "ClientPayloadError",  # aiohttp
        "ClientConnectionError",
        "ServerDisconnectedError",
    }
)
"""Exception class names (matched along the MRO) of connection-level faults, where any retry may succeed."""

_TRANSIENT_ERRNOS = frozenset(
    {
        errno.EAGAIN,
        errno.EBUSY,  # s3fs: 503 SlowDown
        errno.EIO,  # s3fs: unrecognised error code
        getattr(errno, "EREMOTEIO", 121),  # s3fs: 500 InternalError
        errno.ETIMEDOUT,
        errno.ECONNRESET,
        errno.ECONNREFUSED,
        errno.ECONNABORTED,
        errno.EPIPE,
        errno.ENETDOWN,
        errno.ENETUNREACH,
        errno.EHOSTUNREACH,
    }
)


def _chain(exc: BaseException) -> list[BaseException]:
    """`exc` and the exceptions it was raised from (s3fs wraps botocore errors into OSErrors)."""
    out: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in out and len(out) < 8:
        out.append(current)
        current = current.__cause__ or current.__context__
    return out


def _http_status(exc: BaseException) -> tuple[int | None, str]:
    """The HTTP status and error code an exception carries (botocore ClientError, aiohttp), if any."""
    response = getattr(exc, "response", None)
    if isinstance(response, Mapping):
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        code = str(response.get("Error", {}).get("Code", ""))
        if status is None and code.isdigit():
            status = int(code)
        return status, code
    status = getattr(exc, "status", None)
    if isinstance(status, int) and not isinstance(status, bool) and 100 <= status < 600:
        return status, ""
    return None, ""


class ObjectChanged(Exception):
    """A store answered a ranged GET with another version of the object than the one pinned at open."""


def classify(exc: BaseException) -> str:
    """One of 'transient', 'missing', 'denied', 'changed' (not the version pinned at open) or
    'failed' (permanent) for an error from a store."""
    chain = _chain(exc)
    if any(isinstance(item, ObjectChanged) for item in chain):
        return "changed"
    for item in chain:
        status, code = _http_status(item)
        if status is None and not code:
            continue
        if status == 412 or code == "PreconditionFailed":
            return "changed"
        if code in _TRANSIENT_CODES or status == 429 or (status is not None and status >= 500):
            return "transient"
        if status == 404 or code in ("NoSuchKey", "NoSuchBucket"):
            return "missing"
        if status in (401, 403):
            return "denied"
        return "failed"
    if any(isinstance(item, (FileNotFoundError, IsADirectoryError, NotADirectoryError)) for item in chain):
        return "missing"
    if any(isinstance(item, PermissionError) for item in chain):
        return "denied"
    for item in chain:
        if {cls.__name__ for cls in type(item).__mro__} & _TRANSIENT_TYPES:
            return "transient"
        if isinstance(item, OSError) and item.errno in _TRANSIENT_ERRNOS:
            return "transient"
    return "failed"


def _permanent_error(url: str, what: str, exc: BaseException, kind: str) -> StorageError:
    if kind == "changed":
        return StorageError(
            f"{url}: the object changed since it was opened ({what}: the store no longer holds the version "
            "read at open, and bytes of two versions are never mixed); reopen the store to read the new object"
        )
    if kind == "missing":
        return StorageError(f"{url}: not found while {what} ({exc}); check the bucket, key and endpoint_url")
    if kind == "denied":
        return StorageError(
            f"{url}: access denied while {what} ({exc}); check the credentials "
            "(key/secret, AWS_PROFILE, AWS_ACCESS_KEY_ID) and the bucket policy"
        )
    return StorageError(
        f"{url}: {what} failed with a permanent error ({type(exc).__name__}: {exc}); "
        "check the URL, the credentials and the storage options"
    )


def with_retries(
    fn: Callable[[], T],
    *,
    url: str,
    what: str,
    options: RemoteOptions,
    on_retry: Callable[[], None] | None = None,
) -> T:
    """Call `fn`, retrying transient faults with exponential backoff and full jitter; else StorageError."""
    attempt = 0
    began = time.monotonic()
    while True:
        try:
            return fn()
        except Exception as exc:  # classified below; anything unrecognised is permanent
            kind = classify(exc)
            if kind != "transient":
                raise _permanent_error(url, what, exc, kind) from exc
            delay = random.uniform(0.0, min(options.backoff_max, options.backoff_initial * 2**attempt))
            asked = retry_after(exc)
            if asked is not None:  # the store says when: wait that long (up to backoff_max)
                delay = max(delay, min(asked, options.backoff_max))
            spent = time.monotonic() - began
            if attempt == options.max_retries or spent + delay > options.retry_deadline:
                raise StorageError(
                    f"{url}: {what} still failing after {attempt + 1} attempts in {spent:.1f}s; last error: "
                    f"{type(exc).__name__}: {exc}. The store is unavailable or throttling: "
                    "retry later, or raise RemoteOptions.max_retries / retry_deadline / backoff_max"
                ) from exc
            attempt += 1
            logger.info(
                "%s: %s failed (%s: %s); retry %d/%d in %.3fs",
                url,
                what,
                type(exc).__name__,
                exc,
                attempt,
                options.max_retries,
                delay,
            )
            if on_retry is not None:
                on_retry()
            time.sleep(delay)


def retry_after(exc: BaseException) -> float | None:
    """Seconds a throttled store asked to wait (its Retry-After header, in seconds), if it said."""
    for item in _chain(exc):
        response = getattr(item, "response", None)
        headers = response.get("ResponseMetadata", {}).get("HTTPHeaders", {}) if isinstance(response, Mapping) else {}
        if not headers:
            headers = getattr(item, "headers", None) or {}
        for name, value in dict(headers).items():
            if str(name).lower() == "retry-after":
                try:
                    return max(0.0, float(value))
                except (TypeError, ValueError):
                    return None  # an HTTP date: fall back to our own backoff
    return None


# --- file systems ---------------------------------------------------------------------


def open_fs(url: str, storage_options: Mapping[str, Any]) -> tuple[Any, str]:
    """The fsspec file system and path for `url`, with the store's own retries turned off (ours apply)."""
    try:
        import fsspec.core
    except ImportError:
        raise ConfigError(f"{url}: reading URLs needs fsspec; {INSTALL_HINT}") from None
    options = dict(storage_options)
    protocol = fsspec.core.split_protocol(url)[0]
    if protocol is not None and protocol not in fsspec.available_protocols():
        raise ConfigError(
            f"{url}: no storage backend knows the scheme {protocol!r}; use a local path or a URL fsspec "
            "serves (s3://, gs://, az://, hf://, http(s)://, ...) or register one with storage.register_scheme"
        )
    is_s3 = protocol in ("s3", "s3a")
    if is_s3:
        config = dict(options.get("config_kwargs") or {})
        config["retries"] = {"total_max_attempts": 1}
        options["config_kwargs"] = config
    try:
        fs, path = fsspec.core.url_to_fs(url, **options)
    except ImportError as exc:
        raise ConfigError(f"{url}: {exc}; {INSTALL_HINT}") from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{url}: bad storage options {sorted(options)} ({exc})") from None
    if is_s3:
        fs.retries = 1
    return fs, path


def _identity(info: Mapping[str, Any]) -> str | None:
    """The object's version tag: its ETag, else its modification time, else None."""
    for key in ("ETag", "etag", "md5Hash", "LastModified", "last_modified", "mtime", "updated"):
        value = info.get(key)
        if value:
            return str(value)
    return None


def _stat(fs: Any, path: str, url: str, options: RemoteOptions) -> tuple[int, str | None]:
    """The object's size and version tag, from one `info()` call (`pin_of` the tag says if reads
    can be held to it)."""
    fs.invalidate_cache(path)
    info = with_retries(lambda: fs.info(path), url=url, what="reading object metadata", options=options)
    if info.get("type", "file") != "file":
        raise StorageError(f"{url}: is a {info.get('type')}, not an object; give the URL of a file")
    return int(info["size"]), _identity(info)


def pin_of(fs: Any, etag: str | None) -> str | None:
    """The ETag that ranged GETs of `fs` are held to (S3 answers them only while the object has it),
    or None where the store offers no conditional GET (reads then see a rewrite only as a short range)."""
    if etag is None or getattr(fs, "_call_s3", None) is None or not etag.startswith('"'):
        return None
    return etag


def get_bytes(fs: Any, path: str, start: int, end: int, pin: str | None) -> bytes:
    """Bytes start..end-1 of an object in one GET; with `pin`, one the store answers only while the
    object's ETag is `pin` (S3's If-Match), else ObjectChanged (never bytes of another version)."""
    if pin is None:
        return fs.cat_file(path, start=start, end=end)
    from fsspec.asyn import sync

    bucket, key, version = fs.split_path(path)

    async def get() -> bytes:
        response = await fs._call_s3(
            "get_object",
            Bucket=bucket,
            Key=key,
            Range=f"bytes={start}-{end - 1}",
            IfMatch=pin,
            **({"VersionId": version} if version else {}),
        )
        try:
            if response.get("ETag", pin) != pin:  # a store that ignores If-Match
                raise ObjectChanged(f"the store answered with ETag {response.get('ETag')}, not {pin}")
            return await response["Body"].read()
        finally:
            response["Body"].close()

    return sync(fs.loop, get)


# --- the block cache ------------------------------------------------------------------


class _MemoryPool:
    """The in-memory blocks of every source in this process, bounded together (LRU across sources)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.nbytes = 0
        self.lock = threading.RLock()
        self.order: OrderedDict[tuple[int, int], _BlockCache] = OrderedDict()

    def shrink(self) -> None:
        while self.nbytes > self.capacity and self.order:
            (_, index), cache = next(iter(self.order.items()))
            cache.drop(index)

    def after_fork(self) -> None:
        self.lock = threading.RLock()
        self.order.clear()
        self.nbytes = 0


MEMORY = _MemoryPool(int(os.environ.get("TOKENPORT_REMOTE_MEMORY_BYTES", 512 << 20)))
"""The process-wide bound of remote block caches (TOKENPORT_REMOTE_MEMORY_BYTES, default 512 MiB)."""


def set_remote_memory_budget(nbytes: int) -> None:
    """Bound the in-memory block caches of all remote sources of this process together to `nbytes`."""
    nbytes = check_int("remote memory budget", nbytes, 1)
    with MEMORY.lock:
        MEMORY.capacity = nbytes
        MEMORY.shrink()


class _BlockCache:
    """Blocks of one object held in memory: at most `capacity` bytes, and the process's pool bound
    across all sources; least recently used evicted first."""

    def __init__(self, capacity: int, pool: _MemoryPool = MEMORY) -> None:
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


_ExactSpans = tuple[list[int], list[int], list[Future[bytes]]]


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


# --- the source -----------------------------------------------------------------------


class ObjectStoreSource(ByteSource):
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
        self._path = self._given_fs._strip_protocol(self.url) if self._given_fs is not None else ""
        self.stats = RemoteStats()
        self._cache = _BlockCache(self.options.cache_bytes)
        self._reset_threads()
        _SOURCES.add(self)

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
        self._exact: _ExactSpans = ([], [], [])  # spans `prefetch` fetches exactly: starts, ends, their GETs
        self._refetched: set[int] = set()  # blocks dropped from the node cache as damaged and fetched again

    def _after_fork(self) -> None:
        if self._fs is not None:  # fsspec clients are not fork-safe: made anew on first use; the
            _FORKED_CLIENTS.append(self._fs)  # parent's is kept: collecting it waits 1 s for a loop
        self._fs = None  # thread that did not survive the fork (s3fs's close_session finalizer)
        self._cache = _BlockCache(self.options.cache_bytes)
        self._reset_threads()

    def _setup_node_cache(self) -> None:
        self._node: NodeCache | None = None
        self._key = ""
        if self.options.node_cache_dir is not None:
            self._node = NodeCache(self.options.node_cache_dir, self.options.node_cache_bytes)
            self._key = NodeCache.key(self.url, self._size, self.etag, self.options.block_size)

    def _filesystem(self) -> Any:
        fs = self._fs
        if fs is None:
            given = self._given_fs
            if given is None:
                fs, self._path = open_fs(self.url, self._storage_options)
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
        if first == last and self._node is not None:  # most reads, once the node cache has the block
            on_disk = self._disk_read(first, offset - first * bs, length)
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

    def close(self) -> None:
        with self._lock:
            self._exact = ([], [], [])
            self._end_plan()
            self._plan_changed.notify_all()
            pool, self._pool = self._pool, None
        self._cache.clear()
        if pool is not None:
            pool.shutdown(wait=True)
        if self._node is not None:
            with self._lock:
                self._reading = set()
            self._pin()

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
        for lo, hi, place in wanted:
            if spans and lo - spans[-1][1] <= EXACT_GAP and hi - spans[-1][0] <= self.options.max_request_bytes:
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
            if self._cache.get(index) is None and (self._node is None or not self._node.has(self._key, index)):
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
        if self._node is not None:  # the node's budget is shared by the DataLoader workers of this node
            capacity = self._node.budget_bytes // _loader_workers()
        else:
            capacity = min(self.options.cache_bytes, MEMORY.capacity)
        return max(1, capacity // self.options.block_size // 2)

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

    def _check_range(self, offset: int, length: int) -> None:
        if offset < 0 or length < 0 or offset + length > self._size:
            raise StorageError(
                f"{self.url}: read of {length} bytes at offset {offset} is outside the object "
                f"({self._size} bytes); the index does not match this file"
            )

    def _from_disk(self, index: int, lo: int, hi: int) -> bytes | memoryview:
        """Bytes lo..hi-1 of a block from the node cache, fetching the block again if it was evicted."""
        data = self._disk_read(index, lo, hi - lo)
        while data is None:
            got = self._acquire([index], 0, in_memory=True).get(index)
            data = got[lo:hi] if got is not None else self._disk_read(index, lo, hi - lo)
        return data

    def _disk_read(self, index: int, start: int, length: int) -> bytes | memoryview | None:
        """Bytes of a block from the node cache, checked; None when it is not there or was damaged (then
        dropped, to be fetched again). A block damaged again after it was fetched again is refused."""
        assert self._node is not None
        try:
            return self._node.read(self._key, index, start, length)
        except DamagedBlock as exc:
            with self._lock:
                again = index in self._refetched
                self._refetched.add(index)
            if again:
                raise CorruptStoreError(
                    f"{exc}. It was dropped and fetched again once already and is damaged again: the disk "
                    f"damages what is written to it; delete {self._node.directory} and check that disk, or "
                    "read without it (RemoteOptions.node_cache_dir=None)"
                ) from None
            logger.warning("%s; dropping it and fetching the block again", exc)
            self._node.drop(self._key, index)
            return None

    def _blocks(self, lo: int, hi: int) -> dict[int, bytes]:
        """Blocks lo..hi-1 held in memory; those not returned are in the node cache."""
        if self._plan_pos:
            self._pull(lo, hi)
        return self._acquire(list(range(lo, hi)), 0, in_memory=True)

    def _acquire(self, blocks: Sequence[int], gap_blocks: int, in_memory: bool) -> dict[int, bytes]:
        """Make sorted `blocks` available: from memory, the node cache, another fetcher, or ranged GETs
        (missing neighbours `gap_blocks` apart or closer share one GET). Returns blocks held in memory
        (all fetched ones when `in_memory`); the rest are on disk in the node cache."""
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
        claims: dict[int, int] = {}
        elsewhere: list[int] = []
        try:
            if self._node is not None and mine:
                todo = []
                for index in mine:
                    if self._node.has(self._key, index):
                        hits += 1
                        continue
                    fd = self._node.try_claim(self._key, index)
                    if fd is None:
                        elsewhere.append(index)
                    elif self._node.has(self._key, index):  # published between the look and the claim
                        self._node.release(fd)
                        hits += 1
                    else:
                        claims[index] = fd
                        todo.append(index)
            else:
                todo = mine
            if in_memory:  # a read's lookups (prefetches are not counted)
                self._count_lookups(hits, len(todo))
            if todo:
                with self._lock:
                    keep = {(self._key, i) for i in self._pending}

                def land(span: tuple[int, int]) -> dict[int, bytes]:
                    """Fetch one span, then publish its claimed blocks and release them at once."""
                    got = self._get_span(*span)
                    held: dict[int, bytes] = {}
                    if self._node is None:
                        for index, data in got.items():
                            held[index] = data  # gap fillers too: kept in memory, evicted first
                            self._cache.put(index, data)
                            self._done(index, mine_set)
                        return held
                    ours = {index: data for index, data in got.items() if index in claims}
                    published = self._node.put(self._key, ours, keep) if ours else set()
                    for index, data in ours.items():
                        if index not in published:  # over the budget: memory only
                            self._cache.put(index, data)
                            held[index] = data
                        elif in_memory:
                            held[index] = data
                        self._node.release(claims.pop(index))
                        self._done(index, mine_set)
                    return held

                mine_set = set(mine)
                if self._node is None:
                    spans = plan_spans(todo, gap_blocks, self._max_blocks())
                else:
                    spans = self._node_spans(todo, gap_blocks, claims)
                for held in self._map(land, spans):
                    found.update(held)
        finally:
            for fd in claims.values():
                self._node.release(fd)  # type: ignore[union-attr]
            with self._lock:
                for index in mine:
                    event = self._inflight.pop(index, None)
                    if event is not None:
                        event.set()
        if not in_memory:  # a prefetch leaves blocks another thread or process fetches to it: a wait
            return found  # here would stall the plan's next window, and the read waits if it must
        for event in waits:
            event.wait()
        for index in elsewhere:  # another process fetches it: wait for its claim, then look again
            assert self._node is not None
            self._node.release(self._node.wait_claim(self._key, index))
            if not self._node.has(self._key, index):
                found.update(self._acquire([index], 0, in_memory))
        if in_memory:
            for index in blocks:
                if index not in found and (self._node is None or not self._node.has(self._key, index)):
                    data = self._cache.get(index)
                    found.update({index: data} if data is not None else self._acquire([index], 0, True))
        return found

    def _node_spans(self, todo: Sequence[int], gap_blocks: int, claims: dict[int, int]) -> list[tuple[int, int]]:
        """Spans over the claimed blocks `todo`, bridging a gap only with blocks this process claims and
        can keep on disk without evicting (added to `claims`): a gap filler that no cache keeps is bytes
        moved for nothing, and one another process fetches or has published is a second download."""
        assert self._node is not None
        node = self._node
        room: list[int] = []  # blocks the budget still holds beside `todo`, read at the first gap

        def bridge(gap: range) -> bool:
            if not room:
                room.append((node.budget_bytes - node.used_bytes()) // self.options.block_size - len(todo))
            if len(gap) > room[0] or not self._claim_gap(gap, claims):
                return False
            room[0] -= len(gap)
            return True

        return plan_spans(todo, gap_blocks, self._max_blocks(), bridge)

    def _claim_gap(self, gap: range, claims: dict[int, int]) -> bool:
        """Claim every block of `gap` (none on disk, none being fetched elsewhere), or none of them."""
        assert self._node is not None
        taken: dict[int, int] = {}
        for index in gap:
            fd = None if self._node.has(self._key, index) else self._node.try_claim(self._key, index)
            if fd is not None and self._node.has(self._key, index):
                self._node.release(fd)
                fd = None
            if fd is None:
                for held in taken.values():
                    self._node.release(held)
                return False
            taken[index] = fd
        claims.update(taken)
        return True

    def _count_lookups(self, hits: int, misses: int) -> None:
        with self._lock:
            self.stats.cache_hits += hits
            self.stats.cache_misses += misses
        if (recorder := live.recorder) is not None:
            recorder.storage_cache(hits, misses)

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

    def _pin(self) -> None:
        """Protect the blocks this source reads next (the ranges being read, the plan's fetched and
        unread blocks) from eviction from the node cache by any process."""
        if self._node is None:
            return
        with self._pin_lock:
            with self._lock:
                blocks = self._pending | self._reading
            self._node.pin({(self._key, i) for i in blocks})

    def _max_blocks(self) -> int:
        return self.options.max_request_bytes // self.options.block_size

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


def _loader_workers() -> int:
    """How many torch DataLoader worker processes share this one's loader (1 outside a worker)."""
    data = sys.modules.get("torch.utils.data")
    info = data.get_worker_info() if data is not None else None
    return max(1, int(getattr(info, "num_workers", 1)))


_FORKED_CLIENTS: list[Any] = []
"""File systems the parent made, kept unused in a forked child so their finalizers never run there."""

_SOURCES: weakref.WeakSet[ObjectStoreSource] = weakref.WeakSet()
"""Every open source of this process, made fork-safe in a forked child."""


def _after_fork_in_child() -> None:
    MEMORY.after_fork()
    for source in list(_SOURCES):
        source._after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)
keep_forked_heaps_shared()


# --- whole small objects --------------------------------------------------------------


def default_cache_dir() -> Path:
    """Where `fetch_cached` keeps objects: $TOKENPORT_CACHE_DIR/objects, else ~/.cache/tokenport/objects."""
    root = os.environ.get("TOKENPORT_CACHE_DIR")
    return Path(root).expanduser() / "objects" if root else Path.home() / ".cache" / "tokenport" / "objects"


def fetch_cached(
    url: str,
    cache_dir: str | os.PathLike | None = None,
    options: RemoteOptions | None = None,
    **storage_options: Any,
) -> str:
    """Download a whole (small) object once into a local cache keyed by URL, size and ETag; its local path.

    A later call costs one metadata request; a changed object (new size or ETag, or new
    modification time where the store gives no ETag) is fetched again. The file appears
    atomically (temporary name, fsync, rename), so concurrent callers never see a partial copy.
    """
    options = options or RemoteOptions()
    fs, path = open_fs(url, {**options.storage_options, **storage_options})
    size, etag = _stat(fs, path, url, options)
    key = hashlib.sha256(f"{url}\n{size}\n{etag}".encode()).hexdigest()[:32]
    directory = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = directory / f"{key}-{os.path.basename(path.rstrip('/')) or 'object'}"
    if target.is_file() and target.stat().st_size == size:
        return str(target)
    data = b""
    if size:
        pin = pin_of(fs, etag)
        data = with_retries(lambda: get_bytes(fs, path, 0, size, pin), url=url, what="downloading", options=options)
    if len(data) != size:
        raise StorageError(f"{url}: downloaded {len(data)} bytes, expected {size}; the object changed, retry")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            publish_mode(tmp)  # mkstemp made it 0600; the published copy takes the umask
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise StorageError(
            f"{directory}: cannot write the object cache ({exc.strerror or exc}); "
            "pass cache_dir or set TOKENPORT_CACHE_DIR to a writable directory"
        ) from exc
    return str(target)


def read_small_object(url: str, options: RemoteOptions | None = None, **storage_options: Any) -> bytes | None:
    """The whole content of a small object (a manifest), or None when it does not exist."""
    options = options or RemoteOptions()
    fs, path = open_fs(url, {**options.storage_options, **storage_options})

    def cat() -> bytes | None:
        try:
            return fs.cat_file(path)
        except Exception as exc:  # a missing object is an answer here, not an error
            if classify(exc) == "missing":
                return None
            raise

    return with_retries(cat, url=url, what="reading", options=options)


# --- the scheme -------------------------------------------------------------------------


def find_objects(url: str, options: RemoteOptions | None = None, **storage_options: Any) -> list[FileInfo]:
    """The objects `url` names (glob matches, everything under a prefix, or the object), sorted;
    names starting with "." are skipped. Listing is retried as reads are."""
    options = options or RemoteOptions()
    fs, path = open_fs(url, {**options.storage_options, **storage_options})

    def listing() -> dict[str, Any]:
        fs.invalidate_cache()
        try:
            if GLOB_CHARS & set(path):
                return fs.glob(path, detail=True)
            info = fs.info(path)
        except Exception as exc:  # nothing there is an answer here, not an error
            if classify(exc) == "missing":
                return {}
            raise
        return fs.find(path, detail=True) if info["type"] == "directory" else {path: info}

    found = with_retries(listing, url=url, what="listing", options=options)
    files = []
    for name in sorted(found):
        info = found[name]
        if info.get("type") == "directory" or name.rsplit("/", 1)[-1].startswith("."):
            continue
        files.append(FileInfo(fs.unstrip_protocol(name), int(info["size"]), f"{info['size']}:{_identity(info) or ''}"))
    return files


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
