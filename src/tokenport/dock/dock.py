"""The experience dock: a thread-safe store between RL stages, by partition, row and column.

Producers ``put`` columns for rows; a consumer ``get``s a batch of rows whose requested columns are
all ready and which it has not consumed yet, and those rows become consumed for it (other consumers
still see them). One ``state.DockState`` holds the partitions and leases under one lock: a put
checks and converts all its input first (before taking the lock), then writes the data, then flips
readiness, so a reader never sees half a put, and a rejected put changes nothing. A value the
column's dtype cannot hold (2**40 in an int32 column, -1 in a uint8 one, 1e300 in a float32 one) is
refused, never wrapped. Getters wait on a condition variable (no polling) that every put, ack,
nack, clear and lease expiry notifies.

Leases: ``get(..., lease=seconds)`` hands rows out without consuming them; ``ack`` consumes them,
``nack`` or the lease running out (the consumer died) makes them available again, so a stage
that crashes mid-batch loses no rows and the same stage never consumes a row twice.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..metrics import live
from .aio import AsyncMethods
from .arguments import Sampler, checked_put, wanted_columns
from .batch import Batch
from .checkpoint import load_state, save_state
from .ragged import Packed
from .schema import Column
from .state import DockState

__all__ = ["Dock"]


class Dock(AsyncMethods):
    """Experience store: ``columns`` of per-row data, ``consumers`` (stage names), rows grouped by prompt.

    Partitions (e.g. one per training step) are added with ``add_partition`` and cleared or
    dropped independently; row ids are local to a partition, ``0 .. rows - 1``, and row ``r``
    belongs to prompt ``r // n_samples_per_prompt``. Columns and consumers can be added at any time.

    Partial rollout: a put with ``completed=False`` marks rows unfinished. Consumers do not see
    them; the rollout stage takes them back with ``get(..., unfinished=True)``, continues them and
    puts again (``overwrite=True``). Each unfinished put adds one to the row's age
    (``Batch.ages``); past ``max_age`` unfinished puts the row counts as completed anyway, so no
    row goes stale for ever.
    """

    def __init__(
        self,
        columns: Sequence[Column],
        consumers: Sequence[str],
        n_samples_per_prompt: int = 1,
        *,
        max_age: int | None = None,
    ) -> None:
        self._state = DockState(columns, consumers, n_samples_per_prompt, max_age=max_age)

    @classmethod
    def from_state(cls, state: DockState) -> Dock:
        """A dock over ``state`` (a loaded checkpoint, a copy of a RayDock), which it then owns."""
        dock = cls.__new__(cls)
        dock._state = state
        return dock

    @property
    def state(self) -> DockState:
        """The partition table, leases and lock (for checkpoints and copies; use the methods otherwise)."""
        return self._state

    @property
    def n_samples_per_prompt(self) -> int:
        """Rows per prompt: row ``r`` belongs to prompt ``r // n_samples_per_prompt``."""
        return self._state.n_samples_per_prompt

    @property
    def max_age(self) -> int | None:
        """Unfinished puts after which a row counts as finished (None: no limit)."""
        return self._state.max_age

    # -- schema -------------------------------------------------------------------------------------

    def add_column(self, column: Column) -> None:
        """Add a column; existing partitions get it with no row ready."""
        self._state.add_column(column)

    def add_consumer(self, name: str) -> None:
        """Add a consumer (a stage); it has consumed nothing yet."""
        self._state.add_consumer(name)

    @property
    def columns(self) -> dict[str, Column]:
        """The dock's columns by name (a copy)."""
        return self._state.columns

    @property
    def consumers(self) -> list[str]:
        """The names of the consumers whose consumption the dock tracks."""
        return self._state.consumers

    @property
    def partitions(self) -> dict[str, int]:
        """Partition names, oldest first, with their row counts."""
        return self._state.partitions

    def add_partition(self, name: str, num_prompts: int) -> None:
        """Add a partition of ``num_prompts * n_samples_per_prompt`` rows."""
        self._state.add_partition(name, num_prompts)

    def clear(self, partition: str) -> None:
        """Forget a partition's data, readiness, consumption and leases; its rows stay, empty."""
        self._state.clear(partition)

    def drop_partition(self, partition: str) -> None:
        """Remove a partition and everything in it."""
        self._state.drop_partition(partition)

    def close(self) -> None:
        """No partitions will be added: a ``get`` without a partition returns None once all are consumed."""
        self._state.close()

    # -- put ----------------------------------------------------------------------------------------

    def put(
        self,
        partition: str,
        columns: Mapping[str, Any],
        rows: Sequence[int] | np.ndarray,
        *,
        overwrite: bool = False,
        completed: bool | Sequence[bool] | np.ndarray = True,
    ) -> None:
        """Write ``columns`` (name -> values) for ``rows`` of ``partition``, then mark those cells ready.

        Fixed columns take an array of shape ``(len(rows), *shape)``; ragged ones a list of arrays,
        ``Packed(values, lengths)`` or ``Padded(values, lengths)``, of any dtype whose values the
        column's dtype holds (floats are rounded; see ``casting``). Putting a ready cell again is
        an error unless ``overwrite=True``. ``completed`` (one flag, or one per row) marks rows
        finished or not (see the class docstring). On any error nothing is written.
        """
        began = time.perf_counter() if live.recorder is not None else 0.0
        state = self._state
        ids, checked, finished = checked_put(state.column, columns, rows, completed)
        with state.lock:
            target = state.check_put(partition, list(checked), ids, overwrite)
            for name, value in checked.items():
                target.write(state.column(name), ids, value)
            state.mark_ready(target, list(checked), ids, finished)
        if (recorder := live.recorder) is not None:
            recorder.dock_put.observe(time.perf_counter() - began)

    # -- get ----------------------------------------------------------------------------------------

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
    ) -> Batch | None:
        """Return ``count`` rows whose ``columns`` are ready and that ``consumer`` has not consumed.

        Blocks until the sampler (``Sequential`` by default) finds them, raising DockTimeout
        after ``timeout`` seconds. ``rows`` asks for exactly those rows instead. Returns None when
        the consumer has consumed the whole partition (without ``partition``: every partition,
        once the dock is ``close``d); a partition's last batch may be short. Without ``lease``
        the rows are consumed at once; with it they come back unless ``ack``ed within ``lease`` s.
        ``unfinished=True`` (the rollout stage) returns up to ``count`` unfinished rows without
        waiting, or None when there are none.
        """
        began = time.perf_counter() if live.recorder is not None else 0.0
        wanted = wanted_columns(columns)
        state = self._state
        with state.lock:
            taken = state.take(consumer, wanted, count, partition, rows, timeout, sampler, lease, unfinished)
            if taken is None:
                batch = None
            else:
                target, give, lease_id = taken
                data = {name: target.read(state.column(name), give) for name in wanted}
                nbytes = sum(v.values.nbytes if isinstance(v, Packed) else v.nbytes for v in data.values())
                state.served(consumer, nbytes)
                batch = Batch(target.name, give, data, lease_id, state.n_samples_per_prompt, target.age[give])
        if (recorder := live.recorder) is not None:
            recorder.dock_get.observe(time.perf_counter() - began)
        return batch

    def ack(self, lease_id: int) -> None:
        """Consume the rows of a lease."""
        self._state.ack(lease_id)

    def nack(self, lease_id: int) -> None:
        """Give the rows of a lease back unconsumed: the next get of that consumer may return them."""
        self._state.nack(lease_id)

    # -- state --------------------------------------------------------------------------------------

    def all_consumed(self, consumer: str, partition: str) -> bool:
        """Whether ``consumer`` has consumed every row of ``partition``."""
        return self._state.all_consumed(consumer, partition)

    def stats(self) -> dict[str, Any]:
        """Per consumer: rows and batches served, bytes, wait time; per partition: bytes, ready and consumed rows."""
        return self._state.stats()

    def save(self, directory: str | os.PathLike[str]) -> None:
        """Checkpoint the dock to ``directory`` atomically (data, readiness, consumption; not leases)."""
        save_state(self._state, directory)

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> Dock:
        """The dock saved in ``directory``; rows that were out on lease are available again."""
        return cls.from_state(load_state(directory))
