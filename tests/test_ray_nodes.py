"""The test cluster's worker nodes: pinned by their resource, each with its own scratch, killed for real."""

from __future__ import annotations

import tempfile
import time

import pytest


def test_nodes_are_pinned_apart_and_killed(ray_session, ray_nodes) -> None:
    ray = ray_session
    first, second = ray_nodes.add(), ray_nodes.add()

    @ray.remote(max_retries=0)
    def where() -> tuple[str, str]:
        return ray.get_runtime_context().get_node_id(), tempfile.gettempdir()

    seen = ray.get([where.options(resources={node.name: 1}).remote() for node in (first, second)])
    assert seen == [(first.node_id, first.scratch), (second.node_id, second.scratch)]

    @ray.remote(max_retries=0)
    def sleeper() -> None:
        time.sleep(60)

    doomed = sleeper.options(resources={first.name: 1}).remote()
    ray_nodes.kill(first, after=0.5)
    with pytest.raises(ray.exceptions.RayError):
        ray.get(doomed, timeout=30)
    assert [node.name for node in ray_nodes.alive] == [second.name]
    assert ray.get(where.options(resources={second.name: 1}).remote()) == (second.node_id, second.scratch)
