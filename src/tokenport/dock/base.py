"""``DockBase``: the dock's public calls written once, forwarded to a handful of backend primitives.

Each public method builds its frozen request (``requests``: the arguments checked once, here) and
hands it to a primitive; a backend (``Dock`` in process, ``RayDock``, or one registered with
``register_dock_backend``) implements only the primitives:

* ``column_of(name)``: the column called ``name`` (a put's and an append's values are cast to it);
* ``handle_put(PutRequest)``, ``handle_append(AppendRequest)``, ``handle_get(GetRequest)``;
* ``handle_call(StateCall)``: every call that carries no data, and the reads of the properties;
* ``handle_save(directory)``: a checkpoint in ``Dock.save``'s format.

Rules every backend keeps: a refused request changes nothing, and it is refused with the error
``Dock`` raises (a ``DockState`` does the checks that need the dock's state).
"""

from __future__ import annotations

import abc
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .aio import AsyncMethods
from .arguments import Sampler
from .batch import Batch
from .requests import AppendRequest, GetRequest, PutRequest, StateCall
from .schema import Column

__all__ = ["DockBase"]


class DockBase(AsyncMethods, abc.ABC):
    """The dock's methods over the primitives of a backend (see the module docstring)."""

    # -- the primitives ------------------------------------------------------------------------------

    @abc.abstractmethod
    def column_of(self, name: str) -> Column:
        """The column ``name``, or a ConfigError listing the dock's columns."""

    @abc.abstractmethod
    def handle_put(self, request: PutRequest) -> None:
        """Write a checked put: all of it, or (refused) nothing."""

    @abc.abstractmethod
    def handle_append(self, request: AppendRequest) -> None:
        """Append a checked segment: all of it, or (refused) nothing."""

    @abc.abstractmethod
    def handle_get(self, request: GetRequest) -> Batch | None:
        """Serve a checked get: the batch, or None at the end."""

    @abc.abstractmethod
    def handle_call(self, call: StateCall) -> Any:
        """Run a call that carries no data (or read a property) on the dock's state; its result."""

    @abc.abstractmethod
    def handle_save(self, directory: str | os.PathLike[str]) -> None:
        """Checkpoint the dock to ``directory`` in ``Dock.save``'s format."""

    # -- schema and partitions -------------------------------------------------------------------------

    @property
    def n_samples_per_prompt(self) -> int:
        """Rows per prompt: row ``r`` belongs to prompt ``r // n_samples_per_prompt``."""
        return int(self.handle_call(StateCall("n_samples_per_prompt")))

    @property
    def max_age(self) -> int | None:
        """Unfinished puts after which a row counts as finished (None: no limit)."""
        return self.handle_call(StateCall("max_age"))

    @property
    def columns(self) -> dict[str, Column]:
        """The dock's columns by name (a copy)."""
        return dict(self.handle_call(StateCall("columns")))

    @property
    def consumers(self) -> list[str]:
        """The names of the consumers whose consumption the dock tracks."""
        return list(self.handle_call(StateCall("consumers")))

    @property
    def partitions(self) -> dict[str, int]:
        """Partition names, oldest first, with their row counts."""
        return dict(self.handle_call(StateCall("partitions")))

    def add_column(self, column: Column) -> None:
        """Add a column; existing partitions get it with no row ready."""
        self.handle_call(StateCall("add_column", (column,)))

    def add_consumer(self, name: str, *, max_staleness: int | None = None) -> None:
        """Add a consumer (a stage); it has consumed nothing yet. ``max_staleness`` overrides the dock's."""
        self.handle_call(StateCall("add_consumer", (name, max_staleness)))

    def add_partition(self, name: str, num_prompts: int) -> None:
        """Add a partition of ``num_prompts * n_samples_per_prompt`` rows."""
        self.handle_call(StateCall("add_partition", (name, num_prompts)))

    def clear(self, partition: str) -> None:
        """Forget a partition's data, readiness, consumption and leases; its rows stay, empty."""
        self.handle_call(StateCall("clear", (partition,)))

    def drop_partition(self, partition: str) -> None:
        """Remove a partition and everything in it."""
        self.handle_call(StateCall("drop_partition", (partition,)))

    def close(self) -> None:
        """No partitions will be added: a ``get`` without a partition returns None once all are consumed."""
        self.handle_call(StateCall("close"))

    # -- versions ------------------------------------------------------------------------------------

    @property
    def version(self) -> int:
        """The current (trainer's) policy version; 0 until ``set_version``."""
        return int(self.handle_call(StateCall("version")))

    def set_version(self, version: int) -> None:
        """Move the current policy version forward (going back is refused); rows now too stale expire."""
        self.handle_call(StateCall("set_version", (version,)))

    def expired(self, partition: str | None = None) -> dict[str, np.ndarray]:
        """Rows expired under ``on_stale="requeue"`` since the last call, by partition: put them again."""
        return dict(self.handle_call(StateCall("expired", (partition,))))

    def can_admit(self) -> bool:
        """Whether a rollout may start without more than ``max_inflight_versions`` versions in flight."""
        return bool(self.handle_call(StateCall("can_admit")))

    def admit(self, timeout: float | None = None) -> None:
        """Block a rollout worker until ``can_admit()``; DockTimeout after ``timeout`` seconds."""
        self.handle_call(StateCall("admit", (timeout,)))

    # -- put -----------------------------------------------------------------------------------------

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
        """Write ``columns`` (name -> values) for ``rows`` of ``partition``, then mark those cells ready.

        Fixed columns take an array of shape ``(len(rows), *shape)``; ragged ones a list of arrays,
        ``Packed(values, lengths)`` or ``Padded(values, lengths)``, of any dtype whose values the
        column's dtype holds (floats are rounded; see ``casting``). Putting a ready cell again is
        an error unless ``overwrite=True``. ``completed`` (one flag, or one per row) marks rows
        finished or not (see ``Dock``). ``version`` (one, or one per row) is the policy
        version that produced the rows; without it rows keep theirs, and rows with none get the
        current one (refused when the dock limits staleness or admission). On any error nothing
        is written.
        """
        request = PutRequest.checked(
            self.column_of, partition, columns, rows, overwrite=overwrite, completed=completed, version=version
        )
        self.handle_put(request)

    def append(
        self,
        partition: str,
        row: int,
        columns: Mapping[str, Any],
        *,
        version: int | None = None,
        finished: bool = False,
    ) -> None:
        """Append one segment (a turn) to ``row``'s segmented ``columns``: name -> that segment's items,
        the same count in each (e.g. token ids as the engine produced them, loss mask, logprobs).

        Every segment of a row writes the same columns and records ``version`` (rules as in
        ``put``). The row stays unfinished (the rollout stage resumes it with ``get(...,
        unfinished=True)``) until an append with ``finished=True``; appending to a finished row is
        refused. On any error nothing is written.
        """
        self.handle_append(
            AppendRequest.checked(self.column_of, partition, row, columns, version=version, finished=finished)
        )

    # -- get -----------------------------------------------------------------------------------------

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
        """Return ``count`` rows whose ``columns`` are ready and that ``consumer`` has not consumed.

        Blocks until the sampler (``Sequential`` by default) finds them, raising DockTimeout
        after ``timeout`` seconds. ``rows`` asks for exactly those rows instead. Returns None when
        the consumer has consumed the whole partition (without ``partition``: every partition,
        once the dock is ``close``d); a partition's last batch may be short. Without ``lease``
        the rows are consumed at once; with it they come back unless ``ack``ed within ``lease`` s.
        ``unfinished=True`` (the rollout stage) returns up to ``count`` unfinished rows without
        waiting, or None when there are none. Rows more than ``max_staleness`` versions behind
        (default: the consumer's limit, else the dock's) are not served. Segmented columns come
        back concatenated per row, with ``Batch.segments`` and ``Batch.segment_versions``.
        """
        request = GetRequest.checked(
            consumer,
            columns,
            count,
            partition,
            rows=rows,
            timeout=timeout,
            sampler=sampler,
            lease=lease,
            unfinished=unfinished,
            max_staleness=max_staleness,
        )
        return self.handle_get(request)

    def ack(self, lease_id: int) -> None:
        """Consume the rows of a lease."""
        self.handle_call(StateCall("ack", (lease_id,)))

    def nack(self, lease_id: int) -> None:
        """Give the rows of a lease back unconsumed: the next get of that consumer may return them."""
        self.handle_call(StateCall("nack", (lease_id,)))

    # -- progress ------------------------------------------------------------------------------------

    def all_consumed(self, consumer: str, partition: str) -> bool:
        """Whether ``consumer`` has consumed every row of ``partition``."""
        return bool(self.handle_call(StateCall("all_consumed", (consumer, partition))))

    def stats(self) -> dict[str, Any]:
        """Per consumer: rows and batches served, bytes, wait time; per partition: bytes, ready and consumed rows."""
        return dict(self.handle_call(StateCall("stats")))

    def save(self, directory: str | os.PathLike[str]) -> None:
        """Checkpoint the dock to ``directory`` atomically (data, readiness, consumption; not leases); an
        earlier checkpoint there is replaced, anything else there is refused (ConfigError)."""
        self.handle_save(directory)
