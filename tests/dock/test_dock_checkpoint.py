"""Dock checkpoints: both documents (dock.json and the partitions' .npz arrays) are read through a
typed boundary, so a damaged checkpoint is one TokenportError naming the file and field; a killed
save leaves the old or the new checkpoint, and its staging folder is removed by the next save or load."""

from __future__ import annotations

import io
import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap
import zipfile

import numpy as np
import pytest

import tokenport as tp
from tests._support.mutate import mutations
from tests.dock._state import dock_state
from tokenport._schema import to_builtins
from tokenport.dock import BFLOAT16, Column, Dock
from tokenport.dock.checkpoint import KILL_AT
from tokenport.dock.checkpoint_schema import Description, description_of

BF16_BITS = np.array([[0x3FC0, 0xFF80], [0x7FC1, 0x8000], [0x0001, 0x7F7F], [0xC2F7, 0x0000]], np.uint16)
PROMPTS = ["Hello", "wörld ✓", {"turn": [1, 2.5, None, True], "id": 2**70}, ""]


def rich_dock() -> Dock:
    """A dock using every part of a checkpoint: fixed, ragged and segmented columns, bfloat16 ones
    (fixed and ragged; NaN, infinity, -0 and subnormal bits among them), a column of Python values,
    consumer limits, versions, a requeued row, a consumed and a leased row, two partitions."""
    dock = Dock(
        [
            Column("tokens", np.int32, ragged=True),
            Column("reward", np.float32),
            Column("embedding", np.float16, shape=(2,)),
            Column("turns", np.int64, segmented=True),
            Column("logit", "bfloat16", shape=(2,)),
            Column("logprobs", "bfloat16", ragged=True),
            Column("prompt", object),
        ],
        ["train", "ref"],
        n_samples_per_prompt=2,
        max_age=3,
        max_staleness=2,
    )
    dock.add_consumer("critic", max_staleness=1)
    dock.add_partition("p", num_prompts=3)
    dock.add_partition("q", num_prompts=1)
    dock.set_version(1)
    dock.put("p", {"tokens": [np.arange(r + 1, dtype=np.int32) for r in range(4)]}, rows=range(4), version=1)
    dock.put("p", {"reward": np.arange(4), "embedding": np.ones((4, 2))}, rows=range(4), version=1)
    bits = BF16_BITS.view(BFLOAT16)
    dock.put("p", {"logit": bits, "logprobs": [bits[r, : r % 3] for r in range(4)], "prompt": PROMPTS}, range(4))
    dock.append("p", 4, {"turns": [1, 2]}, version=1)
    dock.append("p", 4, {"turns": [3]}, version=1, finished=True)
    dock.append("p", 5, {"turns": [9]}, version=0)
    assert dock.get("train", ["tokens"], 1, "p", timeout=1).rows.tolist() == [0]
    dock.get("ref", ["tokens"], 1, "p", lease=60, timeout=1)
    dock.put("q", {"reward": np.ones(2)}, rows=[0, 1], version=1)
    dock.set_version(2)  # row 5's segment (version 0) is too stale for the critic: requeued
    return dock


@pytest.fixture()
def saved(tmp_path) -> pathlib.Path:
    rich_dock().save(tmp_path / "ckpt")
    return tmp_path / "ckpt"


def files(folder: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_checkpoint_round_trips_every_part(saved):
    restored = Dock.load(saved)
    assert saved_state(restored) == saved_state(rich_dock())
    assert restored.expired()["p"].tolist() == [5] and restored.version == 2
    batch = restored.get("train", ["turns"], 1, "p", rows=[4], timeout=1)
    assert batch["turns"].values.tolist() == [1, 2, 3] and batch.segment_versions.values.tolist() == [1, 1]
    batch = restored.get("critic", ["logit", "logprobs", "prompt"], 4, "p", rows=range(4), timeout=1)
    assert batch["logit"].dtype == BFLOAT16 and np.array_equal(batch["logit"].view(np.uint16), BF16_BITS)
    assert batch["logprobs"].values.view(np.uint16).tolist() == [b for r in range(4) for b in BF16_BITS[r, : r % 3]]
    assert batch["prompt"].tolist() == PROMPTS


@pytest.mark.parametrize("value", [("a", "tuple"), object(), 1.5 + 2j, float("nan"), {1: "int key"}, np.float32(1)])
def test_a_python_value_that_is_not_json_refuses_the_save_and_changes_nothing(saved, value):
    """A checkpoint never pickles: a value JSON would not give back equal is refused, naming the column
    and row, and the checkpoint already there is left as it was."""
    before = files(saved)
    dock = rich_dock()
    dock.put("p", {"prompt": ["ok", value, "ok", "ok"]}, range(4), overwrite=True)
    with pytest.raises(tp.ConfigError, match="column 'prompt' row 1: .* is not JSON data"):
        dock.save(saved)
    assert files(saved) == before and sorted(p.name for p in saved.parent.iterdir()) == ["ckpt"]


def _normalized(description: Description) -> dict:
    """What a loaded description means: consumer limits filled in with None, requeues sorted."""
    data = json.loads(json.dumps(to_builtins(description)))
    data["consumer_limits"] = {c: data["consumer_limits"].get(c) for c in data["consumers"]}
    data["format"] = "tokenport.dock-checkpoint/2"
    for entry in data["partitions"]:
        entry["requeue"] = sorted(entry["requeue"])
        entry["segment_columns"] = sorted(entry["segment_columns"])
    return data


def test_mutated_descriptions_are_refused_or_read_as_written(saved, tmp_path):
    """Every mutation of dock.json: a TokenportError naming dock.json, or (a mutation that is still a
    valid description) a dock that saves back the same description; never another exception."""
    original = (saved / "dock.json").read_bytes()
    refused = 0
    for label, data in mutations(original):
        (saved / "dock.json").write_bytes(data)
        before = files(saved)
        try:
            restored = Dock.load(saved)
        except tp.TokenportError as error:
            refused += 1
            assert "dock.json" in str(error) or "partition-" in str(error), label
            assert files(saved) == before, label
            continue
        again = dock_state(restored)["description"]
        written = _normalized(description_of(data, "dock.json"))
        for entry in again["partitions"]:
            entry["segment_columns"] = sorted(entry["segment_columns"])
        assert again == written, label
    assert refused > 100


@pytest.mark.parametrize(
    "change, field",
    [
        (lambda d: d.update(consumers="train"), r"\$.consumers"),
        (lambda d: d.update(version=2**63), r"\$.version"),
        (lambda d: d.update(version=-1), r"\$.version"),
        (lambda d: d["expired"].update(dropped=float("nan")), "not valid JSON"),
        (lambda d: d.update(max_staleness=1.5), r"\$.max_staleness"),
        (lambda d: d["partitions"][0].update(file="../../elsewhere.npz"), r"\$.partitions\[0\]"),
        (lambda d: d["partitions"][0].update(requeue=[6]), r"past the partition's 6 rows"),
        (lambda d: d["partitions"][1].update(name="p"), "partition 'p' appears twice"),
        (lambda d: d["consumer_limits"].update(nobody=1), r"consumer_limits"),
        (lambda d: d["columns"][0].update(dtype="object"), "a column of Python values"),
        (lambda d: d["columns"][0].update(dtype="|V2"), "is not a bool, integer or float type"),
        (lambda d: d.update(extra=1), "extra"),
        (lambda d: d.pop("closed"), "closed"),
    ],
)
def test_a_damaged_description_is_refused_naming_the_field(saved, change, field):
    description = json.loads((saved / "dock.json").read_text())
    change(description)
    (saved / "dock.json").write_text(json.dumps(description))
    with pytest.raises(tp.CorruptStoreError, match=rf"dock.json: .*{field}"):
        Dock.load(saved)


def test_a_description_that_is_not_utf8_is_refused(saved):
    (saved / "dock.json").write_bytes(b'{"format": "\xff"}')
    with pytest.raises(tp.CorruptStoreError, match="dock.json: not UTF-8"):
        Dock.load(saved)


def _array_mutations(arrays: dict[str, np.ndarray]):
    """(label, arrays) for each array: deleted, another dtype, one item short or long, another
    number of dimensions, out-of-range values; and an unknown array added."""
    for key, array in arrays.items():
        rest = {k: v for k, v in arrays.items() if k != key}
        yield f"del {key}", rest
        if array.dtype.kind == "V":  # bfloat16 bits: as plain uint16 (the same bytes, no longer tagged)
            yield f"{key} as uint16", {**rest, key: array.view(np.uint16)}
        elif array.dtype.kind == "U":  # JSON texts: as bytes; each row's text mutated
            yield f"{key} as bytes", {**rest, key: np.array([t.encode() for t in array.tolist()])}
            for label, text in mutations(array[2]):
                changed = array.astype(object)
                changed[2] = text.decode("utf-8", "replace")
                yield f"{key}[2] {label}", {**rest, key: changed.astype(str)}
        else:
            other = np.float64 if array.dtype.kind != "f" else np.int64
            yield f"{key} as {np.dtype(other)}", {**rest, key: array.astype(other)}
        if array.dtype.kind in "iu" and array.dtype.itemsize == 8:
            yield f"{key} as int32", {**rest, key: array.astype(np.int32)}
        yield f"{key} short", {**rest, key: array[:-1]}
        yield f"{key} long", {**rest, key: np.concatenate([array, array[:1]])}
        yield f"{key} 2-D", {**rest, key: array.reshape(1, *array.shape)}
        if array.dtype.kind in "iu" and array.size:
            for value in (-2, int(np.iinfo(array.dtype).max)):
                changed = array.copy()
                changed.reshape(-1)[0] = value
                yield f"{key}[0] = {value}", {**rest, key: changed}
    yield "unknown array", {**arrays, "fixed/nothing": np.zeros(6)}
    yield "consumer unknown", {**arrays, "consumed/nobody": np.zeros(6, bool)}


def test_mutated_partition_arrays_are_refused_or_read_whole(saved):
    file = saved / "partition-00000.npz"
    with np.load(file) as archive:
        arrays = {key: archive[key] for key in archive.files}
    raw = file.read_bytes()
    original = dock_state(Dock.load(saved))
    damaged = [(label, _npz(changed)) for label, changed in _array_mutations(arrays)]
    damaged += [(f"truncated at {cut}", raw[:cut]) for cut in (0, 10, len(raw) // 2, len(raw) - 1)]
    damaged += [
        (f"byte {at} flipped", raw[:at] + bytes([raw[at] ^ 0xFF]) + raw[at + 1 :]) for at in (40, len(raw) // 2)
    ]
    one = io.BytesIO()
    np.save(one, np.zeros(3))
    damaged += [("one .npy", one.getvalue()), ("pickled", _npz({"age": np.array([object()], dtype=object)}))]
    accepted = []
    for label, data in damaged:
        file.write_bytes(data)
        try:
            restored = Dock.load(saved)
        except tp.TokenportError as error:
            assert "partition-00000.npz" in str(error), label
            continue
        state = dock_state(restored)  # a value changed within range, or nothing consumed or ready: a whole dock
        if label.startswith("json/prompt[2] "):  # a row's text that is still JSON: read back as that JSON says
            with np.load(file) as archive:
                text = str(archive["json/prompt"][2])
            got = restored.get("critic", ["prompt"], 1, "p", rows=[2], timeout=1)["prompt"][0]
            assert got == json.loads(text), label
        if label.startswith("byte"):  # a byte the archive's checksums do not cover (a header's time) changes nothing
            assert state == original, label
        else:
            accepted.append(label)
    allowed = re.compile(r"del (ready|consumed)/\w+|del dropped|(age|fixed/\w+|ragged/\w+/values)\[0\] = -?\d+")
    valid_json = [label for label in accepted if label.startswith("json/prompt[2] ")]  # still JSON: read as written
    accepted = [label for label in accepted if label not in valid_json]
    assert len(valid_json) > 5
    assert accepted and [label for label in accepted if not allowed.fullmatch(label)] == []


def _npz(arrays: dict[str, np.ndarray]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for key, array in arrays.items():
            with archive.open(key + ".npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=True)
    return out.getvalue()


@pytest.mark.parametrize(
    "key, value, match",
    [
        ("version_last", lambda a: a + 5, "newer|oldest <= newest"),
        ("age", lambda a: a - 5, "age holds -5"),
        ("segments/versions", lambda a: a + 9, "segments/versions holds"),
        ("ragged/turns/lengths", lambda a: a[::-1].copy(), "ragged/turns/lengths gives row 4 0 items"),
        ("segments/rows", lambda a: a[::-1] - 1, "segments/rows"),
        ("fixed/reward", None, "ready/reward marks row 0 ready, but the column's data is missing"),
    ],
)
def test_arrays_that_contradict_the_description_or_each_other_are_refused(saved, key, value, match):
    file = saved / "partition-00000.npz"
    with np.load(file) as archive:
        arrays = {k: archive[k] for k in archive.files}
    if value is None:
        del arrays[key]
    else:
        arrays[key] = value(arrays[key])
    file.write_bytes(_npz(arrays))
    with pytest.raises(tp.CorruptStoreError, match=f"partition-00000.npz: .*{match}"):
        Dock.load(saved)


# -- killed saves ---------------------------------------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import sys
    import numpy as np
    from tokenport.dock import Dock

    dock = Dock.load(sys.argv[1])
    dock.set_version(3)
    dock.put("q", {"tokens": [np.arange(3, dtype=np.int32)] * 2}, rows=[0, 1], version=3)
    dock.add_partition("r", num_prompts=1)
    dock.save(sys.argv[1])
    """
)


def saved_state(dock: Dock) -> dict:
    """What a checkpoint of ``dock`` holds (the bytes a dock holds in memory are no part of it)."""
    state = dock_state(dock)
    return {"description": state["description"], "arrays": state["arrays"]}


def _saved_after_child(folder: pathlib.Path) -> dict:
    dock = Dock.load(folder)
    dock.set_version(3)
    dock.put("q", {"tokens": [np.arange(3, dtype=np.int32)] * 2}, rows=[0, 1], version=3)
    dock.add_partition("r", num_prompts=1)
    return saved_state(dock)


def test_a_save_killed_at_any_step_leaves_the_old_or_the_new_checkpoint_and_no_leftovers(tmp_path):
    folder = tmp_path / "ckpt"
    rich_dock().save(folder)
    old = saved_state(Dock.load(folder))
    new = _saved_after_child(folder)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    step = 0
    seen = set()
    while True:
        step += 1
        rich_dock().save(folder)  # back to the old checkpoint (this also tidies the previous kill)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
        run = subprocess.run(
            [sys.executable, "-c", CHILD, str(folder)], env={**env, KILL_AT: str(step)}, capture_output=True
        )
        if run.returncode == 0:
            break
        assert run.returncode == 137, run.stderr.decode()
        state = saved_state(Dock.load(folder))  # loading tidies stale staging folders too
        assert state in (old, new), step
        seen.add("old" if state == old else "new")
        assert not [p.name for p in tmp_path.iterdir() if ".saving-" in p.name], step
    assert step > 5 and seen == {"old", "new"}
    assert saved_state(Dock.load(folder)) == new and sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_a_save_of_a_live_process_is_left_alone(tmp_path):
    rich_dock().save(tmp_path / "ckpt")
    live = tmp_path / f"ckpt.saving-{os.getppid()}-abc"
    dead = tmp_path / "ckpt.saving-999999999-abc"
    other = tmp_path / "other.saving-999999999-abc"
    for folder in (live, dead, other):
        folder.mkdir()
    Dock.load(tmp_path / "ckpt")
    assert live.exists() and not dead.exists() and other.exists()


# -- what a save may replace ------------------------------------------------------------------------------


def test_a_save_never_replaces_what_is_not_a_checkpoint(tmp_path, monkeypatch):
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    (work / "notes.txt").write_text("mine")
    (tmp_path / "ckpt.old").mkdir()
    (tmp_path / "ckpt.old" / "keep.txt").write_text("mine too")
    (tmp_path / "file").write_text("a file")
    monkeypatch.chdir(work)
    dock = rich_dock()
    before = {p: p.read_bytes() if p.is_file() else None for p in tmp_path.rglob("*")}
    for directory, match in [
        ("", "non-empty str"),
        (".", "is not a dock checkpoint"),
        (work, "is not a dock checkpoint"),
        (tmp_path / "file", "is not a dock checkpoint"),
        (tmp_path / "ckpt", "ckpt.old exists and is not a dock checkpoint"),
        ("/", "root"),
        (b"ckpt", "non-empty str"),
        (None, "path of a checkpoint directory"),
    ]:
        with pytest.raises(tp.ConfigError, match=match):
            dock.save(directory)
    assert {p: p.read_bytes() if p.is_file() else None for p in tmp_path.rglob("*")} == before
    with pytest.raises(tp.ConfigError, match="non-empty str"):
        Dock.load("")


def test_a_saved_checkpoint_has_the_mode_a_new_directory_gets(tmp_path):
    rich_dock().save(tmp_path / "ckpt")
    umask = os.umask(0o022)
    os.umask(umask)
    assert (tmp_path / "ckpt").stat().st_mode & 0o777 == 0o777 & ~umask
