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
    """Three jsonl inputs (one gzip, cut into chunks), about 16 units of 100 kB, with duplicates across them."""
    import gzip

    rng = np.random.default_rng(31)
    words = [f"w{k}" for k in range(3000)]
    texts = [" ".join(rng.choice(words, 60)) for _ in range(4000)]
    parts = (texts[:1300], texts[1300:2600], texts[2600:] + texts[:40])
    lines = ["".join(json.dumps({"text": t, "id": f"d{i}"}) + "\n" for i, t in enumerate(part)) for part in parts]
    paths = [tmp_path / "a.jsonl", tmp_path / "b.jsonl.gz", tmp_path / "c.jsonl"]
    paths[0].write_text(lines[0])
    paths[1].write_bytes(gzip.compress(lines[1].encode()))
    paths[2].write_text(lines[2])
    return [str(p) for p in paths]


_OPTIONS = {"steps": [{"step": "exact_dedup"}, {"step": "dawdle", "pause": 0.001}], "unit_bytes": 100_000}


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
    (the config's executor, workers, ray_address and ray_resources)."""
    for key in ("executor", "workers", "ray_address", "ray_resources"):
        data["config"].pop(key, None)
    for key in ("created", "stages", "unit_stages"):
        data.pop(key)
    for costs in data["step_costs"].values():
        costs.pop("time_ms")
    return data


class _Watch(threading.Thread):
    """Watches the worker nodes' processes (by their TOKENPORT_TEST_NODE) through /proc: which unit each
    writes (an open ``.unit-N.bin.PID...tmp``), and any file they open under `forbidden`. Kills the node
    writing the `kill_at`-th unit seen (None: none) while that unit is being written."""

    _UNIT = re.compile(r"\.(unit-\d+-[0-9a-f]+)\.bin\.\d+\.")

    def __init__(self, nodes, kill_at: int | None, forbidden: tuple[str, ...] = ()) -> None:
        super().__init__(daemon=True)
        self.nodes, self.kill_at, self.forbidden = nodes, kill_at, forbidden
        self.by_name = {node.name: node for node in nodes.added}
        self.units: list[str] = []  # in the order first seen
        self.killed: tuple[str, str] | None = None  # (node, unit being written there)
        self.touched: set[str] = set()
        self.stop = threading.Event()
        self._owner: dict[int, str | None] = {}

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
                if match is None or match.group(1) in self.units:
                    continue
                self.units.append(match.group(1))
                if self.killed is None and len(self.units) - 1 == self.kill_at:
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
    for _ in range(3):
        ray_nodes.add(cpus=1, resources=_PREP)
    kill_at = random.Random(3101).randrange(2, local.units // 2)  # a seeded unit, among the first half
    config = PrepareConfig(inputs, out, executor="ray", ray_resources=_PREP, **_OPTIONS)
    with _Watch(ray_nodes, kill_at) as watch:
        on_ray = prepare(config)
    assert watch.killed is not None, f"no unit was seen being written ({watch.units})"
    assert len(ray_nodes.alive) == 2
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
