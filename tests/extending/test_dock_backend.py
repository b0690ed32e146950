"""A dock backend added from outside the package: a toy that implements only ``DockBase``'s primitives,
registered with ``register_dock_backend`` (and, in a subprocess, found as an entry-point plugin), runs
a workload through the public API exactly as the in-process ``Dock`` does.

The toy holds a ``Dock`` in a server thread and sends it every request pickled through a queue, and
the reply pickled back: what it is sent is the whole wire format, so the requests are too.
"""

from __future__ import annotations

import os
import pickle
import queue
import random
import subprocess
import sys
import threading
from typing import Any

import numpy as np
import pytest

import tokenport as tp
from tests._support.plugins import write_plugin
from tests.dock._state import dock_state
from tokenport.dock import (
    AppendRequest,
    Column,
    Dock,
    DockBase,
    GetRequest,
    Packed,
    PromptGroups,
    PutRequest,
    StateCall,
    open_dock,
    register_dock_backend,
)
from tokenport.dock.requests import trusted

KINDS = {"put": PutRequest, "append": AppendRequest, "get": GetRequest, "call": StateCall, "column": str, "save": str}


class QueueDock(DockBase):
    """A toy backend: a ``Dock`` served by a thread; each request and each reply crosses a queue pickled."""

    def __init__(self, columns: Any, consumers: Any, n_samples_per_prompt: int = 1, **options: Any) -> None:
        self._inbox: queue.Queue[tuple[bytes, queue.Queue[bytes]]] = queue.Queue()
        self.sent: list[str] = []  # the kinds of request sent, in order
        served = Dock(columns, consumers, n_samples_per_prompt, **options)
        threading.Thread(target=self._serve, args=(served,), daemon=True).start()

    # -- the primitives ------------------------------------------------------------------------------

    def column_of(self, name: str) -> Column:
        return self._send("column", name)

    def handle_put(self, request: PutRequest) -> None:
        self._send("put", request)

    def handle_append(self, request: AppendRequest) -> None:
        self._send("append", request)

    def handle_get(self, request: GetRequest) -> Any:
        return self._send("get", request)

    def handle_call(self, call: StateCall) -> Any:
        return self._send("call", call)

    def handle_save(self, directory: Any) -> None:
        self._send("save", os.fspath(directory))

    # -- the wire ------------------------------------------------------------------------------------

    def _send(self, kind: str, payload: Any) -> Any:
        self.sent.append(kind)
        reply: queue.Queue[bytes] = queue.Queue(1)
        self._inbox.put((pickle.dumps((kind, payload)), reply))
        ok, value = pickle.loads(reply.get())
        if not ok:
            raise value
        return value

    def _serve(self, dock: Dock) -> None:
        while True:
            data, reply = self._inbox.get()
            threading.Thread(target=self._answer, args=(dock, data, reply), daemon=True).start()  # a get may wait

    @staticmethod
    def _answer(dock: Dock, data: bytes, reply: queue.Queue[bytes]) -> None:
        kind, payload = pickle.loads(data)
        try:
            request = trusted(payload, KINDS[kind])
            handle = {"column": dock.column_of, "save": dock.handle_save}.get(kind) or getattr(dock, f"handle_{kind}")
            answer = (True, handle(request))
        except tp.TokenportError as error:
            answer = (False, error)
        reply.put(pickle.dumps(answer))


register_dock_backend("toy-queue", QueueDock)

COLUMNS = [
    Column("prompt", np.int32, ragged=True),
    Column("reward", np.float32),
    Column("turns", np.int32, ragged=True, segmented=True),
]
STAGES = ["reward", "train", "rollout"]


def seen(value: Any) -> Any:
    """A result in a form that compares by content."""
    if isinstance(value, Packed):
        return ("packed", value.values.dtype.str, value.values.tolist(), value.lengths.tolist())
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.tolist())
    if isinstance(value, dict):
        return {key: seen(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [seen(item) for item in value]
    if isinstance(value, tp.dock.Batch):
        fields = ("partition", "rows", "columns", "lease_id", "ages", "versions", "segments", "segment_versions")
        return {name: seen(getattr(value, name)) for name in fields}
    return value


def workload(dock: Any, directory: str) -> list[Any]:
    """Columns, puts, gets (readiness, a consumer, a prompt group, a lease), an append, versions, stats,
    a checkpoint and its restore; each step's result, or its refusal."""
    log: list[Any] = []

    def step(name: str, call: Any) -> None:
        try:
            log.append((name, seen(call())))
        except tp.TokenportError as error:
            log.append((name, type(error).__name__, str(error)))

    step("columns", lambda: sorted(dock.columns))
    step("add column", lambda: dock.add_column(Column("score", np.float64)))
    step("add partition", lambda: dock.add_partition("p0", 3))
    step("put prompts", lambda: dock.put("p0", {"prompt": [np.arange(i + 1) for i in range(6)]}, rows=range(6)))
    step("get before ready", lambda: dock.get("train", ["prompt", "reward"], 2, "p0", timeout=0))
    step("put rewards", lambda: dock.put("p0", {"reward": np.linspace(0, 1, 4)}, rows=[0, 1, 2, 3]))
    step("get ready", lambda: dock.get("train", ["prompt", "reward"], 2, "p0"))
    step("get group", lambda: dock.get("reward", ["prompt"], 2, "p0", sampler=PromptGroups()))
    leased: list[Any] = []
    step("lease", lambda: leased.append(dock.get("reward", ["prompt"], 2, "p0", lease=30)) or leased[-1])
    step("nack", lambda: dock.nack(leased[-1].lease_id))
    step("again", lambda: dock.get("reward", ["prompt"], 2, "p0", rows=[4, 5]))
    step("set version", lambda: dock.set_version(2))
    step("add partition p1", lambda: dock.add_partition("p1", 1))
    step("append", lambda: dock.append("p1", 0, {"turns": [1, 2, 3]}, version=1))
    step("unfinished", lambda: dock.get("rollout", ["turns"], 2, "p1", unfinished=True))
    step("append last", lambda: dock.append("p1", 0, {"turns": [4]}, version=2, finished=True))
    step("append finished", lambda: dock.append("p1", 0, {"turns": [5]}, version=2))
    step("get turns", lambda: dock.get("train", ["turns"], 1, "p1", rows=[0]))
    step("bad put", lambda: dock.put("p0", {"reward": [1.0, 2.0]}, rows=[4, 4]))
    step("bad get", lambda: dock.get("nobody", ["prompt"], 1, "p0"))
    step("bad count", lambda: dock.get("train", ["prompt"], 0))
    step("bad version", lambda: dock.set_version(1))
    step("consumed", lambda: dock.all_consumed("train", "p0"))
    step("partitions", lambda: dock.partitions)
    step("version", lambda: dock.version)
    step("save", lambda: dock.save(directory))
    step("close", dock.close)
    stats = dock.stats()
    for consumer in stats["consumers"].values():
        consumer.pop("wait_seconds")
    log.append(("stats", seen(stats)))
    restored = Dock.load(directory)
    log.append(("restored", seen(restored.get("train", ["prompt", "reward"], 2, "p0", rows=[2, 3]))))
    return log


def test_a_registered_toy_backend_runs_the_workload_exactly_as_dock_does(tmp_path):
    toy = open_dock(COLUMNS, STAGES, 2, backend="toy-queue", max_age=3)
    local = open_dock(COLUMNS, STAGES, 2, max_age=3)
    assert isinstance(toy, QueueDock) and isinstance(local, Dock) and isinstance(toy, tp.DockAPI)
    expected, got = workload(local, str(tmp_path / "local")), workload(toy, str(tmp_path / "toy"))
    assert got == expected
    assert any(len(entry) == 3 for entry in expected)  # the refusals are compared too
    assert {"put", "append", "get", "call", "save", "column"} <= set(toy.sent)


def test_a_refused_request_changes_nothing_and_fails_before_the_backend():
    toy = open_dock(COLUMNS, STAGES, 2, backend="toy-queue")
    toy.add_partition("p", 2)
    toy.put("p", {"reward": np.ones(2, np.float32)}, rows=[0, 1])
    before, sent = toy.stats(), len(toy.sent)
    bad_calls = [
        lambda: toy.get("train", "reward", 1),  # a string, not a list of columns
        lambda: toy.get("train", ["reward"], -1),
        lambda: toy.get("train", ["reward"], 1, timeout=-1),
        lambda: toy.get("train", ["reward"], 1, rows=[0]),  # rows= without partition=
        lambda: toy.put("p", {}, rows=[0]),
        lambda: toy.put("p", {"reward": np.ones(2)}, rows=[0, 0]),
        lambda: toy.put("p", {"reward": np.ones(1)}, rows=[0], version=-1),
        lambda: toy.append("p", -1, {"turns": [1]}),
    ]
    for call in bad_calls:
        with pytest.raises(tp.ConfigError):
            call()
    # checked once, where the request is built: only the column lookups reached the backend
    assert set(toy.sent[sent:]) <= {"column"}
    for call in [
        lambda: toy.put("p", {"reward": np.ones(1)}, rows=[5]),  # the state's own checks: out of range
        lambda: toy.put("p", {"reward": np.ones(1)}, rows=[0]),  # already written
        lambda: toy.add_partition("p", 1),
        lambda: toy.ack(99),
    ]:
        with pytest.raises(tp.ConfigError):
            call()
    after = toy.stats()
    assert seen(after) == seen(before)
    assert toy.get("train", ["reward"], 2, "p")["reward"].tolist() == [1.0, 1.0]


def test_a_backend_trusts_only_the_frozen_request_types():
    request = GetRequest.checked("train", ["reward"], 1, "p")
    assert trusted(request, GetRequest) is request
    with pytest.raises(tp.ConfigError, match="expected a GetRequest, got dict"):
        trusted({"consumer": "train"}, GetRequest)
    with pytest.raises(tp.ConfigError, match="'shutdown' is no dock call"):
        StateCall("shutdown")
    with pytest.raises(AttributeError):
        request.count = 5  # type: ignore[misc]


def test_registering_and_opening_refusals():
    register_dock_backend("toy-queue", QueueDock)  # the same factory again: a no-op
    with pytest.raises(tp.ConfigError, match="taken"):
        register_dock_backend("toy-queue", Dock)
    with pytest.raises(tp.ConfigError, match="expected"):
        register_dock_backend("toy-bad", 3)  # type: ignore[arg-type]
    with pytest.raises(tp.ConfigError, match="unknown dock backend 'nowhere'"):
        open_dock(COLUMNS, STAGES, backend="nowhere")
    register_dock_backend("toy-not-a-dock", lambda *args, **kwargs: object())
    with pytest.raises(tp.ConfigError, match="not a tokenport.dock.DockBase"):
        open_dock(COLUMNS, STAGES, backend="toy-not-a-dock")


def random_call(rng: random.Random, leases: list[int]) -> tuple[str, Any]:
    """One random call (often a bad one), its arguments drawn now: its name and a function of the dock."""
    partition = rng.choice(["p", "q", "nowhere"])
    rows = rng.sample(range(-1, 7), rng.randint(0, 3)) + ([1] if rng.random() < 0.1 else [])
    values = {"reward": np.arange(len(rows), dtype=np.float32)}
    version, lease, count = rng.choice([None, 0, 1, 2, -1, 5]), rng.choice([None, 60.0]), rng.choice([1, 2, 0])
    flags = [rng.random() < 0.3, rng.random() < 0.8, rng.random() < 0.2]
    consumer, lease_id = rng.choice(["train", "reward", "nobody"]), rng.choice([*leases[-3:], 99])
    new_partition, prompts, row, new_version = (
        rng.choice(["p", "q", ""]),
        rng.choice([1, 3, 0]),
        rng.choice([0, 1, 9]),
        rng.choice([0, 1, 2, 3, -1]),
    )
    calls = {
        "add_partition": lambda d: d.add_partition(new_partition, prompts),
        "put": lambda d: d.put(partition, values, rows=rows, overwrite=flags[0], completed=flags[1], version=version),
        "get": lambda d: d.get(consumer, ["reward"], count, partition, timeout=0, lease=lease, unfinished=flags[2]),
        "get rows": lambda d: d.get("train", ["reward"], 1, partition, rows=rows, timeout=0),
        "ack": lambda d: d.ack(lease_id),
        "nack": lambda d: d.nack(lease_id),
        "set_version": lambda d: d.set_version(new_version),
        "append": lambda d: d.append(partition, row, {"turns": [1, 2]}, version=version),
        "clear": lambda d: d.clear(partition),
    }
    name = rng.choice(sorted(calls))
    return name, calls[name]


@pytest.mark.parametrize("seed", range(3))
def test_random_call_sequences_behave_as_dock_and_a_refusal_changes_nothing(seed, tmp_path):
    """Each call made on the toy and on a Dock: the same result or the same error; after a refusal the
    toy's whole state (everything a checkpoint keeps, leases, counters) is as it was."""
    toy = open_dock(COLUMNS, STAGES, 2, backend="toy-queue", max_staleness=2)
    local = Dock(COLUMNS, STAGES, 2, max_staleness=2)
    rng, leases = random.Random(seed), []
    refused = 0
    for _ in range(120):
        name, call = random_call(rng, leases)
        toy.stats()  # makes a new partition's consumption arrays (all False), so a save holds them
        before = dock_state(toy)
        outcomes = []
        for dock in (local, toy):
            try:
                outcomes.append(seen(call(dock)))
            except tp.TokenportError as error:
                outcomes.append((type(error).__name__, str(error)))
        assert outcomes[0] == outcomes[1], name
        if isinstance(outcomes[1], tuple) and outcomes[1][0] == "ConfigError":
            refused += 1
            assert dock_state(toy) == before, name
        elif isinstance(outcomes[1], dict) and outcomes[1].get("lease_id"):
            leases.append(outcomes[1]["lease_id"])
    toy.stats(), local.stats()
    assert dock_state(toy) == dock_state(local)
    assert refused > 20


PLUGIN = """
from tests.extending.test_dock_backend import QueueDock
from tokenport.dock import register_dock_backend

register_dock_backend("toy-plugin-queue", QueueDock)
"""

SCRIPT = """
import numpy as np
from tokenport.dock import Column, open_dock

dock = open_dock([Column("x", np.int64)], ["train"], backend="toy-plugin-queue")
dock.add_partition("p", 3)
dock.put("p", {"x": [7, 8, 9]}, rows=[0, 1, 2])
batch = dock.get("train", ["x"], 3, "p")
print(type(dock).__name__, batch["x"].tolist(), dock.all_consumed("train", "p"))
"""


def test_a_plugin_backend_is_found_through_its_entry_point(tmp_path):
    write_plugin(tmp_path, "toy_plugin", PLUGIN, name="toy")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.pathsep.join([str(tmp_path), root, *sys.path[1:]])
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env={"PYTHONPATH": path, "PATH": "/usr/bin"}
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "QueueDock [7, 8, 9] True"
