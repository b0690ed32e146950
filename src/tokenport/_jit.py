"""Saying so when a run must first compile numba kernels, instead of seeming to hang.

Kernels are declared ``cache=True``: a first run compiles them (tens of seconds for a whole
verb) and later runs load them from numba's on-disk cache. A module is cold when that cache
holds no index file (``MODULE.*.nbi``) for it, where numba's own locators would put it.
"""

from __future__ import annotations

import glob
import importlib
import logging
import os
from collections.abc import Iterable
from types import ModuleType

logger = logging.getLogger(__name__)

_announced: set[str] = set()


def announce_compilation(names: Iterable[str]) -> list[str]:
    """Log once per process which of the modules `names` (those whose kernels the caller is about
    to run) hold kernels numba has not cached yet, so will compile first; returns their names."""
    fresh = [name for name in dict.fromkeys(names) if name not in _announced]
    _announced.update(fresh)
    modules = [importlib.import_module(name) for name in fresh]
    cold = [m.__name__ for m in modules if _has_kernels(m) and not _cached(m)]
    if cold:
        logger.warning(
            "first run: compiling numba kernels of %s (up to a few tens of seconds, once; later runs load them "
            "from numba's cache)",
            ", ".join(name.removeprefix("tokenport.") for name in cold),
        )
    return cold


def _has_kernels(module: ModuleType) -> bool:
    from numba.core.dispatcher import Dispatcher

    return any(isinstance(value, Dispatcher) for value in vars(module).values())


def _cached(module: ModuleType) -> bool:
    """Whether numba's cache for `module` holds an index file of any of its kernels."""
    source = getattr(module, "__file__", None)
    if not source:
        return True  # not a file numba can cache: nothing to say
    stem = os.path.splitext(os.path.basename(source))[0]
    return bool(glob.glob(os.path.join(glob.escape(_cache_dir(source)), f"{stem}.*.nbi")))


def _cache_dir(source: str) -> str:
    """Where numba keeps the cache of kernels defined in `source`: the first of its locators that
    applies (NUMBA_CACHE_DIR, else a writable __pycache__ beside the file, else a per-user one)."""
    from numba.core import caching

    def anchor() -> None:  # locators read only a function's first line number
        pass

    for name in ("UserProvidedCacheLocator", "InTreeCacheLocator", "UserWideCacheLocator"):
        locator = (getattr(caching, name, None) or getattr(caching, "_" + name)).from_function(anchor, source)
        if locator is not None:
            return locator.get_cache_path()
    return os.path.join(os.path.dirname(source), "__pycache__")
