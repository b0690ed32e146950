"""Benchmark: `prepare` on a Ray cluster, 1 node of 3 CPUs against 3 nodes of 1 CPU, with and without a node killed.

Workload: bench_prepare's corpus (the standard library's source and docstrings, one jsonl document
each, repeated to --size-mb) and its HF byte-level BPE, cut into units of --unit-mb, prepared with
`executor="ray"`. The cluster is built here as the tests build theirs (``ray.cluster_utils.Cluster``
on 127.0.0.1, health checks every 200 ms so a dead node is noticed in about a second): a head of 0
CPUs (the driver only) and worker nodes, each with its own raylet, object store and TMPDIR. Cases:

- 1 node x 3 CPUs, and 3 nodes x 1 CPU (the same total cores), no fault;
- 3 nodes x 1 CPU, one node SIGKILLed (raylet and workers) half way through the fault-free run's
  time: its units are run again on the other two;
- 1 node x 3 CPUs, killed half way and replaced by a fresh node of 3 CPUs (a one-node cluster
  cannot finish otherwise).

Every output is checked byte for byte equal to the first case's (parts and provenance). Figures are
documents/s and seconds of each whole run (start to finished output; input MB/s printed below the
table); the baseline column ("1x3") is the fault-free 1-node run.

    python benchmarks/bench_prepare_cluster.py                 # 128 MB, about 30-60 s per case
    python benchmarks/bench_prepare_cluster.py --quick         # 6 MB
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

from _harness import Row, print_table, scratch_directory
from bench_prepare import build_corpus
from tokenport.corpus import PrepareConfig, prepare

_HEALTH = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 200, "health_check_failure_threshold": 5}
CASES = (  # (name, CPUs per node, nodes, kill one half way, replace it)
    ("1 node x 3 CPUs", 3, 1, False, False),
    ("3 nodes x 1 CPU", 1, 3, False, False),
    ("3 nodes x 1 CPU, 1 killed", 1, 3, True, False),
    ("1 node x 3 CPUs, killed, replaced", 3, 1, True, True),
)


def _outputs(directory: str) -> dict[str, bytes]:
    """The stores and provenance of an output (manifests hold creation times)."""
    return {
        name: Path(directory, name).read_bytes()
        for name in sorted(os.listdir(directory))
        if name.endswith((".bin", ".idx", ".npz"))
    }


class Nodes:
    """Worker nodes on `cluster`, each with its own scratch TMPDIR; `kill` SIGKILLs one (no draining)."""

    def __init__(self, cluster, cpus: int) -> None:
        self.cluster, self.cpus, self.live = cluster, cpus, []

    def add(self) -> None:
        scratch = tempfile.mkdtemp(prefix="tp-bench-node-")
        self.live.append(
            self.cluster.add_node(num_cpus=self.cpus, object_store_memory=200 << 20, env_vars={"TMPDIR": scratch})
        )
        self.cluster.wait_for_nodes()

    def kill(self, replace: bool) -> None:
        self.cluster.remove_node(self.live.pop(0), allow_graceful=False)
        if replace:
            self.add()

    def close(self) -> None:
        for node in self.live:
            self.cluster.remove_node(node, allow_graceful=True)
        self.live = []


def run_case(cluster, case: tuple, corpus: Path, tokenizer: Path, output: str, unit_mb: int, kill_after: float):
    """Seconds for `case` from an empty output, and the output's files. The run goes on a thread, so
    that this (main) thread can kill a node at `kill_after` s and start its replacement (Ray starts
    nodes only from the main thread)."""
    name, cpus, count, kill, replace = case
    shutil.rmtree(output, ignore_errors=True)  # from an empty output (a finished one would be reused)
    nodes = Nodes(cluster, cpus)
    for _ in range(count):
        nodes.add()
    config = PrepareConfig([str(corpus)], output, tokenizer=f"hf:{tokenizer}", executor="ray", unit_bytes=unit_mb << 20)
    outcome: dict = {}
    worker = threading.Thread(target=lambda: outcome.update(result=_prepared(config)))
    try:
        started = time.perf_counter()
        worker.start()
        if kill:
            worker.join(kill_after)
            if not worker.is_alive():
                print(f"  {name}: finished before the kill at {kill_after:.1f} s; use a larger --size-mb")
            nodes.kill(replace)
        worker.join()
        seconds = time.perf_counter() - started
    finally:
        worker.join()
        nodes.close()
    result = outcome["result"]
    if isinstance(result, BaseException):
        raise result
    print(f"  {name}: {seconds:.1f} s, {result.units} units, {result.documents:,} documents", flush=True)
    return seconds, _outputs(output)


def _prepared(config: PrepareConfig):
    """prepare's result, or the exception it raised (to be raised on the main thread)."""
    try:
        return prepare(config)
    except BaseException as exc:  # noqa: BLE001  (handed to the main thread)
        return exc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--size-mb", type=int, default=None)
    parser.add_argument("--unit-mb", type=int, default=1)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    size_mb = args.size_mb or (6 if args.quick else 128)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray
    from ray.cluster_utils import Cluster

    with scratch_directory(args.dir, "tp_bench_prepare_cluster_", args.quick) as directory:
        corpus, tokenizer, documents = build_corpus(Path(directory), size_mb)
        megabytes = corpus.stat().st_size / 1e6
        cluster = Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": 0, "include_dashboard": False, "_system_config": _HEALTH},
        )
        ray.init(address=cluster.address, log_to_driver=False)
        try:
            times, outputs, kill_after = {}, {}, 0.0
            for case in CASES:
                output = os.path.join(directory, f"out-{len(times)}")
                times[case[0]], outputs[case[0]] = run_case(
                    cluster, case, corpus, tokenizer, output, args.unit_mb, kill_after
                )
                kill_after = kill_after or times[case[0]] / 2  # half the fault-free 1-node run's time
        finally:
            ray.shutdown()
            cluster.shutdown()
        first = outputs[CASES[0][0]]
        if any(files != first for files in outputs.values()):
            raise SystemExit("outputs differ between cases")
        base = times[CASES[0][0]]
        rows = []
        for name, seconds in times.items():
            case = f"{megabytes:,.0f} MB, {documents:,} docs"
            rows.append(Row(f"prepare on Ray: {name}", case, "docs/s", documents / seconds, documents / base, "1x3"))
            rows.append(Row(f"prepare on Ray: {name}", case, "s", seconds, base, "1x3", lower_is_better=True))
        print_table(rows)
        for name, seconds in times.items():
            print(f"  {name}: {documents / seconds:,.0f} documents/s, {megabytes / seconds:,.2f} MB/s")
        print("  outputs identical in every case (parts and provenance, byte for byte)")


if __name__ == "__main__":
    main()
