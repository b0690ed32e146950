"""The TransferQueue adapter's configuration and arguments are checked before anything happens: a
refused init, put, get_meta or kv call raises a TokenportError and leaves no partition, index, key,
column or consumer behind."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tensordict")
pytest.importorskip("transfer_queue")

from tensordict import TensorDict  # noqa: E402
from transfer_queue.metadata import BatchMeta  # noqa: E402

import tokenport.dock.transferqueue as dock_tq  # noqa: E402
from tokenport.dock import Dock  # noqa: E402
from tokenport.errors import ConfigError, InputDataError, TokenportError  # noqa: E402

torch.set_num_threads(1)
F8 = torch.ones(2).to(torch.float8_e4m3fn)  # a dtype numpy has not
NESTED = torch.nested.nested_tensor([torch.ones(2), torch.ones(1)], layout=torch.jagged)


def batch(n: int, dtype=torch.float32) -> TensorDict:
    return TensorDict({"reward": torch.arange(n, dtype=dtype), "tokens": torch.ones(n, 3, dtype=torch.int64)}, [n])


def client_state(client: dock_tq.TransferQueueClient) -> dict:
    """Everything the adapter and its dock hold: partitions, indexes, keys, tags, consumption, dock schema."""
    parts = {}
    for name, part in client._partitions.items():
        parts[name] = {
            "slots": dict(part.slot_of),
            "pre": sorted(part.pre_allocated),
            "active": sorted(part.active),
            "fields": {f: sorted(field.indexes) for f, field in part.fields.items()},
            "keys": dict(part.keys),
            "tags": {i: dict(m) for i, m in part.custom_meta.items()},
            "consumed": {t: sorted(c) for t, c in part.consumed.items()},
        }
    indexes = client._indexes
    return {
        "partitions": parts,
        "indexes": (indexes.counter, list(indexes.reusable), {k: sorted(v) for k, v in indexes.by_partition.items()}),
        "dock": (client.dock.partitions, sorted(client.dock.columns), client.dock.consumers),
        "columns": dict(client._column_of),
        "stats": {p: s["ready"] for p, s in client.dock.stats()["partitions"].items()},
    }


@pytest.fixture
def client():
    dock_tq.close()
    dock_tq.init({"controller": {"polling_mode": True}, "dock": {"partition_rows": 4}}, dock=Dock([], []))
    client = dock_tq.get_client()
    client.put(data=batch(2), partition_id="p")
    dock_tq.kv_batch_put(["a"], "kv", fields=batch(1), tags=[{"score": 1}])
    yield client
    dock_tq.close()


@pytest.mark.parametrize(
    "conf, match",
    [
        ("controller", "pass a dict of sections"),
        ({"controller": "fast"}, r"\$.controller"),
        ({"controller": {"polling_mode": "yes"}}, r"\$.controller.polling_mode"),
        ({"controller": {"sampler": "RankAwareSampler"}}, "only SequentialSampler"),
        ({"dock": {"partition_rows": 2**63}}, r"\$.dock.partition_rows"),
        ({"dock": {"partition_rows": 0}}, r"\$.dock.partition_rows"),
        ({"dock": {"get_meta_timeout": float("nan")}}, r"\$.dock.get_meta_timeout"),
        ({"dock": {"get_meta_timeout": True}}, r"\$.dock.get_meta_timeout"),
        ({"dock": {"pre_allocated": 9, "partition_rows": 4}}, "pre_allocated"),
        ({"dock": {"rows": 4}}, "unknown field `rows`"),
        ({"storage": {}}, "unknown field `storage`"),
    ],
)
def test_a_bad_configuration_is_a_config_error_and_starts_nothing(conf, match):
    dock_tq.close()
    with pytest.raises(ConfigError, match=match):
        dock_tq.init(conf)
    with pytest.raises(ConfigError, match="not initialized"):
        dock_tq.get_client()


def test_a_configuration_of_any_mapping_is_read():
    omegaconf = pytest.importorskip("omegaconf")
    conf = omegaconf.OmegaConf.create({"controller": {"polling_mode": True}, "dock": {"partition_rows": 8}})
    assert dock_tq.TransferQueueConfig.from_conf(conf) == dock_tq.TransferQueueConfig(True, 5.0, 8, 1)


def _meta(indexes, pids, schema=None):
    return BatchMeta(
        global_indexes=indexes,
        partition_ids=pids,
        field_schema=schema or {},
        production_status=np.zeros(len(indexes), np.int8),
    )


def _duplicate_meta(client):
    meta = client.get_meta(["reward"], 0, "p", mode="force_fetch")
    return BatchMeta(
        global_indexes=[meta.global_indexes[0]] * 2,
        partition_ids=["p", "p"],
        field_schema={},
        production_status=np.zeros(2, np.int8),
    )


REFUSED = [
    ("put too many for a new partition", lambda c: c.put(data=batch(5), partition_id="new"), ConfigError),
    ("put too many for a partition", lambda c: c.put(data=batch(3), partition_id="p"), ConfigError),
    (
        "put bfloat16 to a float32 field",
        lambda c: c.put(data=batch(1, torch.bfloat16), partition_id="p"),
        InputDataError,
    ),
    (
        "put another layout of another dtype",
        lambda c: c.put(data=TensorDict({"reward": torch.ones(1, 2, dtype=torch.int8)}, [1]), partition_id="p"),
        InputDataError,
    ),
    ("put float8", lambda c: c.put(data=TensorDict({"f": F8}, [2]), partition_id="n"), InputDataError),
    ("put a dict", lambda c: c.put(data={"reward": torch.ones(2)}, partition_id="new"), InputDataError),
    ("put no batch dim", lambda c: c.put(data=TensorDict({"r": torch.ones(2)}, []), partition_id="n"), InputDataError),
    ("put empty", lambda c: c.put(data=TensorDict({}, [2]), partition_id="new"), InputDataError),
    ("put to a list", lambda c: c.put(data=batch(1), partition_id=["p"]), ConfigError),
    ("put to ''", lambda c: c.put(data=batch(1), partition_id=""), ConfigError),
    ("put with a dict meta", lambda c: c.put(data=batch(1), metadata={"global_indexes": [0]}), ConfigError),
    ("put a sample twice", lambda c: c.put(data=batch(2), metadata=_duplicate_meta(c)), ConfigError),
    ("put other dtype", lambda c: c.put(data=batch(1, torch.int32), partition_id="p"), InputDataError),
    ("insert too many", lambda c: c.get_meta(["reward"], 5, "new", mode="insert"), ConfigError),
    ("insert 2**63", lambda c: c.get_meta(["reward"], 2**63, "p", mode="insert"), ConfigError),
    ("insert 0", lambda c: c.get_meta(["reward"], 0, "new", mode="insert"), ConfigError),
    ("fields as a string", lambda c: c.get_meta("reward", 1, "p", task_name="t"), ConfigError),
    ("fetch more than fits", lambda c: c.get_meta(["reward"], 5, "p", task_name="t"), ConfigError),
    ("fetch from None", lambda c: c.get_meta(["reward"], 1, None, task_name="t"), ConfigError),
    ("get_data of a dict", lambda c: c.get_data({"global_indexes": [0]}), ConfigError),
    ("clear_samples of a list", lambda c: c.clear_samples([0]), ConfigError),
    ("kv too many keys", lambda c: dock_tq.kv_batch_put(list("abcde"), "new", fields=batch(5)), ConfigError),
    ("kv keys twice", lambda c: dock_tq.kv_batch_put(["b", "b"], "kv", fields=batch(2)), ConfigError),
    ("kv keys a string", lambda c: dock_tq.kv_batch_put("bc", "kv", fields=batch(2)), ConfigError),
    ("kv tags short", lambda c: dock_tq.kv_batch_put(["b", "c"], "kv", tags=[{}]), ConfigError),
    ("kv tags not dicts", lambda c: dock_tq.kv_batch_put(["b"], "kv", tags=["x"]), ConfigError),
    ("kv bfloat16", lambda c: dock_tq.kv_batch_put(["b"], "kv", fields=batch(1, torch.bfloat16)), InputDataError),
    ("kv other dtype", lambda c: dock_tq.kv_batch_put(["b"], "kv", fields=batch(1, torch.int32)), InputDataError),
    ("kv fields not a TensorDict", lambda c: dock_tq.kv_batch_put(["b"], "kv", fields=[1]), InputDataError),
    ("kv_put a nested tensor", lambda c: dock_tq.kv_put("b", "kv", fields={"t": NESTED}), ConfigError),
    ("kv_put fields a list", lambda c: dock_tq.kv_put("b", "kv", fields=[1.0]), ConfigError),
    ("kv to a list", lambda c: dock_tq.kv_batch_put(["b"], ["kv"], tags=[{}]), ConfigError),
    ("kv_get keys a dict", lambda c: dock_tq.kv_batch_get({"a": 1}, "kv"), ConfigError),
    ("kv_clear of a list partition", lambda c: dock_tq.kv_clear(["a"], ["kv"]), ConfigError),
    ("kv_list of a list", lambda c: dock_tq.kv_list(["kv"]), ConfigError),
    ("clear_partition of a list", lambda c: c.clear_partition(["p"]), ConfigError),
    ("status of a list", lambda c: c.get_consumption_status("t", ["p"]), ConfigError),
    ("check of a list task", lambda c: c.check_consumption_status(["t"], "p"), ConfigError),
    ("clear_samples of list indexes", lambda c: c.clear_samples(_meta([[0]], ["p"])), ConfigError),
    ("custom meta of list partitions", lambda c: c.set_custom_meta(_meta([0], [["p"]])), ConfigError),
    ("get_data of list indexes", lambda c: c.get_data(_meta([[0]], ["p"], {"reward": {}})), ConfigError),
    ("reset of a list partition", lambda c: c.reset_consumption(["p"], "t"), ConfigError),
    ("reset of task ''", lambda c: c.reset_consumption("p", ""), ConfigError),
    ("reset of a list task", lambda c: c.reset_consumption("p", ["t"]), ConfigError),
    ("production of fields a string", lambda c: c.get_production_status("reward", "p"), ConfigError),
    ("production of a list partition", lambda c: c.check_production_status(["reward"], ["p"]), ConfigError),
]


@pytest.mark.parametrize("label, call, error", REFUSED, ids=[label for label, _, _ in REFUSED])
def test_a_refused_call_leaves_no_partition_index_or_key(client, label, call, error):
    before = client_state(client)
    with pytest.raises(error):
        call(client)
    assert client_state(client) == before
    # and the adapter goes on exactly as if the call had never been made
    meta = client.put(data=batch(1), partition_id="p")
    assert meta.global_indexes == [3] and dock_tq.kv_batch_put(["b"], "kv", tags=[{"s": 2}]).keys == ["b"]
    assert client.get_meta(["reward"], 3, "p", task_name="t").global_indexes == [0, 1, 3]


def test_every_refusal_is_a_tokenport_error():
    assert all(issubclass(error, TokenportError) for _, _, error in REFUSED)
