"""``DockAPI``: what every dock offers, in process (``Dock``), on Ray (``RayDock``) or on any backend.

A stage written against ``DockAPI`` runs unchanged on each: every backend is a ``DockBase``, whose
methods build the same checked requests and so refuse a bad call with the same error. The members'
docstrings are ``DockBase``'s (written once, there).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .arguments import Sampler
from .base import DockBase
from .batch import Batch
from .schema import Column

__all__ = ["DockAPI"]


@runtime_checkable
class DockAPI(Protocol):
    """The dock's methods and properties (typing's view of a dock; ``DockBase`` implements them)."""

    @property
    def n_samples_per_prompt(self) -> int: ...

    @property
    def max_age(self) -> int | None: ...

    @property
    def columns(self) -> dict[str, Column]: ...

    @property
    def consumers(self) -> list[str]: ...

    @property
    def partitions(self) -> dict[str, int]: ...

    def add_column(self, column: Column) -> None: ...

    def add_consumer(self, name: str, *, max_staleness: int | None = None) -> None: ...

    def add_partition(self, name: str, num_prompts: int) -> None: ...

    def clear(self, partition: str) -> None: ...

    def drop_partition(self, partition: str) -> None: ...

    def close(self) -> None: ...

    def put(
        self,
        partition: str,
        columns: Mapping[str, Any],
        rows: Sequence[int] | np.ndarray,
        *,
        overwrite: bool = False,
        completed: bool | Sequence[bool] | np.ndarray = True,
        version: int | Sequence[int] | np.ndarray | None = None,
    ) -> None: ...

    def append(
        self,
        partition: str,
        row: int,
        columns: Mapping[str, Any],
        *,
        version: int | None = None,
        finished: bool = False,
    ) -> None: ...

    @property
    def version(self) -> int: ...

    def set_version(self, version: int) -> None: ...

    def expired(self, partition: str | None = None) -> dict[str, np.ndarray]: ...

    def can_admit(self) -> bool: ...

    def admit(self, timeout: float | None = None) -> None: ...

    async def aput(
        self, partition: str, columns: Mapping[str, Any], rows: Sequence[int] | np.ndarray, **options: Any
    ) -> None: ...

    def get(
        self,
        consumer: str,
        columns: Sequence[str],
        count: int,
        partition: str | None = None,
        *,
        rows: Sequence[int] | np.ndarray | None = None,
        timeout: float | None = None,
        sampler: Sampler | None = None,
        lease: float | None = None,
        unfinished: bool = False,
        max_staleness: int | None = None,
    ) -> Batch | None: ...

    async def aget(
        self, consumer: str, columns: Sequence[str], count: int, partition: str | None = None, **options: Any
    ) -> Batch | None: ...

    def ack(self, lease_id: int) -> None: ...

    def nack(self, lease_id: int) -> None: ...

    def all_consumed(self, consumer: str, partition: str) -> bool: ...

    def stats(self) -> dict[str, Any]: ...

    def save(self, directory: str | os.PathLike[str]) -> None: ...


for _name, _member in vars(DockAPI).items():  # one docstring per member: DockBase's
    if not _name.startswith("_") and isinstance(_member, (property, type(DockBase.put))):
        _member.__doc__ = getattr(DockBase, _name).__doc__
