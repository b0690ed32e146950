"""The one way in: `open_source(url, mode)` and the URL helpers every room uses (is it remote, its
local path, its scheme's backend, small reads, listings), served by the registered schemes or fsspec."""

from __future__ import annotations

import os

from ..errors import ConfigError
from .base import ByteSource
from .local import MmapSource, PreadSource
from .schemes import SCHEMES, FileInfo, Scheme

MODES = ("auto", "mmap", "pread", "remote")

__all__ = ["MODES", "find", "is_remote", "local_path", "open_index_source", "open_source", "read_small", "scheme_for"]


def is_remote(path: str | os.PathLike) -> bool:
    """True for URLs other than local files (s3://, gs://, http://, a registered scheme, ...)."""
    text = os.fspath(path)
    return "://" in text and not text.startswith("file://")


def local_path(path: str | os.PathLike) -> str:
    """A local path with any file:// scheme removed."""
    text = os.fspath(path)
    return text[len("file://") :] if text.startswith("file://") else text


def scheme_for(url: str) -> Scheme:
    """The backend of the URL `url`: the scheme registered for it (by tokenport, the caller or a
    plugin), else fsspec."""
    registered = SCHEMES.find(url.split("://", 1)[0])
    if registered is not None:
        return registered
    from .remote import FSSPEC

    return FSSPEC


def open_source(path: str | os.PathLike, mode: str = "auto", **remote_options: object) -> ByteSource:
    """Open `path` for random reads (and `.stream()`): mmap for local files (the default), pread,
    or a URL's backend; `remote_options` go to that backend (fsspec: options=RemoteOptions(...))."""
    if mode not in MODES:
        raise ConfigError(f"mode={mode!r} is not one of {', '.join(MODES)}")
    if is_remote(path):
        if mode not in ("auto", "remote"):
            raise ConfigError(f"{path}: mode={mode!r} needs a local file; use mode='auto' for URLs")
        return scheme_for(os.fspath(path)).open(os.fspath(path), **remote_options)
    if mode == "remote":
        raise ConfigError(f"{path}: mode='remote' needs a URL such as s3://bucket/key")
    if mode == "pread":
        return PreadSource(local_path(path))
    return MmapSource(local_path(path))


def open_index_source(url: str, mode: str, cache_dir: str | None = None, **remote_options: object) -> ByteSource:
    """A URL's small, often-read file (a store's .idx): a local copy kept by its backend, mapped
    (or pread in mode "pread"), else the backend's own source."""
    copy = scheme_for(url).local_copy(url, cache_dir, **remote_options)
    if copy is None:
        return open_source(url, "remote", **remote_options)
    return PreadSource(copy) if mode == "pread" else MmapSource(copy)


def read_small(url: str, **remote_options: object) -> bytes | None:
    """The whole content of a URL's small object (a manifest), or None when it does not exist."""
    return scheme_for(url).read_small(url, **remote_options)


def find(url: str, **remote_options: object) -> list[FileInfo]:
    """The objects a URL names (glob matches, everything under a prefix, or the object), sorted."""
    return scheme_for(url).find(url, **remote_options)
