"""Adding a sampler from outside tokenport: a toy (the ids in reverse order, with state) that meets the
``tokenport.sampling.Sampler`` contract, registered by name, runs through StatefulLoader (save and exact
resume), and is replayed by ``trace`` and ``tokenport trace`` (loaded as an entry-point plugin there)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tokenport as tp
from tests._support.mutate import mutations
from tests._support.plugins import write_plugin
from tests._support.stores import build_store, random_documents
from tokenport.errors import ConfigError, TokenportError
from tokenport.integrations import StatefulLoader, register_sampler
from tokenport.sampling import PretrainingSampler, Sampler
from tokenport.sampling.state import RegisteredState, read_sampler_state

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

NAME = "toy_reversed"
ROOT = Path(__file__).resolve().parents[2]


class ReversedSampler:
    """Stream position ``p`` holds id ``(total - 1 - p + rotation) % total``: one pass, ranks slicing each global
    batch as Megatron's sequential sampler does. Its state: the registered name, the shared fields, ``own``."""

    def __init__(self, total: int, micro: int, rank: int, size: int, rotation: int = 0) -> None:
        self.total_samples, self.micro_batch_size = total, micro
        self.data_parallel_rank, self.data_parallel_size = rank, size
        self.rotation = rotation
        self.consumed_samples = 0
        self.auto_advance = True

    def _ids(self, start: int, stop: int) -> list[int]:
        return [(self.total_samples - 1 - p + self.rotation) % self.total_samples for p in range(start, stop)]

    def __len__(self) -> int:
        return (self.total_samples - self.consumed_samples) // (self.micro_batch_size * self.data_parallel_size)

    def __iter__(self) -> Iterator[list[int]]:
        gbs = self.micro_batch_size * self.data_parallel_size
        for start in range(self.consumed_samples, self.total_samples - gbs + 1, gbs):
            lo = start + self.data_parallel_rank * self.micro_batch_size
            if self.auto_advance:
                self.consumed_samples += gbs
            yield self._ids(lo, lo + self.micro_batch_size)

    def advance(self, num_samples: int | None = None) -> None:
        self.consumed_samples += self.micro_batch_size * self.data_parallel_size if num_samples is None else num_samples

    def consumed_stream(self) -> Iterator[np.ndarray]:
        yield np.asarray(self._ids(0, self.consumed_samples), dtype=np.int64)

    def state_dict(self) -> dict[str, Any]:
        return {
            "sampler": NAME,
            "consumed_samples": self.consumed_samples,
            "total_samples": self.total_samples,
            "micro_batch_size": self.micro_batch_size,
            "data_parallel_size": self.data_parallel_size,
            "own": {"rotation": self.rotation},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        typed = read_sampler_state(state)  # the contract's typed read: a ConfigError naming the field
        if not isinstance(typed, RegisteredState) or typed.sampler != NAME:
            raise ConfigError(f"state is from a {typed.sampler!r} sampler, not a {NAME!r} one")
        if (typed.total_samples, typed.own) != (self.total_samples, {"rotation": self.rotation}):
            raise ConfigError("state is from another configuration: build the sampler the state was saved with")
        self.consumed_samples = typed.consumed_samples


def from_state(state: Mapping[str, Any], rank: int, dataset: Any) -> ReversedSampler:
    """The factory trace calls: the sampler ``state`` was saved from, on ``rank``."""
    rotation = state["own"]["rotation"]
    return ReversedSampler(
        state["total_samples"], state["micro_batch_size"], rank, state["data_parallel_size"], rotation
    )


register_sampler(NAME, from_state)


@pytest.fixture(scope="module")
def train(tmp_path_factory):
    prefix = tmp_path_factory.mktemp("store") / "docs"
    texts = random_documents(np.random.default_rng(0), 30, tokens=(32, 127), length=(10, 60), append=256)
    build_store(prefix, texts, tokenizer=tp.load_tokenizer("byte"))
    dataset, _, _ = tp.build_datasets(
        [str(prefix)], sizes=(64, 0, 0), config=tp.GPTSampleConfig(16), seed=1, split="1,0,0"
    )
    return dataset


def _loader(train, rank: int = 0, size: int = 2) -> StatefulLoader:
    return StatefulLoader(train, ReversedSampler(len(train), 2, rank, size, rotation=5))


def _tokens(batches) -> list[np.ndarray]:
    return [batch["tokens"].numpy() for batch in batches]


def test_the_toy_meets_the_contract_and_the_loader_reads_its_order(train):
    sampler = ReversedSampler(len(train), 2, 1, 2, rotation=5)
    assert isinstance(sampler, Sampler)
    first = next(iter(_loader(train, rank=1)))
    expected = np.stack([train[i]["tokens"] for i in sampler._ids(2, 4)])
    np.testing.assert_array_equal(first["tokens"].numpy(), expected)


def test_a_saved_state_resumes_exactly_through_a_json_round_trip(train):
    loader = _loader(train)
    batches = iter(loader)
    [next(batches) for _ in range(3)]
    state = json.loads(json.dumps(loader.state_dict()))
    assert state["sampler"]["sampler"] == NAME and state["sampler"]["consumed_samples"] == 12
    receipt = state["receipt"]  # certified: the store's content identity, the toy's class and position
    assert receipt["uncertified"] == [] and receipt["position"]["sampler"] == "ReversedSampler"
    rest = _tokens(batches)
    resumed = _loader(train)
    resumed.load_state_dict(state)
    assert resumed.consumed_samples == 12
    got = _tokens(resumed)
    assert len(got) == len(rest) == len(train) // 4 - 3
    for a, b in zip(got, rest, strict=True):
        np.testing.assert_array_equal(a, b)


def _state(train, steps: int = 3) -> dict:
    loaders = [_loader(train, rank) for rank in range(2)]
    for loader in loaders:
        batches = iter(loader)
        [next(batches) for _ in range(steps)]
    return json.loads(json.dumps(loaders[0].state_dict()))


def test_trace_rebuilds_the_toy_through_the_registry(train):
    state = _state(train)
    traced = tp.trace(state, 2)
    sampler = ReversedSampler(len(train), 2, 0, 2, rotation=5)
    assert [t.sample for t in traced] == sampler._ids(8, 12)  # step 2: stream positions 8..11, both ranks
    assert [(t.rank, t.slot) for t in traced] == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_a_mutated_toy_state_is_refused_and_changes_nothing(train):
    state = _state(train)
    loader = _loader(train)
    original = loader.state_dict()
    refused = 0
    for label, data in mutations(json.dumps(state["sampler"])):
        try:
            document = json.loads(data)
        except ValueError:
            continue  # not JSON: a loader state is a dict
        try:
            loader.load_state_dict({**state, "sampler": document})
        except TokenportError:
            refused += 1
            assert loader.state_dict() == original, label
        else:  # still a valid state of this sampler: loaded whole
            assert isinstance(read_sampler_state(document), RegisteredState), label
            assert loader.consumed_samples == document["consumed_samples"], label
            loader.load_state_dict(original)
    assert refused > 20


def test_a_toy_state_in_a_tokenport_sampler_is_a_config_error():
    toy = ReversedSampler(8, 2, 0, 1).state_dict()
    sampler = PretrainingSampler(8, 0, 2, 0, 1)
    with pytest.raises(ConfigError, match="from a toy_reversed sampler, not a PretrainingSampler"):
        sampler.load_state_dict(toy)
    assert sampler.consumed_samples == 0


def test_an_unregistered_name_is_refused_naming_the_known_samplers(train):
    state = _state(train)
    state["sampler"]["sampler"] = "nobody"
    with pytest.raises(ConfigError, match=r"unknown sampler 'nobody' \(known: .*toy_reversed"):
        tp.trace(state, 0)


def _plugin_dir(tmp_path: Path) -> str:
    """An installed-looking plugin whose import registers the toy (as a package outside tokenport would)."""
    source = """
        from tests.extending.test_sampler import NAME, from_state
        from tokenport.integrations import register_sampler

        register_sampler(NAME, from_state)
        """
    return write_plugin(tmp_path, "toy_sampler_plugin", source, name="toy_sampler")


def test_the_cli_traces_a_toy_sampler_loaded_as_a_plugin(train, tmp_path):
    state = _state(train)
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state))
    src = str(Path(tp.__file__).resolve().parents[1])
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([_plugin_dir(plugin), str(ROOT), src])}
    run = subprocess.run(
        [sys.executable, "-m", "tokenport", "trace", str(path), "--step", "1", "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    sampler = ReversedSampler(len(train), 2, 0, 2, rotation=5)
    assert [s["sample"] for s in report["samples"]] == sampler._ids(4, 8)
