"""The dock on a local Ray: a GRPO-shaped pipeline across processes, leases of killed actors, errors."""

from __future__ import annotations

import asyncio
import inspect
import sys
import tempfile
import time

import numpy as np
import pytest

import tokenport as tp
from tokenport.dock import Balanced, Column, Dock, DockAPI, Packed, PromptGroups, RandomRows, RankSlices, Sequential

ray = pytest.importorskip("ray")
from tokenport.dock.ray import RayDock  # noqa: E402

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this test module

GROUP = 4  # responses per prompt
PROMPTS = 6  # prompts per step
COLUMNS = [
    Column("prompts", np.int32, ragged=True),
    Column("responses", np.int32, ragged=True),
    Column("ref_log_prob", np.float32, ragged=True),
    Column("reward", np.float32),
    Column("advantages", np.float32),
]
STAGES = ["rollout", "reference", "reward", "advantage", "train"]


# -- the computation, shared by the pipeline and the single-process check ----------------------------


def prompt_tokens(step: int) -> list[np.ndarray]:
    rng = np.random.default_rng(step)
    prompts = [rng.integers(3, 1000, int(rng.integers(4, 30))).astype(np.int32) for _ in range(PROMPTS)]
    return [p for p in prompts for _ in range(GROUP)]  # each prompt's row repeated for its group


def respond(prompt: np.ndarray, row: int) -> np.ndarray:
    rng = np.random.default_rng([int(prompt.sum()), row])
    return rng.integers(3, 50_000, int(rng.integers(1, 300))).astype(np.int32)


def reference_log_prob(response: np.ndarray) -> np.ndarray:
    return (-np.log1p(response % 97) / 5).astype(np.float32)


def reward_of(response: np.ndarray) -> np.float32:
    return np.float32((int(response.sum()) % 13) / 13)


def group_advantages(rewards: np.ndarray) -> np.ndarray:
    return ((rewards - rewards.mean()) / (rewards.std() + 1e-6)).astype(np.float32)


def objective(advantage: np.float32, log_prob: np.ndarray) -> float:
    return float(advantage) * float(log_prob.astype(np.float64).sum())


def single_process(step: int) -> dict[int, float]:
    prompts = prompt_tokens(step)
    responses = [respond(p, row) for row, p in enumerate(prompts)]
    rewards = np.array([reward_of(r) for r in responses], dtype=np.float32)
    advantages = np.concatenate([group_advantages(g) for g in rewards.reshape(-1, GROUP)])
    return {row: objective(advantages[row], reference_log_prob(r)) for row, r in enumerate(responses)}


# -- the stages, each a Ray actor in its own process ------------------------------------------------


class Stage:
    def __init__(self, dock: RayDock) -> None:
        self.dock = dock

    def rollout(self, partition: str) -> int:
        served = 0
        while (
            batch := self.dock.get("rollout", ["prompts"], 2 * GROUP, partition, sampler=PromptGroups(), timeout=60)
        ) is not None:
            responses = [respond(p, row) for p, row in zip(batch["prompts"].to_list(), batch.rows.tolist())]
            self.dock.put(partition, {"responses": responses}, rows=batch.rows)
            served += len(batch)
        return served

    def reference(self, partition: str) -> int:
        served = 0
        while (batch := self.dock.get("reference", ["responses"], 5, partition, timeout=60)) is not None:
            log_probs = [reference_log_prob(r) for r in batch["responses"].to_list()]
            self.dock.put(partition, {"ref_log_prob": log_probs}, rows=batch.rows)
            served += len(batch)
        return served

    def reward(self, partition: str) -> int:
        served = 0
        while (batch := self.dock.get("reward", ["responses"], 7, partition, timeout=60)) is not None:
            rewards = np.array([reward_of(r) for r in batch["responses"].to_list()])
            self.dock.put(partition, {"reward": rewards}, rows=batch.rows)
            served += len(batch)
        return served

    def advantage(self, partition: str) -> int:
        served = 0
        while (
            batch := self.dock.get("advantage", ["reward"], GROUP, partition, sampler=PromptGroups(), timeout=60)
        ) is not None:
            self.dock.put(partition, {"advantages": group_advantages(batch["reward"])}, rows=batch.rows)
            served += len(batch)
        return served


@pytest.fixture(scope="module")
def pipeline(ray_session):
    dock = RayDock(COLUMNS, STAGES, n_samples_per_prompt=GROUP, shards=2)
    actor = ray.remote(Stage)
    stages = {name: actor.remote(dock) for name in ("rollout", "reference", "reward", "advantage")}
    yield dock, stages
    for handle in stages.values():
        ray.kill(handle)
    dock.shutdown()


def test_grpo_pipeline_across_processes_equals_a_single_process_run(pipeline):
    dock, stages = pipeline
    for step in range(3):
        partition = f"step-{step}"
        dock.add_partition(partition, num_prompts=PROMPTS)
        running = [getattr(stages[name], name).remote(partition) for name in stages]
        dock.put(partition, {"prompts": prompt_tokens(step)}, rows=np.arange(PROMPTS * GROUP))
        results: dict[int, float] = {}
        columns = ["responses", "ref_log_prob", "advantages"]
        while batch := dock.get("train", columns, 8, partition, sampler=Balanced(2, "responses"), timeout=60):
            ranks = batch.split(2)  # one part per data-parallel rank, equal counts
            assert len(ranks[0]) == len(ranks[1]) == 4
            for part in ranks:
                for row, advantage, log_prob in zip(
                    part.rows.tolist(), part["advantages"], part["ref_log_prob"].to_list()
                ):
                    results[row] = objective(advantage, log_prob)
        assert ray.get(running) == [PROMPTS * GROUP] * 4
        expected = single_process(step)
        assert results.keys() == expected.keys()
        assert all(results[row] == expected[row] for row in expected)  # bit-identical values
        assert dock.all_consumed("train", partition)
        dock.drop_partition(partition)
    assert dock.partitions == {}


def test_rows_leased_by_a_killed_actor_are_redelivered(ray_session):
    dock = RayDock([Column("x", np.int64)], ["train"], shards=2)
    dock.add_partition("p", num_prompts=8)
    dock.put("p", {"x": np.arange(8)}, rows=np.arange(8))

    class Holder:
        def take(self, dock: RayDock) -> list[int]:
            return dock.get("train", ["x"], 8, "p", lease=1.0).rows.tolist()

    holder = ray.remote(Holder).remote()
    assert ray.get(holder.take.remote(dock)) == list(range(8))
    ray.kill(holder)  # dies without acknowledging
    began = time.monotonic()
    batch = dock.get("train", ["x"], 8, "p", timeout=10)
    assert batch["x"].tolist() == list(range(8)) and time.monotonic() - began < 5
    assert dock.get("train", ["x"], 8, "p", timeout=1) is None
    dock.shutdown()


def test_errors_from_the_actors_arrive_as_tokenport_errors(ray_session):
    dock = RayDock([Column("x", np.int64), Column("t", np.int32, ragged=True)], ["train"], shards=2)
    dock.add_partition("p", num_prompts=4)
    dock.put("p", {"x": np.arange(4), "t": [np.ones(3, np.int32)] * 4}, rows=np.arange(4))
    with pytest.raises(tp.ConfigError, match="row 0: column 'x' is already written"):
        dock.put("p", {"x": np.arange(2)}, rows=[0, 1])
    with pytest.raises(tp.ConfigError, match="row 9 is out of range"):
        dock.put("p", {"x": np.arange(2)}, rows=[1, 9])
    with pytest.raises(tp.ConfigError, match="unknown column 'y'"):
        dock.put("p", {"y": np.arange(2)}, rows=[0, 1])
    with pytest.raises(tp.ConfigError, match="more than partition 'p' holds"):
        dock.get("train", ["x"], 5, "p")
    dock.add_partition("empty", num_prompts=4)
    with pytest.raises(tp.DockTimeout, match="waited 0.1 s for 2 rows of partition 'empty'"):
        dock.get("train", ["x"], 2, "empty", timeout=0.1)
    stats = dock.stats()
    assert stats["partitions"]["p"]["ready"] == {"x": 4, "t": 4}
    dock.shutdown()


class _Pick:
    """A sampler returning one fixed row (a plain class, so instances can share an id after collection)."""

    def __init__(self, row: int) -> None:
        self.row = row

    def __call__(self, request):
        chosen = np.array([self.row]) if self.row in request.eligible else np.zeros(0, np.int64)
        return chosen, chosen


def test_each_sampler_object_is_the_one_used_even_after_another_was_collected(ray_session):
    import gc

    dock = RayDock([Column("x", np.int64)], ["a"], shards=1)
    dock.add_partition("p", num_prompts=16)
    dock.put("p", {"x": np.arange(16)}, rows=np.arange(16))
    seen = []
    for row in (1, 15, 7, 3):
        sampler = _Pick(row)
        seen.append(dock.get("a", ["x"], 1, "p", sampler=sampler, timeout=5).rows.tolist())
        del sampler
        gc.collect()  # the next _Pick may reuse the id
    assert seen == [[1], [15], [7], [3]]
    dock.shutdown()


def test_checkpoint_of_a_ray_dock_restores_on_another_shard_count(ray_session, tmp_path):
    dock = RayDock(COLUMNS, STAGES, n_samples_per_prompt=GROUP, shards=2, max_age=3)
    dock.add_partition("p", num_prompts=PROMPTS)
    prompts = prompt_tokens(0)
    rows = np.arange(PROMPTS * GROUP)
    dock.put("p", {"prompts": prompts, "reward": np.arange(len(rows), dtype=np.float32)}, rows=rows)
    dock.put("p", {"responses": [respond(p, r) for r, p in enumerate(prompts)]}, rows=rows, completed=rows % 5 != 0)
    first = dock.get("train", ["responses", "reward"], 7, "p", timeout=5)
    dock.save(tmp_path / "ckpt")
    dock.shutdown()
    restored = RayDock.load(tmp_path / "ckpt", shards=3)
    rest = restored.get("train", ["responses", "reward", "prompts"], 12, "p", timeout=5)  # the finished rest
    finished = rows[rows % 5 != 0]
    assert sorted(first.rows.tolist() + rest.rows.tolist()) == finished.tolist()
    for row, response, prompt in zip(rest.rows.tolist(), rest["responses"].to_list(), rest["prompts"].to_list()):
        assert np.array_equal(response, respond(prompts[row], row)) and np.array_equal(prompt, prompts[row])
    unfinished = restored.get("rollout", ["responses"], 24, "p", unfinished=True)
    assert unfinished.rows.tolist() == rows[rows % 5 == 0].tolist() and set(unfinished.ages.tolist()) == {1}
    restored.shutdown()


# -- the same errors as Dock --------------------------------------------------------------------------

PARITY_COLUMNS = [
    Column("x", np.int32),
    Column("e", np.float32, shape=(3,)),
    Column("t", np.int32, ragged=True),
    Column("u", np.uint8),
]
TWO = np.arange(2)


def _float_rows(request):
    """A sampler that breaks the contract: row ids as floats (5.5 was read as row 5)."""
    return np.array([5.5]), np.array([5.5])


BAD_CALLS = {  # each a call that both docks must refuse with the same exception and message
    "rows=5": lambda d: d.put("p", {"x": np.zeros(1, np.int32)}, rows=5),
    "rows ragged": lambda d: d.put("p", {"x": np.zeros(2, np.int32)}, rows=[[0], [1, 2]]),
    "ragged None": lambda d: d.put("p", {"t": None}, rows=TWO),
    "rows 2-D": lambda d: d.put("p", {"x": np.zeros(2, np.int32)}, rows=[[0, 1]]),
    "rows floats": lambda d: d.put("p", {"x": np.zeros(2, np.int32)}, rows=[0.0, 1.0]),
    "rows empty": lambda d: d.put("p", {"x": np.zeros(0, np.int32)}, rows=[]),
    "row out of range": lambda d: d.put("p", {"x": np.zeros(2, np.int32)}, rows=[0, 8]),
    "row negative": lambda d: d.put("p", {"x": np.zeros(2, np.int32)}, rows=[-1, 0]),
    "row twice": lambda d: d.put("p", {"x": np.zeros(2, np.int32)}, rows=[3, 3]),
    "unknown column": lambda d: d.put("p", {"nope": np.zeros(2)}, rows=TWO),
    "no columns": lambda d: d.put("p", {}, rows=TWO),
    "columns not a dict": lambda d: d.put("p", [("x", np.zeros(2))], rows=TWO),
    "unknown partition": lambda d: d.put("q", {"x": np.zeros(2, np.int32)}, rows=TWO),
    "wrong row count": lambda d: d.put("p", {"x": np.zeros(3, np.int32)}, rows=TWO),
    "wrong shape": lambda d: d.put("p", {"e": np.zeros((2, 4))}, rows=TWO),
    "ragged given 2-D": lambda d: d.put("p", {"t": np.zeros((2, 5), np.int32)}, rows=TWO),
    "ragged row count": lambda d: d.put("p", {"t": [np.ones(2, np.int32)]}, rows=TWO),
    "fixed given ragged": lambda d: d.put("p", {"x": [np.ones(2, np.int32)] * 2}, rows=TWO),
    "out of range": lambda d: d.put("p", {"x": np.array([1, 2**40])}, rows=TWO),
    "uint64 out of range": lambda d: d.put("p", {"x": np.array([2**64 - 1, 0], np.uint64)}, rows=TWO),
    "negative unsigned": lambda d: d.put("p", {"u": [3, -3]}, rows=TWO),
    "ragged out of range": lambda d: d.put("p", {"t": [np.array([2**40]), np.array([1])]}, rows=TWO),
    "floats into ints": lambda d: d.put("p", {"x": [0.5, 1.0]}, rows=TWO),
    "strings into ints": lambda d: d.put("p", {"x": ["a", "b"]}, rows=TWO),
    "float overflow": lambda d: d.put("p", {"e": np.full((2, 3), 1e39)}, rows=TWO),
    "bad completed": lambda d: d.put("p", {"x": np.zeros(2, np.int32)}, rows=TWO, completed=[True]),
    "already written": lambda d: d.put("p", {"x": np.zeros(2, np.int32)}, rows=[5, 6]),
    "get unknown consumer": lambda d: d.get("nobody", ["x"], 1, "p"),
    "get unknown column": lambda d: d.get("train", ["nope"], 1, "p"),
    "get no columns": lambda d: d.get("train", [], 1, "p"),
    "get columns a string": lambda d: d.get("train", "x", 1, "p"),
    "get unknown partition": lambda d: d.get("train", ["x"], 1, "q"),
    "count 0": lambda d: d.get("train", ["x"], 0, "p"),
    "count a float": lambda d: d.get("train", ["x"], 1.5, "p"),
    "count past the partition": lambda d: d.get("train", ["x"], 9, "p"),
    "timeout negative": lambda d: d.get("train", ["x"], 1, "p", timeout=-1),
    "timeout a string": lambda d: d.get("train", ["x"], 1, "p", timeout="1"),
    "timeout nan": lambda d: d.get("train", ["x"], 1, "p", timeout=float("nan")),
    "lease 0": lambda d: d.get("train", ["x"], 1, "p", lease=0),
    "lease infinite": lambda d: d.get("train", ["x"], 1, "p", lease=float("inf")),
    "sampler not callable": lambda d: d.get("train", ["x"], 1, "p", sampler=5),
    "sampler returns floats": lambda d: d.get("train", ["x"], 1, "p", sampler=_float_rows),
    "get rows=5": lambda d: d.get("train", ["x"], 1, "p", rows=5),
    "get rows ragged": lambda d: d.get("train", ["x"], 1, "p", rows=[[0], [1, 2]]),
    "get row out of range": lambda d: d.get("train", ["x"], 1, "p", rows=[9]),
    "get rows without partition": lambda d: d.get("train", ["x"], 1, rows=[0]),
    "timed out": lambda d: d.get("train", ["e"], 2, "p", timeout=0.05),
    "ack unknown lease": lambda d: d.ack(12345),
    "nack a list": lambda d: d.nack([1]),
    "partition exists": lambda d: d.add_partition("p", 1),
    "partition unnamed": lambda d: d.add_partition("", 1),
    "no prompts": lambda d: d.add_partition("q", 0),
    "clear unknown": lambda d: d.clear("q"),
    "drop unknown": lambda d: d.drop_partition("q"),
    "column exists": lambda d: d.add_column(Column("x", np.int64)),
    "column not a Column": lambda d: d.add_column("y"),
    "consumer exists": lambda d: d.add_consumer("train"),
    "consumer unnamed": lambda d: d.add_consumer(""),
    "all_consumed unknown consumer": lambda d: d.all_consumed("nobody", "p"),
}


def refusal(call, dock) -> tuple[type, str]:
    """The type and message of the exception ``call(dock)`` raises."""
    try:
        call(dock)
    except Exception as error:  # noqa: BLE001 (any exception is compared, not only the expected one)
        return type(error), str(error)
    return type(None), "did not raise"


def test_ray_dock_refuses_bad_input_exactly_as_dock_does_and_changes_nothing(ray_session):
    docks = [
        Dock(PARITY_COLUMNS, ["train"], n_samples_per_prompt=2),
        RayDock(PARITY_COLUMNS, ["train"], n_samples_per_prompt=2, shards=2),
    ]
    for dock in docks:
        dock.add_partition("p", num_prompts=4)
        dock.put("p", {"x": np.array([5, 6], np.int32), "t": [np.arange(3, dtype=np.int32)] * 2}, rows=[5, 6])
    differ = {}
    for case, call in BAD_CALLS.items():
        raised = [refusal(call, dock) for dock in docks]
        if raised[0] != raised[1] or not issubclass(raised[0][0], tp.TokenportError):
            differ[case] = raised
    assert not differ
    for args in [(PARITY_COLUMNS, ["a", "a"]), (PARITY_COLUMNS, ["a"], 0), ([Column("x", np.int8)] * 2, ["a"])]:
        raised = []
        for make in (Dock, RayDock):
            with pytest.raises(tp.ConfigError) as error:
                make(*args)
            raised.append(str(error.value))
        assert raised[0] == raised[1], args
    stats = [dock.stats() for dock in docks]
    for counts in stats:
        for consumer in counts["consumers"].values():
            consumer.pop("wait_seconds")
    assert docks[1].held_objects() == {"objects": 1, "pinned": 1}  # the refused puts' objects were not kept
    assert stats[0] == stats[1] and stats[0]["partitions"]["p"]["ready"] == {"x": 2, "e": 0, "t": 2, "u": 0}
    for dock in docks:
        batch = dock.get("train", ["x", "t"], 2, "p", rows=[5, 6])
        assert batch["x"].tolist() == [5, 6] and batch["t"].values.tolist() == [0, 1, 2] * 2
    docks[1].shutdown()


# -- the same results as Dock -------------------------------------------------------------------------


def test_ray_dock_implements_every_member_of_dock_api_with_docks_signatures():
    """Methods checked on the classes; properties (plain attributes on a RayDock) on instances, by
    the isinstance of the workload test."""
    members = [name for name in dir(DockAPI) if not name.startswith("_")]
    assert {"aget", "aput", "columns", "consumers", "stats"} <= set(members)
    assert all(isinstance(getattr(RayDock, name), property) for name in ("columns", "consumers", "partitions"))
    for name in members:
        ours, theirs = getattr(Dock, name), getattr(RayDock, name, None)
        if not isinstance(ours, property):
            assert inspect.signature(ours) == inspect.signature(theirs), name
            assert inspect.iscoroutinefunction(ours) == inspect.iscoroutinefunction(theirs), name


def seen(value):
    """A value of a workload step in a form that compares by content (arrays by dtype and values)."""
    if isinstance(value, Packed):
        return ("packed", value.values.dtype.str, value.values.tolist(), value.lengths.tolist())
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.tolist())
    if isinstance(value, tp.dock.Batch):
        return (
            "batch",
            value.partition,
            value.rows.tolist(),
            value.lease_id,
            seen(value.ages),
            {name: seen(column) for name, column in value.columns.items()},
        )
    if isinstance(value, dict):
        return {key: seen(item) for key, item in value.items() if key != "wait_seconds"}
    if isinstance(value, (list, tuple)):
        return [seen(item) for item in value]
    return value


def workload(dock) -> list:
    """A scripted GRPO-like run with partial rollouts, leases, several samplers, schema changes and
    asyncio calls; every step's result (or error) in order, for comparison across docks."""
    log = []

    def step(name, call):
        try:
            log.append((name, seen(call())))
        except tp.TokenportError as error:
            log.append((name, type(error).__name__, str(error)))

    prompts = [np.arange(n, dtype=np.int64) + 100 * n for n in (3, 1, 4, 1, 5, 9, 2, 6)]
    groups, randomly = PromptGroups(), RandomRows(seed=7)
    step("add s0", lambda: dock.add_partition("s0", num_prompts=4))
    step("add s1", lambda: dock.add_partition("s1", num_prompts=2))
    step("put prompts", lambda: dock.put("s0", {"prompts": prompts}, rows=np.arange(8)))
    step("rollout groups", lambda: dock.get("rollout", ["prompts"], 4, "s0", sampler=groups))
    step(
        "partial",
        lambda: dock.put(
            "s0",
            {"responses": [p[::-1] * 2 for p in prompts[:4]]},
            rows=[0, 1, 2, 3],
            completed=[True, False, True, True],
        ),
    )
    step("unfinished", lambda: dock.get("rollout", ["prompts", "responses"], 4, "s0", unfinished=True))
    step("continued", lambda: dock.put("s0", {"responses": [np.array([7, 7, 7])]}, rows=[1], overwrite=True))
    step("rollout rest", lambda: dock.get("rollout", ["prompts"], 4, "s0", sampler=Sequential()))
    step("responses rest", lambda: dock.put("s0", {"responses": prompts[4:]}, rows=[4, 5, 6, 7]))
    step("columns", lambda: sorted(dock.columns))
    step("stats after rollout", dock.stats)
    step("leased random", lambda: dock.get("reward", ["responses"], 3, "s0", sampler=randomly, lease=60))
    lease = log[-1][1][3]
    step("nack", lambda: dock.nack(lease))
    step("nack again", lambda: dock.nack(lease))
    step("leased again", lambda: dock.get("reward", ["responses"], 3, "s0", sampler=randomly, lease=60))
    step("ack", lambda: dock.ack(log[-1][1][3]))
    step("exact rows", lambda: dock.get("reward", ["responses", "prompts"], 2, "s0", rows=[7, 0]))
    step(
        "rewards", lambda: dock.put("s0", {"reward": np.linspace(0, 1, 8), "e": np.ones((8, 3)) / 3}, rows=np.arange(8))
    )
    step("add column", lambda: dock.add_column(Column("adv", np.float32)))
    step("add consumer", lambda: dock.add_consumer("eval"))
    step("consumers", lambda: dock.consumers)
    step("adv", lambda: dock.put("s0", {"adv": np.arange(8) - 3.5}, rows=np.arange(8)))
    half = (np.arange(-8, 12, dtype=np.int16) * 4099).view(tp.dock.BFLOAT16)  # bfloat16 bits, NaNs among them
    step("add bfloat16", lambda: dock.add_column(Column("half", "bfloat16", ragged=True)))
    step("add values", lambda: dock.add_column(Column("note", object)))
    step("numbers into bfloat16", lambda: dock.put("s0", {"half": [np.ones(2)] * 8}, rows=np.arange(8)))
    step(
        "bits and values",
        lambda: dock.put(
            "s0",
            {
                "half": [half[r : 2 * r + 1] for r in range(8)],
                "note": [f"row {r}" if r % 3 else {"r": [r]} for r in range(8)],
            },
            rows=np.arange(8),
        ),
    )
    step("add reader", lambda: dock.add_consumer("reader"))
    step("get bits and values", lambda: dock.get("reader", ["half", "note"], 3, "s0", rows=[6, 1, 3], timeout=5))
    step("balanced", lambda: dock.get("train", ["responses", "adv", "e"], 4, "s0", sampler=Balanced(2, "responses")))
    step("rank 1", lambda: dock.get("eval", ["reward"], 2, "s0", sampler=RankSlices(1, 2)))
    step("timeout", lambda: dock.get("eval", ["reward"], 2, "s1", timeout=0.01))
    step("aput", lambda: asyncio.run(dock.aput("s1", {"reward": [1.5, 2.5]}, [2, 3])))
    step("aget", lambda: asyncio.run(dock.aget("eval", ["reward"], 2, "s1")))
    step("all consumed s1", lambda: dock.all_consumed("eval", "s1"))
    step("stats", dock.stats)
    step("clear s1", lambda: dock.clear("s1"))
    step("stats cleared", dock.stats)
    step("drop s1", lambda: dock.drop_partition("s1"))
    step("partitions", lambda: dock.partitions)
    step("close", dock.close)
    step("train rest", lambda: dock.get("train", ["adv"], 8, timeout=5))
    step("train end", lambda: dock.get("train", ["adv"], 8, timeout=5))
    step("stats at the end", dock.stats)
    step("saved and loaded", lambda: saved(dock))
    return log


def saved(dock):
    """What ``Dock.load`` finds in ``dock``'s checkpoint: partitions, bits, data, and that it is closed."""
    with tempfile.TemporaryDirectory() as directory:
        dock.save(directory)
        loaded = Dock.load(directory)
    stats = loaded.stats()
    rest = loaded.get("reward", ["responses", "prompts", "reward", "adv", "e", "half", "note"], 8, timeout=1)
    return loaded.partitions, stats["partitions"], rest, loaded.get("reward", ["reward"], 8, timeout=1)


def test_ray_dock_runs_a_scripted_workload_exactly_as_dock_does(ray_session):
    columns = [
        Column("prompts", np.int32, ragged=True),
        Column("responses", np.int32, ragged=True),
        Column("reward", np.float32),
        Column("e", np.float32, shape=(3,)),
    ]
    local = Dock(columns, ["rollout", "reward", "train"], n_samples_per_prompt=2, max_age=2)
    remote = RayDock(columns, ["rollout", "reward", "train"], n_samples_per_prompt=2, max_age=2, shards=2)
    assert isinstance(local, DockAPI) and isinstance(remote, DockAPI)
    expected, got = workload(local), workload(remote)
    remote.shutdown()
    assert [entry[0] for entry in got] == [entry[0] for entry in expected]
    assert {entry[0]: entry for entry in got if entry not in expected} == {}
    assert any(len(entry) == 3 for entry in expected)  # the refusals are compared too
    end = dict(entry[:2] for entry in expected)["stats at the end"]
    assert end["consumers"]["train"]["bytes"] > 0 and end["partitions"]["s0"]["bytes"] > 0


def versioned_workload(dock) -> list:
    """Policy versions, staleness limits, requeued expiry and admission, step by step (results or errors)."""
    log = []

    def step(name, call):
        try:
            value = call()
            if isinstance(value, tp.dock.Batch):
                value = (seen(value), value.versions.tolist(), value.latest_versions.tolist())
            log.append((name, seen(value)))
        except tp.TokenportError as error:
            log.append((name, type(error).__name__, str(error)))

    tokens = [np.arange(n, dtype=np.int64) for n in (3, 1, 4, 1, 5, 9, 2, 6)]
    step("add", lambda: dock.add_partition("v", num_prompts=4))
    step("too new", lambda: dock.put("v", {"responses": tokens[:2]}, rows=[0, 1], version=1))
    step("v0", lambda: dock.put("v", {"responses": tokens[:4]}, rows=[0, 1, 2, 3], version=0))
    step("version", lambda: dock.version)
    step("set 1", lambda: dock.set_version(1))
    step("v1 per row", lambda: dock.put("v", {"responses": tokens[4:6]}, rows=[4, 5], version=[1, 0]))
    step("strict get", lambda: dock.get("train", ["responses"], 2, "v", max_staleness=0, timeout=0.01))
    step("get", lambda: dock.get("train", ["responses"], 2, "v"))
    step("admit?", dock.can_admit)
    step("back", lambda: dock.set_version(0))
    step("set 2", lambda: dock.set_version(2))
    step("admit timeout", lambda: dock.admit(timeout=0.01))
    step("expired", lambda: dock.expired("v"))
    step("expired again", lambda: dock.expired("v"))
    step("strict consumer", lambda: dock.add_consumer("eval", max_staleness=0))
    step("v2", lambda: dock.put("v", {"responses": tokens[6:]}, rows=[6, 7], version=2))
    step("eval", lambda: dock.get("eval", ["responses"], 4, "v", timeout=0.01))
    step("append", lambda: dock.append("v", 0, {"responses": tokens[0]}, version=2))
    step("stats", dock.stats)
    step("saved", lambda: saved_versions(dock))
    return log


def saved_versions(dock):
    with tempfile.TemporaryDirectory() as directory:
        dock.save(directory)
        loaded = Dock.load(directory)
    batch = loaded.get("train", ["responses"], 3, "v", timeout=0.01)
    return loaded.version, None if batch is None else (batch.rows.tolist(), batch.versions.tolist())


def test_ray_dock_keeps_versions_staleness_and_admission_as_dock_does(ray_session):
    """The same versioned workload on a Dock and a RayDock (2 shards): every result and refusal equal."""
    columns = [Column("responses", np.int64, ragged=True)]
    options = dict(max_staleness=1, on_stale="requeue", max_inflight_versions=2)
    local = Dock(columns, ["train"], n_samples_per_prompt=2, **options)
    remote = RayDock(columns, ["train"], n_samples_per_prompt=2, shards=2, **options)
    expected, got = versioned_workload(local), versioned_workload(remote)
    remote.shutdown()
    assert [entry for entry in got if entry not in expected] == []
    results = dict(entry[:2] for entry in expected)
    assert results["expired"] != {} and results["admit?"] is True


def multi_turn_workload(dock) -> list:
    """Agent rows appended turn by turn (model turns trained, tool output not) across two versions, read with
    a ragged column beside them, checkpointed and copied; every result (or refusal) in order."""
    log = []

    def step(name, call):
        try:
            value = call()
            if isinstance(value, tp.dock.Batch):
                value = (seen(value), value.versions.tolist(), seen(value.segments), seen(value.segment_versions))
            log.append((name, seen(value)))
        except tp.TokenportError as error:
            log.append((name, type(error).__name__, str(error)))

    def turn(row, tokens, trained, version, finished=False):
        items = {"tokens": np.array(tokens), "mask": np.full(len(tokens), trained), "logp": -np.ones(len(tokens)) / 4}
        return lambda: dock.append("a", row, items, version=version, finished=finished)

    step("add", lambda: dock.add_partition("a", num_prompts=4))
    step("prompts", lambda: dock.put("a", {"prompt": [np.arange(3), np.arange(2), np.arange(5), np.arange(1)]},
                                     rows=[0, 1, 2, 3], version=0, completed=False))  # fmt: skip
    step("r0 model", turn(0, [5, 6, 7], 1, 0))
    step("r1 model", turn(1, [8], 1, 0))
    step("r0 tool", turn(0, [90, 91], 0, 0))
    step("unfinished", lambda: dock.get("rollout", ["tokens"], 4, "a", unfinished=True))
    step("set 1", lambda: dock.set_version(1))
    step("r0 model v1", turn(0, [4, 4], 1, 1, finished=True))
    step("r1 model v1", turn(1, [3, 2, 1], 1, 1, finished=True))
    step("bad columns", lambda: dock.append("a", 2, {"tokens": np.array([1])}, version=1))
    step("finished", turn(0, [1], 1, 1))
    step("put segmented", lambda: dock.put("a", {"tokens": [np.arange(2)]}, rows=[2]))
    step("train", lambda: dock.get("train", ["prompt", "tokens", "mask", "logp"], 2, "a", timeout=5))
    step("stats", dock.stats)
    step("saved", lambda: saved_turns(dock))
    return log


def saved_turns(dock):
    with tempfile.TemporaryDirectory() as directory:
        dock.save(directory)
        loaded = Dock.load(directory)
    batch = loaded.get("eval", ["tokens", "mask"], 2, "a", timeout=1)
    return seen(batch), seen(batch.segments), seen(batch.segment_versions)


def test_ray_dock_holds_multi_turn_rows_as_dock_does(ray_session):
    """Segmented columns on a RayDock (held by its controller) give every result a Dock gives, through a
    checkpoint and a copy onto another shard count too."""
    columns = [
        Column("prompt", np.int64, ragged=True),
        Column("tokens", np.int32, segmented=True),
        Column("mask", np.uint8, segmented=True),
        Column("logp", np.float32, segmented=True),
    ]
    consumers = ["rollout", "train", "eval"]
    local = Dock(columns, consumers, max_staleness=1)
    remote = RayDock(columns, consumers, shards=2, max_staleness=1)
    expected, got = multi_turn_workload(local), multi_turn_workload(remote)
    assert [entry for entry in got if entry not in expected] == []
    results = dict(entry[:2] for entry in expected)
    assert results["train"][0][5]["tokens"][2] == [5, 6, 7, 90, 91, 4, 4, 8, 3, 2, 1]  # two rows, no retokenizing
    assert results["train"][2][2:] == [[3, 2, 2, 1, 3], [3, 2]]  # segment item counts: 3 and 2 segments
    assert results["train"][3][2] == [0, 0, 1, 0, 1]  # and the version of each
    copied = RayDock.from_dock(local, shards=1)
    again = copied.get("eval", ["prompt", "tokens"], 2, "a", timeout=5)
    mine = local.get("eval", ["prompt", "tokens"], 2, "a", timeout=5)
    assert seen(again) == seen(mine) and seen(again.segments) == seen(mine.segments)
    remote.shutdown()
    copied.shutdown()


# -- rows in the object store: pinned past their producers, released when no cell refers to them -------


@ray.remote
class _Producer:
    def put(self, dock: RayDock, partition: str, rows: list[int], seed: int) -> None:
        rng = np.random.default_rng(seed)
        tokens = [rng.integers(0, 1000, int(rng.integers(1, 50))).astype(np.int32) for _ in rows]
        dock.put(partition, {"responses": tokens, "reward": np.full(len(rows), seed, np.float32)}, rows=rows)


def _pinned(dock: RayDock) -> int:
    held = dock.held_objects()
    assert held["objects"] == held["pinned"]
    return held["pinned"]


def _shard_pins(dock: RayDock) -> int:
    return sum(ray.get([shard.count.remote() for shard in dock._shards]))


@pytest.mark.parametrize("producers_elsewhere", [False, True], ids=["on-the-controller-node", "elsewhere"])
def test_rows_outlive_the_process_that_put_them_and_are_released_with_their_cells(ray_session, producers_elsewhere):
    """A producer on the controller's node has its objects pinned by the controller itself, in the commit (one
    actor call per put: no shard holds anything); one on another node (simulated: the dock is told its
    controller runs elsewhere) has them pinned by a shard, sent with the commit."""
    dock = RayDock(COLUMNS, ["train"], shards=2)
    if producers_elsewhere:
        dock._controller_node = "another node"  # every process that receives this dock takes the shard path
    try:
        dock.add_partition("a", 8)
        producers = [_Producer.remote() for _ in range(2)]
        ray.get([p.put.remote(dock, "a", list(range(4 * i, 4 * i + 4)), i) for i, p in enumerate(producers)])
        for producer in producers:  # their processes exit: Ray would free what they put, unless pinned
            ray.kill(producer, no_restart=True)
        time.sleep(1)
        rng = [np.random.default_rng(i) for i in range(2)]
        expected = [rng[i].integers(0, 1000, int(rng[i].integers(1, 50))) for i in range(2) for _ in range(4)]
        batch = dock.get("train", ["responses", "reward"], 8, "a", rows=range(8))
        assert [r.tolist() for r in batch["responses"].to_list()] == [e.tolist() for e in expected]
        assert batch["reward"].tolist() == [0.0] * 4 + [1.0] * 4
        assert _pinned(dock) == 2
        assert _shard_pins(dock) == (2 if producers_elsewhere else 0)
        with pytest.raises(tp.ConfigError, match="already written"):  # refused by the controller: its object goes
            dock.put("a", {"reward": np.zeros(2, np.float32)}, rows=[0, 1])
        assert _shard_pins(dock) == (2 if producers_elsewhere else 0)  # asked after the release, by the same caller
        assert _pinned(dock) == 2

        # overwriting every cell of the first put releases its object; a partial overwrite keeps the second
        dock.put(
            "a",
            {"responses": [np.arange(3, dtype=np.int32)] * 4, "reward": np.zeros(4, np.float32)},
            rows=range(4),
            overwrite=True,
        )
        dock.put("a", {"reward": np.zeros(2, np.float32)}, rows=[4, 5], overwrite=True)
        assert _pinned(dock) == 3  # the first producer's object went; the second's still holds rows 4-7
        dock.put("a", {"reward": np.zeros(4, np.float32)}, rows=range(4), overwrite=True)
        assert _pinned(dock) == 4  # the first overwrite's responses still live in its object
        dock.put("a", {"responses": [np.arange(2, dtype=np.int32)] * 4}, rows=range(4), overwrite=True)
        assert _pinned(dock) == 4  # ... until they are overwritten too

        dock.clear("a")
        assert _pinned(dock) == 0
        dock.put("a", {"reward": np.ones(8, np.float32)}, rows=range(8))
        dock.drop_partition("a")
        assert _pinned(dock) == 0 and _shard_pins(dock) == 0
    finally:
        dock.shutdown()


def test_a_batch_gathered_from_several_objects_keeps_the_row_order_and_views_are_read_only(ray_session):
    dock, local = RayDock(COLUMNS, ["train"], shards=3), Dock(COLUMNS, ["train"])
    try:
        rng = np.random.default_rng(7)
        for d in (dock, local):
            d.add_partition("p", 16)
        order = rng.permutation(16)
        for chunk in np.array_split(order, 5):  # five puts, rows scattered over them
            tokens = [np.full(int(r) % 7 + 1, r, np.int32) for r in chunk]
            for d in (dock, local):
                d.put("p", {"responses": tokens, "reward": chunk.astype(np.float32)}, rows=chunk)
        wanted = rng.permutation(16)
        got = dock.get("train", ["responses", "reward"], 16, "p", rows=wanted)
        want = local.get("train", ["responses", "reward"], 16, "p", rows=wanted)
        assert got.rows.tolist() == want.rows.tolist()
        assert got["reward"].tolist() == want["reward"].tolist()
        assert [r.tolist() for r in got["responses"].to_list()] == [r.tolist() for r in want["responses"].to_list()]

        dock.add_partition("q", 4)
        dock.put("q", {"reward": np.arange(4, dtype=np.float32)}, rows=range(4))
        view = dock.get("train", ["reward"], 2, "q", rows=[1, 2])["reward"]
        assert view.tolist() == [1.0, 2.0] and not view.flags.writeable
    finally:
        dock.shutdown()


def test_copies_and_checkpoints_keep_expired_rows_counters_and_consumer_limits(ray_session, tmp_path):
    columns = [Column("reward", np.float32)]

    def scenario(dock: DockAPI) -> None:
        dock.add_consumer("eval", max_staleness=1)  # stricter than the dock's 2
        dock.set_version(1)
        dock.add_partition("a", 6)
        dock.put("a", {"reward": np.arange(6, dtype=np.float32)}, rows=range(6), version=[0, 0, 1, 1, 1, 1])
        dock.set_version(2)  # rows 0 and 1 are too stale for "eval": requeued, not yet handed back

    local, remote = Dock(columns, ["train"], max_staleness=2), RayDock(columns, ["train"], max_staleness=2, shards=2)
    copies: list = []
    try:
        for dock in (local, remote):
            scenario(dock)
        copies = [remote.to_dock(), RayDock.from_dock(local, shards=1)]
        remote.save(tmp_path / "ckpt")
        copies += [Dock.load(tmp_path / "ckpt"), RayDock.load(tmp_path / "ckpt", shards=3), local]
        for dock in (*copies, remote):
            assert dock.stats()["expired"] == {"requeued": 2, "dropped": 0, "pending": 2}
            assert {name: rows.tolist() for name, rows in dock.expired().items()} == {"a": [0, 1]}
            dock.set_version(3)  # "eval"'s own limit expires the version-1 rows; the dock's would keep them
            assert {name: rows.tolist() for name, rows in dock.expired().items()} == {"a": [2, 3, 4, 5]}
    finally:
        for dock in (*copies, remote):
            if isinstance(dock, RayDock):
                dock.shutdown()
