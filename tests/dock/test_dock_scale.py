"""A dock's bookkeeping at scale, in one process: 10^3 consumers, and what each row costs them.

Each consumer that reads a partition holds one consumption byte a row there, and lease bits only
once it leases; reading (a get, stats, a staleness check) makes no bits. Every consumer is served
every row exactly once. Full size (10^5 - 10^7 rows, latency per call): benchmarks/bench_scale_dock.py.
"""

from __future__ import annotations

import gc
import random
import tracemalloc

import numpy as np
import pytest

from tests.dock._state import dock_state
from tokenport.dock import Column, Dock
from tokenport.dock.state import DockState
from tokenport.dock.storage import Partition
from tokenport.errors import TokenportError

CONSUMERS = [f"task{k:04d}" for k in range(1_000)]


def _dock(rows: int, consumers: list[str] = CONSUMERS) -> Dock:
    dock = Dock([Column("reward", np.float32)], consumers, max_staleness=4)
    dock.add_partition("p", rows)
    dock.put("p", {"reward": np.arange(rows, dtype=np.float32)}, np.arange(rows), version=0)
    return dock


def _bits(dock: Dock) -> tuple[int, int]:
    """(consumption bytes, lease bytes) the dock's partition holds."""
    partition = dock.state.partition("p")
    return sum(b.nbytes for b in partition.consumed.values()), sum(b.nbytes for b in partition.leased.values())


def test_1000_consumers_each_get_every_row_once() -> None:
    """10^3 consumers drain 10^4 rows in batches: each sees every row once, in order, and holds one byte a row."""
    rows = 10_000
    dock = _dock(rows)
    for consumer in CONSUMERS:
        got = []
        while (batch := dock.get(consumer, ["reward"], 2_500, "p")) is not None:
            got.append(batch.rows)
            assert np.array_equal(batch.columns["reward"], batch.rows.astype(np.float32))
        assert np.array_equal(np.concatenate(got), np.arange(rows))
    assert _bits(dock) == (rows * len(CONSUMERS), 0)
    assert all(dock.all_consumed(consumer, "p") for consumer in CONSUMERS)


def test_reads_make_no_bits_and_leases_make_one_byte_a_row() -> None:
    """stats, staleness and a consumer that finds nothing ready leave no bits; a lease makes one byte a row
    for its consumer only, and an ack leaves the rows consumed."""
    rows = 4_096
    dock = _dock(rows)
    dock.set_version(3)  # walks every consumer's staleness over the partition
    assert dock.stats()["partitions"]["p"]["consumed"]["task0001"] == 0
    assert dock.get("task0002", ["reward"], 8, "p", unfinished=True) is None  # looked, found none
    assert _bits(dock) == (0, 0)
    batch = dock.get("task0003", ["reward"], 100, "p", lease=60)
    assert batch is not None and batch.lease_id is not None
    assert _bits(dock) == (0, rows)  # the lease made task0003's lease bits, nothing else
    assert dock.stats()["partitions"]["p"]["leased"]["task0003"] == 100
    dock.ack(batch.lease_id)
    assert _bits(dock) == (rows, rows)
    assert dock.stats()["partitions"]["p"]["consumed"]["task0003"] == 100
    assert dock.stats()["partitions"]["p"]["leased"]["task0003"] == 0


def _traced(make) -> int:  # type: ignore[no-untyped-def]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = make()
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
        del kept
        return held
    finally:
        tracemalloc.stop()


def test_memory_per_row_and_consumer_is_one_byte() -> None:
    """10^3 consumers that each took a batch from a 10^4-row partition hold about one byte per (row, consumer).

    Before, a put already made nine bytes a row for every consumer (consumption bits and a lease id per row,
    made by the staleness check that walks the consumers)."""
    rows = 10_000

    def read_by_all() -> Dock:
        dock = _dock(rows)
        for consumer in CONSUMERS:
            dock.get(consumer, ["reward"], 16, "p")
        return dock

    base, read = _traced(lambda: _dock(rows)), _traced(read_by_all)
    assert base / rows < 64, (
        base / rows
    )  # a row put: its reward, ready bit, versions, flags and age, whatever the consumers
    per_cell = (read - base) / (rows * len(CONSUMERS))
    assert 1.0 <= per_cell < 1.5, per_cell


class _EveryConsumerEveryRow(DockState):
    """The staleness walk before it skipped anything: each consumer over each row, bits or none."""

    def _too_stale(self, target: Partition, ids: np.ndarray) -> np.ndarray:
        first = target.version_first[ids]
        stale = np.zeros(len(ids), dtype=bool)
        leased = np.zeros(len(ids), dtype=bool)
        for consumer in self._consumers:
            leased |= target.leased.get(consumer, np.zeros(target.rows, dtype=bool))[ids]
            limit = self.staleness_limit(consumer)
            if limit is not None:
                stale |= ~target.consumed_view(consumer)[ids] & (self.version - first > limit)
        return ids[stale & (first >= 0) & ~leased]


def _random_step(rng: random.Random, dock: Dock, leases: list[int], consumers: list[str]) -> object:
    """One random call (put, get, lease, ack, nack, set_version) and what it returned."""
    kind = rng.choice(["put", "put", "get", "get", "lease", "settle", "version"])
    if kind == "put":
        rows = sorted(rng.sample(range(40), rng.randint(1, 6)))
        version = rng.randint(max(0, dock.version - 3), dock.version)
        values = {"reward": np.full(len(rows), version, dtype=np.float32)}
        return dock.put("p", values, rows, overwrite=True, version=version, completed=rng.random() < 0.9)
    if kind in ("get", "lease"):
        batch = dock.get(
            rng.choice(consumers), ["reward"], rng.randint(1, 5), "p", timeout=0, lease=60 if kind == "lease" else None
        )
        if batch is not None and batch.lease_id is not None:
            leases.append(batch.lease_id)
        return None if batch is None else batch.rows.tolist()
    if kind == "settle" and leases:
        lease = leases.pop(rng.randrange(len(leases)))
        return dock.ack(lease) if rng.random() < 0.5 else dock.nack(lease)
    return dock.set_version(dock.version + rng.choice([0, 1, 1, 2]))


def _counts(dock: Dock) -> dict:
    """``stats()`` without the wait times (clock readings, not bookkeeping)."""
    stats = dock.stats()
    for consumer in stats["consumers"].values():
        consumer.pop("wait_seconds")
    return stats


@pytest.mark.parametrize("policy", ["requeue", "drop"])
@pytest.mark.parametrize("seed", range(2))
def test_staleness_walk_equals_the_walk_over_every_consumer(policy: str, seed: int) -> None:
    """Random puts, gets, leases and version moves over 30 consumers of mixed limits (some never reading):
    the dock expires exactly the rows the naive walk over every consumer and row expires."""
    rng = random.Random(seed)
    consumers = [f"c{k}" for k in range(30)]
    limits = [None, 0, 1, 2, 3]
    docks = []
    for make in (DockState, _EveryConsumerEveryRow):
        state = make([Column("reward", np.float32)], [], on_stale=policy)
        for k, consumer in enumerate(consumers):
            state.add_consumer(consumer, max_staleness=limits[k % len(limits)])
        dock = Dock.from_state(state)
        dock.add_partition("p", 40)
        docks.append(dock)
    readers = consumers[:20]  # the last ten never read: they hold no bits
    leases: list[list[int]] = [[], []]
    for step in range(200):
        draws = rng.random()
        results = []
        for dock, held in zip(docks, leases):
            try:
                results.append(_random_step(random.Random(draws), dock, held, readers))
            except TokenportError as exc:
                results.append(type(exc))
            results.append(_counts(dock))
        assert results[0] == results[2] and results[1] == results[3], step
        if step % 20 == 19:  # the whole state (a checkpoint's arrays) now and then: it is the slow part
            assert dock_state(docks[0]) == dock_state(docks[1]), step
    expired = _counts(docks[0])["expired"]
    assert expired["requeued"] + expired["dropped"] > 0  # the walk had rows to expire


def test_a_row_expired_twice_before_it_is_collected_is_handed_back_once(tmp_path) -> None:
    """Rewritten and too stale again before expired() is called, a row comes back once (it was twice, and
    save() raised a bare ValueError on the repeated row); both expiries are counted."""
    dock = Dock([Column("reward", np.float32)], ["train"], max_staleness=0)
    dock.add_partition("p", 4)
    for version in (0, 1):
        dock.put("p", {"reward": np.zeros(2, np.float32)}, [1, 2], version=version)
        dock.set_version(version + 1)
    dock.save(str(tmp_path / "ckpt"))
    assert Dock.load(str(tmp_path / "ckpt")).expired()["p"].tolist() == [1, 2]
    assert dock.expired()["p"].tolist() == [1, 2]
    assert dock.stats()["expired"]["requeued"] == 4
