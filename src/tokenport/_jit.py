"""Saying so when a run must first compile numba kernels, instead of seeming to hang.

Kernels are declared ``cache=True``: a first run compiles them (tens of seconds for a whole
verb) and later runs load them from numba's on-disk cache. A module is cold when that cache
holds no index file (``MODULE.*.nbi``) for it, where numba's own locators would put it.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from types import ModuleType
from typing import Any, cast

_announced: set[str] = set()


def announce_compilation(names: Iterable[str]) -> list[str]:
    """Log once per process which of the modules `names` (those whose kernels the caller is about
    to run) hold kernels numba has not cached yet, so will compile first; returns their names."""
    fresh = [name for name in dict.fromkeys(names) if name not in _announced]
    _announced.update(fresh)
    modules = [module for module in map(_module, fresh) if module is not None]
    cold = [m.__name__ for m in modules if _has_kernels(m) and not _cached(m)]
    if cold:
        import logging  # here: `import tokenport` installs this module's hook and stays cheap

        logging.getLogger(__name__).warning(
            "first run: compiling numba kernels of %s (up to a few tens of seconds, once; later runs load them "
            "from numba's cache)",
            ", ".join(name.removeprefix("tokenport.") for name in cold),
        )
    return cold


def _module(name: str) -> ModuleType | None:
    """The module called ``name``, or None when it cannot be imported by that name (a class defined in
    code run by exec(): whether it may run is its caller's check, this only announces compilation)."""
    if name in sys.modules:
        return sys.modules[name]
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _has_kernels(module: ModuleType) -> bool:
    from numba.core.dispatcher import Dispatcher

    return any(isinstance(value, Dispatcher) for value in vars(module).values())


def _cached(module: ModuleType) -> bool:
    """Whether numba's cache for `module` holds an index file of any of its kernels."""
    import glob

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


# -- numba's start-up, deferred where tokenport's own kernels do not need it -----------------------
#
# numba's first compile (or cache load) in a process runs every installed ``numba_extensions``
# entry point (scanning all distributions' metadata, then importing e.g. awkward, a dependency of
# gigatoken), and its CPU target imports numba.np.arraymath, whose ``_check_blas()`` imports
# scipy.linalg.cython_blas when scipy is installed. tokenport's kernels use neither. So, once
# tokenport is imported: extensions are still loaded before any other function is compiled, but
# not for tokenport's own kernels; and arraymath's BLAS probe runs when numba first asks for its
# answer (compiling np.dot-based np.convolve/np.correlate), not at import. numba's behaviour for
# other code is unchanged, except that ``numba.typeof`` of an extension's type outside a compile
# works only after some non-tokenport function has been compiled (or init_all() called).


def defer_numba_start() -> None:
    """Install the deferrals above (idempotent): wrap what is already imported, hook the rest."""
    if any(isinstance(finder, _NumbaHook) for finder in sys.meta_path):
        return
    if "numba.core.entrypoints" in sys.modules:
        _defer_extensions(sys.modules["numba.core.entrypoints"])
    sys.meta_path.insert(0, _NumbaHook())


def _defer_extensions(entrypoints: ModuleType) -> None:
    """Make ``entrypoints.init_all`` a no-op while a tokenport kernel is compiled or loaded."""
    original = entrypoints.init_all
    if getattr(original, "_tokenport", False):
        return

    def init_all() -> None:
        if not _compiling_ours():
            original()

    init_all._tokenport = True  # type: ignore[attr-defined]
    entrypoints.init_all = init_all  # type: ignore[attr-defined]


def _compiling_ours() -> bool:
    """Whether the innermost numba dispatcher compiling on this thread's stack is a tokenport kernel."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name in ("_compile_for_args", "compile", "_compilation_chain_init_hook"):
            func = getattr(frame.f_locals.get("self"), "py_func", None)
            if func is not None:
                return getattr(func, "__module__", "").startswith("tokenport.")
        frame = frame.f_back  # type: ignore[assignment]
    return False


class _LazyBlas:
    """arraymath's ``_HAVE_BLAS``, probed the first time numba reads it as a bool."""

    def __init__(self, ensure_blas: Callable[[], None]) -> None:
        self._ensure_blas = ensure_blas
        self._have: bool | None = None

    def __bool__(self) -> bool:
        if self._have is None:
            try:
                self._ensure_blas()
                self._have = True
            except ImportError:
                self._have = False
        return self._have


class _NumbaHook:
    """Wraps the loaders of numba.core.entrypoints and numba.np.arraymath (see above)."""

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if name not in ("numba.core.entrypoints", "numba.np.arraymath"):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = cast(Any, _Wrapped(spec.loader))  # a Loader by its two methods
        return spec


class _Wrapped:
    """A module's own loader, with tokenport's deferral around its execution."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: Any) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        if module.__name__ == "numba.core.entrypoints":
            self.loader.exec_module(module)
            _defer_extensions(module)
            return
        linalg = vars(importlib.import_module("numba.np.linalg"))
        ensure_blas = linalg.get("ensure_blas")
        if ensure_blas is None:  # a numba whose probe is not where 0.59-0.68 keep it: left as it is
            self.loader.exec_module(module)
            return
        linalg["ensure_blas"] = lambda: None  # arraymath's import-time probe: answered lazily below
        try:
            self.loader.exec_module(module)
        finally:
            linalg["ensure_blas"] = ensure_blas
        vars(module).update(ensure_blas=ensure_blas, _HAVE_BLAS=_LazyBlas(ensure_blas))
