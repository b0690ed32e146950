"""``DockAPI``: what every dock offers, in process (``Dock``) or on Ray (``RayDock``).

A stage written against ``DockAPI`` runs unchanged on either; both check their arguments with the
same code (``arguments``) and refuse a bad call with the same error.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .arguments import Sampler
from .batch import Batch
from .schema import Column

__all__ = ["DockAPI"]


@runtime_checkable
class DockAPI(Protocol):
    """The dock's methods and properties; see ``Dock`` for what each does."""

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

    def add_consumer(self, name: str) -> None: ...

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
    ) -> None: ...

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
    ) -> Batch | None: ...

    async def aget(
        self, consumer: str, columns: Sequence[str], count: int, partition: str | None = None, **options: Any
    ) -> Batch | None: ...

    def ack(self, lease_id: int) -> None: ...

    def nack(self, lease_id: int) -> None: ...

    def all_consumed(self, consumer: str, partition: str) -> bool: ...

    def stats(self) -> dict[str, Any]: ...

    def save(self, directory: str | os.PathLike[str]) -> None: ...
