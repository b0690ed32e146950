"""Optional dependencies: import one, or fail with the extra that installs it, before any work is done."""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import TokenportError


class MissingExtraError(TokenportError, ModuleNotFoundError):
    """An optional package a feature needs is not installed; the message names the pip extra."""


def require(module: str, *, extra: str, feature: str) -> ModuleType:
    """Import ``module`` (e.g. "yaml"), or raise MissingExtraError saying ``feature`` needs
    ``pip install 'tokenport[extra]'``. Call it where a feature starts, not deep inside its work."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        error = MissingExtraError(
            f"{feature} needs the {top!r} package, which is not installed: pip install 'tokenport[{extra}]'"
        )
        error.name = top
        raise error from exc
