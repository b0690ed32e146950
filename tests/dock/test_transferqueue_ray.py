"""The TransferQueue adapter on Ray: ``init()`` in a Ray worker joins the driver's dock (the controller
named as TransferQueue's), so what a worker puts the driver reads, and the other way round."""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tensordict")
pytest.importorskip("transfer_queue")
ray = pytest.importorskip("ray")

from tensordict import TensorDict  # noqa: E402

import tokenport.dock.transferqueue as dock_tq  # noqa: E402
from tokenport.dock import transferqueue_ray  # noqa: E402

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this test module


def worker(use_async: bool) -> dict:
    """In a Ray worker: join, read the driver's data, put and fetch some of its own, close (joined: the
    controller lives on)."""
    import asyncio

    import torch
    from tensordict import TensorDict

    import tokenport.dock.transferqueue as tq

    tq.init()  # no conf, no dock: joins the running controller
    client = tq.get_client()

    def call(name, *args, **kwargs):
        return (
            asyncio.run(getattr(tq, f"async_{name}")(*args, **kwargs))
            if use_async
            else getattr(tq, name)(*args, **kwargs)
        )

    mode = "async" if use_async else "sync"
    driver_rows = [row.tolist() for row in call("kv_batch_get", ["driver"], "kv")["x"]]
    call("kv_put", f"worker-{mode}", "kv", {"x": torch.tensor([7, 8])}, {"by": "worker"})
    client.put(data=TensorDict({"r": torch.tensor([10.0, 11.0])}, batch_size=2), partition_id=f"rollout-{mode}")
    fetched = client.get_meta(["r"], 2, "train", task_name="learner")
    out = {
        "driver_rows": driver_rows,
        "driver_tags": call("kv_list", "kv")["kv"]["driver"],
        "fetched": fetched.global_indexes,
        "fetched_r": client.get_data(fetched)["r"].tolist(),
        "owner": client.owner,
    }
    tq.close()
    return out


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_ray_workers_client_joins_the_drivers_dock(ray_session, use_async):
    dock_tq.close()
    dock_tq.init({"controller": {"polling_mode": True}})  # Ray runs, no dock: the named controller starts here
    try:
        client = dock_tq.get_client()
        dock_tq.kv_put("driver", "kv", {"x": torch.tensor([1, 2, 3])}, {"by": "driver"})
        client.put(data=TensorDict({"r": torch.tensor([0.5, 1.5])}, batch_size=2), partition_id="train")

        got = ray.get(ray.remote(worker).remote(use_async), timeout=120)

        # the worker saw the driver's data and consumed the driver's samples
        assert got["driver_rows"] == [[1, 2, 3]]
        assert got["driver_tags"] == {"by": "driver"}
        assert got["fetched_r"] == [0.5, 1.5]
        assert got["owner"] is False
        assert client.check_consumption_status("learner", "train")
        # the driver sees the worker's key, tag, data and partition (the worker's close() ended nothing)
        mode = "async" if use_async else "sync"
        assert dock_tq.kv_list("kv")["kv"][f"worker-{mode}"] == {"by": "worker"}
        assert [r.tolist() for r in dock_tq.kv_batch_get([f"worker-{mode}"], "kv")["x"]] == [[7, 8]]
        meta = client.get_meta(["r"], 2, f"rollout-{mode}", task_name="learner")
        assert client.get_data(meta)["r"].tolist() == [10.0, 11.0]
        assert set(client.get_partition_list()) == {"kv", "train", f"rollout-{mode}"}
        assert client.owner  # one dock, the named controller's, started by the driver
        assert ray.get_actor(transferqueue_ray.NAME, namespace=transferqueue_ray.NAMESPACE) is not None
    finally:
        dock_tq.close()
    with pytest.raises(ValueError):  # the driver started the controller: its close() ended it
        ray.get_actor(transferqueue_ray.NAME, namespace=transferqueue_ray.NAMESPACE)
