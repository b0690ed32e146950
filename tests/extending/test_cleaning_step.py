"""Cleaning steps added from outside tokenport: a per-document toy filter (a `Step`) and a run-wide
toy step (a `RunWideStep`: keep only the first document of each length), defined here, registered
with `register_step`, and used by `prepare` from a steps file, in this process and through the CLI
with the toys as an entry-point plugin."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest

import tokenport as tp
from tests._support.plugins import write_plugin
from tokenport.corpus import PrepareConfig, RunWideStep, Step, prepare, register_step
from tokenport.corpus.run.config import load_steps
from tokenport.indexed import IndexedDataset

TOYS = '''
"""Toy cleaning steps: a per-document filter and a run-wide step."""

import numpy as np

from tokenport.corpus import RunWideStep, Step, register_step


class DropShort(Step):
    """Drops documents of fewer than `min_chars` characters."""

    def __init__(self, min_chars: int = 2) -> None:
        super().__init__()
        self.min_chars = min_chars

    def reject(self, text):
        return "too_short" if len(text) < self.min_chars else None


class FirstOfEachLength(RunWideStep):
    """Keeps only the first document (in run order) of each text length."""

    reason = "same_length"

    def sign(self, text):
        return np.array([len(text)], dtype=np.uint64)

    def decide(self, signatures):
        keys = [np.load(path)[:, 0] for path in signatures.key_files]
        lengths = np.concatenate(keys) if keys else np.zeros(0, np.uint64)
        _, first = np.unique(lengths, return_index=True)
        drop = np.ones(len(lengths), dtype=bool)
        drop[first] = False
        bounds = np.cumsum([0, *(len(k) for k in keys)])
        return [drop[bounds[i] : bounds[i + 1]] for i in range(len(keys))]


register_step("toy_short", DropShort)
register_step("toy_first_of_length", FirstOfEachLength)
'''

FILES = [["a", "bb", "cc", "ddd", "hello"], ["world", "hi", "x", "abcde", "four"]]
KEPT = ["bb", "ddd", "hello", "four"]
STEPS = [{"step": "toy_short", "min_chars": 2}, {"step": "toy_first_of_length"}]
COUNTS = {
    "0:toy_short": {"documents_in": 10, "documents_out": 8, "removed:too_short": 2},
    "1:toy_first_of_length": {"documents_in": 8, "documents_out": 4, "removed:same_length": 4},
}


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory) -> str:
    """A directory holding the toys as module `toy_steps_plugin`, declared as a tokenport plugin."""
    return write_plugin(tmp_path_factory.mktemp("plugin"), "toy_steps_plugin", TOYS, name="toy_steps")


@pytest.fixture(scope="module")
def toys(plugin_dir):
    """The toy module, imported here (which registers its steps) from the plugin directory."""
    sys.path.insert(0, plugin_dir)
    try:
        yield importlib.import_module("toy_steps_plugin")
    finally:
        sys.path.remove(plugin_dir)


@pytest.fixture
def inputs(tmp_path) -> list[str]:
    paths = []
    for n, texts in enumerate(FILES):
        path = tmp_path / f"in{n}.jsonl"
        path.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts), encoding="utf-8")
        paths.append(str(path))
    (tmp_path / "steps.json").write_text(json.dumps(STEPS))
    return paths


def decoded(parts) -> list[str]:
    byte = tp.load_tokenizer("byte")
    out = []
    for prefix in parts:
        with IndexedDataset(prefix) as ds:
            out += [byte.decode(ds[i].tolist()) for i in range(len(ds))]
    return out


def test_toy_steps_from_a_steps_file_clean_a_prepare_run(toys, inputs, tmp_path):
    assert issubclass(toys.DropShort, Step) and issubclass(toys.FirstOfEachLength, RunWideStep)
    steps = load_steps(str(tmp_path / "steps.json"))
    result = prepare(PrepareConfig(inputs, str(tmp_path / "out"), workers=2, steps=steps))
    assert decoded(result.parts) == KEPT
    assert result.steps == COUNTS
    manifest = json.loads((tmp_path / "out" / "tokenport.json").read_text())
    assert manifest["steps"] == COUNTS and manifest["config"]["steps"] == STEPS


def test_a_toy_step_is_checked_like_a_built_in_one(toys, inputs, tmp_path):
    register_step("toy_short", toys.DropShort)  # the same class again: a no-op
    with pytest.raises(tp.ConfigError, match="'toy_short'.*taken"):
        register_step("toy_short", toys.FirstOfEachLength)
    bad = [{"step": "toy_first_of_length", "min_chars": 3}]
    with pytest.raises(tp.ConfigError, match=r"steps\[0\] \(toy_first_of_length\): unexpected option 'min_chars'"):
        prepare(PrepareConfig(inputs, str(tmp_path / "bad"), workers=1, steps=bad))
    assert not (tmp_path / "bad").exists()


def test_the_cli_runs_the_plugin_steps(plugin_dir, inputs, tmp_path):
    out = tmp_path / "out"
    path = os.pathsep.join([plugin_dir, *sys.path[1:]])
    command = [sys.executable, "-m", "tokenport", "prepare", *inputs, "-o", str(out), "--workers", "2", "-q"]
    command += ["--steps", str(tmp_path / "steps.json")]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": path})
    assert done.returncode == 0, done.stderr
    parts = sorted(str(p.with_suffix("")) for p in out.glob("part-*.idx"))
    assert decoded(parts) == KEPT
    assert json.loads((out / "tokenport.json").read_text())["steps"] == COUNTS


PAGE = '''
class ExecShort(Step):
    """Drops documents shorter than `min_chars`: a step defined in code run by exec()."""

    def __init__(self, min_chars: int = 2) -> None:
        super().__init__()
        self.min_chars = min_chars

    def reject(self, text):
        return "too_short" if len(text) < self.min_chars else None
'''


def test_a_step_defined_by_exec_runs_on_one_worker_and_is_refused_by_name_for_more(inputs, tmp_path, monkeypatch):
    from tokenport.corpus.steps import registry

    namespace = {"Step": Step, "__name__": "__page__"}
    exec(PAGE, namespace)  # what a docs page or a notebook cell does: its module '__page__' cannot be imported
    monkeypatch.setitem(registry.STEP_KINDS, "exec_short", namespace["ExecShort"])
    steps = [{"step": "exec_short", "min_chars": 2}]
    with pytest.raises(tp.ConfigError, match=r"step 'exec_short' is ExecShort defined in __page__, which worker") as e:
        prepare(PrepareConfig(inputs, str(tmp_path / "many"), workers=2, steps=steps))
    assert "my_steps.py" in str(e.value) and "--workers 1" in str(e.value)
    assert not (tmp_path / "many").exists()  # refused before any work
    result = prepare(PrepareConfig(inputs, str(tmp_path / "one"), workers=1, steps=steps))
    assert decoded(result.parts) == [t for texts in FILES for t in texts if len(t) >= 2]
