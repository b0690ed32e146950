"""The dock on Ray: rows in Ray's object store, a controller actor holding only metadata.

TransferDock keeps everything in one actor, so every byte of every stage passes through it. Here a
put's rows go into Ray's object store straight from the producer (``ray.put`` of one buffer, see
``blob``: one copy into shared memory, no actor in the way), and the controller keeps, per cell,
which object holds it and where; it also keeps readiness, consumption, leases and ragged row
lengths (for balancing), never data.
One round trip per put and per get from the client's view:

* put: the client writes its rows into the object store and sends the commit (cells, readiness,
  ragged lengths, the object's ref) to the controller, which checks the put as ``Dock`` does,
  records where each cell lives and makes the cells ready. Nothing is recorded if it is refused.
* get: one controller call chooses and claims the rows (waiting there, on a condition variable)
  and returns, per column, each row's object and position, with the objects' refs; the client
  reads those objects zero-copy out of the object store (several at once) and gathers the rows.
  A column whose rows lie end to end in one object comes back as a read-only view of it, as
  ``Dock`` returns rows that lie end to end in its buffers.

Ray frees an object when its owner, the process that put it, exits. So the controller hands each
put's object to one of K shard actors (``shards``), which maps it and holds it ("pins" it), sent
with the commit and waited on with it: once ``put`` returns, the rows outlive their producer on
this node (a finished task, a killed rollout worker). The controller releases an object once no
cell refers to it (overwritten everywhere, or its partition cleared or dropped); a release that
overtakes its pin is remembered, so the pin that follows is dropped. Across nodes, rows whose
object's owner is gone raise a StorageError when read (Ray fetches objects through their owner).

``RayDock`` implements ``DockAPI`` (``Dock``'s methods, ``aput``/``aget`` and byte counts in
``stats`` included) and is picklable: pass it to any task or actor, which then talks to the same
controller. ``put`` and ``get`` check their arguments in the calling process with ``Dock``'s own
code (``arguments``) before any actor call, the controller is the same ``DockState``, and errors
raised in the actors reach the caller as the same TokenportError, so a bad call fails as it fails
on a ``Dock``. Concurrent puts of the same cells without ``overwrite`` are a caller bug: one of
them fails, and the cells hold one of the two writes. Segmented columns (rows appended turn by
turn) are held by the controller itself: a turn's items are small.
"""

from __future__ import annotations

import os
import uuid
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray

from .._checks import check_int
from ..errors import ConfigError, CorruptStoreError, StorageError, TokenportError
from .aio import AsyncMethods
from .arguments import (
    Sampler,
    checked_get,
    checked_put,
    checked_segment,
    checked_version,
    int64,
    row_ids,
    wanted_columns,
)
from .batch import Batch
from .blob import pack_columns, unpack_columns
from .casting import as_array
from .checkpoint import load_state, save_state
from .dock import Dock
from .ragged import Packed, Padded, take_rows
from .schema import Column
from .state import DockState
from .storage import Partition

__all__ = ["RayDock"]

_CONTROLLER_THREADS = 256  # concurrent controller calls; a waiting get holds one


class _Cells:
    """Where one partition's cells live: per column, each row's object slot (-1: none) and its position there."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.slot: dict[str, np.ndarray] = {}
        self.position: dict[str, np.ndarray] = {}

    def of(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        if name not in self.slot:
            self.slot[name] = np.full(self.rows, -1, dtype=np.int64)
            self.position[name] = np.zeros(self.rows, dtype=np.int64)
        return self.slot[name], self.position[name]


class _Controller:
    """Metadata of every partition: a ``DockState`` whose ragged columns keep lengths only, and where
    each cell's data lives in the object store (see the module docstring)."""

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
        self.cells: dict[str, _Cells] = {}
        self.objects: dict[int, list[Any]] = {}  # slot -> [ref, shard, cells referring to it, partition]
        self.next_slot = 0

    def schema(self) -> tuple[dict[str, Column], list[str], int, int | None, dict[str, Any]]:
        state = self.state
        return state.columns, state.consumers, state.n_samples_per_prompt, state.max_age, _versioning(state)

    def call(self, method: str, *args: Any) -> Any:
        """Run one of the state's plain methods (partitions, consumers, acks, stats), or read a property."""
        attribute = getattr(self.state, method)
        return attribute(*args) if callable(attribute) else attribute

    def held_objects(self) -> dict[str, int]:
        """Objects held and pinned (the shards are asked from here, so after every pin and release sent)."""
        pinned = sum(ray.get([shard.count.remote() for shard in self.shards]))
        with self.state.lock:
            return {"objects": len(self.objects), "pinned": pinned}

    def forget(self, method: str, partition: str) -> None:
        """``clear`` or ``drop_partition`` a partition, releasing the objects that held its rows."""
        with self.state.lock:
            getattr(self.state, method)(partition)
            self.cells.pop(partition, None)
            self._release([slot for slot, entry in self.objects.items() if entry[3] == partition])

    def commit(
        self,
        partition: str,
        names: list[str],
        rows: np.ndarray,
        lengths: dict[str, np.ndarray],
        overwrite: bool,
        finished: np.ndarray,
        versions: np.ndarray | None,
        put_id: str,
        shard: int,
        boxed: list[Any],
    ) -> None:
        """A put whose rows are in the object ``boxed[0]`` (a ref in a list, so Ray passes the ref, not the
        data), pinned as ``put_id`` by shard ``shard``: check it as ``Dock.put`` does, record where its cells
        live, make the cells ready."""
        state = self.state
        ids = row_ids(rows)
        with state.lock:
            target = state.check_put(partition, names, ids, overwrite, versions)
            cells = self.cells.get(partition)
            if cells is None or cells.rows != target.rows:
                cells = self.cells[partition] = _Cells(target.rows)
            slot, self.next_slot = self.next_slot, self.next_slot + 1
            self.objects[slot] = [boxed[0], shard, len(ids) * len(names), partition, put_id]
            replaced = []
            for name in names:
                where, position = cells.of(name)
                replaced.append(where[ids])
                where[ids] = slot
                position[ids] = np.arange(len(ids))
            self._drop_cells(np.concatenate(replaced))
            for name, row_lengths in lengths.items():
                target.record_lengths(state.column(name), ids, row_lengths)
            state.mark_ready(target, names, ids, finished, versions, overwrite)

    def snapshot(self) -> list[dict[str, Any]]:
        """Per partition: name, rows, the bits (readiness, consumption, finished, age, versions), where
        each ready cell lives (``_Placement``) and the segmented columns' data."""
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
                    "placement": self._placement(p, self._stored_columns(p)),
                    "segmented": _segmented_data(self.state, p),
                }
                for p in self.state.each_partition()
            ]

    def _stored_columns(self, target: Partition) -> list[str]:
        """The columns with ready rows whose data lives in the object store (not segmented)."""
        return [n for n, r in target.ready.items() if r.any() and not self.state.column(n).segmented]

    def progress(self) -> dict[str, Any]:
        """What a copy needs besides the partitions (``_progress`` of the state)."""
        return _progress(self.state)

    def restore_progress(self, progress: dict[str, Any]) -> None:
        """Take a copied dock's expiry counters and the expired rows it had not handed back yet."""
        with self.state.lock:
            self.state.expired_requeued, self.state.expired_dropped = progress["expired"]
            for name, rows in progress["requeue"].items():
                self.state.requeue(name, rows)

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
        """Choose and claim rows as ``Dock.get`` does: ``(partition, rows, lease id, ages, (oldest, newest
        versions), segmented columns' data (held here), (segment counts, segment versions) or None,
        where the other columns' cells live)`` or None."""
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
            stored = [name for name in wanted if name not in held]
            placement = self._placement(target, stored, give)
        return target.name, give, lease_id, ages, versions, held, segments, placement

    def _placement(self, target: Partition, names: list[str], give: np.ndarray | None = None) -> _Placement:
        """Where the ready cells of ``names`` for rows ``give`` (None: every ready row, per column) live."""
        cells = self.cells.get(target.name)
        columns = {}
        for name in names:
            rows = np.flatnonzero(target.ready_of(name)) if give is None else give
            where = np.full(len(rows), -1, np.int64) if cells is None else cells.of(name)[0][rows]
            if len(where) and int(where.min()) < 0:
                raise CorruptStoreError(
                    f"RayDock: partition {target.name!r} column {name!r}: rows are ready but no object holds "
                    "them; report this as a tokenport bug"
                )
            columns[name] = (rows, where, cells.of(name)[1][rows] if cells is not None else where)
        slots = np.unique(np.concatenate([where for _, where, _ in columns.values()])).tolist() if columns else []
        return _Placement(columns, slots, [self.objects[slot][0] for slot in slots])

    def _drop_cells(self, slots: np.ndarray) -> None:
        """Cells that no longer refer to their objects (overwritten): release objects left with none."""
        emptied = []
        for slot, n in zip(*np.unique(slots[slots >= 0], return_counts=True)):
            entry = self.objects[int(slot)]
            entry[2] -= int(n)
            if entry[2] == 0:
                emptied.append(int(slot))
        self._release(emptied)

    def _release(self, slots: list[int]) -> None:
        """Forget these objects and have their shards unpin them."""
        by_shard: dict[int, list[str]] = {}
        for slot in slots:
            _, shard, _, _, put_id = self.objects.pop(slot)
            by_shard.setdefault(shard, []).append(put_id)
        for shard, released in by_shard.items():
            self.shards[shard].release.remote(released)


@dataclass(frozen=True)
class _Placement:
    """Where a get's (or a snapshot's) cells live: per column ``(rows, object slots, positions)``, and
    the slots' object refs."""

    columns: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]
    slots: list[int]
    refs: list[Any]

    def gather(self, partition: str) -> dict[str, np.ndarray | Packed]:
        """Read the objects out of the object store (all at once, zero-copy) and gather each column's rows."""
        try:
            objects = {slot: unpack_columns(*stored) for slot, stored in zip(self.slots, ray.get(self.refs))}
        except ray.exceptions.ObjectLostError as error:
            raise StorageError(
                f"RayDock: partition {partition!r}: the object holding rows of this batch is lost (its producer "
                f"exited before the dock pinned it, or its node is gone): {type(error).__name__}. Put those rows "
                "again (clear or overwrite them)"
            ) from None
        return {name: _gathered(objects, name, where, position) for name, (_, where, position) in self.columns.items()}


class _Shard:
    """Holds (pins) objects of the object store, so they outlive the producers that put them."""

    def __init__(self) -> None:
        self.pinned: dict[str, Any] = {}
        self.released: set[str] = set()  # released before their pin arrived (another caller's call)

    def pin(self, put_id: str, boxed: list[Any]) -> None:
        """Map the object (zero-copy) and keep it, unless it was released already."""
        if put_id in self.released:
            self.released.discard(put_id)
            return
        self.pinned[put_id] = ray.get(boxed[0])

    def release(self, put_ids: list[str]) -> None:
        for put_id in put_ids:
            if self.pinned.pop(put_id, None) is None:
                self.released.add(put_id)

    def count(self) -> int:
        """How many objects this shard pins."""
        return len(self.pinned)


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
        self._shards = [ray.remote(_Shard).remote() for _ in range(shards)]
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
        _get(self._controller.call.remote("add_column", column))
        self._columns[column.name] = column

    def add_consumer(self, name: str, *, max_staleness: int | None = None) -> None:
        _get(self._controller.call.remote("add_consumer", name, max_staleness))

    @property
    def version(self) -> int:
        """The current (trainer's) policy version, as the controller holds it."""
        return _get(self._controller.call.remote("version"))

    def set_version(self, version: int) -> None:
        """As ``Dock.set_version``: rows now too stale expire by the dock's policy."""
        _get(self._controller.call.remote("set_version", int64("version", version, 0)))

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
        row = int64("row", row, 0)
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

    def held_objects(self) -> dict[str, int]:
        """How many objects of Ray's object store hold this dock's rows (``objects``) and how many its shards
        pin (``pinned``, equal once their calls have run): what the dock keeps in shared memory."""
        return _get(self._controller.held_objects.remote())

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
        """As ``Dock.put`` (the same checks, here, before any actor call): the rows written into the object
        store here, then the commit to the controller and the pin to a shard at once; one wait."""
        if isinstance(columns, Mapping):
            self._refresh_columns(columns)
        ids, checked, finished = checked_put(self._column, columns, rows, completed)
        versions = checked_version(version, len(ids))
        lengths = {name: value.lengths for name, value in checked.items() if isinstance(value, (Packed, Padded))}
        stored = [ray.put(pack_columns(checked))]  # one buffer (see blob.py); a list passes the ref itself
        put_id, k = uuid.uuid4().hex, int(ids[0] // self.n_samples_per_prompt) % len(self._shards)
        pinned = self._shards[k].pin.remote(put_id, stored)
        commit = self._controller.commit.remote(
            partition, list(checked), ids, lengths, bool(overwrite), finished, versions, put_id, k, stored
        )
        try:
            _get(commit)
        except BaseException:
            self._shards[k].release.remote([put_id])  # refused: nothing refers to the object
            raise
        finally:
            ray.get(pinned)

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
        """As ``Dock.get`` (the same checks): one controller call chooses the rows and says which objects
        hold them; the objects are read here, together, zero-copy out of the object store."""
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
        name, give, lease_id, ages, (first, last), held, segments, placement = taken
        data = placement.gather(name)
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
        columns, _, n_samples_per_prompt, max_age, versioning = _get(self._controller.schema.remote())
        state = DockState(list(columns.values()), [], n_samples_per_prompt, max_age=max_age, **versioning)
        progress = _get(self._controller.progress.remote())
        for consumer, limit in progress["limits"].items():
            state.add_consumer(consumer, limit)
        state.version = progress["version"]
        state.expired_requeued, state.expired_dropped = progress["expired"]
        for entry in _get(self._controller.snapshot.remote()):
            target = state.adopt(Partition(entry["name"], entry["rows"]))
            placement = entry["placement"]
            for column, values in placement.gather(target.name).items():
                ids = placement.columns[column][0]
                target.write(columns[column], ids, values)
                target.ready_of(column)[ids] = True
            _adopt_segmented(state, target, entry["segmented"])
            state.restore(target.name, entry["consumed"], entry["completed"], entry["age"], entry["versions"])
        for name, rows in progress["requeue"].items():
            state.requeue(name, rows)
        if progress["closed"]:
            state.close()
        return state

    @classmethod
    def _from_state(cls, state: DockState, shards: int) -> RayDock:
        """A new RayDock holding a copy of ``state``'s data and progress."""
        with state.lock:
            progress = _progress(state)
            copy = cls(
                list(state.columns.values()),
                [],
                state.n_samples_per_prompt,
                shards=shards,
                max_age=state.max_age,
                **_versioning(state),
            )
            for consumer, limit in progress["limits"].items():
                copy.add_consumer(consumer, max_staleness=limit)
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
            _get(copy._controller.restore_progress.remote(progress))
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


def _progress(state: DockState) -> dict[str, Any]:
    """A dock's version, consumers' own staleness limits, expiry counters, the expired rows not yet handed
    back (left in place: peeking takes them and queues them again) and whether it is closed."""
    with state.lock:
        requeue = state.expired()
        for name, rows in requeue.items():
            state.requeue(name, rows)
        return {
            "version": state.version,
            "limits": state.consumer_limits,
            "expired": (state.expired_requeued, state.expired_dropped),
            "requeue": requeue,
            "closed": state.closed,
        }


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


def _gathered(
    objects: dict[int, dict[str, Any]], name: str, where: np.ndarray, position: np.ndarray
) -> np.ndarray | Packed:
    """Column ``name``'s rows in order, row ``i`` at ``position[i]`` of object ``where[i]``: a read-only
    view of the object when the rows lie end to end in one, else a copy."""
    first = int(where[0])
    if (where == first).all():
        value = objects[first][name]
        start = int(position[0])
        if (np.diff(position) == 1).all():
            return _read_only(value, start, start + len(position))
        return _subset(value, position)
    slots = np.unique(where)
    if not isinstance(objects[first][name], Packed):
        sample = objects[first][name]
        out = np.empty((len(where), *sample.shape[1:]), dtype=sample.dtype)
        for slot in slots:
            mine = where == slot
            out[mine] = objects[int(slot)][name][position[mine]]
        return out
    pieces, order = [], []
    for slot in slots:
        mine = np.flatnonzero(where == slot)
        pieces.append(take_rows(objects[int(slot)][name], position[mine]))
        order.append(mine)
    joined = Packed(np.concatenate([p.values for p in pieces]), np.concatenate([p.lengths for p in pieces]))
    return take_rows(joined, np.argsort(np.concatenate(order), kind="stable"))


def _read_only(value: np.ndarray | Packed, start: int, stop: int) -> np.ndarray | Packed:
    """Rows ``start:stop`` of an object's column, as a read-only view."""
    if isinstance(value, Packed):
        offsets = value.offsets
        view = value.values[offsets[start] : offsets[stop]]
        view.flags.writeable = False
        return Packed(view, value.lengths[start:stop])
    view = value[start:stop]
    view.flags.writeable = False
    return view


def _subset(value: np.ndarray | Packed, positions: np.ndarray) -> np.ndarray | Packed:
    return take_rows(value, positions) if isinstance(value, Packed) else value[positions]
