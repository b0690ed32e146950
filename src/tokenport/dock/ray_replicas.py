"""A ``RayDock``'s shards, and its rows held twice: each committed object owned by two shards on two nodes.

Ray frees an object when its owner dies, and a copy pinned by a process lives on that process's node.
So with ``replicas=R`` (R >= 2) the controller has R shards on different nodes (as far as the cluster
allows) each take its own copy of a put's object (``Shard.hold``: fetch it, ``ray.put`` it again:
the shard owns the copy, on its node) before the commit is recorded; the producer's object was only
staged. A shard or its node dies: its copies are gone, the other copies are not. Shards are
restartable actors whose calls Ray retries; a restarted shard has a new incarnation, and the
controller (``Replicas.refresh``, every ``REPAIR_PERIOD`` s) copies each object it held again from a
surviving copy onto another shard. Readers fall back to the next copy while that runs.
Cost: R times the object-store memory, and each put waits for R fetches and copies on the shards.
"""

from __future__ import annotations

import uuid
from typing import Any

from .._optional import require

try:
    import ray
except ImportError as missing:  # name the extra; an import that fails for another reason stays as it is
    require(missing.name or "ray", extra="ray", feature="tokenport.dock.ray (RayDock)")
    raise
from ..errors import StorageError

__all__ = ["REPAIR_PERIOD", "SHARD_GROUPS", "Replicas", "Shard"]

REPAIR_PERIOD = 0.5  # seconds between the controller's checks for restarted shards
SHARD_GROUPS = {"journal": 1}  # a shard's journal calls run on a thread of their own (ray_journal)
_ASK_TIMEOUT = 2.0  # a shard that does not answer who it is within this is being restarted: asked again later


class Shard:
    """Holds objects of the object store so they outlive the producers that put them: pinned (a map of the
    producer's object) or held (a copy this shard put itself, so it owns it and it lives on its node)."""

    def __init__(self) -> None:
        self.pinned: dict[str, Any] = {}
        self.released: set[str] = set()  # released before their pin arrived (another caller's call)
        self.incarnation = uuid.uuid4().hex  # a restarted shard is a new process: its copies are gone
        self.entries: dict[int, bytes] = {}  # the controller's journal (see ray_journal)

    def pin(self, put_id: str, boxed: list[Any]) -> None:
        """Map the object (zero-copy) and keep it, unless it was released already."""
        if put_id in self.released:
            self.released.discard(put_id)
            return
        self.pinned[put_id] = ray.get(boxed[0])

    def hold(self, put_id: str, boxed: list[Any]) -> tuple[list[Any], str, str]:
        """Copy the object into one this shard owns and keep it: the copy's ref (in a list, so Ray passes
        the ref), this shard's incarnation and node."""
        value = ray.get(boxed[0])
        self.pinned[put_id] = copy = ray.put(value)
        return [copy], *self.identity()

    def identity(self) -> tuple[str, str]:
        """This process's incarnation and the node it runs on."""
        return self.incarnation, str(ray.get_runtime_context().get_node_id())

    def release(self, put_ids: list[str]) -> None:
        for put_id in put_ids:
            if self.pinned.pop(put_id, None) is None:
                self.released.add(put_id)

    @ray.method(concurrency_group="journal")  # not queued behind copies
    def note(self, number: int, entry: bytes) -> None:
        """Keep entry ``number`` of the controller's journal."""
        self.entries[number] = entry

    @ray.method(concurrency_group="journal")  # not queued behind copies
    def note_all(self, entries: dict[int, bytes]) -> None:
        """Keep these entries of the controller's journal (a restarted shard is sent the whole of it)."""
        self.entries.update(entries)

    @ray.method(concurrency_group="journal")  # not queued behind copies
    def journal(self) -> dict[int, bytes]:
        """The controller's journal as this shard holds it."""
        return self.entries

    def copies(self) -> dict[str, list[Any]]:
        """The copies this shard holds (``hold``), by put id: each ref in a list (a restarted controller's)."""
        return {put_id: [value] for put_id, value in self.pinned.items() if isinstance(value, ray.ObjectRef)}

    def retain(self, put_ids: list[str]) -> None:
        """Drop the copies of puts not among ``put_ids`` (commits a dead controller never recorded)."""
        keep = set(put_ids)
        self.pinned = {put_id: value for put_id, value in self.pinned.items() if put_id in keep}

    def count(self) -> int:
        """How many objects this shard pins or holds."""
        return len(self.pinned)


class Replicas:
    """The controller's view of its shards (incarnation and node of each) and the choice of the R shards,
    on distinct nodes where there are enough, that hold a new object or a lost copy again."""

    def __init__(self, shards: list[Any], count: int) -> None:
        self.shards = shards
        self.count = count
        self.known: list[tuple[str, str]] = list(ray.get([shard.identity.remote() for shard in shards]))
        self.restarted = False  # a hold met a restarted shard: the next refresh reports it

    def choose(self, key: int, avoid: list[int], wanted: int) -> list[int]:
        """``wanted`` shards for an object (starting at ``key``), none of ``avoid``, on nodes none of ``avoid``
        runs on and distinct from each other while such shards remain."""
        order = [(key + i) % len(self.shards) for i in range(len(self.shards))]
        chosen: list[int] = []
        nodes = {self.known[s][1] for s in avoid}
        for distinct in (True, False):
            for s in order:
                if len(chosen) < wanted and s not in chosen and s not in avoid:
                    if not distinct or self.known[s][1] not in nodes:
                        chosen.append(s)
                        nodes.add(self.known[s][1])
        return chosen

    def hold(self, put_id: str, boxed: list[Any], shards: list[int]) -> tuple[list[Any], list[tuple[int, str]]]:
        """Have ``shards`` each hold a copy of the object: the copies' refs and (shard, incarnation) each.
        Any failure (the object is gone, a shard cannot be restarted) releases the copies taken and is a
        StorageError: nothing is held."""
        calls = [self.shards[s].hold.remote(put_id, boxed) for s in shards]
        refs, holders, failure = [], [], None
        for s, call in zip(shards, calls):
            try:
                (copy,), incarnation, node = ray.get(call)
            except ray.exceptions.RayError as error:
                failure = error
                continue
            self.restarted |= self.known[s][0] != incarnation
            self.known[s] = (incarnation, node)
            refs.append(copy)
            holders.append((s, incarnation))
        if failure is not None:
            self.release(put_id, holders)
            raise StorageError(
                f"RayDock: the put's rows could not be copied onto the shards ({type(failure).__name__}: the "
                "producer's object is gone or a shard is down); nothing was committed: put them again"
            ) from None
        return refs, holders

    def release(self, put_id: str, holders: list[tuple[int, str]]) -> None:
        for s, _ in holders:
            self.shards[s].release.remote([put_id])

    def refresh(self) -> bool:
        """Ask every shard who it is now; whether one was restarted since (its copies are gone). A shard that
        does not answer in time is being restarted: asked again next time."""
        calls = [shard.identity.remote() for shard in self.shards]
        changed, self.restarted = self.restarted, False
        for s, call in enumerate(calls):
            try:
                answer = ray.get(call, timeout=_ASK_TIMEOUT)
            except ray.exceptions.RayError:
                continue
            changed |= answer[0] != self.known[s][0]
            self.known[s] = answer
        return changed

    def alive(self, holder: tuple[int, str]) -> bool:
        """Whether a copy held by (shard, incarnation) is still there (that shard was not restarted since)."""
        return self.known[holder[0]][0] == holder[1]
