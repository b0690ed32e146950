"""Retries of object-store calls: which faults are transient (throttling, dropped connections, 5xx),
which are permanent (missing, denied, the object changed), and `with_retries`, which retries the
transient ones with full-jitter backoff, honours a store's Retry-After and stops at `retry_deadline`.

Retries are ours alone: for S3 the botocore client is built with one attempt and s3fs's
own retry loop is set to one pass (`objects.open_fs`), so every transient fault reaches
`with_retries`, is counted in `stats.retries` and backs off with full jitter. Two lower layers
remain: s3fs sleeps 0.1 s once after a connection-level fault or a SlowDown before handing it to us,
and aiohttp resends an idempotent request once when a reused keep-alive connection drops (RFC 9112).
"""

from __future__ import annotations

import errno
import logging
import random
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TypeVar

from ..errors import StorageError

if TYPE_CHECKING:
    from .options import RemoteOptions

logger = logging.getLogger(__name__)

T = TypeVar("T")

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
