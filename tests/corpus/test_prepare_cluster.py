"""`prepare` on a Ray cluster of several nodes survives node loss: a node killed mid-unit (its raylet
and workers, seeded moments), or after a unit finished with its result still on it, changes no output
byte; an object-store output needs no filesystem shared with the nodes, and leaves nothing in their scratch."""

from __future__ import annotations

import json
import os
import pathlib
import random
import re
import shutil
import threading
import time

import numpy as np
import pytest

import tokenport as tp
from tokenport.corpus import PrepareConfig, prepare
from tokenport.corpus.steps.base import Step
from tokenport.corpus.steps.registry import STEP_KINDS, register_step

pytest.importorskip("ray")

_PREP = {"prep": 1.0}
"""The resource every worker node declares and every unit needs: units never run on the head."""


class Dawdle(Step):
    """A test step that keeps every document but takes `pause` seconds over each: a unit lasts long
    enough (a few tenths of a second) for a kill to land while it is being written."""

    def __init__(self, pause: float) -> None:
        super().__init__()
        self.pause = pause

    def reject(self, text: str) -> str | None:
        time.sleep(self.pause)
        return None


@pytest.fixture
def dawdle():
    register_step("dawdle", Dawdle)
    yield
    del STEP_KINDS["dawdle"]


def _corpus(tmp_path: pathlib.Path) -> list[str]:
    """Three jsonl inputs (one gzip, cut into chunks), about 16 units of 60 kB, with duplicates across them."""
    import gzip

    rng = np.random.default_rng(31)
    words = [f"w{k}" for k in range(3000)]
    texts = [" ".join(rng.choice(words, 60)) for _ in range(2400)]
    parts = (texts[:800], texts[800:1600], texts[1600:] + texts[:40])
    lines = ["".join(json.dumps({"text": t, "id": f"d{i}"}) + "\n" for i, t in enumerate(part)) for part in parts]
    paths = [tmp_path / "a.jsonl", tmp_path / "b.jsonl.gz", tmp_path / "c.jsonl"]
    paths[0].write_text(lines[0])
    paths[1].write_bytes(gzip.compress(lines[1].encode()))
    paths[2].write_text(lines[2])
    return [str(p) for p in paths]


_OPTIONS = {"steps": [{"step": "exact_dedup"}, {"step": "dawdle", "pause": 0.001}], "unit_bytes": 60_000}


def _files(directory: str) -> dict[str, bytes]:
    """Every file under `directory`, by its path relative to it."""
    out: dict[str, bytes] = {}
    for root, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            out[os.path.relpath(path, directory)] = pathlib.Path(path).read_bytes()
    return out


def _comparable(data: dict) -> dict:
    """The run manifest without what legitimately differs between two runs: when it was created, how
    long stages took (``stages``, ``unit_stages``, each step's ``time_ms``) and how the work was done
    (the config's output, executor, workers, ray_address and ray_resources)."""
    for key in ("output", "executor", "workers", "ray_address", "ray_resources"):
        data["config"].pop(key, None)
    for key in ("created", "stages", "unit_stages"):
        data.pop(key)
    for costs in data["step_costs"].values():
        costs.pop("time_ms")
    return data


class _Watch(threading.Thread):
    """Watches the worker nodes' processes (by their TOKENPORT_TEST_NODE) through /proc: which unit each
    writes (an open ``.unit-N.bin.PID...tmp``), and any file they open under `forbidden`. Kills the node
    writing the `kill_at`-th unit seen, or the first after it on a living node (None: none), while that
    unit is being written; never the last node alive."""

    _UNIT = re.compile(r"\.(unit-\d+-[0-9a-f]+)\.bin\.\d+\.")

    def __init__(self, nodes, kill_at: int | None, forbidden: tuple[str, ...] = ()) -> None:
        super().__init__(daemon=True)
        self.nodes, self.kill_at, self.forbidden = nodes, kill_at, forbidden
        self.by_name = {node.name: node for node in nodes.added}
        self.units: list[str] = []  # in the order first seen
        self.writers: dict[str, set[str]] = {}  # the nodes seen writing each unit
        self.killed: tuple[str, str] | None = None  # (node, unit being written there)
        self.touched: set[str] = set()
        self.stop = threading.Event()
        self._owner: dict[int, str | None] = {}
        self.lock = threading.Lock()  # one kill at a time (the driver kills too)

    def _node_of(self, pid: int) -> str | None:
        if pid not in self._owner:
            try:
                environ = pathlib.Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                return None
            names = [e.split(b"=", 1)[1].decode() for e in environ if e.startswith(b"TOKENPORT_TEST_NODE=")]
            self._owner[pid] = names[0] if names and names[0] in self.by_name else None
        return self._owner[pid]

    def _open_files(self) -> list[tuple[str, str]]:
        seen = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or (node := self._node_of(int(entry))) is None:
                continue
            try:
                fds = os.listdir(f"/proc/{entry}/fd")
            except OSError:
                continue
            for fd in fds:
                try:
                    seen.append((node, os.readlink(f"/proc/{entry}/fd/{fd}")))
                except OSError:
                    continue
        return seen

    def run(self) -> None:
        while not self.stop.is_set():
            for node, path in self._open_files():
                if self.forbidden and path.startswith(self.forbidden):
                    self.touched.add(path)
                match = self._UNIT.search(os.path.basename(path))
                if match is None:
                    continue
                self.writers.setdefault(match.group(1), set()).add(node)
                if match.group(1) in self.units:
                    continue
                self.units.append(match.group(1))
                if self.killed is None and len(self.units) - 1 >= self.kill_at:
                    with self.lock:
                        if self.by_name[node].alive and len(self.nodes.alive) > 1:
                            self.killed = (node, match.group(1))
                            self.nodes.kill(self.by_name[node])

    def __enter__(self) -> _Watch:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.join()


def test_prepare_survives_a_node_killed_mid_unit(ray_session, ray_nodes, dawdle, tmp_path):
    inputs = _corpus(tmp_path)
    out = str(tmp_path / "out")  # both runs prepare here (a compressed input's unit names hold its path)
    local = prepare(PrepareConfig(inputs, out, workers=2, **_OPTIONS))
    expected = _files(out)
    shutil.rmtree(out)
    assert local.units >= 12
    for _ in range(2):
        ray_nodes.add(cpus=1, resources=_PREP)
    kill_at = random.Random(3101).randrange(2, local.units // 2)  # a seeded unit, among the first half
    config = PrepareConfig(inputs, out, executor="ray", ray_resources=_PREP, **_OPTIONS)
    with _Watch(ray_nodes, kill_at) as watch:
        on_ray = prepare(config)
    assert watch.killed is not None, f"no unit was seen being written ({watch.units})"
    node, unit = watch.killed
    assert len(watch.writers[unit] - {node}) == 1  # the unit killed mid-write was written again elsewhere
    assert len(ray_nodes.alive) == 1
    assert on_ray.units == local.units and on_ray.documents == local.documents and on_ray.steps == local.steps
    _assert_same_output(_files(out), expected)


def _assert_same_output(got: dict[str, bytes], expected: dict[str, bytes]) -> None:
    """The same files (no temporaries, no unit written twice, no work files left), each byte for byte
    but for the manifests' creation times (parts) and `_comparable` (the run's)."""
    assert sorted(got) == sorted(expected)
    for name in [name for name in expected if name.endswith(".json")]:
        mine, theirs = json.loads(got.pop(name)), json.loads(expected.pop(name))
        if name == "tokenport.json":
            assert _comparable(mine) == _comparable(theirs)
        else:
            assert mine.pop("created") and theirs.pop("created") and mine == theirs, name
    assert got == expected  # every part's .bin and .idx, provenance.npz


def test_bad_ray_resources_are_refused(tmp_path):
    for resources, match in [
        ({"CPU": 1}, "no custom resource"),
        ({"prep": 0}, "positive"),
        ({"prep": float("nan")}, "positive"),
        ({"prep": True}, "positive"),
        ({}, "mapping"),
        (["prep"], "mapping"),
    ]:
        with pytest.raises(tp.ConfigError, match=match):
            PrepareConfig(["x.jsonl"], str(tmp_path / "o"), executor="ray", ray_resources=resources)
    with pytest.raises(tp.ConfigError, match="--executor ray"):
        PrepareConfig(["x.jsonl"], str(tmp_path / "o"), ray_resources=_PREP)
    config = PrepareConfig(["x.jsonl"], str(tmp_path / "o"), executor="ray", ray_resources={"b": 2, "a": 1})
    assert config.ray_resources == {"a": 1.0, "b": 2.0} and config.to_dict()["ray_resources"] == {"a": 1.0, "b": 2.0}
    assert "ray_resources" not in PrepareConfig(["x.jsonl"], str(tmp_path / "o")).to_dict()  # manifests as before


def _objects(s3, prefix: str) -> dict[str, bytes]:
    listed = s3.client.list_objects_v2(Bucket=s3.bucket, Prefix=prefix).get("Contents", [])
    return {
        o["Key"][len(prefix) :]: s3.client.get_object(Bucket=s3.bucket, Key=o["Key"])["Body"].read() for o in listed
    }


def _kill_holder_of_first_result(ray, nodes, watch, monkeypatch) -> dict:
    """Make the driver's ``ray.wait`` kill the node holding the first finished unit's result (in that
    node's object store, not yet fetched), before the executor gets it: Ray must make it again."""
    wait, lost = ray.wait, {}
    by_id = {node.node_id: node for node in nodes.added}

    def wait_then_kill(refs, *args, **kwargs):
        ready, rest = wait(refs, *args, **kwargs)
        if not lost and ready:
            where = ray.experimental.get_object_locations(ready).get(ready[0], {})
            holders = [by_id[n] for n in where.get("node_ids", []) if n in by_id]
            with watch.lock:
                if holders and holders[0].alive and len(nodes.alive) > 1:
                    lost.update(node=holders[0].name, size=where["object_size"])
                    nodes.kill(holders[0])
        return ready, rest

    monkeypatch.setattr(ray, "wait", wait_then_kill)
    return lost


def test_prepare_to_s3_survives_node_loss_without_a_shared_filesystem(
    ray_session, ray_nodes, dawdle, s3_env, tmp_path, monkeypatch
):
    inputs, url, key = _corpus(tmp_path), f"s3://{s3_env.bucket}/cluster-out", "cluster-out/"
    local = prepare(PrepareConfig(inputs, url, workers=2, **_OPTIONS))
    expected = _objects(s3_env, key)
    for name in expected:
        s3_env.client.delete_object(Bucket=s3_env.bucket, Key=key + name)
    nodes = [ray_nodes.add(cpus=1, resources=_PREP) for _ in range(3)]
    kill_at = random.Random(3102).randrange(2, local.units // 2)
    config = PrepareConfig(inputs, url, executor="ray", ray_resources=_PREP, **_OPTIONS)
    with _Watch(ray_nodes, kill_at, forbidden=(str(tmp_path / "cache"),)) as watch:
        lost = _kill_holder_of_first_result(ray_session, ray_nodes, watch, monkeypatch)
        on_ray = prepare(config)
    assert watch.killed is not None and lost and lost["size"] > 100_000, (watch.killed, lost)
    assert watch.writers[watch.killed[1]] - {watch.killed[0]}  # the unit killed mid-write was written again
    assert [node.name for node in ray_nodes.alive] == [
        n.name for n in nodes if n.name not in (lost["node"], watch.killed[0])
    ]
    assert on_ray.units == local.units and on_ray.documents == local.documents
    _assert_same_output(_objects(s3_env, key), expected)
    assert not watch.touched, watch.touched  # no node opened a file of the driver's staging directory
    for node in ray_nodes.alive:  # and no unit's directory is left in the scratch of a node
        assert not [name for name in os.listdir(node.scratch) if name.startswith("tokenport-unit-")]


def _fails() -> None:
    raise RuntimeError("boom")


def test_a_task_ray_cannot_finish_is_a_tokenport_error(ray_session):
    from tokenport.corpus.run.ray_executor import RayExecutor

    with RayExecutor(tp.load_tokenizer("byte")) as executor:
        ref = executor._remote(_fails).remote()
        with pytest.raises(
            tp.TokenportError, match=r"preparing unit-7: its Ray task failed \(RuntimeError: boom; .*rerun"
        ):
            executor._get(ref, "preparing unit-7")


def test_ray_resources_from_the_command_line(tmp_path):
    import subprocess
    import sys

    from tokenport.corpus.run.config import parse_resources

    assert parse_resources("prep=1, big_box=0.5") == {"prep": 1.0, "big_box": 0.5}
    config = PrepareConfig.from_options("x.jsonl", str(tmp_path / "o"), executor="ray", ray_resources={"prep": 1})
    assert config.ray_resources == {"prep": 1.0}
    refused = subprocess.run(
        [sys.executable, "-m", "tokenport", "prepare", "x.jsonl", "-o", str(tmp_path / "o"), "--ray-resources", "prep"],
        capture_output=True,
        text=True,
    )
    assert refused.returncode == 2 and "--ray-resources" in refused.stderr, refused.stderr


def _refuses() -> None:
    raise tp.CorruptStoreError("keys.npy: damaged; delete it")


def test_a_tokenport_error_a_task_raises_comes_back_as_itself(ray_session):
    from tokenport.corpus.run.ray_executor import RayExecutor

    with RayExecutor(tp.load_tokenizer("byte")) as executor:
        with pytest.raises(tp.CorruptStoreError, match=r"^keys.npy: damaged; delete it$"):
            executor._get(executor._remote(_refuses).remote(), "the pairs of band 3")


def test_a_compressed_inputs_parts_are_the_same_wherever_the_output_is(tmp_path):
    """Unit names (and so the parts' fingerprints) once held the decompressed chunks' paths under the
    output: two runs into two directories differed in every part made from a compressed input."""
    inputs = _corpus(tmp_path)[1:2]  # the gzip one, decompressed into chunks under OUTPUT/.work/
    options = {"unit_bytes": 60_000, "workers": 1}
    first = prepare(PrepareConfig(inputs, str(tmp_path / "first"), **options))
    second = prepare(PrepareConfig(inputs, str(tmp_path / "second"), **options))
    assert first.units == second.units > 1
    _assert_same_output(_files(second.output), _files(first.output))
