"""The dock on Ray: a controller actor holding only metadata, K shard actors holding the data.

TransferDock keeps everything in one actor, so every byte of every stage passes through it.
Here the controller knows readiness, consumption, leases and ragged row lengths (for balancing)
and nothing else; row ``r`` of a partition lives on shard ``(r // n_samples_per_prompt) % K``
(a prompt group stays on one shard). One round trip per put and per get from the client's view:

* put: the client stages each shard's rows there directly (one call per shard, concurrent) and
  sends the commit (readiness, ragged lengths) to the controller in the same breath, with the
  staging calls' results as its arguments, so Ray starts the commit once every shard holds its
  rows. The client waits on the commit alone. The controller checks the put as ``Dock`` does
  (nothing changes if it is refused: the staged rows are discarded), tells the shards to apply
  the staged rows, then makes the cells ready.
* get: one controller call chooses and claims the rows (waiting there, on a condition variable),
  asks every shard holding some of them to read them, and returns those reads' object refs; the
  client fetches them in parallel, zero-copy out of Ray's object store.

Every call the controller makes to a shard (apply, read, forget, snapshot) comes from that one
process, and Ray runs an actor's calls from one caller in the order they were sent: a read the
controller sends after a commit finds the commit's rows applied, a read after a clear finds them
gone. A shard refuses to read a cell it does not hold (a broken order would fail loudly).

``RayDock`` implements ``DockAPI`` (``Dock``'s methods, ``aput``/``aget`` and byte counts in
``stats`` included) and is picklable: pass it to any task or actor, which then talks to the same
controller and shards. ``put`` and ``get`` check their arguments in the calling process with
``Dock``'s own code (``arguments``) before any actor call, the controller is the same
``DockState``, and errors raised in the actors reach the caller as the same TokenportError, so a
bad call fails as it fails on a ``Dock``. Concurrent puts of the same cells without ``overwrite``
are a caller bug: one of them fails, and the cells hold one of the two writes.
"""

from __future__ import annotations

import os
import uuid
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import ray

from .._checks import check_int
from ..errors import ConfigError, CorruptStoreError, TokenportError
from .aio import AsyncMethods
from .arguments import Sampler, checked_get, checked_put, checked_segment, checked_version, row_ids, wanted_columns
from .batch import Batch
from .casting import as_array
from .checkpoint import load_state, save_state
from .dock import Dock
from .ragged import Packed, Padded, take_rows
from .schema import Column
from .state import DockState
from .storage import Partition

__all__ = ["RayDock"]

_CONTROLLER_THREADS = 256  # concurrent controller calls; a waiting get holds one


class _Controller:
    """Metadata of every partition: a ``DockState`` whose ragged columns keep lengths only; the one
    process that sends the shards their apply, read, forget and snapshot calls (see the module docstring)."""

    def __init__(
        self,
        columns: list[Column],
        consumers: list[str],
        n_samples_per_prompt: int,
        max_age: int | None,
        shards: list[Any],
        versioning: dict[str, Any],
    ) -> None:
        self.state = DockState(columns, consumers, n_samples_per_prompt, max_age=max_age, **versioning)
        self.samplers: dict[str, Sampler] = {}
        self.shards = shards

    def schema(self) -> tuple[dict[str, Column], list[str], int, int | None, dict[str, Any]]:
        state = self.state
        return state.columns, state.consumers, state.n_samples_per_prompt, state.max_age, _versioning(state)

    def call(self, method: str, *args: Any) -> Any:
        """Run one of the state's plain methods (partitions, consumers, acks, stats), or read a property."""
        attribute = getattr(self.state, method)
        return attribute(*args) if callable(attribute) else attribute

    def forget(self, method: str, partition: str) -> None:
        """``clear`` or ``drop_partition`` a partition here and on every shard (in order after earlier applies)."""
        with self.state.lock:
            getattr(self.state, method)(partition)
            forgotten = [shard.forget.remote(partition) for shard in self.shards]
        ray.get(forgotten)

    def add_column(self, column: Column) -> None:
        """Add a column here and on every shard."""
        with self.state.lock:
            self.state.add_column(column)
            added = [shard.add_column.remote(column) for shard in self.shards]
        ray.get(added)

    def commit(
        self,
        put_id: str,
        partition: str,
        names: list[str],
        rows: np.ndarray,
        lengths: dict[str, np.ndarray],
        overwrite: bool,
        finished: np.ndarray,
        versions: np.ndarray | None,
        staged_on: list[int],
        *staged: None,
    ) -> None:
        """The shards ``staged_on`` hold the put's rows (``staged``: their calls' results): check the put
        as ``Dock.put`` does, have the shards apply the rows, record ragged lengths, make the cells ready."""
        state = self.state
        ids = row_ids(rows)
        with state.lock:
            target = state.check_put(partition, names, ids, overwrite, versions)
            for k in staged_on:
                self.shards[k].apply.remote(put_id, partition, target.rows)
            for name, row_lengths in lengths.items():
                target.record_lengths(state.column(name), ids, row_lengths)
            state.mark_ready(target, names, ids, finished, versions, overwrite)

    def snapshot(self) -> list[dict[str, Any]]:
        """Per partition: name, rows, the bits (readiness, consumption, finished, age) and the refs of
        every shard's snapshot of its data."""
        with self.state.lock:
            return [
                {
                    "name": p.name,
                    "rows": p.rows,
                    "ready": dict(p.ready),
                    "consumed": dict(p.consumed),
                    "completed": p.completed.copy(),
                    "age": p.age.copy(),
                    "versions": (p.version_first.copy(), p.version_last.copy()),
                    "held": [shard.snapshot.remote(p.name) for shard in self.shards],
                    "segmented": _segmented_data(self.state, p),
                }
                for p in self.state.each_partition()
            ]

    def restore_segments(self, partition: str, segmented: dict[str, Any]) -> None:
        """Hold a copied partition's segmented columns (data, readiness, segment table) as they were."""
        with self.state.lock:
            _adopt_segmented(self.state, self.state.partition(partition), segmented)

    def take(
        self,
        consumer: str,
        wanted: list[str],
        count: int,
        partition: str | None,
        rows: Any,
        timeout: float | None,
        sampler_key: str | None,
        sampler: Sampler | None,
        lease: float | None,
        unfinished: bool,
        max_staleness: int | None,
    ) -> tuple[Any, ...] | None:
        """Choose and claim rows as ``Dock.get`` does and send the reads to the shards holding them:
        ``(partition, rows, lease id, ages, (oldest, newest versions), segmented columns' data (held here),
        (segment counts, segment versions) or None, [(positions in rows, ref of a shard's read)])`` or None."""
        if sampler is not None:
            self.samplers[sampler_key] = sampler
        chosen = self.samplers.get(sampler_key) if sampler_key else None
        state = self.state
        with state.lock:
            taken = state.take(
                consumer, wanted, count, partition, rows, timeout, chosen, lease, unfinished, max_staleness
            )
            if taken is None:
                return None
            target, give, lease_id = taken
            state.served(consumer, state.batch_bytes(target, wanted, give))
            ages = target.age[give]
            versions = (target.version_first[give], target.version_last[give])
            segmented = [name for name in wanted if state.column(name).segmented]
            held = {name: target.read(state.column(name), give) for name in segmented}  # the controller's own
            segments = target.segments_of(give) if segmented else None
            wanted = [name for name in wanted if name not in held]
        if not wanted:
            return target.name, give, lease_id, ages, versions, held, segments, []
        shard_of = (give // state.n_samples_per_prompt) % len(self.shards)
        reads = []
        for k, shard in enumerate(self.shards):
            positions = np.flatnonzero(shard_of == k)
            if len(positions) == len(give):  # one shard holds every row
                read = shard.read.remote(target.name, wanted, give)
                return target.name, give, lease_id, ages, versions, held, segments, [(positions, read)]
            if len(positions):
                reads.append((positions, shard.read.remote(target.name, wanted, give[positions])))
        return target.name, give, lease_id, ages, versions, held, segments, reads


class _Shard:
    """The data of the rows routed here, per partition, and the rows of puts staged but not yet applied."""

    def __init__(self, columns: list[Column]) -> None:
        self.columns = {column.name: column for column in columns}
        self.partitions: dict[str, Partition] = {}
        self.staged: dict[str, tuple[np.ndarray, dict[str, np.ndarray | Packed]]] = {}

    def add_column(self, column: Column) -> None:
        self.columns[column.name] = column

    def stage(self, put_id: str, ids: np.ndarray, values: dict[str, np.ndarray | Packed]) -> None:
        """Keep a put's rows (as Ray hands them over: views of the object store) until the controller
        applies or the client discards them."""
        self.staged[put_id] = (ids, values)

    def discard(self, put_id: str) -> None:
        self.staged.pop(put_id, None)

    def apply(self, put_id: str, partition: str, rows_in_partition: int) -> None:
        """Write a staged put's rows into the partition (the controller checked the put)."""
        ids, values = self.staged.pop(put_id)
        target = self.partitions.get(partition)
        if target is None or target.rows != rows_in_partition:
            target = self.partitions[partition] = Partition(partition, rows_in_partition)
        for name, value in values.items():
            target.write(self.columns[name], ids, value)
            target.ready_of(name)[ids] = True  # this shard holds the cell (readiness is the controller's)

    def snapshot(self, partition: str) -> dict[str, tuple[np.ndarray, np.ndarray | Packed]]:
        """Per column, the rows this shard holds and their data (for a checkpoint)."""
        target = self.partitions.get(partition)
        if target is None:
            return {}
        held = {name: np.flatnonzero(ready) for name, ready in target.ready.items()}
        return {name: (ids, target.read(self.columns[name], ids)) for name, ids in held.items() if len(ids)}

    def read(self, partition: str, names: list[str], ids: np.ndarray) -> dict[str, np.ndarray | Packed]:
        target = self.partitions.get(partition)
        for name in names:
            if target is None or not target.ready_of(name)[ids].all():
                raise CorruptStoreError(
                    f"RayDock shard: partition {partition!r} column {name!r}: asked for rows it does not hold "
                    "(a read overtook its commit); report this as a tokenport bug"
                )
        return {name: target.read(self.columns[name], ids) for name in names}  # type: ignore[union-attr]

    def forget(self, partition: str) -> None:
        self.partitions.pop(partition, None)


class RayDock(AsyncMethods):
    """``DockAPI`` over a controller actor and ``shards`` storage actors (see the module docstring).

    ``ray.init`` must have run. ``shutdown()`` kills the actors; workers that received this
    object through Ray share the same dock.
    """

    def __init__(
        self,
        columns: Sequence[Column],
        consumers: Sequence[str],
        n_samples_per_prompt: int = 1,
        *,
        shards: int = 1,
        max_age: int | None = None,
        max_staleness: int | None = None,
        on_stale: str = "requeue",
        max_inflight_versions: int | None = None,
    ) -> None:
        shards = check_int("shards", shards)
        columns, consumers = list(columns), list(consumers)
        versioning = {
            "max_staleness": max_staleness,
            "on_stale": on_stale,
            "max_inflight_versions": max_inflight_versions,
        }
        _versioning(DockState(columns, consumers, n_samples_per_prompt, max_age=max_age, **versioning))  # checks
        self._shards = [ray.remote(_Shard).remote(columns) for _ in range(shards)]
        self._controller = ray.remote(max_concurrency=_CONTROLLER_THREADS)(_Controller).remote(
            columns, consumers, n_samples_per_prompt, max_age, self._shards, versioning
        )
        self._columns = {column.name: column for column in columns}
        self.n_samples_per_prompt = int(n_samples_per_prompt)
        self.max_age = None if max_age is None else int(max_age)
        self._sampler_keys: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_sampler_keys"]  # samplers registered here stay with this process
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._sampler_keys = weakref.WeakKeyDictionary()

    # -- DockAPI ------------------------------------------------------------------------------------

    def add_partition(self, name: str, num_prompts: int) -> None:
        _get(self._controller.call.remote("add_partition", name, num_prompts))

    def clear(self, partition: str) -> None:
        _get(self._controller.forget.remote("clear", partition))

    def drop_partition(self, partition: str) -> None:
        _get(self._controller.forget.remote("drop_partition", partition))

    def add_column(self, column: Column) -> None:
        _get(self._controller.add_column.remote(column))
        self._columns[column.name] = column

    def add_consumer(self, name: str, *, max_staleness: int | None = None) -> None:
        _get(self._controller.call.remote("add_consumer", name, max_staleness))

    @property
    def version(self) -> int:
        """The current (trainer's) policy version, as the controller holds it."""
        return _get(self._controller.call.remote("version"))

    def set_version(self, version: int) -> None:
        """As ``Dock.set_version``: rows now too stale expire by the dock's policy."""
        _get(self._controller.call.remote("set_version", version))

    def expired(self, partition: str | None = None) -> dict[str, np.ndarray]:
        """As ``Dock.expired``: rows expired under ``on_stale="requeue"`` since the last call."""
        return _get(self._controller.call.remote("expired", partition))

    def can_admit(self) -> bool:
        """As ``Dock.can_admit``."""
        return _get(self._controller.call.remote("can_admit"))

    def admit(self, timeout: float | None = None) -> None:
        """As ``Dock.admit``: blocks (in one controller thread) until a rollout may start."""
        _get(self._controller.call.remote("admit", timeout))

    def append(
        self,
        partition: str,
        row: int,
        columns: Mapping[str, Any],
        *,
        version: int | None = None,
        finished: bool = False,
    ) -> None:
        """As ``Dock.append``: the segment goes to the controller, which holds segmented columns itself (a
        turn's items are small; they are not spread over the shards)."""
        row = check_int("row", row, 0)
        if isinstance(columns, Mapping):
            self._refresh_columns(columns)
        checked = checked_segment(self._column, columns)
        stamp = checked_version(version, 1)
        _get(
            self._controller.call.remote(
                "append", partition, row, checked, None if stamp is None else int(stamp[0]), bool(finished)
            )
        )

    def close(self) -> None:
        _get(self._controller.call.remote("close"))

    def ack(self, lease_id: int) -> None:
        _get(self._controller.call.remote("ack", lease_id))

    def nack(self, lease_id: int) -> None:
        _get(self._controller.call.remote("nack", lease_id))

    def all_consumed(self, consumer: str, partition: str) -> bool:
        return _get(self._controller.call.remote("all_consumed", consumer, partition))

    def stats(self) -> dict[str, Any]:
        """As ``Dock.stats``; byte counts come from the row lengths the controller keeps."""
        return _get(self._controller.call.remote("stats"))

    @property
    def columns(self) -> dict[str, Column]:
        self._columns = _get(self._controller.call.remote("columns"))
        return dict(self._columns)

    @property
    def consumers(self) -> list[str]:
        return _get(self._controller.call.remote("consumers"))

    @property
    def partitions(self) -> dict[str, int]:
        """Partition names, oldest first, with their row counts."""
        return _get(self._controller.call.remote("partitions"))

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
        """As ``Dock.put`` (the same checks, here, before any actor call): the rows staged on their
        shards and the commit sent to the controller at once; one wait, for the commit."""
        if isinstance(columns, Mapping):
            self._refresh_columns(columns)
        ids, checked, finished = checked_put(self._column, columns, rows, completed)
        versions = checked_version(version, len(ids))
        names = list(checked)
        checked = {name: value.packed() if isinstance(value, Padded) else value for name, value in checked.items()}
        put_id = uuid.uuid4().hex
        shard_of = (ids // self.n_samples_per_prompt) % len(self._shards)
        staged_on, staged = [], []
        for k, shard in enumerate(self._shards):
            positions = np.flatnonzero(shard_of == k)
            if len(positions) == len(ids):  # every row goes to this shard: send the data as it is
                staged.append(shard.stage.remote(put_id, ids, checked))
            elif len(positions):
                values = {name: _subset(value, positions) for name, value in checked.items()}
                staged.append(shard.stage.remote(put_id, ids[positions], values))
            else:
                continue
            staged_on.append(k)
        lengths = {name: value.lengths for name, value in checked.items() if isinstance(value, Packed)}
        commit = self._controller.commit.remote(
            put_id, partition, names, ids, lengths, bool(overwrite), finished, versions, staged_on, *staged
        )
        try:
            _get(commit)
        except BaseException:
            for k in staged_on:  # refused: nothing was applied, drop what the shards staged
                self._shards[k].discard.remote(put_id)
            raise

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
        """As ``Dock.get`` (the same checks): one controller call chooses the rows and starts their reads
        on the shards; the reads come back in parallel from the object store."""
        wanted = wanted_columns(columns)
        checked_get(count, timeout, sampler, lease)
        key, send = self._sampler_key(sampler)
        exact = None if rows is None else as_array(rows, "rows")
        taken = _get(
            self._controller.take.remote(
                consumer,
                wanted,
                count,
                partition,
                exact,
                timeout,
                key,
                send,
                lease,
                bool(unfinished),
                max_staleness,
            )
        )
        if taken is None:
            return None
        name, give, lease_id, ages, (first, last), held, segments, reads = taken
        pieces = _get([ref for _, ref in reads])
        if len(pieces) == 1:  # one shard holds every row, already in order
            data = pieces[0]
        elif pieces:  # each shard's rows, put back in the order of give
            order = np.argsort(np.concatenate([where for where, _ in reads]), kind="stable")
            data = {column: _subset(_concatenate([p[column] for p in pieces]), order) for column in pieces[0]}
        else:  # only segmented columns, which the controller holds
            data = {}
        data = {column: held[column] if column in held else data[column] for column in wanted}
        counts, versions = (None, None) if segments is None else segments
        return Batch(name, give, data, lease_id, self.n_samples_per_prompt, ages, first, last, counts, versions)

    def save(self, directory: str | os.PathLike[str]) -> None:
        """Checkpoint to ``directory`` in ``Dock.save``'s format (the data passes through this process)."""
        save_state(self._copy_state(), directory)

    @classmethod
    def load(cls, directory: str | os.PathLike[str], *, shards: int = 1) -> RayDock:
        """A new RayDock (``shards`` data actors) in the state saved in ``directory``."""
        return cls._from_state(load_state(directory), shards)

    def to_dock(self) -> Dock:
        """An in-process copy of this dock's data and progress (leases returned, stats reset)."""
        return Dock.from_state(self._copy_state())

    @classmethod
    def from_dock(cls, dock: Dock, *, shards: int = 1) -> RayDock:
        """A new RayDock holding a copy of an in-process dock's data and progress."""
        return cls._from_state(dock.state, shards)

    def shutdown(self) -> None:
        """Kill the controller and the shards (the dock's data is gone)."""
        for actor in (self._controller, *self._shards):
            ray.kill(actor)

    # -- internals ----------------------------------------------------------------------------------

    def _copy_state(self) -> DockState:
        """This dock's data and progress gathered from the controller and the shards into one state."""
        columns, consumers, n_samples_per_prompt, max_age, versioning = _get(self._controller.schema.remote())
        state = DockState(list(columns.values()), consumers, n_samples_per_prompt, max_age=max_age, **versioning)
        state.version = _get(self._controller.call.remote("version"))
        for entry in _get(self._controller.snapshot.remote()):
            target = state.adopt(Partition(entry["name"], entry["rows"]))
            for held in _get(entry["held"]):
                for column, (ids, values) in held.items():
                    kept = np.flatnonzero(entry["ready"].get(column, np.zeros(target.rows, dtype=bool))[ids])
                    if len(kept):
                        target.write(columns[column], ids[kept], _subset(values, kept))
                        target.ready_of(column)[ids[kept]] = True
            _adopt_segmented(state, target, entry["segmented"])
            state.restore(target.name, entry["consumed"], entry["completed"], entry["age"], entry["versions"])
        if _get(self._controller.call.remote("closed")):
            state.close()
        return state

    @classmethod
    def _from_state(cls, state: DockState, shards: int) -> RayDock:
        """A new RayDock holding a copy of ``state``'s data and progress."""
        with state.lock:
            copy = cls(
                list(state.columns.values()),
                state.consumers,
                state.n_samples_per_prompt,
                shards=shards,
                max_age=state.max_age,
                **_versioning(state),
            )
            copy.set_version(state.version)
            for partition in state.each_partition():
                copy.add_partition(partition.name, partition.rows // state.n_samples_per_prompt)
                for column, ready in partition.ready.items():
                    ids = np.flatnonzero(ready)
                    if len(ids) and not state.column(column).segmented:
                        versions = partition.version_first[ids]  # the rows' own (restored exactly below)
                        copy.put(
                            partition.name,
                            {column: partition.read(state.column(column), ids)},
                            rows=ids,
                            version=None if (versions < 0).any() else versions,
                        )
                segmented = _segmented_data(state, partition)
                if segmented["columns"]:
                    _get(copy._controller.restore_segments.remote(partition.name, segmented))
                _get(
                    copy._controller.call.remote(
                        "restore",
                        partition.name,
                        dict(partition.consumed),
                        partition.completed,
                        partition.age,
                        (partition.version_first, partition.version_last),
                    )
                )
            if state.closed:
                copy.close()
        return copy

    def _column(self, name: str) -> Column:
        try:
            return self._columns[name]
        except (KeyError, TypeError):
            raise ConfigError(f"unknown column {name!r}; the dock has {list(self._columns)}") from None

    def _refresh_columns(self, columns: Mapping[str, Any]) -> None:
        """Learn columns another client added since this one was made."""
        if any(name not in self._columns for name in columns):
            self._columns = _get(self._controller.schema.remote())[0]

    def _sampler_key(self, sampler: Sampler | None) -> tuple[str | None, Sampler | None]:
        """A key naming the sampler at the controller, and the sampler itself when it must be sent:
        the first time, or every time for a sampler that cannot be weakly referenced (so a key is
        never reused for another sampler after the first is garbage-collected)."""
        if sampler is None:
            return None, None
        try:
            key = self._sampler_keys.get(sampler)
        except TypeError:
            return uuid.uuid4().hex, sampler
        if key is None:
            key = self._sampler_keys[sampler] = uuid.uuid4().hex
            return key, sampler
        return key, None


def _segmented_data(state: DockState, partition: Partition) -> dict[str, Any]:
    """A partition's segmented columns: per column the ready rows and their items, and the segment table."""
    columns = {}
    for name, ready in partition.ready.items():
        if state.column(name).segmented and ready.any():
            ids = np.flatnonzero(ready)
            columns[name] = (ids, partition.read(state.column(name), ids))
    return {
        "columns": columns,
        "segments": {row: list(pairs) for row, pairs in partition.segments.items()},
        "segment_columns": dict(partition.segment_columns),
    }


def _adopt_segmented(state: DockState, target: Partition, segmented: dict[str, Any]) -> None:
    """Write ``_segmented_data``'s columns and segment table into ``target`` (a copy of their partition)."""
    for name, (ids, values) in segmented["columns"].items():
        target.write(state.column(name), ids, values)
        target.ready_of(name)[ids] = True
    target.segments.update({row: list(pairs) for row, pairs in segmented["segments"].items()})
    target.segment_columns.update(segmented["segment_columns"])


def _versioning(state: DockState) -> dict[str, Any]:
    """A dock's staleness and admission settings, as DockState's keyword arguments."""
    return {
        "max_staleness": state.max_staleness,
        "on_stale": state.on_stale,
        "max_inflight_versions": state.max_inflight_versions,
    }


def _get(refs: Any) -> Any:
    """``ray.get``, re-raising a TokenportError raised inside an actor as itself."""
    try:
        return ray.get(refs)
    except ray.exceptions.RayTaskError as error:
        cause = getattr(error, "cause", None)
        if isinstance(cause, TokenportError):
            raise cause from None
        raise


def _subset(value: np.ndarray | Packed, positions: np.ndarray) -> np.ndarray | Packed:
    return take_rows(value, positions) if isinstance(value, Packed) else value[positions]


def _concatenate(pieces: list[np.ndarray | Packed]) -> np.ndarray | Packed:
    if isinstance(pieces[0], Packed):
        return Packed(np.concatenate([p.values for p in pieces]), np.concatenate([p.lengths for p in pieces]))
    return np.concatenate(pieces)
