"""RayDock under faults on a multi-node cluster: a node or a shard killed while producers and consumers run loses
and repeats no committed row (replicas=2), and a producer killed between staging and commit leaves nothing."""

from __future__ import annotations

import os
import random
import sys
import tempfile
import threading
import time
from collections import Counter

import numpy as np
import pytest

ray = pytest.importorskip("ray")
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: E402

from tokenport import ConfigError, StorageError, TokenportError  # noqa: E402
from tokenport.dock import Column, Dock  # noqa: E402
from tokenport.dock import ray as ray_dock  # noqa: E402
from tokenport.dock.ray import KILL_AT, RayDock  # noqa: E402
from tokenport.dock.ray_journal import KILL_AT as JOURNAL_KILL_AT  # noqa: E402

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this test module

COLUMNS = [Column("tokens", np.int64, ragged=True), Column("reward", np.float32)]
CONSUMERS = ["train", "reference"]
ROWS = 48  # rows of a partition, put 4 at a time
PER_PUT = 4


def tokens_of(row: int) -> list[int]:
    """Row ``row``'s tokens: its content names it, so a row served with another's data is seen."""
    return [row] * (1 + row % 7) + list(range(row % 5))


@ray.remote(max_restarts=0)
class Producer:
    def run(self, dock: RayDock, partition: str, rows: list[int], pause: float) -> list[int]:
        """Put ``rows`` of ``partition`` four at a time; the rows whose put returned (committed)."""
        done = []
        for start in range(0, len(rows), PER_PUT):
            part = rows[start : start + PER_PUT]
            values = {"tokens": [np.array(tokens_of(r)) for r in part], "reward": np.array(part, np.float32)}
            dock.put(partition, values, rows=part)
            done += part
            time.sleep(pause)
        return done

    def die_in_put(self, dock: RayDock, step: int, rows: list[int]) -> None:
        """Put ``rows`` with the kill point ``step`` armed: this process ends there (1: staged, 2: commit sent)."""
        os.environ[KILL_AT] = str(step)
        dock.put(
            "p", {"tokens": [np.array(tokens_of(r)) for r in rows], "reward": np.array(rows, np.float32)}, rows=rows
        )


@ray.remote(max_restarts=0)
class Consumer:
    def run(self, dock: RayDock, consumer: str) -> list[tuple[str, int, tuple[int, ...], float]]:
        """Get until the dock is closed and consumed: (partition, row, tokens, reward) of every row served."""
        served = []
        while (batch := dock.get(consumer, ["tokens", "reward"], 5, timeout=60)) is not None:
            for row, tokens, reward in zip(batch.rows, batch["tokens"].to_list(), batch["reward"]):
                served.append((batch.partition, int(row), tuple(int(t) for t in tokens), float(reward)))
        return served


def expected_rows(partitions: list[str]) -> Counter:
    return Counter((p, row, tuple(tokens_of(row)), float(row)) for p in partitions for row in range(ROWS))


def on(node) -> dict:
    return {"num_cpus": 0, "resources": {node.name: 0.01}}


def assert_served_once_and_held_twice(dock: RayDock, served: list, seconds: float) -> None:
    """Close the dock; each consumer got every row of partitions a and b once; every object has two copies."""
    dock.close()
    for name, rows in zip(CONSUMERS, ray.get(served, timeout=seconds)):
        assert Counter(rows) == expected_rows(["a", "b"]), name
    held = wait_for_copies(dock, 2)
    assert held["pinned"] == 2 * held["objects"] and dock.lost_objects() == 0


def wait_for_copies(dock: RayDock, replicas: int, seconds: float = 20) -> dict:
    """The dock's object counts once every object has its copies again (repaired), or as they are at the end."""
    deadline = time.monotonic() + seconds
    while True:
        held = dock.held_objects()
        if held["pinned"] == replicas * held["objects"] or time.monotonic() > deadline:
            return held
        time.sleep(0.2)


@pytest.mark.parametrize("seed", [0])
def test_a_shard_and_a_node_killed_under_load_lose_and_repeat_no_committed_row(ray_cluster, ray_nodes, seed) -> None:
    """Shards on the head and on two worker nodes, each put held by two of them on two nodes. A producer on
    one worker node fills partition "a" and is done; then another on the other node fills "b" (served
    first: it is older) while a consumer on that node and one on the head read both. The first node (its
    producer, whose objects the rows of "a" were, and a shard), then a shard actor, are killed at seeded
    random moments: every consumer is served every committed row exactly once, with its own data, and the
    lost copies are made again. Without replicas the rows of "a" are lost with their producer."""
    rng = random.Random(seed)
    busy, doomed = ray_nodes.add(), ray_nodes.add()
    nodes = [ray_cluster.head_node.node_id, doomed.node_id, busy.node_id]
    dock = RayDock(COLUMNS, CONSUMERS, shards=3, replicas=2, shard_nodes=nodes)
    try:
        dock.add_partition("b", ROWS)
        dock.add_partition("a", ROWS)
        first = Producer.options(**on(doomed)).remote()
        assert ray.get(first.run.remote(dock, "a", list(range(ROWS)), 0), timeout=60) == list(range(ROWS))
        head = NodeAffinitySchedulingStrategy(nodes[0], soft=False)
        consumers = [Consumer.options(**on(busy)).remote(), Consumer.options(scheduling_strategy=head).remote()]
        produced = Producer.options(**on(busy)).remote().run.remote(dock, "b", list(range(ROWS)), 0.03)
        served = [c.run.remote(dock, name) for c, name in zip(consumers, CONSUMERS)]
        time.sleep(rng.uniform(0.1, 0.5))
        ray_nodes.kill(doomed)  # its shard is restarted elsewhere, empty
        wait_for_copies(dock, 2)  # two copies survive one failure at a time: the next waits for the repair
        time.sleep(rng.uniform(0.0, 0.3))
        ray.kill(dock._shards[rng.randrange(3)], no_restart=False)  # restarted empty
        assert sorted(ray.get(produced, timeout=60)) == list(range(ROWS))
        assert_served_once_and_held_twice(dock, served, 60)
    finally:
        dock.shutdown()


def test_a_producer_killed_between_staging_and_commit_leaves_nothing_on_the_dock(ray_session) -> None:
    """Killed after its rows went into the object store (step 1): no object is held, no row is ready. Killed
    just after sending the commit (step 2): the put took effect whole (every copy, readable) or not at all."""
    dock = RayDock(COLUMNS, CONSUMERS, shards=2, replicas=2)
    try:
        dock.add_partition("p", ROWS)
        for step, rows in ((1, [0, 1, 2, 3]), (2, [4, 5, 6, 7])):
            doomed = Producer.remote()
            with pytest.raises(ray.exceptions.RayActorError):
                ray.get(doomed.die_in_put.remote(dock, step, rows), timeout=60)
            if step == 1:
                time.sleep(0.5)  # any call the killed producer could have sent has arrived
                assert dock.held_objects() == {"objects": 0, "pinned": 0}
                assert dock.stats()["partitions"]["p"]["ready"] == {"tokens": 0, "reward": 0}
        wait_for_copies(dock, 2)  # the commit sent at step 2 has finished, or was refused
        held, ready = dock.held_objects(), dock.stats()["partitions"]["p"]["ready"]
        assert held in ({"objects": 0, "pinned": 0}, {"objects": 1, "pinned": 2})
        committed = [4, 5, 6, 7] if held["objects"] else []
        assert ready == {"tokens": len(committed), "reward": len(committed)}
        ray.get(Producer.remote().run.remote(dock, "p", [8, 9, 10, 11], 0))
        batch = dock.get("train", ["tokens", "reward"], len(committed) + 4, "p", timeout=10)
        assert sorted(batch.rows.tolist()) == sorted(committed + [8, 9, 10, 11])
        assert [list(t) for t in batch["tokens"].to_list()] == [tokens_of(int(r)) for r in batch.rows]
    finally:
        dock.shutdown()


def test_a_killed_controller_fails_every_call_with_a_storage_error_naming_the_remedy(ray_session) -> None:
    """A controller killed for good (not restarted: ``ray.kill`` without restart) takes the dock's progress: a
    call after its death is a StorageError (never a Ray error) saying to restore the last checkpoint; a
    checkpoint taken before restores every committed row. (A restarted one recovers: the tests below.)"""
    dock = RayDock(COLUMNS, CONSUMERS, shards=2, replicas=2)
    dock.add_partition("p", ROWS)
    ray.get(Producer.remote().run.remote(dock, "p", list(range(8)), 0))
    with tempfile.TemporaryDirectory() as saved:
        dock.save(saved)
        ray.kill(dock._controller)
        for call in (lambda: dock.get("train", ["tokens"], 4, "p"), lambda: dock.put("p", {"reward": [0.0]}, rows=[9])):
            with pytest.raises(StorageError, match="RayDock.load"):
                call()
        dock.shutdown()
        restored = RayDock.load(saved, shards=2, replicas=2)
    try:
        batch = restored.get("train", ["tokens", "reward"], 8, "p", timeout=10)
        assert batch.rows.tolist() == list(range(8))
        assert [list(t) for t in batch["tokens"].to_list()] == [tokens_of(r) for r in range(8)]
    finally:
        restored.shutdown()


def test_random_calls_on_a_replicated_dock_equal_a_dock_and_keep_two_copies_of_every_object(ray_session) -> None:
    """Shadow model: seeded random puts (some refused: cells already written), overwrites, gets and clears on
    RayDock(replicas=2) and on an in-process Dock, a shard killed halfway; after every call the results (or
    refusals) and the readiness and consumption are equal, and every object the dock holds has two copies
    (again, once the controller has copied the killed shard's objects)."""
    rng = random.Random(7)
    model, dock = Dock(COLUMNS, ["train"]), RayDock(COLUMNS, ["train"], shards=3, replicas=2)
    try:
        for target in (model, dock):
            target.add_partition("p", 16)
        refused = 0
        for step in range(40):
            kind = rng.choice(["put", "put", "put", "get", "get", "clear"] if step > 5 else ["put"])
            rows = sorted(rng.sample(range(16), rng.randint(1, 5)))
            args = (rows, rng.random() < 0.3, rng.randint(1, 4), step * 100)
            if step == 20:  # a shard dies: the next calls meet it restarted, empty; the controller copies again
                ray.kill(dock._shards[rng.randrange(3)], no_restart=False)
            result = outcome(dock, kind, *args)
            assert result == outcome(model, kind, *args), (step, kind)
            refused += kind == "put" and result is not None
            mine, theirs = (d.stats()["partitions"]["p"] for d in (dock, model))
            assert (mine["ready"], mine["consumed"]) == (theirs["ready"], theirs["consumed"]), (step, kind)
            held = wait_for_copies(dock, 2)
            assert held["pinned"] == 2 * held["objects"], (step, kind, held)
        assert refused  # the refusals were compared too
    finally:
        dock.shutdown()


def outcome(dock, kind: str, rows: list[int], overwrite: bool, count: int, seed: int):
    """One shadow-model call on ``dock``: its result as plain values, or its refusal (type and message)."""
    try:
        if kind == "put":
            values = {"tokens": [np.array(tokens_of(r + seed)) for r in rows], "reward": np.array(rows, np.float32)}
            return dock.put("p", values, rows=rows, overwrite=overwrite)
        if kind == "clear":
            return dock.clear("p")
        batch = dock.get("train", ["tokens", "reward"], count, "p", timeout=0.01)
    except TokenportError as error:
        return type(error).__name__, str(error)
    if batch is None:
        return None
    return batch.rows.tolist(), [list(t) for t in batch["tokens"].to_list()], batch["reward"].tolist()


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"replicas": 0}, "replicas=0 is invalid"),
        ({"shards": 2, "replicas": 3}, "needs at least as many shards"),
        ({"shards": 2, "shard_nodes": "node"}, "list of node ids"),
        ({"shards": 2, "shard_nodes": [1, 2]}, "list of node ids"),
        ({"shards": 2, "shard_nodes": ["a"]}, "1 nodes for 2 shards"),
    ],
    ids=["no-copy", "more-copies-than-shards", "a-string", "not-ids", "too-few"],
)
def test_bad_replicas_and_shard_nodes_are_refused_before_any_actor_starts(options, match) -> None:
    with pytest.raises(ConfigError, match=match):
        RayDock(COLUMNS, CONSUMERS, **options)


def test_rows_whose_every_copy_died_are_a_storage_error_and_counted_lost(ray_session) -> None:
    """Both shards holding a put die before the repair: the object is counted lost, and a get of its rows is a
    StorageError naming the partition (no copy left to try), never another error."""
    dock = RayDock(COLUMNS, CONSUMERS, shards=2, replicas=2)
    try:
        dock.add_partition("p", ROWS)
        ray.get(Producer.remote().run.remote(dock, "p", [0, 1, 2, 3], 0))
        for shard in dock._shards:
            ray.kill(shard, no_restart=False)
        deadline = time.monotonic() + 20
        while dock.lost_objects() == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert dock.lost_objects() == 1
        with pytest.raises(StorageError, match="partition 'p': every copy.*no copy left"):
            dock.get("reference", ["tokens"], 4, "p", timeout=10)
    finally:
        dock.shutdown()


def kill_controller(dock: RayDock, after: float = 0.0) -> None:
    """Kill the dock's controller process (Ray restarts it; it recovers from the shards' journal), now or
    ``after`` seconds from now (from a timer thread: a call may be in flight)."""
    if after <= 0:
        ray.kill(dock._controller, no_restart=False)
        return
    threading.Timer(after, ray.kill, (dock._controller,), {"no_restart": False}).start()


@pytest.mark.parametrize("seed", [0])
def test_a_controller_killed_at_seeded_moments_under_load_serves_every_row_exactly_once(ray_session, seed) -> None:
    """A producer fills two partitions while two consumers read them (no lease: a row handed over is consumed);
    the controller is killed three times at seeded random moments. It is restarted from the shards' journal
    and the clients send their interrupted calls again: every committed row is served to each consumer
    exactly once (the served multisets equal the fault-free run's), with its own data, and no copy is lost."""
    rng = random.Random(seed)
    dock = RayDock(COLUMNS, CONSUMERS, shards=2, replicas=2)
    try:
        dock.add_partition("a", ROWS)
        dock.add_partition("b", ROWS)
        producer = Producer.remote()
        produced = [producer.run.remote(dock, name, list(range(ROWS)), 0.02) for name in ("a", "b")]
        served = [Consumer.remote().run.remote(dock, name) for name in CONSUMERS]
        for _ in range(3):
            time.sleep(rng.uniform(0.2, 0.8))
            kill_controller(dock)
        assert [sorted(rows) for rows in ray.get(produced, timeout=120)] == [list(range(ROWS))] * 2
        assert_served_once_and_held_twice(dock, served, 120)
    finally:
        dock.shutdown()


def leased_outcome(dock, kind: str, rows: list[int], count: int, seed: int, held: list[int]):
    """``outcome``, plus gets under a lease (its id kept in ``held``), acks and nacks of a held lease."""
    if kind not in ("lease", "ack", "nack"):
        return outcome(dock, kind, rows, False, count, seed)
    try:
        if kind != "lease":
            return getattr(dock, kind)(held.pop(seed % len(held))) if held else None
        batch = dock.get("train", ["tokens", "reward"], count, "p", timeout=0.01, lease=600)
    except TokenportError as error:
        return type(error).__name__, str(error)
    if batch is None:
        return None
    held.append(batch.lease_id)
    return batch.rows.tolist(), batch.lease_id, [list(t) for t in batch["tokens"].to_list()]


def test_random_calls_with_the_controller_killed_in_flight_equal_a_dock(ray_session) -> None:
    """Shadow model: seeded random puts (some refused), gets, gets under a lease, acks, nacks and clears on
    RayDock(replicas=2) and on an in-process Dock; three times the controller is killed at a seeded moment
    while a call is in flight. Every call's result (or refusal), lease ids included, and the readiness,
    consumption and leases after it equal the model's: the call in flight took effect exactly once."""
    rng = random.Random(31)
    model, dock = Dock(COLUMNS, ["train"]), RayDock(COLUMNS, ["train"], shards=2, replicas=2)
    held: dict[int, list[int]] = {id(model): [], id(dock): []}
    try:
        for target in (model, dock):
            target.add_partition("p", 16)
        for step in range(24):
            kinds = ["put", "put", "get", "lease", "lease", "ack", "nack", "clear"]
            kind = rng.choice(kinds if step > 3 else ["put"])
            args = (sorted(rng.sample(range(16), rng.randint(1, 5))), rng.randint(1, 4), step * 100)
            if step % 8 == 5:
                kill_controller(dock, after=rng.uniform(0.001, 0.03))
            result = leased_outcome(dock, kind, *args, held[id(dock)])
            assert result == leased_outcome(model, kind, *args, held[id(model)]), (step, kind)
            mine, theirs = (d.stats()["partitions"]["p"] for d in (dock, model))
            assert mine == theirs, (step, kind)
    finally:
        dock.shutdown()


def test_a_controller_killed_right_after_a_save_and_right_before_one_loses_nothing(ray_session, tmp_path) -> None:
    """A save, the controller killed, a save (its calls sent again to the restarted controller), and a third with
    the controller killed while it runs: the three checkpoints are the same dock, and the dock itself goes on
    serving exactly the rows not consumed (and a lease taken before the kills is still acknowledged)."""
    dock = RayDock(COLUMNS, CONSUMERS, shards=2, replicas=2)
    try:
        dock.add_partition("p", ROWS)
        ray.get(Producer.remote().run.remote(dock, "p", list(range(16)), 0))
        assert dock.get("train", ["tokens"], 6, "p", timeout=10).rows.tolist() == list(range(6))
        leased = dock.get("reference", ["reward"], 4, "p", timeout=10, lease=600)
        dock.save(tmp_path / "before")
        kill_controller(dock)
        dock.save(tmp_path / "after")
        kill_controller(dock, after=0.02)
        dock.save(tmp_path / "during")
        saved = [Dock.load(tmp_path / name) for name in ("before", "after", "during")]
        for copy in saved[1:]:
            assert copy.stats()["partitions"] == saved[0].stats()["partitions"]
            batch = copy.get("train", ["tokens", "reward"], 10, "p", timeout=1)
            assert batch.rows.tolist() == list(range(6, 16))
            assert [list(t) for t in batch["tokens"].to_list()] == [tokens_of(r) for r in range(6, 16)]
        dock.ack(leased.lease_id)
        assert dock.get("train", ["tokens"], 10, "p", timeout=10).rows.tolist() == list(range(6, 16))
        assert dock.get("reference", ["reward"], 12, "p", timeout=10).rows.tolist() == list(range(4, 16))
    finally:
        dock.shutdown()


@pytest.mark.parametrize("step", ["2", "3"], ids=["after-its-entry", "before-its-entry"])
def test_a_controller_dying_at_each_journal_step_applies_every_resent_call_exactly_once(
    ray_session, monkeypatch, step
) -> None:
    """Every controller process ends at a step of the journal (its kill point): right after the entry of its
    first change, before it answers ("2"), or after applying its second change, before its entry ("3"). Each
    changing call (add_partition, put, get, get under a lease, ack, nack, clear, set_version) meets a death,
    its caller sends it again, and the restarted controller answers from the journal or applies it (once).
    Results, lease ids and state equal an in-process Dock's (without the journal's answers, the resent put
    of "2" is refused and its resent get serves other rows)."""
    monkeypatch.setattr(ray_dock, "CONTROLLER_OPTIONS", {"runtime_env": {"env_vars": {JOURNAL_KILL_AT: step}}})
    model, dock = Dock(COLUMNS, ["train"]), RayDock(COLUMNS, ["train"], shards=2, replicas=2)
    held: dict[int, list[int]] = {id(model): [], id(dock): []}
    try:
        for target in (model, dock):
            target.add_partition("p", 16)
        calls = [("put", [0, 1, 2, 3]), ("put", [2, 3]), ("get", [0]), ("lease", [0]), ("ack", [0])]
        calls += [("lease", [0]), ("nack", [0]), ("clear", [0])]
        for step, (kind, rows) in enumerate(calls):
            result = leased_outcome(dock, kind, rows, 2, step, held[id(dock)])
            assert result == leased_outcome(model, kind, rows, 2, step, held[id(model)]), (step, kind)
            mine, theirs = (d.stats()["partitions"]["p"] for d in (dock, model))
            assert mine == theirs, (step, kind)
        dock.set_version(3)
        assert dock.version == 3
    finally:
        dock.shutdown()


def test_the_journal_outlives_each_shard_restarted_in_turn_and_rebuilds_the_controller(ray_session) -> None:
    """Both shards are killed one after the other (each restarted empty, the next once the first was sent the
    journal and its copies again), then the controller: it is rebuilt from the journal the restarted shards
    were sent, and serves every committed row once, with its data, and the consumption made before."""
    dock = RayDock(COLUMNS, CONSUMERS, shards=2, replicas=2)
    try:
        dock.add_partition("p", ROWS)
        ray.get(Producer.remote().run.remote(dock, "p", list(range(12)), 0))
        assert dock.get("train", ["tokens"], 4, "p", timeout=10).rows.tolist() == [0, 1, 2, 3]
        for shard in dock._shards:
            ray.kill(shard, no_restart=False)
            time.sleep(1.0)  # the controller sees the restart (every 0.5 s)
            assert wait_for_copies(dock, 2)["pinned"] == 2 * 3
        kill_controller(dock)
        batch = dock.get("train", ["tokens", "reward"], 8, "p", timeout=10)
        assert batch.rows.tolist() == list(range(4, 12))
        assert [list(t) for t in batch["tokens"].to_list()] == [tokens_of(r) for r in range(4, 12)]
        assert dock.get("reference", ["reward"], 12, "p", timeout=10)["reward"].tolist() == list(range(12))
    finally:
        dock.shutdown()


def test_a_controller_restarted_after_every_shard_died_at_once_is_never_silently_empty(ray_session) -> None:
    """Both shards (each holding the whole journal and a copy of every put) die at once, then the controller:
    the rows are gone with their copies, and the journal too unless the controller sent it again in time.
    Either way a get is a StorageError saying what to do, never an empty dock or another error."""
    dock = RayDock(COLUMNS, CONSUMERS, shards=2, replicas=2)
    try:
        dock.add_partition("p", ROWS)
        ray.get(Producer.remote().run.remote(dock, "p", [0, 1, 2, 3], 0))
        for shard in dock._shards:
            ray.kill(shard, no_restart=False)
        kill_controller(dock)
        with pytest.raises(StorageError, match="RayDock.load|every copy"):
            dock.get("train", ["tokens"], 4, "p", timeout=10)
    finally:
        dock.shutdown()


class NewestFirst:
    """A user's sampler: the highest eligible rows first (so a fallback to the default order is seen)."""

    def __call__(self, request):
        chosen = request.eligible[::-1][: request.count]
        return (chosen, chosen) if len(chosen) else None


def test_a_users_sampler_sent_once_is_still_used_after_the_controller_restarts(ray_session) -> None:
    """A sampler is sent with the first get that uses it (which times out: nothing is claimed) and named by a key
    after; the controller is then killed: the restarted one still applies that sampler, not the default."""
    dock, newest = RayDock(COLUMNS, CONSUMERS, shards=2, replicas=2), NewestFirst()
    try:
        dock.add_partition("p", ROWS)
        with pytest.raises(TokenportError, match="waited"):
            dock.get("train", ["reward"], 2, "p", timeout=0.01, sampler=newest)
        ray.get(Producer.remote().run.remote(dock, "p", list(range(8)), 0))
        kill_controller(dock)
        assert dock.get("train", ["reward"], 3, "p", timeout=10, sampler=newest).rows.tolist() == [7, 6, 5]
    finally:
        dock.shutdown()
