"""The on-disk cache of built indices: content-addressed, atomic, locked, and rank-aware.

Each built index set is kept in ``DIRECTORY/KEY/``, where KEY is a sha256 of the store's content
identity, every parameter of the build, and the cache format version: all its arrays in one file,
``arrays.bin`` (each 64-byte aligned), so a hit maps one file (one descriptor) however many arrays
it holds, and writing pays one fsync of that file and one of each directory. A blend's entry holds
every child's indices (see builder.datasets). The description records each array's dtype, shape
and offset and the file's size; a file of another size is a damaged entry (CorruptStoreError).
Entries of the earlier layout (one ``.npy`` per array) are still read. An entry is written under
a temporary name and published by one atomic directory rename, so only complete entries are ever
seen; a dead builder's staging directory is removed by the next builder of that key. A ``fcntl.flock`` on
``DIRECTORY/KEY.lock`` makes the processes of one machine build an entry once; under
``torch.distributed`` one rank per node (or one rank in all, on a shared filesystem) builds
before a barrier. Lock files are left in place on purpose: deleting them would race with
processes about to take them.

An unwritable cache directory is not fatal unless asked: the indices are built in memory and a
warning is logged (``strict=True`` raises ConfigError instead).
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import json
import logging
import math
import mmap
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np

from .._schema import Count, Document, Text, decode, to_builtins
from ..errors import ConfigError, CorruptStoreError
from ..indexed import IndexedDataset
from ..indexed.commit import publish_mode
from ..indexed.identity import store_identity

logger = logging.getLogger(__name__)

CACHE_FORMAT = "tokenport.index-cache/2"
DESCRIPTION = "description.json"
ARRAYS_FILE = "arrays.bin"
_ALIGN = 64

_ARRAY_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def _json_scalar(value: Any) -> Any:
    """numpy scalars as their Python equals, so parameters may come straight from arrays."""
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def canonical_json(value: Any, field: str = "params") -> str:
    """One JSON text per value: sorted keys, no spaces, no NaN; ConfigError naming `field` otherwise."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False, default=_json_scalar)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{field}: cannot be part of a cache key ({exc}); pass JSON values only") from None


def cache_key(store: IndexedDataset, params: dict[str, Any]) -> str:
    """sha256 of the store's content identity, the build parameters and the cache format."""
    return _key(store_identity(store), params)


def _key(identity: dict[str, Any], params: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of (cache format, store identity, params)."""
    if not isinstance(params, dict):
        raise ConfigError(f"params={params!r}: expected a dict of every parameter that changes the indices")
    text = canonical_json({"format": CACHE_FORMAT, "store": identity, "params": params})
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class IndexCache:
    """Index arrays built once per (store content, parameters) and memory-mapped afterwards."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = os.path.abspath(os.fspath(directory))

    def entry_path(self, key: str) -> str:
        """The directory that holds entry `key` once it is published."""
        return os.path.join(self.directory, key)

    def get_or_build(
        self,
        store: IndexedDataset,
        params: dict[str, Any],
        build: Callable[[], dict[str, np.ndarray]],
        *,
        strict: bool = False,
        distributed: bool = True,
        shared_filesystem: bool = False,
    ) -> dict[str, np.ndarray]:
        """The arrays cached for (store, params), calling `build` only when no entry exists yet.

        With `distributed` and an initialized torch.distributed group, local rank 0 of each node
        (global rank 0 when `shared_filesystem`) builds first, all ranks meet at a barrier, then
        the rest load. Any rank that finds no entry after the barrier builds it itself under the
        lock, so a wrong guess of the local rank costs time, never correctness.
        """
        return self.get_or_build_for(
            store_identity(store),
            params,
            build,
            source=store.prefix,
            strict=strict,
            distributed=distributed,
            shared_filesystem=shared_filesystem,
        )

    def get_or_build_for(
        self,
        identity: dict[str, Any],
        params: dict[str, Any],
        build: Callable[[], dict[str, np.ndarray]],
        *,
        source: str = "",
        strict: bool = False,
        distributed: bool = True,
        shared_filesystem: bool = False,
    ) -> dict[str, np.ndarray]:
        """``get_or_build`` for indices whose inputs are not one store: ``identity`` says what they
        were built from (e.g. the children's keys of a blend, or nothing), ``source`` names it."""
        key = _key(identity, params)
        description = {"store": source, "params": params, "identity": identity}
        dist = _initialized_distributed() if distributed else None
        if dist is None:
            return self._get_or_build(key, description, build, strict)
        first = int(dist.get_rank()) == 0 if shared_filesystem else _local_rank(dist) == 0
        arrays = self._get_or_build(key, description, build, strict) if first else None
        dist.barrier()
        return arrays if arrays is not None else self._get_or_build(key, description, build, strict)

    def load(self, key: str, *, distributed: bool = True) -> dict[str, np.ndarray] | None:
        """The arrays of published entry ``key`` (a key known from an earlier build), or None when absent.

        Under an initialized torch.distributed group a rank that finds the entry meets the others at
        the one barrier ``get_or_build_for`` holds, so it can stand in for that call on every rank.
        """
        arrays = self._load(key)
        dist = _initialized_distributed() if distributed and arrays is not None else None
        if dist is not None:
            dist.barrier()
        return arrays

    def _get_or_build(
        self, key: str, description: dict[str, Any], build: Callable[[], dict[str, np.ndarray]], strict: bool
    ) -> dict[str, np.ndarray]:
        """Load entry `key`, or build and publish it while holding its lock."""
        hit = self._load(key)
        if hit is not None:
            return hit
        try:
            os.makedirs(self.directory, exist_ok=True)
            lock = os.open(os.path.join(self.directory, key + ".lock"), os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            return self._in_memory(build, exc, strict)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            hit = self._load(key)
            if hit is not None:
                return hit
            self._remove_temporaries(key)
            arrays = _checked(build())
            try:
                self._publish(key, description, arrays)
            except OSError as exc:
                raced = self._load(key)  # a builder on another node, where flock is not shared
                return raced if raced is not None else self._unpublished(arrays, exc, strict)
            published = self._load(key)
            return published if published is not None else arrays  # removed meanwhile: the built arrays stand
        finally:
            os.close(lock)  # releases the flock

    def _load(self, key: str) -> dict[str, np.ndarray] | None:
        """The arrays of a published entry, memory-mapped; None when there is no entry."""
        entry = self.entry_path(key)
        path = os.path.join(entry, DESCRIPTION)
        remedy = f"delete the entry directory {entry} and it is rebuilt"
        try:
            with open(path, "rb") as f:
                data = f.read()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise CorruptStoreError(f"{path}: cannot read it ({exc.strerror}); {remedy}") from None
        description = decode(data, _Description, where=path, remedy=remedy, error=CorruptStoreError)
        arrays = description.arrays
        if description.file is None:  # the earlier layout: one .npy per array
            return {name: _map_npy(os.path.join(entry, name + ".npy"), layout) for name, layout in arrays.items()}
        assert description.size is not None  # _Description holds both or neither
        return _map_packed(os.path.join(entry, description.file), description.size, arrays)

    def _publish(self, key: str, description: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        """Write the arrays (one file) and description to a temporary directory, then rename it to the entry."""
        staging = tempfile.mkdtemp(prefix=f".{key}.{os.getpid()}.", suffix=".tmp", dir=self.directory)
        try:
            layouts = {}
            size = 0
            with open(os.path.join(staging, ARRAYS_FILE), "wb") as f:
                for name, array in arrays.items():
                    array = np.require(array, requirements="C")  # C order, so the recorded layout reads it back
                    padding = -size % _ALIGN
                    f.write(b"\0" * padding)
                    size += padding
                    layouts[name] = {"dtype": str(array.dtype), "shape": list(array.shape), "offset": size}
                    array.reshape(-1).view(np.uint8).tofile(f)
                    size += array.nbytes
                f.flush()
                os.fsync(f.fileno())
            layout = {"file": ARRAYS_FILE, "size": size, "arrays": layouts}
            text = json.dumps(
                {"format": CACHE_FORMAT, **description, **layout, "digest": _layout_digest(layout)},
                indent=1,
                sort_keys=True,
                default=_json_scalar,
            )
            _write_synced(os.path.join(staging, DESCRIPTION), lambda f: f.write(text.encode("utf-8")))
            _fsync_directory(staging)
            publish_mode(staging, directory=True)  # mkdtemp made it 0700; published, it takes the umask
            os.rename(staging, self.entry_path(key))
            _fsync_directory(self.directory)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise

    def _remove_temporaries(self, key: str) -> None:
        """Delete staging directories of `key` left by builders that died (the lock holder owns all others)."""
        for leftover in glob.glob(os.path.join(glob.escape(self.directory), f".{key}.*.tmp")):
            shutil.rmtree(leftover, ignore_errors=True)

    def _in_memory(
        self, build: Callable[[], dict[str, np.ndarray]], exc: OSError, strict: bool
    ) -> dict[str, np.ndarray]:
        """Build without caching because the directory cannot be used (or raise, when strict)."""
        self._refuse_or_warn(exc, strict)
        return _checked(build())

    def _unpublished(self, arrays: dict[str, np.ndarray], exc: OSError, strict: bool) -> dict[str, np.ndarray]:
        """Return built arrays that could not be written (or raise, when strict)."""
        self._refuse_or_warn(exc, strict)
        return arrays

    def _refuse_or_warn(self, exc: OSError, strict: bool) -> None:
        """Raise ConfigError when strict; otherwise log that the indices live in memory only."""
        reason = exc.strerror or str(exc)
        if strict:
            raise ConfigError(
                f"index cache directory {self.directory}: cannot write ({reason}); "
                "pass a writable directory, or strict=False to build in memory"
            ) from exc
        logger.warning(
            "index cache directory %s cannot be written (%s): building the indices in memory, uncached",
            self.directory,
            reason,
        )


class _Layout(Document, frozen=True):
    """Where one array of an entry lies: its dtype, shape and byte offset in its file."""

    dtype: Text
    shape: tuple[Count, ...]
    offset: Count

    def __post_init__(self) -> None:
        try:
            dtype = np.dtype(self.dtype)
        except TypeError:
            raise ValueError(f"{self.dtype!r} is not a numpy dtype - at `dtype`") from None
        if dtype.hasobject or dtype.itemsize == 0 or dtype.kind not in "biufc":
            raise ValueError(f"{self.dtype!r} is not a numeric dtype - at `dtype`")


class _Description(Document, frozen=True):
    """An entry's description.json: what it was built from (for people) and where its arrays lie.

    ``file`` and ``size`` are absent in entries of the earlier layout (one .npy per array);
    ``digest`` (entries written since it was added) covers the layout, so a damaged one is refused.
    """

    format: Text
    arrays: dict[str, _Layout]
    store: str = ""
    params: Any = None
    identity: Any = None
    file: str | None = None
    size: Count | None = None
    digest: str | None = None

    def __post_init__(self) -> None:
        if self.format != CACHE_FORMAT:
            raise ValueError(f"expected {CACHE_FORMAT!r} - at `$.format`")
        if (self.file is None) != (self.size is None):
            raise ValueError("`file` and `size` go together - at `$.size`")
        if self.file is not None and self.file != ARRAYS_FILE:
            raise ValueError(f"expected {ARRAYS_FILE!r} - at `$.file`")
        for name in self.arrays:
            if not _ARRAY_NAME.match(name):
                raise ValueError(f"{name!r} is not an array name - at `$.arrays`")
        layout = {"file": self.file, "size": self.size, "arrays": to_builtins(self.arrays)}
        if self.digest is not None and self.digest != _layout_digest(layout):
            raise ValueError("the layout does not match its digest - at `$.digest`")


def _layout_digest(layout: dict[str, Any]) -> str:
    """sha256 of an entry's layout (file, size, arrays) as canonical JSON."""
    return hashlib.sha256(canonical_json(layout, "layout").encode("utf-8")).hexdigest()


def _map_npy(path: str, layout: _Layout) -> np.ndarray:
    """A published .npy file as a read-only memory-mapped array, from the layout its entry recorded.

    Equal to ``np.load(path, mmap_mode="r")`` at a fraction of the cost (no header parsing: the
    entry's description holds dtype, shape and data offset); a file whose size disagrees with
    its layout is reported as a damaged entry.
    """
    dtype = np.dtype(layout.dtype)
    shape = layout.shape
    count = math.prod(shape)  # Python ints: a huge shape cannot wrap
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size != layout.offset + count * dtype.itemsize:
            raise CorruptStoreError(
                f"{path}: {size} bytes where the cache entry records {layout.offset + count * dtype.itemsize}; "
                f"delete the entry directory {os.path.dirname(path)} and it is rebuilt"
            )
        if count == 0:
            return np.zeros(shape, dtype=dtype)
        mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return np.frombuffer(mapping, dtype=dtype, count=count, offset=layout.offset).reshape(shape)


def _map_packed(path: str, size: int, layouts: dict[str, _Layout]) -> dict[str, np.ndarray]:
    """An entry's arrays as read-only views of one memory map of its file (one descriptor in all);
    a file whose size disagrees with the description is reported as a damaged entry."""
    with open(path, "rb") as f:
        found = os.fstat(f.fileno()).st_size
        if found != size:
            raise CorruptStoreError(
                f"{path}: {found} bytes where the cache entry records {size}; "
                f"delete the entry directory {os.path.dirname(path)} and it is rebuilt"
            )
        mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
    arrays = {}
    for name, layout in layouts.items():
        dtype = np.dtype(layout.dtype)
        shape = layout.shape
        count = math.prod(shape)  # Python ints: a huge shape cannot wrap
        if layout.offset + count * dtype.itemsize > size:
            raise CorruptStoreError(
                f"{path}: array {name!r} runs past the file's {size} bytes; "
                f"delete the entry directory {os.path.dirname(path)} and it is rebuilt"
            )
        if count == 0:
            arrays[name] = np.zeros(shape, dtype=dtype)
        else:
            arrays[name] = np.frombuffer(mapping, dtype=dtype, count=count, offset=layout.offset).reshape(shape)
    return arrays


def _checked(arrays: Any) -> dict[str, np.ndarray]:
    """The build result as numpy arrays with safe file names, or ConfigError naming the fault."""
    if not isinstance(arrays, dict) or not arrays:
        raise ConfigError(f"build returned {type(arrays).__name__}: expected a non-empty dict of name -> numpy array")
    for name, array in arrays.items():
        if not isinstance(name, str) or not _ARRAY_NAME.match(name):
            raise ConfigError(f"build returned array name {name!r}: use letters, digits, '_', '.' or '-'")
        if not isinstance(array, np.ndarray) or array.dtype.hasobject:
            raise ConfigError(f"build returned {name!r} as {type(array).__name__}: expected a numeric numpy array")
    return arrays


def _write_synced(path: str, write: Callable[[Any], Any]) -> None:
    """Write a file through `write(file)` and fsync it before it can be published."""
    with open(path, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())


def _fsync_directory(path: str) -> None:
    """Make renames in `path` durable where the filesystem allows fsync of a directory."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems cannot fsync a directory; the rename is still atomic
    finally:
        os.close(fd)


def _initialized_distributed() -> Any:
    """torch.distributed when its default group is initialized, else None; never imports torch itself."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist


def _local_rank(dist: Any) -> int:
    """This process's rank on its node: LOCAL_RANK as torchrun sets it, else the global rank."""
    text = os.environ.get("LOCAL_RANK")
    return int(text) if text is not None and text.isdigit() else int(dist.get_rank())
