"""A replicated ``RayDock``'s controller survives its death: a write-ahead journal of its changes on the shards.

Every call that changes the controller's state (a put's commit, an append, a get that claims rows, ack,
nack, clear, set_version, ...) carries a request id chosen by the calling process. The controller applies
the call under the state's lock and, still under it and BEFORE it answers, appends an entry (its number,
the request id, the call's own message and the decisive part of its answer: for a put the shards holding
its copies, for a get the rows claimed and the lease id given) to the journal kept in the memory of every
shard (``Shard.note``; R copies with ``replicas=R``). The controller is a restartable actor: restarted, it
gathers the journal from the shards (the entries numbered 1, 2, ... with no gap) and replays it, applying
each recorded answer exactly (a get claims exactly its recorded rows under its recorded lease id:
``DockState.reclaim``), and finds each put's copies on the shards that hold them. A client whose call
failed because the controller died waits for the restarted one and sends the SAME request again
(``call_again``); a request id already journaled is answered from the journal (a get: the same rows,
read again), never applied twice. So a call's effect is kept exactly when its answer could have reached
the caller, and a call whose entry was not written is applied once, when it is sent again.

The journal survives while one shard that received it lives (a restarted shard is sent the whole journal
by the repair thread; an entry waits at most ``_NOTE_WAIT`` for a shard being restarted, then one shard
suffices and Ray delivers it to the other once it is back). A new controller's first entry says it was
born, so a restarted one that finds no journal, or one with a gap, refuses to start: every call is then a
StorageError naming ``RayDock.load``, never an empty or partial dock. Lease deadlines are kept in
wall-clock time; leases expiring and rows expiring as stale are not journaled: replayed, they happen
again by the same rules, at their time. A user's own sampler object is journaled when it is first sent
and registered again from there; its internal state, if any, is the one that get sent. Cost: one more
round trip, to every shard, per changing call (under the lock; ``bench_dock_recovery``: get p50 about 3
ms more on the loaded 2-core test machine), and the journal in the shards' and the controller's memory
for the dock's lifetime (no entry is dropped: a ``save`` does not truncate it).
"""

from __future__ import annotations

import pickle
import time
import warnings
from collections.abc import Callable
from typing import Any

from .._optional import require

try:
    import ray
except ImportError as missing:  # name the extra; an import that fails for another reason stays as it is
    require(missing.name or "ray", extra="ray", feature="tokenport.dock.ray (RayDock)")
    raise
from .._files import KillPoints
from ..errors import StorageError, TokenportError
from .requests import GetRequest, PutRequest

__all__ = ["CHANGING", "KILL_AT", "RESTART_WAIT", "Journal", "call_again", "recover"]

# the state calls that change the state (the others read it): journaled
CHANGING = frozenset(
    {"add_column", "add_consumer", "add_partition", "clear", "drop_partition", "close", "set_version"}
    | {"expired", "ack", "nack"}
)
RESTART_WAIT = 120.0  # seconds a client waits for a restarted controller before a StorageError
_GATHER_TIMEOUT = 30.0  # a shard that does not hand its journal over within this is left out
_NOTE_WAIT = 1.0  # seconds an entry waits for every shard; then one suffices (a restarting one takes it later)
KILL_AT = "TOKENPORT_DOCK_JOURNAL_KILL_AT"  # tests: each controller process ends at its Nth step (2 per entry)
_kill_point = KillPoints(KILL_AT)


class Journal:
    """The controller's side: the entries written (numbered from 1), each request id's answer, and which
    incarnation of each shard was sent the whole journal."""

    def __init__(self, shards: list[Any], incarnations: list[str]) -> None:
        self.shards = shards
        self.entries: list[bytes] = []  # entry n is entries[n - 1]
        self.answers: dict[str, Any] = {}
        self.sent: list[str | None] = list(incarnations)  # a restarted controller sends them all (recover)

    def write(self, rid: str, kind: str, payload: Any, answer: Any) -> None:
        """Append an entry on every shard and wait for them, or for one after ``_NOTE_WAIT`` (under the caller's
        lock: entries are numbered in the order their changes were applied); a StorageError when none took it."""
        if kind != "born":
            _kill_point()  # the change applied here, not yet journaled
        data = pickle.dumps((rid, kind, payload), protocol=5)
        self.entries.append(data)
        self.answers[rid] = answer
        calls = [shard.note.remote(len(self.entries), data) for shard in self.shards]
        done, pending = ray.wait(calls, num_returns=len(calls), timeout=_NOTE_WAIT)
        taken = sum(_took(call) for call in done)
        while not taken and pending:  # a shard being restarted takes it when it is back (Ray retries the call)
            done, pending = ray.wait(pending, num_returns=1)
            taken = _took(done[0])
        if not taken:
            raise StorageError(
                "RayDock: no shard took the controller's journal entry (every shard is down); the call was "
                "applied but will not survive a controller restart: save the dock now (RayDock.save)"
            )
        if kind != "born":
            _kill_point()  # journaled, not yet answered

    def adopt(self, entries: list[bytes]) -> list[tuple[str, str, Any]]:
        """Take the gathered journal as this controller's own; its entries, opened, in order."""
        self.entries = list(entries)
        return [pickle.loads(data) for data in entries]

    def send_all(self, incarnations: list[str]) -> None:
        """Send the whole journal to each shard whose incarnation was not sent it yet (a restarted shard)."""
        for s, incarnation in enumerate(incarnations):
            if self.sent[s] != incarnation:
                try:
                    ray.get(self.shards[s].note_all.remote(dict(enumerate(self.entries, 1))))
                except ray.exceptions.RayError:
                    continue
                self.sent[s] = incarnation


def _took(call: Any) -> bool:
    """Whether a shard's ``note`` call succeeded."""
    try:
        ray.get(call)
    except ray.exceptions.RayError:
        return False
    return True


def gather(shards: list[Any]) -> tuple[list[bytes], bool]:
    """The journal the shards hold together: entries 1, 2, ... up to the first that none holds; and whether
    that is all they hold (a later entry means the ones between are lost)."""
    found: dict[int, bytes] = {}
    for shard in shards:
        try:
            found.update(ray.get(shard.journal.remote(), timeout=_GATHER_TIMEOUT))
        except ray.exceptions.RayError:
            continue
    entries: list[bytes] = []
    while len(entries) + 1 in found:
        entries.append(found[len(entries) + 1])
    return entries, len(entries) == len(found)


def call_again(submit: Callable[[], Any], sent: Any = None) -> Any:
    """``ray.get`` of ``submit()`` (or of ``sent``, its first sending), sent again (the same request) while the
    controller is dead or restarting; a TokenportError raised in the actor is raised as itself."""
    deadline = time.monotonic() + RESTART_WAIT
    while True:
        try:
            ref, sent = (submit() if sent is None else sent), None
            return ray.get(ref)
        except ray.exceptions.RayTaskError as error:
            cause = getattr(error, "cause", None)
            if isinstance(cause, TokenportError):
                raise cause from None
            raise
        except ray.exceptions.ActorDiedError as error:  # killed for good (a restarting one is unavailable)
            raise StorageError(
                f"RayDock: the dock's controller is gone for good ({type(error).__name__}: it was killed or could "
                "not be restarted): restore the dock from its last checkpoint (RayDock.load)"
            ) from None
        except ray.exceptions.RayActorError as error:
            if time.monotonic() > deadline:
                raise StorageError(
                    f"RayDock: the controller did not come back within {RESTART_WAIT:.0f} s "
                    f"({type(error).__name__}); restore the dock from its last checkpoint (RayDock.load)"
                ) from None
            time.sleep(0.2)


def recover(controller: Any, unwire: Callable[..., tuple[Any, ...]]) -> None:
    """Rebuild a restarted controller (``ray_controller.Controller``, whose messages ``unwire`` opens) from the
    journal its shards hold: each entry applied again with its recorded answer, each put's copies found on
    the shards holding them now."""
    journal, shards = controller.journal, controller.shards
    with warnings.catch_warnings():  # the property reads a deprecated one
        warnings.simplefilter("ignore")
        restarted = bool(ray.get_runtime_context().was_current_actor_reconstructed)
    if not restarted:  # a new dock: its journal's first entry says so
        journal.write("", "born", None, None)
        return
    gathered, whole = gather(shards)
    copies: list[dict[str, list[Any]]] = []
    for shard in shards:
        try:
            copies.append(ray.get(shard.copies.remote(), timeout=_GATHER_TIMEOUT))
        except ray.exceptions.RayError:
            copies.append({})
    if not whole or not gathered:
        raise StorageError(
            "RayDock: the controller's journal is lost (every shard holding part of it died before it was sent "
            "again): its state cannot be rebuilt; restore the dock from its last checkpoint (RayDock.load)"
        )
    entries = journal.adopt(gathered)
    controller.replaying = True
    try:
        for rid, kind, payload in entries:
            journal.answers[rid] = _replay(controller, unwire, kind, payload, copies)
    finally:
        controller.replaying = False
    kept = [entry[4] for entry in controller.objects.values()]
    for shard in shards:
        shard.retain.remote(kept)  # copies of commits the dead controller never recorded
    controller.lost += sum(not entry[0] for entry in controller.objects.values())
    journal.send_all([incarnation for incarnation, _ in controller.replicas.known])


def _replay(controller: Any, unwire: Callable[..., Any], kind: str, payload: Any, copies: list[dict[str, Any]]) -> Any:
    """Apply one journal entry again, with its recorded answer; the answer a resent request gets."""
    if kind == "put":
        request, lengths, put_id, _ = unwire(payload[0], PutRequest, 4)
        known = controller.replicas.known
        held = [s for s, found in enumerate(copies) if put_id in found]
        holders = [(s, known[s][0]) for s in held]
        controller._record(request, lengths, put_id, [copies[s][put_id][0] for s in held], holders, None)
        return None
    if kind in ("take", "sampler"):
        message, consumer, claim = payload if kind == "take" else (payload, None, None)
        request, sampler_key, sampler = unwire(message, GetRequest, 3)
        if sampler is not None and sampler_key is not None:
            controller.samplers[sampler_key] = sampler
        if claim is None:
            return None
        name, give, consume, lease = claim
        state = controller.state
        state.reclaim(consumer, name, give, consume, lease)
        state.served(consumer, state.batch_bytes(state.partition(name), list(request.columns), give))
        return name, give, None if lease is None else lease[0]
    return None if kind == "born" else controller.apply(kind, payload)
