"""Byte sources behind one way in, `open_source(url, mode)`: local mmap, local pread, and URLs,
served by the scheme registered for them (`register_scheme`) or else by fsspec (ranged GETs,
block caches in memory under one process-wide budget and on disk shared by a node, retries).
Token stores and raw corpus inputs open their bytes here alike."""

import typing

from .._lazy import lazy_exports  # not `from .. import _lazy`: rooms under indexed/ depend not on the root

if typing.TYPE_CHECKING:  # what type checkers and editors see; the names load lazily below
    from .access import MODES, find, is_remote, local_path, open_index_source, open_source, read_small, scheme_for
    from .base import ByteSource, Range
    from .blocks import set_remote_memory_budget
    from .fetchers import set_loader_workers
    from .local import MmapSource, PreadSource
    from .schemes import GLOB_CHARS, FileInfo, Scheme, register_scheme

# public name -> the module (relative to this package) that defines it
_EXPORTS = {
    "ByteSource": ".base",
    "FileInfo": ".schemes",
    "GLOB_CHARS": ".schemes",
    "MODES": ".access",
    "MmapSource": ".local",
    "PreadSource": ".local",
    "Range": ".base",
    "Scheme": ".schemes",
    "find": ".access",
    "is_remote": ".access",
    "local_path": ".access",
    "open_index_source": ".access",
    "open_source": ".access",
    "read_small": ".access",
    "register_scheme": ".schemes",
    "scheme_for": ".access",
    "set_loader_workers": ".fetchers",
    "set_remote_memory_budget": ".blocks",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
