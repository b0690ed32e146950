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
from collections.abc import Sequence
from typing import Any

from ..metrics import live
from .base import DockBase
from .batch import Batch
from .checkpoint import load_state, save_state
from .ragged import Packed
from .requests import AppendRequest, GetRequest, PutRequest, StateCall
from .schema import Column
from .state import DockState

__all__ = ["Dock"]


class Dock(DockBase):
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

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> Dock:
        """The dock saved in ``directory``; rows that were out on lease are available again."""
        return cls.from_state(load_state(directory))

    # -- the primitives (DockBase) --------------------------------------------------------------------

    def column_of(self, name: str) -> Column:
        return self._state.column(name)

    def handle_call(self, call: StateCall) -> Any:
        return call.on(self._state)

    def handle_save(self, directory: str | os.PathLike[str]) -> None:
        save_state(self._state, directory)

    def handle_put(self, request: PutRequest) -> None:
        began = time.perf_counter() if live.recorder is not None else 0.0
        state = self._state
        with state.lock:
            target = state.check_put(request.partition, request.names, request.ids, request.overwrite, request.versions)
            for name, value in request.values.items():
                target.write(state.column(name), request.ids, value)
            state.mark_ready(target, request.names, request.ids, request.finished, request.versions, request.overwrite)
        if (recorder := live.recorder) is not None:
            recorder.dock_put.observe(time.perf_counter() - began)

    def handle_append(self, request: AppendRequest) -> None:
        self._state.append(request.partition, request.row, request.values, request.version, request.finished)

    def handle_get(self, request: GetRequest) -> Batch | None:
        began = time.perf_counter() if live.recorder is not None else 0.0
        state = self._state
        with state.lock:
            taken = state.take(request)
            batch = None if taken is None else self._batch(request, *taken)
        if (recorder := live.recorder) is not None:
            recorder.dock_get.observe(time.perf_counter() - began)
        return batch

    def _batch(self, request: GetRequest, target: Any, give: Any, lease_id: int | None) -> Batch:
        """The batch of the rows ``take`` chose (the lock held), its bytes counted for the consumer."""
        state = self._state
        data = {name: target.read(state.column(name), give) for name in request.columns}
        nbytes = sum(v.values.nbytes if isinstance(v, Packed) else v.nbytes for v in data.values())
        state.served(request.consumer, nbytes)
        segments = segment_versions = None
        if any(state.column(name).segmented for name in request.columns):
            segments, segment_versions = target.segments_of(give)
        return Batch(
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
