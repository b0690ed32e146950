"""The actors of a ``RayDock``: the controller (a ``DockState`` of metadata, and where each cell's data
lives in Ray's object store) and the shards that pin the objects; and the copying of a dock's
state between a ``DockState`` and them. See ``ray``'s module docstring for the design.

The controller trusts a request only if it is the frozen type ``DockBase`` built (``requests``):
its arguments were checked once, in the calling process. Requests and the controller's answers travel
as one pickled ``bytes`` each (``wire``): Ray serializes bytes as they are, while a dataclass of numpy
arrays costs it a pickle with one out-of-band buffer per array (about 0.2-0.3 ms more per call,
measured). Object refs never go inside those bytes: Ray must see them to count their borrowers.
"""

from __future__ import annotations

import pickle
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .._optional import require

try:
    import ray
except ImportError as missing:  # name the extra; an import that fails for another reason stays as it is
    require(missing.name or "ray", extra="ray", feature="tokenport.dock.ray (RayDock)")
    raise
from ..errors import ConfigError, CorruptStoreError, StorageError, TokenportError
from .arguments import Sampler
from .blob import unpack_columns
from .ragged import Packed, take_rows
from .ray_journal import CHANGING, Journal, recover
from .ray_replicas import REPAIR_PERIOD, Replicas, Shard
from .requests import AppendRequest, GetRequest, PutRequest, StateCall, trusted
from .schema import Column
from .state import DockState
from .storage import Partition

__all__ = [
    "Controller",
    "Placement",
    "Shard",
    "adopt_segmented",
    "dock_get",
    "progress_of",
    "opened",
    "ray_get",
    "segmented_data",
    "unwire",
    "versioning",
    "wire",
]


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


class Controller:
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
        replicas: int = 1,
    ) -> None:
        self.state = DockState(columns, consumers, n_samples_per_prompt, max_age=max_age, **versioning)
        self.samplers: dict[str, Sampler] = {}
        self.shards = shards
        self.cells: dict[str, _Cells] = {}
        self.short = False  # some objects have fewer copies than replicas after a failed repair
        # slot -> [refs of its copies, their (shard, incarnation) holders (none: pinned here, or the
        # producer's object pinned by a shard), cells referring to it, partition, put_id, the value pinned here]
        self.objects: dict[int, list[Any]] = {}
        self.next_slot = 0
        self.replicas = Replicas(shards, replicas) if replicas > 1 else None
        self.lost = 0  # objects whose every copy is gone (their rows raise StorageError when read)
        self.replaying = False
        self.journal = None if self.replicas is None else Journal(shards, [i for i, _ in self.replicas.known])
        if self.replicas is not None:
            recover(self, unwire)  # restarted: rebuilt from the journal the shards hold (new: its first entry)
            threading.Thread(target=self._repair_forever, daemon=True).start()

    def node(self) -> str:
        """The id of the node this controller runs on (a producer there has its objects pinned here)."""
        return str(ray.get_runtime_context().get_node_id())

    def schema(self) -> tuple[dict[str, Column], list[str], int, int | None, dict[str, Any]]:
        state = self.state
        return state.columns, state.consumers, state.n_samples_per_prompt, state.max_age, versioning(state)

    def call(self, message: Any, rid: str | None = None) -> bytes:
        """Run a call that carries no data on the state (``clear`` and ``drop_partition`` also release
        the objects of the partition's rows), or read one of its properties; the answer ``wire``d.
        ``rid``: the request's id (replicated docks: a changing call is journaled, see ``ray_journal``)."""
        (call,) = unwire(message, StateCall, 1)
        if call.method not in CHANGING:
            return wire(call.on(self.state))
        return self.once(rid, "call", message, lambda: self.apply("call", message))

    def restore(self, partition: str, *progress: Any, rid: str | None = None) -> None:
        """Set a copied partition's consumption, finished flags, ages and versions (``DockState.restore``)."""
        self.once(rid, "restore", (partition, *progress), lambda: self.state.restore(partition, *progress))

    def append(self, request: AppendRequest, rid: str | None = None) -> None:
        """Append a segment: segmented columns are held here (a turn's items are small)."""
        request = trusted(request, AppendRequest)
        self.once(rid, "append", request, lambda: self.apply("append", request))

    def once(self, rid: str | None, kind: str, payload: Any, change: Any) -> Any:
        """``change()``, journaled under ``rid`` before its answer is returned; a request id journaled before
        is answered as it was then, not applied again (unjournaled without a journal or a request id)."""
        if self.journal is None or rid is None:
            return change()
        with self.state.lock:
            if rid in self.journal.answers:
                return self.journal.answers[rid]
            answer = change()
            self.journal.write(rid, kind, payload, answer)
            return answer

    def apply(self, kind: str, payload: Any) -> Any:
        """Apply a journaled change (live, or replayed by ``recover``); its answer."""
        if kind == "call":
            (call,) = unwire(payload, StateCall, 1)
            if call.method in ("clear", "drop_partition"):
                self.forget(call.method, *call.args)
                return wire(None)
            return wire(call.on(self.state))
        if kind == "append":
            self.state.append(payload.partition, payload.row, payload.values, payload.version, payload.finished)
        elif kind == "restore":
            self.state.restore(*payload)
        elif kind == "restore_progress":
            self.restore_progress(payload)
        elif kind == "restore_segments":
            self.restore_segments(*payload)
        return None

    def held_objects(self) -> dict[str, int]:
        """Objects held and pinned (the shards are asked from here, so after every pin and release sent)."""
        pinned = sum(ray.get([shard.count.remote() for shard in self.shards]))
        with self.state.lock:
            here = sum(entry[5] is not None for entry in self.objects.values())
            return {"objects": len(self.objects), "pinned": pinned + here}

    def lost_objects(self) -> int:
        """Objects whose every copy is gone (counted by ``repair``)."""
        return self.lost

    def forget(self, method: str, partition: str) -> None:
        """``clear`` or ``drop_partition`` a partition, releasing the objects that held its rows."""
        with self.state.lock:
            getattr(self.state, method)(partition)
            self.cells.pop(partition, None)
            self._release([slot for slot, entry in self.objects.items() if entry[3] == partition])

    def commit(self, message: Any, boxed: list[Any]) -> None:
        """A put: ``message`` is ``wire(request less its data, ragged lengths, put_id, shard)``, its rows
        are in the object ``boxed[0]`` (a ref in a list, so Ray passes the ref, not the data). Shard -1:
        the producer runs on this node, so the object is pinned here, mapped zero-copy before anything is
        recorded; else shard ``shard`` pins it as ``put_id``. Check the put as ``Dock.put`` does, record
        where its cells live, make the cells ready."""
        request, lengths, put_id, shard = unwire(message, PutRequest, 4)
        if type(shard) is not int or not -1 <= shard < len(self.shards):
            raise ConfigError(f"RayDock: shard {shard!r} is not one of this dock's {len(self.shards)} shards")
        held = ray.get(boxed[0]) if shard < 0 else None  # no lock held: a local map, no bytes move
        self._record(request, lengths, put_id, [boxed[0]], [] if shard < 0 else [(shard, "")], held)

    def commit_copies(self, message: Any, boxed: list[Any], rid: str | None = None) -> None:
        """A put with replicas (see ``ray_replicas``): ``message`` is ``wire(request less its data, ragged
        lengths, put_id, key)``. Checked first, then copied onto the replicas' shards, then checked again
        and recorded (journaled under ``rid``); refused or failed, no shard keeps a copy."""
        request, lengths, put_id, key = unwire(message, PutRequest, 4)
        if self.replicas is None or self.journal is None or type(key) is not int:
            raise ConfigError("RayDock: a replicated commit sent to a dock without replicas")
        if rid is not None and rid in self.journal.answers:
            return
        self.state.check_put(request.partition, list(request.names), request.ids, request.overwrite, request.versions)
        shards = self.replicas.choose(key, [], self.replicas.count)
        refs, holders = self.replicas.hold(put_id, boxed, shards)
        try:
            record = lambda: self._record(request, lengths, put_id, refs, holders, None)  # noqa: E731
            self.once(rid, "put", (message, holders), record)
        except BaseException:
            self.replicas.release(put_id, holders)
            raise

    def _record(
        self, request: PutRequest, lengths: Any, put_id: str, refs: list[Any], holders: list[Any], held: Any
    ) -> None:
        """Check the put (again) and, under one lock, record where its cells live and make them ready."""
        partition, names, ids = request.partition, list(request.names), request.ids
        state = self.state
        with state.lock:
            target = state.check_put(partition, names, ids, request.overwrite, request.versions)
            cells = self.cells.get(partition)
            if cells is None or cells.rows != target.rows:
                cells = self.cells[partition] = _Cells(target.rows)
            slot, self.next_slot = self.next_slot, self.next_slot + 1
            self.objects[slot] = [refs, holders, len(ids) * len(names), partition, put_id, held]
            replaced = []
            for name in names:
                where, position = cells.of(name)
                replaced.append(where[ids])
                where[ids] = slot
                position[ids] = np.arange(len(ids))
            self._drop_cells(np.concatenate(replaced))
            for name, row_lengths in lengths.items():
                target.record_lengths(state.column(name), ids, row_lengths)
            state.mark_ready(target, names, ids, request.finished, request.versions, request.overwrite)

    def repair(self) -> int:
        """Copy again, from a surviving copy onto other shards, every object a restarted shard held; the copies
        made. An object with no copy left is counted in ``lost``."""
        replicas = self.replicas
        if replicas is None or self.journal is None or not (replicas.refresh() or self.short):
            return 0
        with self.state.lock:  # a restarted shard is sent the whole journal
            self.journal.send_all([incarnation for incarnation, _ in replicas.known])
        with self.state.lock:
            todo = []
            for slot, entry in self.objects.items():
                alive = [i for i, holder in enumerate(entry[1]) if replicas.alive(holder)]
                if len(alive) < len(entry[1]):
                    entry[0][:] = [entry[0][i] for i in alive]
                    entry[1][:] = [entry[1][i] for i in alive]
                    self.lost += not alive
                if 0 < len(alive) < replicas.count:
                    todo.append((slot, entry[4], entry[0][0], [s for s, _ in entry[1]]))
        self.short = False
        made = 0
        for slot, put_id, source, holding in todo:
            shards = replicas.choose(slot, holding, replicas.count - len(holding))
            try:
                refs, holders = replicas.hold(put_id, [source], shards)
            except StorageError:
                self.short = True  # tried again next time
                continue
            with self.state.lock:
                kept = self.objects.get(slot)
                if kept is None:  # released meanwhile
                    replicas.release(put_id, holders)
                    continue
                kept[0].extend(refs)
                kept[1].extend(holders)
            made += len(refs)
        return made

    def _repair_forever(self) -> None:
        """The controller's repair thread (replicated docks): ``repair`` every ``REPAIR_PERIOD`` seconds."""
        while True:
            time.sleep(REPAIR_PERIOD)
            try:
                self.repair()
            except ray.exceptions.RayError:  # a shard call failed mid-repair: the next round starts over
                self.short = True

    def snapshot(self) -> list[dict[str, Any]]:
        """Per partition: name, rows, the bits (readiness, consumption, finished, age, versions), where
        each ready cell lives (``Placement``) and the segmented columns' data."""
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
                    "segmented": segmented_data(self.state, p),
                }
                for p in self.state.each_partition()
            ]

    def _stored_columns(self, target: Partition) -> list[str]:
        """The columns with ready rows whose data lives in the object store (not segmented)."""
        return [n for n, r in target.ready.items() if r.any() and not self.state.column(n).segmented]

    def progress(self) -> dict[str, Any]:
        """What a copy needs besides the partitions (``progress_of`` the state)."""
        return progress_of(self.state)

    def restore_progress(self, progress: dict[str, Any], rid: str | None = None) -> None:
        """Take a copied dock's expiry counters and the expired rows it had not handed back yet."""
        if rid is not None:
            self.once(rid, "restore_progress", progress, lambda: self.restore_progress(progress))
            return
        with self.state.lock:
            self.state.expired_requeued, self.state.expired_dropped = progress["expired"]
            for name, rows in progress["requeue"].items():
                self.state.requeue(name, rows)

    def restore_segments(self, partition: str, segmented: dict[str, Any], rid: str | None = None) -> None:
        """Hold a copied partition's segmented columns (data, readiness, segment table) as they were."""
        if rid is not None:
            again = (partition, segmented)
            self.once(rid, "restore_segments", again, lambda: self.restore_segments(*again))
            return
        with self.state.lock:
            adopt_segmented(self.state, self.state.partition(partition), segmented)

    def take(self, message: Any, rid: str | None = None) -> tuple[bytes, list[Any]] | None:
        """Choose and claim rows as ``Dock.get`` does; ``message`` is ``wire(request, sampler_key,
        sampler)`` (the request's sampler: the one registered under ``sampler_key``, sent now or
        earlier). The answer: ``wire(partition, rows, lease id, ages, (oldest, newest versions),
        segmented columns' data (held here), (segment counts, segment versions) or None, where the
        other columns' cells live (``Placement.columns``), the objects' slots)`` and the objects' refs;
        or None. Journaled under ``rid`` (the rows claimed and the lease id): sent again, the same rows."""
        request, sampler_key, sampler = unwire(message, GetRequest, 3)
        state = self.state
        with state.lock:
            if sampler is not None and sampler_key is not None:
                if self.journal is not None and rid is not None and sampler_key not in self.samplers:
                    self.journal.write(rid + "/sampler", "sampler", message, None)  # a restart keeps it
                self.samplers[sampler_key] = sampler
            request = replace(request, sampler=self.samplers.get(sampler_key) if sampler_key else None)
            wanted = list(request.columns)
            if self.journal is not None and rid is not None and rid in self.journal.answers:
                if (answered := self.journal.answers[rid]) is None:
                    return None
                name, give, lease_id = answered
                return self._answer(state.partition(name), give, lease_id, wanted)
            taken = state.take(request)
            if taken is not None:
                state.served(request.consumer, state.batch_bytes(taken[0], wanted, taken[1]))
            if self.journal is not None and rid is not None and taken is not None:
                answer = None if taken is None else (taken[0].name, taken[1], taken[2])
                lease = None if taken is None or taken[2] is None else (taken[2], time.time() + (request.lease or 0))
                claim = None if taken is None else (taken[0].name, taken[1], state.last_consumed, lease)
                self.journal.write(rid, "take", (message, request.consumer, claim), answer)
            return None if taken is None else self._answer(*taken, wanted)

    def _answer(self, target: Partition, give: np.ndarray, lease_id: int | None, wanted: list[str]) -> Any:
        """A get's answer (see ``take``) for rows ``give`` of ``target``."""
        state = self.state
        with state.lock:
            ages = target.age[give]
            versions = (target.version_first[give], target.version_last[give])
            segmented = [name for name in wanted if state.column(name).segmented]
            held = {name: target.read(state.column(name), give) for name in segmented}  # the controller's own
            segments = target.segments_of(give) if segmented else None
            stored = [name for name in wanted if name not in held]
            p = self._placement(target, stored, give)
        return wire(target.name, give, lease_id, ages, versions, held, segments, p.columns, p.slots), p.refs

    def _placement(self, target: Partition, names: list[str], give: np.ndarray | None = None) -> Placement:
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
        return Placement(columns, slots, [list(self.objects[slot][0]) for slot in slots])

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
            _, holders, _, _, put_id, _ = self.objects.pop(slot)  # pinned here: dropped with the entry
            for shard, _ in holders:
                by_shard.setdefault(shard, []).append(put_id)
        for shard, released in by_shard.items():
            if not self.replaying:  # replayed: released already, or dropped by ray_journal.recover
                self.shards[shard].release.remote(released)


@dataclass(frozen=True)
class Placement:
    """Where a get's (or a snapshot's) cells live: per column ``(rows, object slots, positions)``, and
    per slot the refs of its object's copies (read in order: the next when one is gone)."""

    columns: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]
    slots: list[int]
    refs: list[Any]

    def gather(self, partition: str) -> dict[str, np.ndarray | Packed]:
        """Read the objects out of the object store (all at once, zero-copy) and gather each column's rows."""
        try:
            found = ray.get([copies[0] for copies in self.refs]) if all(self.refs) else None
        except ray.exceptions.ObjectLostError:
            found = None
        if found is None:  # a copy is gone: read the next of each object (none left: a StorageError)
            found = [_any_copy(copies, partition) for copies in self.refs]
        objects = {slot: unpack_columns(*stored) for slot, stored in zip(self.slots, found)}
        return {name: _gathered(objects, name, where, position) for name, (_, where, position) in self.columns.items()}


def segmented_data(state: DockState, partition: Partition) -> dict[str, Any]:
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


def adopt_segmented(state: DockState, target: Partition, segmented: dict[str, Any]) -> None:
    """Write ``segmented_data``'s columns and segment table into ``target`` (a copy of their partition)."""
    for name, (ids, values) in segmented["columns"].items():
        target.write(state.column(name), ids, values)
        target.ready_of(name)[ids] = True
    target.segments.update({row: list(pairs) for row, pairs in segmented["segments"].items()})
    target.segment_columns.update(segmented["segment_columns"])


def progress_of(state: DockState) -> dict[str, Any]:
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


def versioning(state: DockState) -> dict[str, Any]:
    """A dock's staleness and admission settings, as DockState's keyword arguments."""
    return {
        "max_staleness": state.max_staleness,
        "on_stale": state.on_stale,
        "max_inflight_versions": state.max_inflight_versions,
    }


def wire(*values: Any, by_value: bool = False) -> bytes:
    """``values`` as one pickled bytes object (see the module docstring). ``by_value``: with cloudpickle,
    for values that may be a caller's own (a sampler, a state call's arguments) defined in a script the
    actor cannot import; plain pickle (twice as fast) for tokenport's own types and numpy."""
    if by_value:
        return bytes(ray.cloudpickle.dumps(values, protocol=5))
    return pickle.dumps(values, protocol=5)


def opened(answer: bytes) -> tuple[Any, ...]:
    """The values of a controller's ``wire``d answer (RayDock's own actor: trusted)."""
    return tuple(pickle.loads(answer))


def unwire(message: Any, kind: type, count: int) -> tuple[Any, ...]:
    """The ``count`` values ``wire`` packed into ``message``, the first a trusted ``kind``; anything
    else (not bytes, not a tuple of that size) is a ConfigError and nothing is done."""
    try:
        values = pickle.loads(message) if isinstance(message, bytes) else None
    except Exception:  # noqa: BLE001  (any unpickling failure means: not a message RayDock sent)
        values = None
    if type(values) is not tuple or len(values) != count:
        trusted(message, kind)  # the message itself is no request: refused with trusted's reason
        raise ConfigError(f"dock backend: expected a {kind.__name__} in a message RayDock sent")
    trusted(values[0], kind)
    return values


def ray_get(refs: Any) -> Any:
    """``ray.get``, re-raising a TokenportError raised inside an actor as itself."""
    try:
        return ray.get(refs)
    except ray.exceptions.RayTaskError as error:
        cause = getattr(error, "cause", None)
        if isinstance(cause, TokenportError):
            raise cause from None
        raise


def dock_get(refs: Any) -> Any:
    """``ray_get`` of a RayDock's own actor calls: a dead controller (or shard) is a StorageError saying what to do."""
    try:
        return ray_get(refs)
    except ray.exceptions.RayActorError as error:
        raise StorageError(
            f"RayDock: an actor of this dock died ({type(error).__name__}: {str(error).splitlines()[0]}). A dead "
            "controller takes the dock's progress with it: restore the dock from its last checkpoint "
            "(RayDock.load) and put the rows produced since again"
        ) from None


def _any_copy(copies: list[Any], partition: str) -> Any:
    """The first of an object's copies still there, or a StorageError when every one is gone."""
    reason = "no copy left"
    for copy in copies:
        try:
            return ray.get(copy)
        except ray.exceptions.ObjectLostError as lost:
            reason = type(lost).__name__
    raise StorageError(
        f"RayDock: partition {partition!r}: every copy of an object holding rows of this batch is lost (its "
        f"producer exited before the dock pinned it, or the nodes holding it are gone): {reason}. Put those "
        "rows again (clear or overwrite them)"
    ) from None


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
