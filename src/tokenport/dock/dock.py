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

Versions (asynchronous RL): ``put(..., version=v)`` and ``append(..., version=v)`` record the
policy version that produced each row; ``set_version`` moves the trainer's version forward. A
consumer with a staleness limit (``max_staleness`` of the dock, of ``add_consumer``, or of one
``get``) is served only rows whose oldest version is within the limit of the current one. A row
that falls too stale for a consumer that still has to consume it is never trained and never lost:
it expires exactly once by ``on_stale`` -- ``"requeue"`` (default) forgets the row and hands its id
back through ``expired()`` so the rollout stage regenerates that prompt's sample, ``"drop"`` marks
it consumed by everyone and counts it (``stats()["expired"]``). Admission control keeps at most
``max_inflight_versions`` versions in flight: ``can_admit()`` is False, and ``admit()`` blocks a
rollout worker, while a written row some consumer has not consumed is ``max_inflight_versions``
or more versions behind the current one.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..metrics import live
from .aio import AsyncMethods
from .arguments import Sampler, checked_put, checked_segment, checked_version, int64, wanted_columns
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
    row goes stale for ever. Multi-turn rollouts ``append`` segments (turns) to segmented columns
    instead: an unfinished row keeps its segments and their versions and is resumed, not
    regenerated; samplers see each row's oldest and newest version (``SampleRequest.versions``).

    Versions (see the module docstring): ``max_staleness`` (versions a row may lag, None: no limit),
    ``on_stale`` (``"requeue"`` or ``"drop"``: what becomes of a row that falls too stale) and
    ``max_inflight_versions`` (admission control; None: always admit).
    """

    def __init__(
        self,
        columns: Sequence[Column],
        consumers: Sequence[str],
        n_samples_per_prompt: int = 1,
        *,
        max_age: int | None = None,
        max_staleness: int | None = None,
        on_stale: str = "requeue",
        max_inflight_versions: int | None = None,
    ) -> None:
        self._state = DockState(
            columns,
            consumers,
            n_samples_per_prompt,
            max_age=max_age,
            max_staleness=max_staleness,
            on_stale=on_stale,
            max_inflight_versions=max_inflight_versions,
        )

    @classmethod
    def from_state(cls, state: DockState) -> Dock:
        """A dock over ``state`` (a loaded checkpoint, a copy of a RayDock), which it then owns."""
        dock = cls.__new__(cls)
        dock._state = state
        return dock

    def adopt_state(self, state: DockState) -> None:
        """Hold ``state`` (a loaded checkpoint) in place of this dock's own, so every handle to this
        dock sees it (the TransferQueue adapter's ``load_checkpoint``)."""
        self._state = state

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

    def add_consumer(self, name: str, *, max_staleness: int | None = None) -> None:
        """Add a consumer (a stage); it has consumed nothing yet. ``max_staleness`` overrides the dock's."""
        self._state.add_consumer(name, max_staleness)

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

    # -- versions -----------------------------------------------------------------------------------

    @property
    def version(self) -> int:
        """The current (trainer's) policy version; 0 until ``set_version``."""
        return self._state.version

    def set_version(self, version: int) -> None:
        """Move the current policy version forward (going back is refused); rows now too stale expire."""
        self._state.set_version(version)

    def expired(self, partition: str | None = None) -> dict[str, np.ndarray]:
        """Rows expired under ``on_stale="requeue"`` since the last call, by partition: put them again."""
        return self._state.expired(partition)

    def can_admit(self) -> bool:
        """Whether a rollout may start without more than ``max_inflight_versions`` versions in flight."""
        return self._state.can_admit()

    def admit(self, timeout: float | None = None) -> None:
        """Block a rollout worker until ``can_admit()``; DockTimeout after ``timeout`` seconds."""
        self._state.admit(timeout)

    # -- put ----------------------------------------------------------------------------------------

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
        finished or not (see the class docstring). ``version`` (one, or one per row) is the policy
        version that produced the rows; without it rows keep theirs, and rows with none get the
        current one (refused when the dock limits staleness or admission). On any error nothing
        is written.
        """
        began = time.perf_counter() if live.recorder is not None else 0.0
        state = self._state
        ids, checked, finished = checked_put(state.column, columns, rows, completed)
        versions = checked_version(version, len(ids))
        with state.lock:
            target = state.check_put(partition, list(checked), ids, overwrite, versions)
            for name, value in checked.items():
                target.write(state.column(name), ids, value)
            state.mark_ready(target, list(checked), ids, finished, versions, overwrite)
        if (recorder := live.recorder) is not None:
            recorder.dock_put.observe(time.perf_counter() - began)

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
        row = int64("row", row, 0)
        checked = checked_segment(self._state.column, columns)
        stamp = checked_version(version, 1)
        self._state.append(partition, row, checked, None if stamp is None else int(stamp[0]), bool(finished))

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
        began = time.perf_counter() if live.recorder is not None else 0.0
        wanted = wanted_columns(columns)
        state = self._state
        with state.lock:
            taken = state.take(
                consumer, wanted, count, partition, rows, timeout, sampler, lease, unfinished, max_staleness
            )
            if taken is None:
                batch = None
            else:
                target, give, lease_id = taken
                data = {name: target.read(state.column(name), give) for name in wanted}
                nbytes = sum(v.values.nbytes if isinstance(v, Packed) else v.nbytes for v in data.values())
                state.served(consumer, nbytes)
                segments = segment_versions = None
                if any(state.column(name).segmented for name in wanted):
                    segments, segment_versions = target.segments_of(give)
                batch = Batch(
                    target.name,
                    give,
                    data,
                    lease_id,
                    state.n_samples_per_prompt,
                    target.age[give],
                    target.version_first[give],
                    target.version_last[give],
                    segments,
                    segment_versions,
                )
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
        """Checkpoint the dock to ``directory`` atomically (data, readiness, consumption; not leases); an
        earlier checkpoint there is replaced, anything else there is refused (ConfigError)."""
        save_state(self._state, directory)

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> Dock:
        """The dock saved in ``directory``; rows that were out on lease are available again."""
        return cls.from_state(load_state(directory))
