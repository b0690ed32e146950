"""Dock backends by name: ``register_dock_backend(name, factory)`` and ``open_dock(..., backend=name)``.

A backend is a ``DockBase`` subclass (or a factory returning one) built as
``factory(columns, consumers, n_samples_per_prompt, **options)``. tokenport registers ``"local"``
(``Dock``, in process) and ``"ray"`` (``RayDock``; Ray is imported only when it is opened); a
plugin of the ``tokenport.plugins`` entry points registers its own when imported.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .._registry import Registry
from ..errors import ConfigError
from .base import DockBase
from .dock import Dock
from .schema import Column

__all__ = ["DOCK_BACKENDS", "open_dock", "register_dock_backend"]

DockFactory = Callable[..., DockBase]

DOCK_BACKENDS: Registry[DockFactory] = Registry(
    "dock backend",
    callable,
    "a DockBase subclass, or a function (columns, consumers, n_samples_per_prompt, **options) -> a DockBase",
)


def register_dock_backend(name: str, factory: DockFactory) -> None:
    """Make ``open_dock(..., backend=name)`` build its dock with ``factory`` (a ``DockBase`` subclass, or
    a function with its constructor's arguments). A name taken by another factory is a ConfigError."""
    DOCK_BACKENDS.register(name, factory)


def open_dock(
    columns: Sequence[Column],
    consumers: Sequence[str],
    n_samples_per_prompt: int = 1,
    *,
    backend: str = "local",
    **options: Any,
) -> DockBase:
    """A new dock of the backend registered as ``backend`` (``"local"``: ``Dock``; ``"ray"``: ``RayDock``,
    whose ``shards=`` and ``replicas=`` are among its ``options``); ``options`` are the backend's keyword arguments."""
    factory = DOCK_BACKENDS.get(backend, where="open_dock(backend=...)")
    dock = factory(columns, consumers, n_samples_per_prompt, **options)
    if not isinstance(dock, DockBase):
        raise ConfigError(
            f"dock backend {backend!r} built a {type(dock).__name__}, not a tokenport.dock.DockBase: its factory "
            "must return an instance of a DockBase subclass"
        )
    return dock


def _ray_dock(
    columns: Sequence[Column], consumers: Sequence[str], n_samples_per_prompt: int = 1, **options: Any
) -> DockBase:
    """A ``RayDock`` (imported here: Ray loads only when a Ray dock is opened)."""
    from .ray import RayDock

    return RayDock(columns, consumers, n_samples_per_prompt, **options)


DOCK_BACKENDS.register("local", Dock)
DOCK_BACKENDS.register("ray", _ray_dock)
DOCK_BACKENDS.seal_built_ins()
