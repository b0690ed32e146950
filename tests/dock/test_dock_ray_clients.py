"""RayDock under 32 concurrent client processes: every row served once, contents exact, for K = 1 and 4.

The throughputs are printed, not asserted (no timing assertions); benchmarks/bench_dock_ray_scale.py
records them.
"""

from __future__ import annotations

import sys
import time

import numpy as np
import pytest

from tokenport.dock import Column

ray = pytest.importorskip("ray")
from tokenport.dock.ray import RayDock  # noqa: E402

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this test module

CLIENTS = 32
GROUP = 4  # rows per prompt; each client puts one prompt's rows
COLUMNS = [Column("tokens", np.int32, ragged=True), Column("reward", np.float32)]


def tokens_of(row: int) -> np.ndarray:
    return np.arange(row, row + 1 + (row * 37) % 700, dtype=np.int32)


class Client:
    """One client process, kept across docks (starting 32 processes is what costs here)."""

    def ready(self) -> bool:
        return True

    def run(self, dock: RayDock, partition: str, prompt: int) -> dict[int, tuple[np.ndarray, float]]:
        return client(dock, partition, prompt)


def client(dock: RayDock, partition: str, prompt: int) -> dict[int, tuple[np.ndarray, float]]:
    """Put one prompt's rows, then get batches of 3 rows until the partition is consumed."""
    rows = np.arange(prompt * GROUP, (prompt + 1) * GROUP)
    dock.put(
        partition,
        {"tokens": [tokens_of(int(r)) for r in rows], "reward": rows.astype(np.float32) / 7},
        rows=rows,
    )
    served: dict[int, tuple[np.ndarray, float]] = {}
    while (batch := dock.get("train", ["tokens", "reward"], 3, partition, timeout=120.0)) is not None:
        tokens, reward = batch["tokens"], batch["reward"]
        for i, row in enumerate(batch.rows.tolist()):
            assert row not in served
            served[row] = (tokens.row(i).copy(), float(reward[i]))
    return served


def test_32_concurrent_clients_are_each_served_distinct_exact_rows_for_one_and_four_shards(ray_session):
    clients = [ray.remote(num_cpus=0)(Client).remote() for _ in range(CLIENTS)]
    ray.get([c.ready.remote() for c in clients])
    for shards in (1, 4):
        dock = RayDock(COLUMNS, ["train"], GROUP, shards=shards)
        try:
            dock.add_partition("p", num_prompts=CLIENTS)
            began = time.perf_counter()
            results = ray.get([c.run.remote(dock, "p", prompt) for prompt, c in enumerate(clients)])
            seconds = time.perf_counter() - began
            rows = [row for served in results for row in served]
            assert sorted(rows) == list(range(CLIENTS * GROUP))  # every row served once, to one client
            for served in results:
                for row, (tokens, reward) in served.items():
                    np.testing.assert_array_equal(tokens, tokens_of(row))
                    assert reward == np.float32(row) / np.float32(7)
            assert dock.all_consumed("train", "p")
            print(f"K={shards}: {CLIENTS} clients, {len(rows)} rows put and got in {seconds:.2f} s")
        finally:
            dock.shutdown()
    for c in clients:
        ray.kill(c)
