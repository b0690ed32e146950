"""Byte sources for token stores: local mmap, local pread, and object stores (ranged GETs)."""

from __future__ import annotations

import os

from ..errors import ConfigError
from .base import ByteSource, Range
from .local import MmapSource, PreadSource

MODES = ("auto", "mmap", "pread", "remote")


def is_remote(path: str | os.PathLike) -> bool:
    """True for fsspec URLs other than local files (s3://, gs://, http://, ...)."""
    text = os.fspath(path)
    return "://" in text and not text.startswith("file://")


def local_path(path: str | os.PathLike) -> str:
    """A local path with any file:// scheme removed."""
    text = os.fspath(path)
    return text[len("file://") :] if text.startswith("file://") else text


def open_source(path: str | os.PathLike, mode: str = "auto", **remote_options: object) -> ByteSource:
    """Open `path` for random reads: mmap for local files (the default), pread, or remote ranged reads."""
    if mode not in MODES:
        raise ConfigError(f"mode={mode!r} is not one of {', '.join(MODES)}")
    if is_remote(path):
        if mode not in ("auto", "remote"):
            raise ConfigError(f"{path}: mode={mode!r} needs a local file; use mode='auto' for URLs")
        from .remote import ObjectStoreSource

        return ObjectStoreSource(os.fspath(path), **remote_options)
    if mode == "remote":
        raise ConfigError(f"{path}: mode='remote' needs a URL such as s3://bucket/key")
    if mode == "pread":
        return PreadSource(local_path(path))
    return MmapSource(local_path(path))


__all__ = ["ByteSource", "Range", "MmapSource", "PreadSource", "open_source", "is_remote", "local_path", "MODES"]
