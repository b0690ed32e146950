"""Random call sequences against the Dock, checked after every call against a simple Python model of
what it holds: rows' values, version spans, finished flags and consumption, the current version and
the rows dropped as stale. A refused call (a TokenportError) must change nothing at all."""

from __future__ import annotations

import random

import numpy as np
import pytest

import tokenport as tp
from tests.dock._state import dock_state
from tokenport.dock import Column, Dock

INT64_MAX = 2**63 - 1
CONSUMERS = ("train", "ref")
LIMITS = {"train": 1}  # train is served rows at most one version behind; ref has no limit


class Model:
    """What the dock should hold: per partition, per row, its value, versions, finished flag, consumers."""

    def __init__(self) -> None:
        self.partitions: dict[str, list[dict]] = {}
        self.version = 0
        self.dropped = 0
        self.leases: dict[int, tuple[str, str, list[int]]] = {}  # lease id -> consumer, partition, rows
        self.next_lease = 1

    def leased(self, partition: str, consumer: str | None = None) -> set[int]:
        """Rows of ``partition`` out on lease (to ``consumer``, or to anyone)."""
        return {
            r for c, p, rows in self.leases.values() if p == partition and consumer in (None, c) for r in rows
        }  # fmt: skip

    @staticmethod
    def empty_row() -> dict:
        row = {"x": None, "turns": [], "first": -1, "last": -1, "completed": False, "consumed": set()}
        return {**row, "dropped": False}

    def add_partition(self, name, prompts) -> None:
        if not isinstance(name, str) or not name or name in self.partitions:
            raise tp.ConfigError("refused")
        if not isinstance(prompts, int) or not 1 <= prompts <= INT64_MAX:
            raise tp.ConfigError("refused")
        self.partitions[name] = [self.empty_row() for _ in range(prompts)]

    def expire(self, partition: str, ids: list[int]) -> None:
        leased = self.leased(partition)
        for row in [self.partitions[partition][r] for r in ids if r not in leased]:
            stale = any(c not in row["consumed"] and self.version - row["first"] > limit for c, limit in LIMITS.items())
            if row["first"] >= 0 and stale:
                row["consumed"] = set(CONSUMERS)
                row["completed"] = row["dropped"] = True
                self.dropped += 1

    def put(self, partition, values, rows, overwrite, version) -> None:
        ids = [int(r) for r in rows]
        if not ids or len(set(ids)) != len(ids) or len(values) != len(ids):
            raise tp.ConfigError("refused")
        if any(not -(2**15) <= v < 2**15 for v in values):
            raise tp.ConfigError("refused")
        if version is not None and not 0 <= int(version) <= INT64_MAX:
            raise tp.ConfigError("refused")
        target = self.partitions.get(partition)
        if target is None or any(not 0 <= r < len(target) for r in ids):
            raise tp.ConfigError("refused")
        if version is not None and int(version) > self.version:
            raise tp.ConfigError("refused")
        if version is None and any(target[r]["first"] < 0 for r in ids):
            raise tp.ConfigError("refused")  # this dock limits staleness: every row needs a version
        if not overwrite and any(target[r]["x"] is not None for r in ids):
            raise tp.ConfigError("refused")
        if (not overwrite or version is None) and any(target[r]["dropped"] for r in ids):
            raise tp.ConfigError("refused")  # dropped as stale: only a rewrite as a new row (with a version)
        for r, value in zip(ids, values):
            row = target[r]
            if version is not None:
                v = int(version)
                if (row["completed"] and overwrite) or row["first"] < 0 or row["dropped"]:
                    row["first"] = row["last"] = v
                else:
                    row["first"], row["last"] = min(row["first"], v), max(row["last"], v)
            row["x"] = value
            row["completed"], row["dropped"] = True, False
        self.expire(partition, ids)

    def append(self, partition, row, items, version, finished) -> None:
        if not -1 < row <= INT64_MAX or not items or any(not -(2**15) <= v < 2**15 for v in items):
            raise tp.ConfigError("refused")
        if version is not None and not 0 <= int(version) <= INT64_MAX:
            raise tp.ConfigError("refused")
        target = self.partitions.get(partition)
        if target is None or row >= len(target) or version is None or int(version) > self.version:
            raise tp.ConfigError("refused")  # version=None: this dock limits staleness
        entry = target[row]
        if entry["completed"]:
            raise tp.ConfigError("refused")  # finished, or dropped as stale
        v = int(version)
        entry["turns"].append((len(items), v))
        if entry["first"] < 0:
            entry["first"] = entry["last"] = v
        else:
            entry["first"], entry["last"] = min(entry["first"], v), max(entry["last"], v)
        entry["completed"] = finished
        if not finished:
            entry["consumed"] = set()
        self.expire(partition, [row])

    def set_version(self, version) -> None:
        if not 0 <= int(version) <= INT64_MAX or int(version) < self.version:
            raise tp.ConfigError("refused")
        self.version = int(version)
        for name, rows in self.partitions.items():
            self.expire(name, list(range(len(rows))))

    def get(self, consumer, count, partition, lease) -> list[int] | None | str:
        target = self.partitions.get(partition)
        if target is None or not 1 <= count <= INT64_MAX or count > len(target):
            raise tp.ConfigError("refused")
        limit = LIMITS.get(consumer)
        mine = self.leased(partition, consumer)
        eligible = [
            r
            for r, row in enumerate(target)
            if row["x"] is not None
            and row["completed"]
            and consumer not in row["consumed"]
            and r not in mine
            and (limit is None or row["first"] >= self.version - limit)
        ]
        unconsumed = sum(consumer not in row["consumed"] for row in target)
        if len(eligible) >= count:
            chosen = eligible[:count]
        elif len(eligible) == unconsumed - len(mine) and not mine:
            chosen = eligible
        else:
            return "timeout"
        if not chosen:
            return None
        if lease:
            self.leases[self.next_lease] = (consumer, partition, chosen)
            self.next_lease += 1
            return chosen
        for r in chosen:
            target[r]["consumed"].add(consumer)
        return chosen

    def ack(self, lease_id) -> None:
        if lease_id not in self.leases:
            raise tp.ConfigError("refused")
        consumer, partition, rows = self.leases.pop(lease_id)
        for r in rows:
            self.partitions[partition][r]["consumed"].add(consumer)

    def nack(self, lease_id) -> None:
        if lease_id not in self.leases:
            raise tp.ConfigError("refused")
        _, partition, rows = self.leases.pop(lease_id)
        if partition in self.partitions:
            self.expire(partition, rows)

    def clear(self, partition) -> None:
        if partition not in self.partitions:
            raise tp.ConfigError("refused")
        self.partitions[partition] = [self.empty_row() for _ in self.partitions[partition]]
        self.leases = {i: held for i, held in self.leases.items() if held[1] != partition}

    def drop_partition(self, partition) -> None:
        if partition not in self.partitions:
            raise tp.ConfigError("refused")
        del self.partitions[partition]
        self.leases = {i: held for i, held in self.leases.items() if held[1] != partition}


def observed(dock: Dock) -> dict:
    """The dock's holdings in the model's terms."""
    state = dock.state
    out = {}
    with state.lock:
        for part in state.each_partition():
            ready = part.ready.get("x", np.zeros(part.rows, bool))
            rows = []
            for r in range(part.rows):
                rows.append(
                    {
                        "x": int(part.fixed["x"][r]) if ready[r] else None,
                        "turns": list(part.segments.get(r, [])),
                        "first": int(part.version_first[r]),
                        "last": int(part.version_last[r]),
                        "completed": bool(part.completed[r]),
                        "consumed": {c for c in CONSUMERS if c in part.consumed and part.consumed[c][r]},
                        "dropped": bool(part.dropped[r]),
                    }
                )
            out[part.name] = rows
    return {"partitions": out, "version": dock.version, "dropped": dock.stats()["expired"]["dropped"]}


def expected(model: Model) -> dict:
    return {"partitions": model.partitions, "version": model.version, "dropped": model.dropped}


def random_call(rng: random.Random, model: Model):
    """(name, arguments) of one call: mostly valid, one argument in a few out of range or wrong."""

    def sometimes(good, bad, chance: float = 0.15):
        return rng.choice(bad) if rng.random() < chance else good

    partition = sometimes(rng.choice([*model.partitions] or ["p"]), ["nope", "", "p", "q"])
    kind = rng.choice(["put", "put", "put", "append", "append", "get", "get", "set_version", "add_partition", "clear"])
    kind = "drop" if kind == "clear" and rng.random() < 0.5 else kind
    kind = rng.choice(["ack", "nack"]) if kind == "get" and rng.random() < 0.4 else kind
    if kind in ("ack", "nack"):
        return kind, (sometimes(rng.choice([*model.leases] or [0]), [model.next_lease, 0, 2**64]),)
    now = model.version
    version = sometimes(rng.choice([now, max(0, now - 1), None]), [now + 1, -1, 2**63, np.uint64(2**63), 2**64])
    if kind == "put":
        rows = rng.sample(range(5), rng.choice([1, 1, 2, 3]))
        rows = sometimes(rows, [[-1], [5], [0, 0], [2**63], []], 0.1)
        values = [sometimes(rng.randrange(-100, 100), [40_000, -40_000], 0.03) for _ in rows]
        return kind, (partition, values, rows, rng.random() < 0.5, version)
    if kind == "append":
        items = sometimes([rng.randrange(-100, 100) for _ in range(rng.choice([1, 2]))], [[], [40_000]], 0.1)
        row = sometimes(rng.randrange(5), [-1, 5, 2**63, 2**64], 0.1)
        return kind, (partition, row, items, version, rng.random() < 0.4)
    if kind == "get":
        count = sometimes(rng.choice([1, 2, 3]), [0, 9, 2**63])
        return kind, (rng.choice(CONSUMERS), count, partition, rng.random() < 0.4)
    if kind == "set_version":
        return kind, (sometimes(rng.choice([now, now + 1, now + 2]), [now - 1, 2**63, 2**64, -1]),)
    if kind == "add_partition":
        return kind, (rng.choice(["p", "q", "r", "s", ""]), sometimes(5, [0, 2**63, -1]))
    return kind, (partition,)


def call_dock(dock: Dock, kind: str, args: tuple):
    if kind == "put":
        partition, values, rows, overwrite, version = args
        return dock.put(partition, {"x": np.array(values)}, rows=rows, overwrite=overwrite, version=version)
    if kind == "append":
        partition, row, items, version, finished = args
        return dock.append(partition, row, {"turns": np.array(items, np.int64)}, version=version, finished=finished)
    if kind == "get":
        consumer, count, partition, lease = args
        batch = dock.get(consumer, ["x"], count, partition, timeout=0, lease=3600 if lease else None)
        return None if batch is None else batch.rows.tolist()
    if kind == "set_version":
        return dock.set_version(*args)
    if kind in ("ack", "nack"):
        return getattr(dock, kind)(*args)
    if kind == "add_partition":
        return dock.add_partition(*args)
    return dock.clear(*args) if kind == "clear" else dock.drop_partition(*args)


def call_model(model: Model, kind: str, args: tuple):
    if kind == "drop":
        return model.drop_partition(*args)
    return getattr(model, kind)(*args)


def without_timeouts(state: dict) -> dict:
    for consumer in state["stats"]["consumers"].values():
        consumer.pop("timeouts")
    return state


@pytest.mark.parametrize("seed", range(6))
def test_random_calls_match_the_model_and_refusals_change_nothing(seed):
    rng = random.Random(seed)
    dock = Dock([Column("x", np.int16), Column("turns", np.int16, segmented=True)], [], on_stale="drop")
    for consumer in CONSUMERS:
        dock.add_consumer(consumer, max_staleness=LIMITS.get(consumer))
    model = Model()
    refused = 0
    for step in range(200):
        kind, args = random_call(rng, model)
        before = without_timeouts(dock_state(dock))
        try:
            want = call_model(model, kind, args)
        except tp.ConfigError:
            want = "refused"
        try:
            got = call_dock(dock, kind, args)
        except tp.DockTimeout:
            got = "timeout"
        except tp.TokenportError:
            got = "refused"
        assert got == want, (step, kind, args)
        if got in ("refused", "timeout"):
            refused += got == "refused"
            assert without_timeouts(dock_state(dock)) == before, (step, kind, args)
        assert observed(dock) == expected(model), (step, kind, args)
    assert refused > 10 and model.dropped + model.version > 0
