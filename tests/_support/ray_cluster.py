"""Ray for the test session: one local cluster per test process, and worker nodes that tests add and kill.

``ray_session`` is the cluster's head node (two CPUs), started once (about 5 s) and shut down at the end;
every Ray test connects to it. ``ray_nodes`` adds worker nodes on 127.0.0.1 for one test: each has its
own raylet, workers, object store and scratch directory (its workers' ``TMPDIR``; no directory is shared
between nodes unless a test passes one), and a custom resource named after it, so a task or actor can be
pinned there with ``resources={node.name: 1}``. A test kills a node (its raylet and workers, no goodbye)
with ``ray_nodes.kill(node)``, at once or after a delay; the nodes a test added are removed after it.

The head's health checks run every 200 ms, so a killed node is declared dead in about a second (Ray's
default is 30 s): lost tasks are retried and lost actors restarted while the test waits, not after it.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

_HEALTH = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 200, "health_check_failure_threshold": 5}
_STORE = 100 * 1024 * 1024  # each node's object store: enough for the tests, small enough for this machine


@dataclass
class Node:
    """One worker node: its name (also a custom resource of 1), scratch directory and Ray node."""

    name: str
    scratch: str
    raylet: Any = field(repr=False)
    alive: bool = True

    @property
    def node_id(self) -> str:
        return self.raylet.node_id


class Nodes:
    """The worker nodes of one test on the session's cluster."""

    _names = itertools.count()

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.added: list[Node] = []
        self._timers: list[threading.Timer] = []

    def add(self, cpus: int = 1, resources: dict[str, float] | None = None) -> Node:
        """Start a worker node with `cpus` CPUs, its own scratch directory, and a resource named after it."""
        name = f"node{next(self._names)}"
        scratch = tempfile.mkdtemp(prefix=f"tokenport-{name}-")
        raylet = self.cluster.add_node(
            num_cpus=cpus,
            object_store_memory=_STORE,
            resources={name: 1.0, **(resources or {})},
            env_vars={"TMPDIR": scratch, "TOKENPORT_TEST_NODE": name},
        )
        self.cluster.wait_for_nodes()
        node = Node(name, scratch, raylet)
        self.added.append(node)
        return node

    def kill(self, node: Node, after: float = 0.0) -> None:
        """Kill `node`'s raylet and workers (SIGKILL, no draining), now or `after` seconds from now."""
        if after > 0:
            timer = threading.Timer(after, self.kill, args=(node,))
            timer.daemon = True
            self._timers.append(timer)
            timer.start()
            return
        if node.alive:
            node.alive = False
            self.cluster.remove_node(node.raylet, allow_graceful=False)

    @property
    def alive(self) -> list[Node]:
        return [node for node in self.added if node.alive]

    def close(self) -> None:
        for timer in self._timers:
            timer.cancel()
            if timer.is_alive():
                timer.join()
        for node in self.added:
            if node.alive:
                node.alive = False
                self.cluster.remove_node(node.raylet, allow_graceful=True)
            shutil.rmtree(node.scratch, ignore_errors=True)


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """The session's local Ray cluster (``ray.cluster_utils.Cluster``), the driver connected to its head."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a throwaway local cluster needs no token
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 2,
            "object_store_memory": 2 * 1024**3,
            "include_dashboard": False,
            "_system_config": _HEALTH,
        },
    )
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    yield cluster
    ray.shutdown()  # before the cluster: Ray refuses to remove a node its driver is connected to
    cluster.shutdown()


@pytest.fixture(scope="session")
def ray_session(ray_cluster: Any) -> Any:
    """The ``ray`` module, connected to the session's cluster."""
    import ray

    return ray


@pytest.fixture
def ray_nodes(ray_cluster: Any) -> Iterator[Nodes]:
    """Worker nodes for one test (``add``, ``kill``); those left alive are removed after it."""
    nodes = Nodes(ray_cluster)
    yield nodes
    nodes.close()
