"""The TransferQueue adapter carries every data type TransferQueue carries, exactly: bfloat16 bits,
Python values (lists of strings, NonTensorData, NonTensorStack, any object), jagged and strided nested
tensors; a field's dtype belongs to its partition, and a change within a live one is refused (as
TransferQueue's controller refuses it) changing nothing; the dock's checkpoint keeps what is JSON.
The same puts against real TransferQueue: ``test_transferqueue.py::test_same_as_transferqueue``."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tensordict")
pytest.importorskip("transfer_queue")

from tensordict import NonTensorData, NonTensorStack, TensorDict  # noqa: E402
from transfer_queue.metadata import BatchMeta  # noqa: E402

import tokenport.dock.transferqueue as dock_tq  # noqa: E402
from tests.dock.test_transferqueue_refusals import client_state  # noqa: E402
from tokenport.dock import BFLOAT16, Dock  # noqa: E402
from tokenport.errors import ConfigError, InputDataError  # noqa: E402

torch.set_num_threads(1)
ALL_BITS = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)  # every bfloat16 value, NaNs included


@pytest.fixture
def client():
    dock_tq.close()
    dock_tq.init({"controller": {"polling_mode": True}}, dock=Dock([], []))
    yield dock_tq.get_client()
    dock_tq.close()


def _bits(tensor) -> list:
    rows = tensor.unbind() if tensor.is_nested else [tensor]
    return [r.contiguous().view(torch.int16).tolist() for r in rows]


def _all(client, fields, pid):
    return client.get_data(client.get_meta(fields, 0, pid, mode="force_fetch"))


def test_every_bfloat16_value_comes_back_bit_for_bit(client):
    grid = ALL_BITS.view(torch.bfloat16).reshape(256, 256)
    data = TensorDict({"grid": grid, "first": grid[:, 0].clone()}, batch_size=256)
    client.put(data=data, partition_id="p")
    got = _all(client, ["grid", "first"], "p")
    assert got["first"].dtype == torch.bfloat16 and not got["first"].is_nested
    assert torch.equal(got["first"].view(torch.int16), grid[:, 0].view(torch.int16))
    assert got["grid"].is_nested and got["grid"].layout == torch.jagged and got["grid"].dtype == torch.bfloat16
    assert _bits(got["grid"]) == grid.view(torch.int16).tolist()
    # through the kv calls, jagged rows of any length, and into the dock's own columns
    rows = [grid[i, : i % 5 + 1] for i in range(7)]
    dock_tq.kv_batch_put([f"k{i}" for i in range(7)], "kv", TensorDict({"lp": torch.nested.as_nested_tensor(
        rows, layout=torch.jagged)}, batch_size=7))  # fmt: skip
    assert _bits(dock_tq.kv_batch_get([f"k{i}" for i in (6, 0)], "kv")["lp"]) == [
        rows[6].view(torch.int16).tolist(), rows[0].view(torch.int16).tolist()]  # fmt: skip
    column = client.dock.columns["grid"]
    assert column.dtype == BFLOAT16 and column.ragged


def test_python_values_come_back_as_a_nontensorstack_and_never_alias(client):
    marker = object()
    meta = {"tools": ["search"], "score": 0.5}
    data = TensorDict(
        {
            "prompt": ["Hello", "wörld ✓", ""],
            "meta": NonTensorStack(meta, [1, 2], None),
            "shared": NonTensorData({"run": 7}),  # one value for the whole batch (TransferQueue crashes on it)
            "split": NonTensorData([{"i": 0}, {"i": 1}, {"i": 2}], batch_size=[3]),  # one per sample: split
            "raw": np.array([b"a", b"bc", b"d"], dtype="|S2"),  # a numpy array TensorDict keeps as NonTensorData
            "thing": NonTensorStack(marker, 3, "x"),
        },
        batch_size=3,
    )
    client.put(data=data, partition_id="p")
    meta["score"] = 99  # the caller's later change does not reach the stored value
    got = _all(client, ["prompt", "meta", "shared", "split", "raw", "thing"], "p")
    assert isinstance(got.get("prompt"), NonTensorStack) and got.get("prompt").tolist() == ["Hello", "wörld ✓", ""]
    assert got.get("meta").tolist() == [{"tools": ["search"], "score": 0.5}, [1, 2], None]
    assert got.get("shared").tolist() == [{"run": 7}] * 3
    assert got.get("split").tolist() == [{"i": 0}, {"i": 1}, {"i": 2}]  # as TransferQueue indexes it per sample
    assert got.get("raw").tolist() == [b"a", b"bc", b"d"]
    assert type(got.get("thing").tolist()[0]) is object and got.get("thing").tolist()[1:] == [3, "x"]
    got.get("meta").tolist()[0]["score"] = -1  # nor does a change to what a get returned
    assert _all(client, ["meta"], "p").get("meta").tolist()[0]["score"] == 0.5
    schema = client.get_meta(["prompt"], 0, "p", mode="force_fetch").field_schema["prompt"]
    assert schema == {"dtype": None, "shape": None, "is_nested": False, "is_non_tensor": True}
    # kv_put of one sample's plain values, as TransferQueue wraps them
    dock_tq.kv_put("k", "kv", {"prompt": "only one", "n": 3, "ids": torch.tensor([1, 2])})
    one = dock_tq.kv_batch_get("k", "kv")
    assert one.get("prompt").tolist() == ["only one"] and one.get("n").tolist() == [3]
    assert one["ids"].is_nested and one["ids"].unbind()[0].tolist() == [1, 2]


def test_nested_tensors_round_trip_as_transferqueue_packs_them(client):
    jagged = torch.nested.nested_tensor([torch.ones(2, 3), torch.zeros(1, 3)], layout=torch.jagged)
    strided = torch.nested.nested_tensor([torch.arange(3), torch.arange(1)])  # ragged in its first dimension only
    shapes = torch.nested.nested_tensor([torch.arange(4).reshape(2, 2), torch.arange(3).reshape(1, 3)])
    client.put(data=TensorDict({"j": jagged, "s": strided, "x": shapes}, batch_size=2), partition_id="p")
    got = _all(client, ["j", "s", "x"], "p")
    assert got["j"].layout == torch.jagged and [t.tolist() for t in got["j"].unbind()] == [
        [[1.0] * 3] * 2, [[0.0] * 3]]  # fmt: skip
    assert got["s"].layout == torch.jagged and [t.tolist() for t in got["s"].unbind()] == [[0, 1, 2], [0]]
    assert got["x"].is_nested and got["x"].layout == torch.strided  # samples differing in two dimensions
    assert [t.tolist() for t in got["x"].unbind()] == [[[0, 1], [2, 3]], [[0, 1, 2]]]


def test_samples_of_one_field_in_two_layouts_come_back_as_transferqueue_mixes_them(client):
    client.put(data=TensorDict({"x": torch.tensor([1.0, 2.0])}, batch_size=2), partition_id="p")
    client.put(data=TensorDict({"x": torch.ones(1, 2)}, batch_size=1), partition_id="q")
    meta = BatchMeta.concat([client.get_meta(["x"], 0, pid, mode="force_fetch") for pid in ("p", "q")])
    got = client.get_data(meta).get("x")  # scalars and rows: no nested tensor holds both
    assert isinstance(got, NonTensorStack) and [t.tolist() for t in got.tolist()] == [1.0, 2.0, [1.0, 1.0]]


def _put(client, pid, dtype=torch.float32, n=2):
    return client.put(data=TensorDict({"x": torch.ones(n, 3, dtype=dtype)}, batch_size=n), partition_id=pid)


def test_a_dtype_belongs_to_its_partition(client):
    _put(client, "p")
    _put(client, "q", torch.int64)  # another partition: free (the dock gives the kind its own column)
    before = client_state(client)
    with pytest.raises(InputDataError, match=r"field 'x' comes as int64 .* partition 'p' are float32 .*dtype mismatch"):
        _put(client, "p", torch.int64)  # new samples of a live partition: TransferQueue's "dtype mismatch"
    meta = client.get_meta(["x"], 0, "p", mode="force_fetch")
    with pytest.raises(InputDataError, match="dtype mismatch"):  # the same samples again: refused too
        client.put(data=TensorDict({"x": torch.ones(2, 3, dtype=torch.float64)}, batch_size=2), metadata=meta)
    with pytest.raises(InputDataError, match="dtype mismatch"):
        dock_tq.kv_batch_put(["k"], "p", TensorDict({"x": torch.ones(1, 3, dtype=torch.int8)}, batch_size=1))
    assert client_state(client) == before  # a refused put changes nothing
    assert _all(client, ["x"], "q")["x"].dtype == torch.int64
    client.clear_partition("p")  # forgotten with the partition
    _put(client, "p", torch.bfloat16)
    assert _all(client, ["x"], "p")["x"].dtype == torch.bfloat16
    client.clear_samples(client.get_meta(["x"], 0, "p", mode="force_fetch"))  # ... or with all its samples
    _put(client, "p", torch.int32)
    assert _all(client, ["x"], "p")["x"].dtype == torch.int32
    dock_tq.kv_batch_put(["a", "b"], "kv", TensorDict({"x": torch.ones(2, 3)}, batch_size=2))
    dock_tq.kv_clear(["a", "b"], "kv")  # ... or when its keys are cleared
    dock_tq.kv_batch_put(["a"], "kv", TensorDict({"x": torch.ones(1, 3, dtype=torch.int64)}, batch_size=1))
    assert dock_tq.kv_batch_get("a", "kv")["x"].dtype == torch.int64


def test_other_layouts_of_a_field_join_it_per_sample_as_in_transferqueue(client):
    """A scalar where rows are, strings where tensors are: TransferQueue's storage holds samples one by
    one and packs them on the way out (here: a NonTensorStack); so does the adapter, in one column."""
    _put(client, "p")
    client.put(data=TensorDict({"x": torch.arange(2.0)}, batch_size=2), partition_id="p")  # scalars
    client.put(data=TensorDict({"x": ["a", "b"]}, batch_size=2), partition_id="p")  # Python values
    meta = client.get_meta(["x"], 0, "p", mode="force_fetch")
    assert meta.field_schema["x"]["dtype"] == torch.float32 and meta.is_ready
    got = client.get_data(meta).get("x")
    assert isinstance(got, NonTensorStack)
    values = {i: v.tolist() if isinstance(v, torch.Tensor) else v for i, v in zip(meta.global_indexes, got.tolist())}
    assert values == {0: [1.0] * 3, 1: [1.0] * 3, 2: 0.0, 3: 1.0, 4: "a", 5: "b"}
    fetched = client.get_meta(["x"], 6, "p", task_name="t")  # fetch sees every sample ready, in one column
    assert sorted(fetched.global_indexes) == list(range(6))
    with pytest.raises(InputDataError, match="comes as int64 scalars, but its samples in partition 'p' are float32"):
        client.put(data=TensorDict({"x": torch.arange(2)}, batch_size=2), partition_id="p")  # still one dtype
    client.clear_partition("p")
    _put(client, "p", torch.int64)  # a cleared partition starts afresh: one column of rows again
    assert _all(client, ["x"], "p")["x"].dtype == torch.int64


def test_the_docks_checkpoint_keeps_bfloat16_bits_and_json_values(client, tmp_path):
    grid = ALL_BITS[:512].view(torch.bfloat16).reshape(4, 128)
    client.put(data=TensorDict({"lp": grid, "prompt": ["a", "b", "c", "d"]}, batch_size=4), partition_id="p")
    client.dock.save(tmp_path / "ckpt")
    loaded = Dock.load(tmp_path / "ckpt")
    loaded.add_consumer("reader")
    batch = loaded.get("reader", ["lp", "prompt"], 4, "p", rows=range(4), timeout=0)
    assert np.array_equal(batch["lp"].values.view(np.int16), grid.reshape(-1).view(torch.int16).numpy())
    assert batch["prompt"].tolist() == ["a", "b", "c", "d"]
    client.put(data=TensorDict({"prompt": NonTensorStack(object(), "ok")}, batch_size=2), partition_id="q")
    with pytest.raises(ConfigError, match="column 'prompt' row 0: its value \\(a object\\) is not JSON data"):
        client.dock.save(tmp_path / "ckpt")
    assert Dock.load(tmp_path / "ckpt").partitions == {"p": loaded.partitions["p"]}  # the old one, untouched
