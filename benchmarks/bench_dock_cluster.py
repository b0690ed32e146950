"""RayDock against the real TransferQueue on 1, 2 and 4 Ray nodes of one machine, on TransferQueue's own workload.

Workload: TransferQueue's throughput test (scripts/performance_test/perftest.py in its repository:
``--global_batch_size 1024 --field_num 10 --seq_len 8192``, tensor fields only): one global batch of
1,024 rows x 10 fields of 8,192 float32 each, 32 KiB per field and row, 32 MiB per field, 320 MiB
(335,544,320 bytes) per batch. (Its older scripts/performance_test.py made every second field 1,024
random characters per row instead, 165 MiB in all; the current test's all-tensor batch is the one
used here.) Their test puts the batch with one ``kv_batch_put`` and reads it back with one
``kv_batch_get`` of all keys, 3 times; here each round does the same, spread over the nodes.

Cluster (``ray.cluster_utils.Cluster``, built here as tests/_support/ray_cluster.py builds the test
cluster, one per node count): a head node (1 logical CPU, 512 MiB object store) that runs this driver
and the systems' controllers, and N worker nodes (2 logical CPUs each, a custom resource naming each
node, an object store sized below). All of them share this machine's 2 physical cores: at N = 4 that
is 9 logical CPUs on 2 cores, oversubscribed, so the figures measure the software's overhead and
copies, not a network or N machines' worth of cores.

"N nodes": each worker node runs one producer and one consumer actor (pinned with the node's resource).
Producer i puts rows [i*1024/N, (i+1)*1024/N) of the batch (all 10 fields); consumer i reads the rows of
producer (i+1) mod N, so at N >= 2 every row crosses nodes. The data lives on the worker nodes: RayDock
with ``shards=N``, its controller on the head (the creator's node) and shard i on worker node i
(``shard_nodes=``; the actual placement is printed); TransferQueue's ``SimpleStorage`` with N storage
units, placed round-robin on the worker nodes by its own ``required_node_resource``. TransferQueue's
client is ``tq.init()`` in each actor (attaching to the controller the driver started), puts with
``tq.kv_batch_put(keys, partition, TensorDict)`` and gets with ``tq.kv_batch_get(keys, partition)``;
RayDock's are ``dock.put(partition, {field: (rows, 8192) array}, rows=...)`` and ``dock.get("train",
fields, count, partition, rows=...)``. The data are generated in the actors before timing (seeded, the
same bytes for both systems; TransferQueue's tensors share the numpy arrays' memory).

Each round: all N producers put at once, then all N consumers get at once (new partition per round,
dropped or cleared untimed afterwards); one warm-up round is not counted. Every get of every round is
checked (untimed): a digest of the rows received equals that of the rows put. Per operation: p50 and
p99 of the individual put and get calls (timed inside the actors; N x repeats calls; with few calls
p99 is close to the slowest). GB/s (10^9 bytes/s): the batch's 320 MiB over the wall time of the
round's put (or get) phase, from the driver's calls until every actor has returned; the median round.

Object stores: a put of a node's share is one object of 320/N MiB in the producer's node; RayDock's
shard pins it (a copy on the shard's node when it is another) and the consumer maps it (a copy on the
consumer's node): up to 3 copies of a share, and the last round's objects may not be freed yet, so each
worker node gets 3 x 320/N MiB + 256 MiB (at least 512 MiB): 1,216 MiB at N = 1, 736 MiB at N = 2,
512 MiB at N = 4. TransferQueue keeps rows in its storage actors' heaps (not the object store).

    python benchmarks/bench_dock_cluster.py                       # 1, 2, 4 nodes, 4 rounds each (~5 min)
    python benchmarks/bench_dock_cluster.py --nodes 2 --repeats 3
    python benchmarks/bench_dock_cluster.py --quick               # 1 node, 2 rounds, seq_len 1024
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import time
from typing import Any

import numpy as np

os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a throwaway local cluster needs no token
import ray  # noqa: E402

from _harness import Row, print_table  # noqa: E402

ROWS, FIELDS, SEQ = 1024, 10, 8192  # TransferQueue's perftest defaults
HEAD = "bench_head"  # the head node's own resource (RayDock's controller is pinned there)
WORKER = "bench_worker"  # the resource every worker node has (TransferQueue places its storage by it)
NAMES = [f"field_{i}" for i in range(FIELDS)]
MIB = 1024**2


def share_of(node: int, nodes: int, rows: int) -> np.ndarray:
    """The rows producer ``node`` of ``nodes`` puts."""
    return np.arange(node * rows // nodes, (node + 1) * rows // nodes)


def make_share(seed: int, node: int, nodes: int, rows: int, seq: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([seed, node, nodes])
    count = len(share_of(node, nodes, rows))
    return {name: rng.standard_normal((count, seq), dtype=np.float32) for name in NAMES}


def digest(columns: dict[str, Any]) -> str:
    h = hashlib.blake2b(digest_size=16)
    for name in NAMES:
        h.update(np.ascontiguousarray(np.asarray(columns[name])).data)
    return h.hexdigest()


def as_array(column: Any) -> np.ndarray:
    """A column received as a numpy array (TransferQueue hands back torch tensors, nested by row)."""
    if getattr(column, "is_nested", False):
        return np.stack([row.numpy() for row in column.unbind()])
    return column.numpy() if hasattr(column, "numpy") else np.asarray(column)


@ray.remote(num_cpus=0)
class Client:
    """A producer (holding its share) or a consumer (knowing the digest of what it will read) on one node."""

    def __init__(self, system: str, share: int, nodes: int, rows: int, seq: int, seed: int, producer: bool) -> None:
        self.system, self.rows = system, share_of(share, nodes, rows)
        data = make_share(seed, share, nodes, rows, seq)
        self.expected, self.data = digest(data), data if producer else None
        self.got: Any = None
        if system == "tq":
            import torch
            import transfer_queue as tq
            from tensordict import TensorDict

            tq.init()  # attaches to the controller the driver started
            self.tq, self.keys = tq, [f"row{r}" for r in self.rows]
            if producer:
                self.tensors = TensorDict({k: torch.from_numpy(v) for k, v in data.items()}, batch_size=len(self.rows))

    def node(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def put(self, dock: Any, partition: str) -> float:
        began = time.perf_counter()
        if self.system == "tq":
            self.tq.kv_batch_put(keys=self.keys, partition_id=partition, fields=self.tensors)
        else:
            dock.put(partition, self.data, rows=self.rows)
        return time.perf_counter() - began

    def get(self, dock: Any, partition: str) -> float:
        """Get this consumer's rows (kept for ``check``, which runs after the timed phase)."""
        began = time.perf_counter()
        if self.system == "tq":
            self.got = self.tq.kv_batch_get(keys=self.keys, partition_id=partition)  # as their perftest times it
        else:
            self.got = dock.get("train", NAMES, len(self.rows), partition, rows=self.rows, timeout=300)
        return time.perf_counter() - began

    def check(self) -> bool:
        """Whether the rows of the last get are the rows put (then they are let go)."""
        got, self.got = self.got, None
        return digest({name: as_array(got[name]) for name in NAMES}) == self.expected


def start_cluster(nodes: int, seq: int) -> tuple[Any, list[str]]:
    """A head and ``nodes`` worker nodes; the driver connected. Returns the cluster and the workers' names."""
    from ray.cluster_utils import Cluster

    payload = ROWS * FIELDS * seq * 4
    store = max(3 * payload // nodes + 256 * MIB, 512 * MIB)
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "object_store_memory": 512 * MIB,
            "include_dashboard": False,
            "resources": {HEAD: 1.0},
        },
    )
    names = []
    for i in range(nodes):
        cluster.add_node(num_cpus=2, object_store_memory=store, resources={WORKER: 1.0, f"node{i}": 1.0})
        names.append(f"node{i}")
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    print(f"  {nodes} worker node(s), object store {store / MIB:,.0f} MiB each; payload {payload / MIB:,.0f} MiB")
    return cluster, names


def clients(system: str, names: list[str], seq: int, seed: int) -> tuple[list[Any], list[Any]]:
    """Producer i and consumer i on node i; consumer i reads producer (i+1) mod N's rows."""
    n = len(names)
    producers = [
        Client.options(resources={name: 0.01}).remote(system, i, n, ROWS, seq, seed, True)
        for i, name in enumerate(names)
    ]
    consumers = [
        Client.options(resources={name: 0.01}).remote(system, (i + 1) % n, n, ROWS, seq, seed, False)
        for i, name in enumerate(names)
    ]
    ray.get([c.node.remote() for c in producers + consumers])  # started (and data made) before timing
    return producers, consumers


def rounds(producers, consumers, dock: Any, repeats: int, begin, end) -> dict[str, list[float]]:
    """``repeats`` timed rounds after one warm-up: every put and get time, and each round's phase walls."""
    out: dict[str, list[float]] = {"put": [], "get": [], "put_wall": [], "get_wall": []}
    for k in range(repeats + 1):
        partition = f"r{k}"
        begin(partition)
        t0 = time.perf_counter()
        puts = ray.get([p.put.remote(dock, partition) for p in producers])
        t1 = time.perf_counter()
        gets = ray.get([c.get.remote(dock, partition) for c in consumers])
        t2 = time.perf_counter()
        if not all(ray.get([c.check.remote() for c in consumers])):
            sys.exit(f"FAILED: a get of round {k} differs from what was put")
        end(partition)
        if k:
            out["put"] += puts
            out["get"] += gets
            out["put_wall"].append(t1 - t0)
            out["get_wall"].append(t2 - t1)
    return out


def node_name(node_id: str) -> str:
    """ "head" or the worker node's name (its custom resource)."""
    resources = next(n["Resources"] for n in ray.nodes() if n["NodeID"] == node_id)
    return next((key for key in resources if key.startswith("node") and key[4:].isdigit()), "head")


def placement(actors: list[Any]) -> list[str]:
    """The node each actor runs on."""
    here = ray.get([a.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id()) for a in actors])
    return [node_name(node) for node in here]


def node_id(name: str) -> str:
    """The id of the live worker node named ``name`` (its custom resource)."""
    return next(n["NodeID"] for n in ray.nodes() if n["Alive"] and name in n["Resources"])


def run_raydock(names: list[str], seq: int, seed: int, repeats: int) -> dict[str, list[float]]:
    from tokenport.dock import Column
    from tokenport.dock.ray import RayDock

    columns = [Column(name, np.float32, shape=(seq,)) for name in NAMES]
    dock = RayDock(columns, ["train"], shards=len(names), shard_nodes=[node_id(name) for name in names])
    controller = node_name(ray.get(dock._controller.node.remote()))
    print(f"  RayDock: controller on {controller}, shards on {placement(dock._shards)}", flush=True)
    producers, consumers = clients("raydock", names, seq, seed)
    try:
        return rounds(
            producers,
            consumers,
            dock,
            repeats,
            lambda p: dock.add_partition(p, num_prompts=ROWS),
            dock.drop_partition,
        )
    finally:
        for actor in producers + consumers:
            ray.kill(actor)
        dock.shutdown()
        settle()


def settle(seconds: float = 30.0) -> None:
    """Wait until the killed actors have handed their resources back (so the next system's controller
    finds the head's CPU free, as this one did)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        free, total = ray.available_resources(), ray.cluster_resources()
        if all(free.get(key, 0.0) >= amount for key, amount in total.items() if key == "CPU" or key == HEAD):
            return
        time.sleep(0.2)


def run_transferqueue(names: list[str], seq: int, seed: int, repeats: int) -> dict[str, list[float]]:
    import transfer_queue as tq
    from omegaconf import OmegaConf

    storage = {"num_data_storage_units": len(names), "total_storage_size": None, "required_node_resource": WORKER}
    tq.init(OmegaConf.create({"backend": {"storage_backend": "SimpleStorage", "SimpleStorage": storage}}))
    units = [ray.get_actor(f"TransferQueueStorageUnit#{i}") for i in range(len(names))]
    controller = placement([ray.get_actor("TransferQueueController", namespace="transfer_queue")])
    print(f"  TransferQueue: controller on {controller[0]}, storage units on {placement(units)}", flush=True)
    producers, consumers = clients("tq", names, seq, seed)
    keys = [f"row{r}" for r in range(ROWS)]
    try:
        return rounds(producers, consumers, None, repeats, lambda p: None, lambda p: tq.kv_clear(keys, p))
    finally:
        for actor in producers + consumers:
            ray.kill(actor)
        tq.close()


def table_rows(nodes: int, ours: dict[str, list[float]], theirs: dict[str, list[float]], seq: int) -> list[Row]:
    """p50 and p99 of each operation (seconds) and each phase's rate (bytes/s, printed as G = GB/s)."""
    payload = ROWS * FIELDS * seq * 4
    section, peer = f"{nodes} node{'s' if nodes > 1 else ''}", "TransferQueue"
    rows = []
    for op in ("put", "get"):
        for q in (50, 99):
            mine, peers = (float(np.percentile(side[op], q)) for side in (ours, theirs))
            rows.append(Row(section, f"{op} p{q}, one node's share", "s", mine, peers, peer, lower_is_better=True))
        rate = [payload / statistics.median(side[f"{op}_wall"]) for side in (ours, theirs)]
        rows.append(Row(section, f"{op} {payload / MIB:,.0f} MiB, all nodes", "bytes/s", rate[0], rate[1], peer))
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 4], help="worker node counts (1 2 4)")
    parser.add_argument("--repeats", type=int, default=4, help="timed rounds per system and node count (4)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="1 node, 2 rounds, seq_len 1024 (a smoke run)")
    args = parser.parse_args(argv)
    nodes, repeats, seq = ([1], 2, 1024) if args.quick else (args.nodes, args.repeats, SEQ)
    if min(nodes) < 1 or repeats < 1:
        parser.error("--nodes and --repeats take positive counts")
    table: list[Row] = []
    for n in nodes:
        began = time.perf_counter()
        cluster, names = start_cluster(n, seq)
        try:
            ours = run_raydock(names, seq, args.seed, repeats)
            theirs = run_transferqueue(names, seq, args.seed, repeats)
        finally:
            ray.shutdown()  # before the cluster: Ray refuses to remove a node its driver is connected to
            cluster.shutdown()
        print(f"  {n} node(s): {repeats} rounds per system checked and timed in {time.perf_counter() - began:.0f} s")
        table += table_rows(n, ours, theirs, seq)
    print_table(table)


if __name__ == "__main__":
    main()
