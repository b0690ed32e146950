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

Ray frees an object when its owner, the process that put it, exits. So each put's object is
pinned (mapped and held) by another process, sent with the commit and waited on with it: once
``put`` returns, the rows outlive their producer (a finished task, a killed rollout worker). A
producer on the controller's node has the controller pin it, inside the commit: the same shared
memory, no bytes move, and a put is one actor call. A producer on another node has one of K shard
actors (``shards``) pin it, sent at once with the commit: the shard's map moves the bytes to the
shard's node, so the controller's node never receives data, and K shards spread that load. The
controller releases an object once no cell refers to it (overwritten everywhere, or its partition
cleared or dropped); a release that overtakes a shard's pin is remembered, so the pin that follows is
dropped. Across nodes, rows whose object's owner is gone raise a StorageError when read (Ray fetches
objects through their owner).

``RayDock`` is a ``DockBase`` backend (``Dock``'s methods, ``aput``/``aget`` and byte counts in
``stats`` included) and is picklable: pass it to any task or actor, which then talks to the same
controller. The base builds each call's request in the calling process, checked once with
``Dock``'s own code before any actor call; the actors receive the request itself, pickled into one
bytes object (``ray_controller.wire``),
the controller is the same ``DockState``, and errors raised in the actors reach the caller as the
same TokenportError, so a bad call fails as it fails on a ``Dock``. Concurrent puts of the same
cells without ``overwrite`` are a caller bug: one of them fails, and the cells hold one of the two
writes. Segmented columns (rows appended turn by
turn) are held by the controller itself: a turn's items are small.

Faults (``replicas=2``; see ``ray_replicas``). With one copy, a committed row lives as long as its
producer's object and the one process pinning it: a node's death loses the rows on it. With
``replicas=R`` the producer's object is only staged: the commit has R shards on R nodes (where the
cluster has them; ``shard_nodes`` places the shards, otherwise Ray spreads them) each copy it into an
object of its own, and records the put only once every copy is taken. A dead shard or node takes its
copies; gets read the next copy at once, the restarted shard comes back empty, and the controller
copies each object it held again from a survivor (every row served and every object held twice
again about 2 s after a shard's death and 3.5 s after a node's, on the loaded 2-core test machine:
``benchmarks/bench_dock_recovery.py``). Two copies survive one failure at a time; a second failure
before the repair can lose rows whose copies it both hit (``lost_objects``; R=3 survives two). Cost:
R times the object-store memory and, per put, R fetches and copies on the shards before the commit
returns (``bench_dock_recovery``: put p50 about 2x replicas=1's on the 2-core test machine); gets
are unchanged. A producer killed between staging and commit leaves nothing: its object dies with it,
and a commit whose copies cannot all be taken is refused whole.

The controller (``replicas=R >= 2``; see ``ray_journal``) is a restartable actor with a write-ahead journal
on the shards: every call that changes its state carries a request id and is journaled on every shard
before it answers (a put: the shards holding its copies; a get: the rows it claimed and the lease id).
Restarted (its process killed, or its node), it replays the journal, finds each put's copies on the shards
and serves on: a call its death interrupted is sent again by the client with the same request id and is
answered from the journal, never applied twice, so no committed row is lost and none is served twice to
a consumer (rows leased and not acked come back after the lease, as always). The journal lives while one
shard that received it does. Cost: one more round trip to the R shards per changing call (``put``/``get``
p50: see BENCHMARKS.md) and the journal's memory (the requests without their data) for the dock's
lifetime. With one copy, or when the controller is killed for good, every call is a StorageError and the
dock is restored from its last checkpoint (``save``/``load``) with the rows put since then put again.
The controller runs on the node of the process that created the dock, and its actors share that
process's fate.
"""

from __future__ import annotations

import os
import uuid
import weakref
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from .._optional import require

try:
    import ray
except ImportError as missing:  # name the extra; an import that fails for another reason stays as it is
    require(missing.name or "ray", extra="ray", feature="tokenport.dock.ray (RayDock)")
    raise
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from .._checks import check_int
from .._files import KillPoints
from ..errors import ConfigError
from .arguments import Sampler
from .base import DockBase
from .batch import Batch
from .blob import pack_columns
from .checkpoint import load_state, save_state
from .dock import Dock
from .ray_controller import (
    Controller,
    Placement,
    Shard,
    adopt_segmented,
    dock_get,
    opened,
    progress_of,
    ray_get,
    segmented_data,
    versioning,
    wire,
)
from .ray_journal import CHANGING, call_again
from .ray_replicas import SHARD_GROUPS
from .requests import AppendRequest, GetRequest, PutRequest, StateCall
from .schema import Column
from .state import DockState
from .storage import Partition

__all__ = ["RayDock"]

_CONTROLLER_THREADS = 256  # concurrent controller calls; a waiting get holds one
_LOCAL = ("n_samples_per_prompt", "max_age")  # fixed at creation: answered without an actor call
_get = ray_get  # the name transferqueue_ray imports
_remote: Any = ray.remote  # typed loosely: its options (max_concurrency) are not in its overloads
KILL_AT = "TOKENPORT_DOCK_KILL_AT"  # tests: a replicated put ends its process at this step (1: staged, 2: sent)
_kill_point = KillPoints(KILL_AT)
CONTROLLER_OPTIONS: dict[str, Any] = {}  # tests: more options of the controller actor (a kill point's environment)


class RayDock(DockBase):
    """A ``DockBase`` over a controller actor and ``shards`` storage actors (see the module docstring).

    ``ray.init`` must have run. ``shutdown()`` kills the actors; workers that received this
    object through Ray share the same dock. ``replicas=R`` (at most ``shards``) keeps each put on R
    shards on distinct nodes so a shard's or node's death loses no committed row; ``shard_nodes``
    names the node each shard prefers (one node id per shard).
    """

    def __init__(
        self,
        columns: Sequence[Column],
        consumers: Sequence[str],
        n_samples_per_prompt: int = 1,
        *,
        shards: int = 1,
        replicas: int = 1,
        shard_nodes: Sequence[str] | None = None,
        max_age: int | None = None,
        max_staleness: int | None = None,
        on_stale: str = "requeue",
        max_inflight_versions: int | None = None,
    ) -> None:
        shards = check_int("shards", shards)
        replicas = check_int("replicas", replicas)
        if replicas > 1 and replicas > shards:
            raise ConfigError(
                f"RayDock: replicas={replicas} needs at least as many shards (shards={shards}): each copy of a "
                "put is held by another shard"
            )
        columns, consumers = list(columns), list(consumers)
        settings: dict[str, Any] = {
            "max_staleness": max_staleness,
            "on_stale": on_stale,
            "max_inflight_versions": max_inflight_versions,
        }
        DockState(columns, consumers, n_samples_per_prompt, max_age=max_age, **settings)  # the checks, before any actor
        self._shards = [_remote(**options)(Shard).remote() for options in _shard_options(shards, shard_nodes)]
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)  # the creator's node
        restarts = -1 if replicas > 1 else 0  # replicated: restarted from its journal (ray_journal)
        options = {"max_concurrency": _CONTROLLER_THREADS, "scheduling_strategy": here, "max_restarts": restarts}
        options.update(CONTROLLER_OPTIONS)
        self._controller = _remote(**options)(Controller).remote(
            columns, consumers, n_samples_per_prompt, max_age, self._shards, settings, replicas
        )
        self._replicas = replicas
        self._controller_node: str = self._ask("node")
        self._local: bool | None = None  # whether this process runs on the controller's node (asked once)
        self._columns = {column.name: column for column in columns}
        self._n_samples_per_prompt = int(n_samples_per_prompt)
        self._max_age = None if max_age is None else int(max_age)
        self._sampler_keys: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_sampler_keys"]  # samplers registered here stay with this process
        state["_local"] = None  # the receiving process may run on another node
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._sampler_keys = weakref.WeakKeyDictionary()

    # -- the primitives (DockBase) --------------------------------------------------------------------

    def column_of(self, name: str) -> Column:
        """The column ``name`` (learning columns another client added since this one was made)."""
        if name not in self._columns:
            self._columns = self._ask("schema")[0]
        try:
            return self._columns[name]
        except (KeyError, TypeError):
            raise ConfigError(f"unknown column {name!r}; the dock has {list(self._columns)}") from None

    def handle_call(self, call: StateCall) -> Any:
        if call.method in _LOCAL:
            return getattr(self, "_" + call.method)
        (result,) = opened(self._ask("call", wire(call, by_value=True), changes=call.method in CHANGING))
        if call.method == "add_column":
            column = call.args[0]
            self._columns[column.name] = column
        elif call.method == "columns":
            self._columns = dict(result)
        return result

    def handle_put(self, request: PutRequest) -> None:
        """The rows written into the object store here, then the commit to the controller, which pins the
        object itself when this process runs on its node (no bytes move), else the pin to a shard sent at
        once with the commit; one wait."""
        stored = [ray.put(pack_columns(dict(request.values)))]  # one buffer (see blob.py); a list passes the ref itself
        put_id = uuid.uuid4().hex
        shard = int(request.ids[0] // self._n_samples_per_prompt) % len(self._shards)
        if self._replicas > 1:  # staged here; the controller has the shards copy it (see ray_replicas)
            _kill_point()
            message, rid = wire(request.without_values(), request.lengths, put_id, shard), uuid.uuid4().hex
            commit = self._controller.commit_copies.remote(message, stored, rid)
            _kill_point()
            call_again(lambda: self._controller.commit_copies.remote(message, stored, rid), commit)
            return
        shard = -1 if self._on_controller_node() else shard
        pinned = None if shard < 0 else self._shards[shard].pin.remote(put_id, stored)
        commit = self._controller.commit.remote(wire(request.without_values(), request.lengths, put_id, shard), stored)
        try:
            dock_get([commit] if pinned is None else [commit, pinned])
        except BaseException:
            if pinned is not None and _refused(commit):
                self._shards[shard].release.remote([put_id])  # nothing refers to the object
            raise

    def handle_append(self, request: AppendRequest) -> None:
        """The segment goes to the controller, which holds segmented columns itself (a turn's items are
        small; they are not spread over the shards)."""
        self._ask("append", request, changes=True)

    def handle_get(self, request: GetRequest) -> Batch | None:
        """One controller call chooses the rows and says which objects hold them; the objects are read
        here, together, zero-copy out of the object store."""
        key, send = self._sampler_key(request.sampler)
        message = wire(replace(request, sampler=None), key, send, by_value=send is not None)
        taken = self._ask("take", message, changes=True)
        if taken is None:
            return None
        name, give, lease_id, ages, (first, last), held, segments, columns, slots = opened(taken[0])
        data = Placement(columns, slots, taken[1]).gather(name)
        data = {column: held[column] if column in held else data[column] for column in request.columns}
        counts, versions = (None, None) if segments is None else segments
        return Batch(name, give, data, lease_id, self._n_samples_per_prompt, ages, first, last, counts, versions)

    def handle_save(self, directory: str | os.PathLike[str]) -> None:
        """``Dock.save``'s format (the data passes through this process)."""
        save_state(self._copy_state(), directory)

    # -- Ray's own -----------------------------------------------------------------------------------

    def held_objects(self) -> dict[str, int]:
        """How many objects of Ray's object store hold this dock's rows (``objects``) and how many copies its
        shards pin or hold (``pinned``: ``replicas`` times ``objects`` once their calls have run and every lost
        copy is made again): what the dock keeps in shared memory."""
        return self._ask("held_objects")

    def lost_objects(self) -> int:
        """How many objects lost every copy (replicated docks; their rows raise StorageError when read)."""
        return int(self._ask("lost_objects"))

    @classmethod
    def load(cls, directory: str | os.PathLike[str], *, shards: int = 1, replicas: int = 1) -> RayDock:
        """A new RayDock (``shards`` data actors, ``replicas`` copies of each put) in the state saved there."""
        return cls._from_state(load_state(directory), shards, replicas)

    def to_dock(self) -> Dock:
        """An in-process copy of this dock's data and progress (leases returned, stats reset)."""
        return Dock.from_state(self._copy_state())

    @classmethod
    def from_dock(cls, dock: Dock, *, shards: int = 1, replicas: int = 1) -> RayDock:
        """A new RayDock holding a copy of an in-process dock's data and progress."""
        return cls._from_state(dock.state, shards, replicas)

    def shutdown(self) -> None:
        """Kill the controller and the shards (the dock's data is gone)."""
        for actor in (self._controller, *self._shards):
            ray.kill(actor)

    # -- internals ----------------------------------------------------------------------------------

    def _copy_state(self) -> DockState:
        """This dock's data and progress gathered from the controller and the shards into one state."""
        columns, _, n_samples_per_prompt, max_age, settings = self._ask("schema")
        state = DockState(list(columns.values()), [], n_samples_per_prompt, max_age=max_age, **settings)
        progress = self._ask("progress")
        for consumer, limit in progress["limits"].items():
            state.add_consumer(consumer, limit)
        state.version = progress["version"]
        state.expired_requeued, state.expired_dropped = progress["expired"]
        for entry in self._ask("snapshot"):
            target = state.adopt(Partition(entry["name"], entry["rows"]))
            placement = entry["placement"]
            for column, values in placement.gather(target.name).items():
                ids = placement.columns[column][0]
                target.write(columns[column], ids, values)
                target.ready_of(column)[ids] = True
            adopt_segmented(state, target, entry["segmented"])
            state.restore(target.name, entry["consumed"], entry["completed"], entry["age"], entry["versions"])
        for name, rows in progress["requeue"].items():
            state.requeue(name, rows)
        if progress["closed"]:
            state.close()
        return state

    @classmethod
    def _from_state(cls, state: DockState, shards: int, replicas: int = 1) -> RayDock:
        """A new RayDock holding a copy of ``state``'s data and progress."""
        with state.lock:
            progress = progress_of(state)
            copy = cls(
                list(state.columns.values()),
                [],
                state.n_samples_per_prompt,
                shards=shards,
                replicas=replicas,
                max_age=state.max_age,
                **versioning(state),
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
                segmented = segmented_data(state, partition)
                if segmented["columns"]:
                    copy._ask("restore_segments", partition.name, segmented, changes=True)
                spans = (partition.version_first, partition.version_last)
                args = (partition.name, dict(partition.consumed), partition.completed, partition.age, spans)
                copy._ask("restore", *args, changes=True, keyword=True)
            copy._ask("restore_progress", progress, changes=True)
            if state.closed:
                copy.close()
        return copy

    def _ask(self, method: str, *args: Any, changes: bool = False, keyword: bool = False) -> Any:
        """The controller's answer to ``method(*args)``. Replicated: a changing call carries a new request id
        (by keyword when ``keyword``), and a call the controller's death interrupted is sent again, the same
        request, to the restarted controller (``ray_journal``); else its death is a StorageError."""
        remote = getattr(self._controller, method).remote
        if self._replicas == 1:
            return dock_get(remote(*args))
        rid = uuid.uuid4().hex if changes else None
        if rid is None:
            return call_again(lambda: remote(*args))
        return call_again(lambda: remote(*args, rid=rid) if keyword else remote(*args, rid))

    def _on_controller_node(self) -> bool:
        """Whether this process runs on the controller's node (then the controller pins its puts)."""
        if self._local is None:
            self._local = str(ray.get_runtime_context().get_node_id()) == self._controller_node
        return self._local

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


def _shard_options(shards: int, nodes: Sequence[str] | None) -> list[dict[str, Any]]:
    """Each shard's actor options: restartable (a restarted shard holds nothing: see ``ray_replicas``), its
    calls retried, spread over the nodes or on ``nodes[i]`` while that node lives (then elsewhere)."""
    if nodes is not None and (isinstance(nodes, str) or not all(isinstance(node, str) for node in nodes)):
        raise ConfigError(
            f"RayDock: shard_nodes={nodes!r} is invalid: pass a list of node ids (strings), one per shard"
        )
    if nodes is not None and len(nodes) != shards:
        raise ConfigError(f"RayDock: shard_nodes names {len(nodes)} nodes for {shards} shards: name one per shard")
    spread: list[Any] = (
        ["SPREAD"] * shards if nodes is None else [NodeAffinitySchedulingStrategy(n, soft=True) for n in nodes]
    )
    common = {"max_restarts": -1, "max_task_retries": -1, "concurrency_groups": SHARD_GROUPS}
    return [{**common, "scheduling_strategy": s} for s in spread]


def _refused(commit: Any) -> bool:
    """Whether a finished commit call failed (a commit still running, after an interrupt, counts as not:
    its object is left pinned rather than released while the controller may refer to it)."""
    if not ray.wait([commit], timeout=0)[0]:
        return False
    try:
        ray.get(commit)
    except Exception:  # noqa: BLE001  (any failure: the controller recorded nothing)
        return True
    return False
