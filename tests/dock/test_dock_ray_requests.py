"""RayDock's wire: the controller accepts only the frozen requests DockBase built (their checks ran once,
in the caller), and ``open_dock(backend="ray")`` builds a RayDock."""

from __future__ import annotations

import numpy as np
import pytest

import tokenport as tp
from tokenport.dock import Column, GetRequest, PutRequest, StateCall, open_dock

ray = pytest.importorskip("ray")
from tokenport.dock.ray import RayDock  # noqa: E402
from tokenport.dock.ray_controller import opened, ray_get, wire  # noqa: E402


def test_the_controller_trusts_only_request_objects_and_open_dock_builds_a_ray_dock(ray_session):
    dock = open_dock([Column("x", np.int64)], ["train"], 2, backend="ray", shards=2)
    try:
        assert isinstance(dock, RayDock) and dock.n_samples_per_prompt == 2
        dock.add_partition("p", 2)
        dock.put("p", {"x": [1, 2, 3, 4]}, rows=[0, 1, 2, 3])
        controller = dock._controller
        raw = [
            (controller.take, ({"consumer": "train", "columns": ["x"], "count": 1},), "GetRequest"),
            (controller.take, (wire({"consumer": "train", "columns": ["x"], "count": 1}, None, None),), "GetRequest"),
            (controller.call, (("add_partition", "q", 1),), "StateCall"),
            (controller.call, (wire(("add_partition", "q", 1)),), "StateCall"),
            (controller.call, (b"not a pickle",), "StateCall"),
            (controller.append, (("p", 0, {"x": [1]}),), "AppendRequest"),
            (controller.commit, (wire(("p", ["x"], np.arange(2)), {}, "id", 0), [None]), "PutRequest"),
            (controller.commit, ((("p", ["x"], np.arange(2)), {}, "id", 0), [None]), "PutRequest"),
        ]
        for method, args, kind in raw:
            with pytest.raises(tp.ConfigError, match=f"expected a {kind}"):
                ray_get(method.remote(*args))
        put = PutRequest.checked(dock.column_of, "p", {"x": [9, 9]}, [0, 1], overwrite=True)
        for shard in (2, -2, "0"):  # a shard this dock does not have: refused before anything is recorded
            with pytest.raises(tp.ConfigError, match="is not one of this dock's 2 shards"):
                ray_get(controller.commit.remote(wire(put.without_values(), put.lengths, "id", shard), [None]))
        assert dock.partitions == {"p": 4}  # nothing the refused calls named was done
        assert dock.held_objects()["objects"] == 1
        request = GetRequest.checked("train", ["x"], 4, "p")
        name, rows, *_ = opened(ray_get(controller.take.remote(wire(request, None, None)))[0])
        assert (name, rows.tolist()) == ("p", [0, 1, 2, 3])
        assert opened(ray_get(controller.call.remote(wire(StateCall("all_consumed", ("train", "p")))))) == (True,)
    finally:
        dock.shutdown()
