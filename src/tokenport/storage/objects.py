"""The fsspec layer: a URL's file system (with the store's own retries off, ours on), an object's
size and version tag, ranged GETs held to the version pinned at open, and whole small objects
(downloaded once into a local cache, read, or listed)."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._files import publish_mode
from ..errors import ConfigError, StorageError
from .options import RemoteOptions
from .retries import ObjectChanged, classify, with_retries
from .schemes import GLOB_CHARS, FileInfo

INSTALL_HINT = "pip install 'tokenport[s3]'"


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


def child_session(parent_fs: Any) -> Any:
    """For a forked child's new S3 client: a new aiobotocore session configured as the parent's file
    system would make it, sharing only the parent's data loader (the service models it parsed from
    JSON, most of a new client's 0.1-0.3 s), not its credentials or event loop state; None for other
    stores."""
    session = getattr(parent_fs, "session", None)
    if session is None or getattr(parent_fs, "_call_s3", None) is None:
        return None
    try:
        import aiobotocore.session

        loader = session.get_component("data_loader")
        fresh = aiobotocore.session.AioSession(**getattr(parent_fs, "kwargs", {}))
        fresh.register_component("data_loader", loader)
    except Exception:  # an s3fs or aiobotocore that works otherwise: the child makes its own as before
        return None
    return fresh


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
