"""PEP 562 lazy exports: a package names its public objects and imports their modules on first use.

This keeps ``import tokenport`` (and a package of it) from loading numba kernels it may never call.
An exported name must not also be a submodule of its package: once the submodule is imported,
the package attribute would be the module, not the object (tests/test_public_api.py checks this).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for `package`, whose public names map to the relative
    module defining each; a name is imported once, then kept in the package's namespace."""
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> object:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__
