"""The TransferQueue adapter's save_checkpoint / load_checkpoint: round trips of every data type and of the
bookkeeping (keys, tags, consumption, resets, the index pool), the continuation after a load equal to a run
without one, mutation fuzz of both documents, refused loads that change nothing, and kills of the writer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tensordict")
pytest.importorskip("transfer_queue")

from tensordict import NonTensorData, NonTensorStack, TensorDict  # noqa: E402

import tokenport.dock.transferqueue as tq  # noqa: E402
from tests._support.mutate import mutations  # noqa: E402
from tokenport._schema import encode  # noqa: E402
from tokenport.dock import Dock  # noqa: E402
from tokenport.dock.checkpoint import load_state  # noqa: E402
from tokenport.dock.transferqueue_checkpoint import KILL_AT, _ready  # noqa: E402
from tokenport.dock.transferqueue_checkpoint_schema import bookkeeping_of, restored  # noqa: E402
from tokenport.errors import ConfigError, CorruptStoreError, TokenportError  # noqa: E402

torch.set_num_threads(1)
SRC = str(Path(__file__).resolve().parents[2] / "src")
ROOT = str(Path(__file__).resolve().parents[2])
CONF = {"controller": {"polling_mode": True}, "dock": {"partition_rows": 32}}  # small partitions: quick loads


def _typed(n, start=0):
    """bfloat16 (dense, with NaN, infinity, -0 and a subnormal), jagged nested, lists of strings,
    per-sample JSON metadata, a NonTensorData of one value per sample and int ids."""
    bits = torch.tensor([0x3FC0, -0x80, 0x7FC1, -0x8000, 0x0001, 0x7F7F, -0x3D09, 0x4049], dtype=torch.int16)
    bf16 = bits.repeat(n)[: 2 * n].view(torch.bfloat16).reshape(n, 2)
    return TensorDict(
        {
            "bf16": bf16,
            "bf16_jagged": torch.nested.nested_tensor([bf16[i, : 1 + i % 2] for i in range(n)], layout=torch.jagged),
            "tokens": torch.nested.nested_tensor(
                [torch.arange(start + i, start + 2 * i + 1) for i in range(n)], layout=torch.jagged
            ),
            "reward": torch.arange(start, start + n, dtype=torch.float32) / 4,
            "prompt": [f"prompt {start + i}: wörld ✓" for i in range(n)],
            "meta": NonTensorStack(*[{"turn": i, "tools": ["search"] * i} if i % 2 else [i, 2.5] for i in range(n)]),
            "source": NonTensorData(["web", "code", "math", "chat"][:n] + ["x"] * max(0, n - 4)),
        },
        batch_size=n,
    )


def _populate(client):
    """A state using every part of the bookkeeping: puts, kv keys with tags, consumption by two tasks,
    a reset, cleared samples (reusable indexes), a cleared partition, pre-allocated indexes."""
    client.put(data=_typed(4), partition_id="p0")
    client.put(data=_typed(3, 10), partition_id="p1")
    tq.kv_batch_put(["a", "b", "c"], "kv", _typed(3, 20), [{"score": 1.5}, {"k": [1, "x"]}, {}])
    tq.kv_put("d", "kv", None, {"only": "tag"})
    client.get_meta(["reward", "tokens"], 2, "p0", task_name="train")
    client.get_meta(["reward"], 3, "p0", task_name="ref")
    client.reset_consumption("p0", "ref")
    client.get_meta(["reward"], 1, "p0", task_name="ref")
    gone = client.get_meta(["reward"], 0, "p1", mode="force_fetch").select_samples([1])
    client.clear_samples(gone)
    tq.kv_clear("b", "kv")
    client.put(data=_typed(2, 30), partition_id="dropped")
    client.clear_partition("dropped")
    client.get_meta(["reward"], 2, "fresh", mode="insert")  # indexes without data


def _meta(meta):
    return {
        "indexes": list(meta.global_indexes),
        "partitions": list(meta.partition_ids),
        "status": [int(s) for s in meta.production_status],
        "fields": sorted(meta.field_names),
        "custom_meta": [dict(c) for c in meta.custom_meta],
        "schema": {k: {n: str(v) for n, v in s.items()} for k, s in meta.field_schema.items()},
    }


def _data(td):
    out = {}
    for name in sorted(td.keys()):
        value = td.get(name)
        if isinstance(value, torch.Tensor):
            rows = value.unbind() if value.is_nested else list(value)
            if value.dtype == torch.bfloat16:
                rows = [r.contiguous().view(torch.int16) for r in rows]
            out[name] = (str(value.dtype), value.is_nested, [r.tolist() for r in rows])
        else:
            out[name] = (type(value).__name__, value.tolist())
    return out


def _observed(client, bookkeeping=True):
    """Everything the client API tells about the state, plus the bookkeeping document itself."""
    seen = {"partitions": client.get_partition_list(), "kv": client.kv_list()}
    for pid in client.get_partition_list():
        fields = sorted(client._partitions[pid].fields)
        meta = client.get_meta(fields, 0, pid, mode="force_fetch")
        seen[f"meta {pid}"] = _meta(meta)
        ready = meta.select_samples([k for k, s in enumerate(meta.production_status) if s])
        seen[f"data {pid}"] = _data(client.get_data(ready)) if fields and ready.size else None
        for task in ("train", "ref", "other"):
            seen[f"consumed {task} {pid}"] = [None if t is None else t.tolist()
                                              for t in client.get_consumption_status(task, pid)]  # fmt: skip
        seen[f"produced {pid}"] = [None if t is None else t.tolist()
                                   for t in client.get_production_status(fields or ["none"], pid)]  # fmt: skip
    with client._lock:
        seen["bookkeeping"] = bookkeeping and encode(
            bookkeeping_of(client._indexes, client._partitions, client._resets, client._column_of)
        )
    seen["dock columns"] = sorted(client.dock.columns)
    # get_data reads under a consumer named after its thread: not part of what a run sees
    seen["dock consumers"] = sorted(c for c in client.dock.consumers if not c.startswith("transferqueue-reader-"))
    return seen


def _continuation(client):
    """What a run does next: fetches (consumed samples never again), new puts (indexes from the pool),
    kv reads."""
    out = [
        _meta(client.get_meta(["reward", "tokens"], 2, "p0", task_name="train")),
        _meta(client.get_meta(["reward"], 2, "p0", task_name="ref")),
        _meta(client.put(data=_typed(3, 40), partition_id="p1")),
        _meta(client.put(data=_typed(2, 50), partition_id="new")),
        _data(tq.kv_batch_get(["a", "c"], "kv")),
        _meta(client.get_meta(["reward"], 4, "p1", task_name="train")),
    ]
    client.reset_consumption("p0")
    out.append(_meta(client.get_meta(["reward"], 4, "p0", task_name="train")))
    return out


@pytest.fixture
def client():
    tq.close()
    tq.init(CONF, dock=Dock([], []))
    yield tq.get_client()
    tq.close()


def _fresh():
    tq.close()
    tq.init(CONF, dock=Dock([], []))
    return tq.get_client()


def test_round_trip_restores_everything_and_the_run_continues_as_without_it(client, tmp_path):
    _populate(client)
    before = _observed(client)
    tq.save_checkpoint(tmp_path / "ck", metadata={"step": 7, "note": ["a", 1.5]})
    assert sorted(os.listdir(tmp_path)) == ["ck"]
    assert json.loads((tmp_path / "ck" / "metadata.json").read_text()) == {
        "storage_saved": True,
        "user_metadata": {"step": 7, "note": ["a", 1.5]},
    }
    expected = _continuation(client)  # the run without a checkpoint
    # the same process after more work, and a fresh process: both back to the saved state by a load
    client.clear_partition("p0")
    client.put(data=_typed(2, 60), partition_id="other")
    tq.load_checkpoint(tmp_path / "ck")
    assert _observed(client) == before
    restarted = _fresh()
    tq.load_checkpoint(str(tmp_path / "ck"))
    assert _observed(restarted) == before
    assert _continuation(restarted) == expected


def test_consumed_samples_are_not_served_again_after_a_load(client, tmp_path):
    client.put(data=_typed(4), partition_id="p")
    first = client.get_meta(["reward"], 2, "p", task_name="train")
    tq.save_checkpoint(tmp_path / "ck")
    restarted = _fresh()
    tq.load_checkpoint(tmp_path / "ck")
    second = restarted.get_meta(["reward"], 2, "p", task_name="train")
    assert first.global_indexes == [0, 1] and second.global_indexes == [2, 3]
    assert restarted.get_meta(["reward"], 1, "p", task_name="train").size == 0  # polling: nothing left
    assert restarted.check_consumption_status("train", "p")


def test_include_storage_false_still_saves_the_data(client, tmp_path):
    client.put(data=_typed(2), partition_id="p")
    tq.save_checkpoint(tmp_path / "ck", include_storage=False)  # the dock is the storage (as SimpleStorage)
    assert json.loads((tmp_path / "ck" / "metadata.json").read_text())["storage_saved"] is True
    before = _observed(client)
    _fresh()
    tq.load_checkpoint(tmp_path / "ck")
    assert _observed(tq.get_client()) == before


def test_refusals_change_nothing(client, tmp_path):
    tq.close()
    with pytest.raises(RuntimeError, match="not initialized") as caught:
        tq.save_checkpoint(tmp_path / "ck")
    assert isinstance(caught.value, TokenportError)
    with pytest.raises(RuntimeError, match="not initialized"):
        tq.load_checkpoint(tmp_path / "ck")
    client = _fresh()
    _populate(client)
    before = _observed(client)
    with pytest.raises(ConfigError, match=r"metadata\['bad'\]: its value \(a set\) is not JSON"):
        tq.save_checkpoint(tmp_path / "ck", metadata={"ok": 1, "bad": {1}})
    with pytest.raises(ConfigError, match="metadata key 3 is not a str"):
        tq.save_checkpoint(tmp_path / "ck", metadata={3: 1})
    with pytest.raises(ConfigError, match="pass a dict"):
        tq.save_checkpoint(tmp_path / "ck", metadata=[1])
    tq.kv_put("t", "kv", None, {"when": float("nan")})
    tagged = _observed(client, bookkeeping=False)  # its tags cannot be a document
    with pytest.raises(ConfigError, match=r"partition 'kv' sample \d+ \(key 't'\): its tag .* not JSON"):
        tq.save_checkpoint(tmp_path / "ck")
    assert not os.listdir(tmp_path)  # nothing written, not even a .tmp
    assert _observed(client, bookkeeping=False) == tagged
    tq.kv_clear("t", "kv")
    before = _observed(client)
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep")
    with pytest.raises(ConfigError, match="is not a TransferQueue checkpoint"):
        tq.save_checkpoint(foreign)
    with pytest.raises(ConfigError, match="is not a TransferQueue checkpoint"):
        tq.load_checkpoint(foreign)
    assert os.listdir(foreign) == ["notes.txt"]
    with pytest.raises(FileNotFoundError, match="Checkpoint directory not found") as missing:
        tq.load_checkpoint(tmp_path / "nothing")
    assert isinstance(missing.value, TokenportError)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="metadata.json not found"):
        tq.load_checkpoint(empty)
    (empty / "metadata.json").write_text('{"storage_saved": true, "user_metadata": {}}')
    with pytest.raises(FileNotFoundError, match="transferqueue.json not found"):  # e.g. TransferQueue's own
        tq.load_checkpoint(empty)
    assert _observed(client) == before


def test_a_bookkeeping_of_another_dock_is_refused(client, tmp_path):
    _populate(client)
    tq.save_checkpoint(tmp_path / "a")
    client.put(data=_typed(2, 70), partition_id="extra")
    tq.save_checkpoint(tmp_path / "b")
    before = _observed(client)
    (tmp_path / "a" / "transferqueue.json").write_bytes((tmp_path / "b" / "transferqueue.json").read_bytes())
    with pytest.raises(CorruptStoreError, match="transferqueue.json: partitions: not the dock checkpoint's"):
        tq.load_checkpoint(tmp_path / "a")
    assert _observed(client) == before


def test_a_field_of_another_dtype_than_its_dock_column_is_refused(client, tmp_path):
    _populate(client)
    tq.save_checkpoint(tmp_path / "ck")
    before = _observed(client)
    path = tmp_path / "ck" / "transferqueue.json"
    path.write_text(
        path.read_text().replace('"dtype":"float32","layout":"scalar"', '"dtype":"int32","layout":"scalar"')
    )
    with pytest.raises(CorruptStoreError, match="transferqueue.json: field 'reward' is scalar .*int32.* holds float32"):
        tq.load_checkpoint(tmp_path / "ck")
    assert _observed(client) == before


def test_mutated_documents_are_refused_and_change_nothing(client, tmp_path):
    """Every mutation is read (the bookkeeping against the saved dock state); every 20th, and each of
    metadata.json's, also through load_checkpoint, which must leave the live adapter unchanged."""
    _populate(client)
    tq.save_checkpoint(tmp_path / "ck")
    saved = _observed(client)
    dock_state = load_state(tmp_path / "ck" / "dock")
    client.put(data=_typed(1, 80), partition_id="after")  # the live state differs from the checkpoint
    live = _observed(client)
    counts = {"refused": 0, "loaded": 0}
    for name in ("transferqueue.json", "metadata.json"):
        path = tmp_path / "ck" / name
        original = path.read_bytes()
        for k, (label, data) in enumerate(mutations(original.decode())):
            if name == "transferqueue.json":
                try:
                    restored(data, str(path), dock_state.partitions, lambda p, c, rows: _ready(dock_state, p, c, rows))
                except TokenportError as error:
                    assert name in str(error), (label, error)
                if k % 20:
                    continue
            path.write_bytes(data)
            try:
                tq.load_checkpoint(tmp_path / "ck")
            except TokenportError as error:
                assert name in str(error), (label, error)
                assert _observed(client) == live, label
                counts["refused"] += 1
                continue
            # still a valid document: the state it describes is whole (calls on it work, or are refused)
            _observed(client)
            try:
                _continuation(client)
            except TokenportError:  # a mutated key or tag the run asks for: refused, not a crash
                pass
            counts["loaded"] += 1
            path.write_bytes(original)
            tq.load_checkpoint(tmp_path / "ck")
            assert _observed(client) == saved
            client.put(data=_typed(1, 80), partition_id="after")
            live = _observed(client)
        path.write_bytes(original)
    assert counts["refused"] > 30, counts


_CHILD = textwrap.dedent(
    """
    import sys
    sys.path[:0] = [{root!r}, {src!r}]
    import tokenport.dock.transferqueue as tq
    from tokenport.dock import Dock
    from tests.dock.test_transferqueue_checkpoint import _populate, _typed
    tq.init({{"controller": {{"polling_mode": True}}, "dock": {{"partition_rows": 32}}}}, dock=Dock([], []))
    _populate(tq.get_client())
    tq.get_client().put(data=_typed(3, 90), partition_id="newer")
    tq.save_checkpoint(sys.argv[1], metadata={{"version": "new"}})
    """
)


def _loaded(folder):
    """What a fresh adapter holds after loading ``folder``, and the version its metadata names."""
    client = _fresh()
    tq.load_checkpoint(folder)
    return _observed(client), json.loads((folder / "metadata.json").read_text())["user_metadata"]["version"]


def _save_old(folder):
    client = _fresh()
    _populate(client)
    tq.save_checkpoint(folder, metadata={"version": "old"})


def test_a_killed_save_leaves_the_old_or_the_new_checkpoint(client, tmp_path):
    folder, reference = tmp_path / "ck", tmp_path / "reference"
    env = {k: v for k, v in os.environ.items() if k != KILL_AT}
    child = _CHILD.format(root=ROOT, src=SRC)
    _save_old(folder)
    old, _ = _loaded(folder)
    subprocess.run([sys.executable, "-c", child, str(reference)], env=env, check=True, capture_output=True)
    new, _ = _loaded(reference)
    assert old != new
    seen = set()
    for step in range(1, 40):
        _save_old(folder)  # the old checkpoint again (on an odd step, this save tidies the previous kill)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["ck", "reference"], step
        assert _loaded(folder) == (old, "old"), step
        run = subprocess.run([sys.executable, "-c", child, str(folder)], env={**env, KILL_AT: str(step)},
                             capture_output=True)  # fmt: skip
        if run.returncode == 0:
            break
        assert run.returncode == 137, run.stderr.decode()[-2000:]
        if step % 2 == 0:  # the next save finishes or rolls it back, even one refused after that (a non-JSON tag)
            _fresh()
            tq.kv_put("t", "kv", None, {"when": float("nan")})
            with pytest.raises(ConfigError, match="not JSON data"):
                tq.save_checkpoint(folder)
            assert sorted(p.name for p in tmp_path.iterdir()) == ["ck", "reference"], step
        state, version = _loaded(folder)  # (else) the load finishes or rolls it back
        assert (state, version) in ((old, "old"), (new, "new")), step
        seen.add(version)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["ck", "reference"], step
    assert step > 6 and seen == {"old", "new"}, (step, seen)
    assert _loaded(folder) == (new, "new")
