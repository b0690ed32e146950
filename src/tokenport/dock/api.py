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
    def n_samples_per_prompt(self) -> int:
        """Rows per prompt: row ``r`` belongs to prompt ``r // n_samples_per_prompt``."""

    @property
    def max_age(self) -> int | None:
        """Unfinished puts after which a row counts as finished (None: no limit)."""

    @property
    def columns(self) -> dict[str, Column]:
        """The dock's columns by name (a copy)."""

    @property
    def consumers(self) -> list[str]:
        """The names of the consumers whose consumption the dock tracks."""

    @property
    def partitions(self) -> dict[str, int]:
        """Partition names, oldest first, with their row counts."""

    def add_column(self, column: Column) -> None:
        """Add a column; existing partitions get it with no row ready."""

    def add_consumer(self, name: str, *, max_staleness: int | None = None) -> None:
        """Add a consumer (a stage); it has consumed nothing yet. ``max_staleness`` overrides the dock's."""

    def add_partition(self, name: str, num_prompts: int) -> None:
        """Add a partition of ``num_prompts * n_samples_per_prompt`` rows."""

    def clear(self, partition: str) -> None:
        """Forget a partition's data, readiness, consumption and leases; its rows stay, empty."""

    def drop_partition(self, partition: str) -> None:
        """Remove a partition and everything in it."""

    def close(self) -> None:
        """No partitions will be added: a ``get`` without a partition returns None once all are consumed."""

    def put(
        self,
        partition: str,
        columns: Mapping[str, Any],
        rows: Sequence[int] | np.ndarray,
        *,
        overwrite: bool = False,
        completed: bool | Sequence[bool] | np.ndarray = True,
        version: int | Sequence[int] | np.ndarray | None = None,
    ) -> None:
        """Write ``columns`` (name -> values) for ``rows`` of ``partition``, then mark those cells ready."""

    def append(
        self,
        partition: str,
        row: int,
        columns: Mapping[str, Any],
        *,
        version: int | None = None,
        finished: bool = False,
    ) -> None:
        """Append one segment (a turn) to ``row``'s segmented ``columns``, with its policy version."""

    @property
    def version(self) -> int:
        """The current (trainer's) policy version; 0 until ``set_version``."""

    def set_version(self, version: int) -> None:
        """Move the current policy version forward (going back is refused); rows now too stale expire."""

    def expired(self, partition: str | None = None) -> dict[str, np.ndarray]:
        """Rows expired under ``on_stale="requeue"`` since the last call, by partition: put them again."""

    def can_admit(self) -> bool:
        """Whether a rollout may start without more than ``max_inflight_versions`` versions in flight."""

    def admit(self, timeout: float | None = None) -> None:
        """Block a rollout worker until ``can_admit()``; DockTimeout after ``timeout`` seconds."""

    async def aput(
        self, partition: str, columns: Mapping[str, Any], rows: Sequence[int] | np.ndarray, **options: Any
    ) -> None:
        """``put`` from asyncio code (runs in a worker thread)."""

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
    ) -> Batch | None:
        """``count`` rows whose ``columns`` are ready and that ``consumer`` has not consumed; None when all are."""

    async def aget(
        self, consumer: str, columns: Sequence[str], count: int, partition: str | None = None, **options: Any
    ) -> Batch | None:
        """``get`` from asyncio code (the wait happens in a worker thread, not on the event loop)."""

    def ack(self, lease_id: int) -> None:
        """Consume the rows of a lease."""

    def nack(self, lease_id: int) -> None:
        """Give the rows of a lease back unconsumed: the next get of that consumer may return them."""

    def all_consumed(self, consumer: str, partition: str) -> bool:
        """Whether ``consumer`` has consumed every row of ``partition``."""

    def stats(self) -> dict[str, Any]:
        """Per consumer: rows and batches served, bytes, wait time; per partition: bytes, ready and consumed rows."""

    def save(self, directory: str | os.PathLike[str]) -> None:
        """Checkpoint the dock to ``directory`` atomically (data, readiness, consumption; not leases)."""
