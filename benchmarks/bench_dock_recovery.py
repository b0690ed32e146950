"""RayDock under faults on a local 3-node cluster: recovery time after a shard's or a node's death, and what
two copies of every put (``replicas=2``) cost puts and gets against one (``replicas=1``).

Cluster: ``ray.cluster_utils.Cluster`` on 127.0.0.1, a head (2 CPUs) and two worker nodes (1 CPU each),
each with its own raylet and object store, health checks every 200 ms (a dead node is declared dead in
about a second, as in the tests). The dock: 3 shards, one per node (``shard_nodes``), the controller on
the head; the producer is an actor on worker node 1, the consumer the driver (head).

Workload: puts of 64 rows (ragged int32 tokens, 512-1536 per row: about 256 KB a put) and gets of 64
rows. Cost rows: p50 and p99 of each put's latency (timed in the producer) and each get's (timed in
the driver), replicas=2 against replicas=1 (lower is better; the ratio is replicas=1's time over
replicas=2's). Recovery rows: a partition is filled (replicas=2), then a shard actor is killed
(ray.kill, restarted empty), or the controller (ray.kill, restarted: it replays the journal the shards
hold), or worker node 2 (its raylet and workers, SIGKILL); timed from the kill to
(a) the first get of every row of the partition that returns them all, exactly (reads fall back to the
surviving copy), and (b) the repair: every object held twice again. No goal: figures for BENCHMARKS.md.

    python benchmarks/bench_dock_recovery.py            # 200 timed puts and gets per setting, 64 puts filled
    python benchmarks/bench_dock_recovery.py --quick    # 40 and 16
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Row, print_table  # noqa: E402

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from tokenport.dock import Column  # noqa: E402
from tokenport.dock.ray import RayDock  # noqa: E402

ROWS = 64  # rows per put and per get
COLUMNS = [Column("tokens", np.int32, ragged=True)]
_HEALTH = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 200, "health_check_failure_threshold": 5}


def rows_of(put: int) -> list[np.ndarray]:
    rng = np.random.default_rng(put)
    return [rng.integers(0, 50_000, int(rng.integers(512, 1536))).astype(np.int32) for _ in range(ROWS)]


class Producer:
    def fill(self, dock: RayDock, partition: str, puts: int) -> list[float]:
        """Put ``puts`` batches of ROWS rows; each put's latency in seconds."""
        times = []
        for put in range(puts):
            values = {"tokens": rows_of(put)}
            start = time.perf_counter()
            dock.put(partition, values, rows=range(put * ROWS, (put + 1) * ROWS))
            times.append(time.perf_counter() - start)
        return times


def get_all(dock: RayDock, partition: str, puts: int, consumer: str) -> list[float]:
    """Get every row of ``partition`` in batches of ROWS, checking each row; each get's latency."""
    times = []
    for put in range(puts):
        start = time.perf_counter()
        batch = dock.get(consumer, ["tokens"], ROWS, partition, rows=range(put * ROWS, (put + 1) * ROWS), timeout=60)
        times.append(time.perf_counter() - start)
        assert batch is not None
        got = batch["tokens"].to_list()
        if not all(np.array_equal(a, b) for a, b in zip(got, rows_of(put))):
            raise SystemExit(f"put {put}: rows differ from what was put")
    return times


def percentile(times: list[float], q: float) -> float:
    return float(np.percentile(np.array(times), q))


def cost_rows(cluster: Cluster, nodes: list, puts: int) -> list[Row]:
    """Put and get latency with replicas=2 against replicas=1."""
    figures = {}
    for replicas in (1, 2):
        dock = new_dock(cluster, nodes, replicas, ["c"])
        dock.add_partition("p", puts * ROWS)
        producer = producer_on(0)
        put_times = ray.get(producer.fill.remote(dock, "p", puts))
        get_times = get_all(dock, "p", puts, "c")
        figures[replicas] = (put_times, get_times)
        ray.kill(producer)
        dock.shutdown()
    rows = []
    for kind, index in (("put", 0), ("get", 1)):
        for q in (50, 99):
            ours, theirs = (percentile(figures[r][index], q) for r in (2, 1))
            rows.append(
                Row(
                    "replication cost",
                    f"{kind} of {ROWS} rows, p{q}",
                    "s",
                    ours,
                    theirs,
                    "replicas=1",
                    lower_is_better=True,
                )
            )
    return rows


def recovery_rows(cluster: Cluster, nodes: list, puts: int) -> list[Row]:
    """From the kill of a shard, then of the controller, then of a worker node, to a full get and to the repair."""
    rows = []
    for victim in ("shard", "controller", "node"):
        dock = new_dock(cluster, nodes, 2, ["c"])
        dock.add_partition("p", puts * ROWS)
        producer = producer_on(0)
        ray.get(producer.fill.remote(dock, "p", puts))
        start = time.perf_counter()
        if victim == "shard":
            ray.kill(dock._shards[2], no_restart=False)
        elif victim == "controller":  # restarted: it replays the journal its shards hold
            ray.kill(dock._controller, no_restart=False)
        else:
            cluster.remove_node(nodes[1], allow_graceful=False)
        get_all(dock, "p", puts, "c")
        served = time.perf_counter() - start
        while (held := dock.held_objects())["pinned"] != 2 * held["objects"]:
            time.sleep(0.05)
        repaired = time.perf_counter() - start
        if dock.lost_objects():
            raise SystemExit(f"{victim}: {dock.lost_objects()} objects lost")
        rows.append(Row("recovery", f"{victim} killed: every row served", "s", served, float("nan"), "-"))
        rows.append(Row("recovery", f"{victim} killed: every object held twice", "s", repaired, float("nan"), "-"))
        ray.kill(producer)
        dock.shutdown()
    return rows


def new_dock(cluster: Cluster, nodes: list, replicas: int, consumers: list[str]) -> RayDock:
    placement = [cluster.head_node.node_id, *(node.node_id for node in nodes)]
    return RayDock(COLUMNS, consumers, shards=3, replicas=replicas, shard_nodes=placement)


def producer_on(worker: int) -> Any:
    """A Producer actor on worker node ``worker``."""
    return ray.remote(num_cpus=0, resources={f"worker{worker}": 0.01})(Producer).remote()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--puts", type=int, default=None, help="timed puts per setting (default 200, quick 40)")
    parser.add_argument("--fill", type=int, default=None, help="puts before a kill (default 64, quick 16)")
    args = parser.parse_args(argv)
    puts, fill = args.puts or (40 if args.quick else 200), args.fill or (16 if args.quick else 64)
    start = time.perf_counter()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 2, "include_dashboard": False, "_system_config": _HEALTH},
    )
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    nodes = [
        cluster.add_node(num_cpus=1, object_store_memory=300 * 1024**2, resources={f"worker{i}": 1.0}) for i in range(2)
    ]
    cluster.wait_for_nodes()
    print(f"  ray {ray.__version__}, 3 nodes on 127.0.0.1 (started in {time.perf_counter() - start:,.1f} s)")
    try:
        rows = cost_rows(cluster, nodes, puts) + recovery_rows(cluster, nodes, fill)
    finally:
        ray.shutdown()
        cluster.shutdown()
    print_table(rows)


if __name__ == "__main__":
    main()
