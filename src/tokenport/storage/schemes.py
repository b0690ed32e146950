"""The scheme registry: which backend opens a URL. A new backend is one module with a `Scheme`
subclass and one `register_scheme` call; URLs of unregistered schemes go to fsspec."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any

from .._registry import Registry
from ..errors import ConfigError
from .base import ByteSource

GLOB_CHARS = frozenset("*?[")
"""Characters that make a path or URL a glob pattern (the one definition; inputs and specs use it)."""


@dataclass(frozen=True)
class FileInfo:
    """One object a URL names: its URL, its size in bytes, and a `version` that changes with its content."""

    url: str
    size: int
    version: str


class Scheme(abc.ABC):
    """A storage backend for the URLs of one scheme. `options` are the backend's own keywords
    (for fsspec: ``options=RemoteOptions(...)`` and fsspec storage options)."""

    @abc.abstractmethod
    def open(self, url: str, **options: Any) -> ByteSource:
        """Random-access bytes of the object `url`; StorageError naming it when it cannot be opened."""

    @abc.abstractmethod
    def find(self, url: str, **options: Any) -> list[FileInfo]:
        """The objects `url` names, sorted by URL: a glob's matches, every object under a directory,
        or the object itself; [] when nothing exists there."""

    def local_copy(self, url: str, cache_dir: str | None, **options: Any) -> str | None:
        """A local file with the object's bytes, for small files read whole and often (an .idx);
        None (the default) when the backend keeps no local copies, so the index reads through `open`."""
        return None

    def read_small(self, url: str, **options: Any) -> bytes | None:
        """The whole content of a small object (a manifest), or None when it does not exist."""
        if not self.find(url, **options):
            return None
        with self.open(url, **options) as source:
            return bytes(source.read(0, source.size))


class _Schemes(Registry[Scheme]):
    """The scheme registry; ``del SCHEMES[name]`` unregisters (a scheme registered for a while, in tests)."""

    def __getitem__(self, name: str) -> Scheme:
        return self._items[name]

    def __delitem__(self, name: str) -> None:
        del self._items[name]


SCHEMES = _Schemes("storage scheme", lambda item: isinstance(item, Scheme), "a storage.Scheme instance")
"""Registered backends by scheme name (``mem`` for ``mem://...``); fsspec serves all others."""


def register_scheme(name: str, scheme: Scheme) -> None:
    """Route URLs ``name://...`` to `scheme`; a name registered already is refused, not replaced.
    Registration is per process: prepare's worker processes know only schemes their imports register
    (or the ``tokenport.plugins`` entry points, loaded when a URL names a scheme not registered)."""
    if not isinstance(name, str) or not name.isidentifier() or name == "file":
        raise ConfigError(f"register_scheme: {name!r} is not a scheme name (letters, digits, _; not 'file')")
    if not isinstance(scheme, Scheme):
        raise ConfigError(f"register_scheme({name!r}): give a storage.Scheme instance, not {type(scheme).__name__}")
    if name in SCHEMES:
        raise ConfigError(f"register_scheme: {name!r} is registered already (to {SCHEMES[name]!r})")
    SCHEMES.register(name, scheme)
