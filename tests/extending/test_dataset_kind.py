"""A dataset kind from outside the package: one class plus ``register_dataset_kind``, and it trains,
certifies its receipt, rebuilds, traces, and works in the CLI through an entry-point plugin."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tokenport as tp
from tests._support.mutate import mutations
from tests._support.plugins import write_plugin
from tests._support.stores import build_store, random_documents
from tokenport._schema import Document, Positive, decode
from tokenport.integrations import StatefulLoader, data_receipt, rebuild_dataset
from tokenport.samples import Describer, Rebuilder, digest
from tokenport.sampling.state import ReceiptNode

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[2]


class DocumentHeads(tp.SampleDataset):
    """Toy kind: every ``stride``-th document of a store, its first ``seq_length`` tokens, zero-padded."""

    def __init__(self, store: tp.IndexedDataset, seq_length: int, *, stride: int = 1) -> None:
        self.store, self.seq_length, self.stride = store, int(seq_length), int(stride)
        self.documents = np.arange(0, len(store), self.stride, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.documents)

    def __getitem__(self, idx: int) -> dict[str, np.ndarray]:
        document = int(self.documents[idx])
        head = self.store.get(document, 0, min(self.seq_length, int(self.store.sequence_lengths[document])))
        tokens = np.zeros(self.seq_length, dtype=np.int64)
        tokens[: len(head)] = head
        return {"tokens": tokens, "length": np.int64(len(head))}

    def lineage(self, idx: int) -> tp.SampleLineage:
        document = int(self.documents[idx])
        end = min(self.seq_length, int(self.store.sequence_lengths[document]))
        return tp.SampleLineage(idx, str(self.store.prefix), "DocumentHeads", ((document, 0, end),))

    def stores(self) -> tuple[tp.IndexedDataset, ...]:
        return (self.store,)

    def describe(self, describer: Describer) -> dict[str, Any]:
        return {
            "store": describer.store(self.store),
            "sample_config": {"seq_length": self.seq_length},
            "order": digest(self.documents),
            "build": {"stride": self.stride},
        }

    @classmethod
    def from_description(cls, node: Mapping[str, Any], rebuilder: Rebuilder) -> DocumentHeads:
        recipe = rebuilder.recipe(node, _HeadsBuild)  # a strict document: a wrong or unknown key is a ConfigError
        return cls(rebuilder.open(node), node["sample_config"]["seq_length"], stride=recipe.stride)


class _HeadsBuild(Document, frozen=True):
    """The toy's recipe, as its receipt node's ``build`` records it."""

    stride: Positive


tp.register_dataset_kind("toy_document_heads", DocumentHeads)


def _store(prefix: Path, documents: int = 60) -> tp.IndexedDataset:
    texts = random_documents(np.random.default_rng(4), documents, tokens=(32, 127), length=(5, 40), append=256)
    return tp.IndexedDataset(build_store(prefix, texts, tokenizer=tp.load_tokenizer("byte")))


@pytest.fixture()
def run(tmp_path):
    """Three training steps over the toy kind: the dataset, the loader state, and each step's batch."""
    dataset = DocumentHeads(_store(tmp_path / "docs"), 16, stride=3)
    loader = StatefulLoader.for_dataset(dataset, micro_batch_size=4, seed=7)
    model = torch.nn.Embedding(257, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = []
    for batch in loader:
        loss = model(batch["tokens"]).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        batches.append({name: value.numpy() for name, value in batch.items()})
        if len(batches) == 3:
            break
    return dataset, loader.state_dict(), batches


def test_the_toy_kind_trains_certifies_rebuilds_and_traces(run):
    dataset, state, batches = run
    receipt = state["receipt"]
    assert receipt["uncertified"] == [] and receipt["dataset"]["type"] == "toy_document_heads"
    assert receipt["dataset"]["store"]["content"] is not None
    rebuilt = rebuild_dataset(receipt)
    assert isinstance(rebuilt, DocumentHeads) and np.array_equal(rebuilt.documents, dataset.documents)
    assert data_receipt(rebuilt).dataset == receipt["dataset"]
    for step, batch in enumerate(batches):
        for item in tp.trace(state, step):
            (document, start, end), row = item.lineage.pieces[0], batch["tokens"][item.slot]
            assert item.lineage.kind == "DocumentHeads" and item.sample in range(len(dataset))
            np.testing.assert_array_equal(dataset.store.get(document, start, end - start), row[: end - start])
            assert int(batch["length"][item.slot]) == end - start


def test_a_kind_that_is_not_registered_is_recorded_uncertified(run, caplog):
    class Unregistered(tp.SampleDataset):  # a SampleDataset, but no registered class in its MRO
        def __len__(self) -> int:
            return 3

        def __getitem__(self, idx: int) -> dict[str, np.ndarray]:
            return {"tokens": np.zeros(2, dtype=np.int64)}

    receipt = data_receipt(Unregistered())
    assert receipt.dataset == {"type": "Unregistered", "length": 3, "certified": False}
    assert receipt.uncertified == ("dataset",)
    with pytest.raises(tp.ConfigError, match=r"dataset: a Unregistered cannot be rebuilt from a receipt"):
        rebuild_dataset(receipt)


def test_mutated_toy_receipts_are_refused_or_rebuild_what_they_describe(run):
    _, state, _ = run
    for label, data in mutations(json.dumps(state["receipt"])):
        try:
            receipt = json.loads(data)
        except ValueError:
            continue  # not JSON: the loader state reader refuses it before a receipt is read
        try:
            rebuilt = rebuild_dataset(receipt)
        except tp.TokenportError:
            continue
        assert _node(data_receipt(rebuilt).dataset) == _node(receipt["dataset"]), label  # a valid receipt of another


def _node(node: Mapping[str, Any]) -> ReceiptNode:
    """A receipt node as its schema reads it (absent optional keys as their defaults)."""
    return decode(node, ReceiptNode, where="node", remedy="-", error=tp.ConfigError)


def _plugin(tmp_path: Path) -> str:
    """A plugin distribution whose module imports this file (which registers the toy kind)."""
    source = "from tests.extending.test_dataset_kind import DocumentHeads  # registers the toy kind\n"
    return write_plugin(tmp_path / "plugin", "toy_dataset_plugin", source, name="toy_dataset")


def _cli(args: list[str], *paths: str) -> subprocess.CompletedProcess:
    source = str(Path(tp.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*paths, source, str(ROOT)])}
    return subprocess.run([sys.executable, "-m", "tokenport", *args], capture_output=True, text=True, env=env)


def test_the_cli_traces_the_toy_kind_through_its_plugin(run, tmp_path):
    dataset, state, batches = run
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state))
    done = _cli(["trace", str(path), "--step", "2", "--json"], _plugin(tmp_path))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [sample["lineage"]["kind"] for sample in report["samples"]] == ["DocumentHeads"] * 4
    first = report["samples"][0]["lineage"]
    document, start, end = first["pieces"][0]
    np.testing.assert_array_equal(dataset.store.get(document, start, end - start), batches[2]["tokens"][0][:end])
    without = _cli(["trace", str(path), "--step", "2"])  # no plugin: the kind is named, never guessed
    assert without.returncode == 2 and "toy_document_heads cannot be rebuilt" in without.stderr


def test_the_contract_declares_each_ability_and_its_default():
    class Bare(tp.SampleDataset):
        def __len__(self) -> int:
            return 2

        def __getitem__(self, idx: int) -> dict[str, np.ndarray]:
            return {"tokens": np.full(3, idx, dtype=np.int64)}

    bare = Bare()
    assert bare.batch_width([0]) is None and bare.read_plan([0]) is None and bare.stores() == ()
    np.testing.assert_array_equal(bare.get_batch([1, 0])["tokens"], [[1, 1, 1], [0, 0, 0]])
    with pytest.raises(tp.ConfigError, match="cannot say where its samples come from"):
        bare.lineage(0)
    with pytest.raises(tp.ConfigError, match="expected a subclass of tokenport.samples.SampleDataset"):
        tp.register_dataset_kind("not_a_kind", dict)
    with pytest.raises(tp.ConfigError, match="that name is taken"):
        tp.register_dataset_kind("GPTDataset", Bare)

    class Changed(tp.GPTDataset):  # changes __getitem__: must not inherit the one-call batch path
        def __getitem__(self, idx: int) -> dict[str, np.ndarray]:
            return {**super().__getitem__(idx), "extra": np.int64(1)}

    assert tp.GPTDataset.batch_path and not Changed.batch_path and not DocumentHeads.batch_path


class _ShadowA(tp.SampleDataset):
    pass


class _ShadowB(tp.SampleDataset):
    pass


def test_register_dataset_kind_against_a_shadow_model():
    """Random registrations: each accepted one is found by name and names its class in receipts; a refused
    one (a taken name, a bad name, not a SampleDataset class) changes nothing."""
    from tokenport.samples.base import DATASET_KINDS, dataset_kind

    rng = np.random.default_rng(11)
    model = {name: cls for name, cls in DATASET_KINDS.items()}
    names = ["shadow_a", "shadow_b", "shadow_c", "", "two words", "GPTDataset"]
    items = [_ShadowA, _ShadowB, dict, 3, None]
    for _ in range(200):
        name, item = names[rng.integers(len(names))], items[rng.integers(len(items))]
        fits = name.replace("_", "").isalnum() and isinstance(item, type) and issubclass(item, tp.SampleDataset)
        fits = fits and model.get(name, item) is item
        if fits:
            tp.register_dataset_kind(name, item)
            model[name] = item
        else:
            with pytest.raises(tp.ConfigError):
                tp.register_dataset_kind(name, item)
        assert dict(DATASET_KINDS.items()) == model
    for name, cls in model.items():
        if cls in (_ShadowA, _ShadowB):
            assert DATASET_KINDS.get(name) is cls and dataset_kind(cls.__new__(cls)) in model
