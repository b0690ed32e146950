"""A dock's bookkeeping at scale, in one process: 10^3 consumers, and what each row costs them.

Each consumer that reads a partition holds one consumption byte a row there, and lease bits only
once it leases; reading (a get, stats, a staleness check) makes no bits. Every consumer is served
every row exactly once. Full size (10^5 - 10^7 rows, latency per call): benchmarks/bench_scale_dock.py.
"""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np

from tokenport.dock import Column, Dock

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
