"""The in-process experience dock: readiness, consumption, samplers, leases, concurrency, bad input."""

from __future__ import annotations

import asyncio
import math
import threading
import time

import numpy as np
import pytest

import tokenport as tp
from tokenport.dock import (
    Balanced,
    Column,
    Dock,
    Packed,
    Padded,
    PromptGroups,
    RandomRows,
    RankSlices,
    SampleRequest,
)

GROUP = 4


def make_dock(prompts: int = 4, consumers=("ref", "train")) -> Dock:
    dock = Dock(
        [
            Column("responses", np.int32, ragged=True),
            Column("logp", np.float32, ragged=True),
            Column("reward", np.float32),
            Column("embedding", np.float32, shape=(3,)),
        ],
        consumers,
        n_samples_per_prompt=GROUP,
    )
    dock.add_partition("step-0", num_prompts=prompts)
    return dock


def responses(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 50_000, int(rng.integers(0, 40))).astype(np.int32) for _ in range(n)]


def put_all(dock: Dock, rows: list[np.ndarray], partition: str = "step-0") -> None:
    n = len(rows)
    dock.put(
        partition,
        {
            "responses": rows,
            "logp": [r.astype(np.float32) / 7 for r in rows],
            "reward": np.arange(n, dtype=np.float32),
            "embedding": np.ones((n, 3)),
        },
        rows=range(n),
    )


def snapshot(dock: Dock) -> dict:
    stats = dock.stats()
    for consumer in stats["consumers"].values():
        consumer.pop("wait_seconds")
    return stats


# -- put and get ------------------------------------------------------------------------------------


def test_round_trip_in_every_input_form_and_consumers_are_independent():
    dock = make_dock()
    rows = responses(16)
    packed = tp.dock.pack(rows[4:8])
    dock.put("step-0", {"responses": rows[:4]}, rows=[0, 1, 2, 3])
    dock.put("step-0", {"responses": packed}, rows=np.arange(4, 8))
    dock.put("step-0", {"responses": packed.padded(-1, multiple_of=8)}, rows=np.arange(8, 12))
    dock.put(
        "step-0", {"responses": Packed(np.concatenate(rows[12:]), [len(r) for r in rows[12:]])}, rows=range(12, 16)
    )
    expected = rows[:8] + rows[4:8] + rows[12:]
    for consumer in ("ref", "train"):
        batch = dock.get(consumer, ["responses"], 16, "step-0", timeout=1)
        assert batch.rows.tolist() == list(range(16))
        assert all(np.array_equal(a, b) for a, b in zip(batch["responses"].to_list(), expected))
        assert batch["responses"].values.dtype == np.int32
        assert dock.all_consumed(consumer, "step-0")


def test_fixed_columns_shapes_and_padded_output():
    dock = make_dock()
    rows = responses(16, seed=1)
    put_all(dock, rows)
    batch = dock.get("train", ["reward", "embedding", "responses"], 5, "step-0", timeout=1)
    assert batch["reward"].tolist() == [0, 1, 2, 3, 4] and batch["embedding"].shape == (5, 3)
    padded = batch.padded("responses", multiple_of=8)
    assert padded.values.shape[1] % 8 == 0 and padded.values.shape[1] >= max(len(r) for r in rows[:5])
    assert np.array_equal(padded.values[2, : len(rows[2])], rows[2]) and not padded.values[2, len(rows[2]) :].any()
    assert batch.prompts.tolist() == [0, 0, 0, 0, 1]


def test_get_waits_for_every_requested_column_then_wakes_without_polling():
    dock = make_dock()
    rows = responses(16)
    dock.put("step-0", {"responses": rows}, rows=range(16))
    woke = []

    def late_reward():
        time.sleep(0.15)
        woke.append(time.monotonic())
        dock.put("step-0", {"reward": np.zeros(16)}, rows=range(16))

    threading.Thread(target=late_reward).start()
    batch = dock.get("train", ["responses", "reward"], 8, "step-0", timeout=5)
    assert time.monotonic() - woke[0] < 0.05  # woken by the put, not by a polling interval
    assert batch.rows.tolist() == list(range(8))


def test_end_of_partition_short_last_batch_and_any_partition():
    dock = make_dock(prompts=3)  # 12 rows
    put_all(dock, responses(12))
    assert len(dock.get("train", ["reward"], 5, "step-0")) == 5
    assert len(dock.get("train", ["reward"], 5, "step-0")) == 5
    assert dock.get("train", ["reward"], 5, "step-0").rows.tolist() == [10, 11]
    assert dock.get("train", ["reward"], 5, "step-0") is None
    dock.add_partition("step-1", num_prompts=1)
    put_all(dock, responses(4), partition="step-1")
    batch = dock.get("train", ["reward"], 4)  # no partition named: any that can serve
    assert batch.partition == "step-1"
    with pytest.raises(tp.DockTimeout):
        dock.get("train", ["reward"], 4, timeout=0.05)  # not closed: more partitions may come
    dock.close()
    assert dock.get("train", ["reward"], 4, timeout=1) is None


def test_timeout_is_a_timeout_error_and_changes_nothing():
    dock = make_dock()
    put_all(dock, responses(8))
    before = snapshot(dock)
    with pytest.raises(TimeoutError, match="waited 0.05 s for 12 rows"):
        dock.get("train", ["reward"], 12, "step-0", timeout=0.05)
    after = snapshot(dock)
    assert after["consumers"]["train"].pop("timeouts") == 1
    before["consumers"]["train"].pop("timeouts")
    assert after == before


def test_schema_grows_while_running_and_partitions_clear_and_drop():
    dock = make_dock()
    put_all(dock, responses(16))
    dock.add_column(Column("advantages", np.float32, ragged=True))
    dock.add_consumer("critic")
    dock.put("step-0", {"advantages": [np.ones(3)] * 16}, rows=range(16))
    assert len(dock.get("critic", ["advantages", "reward"], 16, "step-0")) == 16
    dock.clear("step-0")
    assert dock.stats()["partitions"]["step-0"]["ready"]["reward"] == 0
    put_all(dock, responses(16))  # writable again after clear
    dock.drop_partition("step-0")
    assert dock.partitions == {}


def test_async_put_and_get():
    dock = make_dock()

    async def run():
        getter = asyncio.create_task(dock.aget("train", ["reward"], 16, "step-0", timeout=5))
        await asyncio.sleep(0.05)
        await dock.aput("step-0", {"reward": np.arange(16)}, rows=np.arange(16))
        return await getter

    assert asyncio.run(run()).rows.tolist() == list(range(16))


# -- samplers ---------------------------------------------------------------------------------------


def test_rank_slices_keep_order_whatever_order_rows_arrive_in():
    dock = make_dock(prompts=8)  # 32 rows; 2 ranks x 4 rows = global batches of 8
    for row in reversed(range(32)):
        dock.put("step-0", {"reward": [row]}, rows=[row])
    seen = {0: [], 1: []}
    for rank in (0, 1):
        while batch := dock.get("train", ["reward"], 4, "step-0", sampler=RankSlices(rank, 2), timeout=1):
            seen[rank].append(batch.rows.tolist())
    assert seen[0] == [[0, 1, 2, 3], [8, 9, 10, 11], [16, 17, 18, 19], [24, 25, 26, 27]]
    assert seen[1] == [[4, 5, 6, 7], [12, 13, 14, 15], [20, 21, 22, 23], [28, 29, 30, 31]]


def test_rank_slice_waits_for_its_own_rows_only():
    dock = make_dock(prompts=2)
    dock.put("step-0", {"reward": np.zeros(4)}, rows=[4, 5, 6, 7])
    assert dock.get(
        "train", ["reward"], 4, "step-0", sampler=RankSlices(data_parallel_rank=1, data_parallel_size=2), timeout=1
    ).rows.tolist() == [4, 5, 6, 7]
    with pytest.raises(tp.DockTimeout):
        dock.get("train", ["reward"], 4, "step-0", sampler=RankSlices(0, 2), timeout=0.05)


def test_random_rows_reproducible_for_a_seed():
    picks = []
    for _ in range(2):
        dock = make_dock(prompts=8)
        put_all(dock, responses(32))
        sampler = RandomRows(seed=3)
        picks.append([dock.get("train", ["reward"], 8, "step-0", sampler=sampler).rows.tolist() for _ in range(4)])
    assert picks[0] == picks[1]
    assert sorted(sum(picks[0], [])) == list(range(32)) and picks[0][0] != list(range(8))


def test_prompt_groups_hand_out_whole_groups_only():
    dock = make_dock(prompts=4)
    dock.put("step-0", {"reward": np.zeros(7)}, rows=range(7))  # group 1 is missing row 7
    batch = dock.get("train", ["reward"], 4, "step-0", sampler=PromptGroups(), timeout=1)
    assert batch.rows.tolist() == [0, 1, 2, 3]
    with pytest.raises(tp.DockTimeout):
        dock.get("train", ["reward"], 4, "step-0", sampler=PromptGroups(), timeout=0.05)
    dock.put("step-0", {"reward": np.zeros(9)}, rows=range(7, 16))
    batch = dock.get("train", ["reward"], 8, "step-0", sampler=PromptGroups(seed=1), timeout=1)
    assert sorted(set(batch.prompts.tolist())) in ([1, 2], [1, 3], [2, 3]) and len(batch) == 8
    with pytest.raises(tp.ConfigError, match="multiple of n_samples_per_prompt"):
        dock.get("train", ["reward"], 6, "step-0", sampler=PromptGroups())


def test_balanced_splits_equal_counts_of_near_equal_work():
    dock = make_dock(prompts=16)  # 64 rows
    rng = np.random.default_rng(2)
    rows = [np.zeros(int(n), np.int32) for n in rng.lognormal(5, 1, 64).astype(int) + 1]
    dock.put("step-0", {"responses": rows}, rows=range(64))
    batch = dock.get(
        "train", ["responses"], 64, "step-0", sampler=Balanced(data_parallel_size=4, length_column="responses")
    )
    parts = batch.split(4)
    assert [len(p) for p in parts] == [16] * 4
    loads = [int(p["responses"].lengths.sum()) for p in parts]
    assert (max(loads) - min(loads)) / np.mean(loads) < 0.01
    assert sorted(np.concatenate([p.rows for p in parts]).tolist()) == list(range(64))
    assert [p.rows.tolist() for p in batch.split(np.int64(4))] == [p.rows.tolist() for p in parts]
    with pytest.raises(tp.ConfigError, match="parts=True"):
        batch.split(True)


def test_callable_sampler_and_one_that_breaks_the_contract():
    dock = make_dock()
    put_all(dock, responses(16))

    def evens_return_all_consume(request: SampleRequest):
        evens = request.eligible[request.eligible % 2 == 0][:2]
        return request.eligible[:4], evens

    batch = dock.get("train", ["reward"], 4, "step-0", sampler=evens_return_all_consume)
    assert batch.rows.tolist() == [0, 1, 2, 3]
    assert dock.stats()["partitions"]["step-0"]["consumed"]["train"] == 2
    with pytest.raises(tp.ConfigError, match="sampler returned row 99"):
        dock.get("train", ["reward"], 4, "step-0", sampler=lambda r: (np.array([99]), np.array([99])))


def test_exact_rows():
    dock = make_dock()
    put_all(dock, responses(16))
    assert dock.get("ref", ["reward"], 3, "step-0", rows=[9, 2, 5]).rows.tolist() == [9, 2, 5]
    with pytest.raises(tp.ConfigError, match="row 2 of partition 'step-0' is already consumed"):
        dock.get("ref", ["reward"], 1, "step-0", rows=[2])


# -- leases -----------------------------------------------------------------------------------------


def test_lease_ack_consumes_and_nack_returns():
    dock = make_dock()
    put_all(dock, responses(16))
    first = dock.get("train", ["reward"], 4, "step-0", lease=60)
    assert first.lease_id is not None and not dock.all_consumed("train", "step-0")
    second = dock.get("train", ["reward"], 4, "step-0", lease=60)
    assert second.rows.tolist() == [4, 5, 6, 7]  # leased rows are not handed out twice
    dock.nack(first.lease_id)
    assert dock.get("train", ["reward"], 4, "step-0").rows.tolist() == [0, 1, 2, 3]
    dock.ack(second.lease_id)
    assert dock.stats()["partitions"]["step-0"]["consumed"]["train"] == 8
    with pytest.raises(tp.ConfigError, match="lease .* is not held"):
        dock.ack(second.lease_id)


def test_rows_of_a_dead_consumer_are_redelivered_after_expiry():
    dock = make_dock()
    put_all(dock, responses(16))
    taken = dock.get("train", ["reward"], 16, "step-0", lease=0.2)  # this worker then "dies"
    began = time.monotonic()
    again = dock.get("train", ["reward"], 16, "step-0", timeout=5)  # another worker waits for them
    assert 0.15 < time.monotonic() - began < 2
    assert again.rows.tolist() == taken.rows.tolist()
    assert dock.stats()["consumers"]["train"]["redelivered"] == 16
    with pytest.raises(tp.ConfigError, match="expired"):
        dock.ack(taken.lease_id)
    assert dock.get("train", ["reward"], 1, "step-0") is None  # consumed once, not twice


def test_a_worker_that_dies_holding_a_lease_loses_no_rows():
    dock = make_dock(prompts=8)
    put_all(dock, responses(32))
    delivered: list[int] = []
    lock = threading.Lock()

    def worker(dies: bool):
        while (batch := dock.get("train", ["reward"], 4, "step-0", lease=0.3, timeout=5)) is not None:
            if dies:
                return  # holds its lease and never acknowledges
            with lock:
                delivered.extend(batch.rows.tolist())
            dock.ack(batch.lease_id)

    threads = [threading.Thread(target=worker, args=(i == 0,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert sorted(delivered) == list(range(32))


# -- concurrency ------------------------------------------------------------------------------------


def test_32_producers_8_consumers_every_row_exactly_once_to_every_consumer():
    consumers = [f"stage-{i}" for i in range(8)]
    dock = Dock([Column("tokens", np.int32, ragged=True), Column("value", np.int64)], consumers, n_samples_per_prompt=8)
    rows_per_partition = 8 * 64
    dock.add_partition("p", num_prompts=64)
    rows = np.random.default_rng(0).permutation(rows_per_partition)
    chunks = np.array_split(rows, 32 * 4)
    producers = [chunks[i::32] for i in range(32)]
    received = {c: [] for c in consumers}

    def produce(mine):
        for chunk in mine:
            dock.put("p", {"tokens": [np.full(int(r % 17), r, np.int32) for r in chunk], "value": chunk}, rows=chunk)

    def consume(name):
        while (batch := dock.get(name, ["tokens", "value"], 24, "p", timeout=20)) is not None:
            for row, value, tokens in zip(batch.rows.tolist(), batch["value"].tolist(), batch["tokens"].to_list()):
                assert row == value and (tokens == row).all() and len(tokens) == row % 17
            received[name].extend(batch.rows.tolist())

    threads = [threading.Thread(target=produce, args=(m,)) for m in producers]
    threads += [threading.Thread(target=consume, args=(c,)) for c in consumers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for name in consumers:
        assert sorted(received[name]) == list(range(rows_per_partition)), name
        assert dock.all_consumed(name, "p")


# -- bad input --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda d: d.put("step-0", {"nope": np.zeros(2)}, rows=[0, 1]), "unknown column 'nope'"),
        (lambda d: d.put("step-9", {"reward": np.zeros(2)}, rows=[0, 1]), "partition 'step-9' does not exist"),
        (lambda d: d.put("step-0", {"reward": np.zeros(2)}, rows=[0, 16]), "row 16 is out of range"),
        (lambda d: d.put("step-0", {"reward": np.zeros(2)}, rows=[3, 3]), "row id twice"),
        (lambda d: d.put("step-0", {"reward": np.zeros(3)}, rows=[0, 1]), r"shape \(3,\), expected \(2,\)"),
        (lambda d: d.put("step-0", {"embedding": np.zeros((2, 4))}, rows=[0, 1]), r"expected \(2, 3\)"),
        (lambda d: d.put("step-0", {"responses": [np.zeros(2, np.float64)] * 2}, rows=[0, 1]), "does not fit"),
        (lambda d: d.put("step-0", {"responses": np.zeros((2, 5), np.int32)}, rows=[0, 1]), "is ragged"),
        (lambda d: d.put("step-0", {"reward": np.zeros(2), "responses": [[1]]}, rows=[0, 1]), "1 rows of data"),
        (lambda d: d.put("step-0", {"reward": np.zeros(2)}, rows=[4, 5]), "row 4: column 'reward' is already"),
        (lambda d: d.get("nobody", ["reward"], 1, "step-0"), "unknown consumer 'nobody'"),
        (lambda d: d.get("train", ["nope"], 1, "step-0"), "unknown column 'nope'"),
        (lambda d: d.get("train", ["reward"], 17, "step-0"), "more than partition 'step-0' holds"),
        (lambda d: d.get("train", ["reward"], 0, "step-0"), "count=0"),
        (lambda d: d.get("train", ["reward"], 1, "step-0", timeout=-1), "timeout=-1"),
        (lambda d: d.get("train", ["reward"], 1, "step-0", timeout="1"), "timeout='1' is invalid"),
        (lambda d: d.get("train", ["reward"], 1, "step-0", lease=float("inf")), "lease=inf is invalid"),
        (lambda d: d.get("train", ["reward"], 1, "step-0", sampler=5), "sampler=5 is not callable"),
        (lambda d: d.get("train", "reward", 1, "step-0"), "columns='reward': pass a list of column names"),
        (lambda d: d.put("step-0", {"reward": np.zeros(2)}, rows=5), r"rows: expected a 1-D sequence .* shape \(\)"),
        (lambda d: d.put("step-0", {"reward": np.zeros(2)}, rows=[[0], [1, 2]]), "rows: not a regular array"),
        (lambda d: d.put("step-0", {"responses": None}, rows=[0]), "column 'responses' is ragged: pass a list"),
        (lambda d: d.put("step-0", {"responses": [[1, [2]]]}, rows=[0]), r"'responses': rows\[0\]: not a regular"),
        (lambda d: d.put("step-0", {"embedding": [[1, 2, [3]]]}, rows=[0]), "column 'embedding': not a regular"),
        (
            lambda d: d.get("train", ["reward"], 1, "step-0", sampler=lambda r: (np.array([4.5]),) * 2),
            r"returned \(array\(\[4.5\]\).*1-D integer row ids",
        ),
        (lambda d: d.nack(12345), "lease 12345 is not held"),
    ],
)
def test_bad_input_is_a_clear_error_and_leaves_the_dock_unchanged(call, match):
    dock = make_dock()
    dock.put("step-0", {"reward": np.zeros(4), "responses": [np.ones(2, np.int32)] * 4}, rows=[4, 5, 6, 7])
    before = snapshot(dock)
    data_before = dock.get("ref", ["reward", "responses"], 4, "step-0", rows=[4, 5, 6, 7])
    dock = make_dock()
    dock.put("step-0", {"reward": np.zeros(4), "responses": [np.ones(2, np.int32)] * 4}, rows=[4, 5, 6, 7])
    with pytest.raises(tp.ConfigError, match=match):
        call(dock)
    assert snapshot(dock) == before
    after = dock.get("ref", ["reward", "responses"], 4, "step-0", rows=[4, 5, 6, 7])
    assert np.array_equal(after["reward"], data_before["reward"])
    assert np.array_equal(after["responses"].values, data_before["responses"].values)


def test_overwrite_replaces_a_written_cell():
    dock = make_dock()
    dock.put("step-0", {"responses": [np.ones(3, np.int32)]}, rows=[0])
    dock.put("step-0", {"responses": [np.full(5, 7, np.int32)]}, rows=[0], overwrite=True)
    assert dock.get("train", ["responses"], 1, "step-0", rows=[0])["responses"].values.tolist() == [7] * 5


def typed_dock() -> Dock:
    """One column per dtype family: int32 fixed, uint8 vectors, int32 and float16 ragged, float32, bool."""
    dock = Dock(
        [
            Column("x", np.int32),
            Column("u", np.uint8, shape=(2,)),
            Column("t", np.int32, ragged=True),
            Column("h", np.float16, ragged=True),
            Column("f", np.float32),
            Column("b", bool),
        ],
        ["c"],
    )
    dock.add_partition("p", num_prompts=2)
    return dock


BIG = 2**40  # numpy's same_kind cast stores it in an int32 as 0


@pytest.mark.parametrize(
    "values, match",
    [
        ({"x": np.array([BIG, 1])}, "value 1099511627776 does not fit its dtype int32 .its range is -2147483648"),
        ({"x": np.array([2**64 - 1, 1], np.uint64)}, "value 18446744073709551615 does not fit its dtype int32"),
        ({"x": [7, 2**31]}, "value 2147483648 does not fit its dtype int32"),
        ({"x": [7, 2**70]}, "dtype object does not fit int32 .integers beyond 64 bits"),
        ({"x": [1.0, 2.0]}, "dtype float64 does not fit int32; pass integers"),
        ({"x": np.array([np.nan, 1.0])}, "dtype float64 does not fit int32"),
        ({"x": ["1", "2"]}, "dtype <U1 does not fit int32"),
        ({"b": [1, 0]}, "dtype int64 does not fit bool; pass booleans"),
        ({"u": [[1, 2], [3, -1]]}, r"column 'u': value -1 does not fit its dtype uint8 .its range is 0\.\.255"),
        ({"u": np.full((2, 2), 256, np.uint16)}, r"value 256 does not fit its dtype uint8 .its range is 0\.\.255; 4 "),
        ({"t": [np.array([1, BIG]), np.array([2])]}, "column 't': value 1099511627776 does not fit its dtype int32"),
        ({"t": Packed(np.array([1, 2, -BIG]), [2, 1])}, "column 't': value -1099511627776 does not fit"),
        ({"t": Padded(np.array([[1, 0], [BIG, 0]]), [1, 1])}, "column 't': value 1099511627776 does not fit"),
        ({"f": np.array([1e300, 0.0])}, "column 'f': value 1e\\+300 does not fit its dtype float32 .it would overflow"),
        ({"h": [np.array([70000]), np.array([1])]}, "column 'h': value 70000 does not fit its dtype float16"),
        ({"h": Padded(np.array([[1.0, 0.0], [-1e6, 0.0]]), [1, 2])}, "value -1000000.0 does not fit its dtype float16"),
    ],
)
def test_values_that_do_not_fit_the_column_are_refused_and_change_nothing(values, match):
    dock = typed_dock()
    with pytest.raises(tp.ConfigError, match=match):
        dock.put("p", {"x": np.array([5, 6], np.int32), **values}, rows=[0, 1])
    assert all(count == 0 for count in dock.stats()["partitions"]["p"]["ready"].values())


def test_values_that_fit_are_stored_exactly_whatever_their_dtype():
    dock = typed_dock()
    low, high = np.iinfo(np.int32).min, np.iinfo(np.int32).max
    dock.put(
        "p",
        {
            "x": np.array([low, high], np.int64),
            "u": [[0, 255], [True, 7]],  # Python ints (int64) and a bool, all within uint8
            "t": Padded(np.array([[1, BIG], [2**31 - 1, -1]]), [1, 2]),  # padding may hold anything
            "h": [np.array([65504.0, -np.inf, np.nan]), np.array([1e-9])],  # rounding, inf and nan are kept
            "f": np.array([1 / 3, 2**24 + 1]),  # float64 and beyond-24-bit values round to float32
            "b": np.array([True, False]),
        },
        rows=[0, 1],
    )
    batch = dock.get("c", ["x", "u", "t", "h", "f", "b"], 2, "p")
    assert batch["x"].tolist() == [low, high] and batch["x"].dtype == np.int32
    assert batch["u"].tolist() == [[0, 255], [1, 7]]
    assert batch["t"].values.tolist() == [1, 2**31 - 1, -1] and batch["t"].lengths.tolist() == [1, 2]
    assert np.array_equal(batch["h"].values, np.array([65504, -np.inf, np.nan, 1e-9], np.float16), equal_nan=True)
    assert batch["f"].tolist() == [np.float32(1 / 3), np.float32(2**24)]
    assert batch["b"].tolist() == [True, False]


DTYPES = [
    np.dtype(t)
    for t in (
        bool,
        np.int8,
        np.uint8,
        np.int16,
        np.uint16,
        np.int32,
        np.uint32,
        np.int64,
        np.uint64,
        np.float16,
        np.float32,
        np.float64,
    )
]


def edge_values(source: np.dtype, target: np.dtype) -> np.ndarray:
    """Values of ``source`` at and around its own and ``target``'s limits (those ``source`` holds)."""
    if source.kind == "b":
        return np.array([False, True])
    if source.kind == "f":
        candidates = [0.0, 0.5, -1.0, np.nan, np.inf, -np.inf, float(np.finfo(source).max), 1e300, 70000.0]
    else:
        candidates = [0, 1, -1, 2**40, -(2**40), int(np.iinfo(source).min), int(np.iinfo(source).max)]
    if target.kind in "iu":
        info = np.iinfo(target)
        candidates += [int(info.min) - 1, int(info.min), int(info.max), int(info.max) + 1]
    elif target.kind == "f":
        candidates += [float(np.finfo(target).max), float(np.finfo(target).max) * 2]
    kept = []
    for value in candidates:
        with np.errstate(all="ignore"):
            try:
                array = np.array([value], dtype=source)
            except OverflowError:
                continue
            if array[0] == value or (isinstance(value, float) and np.isnan(value)):
                kept.append(array[0])
    return np.array(kept, dtype=source)


def fits(value, source: np.dtype, target: np.dtype) -> bool:
    """Whether ``target`` holds ``value`` (an item of ``source``), judged in Python numbers."""
    if target.kind == "b" or source.kind not in "biuf":
        return source.kind == "b" and target.kind == "b"
    if target.kind in "iu":
        info = np.iinfo(target)
        return source.kind != "f" and info.min <= int(value) <= info.max
    number = float(value)
    if math.isnan(number) or math.isinf(number):
        return True
    largest = float(np.finfo(target).max)
    ulp = largest - float(np.nextafter(np.array(largest, target), np.array(0, target)))
    return abs(number) < largest + ulp / 2  # rounds to the largest finite value, not to inf


@pytest.mark.parametrize("target", DTYPES, ids=str)
def test_every_dtype_pair_stores_the_value_put_or_refuses_it(target):
    dock = Dock([Column("v", target), Column("r", target, ragged=True)], ["c"])
    dock.add_partition("p", num_prompts=1)
    for source in DTYPES:
        for value in edge_values(source, target):
            for name, data in (("v", np.array([value])), ("r", [np.array([value])])):
                expected = fits(value, source, target)
                try:
                    dock.put("p", {name: data}, rows=[0], overwrite=True)
                except tp.ConfigError:
                    assert not expected, (source, target, value)
                    continue
                assert expected, (source, target, value)
                stored = dock.get("c", [name], 1, "p", rows=[0])[name]
                stored = (stored.values if name == "r" else stored)[0]
                dock.clear("p")
                if target.kind in "iub":
                    assert int(stored) == int(value), (source, target, value)
                else:
                    assert np.array_equal(stored, target.type(value), equal_nan=True), (source, target, value)


# -- helpers ----------------------------------------------------------------------------------------


def test_pack_pad_truncate_round_trips():
    rows = responses(9, seed=4) + [np.zeros(0, np.int32)]
    packed = tp.dock.pack(rows)
    assert [a.tolist() for a in packed.to_list()] == [r.tolist() for r in rows]
    padded = tp.dock.pad(packed, pad_value=-1, multiple_of=16)
    assert padded.values.shape == (10, 48) and padded.mask.sum() == len(packed.values)
    assert [a.tolist() for a in padded.packed().to_list()] == [r.tolist() for r in rows]
    assert tp.dock.pad(rows, length=50).values.shape == (10, 50)
    head = tp.dock.truncate(packed, 5)
    tail = tp.dock.truncate(packed, 5, keep="tail")
    assert [a.tolist() for a in head.to_list()] == [r[:5].tolist() for r in rows]
    assert [a.tolist() for a in tail.to_list()] == [r[max(0, len(r) - 5) :].tolist() for r in rows]
    vectors = tp.dock.pack([np.ones((2, 4)), np.zeros((3, 4))])
    assert tp.dock.pad(vectors).values.shape == (2, 3, 4) and vectors.row(1).shape == (3, 4)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: Packed(np.zeros(3), [1, 1]), "lengths add up to 2"),
        (lambda: Packed(np.zeros(3), [4, -1]), "negative length"),
        (lambda: Padded(np.zeros((2, 3)), [1, 4]), r"lengths\[1\] = 4 is outside"),
        (lambda: tp.dock.pad([np.zeros(5)], length=3), "truncate first"),
        (lambda: tp.dock.pad([np.zeros(5)], multiple_of=0), "multiple_of=0"),
        (lambda: tp.dock.pack([np.zeros((2, 2)), np.zeros((2, 3))]), "different item shapes"),
        (lambda: tp.dock.truncate(tp.dock.pack([np.zeros(2)]), 1, keep="middle"), "keep='middle'"),
        (lambda: tp.dock.pack([np.array([1, BIG])], dtype=np.int32), r"pack\(rows, dtype\): value 1099511627776 does"),
        (lambda: tp.dock.pad([np.ones(2, np.uint8)], pad_value=-1), "pad_value: value -1 does not fit its dtype uint8"),
        (lambda: tp.dock.pad([np.ones(2, np.uint8)], pad_value=np.int64(BIG)), "pad_value: value 1099511627776"),
        (lambda: tp.dock.pad([np.ones(2, np.int32)], pad_value=np.nan), "pad_value: dtype float64 does not fit int32"),
    ],
)
def test_helpers_reject_bad_input(make, match):
    with pytest.raises(tp.ConfigError, match=match):
        make()


def test_batch_to_torch():
    torch = pytest.importorskip("torch")
    dock = make_dock()
    rows = responses(16)
    put_all(dock, rows)
    tensors = dock.get("train", ["responses", "reward"], 4, "step-0").to_torch()
    assert tensors["responses"].dtype == torch.int32 and tensors["responses_lengths"].tolist() == [
        len(r) for r in rows[:4]
    ]
    assert tensors["reward"].tolist() == [0, 1, 2, 3]


def test_reads_of_rows_end_to_end_are_read_only_views_that_later_writes_leave_intact():
    dock = make_dock()
    rows = responses(16, seed=5)
    dock.put("step-0", {"responses": rows}, rows=range(16))
    batch = dock.get("train", ["responses"], 8, "step-0")
    values = batch["responses"].values
    assert not values.flags.writeable and not values.flags.owndata  # no copy was made
    with pytest.raises(ValueError):
        values[:1] = 0
    kept = values.copy()
    dock.put("step-0", {"responses": [np.full(5000, 9, np.int32)] * 16}, rows=range(16), overwrite=True)  # grows
    dock.clear("step-0")
    assert np.array_equal(batch["responses"].values, kept)
    shuffled = make_dock()
    shuffled.put("step-0", {"responses": rows}, rows=range(16))
    picked = shuffled.get("train", ["responses"], 3, "step-0", rows=[5, 1, 9])
    assert picked["responses"].values.flags.writeable  # not end to end: a gathered copy
    assert [a.tolist() for a in picked["responses"].to_list()] == [rows[5].tolist(), rows[1].tolist(), rows[9].tolist()]


# -- partial rollout --------------------------------------------------------------------------------


def test_unfinished_rows_go_back_to_rollout_and_age_until_max_age():
    dock = Dock(
        [Column("prompts", np.int32, ragged=True), Column("responses", np.int32, ragged=True)],
        ["rollout", "train"],
        n_samples_per_prompt=2,
        max_age=2,
    )
    dock.add_partition("p", num_prompts=2)
    dock.put("p", {"prompts": [np.arange(3, dtype=np.int32)] * 4}, rows=range(4))
    taken = dock.get("rollout", ["prompts"], 4, "p")
    done = np.array([True, False, True, False])
    dock.put("p", {"responses": [np.ones(k + 1, np.int32) for k in range(4)]}, rows=taken.rows, completed=done)
    first = dock.get("train", ["responses"], 2, "p", timeout=1)  # only finished rows are visible
    assert first.rows.tolist() == [0, 2] and first.ages.tolist() == [0, 0]
    with pytest.raises(tp.DockTimeout):
        dock.get("train", ["responses"], 2, "p", timeout=0.05)  # the rest is still being generated
    again = dock.get("rollout", ["prompts", "responses"], 4, "p", unfinished=True)
    assert again.rows.tolist() == [1, 3] and again.ages.tolist() == [1, 1]
    assert dock.get("rollout", ["prompts"], 4, "p", unfinished=True) is None  # none left to continue
    dock.put("p", {"responses": [np.ones(9, np.int32)] * 2}, rows=[1, 3], overwrite=True, completed=[True, False])
    assert dock.get("train", ["responses"], 1, "p", timeout=1).rows.tolist() == [1]
    row3 = dock.get("rollout", ["responses"], 4, "p", unfinished=True)
    assert row3.rows.tolist() == [3] and row3.ages.tolist() == [2]
    dock.put("p", {"responses": [np.ones(2, np.int32)]}, rows=[3], overwrite=True, completed=False)  # age 3 > 2
    last = dock.get("train", ["responses"], 1, "p", timeout=1)
    assert last.rows.tolist() == [3] and last.ages.tolist() == [3]  # counted as finished: never stale for ever
    assert dock.all_consumed("train", "p")
    with pytest.raises(tp.ConfigError, match="completed: expected True/False or 2 booleans"):
        dock.put("p", {"responses": [np.ones(2, np.int32)] * 2}, rows=[0, 1], overwrite=True, completed=[True])


# -- checkpoints ------------------------------------------------------------------------------------


def test_checkpoint_restores_data_and_progress_and_returns_leased_rows(tmp_path):
    dock = make_dock(prompts=4)
    rows = responses(16, seed=7)
    put_all(dock, rows)
    dock.add_partition("step-1", num_prompts=1)
    dock.put("step-1", {"reward": np.ones(4)}, rows=range(4), completed=[True, False, True, True])
    dock.get("train", ["reward"], 6, "step-0")
    leased = dock.get("train", ["reward"], 2, "step-0", lease=60)
    dock.save(tmp_path / "ckpt")
    dock.save(tmp_path / "ckpt")  # saving again replaces it whole
    restored = Dock.load(tmp_path / "ckpt")
    assert restored.partitions == {"step-0": 16, "step-1": 4} and restored.max_age is None
    rest = restored.get("train", ["responses", "logp", "reward", "embedding"], 10, "step-0")
    assert rest.rows.tolist() == leased.rows.tolist() + list(range(8, 16))  # leased rows came back
    assert [a.tolist() for a in rest["responses"].to_list()] == [rows[i].tolist() for i in rest.rows]
    assert rest["reward"].tolist() == rest.rows.tolist() and rest["embedding"].shape == (10, 3)
    assert restored.get("ref", ["reward"], 16, "step-0").rows.tolist() == list(range(16))
    assert restored.get("train", ["reward"], 3, "step-1", timeout=1).rows.tolist() == [0, 2, 3]  # 1 is unfinished
    assert not (tmp_path / "ckpt.old").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_checkpoint_errors_name_the_problem(tmp_path):
    with pytest.raises(tp.ConfigError, match="no dock checkpoint here"):
        Dock.load(tmp_path / "missing")
    dock = make_dock()
    dock.save(tmp_path / "ckpt")
    (tmp_path / "ckpt" / "dock.json").write_text("{not json")
    with pytest.raises(tp.CorruptStoreError, match="dock.json: not valid JSON"):
        Dock.load(tmp_path / "ckpt")


@pytest.mark.parametrize(
    "key, damage, match",
    [
        ("fixed/reward", lambda a: a.astype(np.float64), r"fixed/reward has dtype float64 and shape \(16,\), the dock"),
        ("ragged/responses/values", lambda a: a.astype(np.int64) + 2**40, "ragged/responses/values has dtype int64"),
        ("ragged/responses/lengths", lambda a: a[:-1], r"ragged/responses/lengths has dtype int64 and shape \(15,\)"),
        ("ready/reward", lambda a: a.astype(np.uint8), "ready/reward has dtype uint8"),
        ("age", lambda a: a.astype(np.int32), "age has dtype int32"),
    ],
)
def test_a_checkpoint_array_of_another_dtype_or_shape_is_refused_not_cast(tmp_path, key, damage, match):
    dock = make_dock()
    put_all(dock, responses(16))
    dock.save(tmp_path / "ckpt")
    file = tmp_path / "ckpt" / "partition-00000.npz"
    with np.load(file) as saved:
        arrays = dict(saved)
    arrays[key] = damage(arrays[key])
    np.savez(file, **arrays)
    with pytest.raises(tp.CorruptStoreError, match="partition-00000.npz: " + match):
        Dock.load(tmp_path / "ckpt")


@pytest.mark.parametrize("columns, consumers", [(None, ["a"]), ([Column("x", np.int32)], None), ([], "ab")])
def test_columns_or_consumers_not_a_list_are_a_config_error(columns, consumers):
    with pytest.raises(tp.ConfigError, match="pass a list"):
        Dock(columns, consumers)
