"""``DockState.reclaim``: a RayDock controller replaying its journal claims exactly the rows a get claimed, under
the same lease id, so the replayed state is the original's (compared with a shadow dock, no Ray needed)."""

from __future__ import annotations

import random
import time

import numpy as np
import pytest

from tests.dock._state import dock_state
from tokenport import TokenportError
from tokenport.dock import Column, Dock

COLUMNS = [Column("tokens", np.int64, ragged=True), Column("reward", np.float32)]
CONSUMERS = ["train", "reference"]


def filled() -> Dock:
    dock = Dock(COLUMNS, CONSUMERS, 2)
    for name in ("a", "b"):
        dock.add_partition(name, 8)
        rows = list(range(16))
        dock.put(name, {"tokens": [np.arange(r + 1) for r in rows], "reward": np.array(rows, np.float32)}, rows=rows)
    return dock


def compared(dock: Dock) -> dict:
    """``dock_state`` less the count of gets that timed out (they change nothing else: not journaled)."""
    state = dock_state(dock)
    for consumer in state["stats"]["consumers"].values():
        consumer.pop("timeouts")
    return state


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_replayed_claims_rebuild_the_state_a_run_of_gets_acks_and_nacks_made(seed) -> None:
    """Seeded random gets (some under a lease), acks and nacks on a dock; the same sequence replayed on a copy,
    each get as ``reclaim`` of what it claimed: after every step the two docks' whole states (leases and
    counters included, gets that timed out aside) are equal, and so is the next get of each."""
    rng = random.Random(seed)
    original, replayed = filled(), filled()
    leases: list[int] = []
    for step in range(60):
        kind = rng.choice(["get", "lease", "ack", "nack"])
        if kind in ("ack", "nack"):
            if leases:
                lease_id = leases.pop(rng.randrange(len(leases)))
                for dock in (original, replayed):
                    getattr(dock, kind)(lease_id)
        else:
            consumer, count = rng.choice(CONSUMERS), rng.randint(1, 4)
            try:
                batch = original.get(consumer, ["reward"], count, timeout=0, lease=600 if kind == "lease" else None)
            except TokenportError:
                continue
            if batch is None:
                continue
            state = original.state
            lease = None if batch.lease_id is None else (batch.lease_id, time.time() + 600)
            replayed.state.reclaim(consumer, batch.partition, batch.rows, state.last_consumed, lease)
            target = replayed.state.partition(batch.partition)
            replayed.state.served(consumer, replayed.state.batch_bytes(target, ["reward"], batch.rows))
            if batch.lease_id is not None:
                leases.append(batch.lease_id)
        assert compared(replayed) == compared(original), (step, kind)
    for consumer in CONSUMERS:
        assert next_get(replayed, consumer) == next_get(original, consumer)


def next_get(dock: Dock, consumer: str) -> object:
    """The next get's partition, rows and lease id, or its refusal."""
    try:
        batch = dock.get(consumer, ["reward"], 3, timeout=0, lease=5)
    except TokenportError as error:
        return type(error).__name__, str(error)
    return None if batch is None else (batch.partition, batch.rows.tolist(), batch.lease_id)
