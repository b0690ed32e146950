"""Random call sequences against the TransferQueue adapter, checked after every call against a simple
model of TransferQueue's bookkeeping (global indexes, the pool they come from and go back to, fields
and their dtypes, keys, consumption); a refused call must leave the adapter and its dock exactly as
they were. Rewards come in three dtypes and two layouts (scalars, one-item rows): a field's dtype
belongs to its partition (free in a new or cleared one, and once all its samples are cleared), a put
of another dtype while the partition holds samples of the field is refused, as TransferQueue's
controller refuses it, and another layout joins the field; every value reads back."""

from __future__ import annotations

import pickle
import random
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tensordict")
pytest.importorskip("transfer_queue")

from tensordict import TensorDict  # noqa: E402
from transfer_queue.metadata import BatchMeta  # noqa: E402

import tokenport.dock.transferqueue as dock_tq  # noqa: E402
from tests.dock.test_transferqueue_refusals import client_state  # noqa: E402
from tokenport.dock import Dock  # noqa: E402
from tokenport.errors import TokenportError  # noqa: E402

torch.set_num_threads(1)
ROWS = 6  # samples a partition holds over its life
FIELDS = ("reward", "tokens")


class Model:
    """TransferQueue's controller as the adapter mirrors it, reduced to indexes, fields, keys, consumption."""

    def __init__(self) -> None:
        self.counter = 0
        self.reusable: list[int] = []
        self.owned: dict[str, set[int]] = {}
        self.parts: dict[str, dict] = {}
        self.refetched = 0  # fetches that served again what a task had consumed before a reset

    def _pool(self, pid: str, count: int) -> list[int]:
        taken = self.reusable[:count]
        del self.reusable[:count]
        new = count - len(taken)
        taken += range(self.counter, self.counter + new)
        self.counter += new
        self.owned.setdefault(pid, set()).update(taken)
        return taken

    def _room(self, pid: str, count: int) -> dict:
        if not isinstance(pid, str) or not pid:
            raise TokenportError("refused")
        part = self.parts.get(pid)
        slots = 0 if part is None else part["slots"]
        if slots + count > ROWS:
            raise TokenportError("refused")
        if part is None:
            part = {"slots": 0, "pre": set(), "active": set(), "fields": {}, "dtypes": {}, "rewards": {}, "keys": {},
                    "consumed": {}, "registered": set()}  # fmt: skip
            self.parts[pid] = part
            part["pre"].update(self._pool(pid, 1))
        return part

    def _allocate(self, part: dict, pid: str, count: int) -> list[int]:
        taken = list(part["pre"]) if len(part["pre"]) < count else sorted(part["pre"])[:count]
        part["pre"].difference_update(taken)
        taken += self._pool(pid, count - len(taken))
        part["active"].update(taken)
        part["slots"] += len(taken)
        return taken

    def _fill(self, part: dict, indexes: list[int], fields: list[str], dtype=None) -> None:
        for name in fields:
            part["fields"].setdefault(name, set()).update(indexes)
            part["registered"].add(name)
            part["dtypes"][name] = dtype if name == "reward" else torch.int64
        if "reward" in fields:
            part["rewards"].update({index: float(k) for k, index in enumerate(indexes)})

    def _same_dtype(self, pid, fields, dtype) -> None:
        """A field holding samples in a live partition keeps their dtype (TransferQueue's controller)."""
        part = self.parts.get(pid)
        if part is not None and "reward" in fields and "reward" in part["fields"]:
            if part["dtypes"]["reward"] != dtype:
                raise TokenportError("refused")

    def put(self, pid, count, fields, dtype) -> None:
        if isinstance(pid, str) and pid:
            self._same_dtype(pid, fields, dtype)
        part = self._room(pid, count)
        self._fill(part, self._allocate(part, pid, count), fields, dtype)

    def fetch(self, task, fields, count, pid):
        part = self.parts.get(pid)
        if not pid or (part is not None and count > ROWS):
            raise TokenportError("refused")
        if part is None or not all(f in part["fields"] for f in fields):
            return []
        consumed = part["consumed"].get(task, set())
        ready = sorted(i for i in part["active"] if i not in consumed and all(i in part["fields"][f] for f in fields))
        if len(ready) < count:
            return []
        part["consumed"].setdefault(task, set()).update(ready[:count])
        self.refetched += bool(set(ready[:count]) & part.setdefault("before_reset", {}).get(task, set()))
        return ready[:count]

    def reset(self, pid, task) -> bool:
        """TransferQueue's reset_consumption: the task's (or every task's) consumption forgotten; True."""
        if task == "":
            raise TokenportError("refused")
        part = self.parts.get(pid)
        if part is not None:
            for name in [t for t in part["consumed"] if task is None or t == task]:
                part.setdefault("before_reset", {}).setdefault(name, set()).update(part["consumed"][name])
                part["consumed"][name] = set()
        return True

    def produced(self, fields, pid) -> bool:
        """TransferQueue's check_production_status: every sample (pre-allocated ones too) has the fields."""
        part = self.parts.get(pid)
        if part is None or not all(f in part["registered"] for f in fields):
            return False
        return all(i in part["fields"].get(f, ()) for i in part["active"] | part["pre"] for f in fields)

    def clear_samples(self, pid, asked) -> None:
        part = self.parts.get(pid)
        if part is None:
            return
        indexes = list(set(asked) & part["active"])
        for index in indexes:
            part["keys"] = {k: i for k, i in part["keys"].items() if i != index}
        part["active"].difference_update(indexes)
        for consumed in part["consumed"].values():
            consumed.difference_update(indexes)
        for name in list(part["fields"]):
            part["fields"][name].difference_update(indexes)
            if not part["fields"][name]:
                del part["fields"][name]
                del part["dtypes"][name]
        if indexes and pid in self.owned:
            self.owned[pid].difference_update(indexes)
            if not self.owned[pid]:
                del self.owned[pid]
        self.reusable.extend(indexes)

    def clear_partition(self, pid) -> None:
        if self.parts.pop(pid, None) is not None:
            self.reusable.extend(self.owned.pop(pid, set()))

    def kv_put(self, keys, pid, fields, tags, dtype) -> None:
        if len(set(keys)) != len(keys) or (tags is not None and len(tags) != len(keys)) or not keys:
            raise TokenportError("refused")
        self._same_dtype(pid, fields, dtype)
        known = self.parts[pid]["keys"] if pid in self.parts else {}
        missing = [k for k in keys if k not in known]
        part = self._room(pid, len(missing))
        for key, index in zip(missing, self._allocate(part, pid, len(missing))):
            part["keys"][key] = index
        self._fill(part, [part["keys"][k] for k in keys], fields, dtype)

    def kv_clear(self, keys, pid) -> None:
        if not pid:
            raise TokenportError("refused")
        part = self.parts.get(pid)
        if part is not None:
            self.clear_samples(pid, [part["keys"][k] for k in keys if k in part["keys"]])

    def save(self) -> None:
        """Serialized as TransferQueue's checkpoint pickles its state: each set as its items in their
        iteration order, rebuilt by every load (which decides the order indexes are reused)."""
        self.saved = pickle.dumps((self.counter, self.reusable, self.owned, self.parts))

    def load(self) -> None:
        if getattr(self, "saved", None) is None:
            raise TokenportError("refused")  # nothing saved yet: no checkpoint there
        self.counter, self.reusable, self.owned, self.parts = pickle.loads(self.saved)

    def rewards(self) -> dict:
        out = {}
        for pid, part in self.parts.items():
            if "reward" in part["fields"]:
                held = part["fields"]["reward"]
                out[pid] = (part["dtypes"]["reward"], {i: v for i, v in part["rewards"].items() if i in held})
        return out

    def observed(self) -> dict:
        return {
            "parts": {
                pid: {
                    "pre": sorted(p["pre"]),
                    "active": sorted(p["active"]),
                    "fields": {f: sorted(i) for f, i in p["fields"].items()},
                    "dtypes": dict(p["dtypes"]),
                    "keys": dict(p["keys"]),
                    "consumed": {t: sorted(c) for t, c in p["consumed"].items()},
                }
                for pid, p in self.parts.items()
            },
            "pool": (self.counter, list(self.reusable)),
        }


def observed(client) -> dict:
    state = client_state(client)
    return {
        "parts": {
            pid: {
                **{key: part[key] for key in ("pre", "active", "fields", "keys", "consumed")},
                "dtypes": {name: field.dtype for name, field in client._partitions[pid].fields.items()},
            }
            for pid, part in state["partitions"].items()
        },
        "pool": state["indexes"][:2],
    }


DTYPES = (torch.float32, torch.float32, torch.bfloat16, torch.float64)


def rewards(client) -> dict:
    """Per partition, the dtype and values get_data returns for every sample holding a reward."""
    out = {}
    for pid in client.get_partition_list():
        meta = client.get_meta(["reward"], 0, pid, mode="force_fetch")
        held = [k for k, ready in enumerate(meta.production_status) if ready]
        if held and "reward" in client._partitions[pid].fields:
            meta = meta.select_samples(held)
            got = client.get_data(meta).get("reward")
            if not isinstance(got, torch.Tensor):  # layouts no nested tensor holds both of: a NonTensorStack
                samples = got.tolist()
            else:
                samples = got.unbind() if got.is_nested else list(got)
            assert len({t.dtype for t in samples}) == 1  # one dtype per partition, whatever the layouts
            values = [float(t.float().reshape(-1)[0]) for t in samples]
            out[pid] = (samples[0].dtype, dict(zip(meta.global_indexes, values, strict=True)))
    return out


def data(count: int, fields, dtype, rows: bool = False) -> TensorDict:
    """``count`` samples; ``rows``: rewards as one-item rows (another layout of the field, same values)."""
    reward = torch.arange(count, dtype=dtype)
    values = {"reward": reward[:, None] if rows else reward, "tokens": torch.ones(count, 2, dtype=torch.int64)}
    return TensorDict({f: values[f] for f in fields}, batch_size=count)


def _none(result: object) -> None:
    """What the model compares of a call that returns metadata: nothing (its state is compared after)."""


KINDS = ("put", "put", "fetch", "fetch", "clear_samples", "clear_partition", "kv_put", "kv_clear", "reset", "produced")
RESETS = ("put", "fetch", "fetch", "fetch", "reset", "produced", "clear_samples")  # consume, reset, consume again


def one_call(rng: random.Random, client, model: Model, kinds=KINDS, pids=("p", "q", "kv", ""), folder=None):
    pid = rng.choice(pids)
    fields = rng.sample(FIELDS, rng.choice([1, 2]))
    kind = rng.choice(kinds)
    if kind == "save":
        return (lambda: dock_tq.save_checkpoint(folder)), model.save
    if kind == "load":
        return (lambda: dock_tq.load_checkpoint(folder)), model.load
    if kind == "put":
        count, dtype, rows = rng.choice([1, 2, 3, 7]), rng.choice(DTYPES), rng.random() < 0.3
        return (lambda: _none(client.put(data=data(count, fields, dtype, rows), partition_id=pid))), (
            lambda: model.put(pid, count, fields, dtype)
        )
    if kind == "fetch":
        task, count = rng.choice(["train", "ref"]), rng.choice([1, 2, 7])

        def fetch():
            return client.get_meta(fields, count, pid, task_name=task).global_indexes

        return fetch, (lambda: model.fetch(task, fields, count, pid))
    if kind == "reset":
        task = rng.choice(["train", "ref", None, ""])
        return (lambda: client.reset_consumption(pid, task)), (lambda: model.reset(pid, task))
    if kind == "produced":
        return (lambda: client.check_production_status(fields, pid)), (lambda: model.produced(fields, pid))
    if kind == "clear_samples":
        asked = rng.sample(range(12), rng.choice([1, 2, 3]))
        meta = BatchMeta(global_indexes=asked, partition_ids=[pid] * len(asked), field_schema={},
                         production_status=np.zeros(len(asked), np.int8))  # fmt: skip
        return (lambda: client.clear_samples(meta)), (lambda: model.clear_samples(pid, asked))
    if kind == "clear_partition":
        return (lambda: client.clear_partition(pid)), (lambda: model.clear_partition(pid))
    keys = [rng.choice("abcdefgh") for _ in range(rng.choice([1, 2, 3, 7]))]
    if kind == "kv_clear":
        return (lambda: dock_tq.kv_clear(keys, pid)), (lambda: model.kv_clear(keys, pid))
    with_fields = rng.random() < 0.6
    tags = None if with_fields and rng.random() < 0.5 else [{"n": k} for k in keys[: len(keys) - (rng.random() < 0.1)]]
    dtype = rng.choice(DTYPES)
    batch = data(len(keys), fields, dtype, rng.random() < 0.3) if with_fields else None
    return (lambda: _none(dock_tq.kv_batch_put(keys, pid, fields=batch, tags=tags))), (
        lambda: model.kv_put(keys, pid, fields if with_fields else [], tags, dtype)
    )


@pytest.mark.parametrize("seed", range(8))
def test_random_calls_match_the_model_and_refusals_change_nothing(seed):
    run(seed, KINDS, ("p", "q", "kv", ""), steps=120)


@pytest.mark.parametrize("seed", range(2))
def test_resets_serve_consumed_samples_again_as_the_model_says(seed):
    model = run(seed, RESETS, ("p", "q"), steps=120)
    assert model.refetched > 0  # samples consumed before a reset were served again


scalars = data  # the one layout of rewards where checkpoints are among the calls


@pytest.mark.parametrize("seed", range(3))
def test_checkpoints_in_random_calls_restore_what_the_model_saved(seed, tmp_path, monkeypatch):
    """save_checkpoint / load_checkpoint among the calls: a load gives back the saved state whole (the
    model's copy), a load before any save is refused and changes nothing. Rewards come as scalars only
    (a field of several layouts holds per-sample tensors, which a checkpoint does not keep)."""
    monkeypatch.setattr(
        sys.modules[__name__], "data", lambda count, fields, dtype, rows=False: scalars(count, fields, dtype)
    )  # noqa: E501
    model = run(seed, (*KINDS, "save", "load", "load"), ("p", "q", "kv"), steps=80, folder=tmp_path / "ck")
    assert getattr(model, "saved", None) is not None


def run(seed: int, kinds, pids, steps: int, folder=None) -> Model:
    """``steps`` random calls of ``kinds`` on partitions ``pids``, each compared with the model."""
    rng = random.Random(seed)
    dock_tq.close()
    dock_tq.init({"controller": {"polling_mode": True}, "dock": {"partition_rows": ROWS}}, dock=Dock([], []))
    client = dock_tq.get_client()
    model = Model()
    refused = 0
    try:
        for step in range(steps):
            call, expect = one_call(rng, client, model, kinds, pids, folder)
            before = client_state(client)
            try:
                want = expect()
            except TokenportError:
                want = "refused"
            try:
                got = call()
            except TokenportError:
                got = "refused"
            assert got == want, step
            if got == "refused":
                refused += 1
                assert client_state(client) == before, step
            assert observed(client) == model.observed(), step
            assert rewards(client) == model.rewards(), step
    finally:
        dock_tq.close()
    assert refused > 5
    return model
