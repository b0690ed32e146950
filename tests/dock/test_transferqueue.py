"""The TransferQueue adapter: one scripted client run against the real ``transferqueue`` package (on a
local Ray) and against the dock, every returned batch, field and status compared; then its refusals."""

from __future__ import annotations

import asyncio
import os
import tempfile

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tensordict = pytest.importorskip("tensordict")
pytest.importorskip("transfer_queue")

from tensordict import NonTensorStack, TensorDict  # noqa: E402

import tokenport.dock.transferqueue as dock_tq  # noqa: E402
from tokenport.dock import Dock  # noqa: E402
from tokenport.dock.transferqueue_loader import StreamingDataLoader, StreamingDataset  # noqa: E402
from tokenport.errors import ConfigError, InputDataError  # noqa: E402

torch.set_num_threads(1)


def _jagged(lengths, start=0, dtype=torch.int64):
    rows = [torch.arange(start + n, start + 2 * n, dtype=dtype) for n in lengths]
    return torch.nested.nested_tensor(rows, layout=torch.jagged)


def _batch(n, seed):
    """Dense 1-D, dense 3-D and ragged fields (token ids) for ``n`` samples."""
    g = torch.Generator().manual_seed(seed)
    return TensorDict(
        {
            "reward": torch.randn(n, generator=g),
            "prompt": torch.randint(0, 100, (n, 3, 2), generator=g),
            "tokens": _jagged([1 + (seed + i) % 4 for i in range(n)], start=seed),
        },
        batch_size=n,
    )


def _shape(value):
    return None if value is None else [int(d) for d in value]


def _meta(meta):
    """Everything a BatchMeta says, in plain comparable values."""
    schema = {}
    for name, info in meta.field_schema.items():
        entry = {
            "dtype": info["dtype"],
            "shape": _shape(info["shape"]),
            "is_nested": info["is_nested"],
            "is_non_tensor": info["is_non_tensor"],
        }
        if info.get("per_sample_shapes") is not None:
            entry["per_sample_shapes"] = [_shape(s) for s in info["per_sample_shapes"]]
        schema[name] = entry
    return {
        "size": meta.size,
        "global_indexes": list(meta.global_indexes),
        "partition_ids": list(meta.partition_ids),
        "production_status": [int(s) for s in meta.production_status],
        "is_ready": meta.is_ready,
        "field_names": list(meta.field_names),
        "custom_meta": [dict(c) for c in meta.custom_meta],
        "field_schema": schema,
    }


def _data(td):
    """A TensorDict as plain values: per field its layout, dtype, shape kind and every row (bfloat16
    rows as their bits); Python values (a NonTensorStack) as the values and their types."""
    out = {"batch_size": list(td.batch_size)}
    for name in sorted(td.keys()):
        value = td.get(name)
        if not isinstance(value, torch.Tensor):
            items = value.tolist()
            out[name] = {"type": type(value).__name__, "rows": [_item(v) for v in items]}
            continue
        rows = value.unbind() if value.is_nested else list(value)
        if value.dtype == torch.bfloat16:  # exact: the bits (NaN is no equal to itself)
            rows = [r.contiguous().view(torch.int16) for r in rows]
        out[name] = {
            "nested": bool(value.is_nested),
            "layout": str(value.layout),
            "dtype": value.dtype,
            "rows": [r.tolist() for r in rows],
        }
    return out


def _status(pair):
    """A (global indexes, status) pair of tensors as plain values (None stays None)."""
    return [None if t is None else (t.tolist(), str(t.dtype)) for t in pair]


def _item(value):
    """A Python value of a NonTensorStack as plain comparable data (a tensor as its dtype and values)."""
    if isinstance(value, torch.Tensor):
        return ("tensor", value.dtype, value.tolist())
    return (type(value).__name__, value)


def _typed(n):
    """Every data type TransferQueue's docs list, for ``n`` samples: bfloat16 (dense 2-D, 1-D, jagged;
    NaN, infinity, -0 and a subnormal among them), lists of strings, per-sample metadata
    (NonTensorStack of dicts and lists), jagged and strided nested tensors."""
    bits = torch.tensor([0x3FC0, -0x80, 0x7FC1, -0x8000, 0x0001, 0x7F7F, -0x3D09, 0x4049], dtype=torch.int16)
    bf16 = bits.repeat(n)[: 2 * n].view(torch.bfloat16).reshape(n, 2)
    return TensorDict(
        {
            "bf16": bf16,
            "bf16_scalar": bf16[:, 0].clone(),
            "bf16_jagged": torch.nested.nested_tensor([bf16[i, : 1 + i % 2] for i in range(n)], layout=torch.jagged),
            "prompt": [f"prompt {i}: wörld ✓" for i in range(n)],
            "meta": NonTensorStack(*[{"turn": i, "tools": ["search"] * i} if i % 2 else [i, 2.5] for i in range(n)]),
            "jagged": _jagged([1 + i % 3 for i in range(n)], start=n),
            "strided": torch.nested.nested_tensor([torch.arange(i + 1) for i in range(n)]),
            "strided_2d": torch.nested.nested_tensor([torch.arange(2 * (i + 1)).reshape(i + 1, 2) for i in range(n)]),
            "ragged_2d": torch.nested.nested_tensor([torch.ones(1 + i % 2, 1 + i % 3) * i for i in range(n)]),
        },
        batch_size=n,
    )


def _script_types(tq, client):
    """The data types of TransferQueue's docs through put/get_data and the kv calls, and a field's dtype
    belonging to its partition (free in a new or cleared one)."""
    seen: list[tuple[str, object]] = []
    typed = _typed(3)
    seen.append(("put types", _meta(client.put(data=typed, partition_id="types"))))
    fetched = client.get_meta(sorted(typed.keys()), 3, "types", mode="fetch", task_name="t")
    seen.append(("fetch types", _meta(fetched)))
    seen.append(("data types", _data(client.get_data(fetched))))
    seen.append(("force types", _meta(client.get_meta(sorted(typed.keys()), 0, "types", mode="force_fetch"))))
    some = fetched.select_samples([2, 0]).select_fields(["prompt", "bf16", "ragged_2d"])
    seen.append(("data some", _data(client.get_data(some))))
    other = TensorDict({"bf16": torch.ones(2, 2, dtype=torch.float64), "prompt": torch.arange(2)}, batch_size=2)
    seen.append(("other dtypes in a new partition", _meta(client.put(data=other, partition_id="types2"))))
    seen.append(
        ("data types2", _data(client.get_data(client.get_meta(["bf16", "prompt"], 0, "types2", "force_fetch"))))
    )
    mixed = [torch.ones(2, 3), torch.arange(2.0), ["a", "b"], torch.ones(2, 1, 2)]  # one dtype, four layouts
    for k, value in enumerate(mixed):
        seen.append((f"layout {k} joins", _meta(client.put(data=TensorDict({"mix": value}, batch_size=2),
                                                           partition_id="mixed"))))  # fmt: skip
    seen.append(("force mixed", _meta(client.get_meta(["mix"], 0, "mixed", mode="force_fetch"))))
    seen.append(("data mixed", _data(client.get_data(client.get_meta(["mix"], 0, "mixed", mode="force_fetch")))))
    seen.append(("fetch mixed", _meta(client.get_meta(["mix"], 8, "mixed", mode="fetch", task_name="m"))))
    client.clear_partition("types")
    seen.append(("other dtypes after clear", _meta(client.put(data=other, partition_id="types"))))
    seen.append(("data after clear", _data(client.get_data(client.get_meta(["prompt"], 0, "types", "force_fetch")))))
    seen.append(("kv types", _kv_meta(tq.kv_batch_put(["t1", "t2", "t3"], "kvt", _typed(3)))))
    seen.append(("kv get types", _data(tq.kv_batch_get(["t3", "t1"], "kvt"))))
    one = {"prompt": "just one", "bf16": torch.tensor([1.5, -0.0], dtype=torch.bfloat16), "n": 7, "d": {"k": [1]}}
    seen.append(("kv_put values", _kv_meta(tq.kv_put("t4", "kvt2", one))))
    seen.append(("kv get values", _data(tq.kv_batch_get("t4", "kvt2"))))
    tq.kv_clear(["t1", "t2", "t3"], "kvt")
    seen.append(("kv other dtype once cleared", _kv_meta(tq.kv_batch_put(["t1"], "kvt", other[:1]))))
    seen.append(("kv get after clear", _data(tq.kv_batch_get("t1", "kvt"))))
    return seen


def _kv_meta(meta):
    return {"keys": list(meta.keys), "tags": [dict(t) for t in meta.tags], "partition_id": meta.partition_id,
            "fields": list(meta.fields or [])}  # fmt: skip


def _script(tq, client, streaming):
    """One client sequence as verl drives TransferQueue; returns what every call returned.
    ``streaming(**options)``: a StreamingDataLoader over a StreamingDataset made with ``options``."""
    seen: list[tuple[str, object]] = []

    def note(label, value):
        seen.append((label, value))

    # puts: new samples of two partitions (indexes are global across partitions)
    note("put p0", _meta(client.put(data=_batch(6, 1), partition_id="p0")))
    note("put p1", _meta(client.put(data=_batch(3, 2), partition_id="p1")))
    # fetch by two tasks: each sees every sample once, lowest indexes first
    gen = client.get_meta(data_fields=["prompt", "tokens"], batch_size=4, partition_id="p0", mode="fetch",
                          task_name="generate")  # fmt: skip
    note("fetch generate", _meta(gen))
    note("data generate", _data(client.get_data(gen)))
    ref = client.get_meta(["reward", "tokens"], 2, "p0", mode="fetch", task_name="reference")
    note("fetch reference", _meta(ref))
    note("data reference", _data(client.get_data(ref)))
    # fewer ready than asked: an empty BatchMeta (polling mode)
    note("fetch short", _meta(client.get_meta(["prompt"], 3, "p0", mode="fetch", task_name="generate")))
    # a stage writes a new field for the samples it fetched, with tags
    gen.update_custom_meta([{"score": float(i)} for i in range(gen.size)])
    resp = TensorDict({"response": _jagged([2, 1, 3, 1], start=7)}, batch_size=4)
    note("put response", _meta(client.put(data=resp, metadata=gen)))
    train = client.get_meta(["response", "reward"], 4, "p0", mode="fetch", task_name="train")
    note("fetch train", _meta(train))
    note("data train", _data(client.get_data(train)))
    note("fetch train again", _meta(client.get_meta(["response"], 1, "p0", mode="fetch", task_name="train")))
    note("force p0", _meta(client.get_meta(["response", "reward"], 0, "p0", mode="force_fetch")))
    # clear some samples; their indexes are reused by later puts (in any partition)
    client.clear_samples(train.select_samples([0, 2]))
    note("force p0 after clear", _meta(client.get_meta(["reward"], 0, "p0", mode="force_fetch")))
    note("put p1 again", _meta(client.put(data=_batch(3, 3), partition_id="p1")))
    note("fetch p1", _meta(client.get_meta(["reward", "tokens"], 5, "p1", mode="fetch", task_name="generate")))
    client.clear_partition("p1")
    note("partitions", client.get_partition_list())
    note("put p2 reuses", _meta(client.put(data=_batch(2, 4), partition_id="p2")))

    # async twins
    async def twins():
        meta = await client.async_put(data=_batch(2, 5), partition_id="p3")
        got = await client.async_get_meta(["reward", "prompt"], 2, "p3", mode="fetch", task_name="a")
        data = await client.async_get_data(got)
        await client.async_clear_samples(got.select_samples([1]))
        force = await client.async_get_meta(["reward"], 0, "p3", mode="force_fetch")
        await client.async_clear_partition("p3")
        return _meta(meta), _meta(got), _data(data), _meta(force)

    note("async", asyncio.run(twins()))
    note("partitions after async", client.get_partition_list())

    # key-value calls
    note("kv_put", _kv_meta(tq.kv_put("k1", "kv", {"x": torch.tensor([1.0, 2.0])}, {"tag": 1})))
    fields = TensorDict({"x": torch.ones(2, 2), "n": torch.tensor([3, 4])}, batch_size=2)
    note("kv_batch_put", _kv_meta(tq.kv_batch_put(["k2", "k3"], "kv", fields, [{"a": 1}, {"a": 2}])))
    note("kv tag only", _kv_meta(tq.kv_put("k2", "kv", None, {"a": 9})))
    note("kv_list", tq.kv_list())
    note("kv_get", _data(tq.kv_batch_get(["k1", "k3"], "kv", "x")))
    kvm = tq.kv_batch_put(["k3"], "kv", TensorDict({"x": torch.zeros(1, 2)}, batch_size=1))
    note("kv_get_by_meta", _data(tq.kv_batch_get_by_meta(kvm)))
    tq.kv_clear("k1", "kv")
    note("kv_list after clear", tq.kv_list("kv"))

    async def kv_twins():
        await tq.async_kv_put("k4", "kv", {"x": torch.tensor([5.0, 6.0])}, {"t": 4})
        await tq.async_kv_batch_put(["k5"], "kv", TensorDict({"x": torch.ones(1, 2)}, batch_size=1))
        got = await tq.async_kv_batch_get(["k4", "k5"], "kv")
        listed = await tq.async_kv_list("kv")
        await tq.async_kv_clear(["k4", "k5"], "kv")
        return _data(got), listed, await tq.async_kv_list("kv")

    note("kv async", asyncio.run(kv_twins()))
    # consumption status and the streaming loader (finite mode: it stops once all are consumed)
    client.put(data=_batch(8, 6), partition_id="stream")
    note("consumed before", [t.tolist() for t in client.get_consumption_status("train", "stream")])
    loader = streaming(batch_size=4, micro_batch_size=3, data_fields=["reward", "tokens"], partition_id="stream",
                       task_name="train", dp_rank=0, should_check_consumption_status=True)  # fmt: skip
    note("loader", [(_data(td), _meta(meta)) for td, meta in loader])
    note("loader buffer", len(loader.get_buffer()))
    note("consumed after", [t.tolist() for t in client.get_consumption_status("train", "stream")])
    note("all consumed", (client.check_consumption_status("train", "stream"),
                          client.check_consumption_status("other", "stream")))  # fmt: skip
    note("no partition", client.get_consumption_status("train", "nope"))
    # production status per field, and consumption reset (one task, then all) with a refetch
    for fields, pid in ((["reward"], "stream"), (["reward", "tokens"], "stream"), (["nope"], "stream"),
                        (["response"], "p0"), (["reward"], "nope")):  # fmt: skip
        note(f"production {fields} {pid}", (_status(client.get_production_status(fields, pid)),
                                            client.check_production_status(fields, pid)))  # fmt: skip
    note("reset train", client.reset_consumption("stream", "train"))
    note("consumed after reset", [t.tolist() for t in client.get_consumption_status("train", "stream")])
    note("refetch", _meta(client.get_meta(["reward"], 5, "stream", task_name="train")))
    note("fetch other", _meta(client.get_meta(["reward"], 2, "stream", task_name="other")))
    note("reset all", (client.reset_consumption("stream"), client.reset_consumption("nope", "train")))
    note("consumed after reset all", [[t.tolist() for t in client.get_consumption_status(task, "stream")]
                                      for task in ("train", "other")])  # fmt: skip
    note("refetch after reset all", _meta(client.get_meta(["reward"], 8, "stream", task_name="train")))
    # a checkpoint: saved, the state changed, loaded back whole; the run goes on from it
    with tempfile.TemporaryDirectory() as folder:
        tq.save_checkpoint(os.path.join(folder, "ck"), metadata={"step": 1})
        client.clear_partition("stream")
        tq.kv_clear(["k2", "k3"], "kv")
        client.put(data=_batch(2, 9), partition_id="p9")
        tq.load_checkpoint(os.path.join(folder, "ck"))
    note("partitions after load", client.get_partition_list())
    note("kv_list after load", tq.kv_list())
    stream = client.get_meta(["reward", "tokens"], 0, "stream", mode="force_fetch")
    note("stream after load", (_meta(stream), _data(client.get_data(stream))))
    note("consumed after load", [t.tolist() for t in client.get_consumption_status("train", "stream")])
    note("fetch after load", _meta(client.get_meta(["reward"], 8, "stream", task_name="train")))
    note("put after load", _meta(client.put(data=_batch(2, 8), partition_id="p2")))
    note("kv after load", _data(tq.kv_batch_get(["k2", "k3"], "kv")))
    for missing in (["nope"], ["k1"]):
        try:
            tq.kv_batch_get(missing, "kv")
            note(f"kv_get {missing}", "returned")
        except ValueError as error:
            note(f"kv_get {missing}", ("ValueError", str(error)))
    return seen


def _streaming(**options):
    return StreamingDataLoader(StreamingDataset(None, **options))


@pytest.fixture
def adapter():
    dock_tq.close()
    dock_tq.init({"controller": {"polling_mode": True}}, dock=Dock([], []))
    yield dock_tq
    dock_tq.close()


def _same(got, expected):
    assert [label for label, _ in got] == [label for label, _ in expected]
    for (label, value), (_, want) in zip(got, expected, strict=True):
        assert value == want, label


def test_same_as_transferqueue(ray_session, adapter):
    import transfer_queue as tq

    from tokenport.dock.ray import RayDock

    storage = {"SimpleStorage": {"num_data_storage_units": 1}}  # the controller and one unit fit 2 CPUs
    conf = tq.init({"controller": {"polling_mode": True}, "backend": storage})

    def peer_streaming(**options):
        return tq.StreamingDataLoader(tq.StreamingDataset(config=conf, **options))

    try:
        expected = _script(tq, tq.get_client(), peer_streaming) + _script_types(tq, tq.get_client())
    finally:
        tq.close()
    client = adapter.get_client()
    _same(_script(adapter, client, _streaming) + _script_types(adapter, client), expected)
    # the same over a RayDock (the adapter uses DockAPI only)
    adapter.close()
    adapter.init({"controller": {"polling_mode": True}, "dock": {"partition_rows": 64}}, dock=RayDock([], []))
    client = adapter.get_client()
    _same(_script(adapter, client, _streaming) + _script_types(adapter, client), expected)
    # without polling mode, too few ready samples is a RuntimeError after TransferQueue's wait (about 5 s)
    tq.init({"controller": {"polling_mode": False}, "backend": storage})
    try:
        tq.get_client().put(data=_batch(2, 1), partition_id="p")
        with pytest.raises(RuntimeError, match="Timeout while waiting for sufficient data"):
            tq.get_client().get_meta(["reward"], 3, "p", task_name="t")
    finally:
        tq.close()


def test_fetch_waits_then_times_out_without_polling():
    client = dock_tq.TransferQueueClient(Dock([], []), dock_tq.TransferQueueConfig(get_meta_timeout=0.2))
    client.put(data=_batch(2, 1), partition_id="p")
    with pytest.raises(dock_tq.TransferQueueTimeout, match="waited 0.2 s for 3 samples"):
        client.get_meta(["reward"], 3, "p", task_name="t")
    with pytest.raises(RuntimeError):  # what TransferQueue raises there
        client.get_meta(["unknown"], 1, "p", task_name="t")
    # a put during the wait satisfies it
    import threading

    timer = threading.Timer(0.05, lambda: client.put(data=_batch(1, 2), partition_id="p"))
    timer.start()
    meta = client.get_meta(["reward"], 3, "p", task_name="t")
    timer.join()
    assert meta.global_indexes == [0, 1, 2]


def test_refusals():
    client = dock_tq.TransferQueueClient(Dock([], []), dock_tq.TransferQueueConfig(partition_rows=4))
    with pytest.raises(InputDataError, match="field 'x' has dtype torch.float8_e4m3fn"):
        client.put(data=TensorDict({"x": torch.ones(2, 3).to(torch.float8_e4m3fn)}, batch_size=2), partition_id="p")
    client.put(data=TensorDict({"x": torch.ones(2, 3)}, batch_size=2), partition_id="p")
    with pytest.raises(InputDataError, match="field 'x' comes as int64.*partition 'p' are float32.*dtype mismatch"):
        client.put(data=TensorDict({"x": torch.ones(2, 3, dtype=torch.int64)}, batch_size=2), partition_id="p")
    with pytest.raises(ConfigError, match="used 2 of its 4 slots and cannot take 3 more"):
        client.put(data=TensorDict({"x": torch.ones(3, 3)}, batch_size=3), partition_id="p")
    assert client.get_meta(["x"], 0, "p", mode="force_fetch").global_indexes == [0, 1]  # the refused put left nothing
    with pytest.raises(InputDataError, match="do not all have fields"):
        client.get_data(client.get_meta(["x"], 2, "q", mode="insert"))
    with pytest.raises(ConfigError, match="mode='pop' is invalid"):
        client.get_meta(["x"], 1, "p", mode="pop", task_name="t")
    with pytest.raises(ConfigError, match=r"lacks the DockAPI members \['columns'"):
        dock_tq.TransferQueueClient(object())
    with pytest.raises(ConfigError, match="must be a dict or None"):
        client.get_meta(["x"], 1, "p", task_name="t", sampling_config=[2])
    with pytest.raises(ConfigError, match="only SequentialSampler"):
        dock_tq.TransferQueueConfig.from_conf({"controller": {"sampler": "RankAwareSampler"}})
    dock_tq.close()
    dock = Dock([], [])
    assert dock_tq.init(dock=dock) is dock_tq.init({"controller": {"polling_mode": True}})  # the running one's
    with pytest.raises(ConfigError, match="already runs over another dock"):
        dock_tq.init(dock=Dock([], []))
    dock_tq.close()
    dataset = StreamingDataset(None, 2, 1, ["x"], "p", "t", 0, client=client)
    with pytest.raises(ConfigError, match="num_workers=2"):
        StreamingDataLoader(dataset, num_workers=2)
    with pytest.raises(ConfigError, match="Partition nope not found"):
        client.get_meta(["x"], 1, "nope", mode="force_fetch")
    meta = client.get_meta(["x"], 2, "p", task_name="t")
    client.clear_samples(meta)
    with pytest.raises(ConfigError, match="does not exist"):
        client.get_data(meta)
    assert np.array_equal(client.get_meta(["x"], 0, "p", mode="force_fetch").production_status, [])


def test_concurrent_producers_and_consumers_see_each_sample_once():
    import threading

    client = dock_tq.TransferQueueClient(Dock([], []), dock_tq.TransferQueueConfig(get_meta_timeout=0.5))
    total, got, errors = 160, {"train": [], "ref": []}, []

    def produce(seed):
        for k in range(10):
            client.put(data=_batch(4, seed * 10 + k), partition_id="p")

    def consume(task):
        try:
            while len(got[task]) < total:
                try:
                    meta = client.get_meta(["reward", "tokens"], 8, "p", task_name=task)
                except dock_tq.TransferQueueTimeout:
                    continue
                data = client.get_data(meta)
                assert data.batch_size[0] == 8
                got[task].extend(meta.global_indexes)
        except Exception as error:  # reported below, not lost in the thread
            errors.append(error)

    threads = [threading.Thread(target=produce, args=(s,)) for s in range(4)]
    threads += [threading.Thread(target=consume, args=(t,)) for t in ("train", "ref")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    for task in ("train", "ref"):
        assert sorted(got[task]) == list(range(total)), task
    assert client.check_consumption_status("train", "p")
