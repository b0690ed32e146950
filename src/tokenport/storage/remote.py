"""Object-store byte sources: ranged GETs through fsspec, a bounded LRU block cache, a
prefetch planner that coalesces nearby ranges, and retries with backoff for transient faults.

Retries are ours alone: for S3 the botocore client is built with one attempt and s3fs's
own retry loop is set to one pass, so every transient fault reaches `with_retries`, is
counted in `stats.retries` and backs off with full jitter. Two lower layers remain: s3fs
sleeps 0.1 s once after a connection-level fault or a SlowDown before handing it to us, and
aiohttp resends an idempotent request once when a reused keep-alive connection drops (RFC 9112).
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import random
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from .._checks import check_int
from .._files import publish_mode
from ..errors import ConfigError, StorageError
from ..metrics import live
from .base import ByteSource, Range
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
    storage_options: Mapping[str, Any] = field(default_factory=dict)  # fsspec options: endpoint_url, key, ...

    def __post_init__(self) -> None:
        object.__setattr__(self, "block_size", check_int("RemoteOptions.block_size", self.block_size, 1))
        for name, minimum in (
            ("cache_bytes", self.block_size),
            ("max_retries", 0),
            ("coalesce_gap", 0),
            ("max_request_bytes", self.block_size),
            ("max_concurrency", 1),
        ):
            what = "at least block_size" if minimum == self.block_size and name != "max_concurrency" else ""
            object.__setattr__(self, name, check_int(f"RemoteOptions.{name}", getattr(self, name), minimum, what=what))
        _check_number("backoff_initial", self.backoff_initial, 0.0)
        _check_number("backoff_max", self.backoff_max, self.backoff_initial, "backoff_initial")
        if not isinstance(self.storage_options, Mapping):
            raise ConfigError(
                f"RemoteOptions.storage_options must be a mapping of fsspec options, "
                f"got {type(self.storage_options).__name__}"
            )
        object.__setattr__(self, "storage_options", dict(self.storage_options))


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


def classify(exc: BaseException) -> str:
    """One of 'transient', 'missing', 'denied' or 'failed' (permanent) for an error from a store."""
    chain = _chain(exc)
    for item in chain:
        status, code = _http_status(item)
        if status is None and not code:
            continue
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
    while True:
        try:
            return fn()
        except Exception as exc:  # classified below; anything unrecognised is permanent
            kind = classify(exc)
            if kind != "transient":
                raise _permanent_error(url, what, exc, kind) from exc
            if attempt == options.max_retries:
                raise StorageError(
                    f"{url}: {what} still failing after {attempt + 1} attempts; last error: "
                    f"{type(exc).__name__}: {exc}. The store is unavailable or throttling: "
                    "retry later, or raise RemoteOptions.max_retries / backoff_max"
                ) from exc
            delay = random.uniform(0.0, min(options.backoff_max, options.backoff_initial * 2**attempt))
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


# --- file systems ---------------------------------------------------------------------


def open_fs(url: str, storage_options: Mapping[str, Any]) -> tuple[Any, str]:
    """The fsspec file system and path for `url`, with the store's own retries turned off (ours apply)."""
    try:
        import fsspec.core
    except ImportError:
        raise ConfigError(f"{url}: reading URLs needs fsspec; {INSTALL_HINT}") from None
    options = dict(storage_options)
    protocol = fsspec.core.split_protocol(url)[0]
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
    """The object's size and version tag, from one `info()` call."""
    fs.invalidate_cache(path)
    info = with_retries(lambda: fs.info(path), url=url, what="reading object metadata", options=options)
    if info.get("type", "file") != "file":
        raise StorageError(f"{url}: is a {info.get('type')}, not an object; give the URL of a file")
    return int(info["size"]), _identity(info)


# --- the block cache ------------------------------------------------------------------


class _BlockCache:
    """Blocks of one object, least recently used evicted first, holding at most `capacity` bytes."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.nbytes = 0
        self._blocks: OrderedDict[int, bytes] = OrderedDict()

    def get(self, index: int) -> bytes | None:
        data = self._blocks.get(index)
        if data is not None:
            self._blocks.move_to_end(index)
        return data

    def put(self, index: int, data: bytes) -> None:
        old = self._blocks.pop(index, None)
        if old is not None:
            self.nbytes -= len(old)
        self._blocks[index] = data
        self.nbytes += len(data)
        while self.nbytes > self.capacity:
            _, evicted = self._blocks.popitem(last=False)
            self.nbytes -= len(evicted)

    def clear(self) -> None:
        self._blocks.clear()
        self.nbytes = 0


def plan_spans(blocks: Sequence[int], gap_blocks: int, max_blocks: int) -> list[tuple[int, int]]:
    """Merge sorted block ids into [lo, hi) spans, bridging gaps of <= gap_blocks, each <= max_blocks long."""
    spans: list[tuple[int, int]] = []
    for block in blocks:
        if spans:
            lo, hi = spans[-1]
            if block - hi <= gap_blocks and block + 1 - lo <= max_blocks:
                spans[-1] = (lo, block + 1)
                continue
        spans.append((block, block + 1))
    return spans


# --- the source -----------------------------------------------------------------------


class ObjectStoreSource(ByteSource):
    """One object in an fsspec store, read with ranged GETs through a bounded LRU block cache.

    `prefetch` / `read_ranges` plan ahead: the blocks of many ranges are fetched in few
    coalesced GETs (concurrently), so the `read` calls that follow hit the cache.
    Thread-safe; two threads missing the same block at once may both fetch it.
    When `fs` is given it is used as is, and its own retry settings stay in force beneath ours.
    The size and ETag are read once at open; an object rewritten while open is noticed only
    when a range comes back short, so reopen stores after rewriting them.
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
        self._size, self.etag = _stat(self._fs, self._path, url, self.options)

    def _setup(self) -> None:
        if self._given_fs is None:
            self._fs, self._path = open_fs(self.url, self._storage_options)
        else:
            self._fs, self._path = self._given_fs, self._given_fs._strip_protocol(self.url)
        self.stats = RemoteStats()
        self._cache = _BlockCache(self.options.cache_bytes)
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = 0

    def __getstate__(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "options": self.options,
            "storage_options": self._storage_options,
            "fs": self._given_fs,
            "size": self._size,
            "etag": self.etag,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.url, self.options = state["url"], state["options"]
        self._storage_options, self._given_fs = state["storage_options"], state["fs"]
        self._size, self.etag = state["size"], state["etag"]
        self._setup()

    @property
    def size(self) -> int:
        return self._size

    @property
    def cached_bytes(self) -> int:
        """Bytes now held in the block cache (never more than `options.cache_bytes`)."""
        return self._cache.nbytes

    def read(self, offset: int, length: int) -> bytes | memoryview:
        self._check_range(offset, length)
        if length == 0:
            return b""
        bs = self.options.block_size
        first, last = offset // bs, (offset + length - 1) // bs
        blocks = self._blocks(first, last + 1)
        start = offset - first * bs
        if first == last:
            return memoryview(blocks[first])[start : start + length]
        parts = [memoryview(blocks[first])[start:]]
        parts.extend(memoryview(blocks[i]) for i in range(first + 1, last))
        parts.append(memoryview(blocks[last])[: offset + length - last * bs])
        return b"".join(parts)

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
        """Fetch the blocks of `ranges` (in the order they will be read) in few coalesced GETs.

        Blocks until they are cached. Only the leading ranges whose blocks fit in the cache
        are fetched, so prefetching never evicts what it just fetched.
        """
        self._prefetch(ranges, 0)

    def close(self) -> None:
        with self._lock:
            self._cache.clear()
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    # --- internals ---

    def _check_range(self, offset: int, length: int) -> None:
        if offset < 0 or length < 0 or offset + length > self._size:
            raise StorageError(
                f"{self.url}: read of {length} bytes at offset {offset} is outside the object "
                f"({self._size} bytes); the index does not match this file"
            )

    def _blocks(self, lo: int, hi: int) -> dict[int, bytes]:
        """Blocks lo..hi-1, from the cache or fetched (adjacent missing blocks in one GET)."""
        found: dict[int, bytes] = {}
        missing: list[int] = []
        with self._lock:
            for index in range(lo, hi):
                data = self._cache.get(index)
                if data is None:
                    missing.append(index)
                else:
                    found[index] = data
            self.stats.cache_hits += len(found)
            self.stats.cache_misses += len(missing)
        if (recorder := live.recorder) is not None:
            recorder.storage_cache(len(found), len(missing))
        if missing:
            fetched = self._fetch(plan_spans(missing, 0, self._max_blocks()))
            self._store(fetched, missing)
            found.update(fetched)
        return found

    def _prefetch(self, ranges: Sequence[Range], start: int) -> int:
        """Fetch the missing blocks of ranges[start:end], the longest run that fits the cache; return end."""
        bs = self.options.block_size
        budget = self.options.cache_bytes // bs
        wanted: dict[int, None] = {}  # an ordered set, in read order
        end = start
        while end < len(ranges):
            offset, length = ranges[end]
            self._check_range(offset, length)
            blocks = range(offset // bs, (offset + length - 1) // bs + 1) if length else range(0)
            new = [i for i in blocks if i not in wanted]
            if len(wanted) + len(new) > budget:
                if end == start:
                    return start + 1  # larger than the cache: read() fetches it directly
                break
            wanted.update(dict.fromkeys(new))
            end += 1
        with self._lock:
            missing = [i for i in wanted if self._cache.get(i) is None]
        if missing:
            gap_blocks = self.options.coalesce_gap // bs
            spans = plan_spans(sorted(missing), gap_blocks, self._max_blocks())
            self._store(self._fetch(spans), list(wanted))
        return end

    def _max_blocks(self) -> int:
        return self.options.max_request_bytes // self.options.block_size

    def _store(self, fetched: dict[int, bytes], wanted: Sequence[int]) -> None:
        """Cache fetched blocks so LRU evicts gap fillers first, then wanted blocks needed last.

        `wanted` is in read order; wanted blocks that were cached already are refreshed too.
        """
        wanted_set = set(wanted)
        with self._lock:
            for index, data in fetched.items():
                if index not in wanted_set:
                    self._cache.put(index, data)
            for index in reversed(wanted):
                if index in fetched:
                    self._cache.put(index, fetched[index])
                else:
                    self._cache.get(index)

    def _fetch(self, spans: list[tuple[int, int]]) -> dict[int, bytes]:
        """Fetch block spans (one ranged GET each, concurrently when several) and split them into blocks."""
        if len(spans) == 1 or self.options.max_concurrency == 1:
            results = [self._get_span(lo, hi) for lo, hi in spans]
        else:
            results = list(self._executor().map(lambda span: self._get_span(*span), spans))
        blocks: dict[int, bytes] = {}
        for part in results:
            blocks.update(part)
        return blocks

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None or self._pool_pid != os.getpid():  # a forked child needs its own threads
                self._pool = ThreadPoolExecutor(self.options.max_concurrency, thread_name_prefix="tokenport")
                self._pool_pid = os.getpid()
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
        data = self._fs.cat_file(self._path, start=start, end=end)
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
        data = with_retries(lambda: fs.cat_file(path, start=0, end=size), url=url, what="downloading", options=options)
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
