"""Takedown: removed documents' tokens are hidden from the step of the removal on, every other token unchanged.

Each run is compared token by token with the same run without a removal; the expectation is computed from
``dataset.lineage(sample)``'s pieces (not from ``occurrences``, which the loader uses).
"""

from __future__ import annotations

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store, random_documents
from tokenport.integrations import StatefulLoader
from tokenport.integrations.tracing import step_sample_ids
from tokenport.samples.gpt import GPTDataset
from tokenport.samples.packed import PackedDataset
from tokenport.sampling import PretrainingSampler, RandomSampler, StreamSampler


def _write(prefix, seed: int, documents: int = 30) -> str:
    drawn = random_documents(np.random.default_rng(seed), documents, tokens=(32, 127), length=(10, 90), append=256)
    return build_store(prefix, drawn, tokenizer=tp.load_tokenizer("byte"))


def _take(loader: StatefulLoader, steps: int, remove_at: int | None = None, documents=()) -> list[dict]:
    """``steps`` batches (epoch after epoch) as numpy arrays; ``remove_at``: remove ``documents`` after that many."""
    out: list[dict] = []
    while len(out) < steps:
        before = len(out)
        for batch in loader:
            if len(out) == remove_at:
                loader.remove_documents(documents)
            out.append({name: np.asarray(value).copy() for name, value in batch.items()})
            if len(out) == remove_at:
                loader.remove_documents(documents)
            if len(out) == steps:
                break
        if len(out) == before:
            break
    return out


def _leaf(dataset, sample: int):
    """The dataset that assembled ``sample`` (through blends) and its sample id there."""
    lineage = dataset.lineage(sample)
    node = dataset
    for child, _ in lineage.path:
        node = node.datasets[child]
    return node, lineage


def _hidden(dataset, sample: int, removed: set) -> tuple[object, np.ndarray]:
    """(the leaf dataset, positions of ``sample`` its removed documents' pieces hold), from lineage."""
    leaf, lineage = _leaf(dataset, sample)
    positions, offset = [], 0
    for document, start, end in lineage.pieces:
        if (lineage.store, document) in removed:
            positions.extend(range(offset, offset + end - start))
        offset += end - start
    return leaf, np.asarray(positions, dtype=np.int64)


def _expected(batch: dict, row: int, leaf, hidden: np.ndarray) -> dict:
    """``batch`` with the rule of the module docstring applied to ``row``, position by position."""
    out = {name: value.copy() for name, value in batch.items()}
    held = set(hidden.tolist())
    if isinstance(leaf, GPTDataset):
        tokens, labels, loss = "tokens", "labels", "loss_mask"
        pad, label_pad, shifted = 0, 0, True
    elif isinstance(leaf, PackedDataset):
        tokens, labels, loss = "tokens", "labels", None
        pad, label_pad, shifted = leaf.pad_id, leaf.label_pad, True
    elif leaf.shape == "megatron":
        tokens, labels, loss = "tokens", "labels", "loss_mask"
        pad, label_pad, shifted = leaf.pad_id, leaf.label_pad, True
    else:
        tokens, labels, loss = "input_ids", "labels", None
        pad, label_pad, shifted = leaf.pad_id, leaf.label_pad, False
    for j in range(out[tokens].shape[1]):
        near = j in held or (shifted and j + 1 in held)
        if j in held:
            out[tokens][row, j] = pad
        if j + 1 in held if isinstance(leaf, GPTDataset) else near:
            out[labels][row, j] = label_pad
        if loss is not None and near:
            out[loss][row, j] = 0
    return out


def _check_run(dataset, sampler_of, steps: int, at: int, removed: list[tuple[str, int]]) -> None:
    """Run A (no removal) and B (``removed`` at step ``at``, live; and by takedown + resume): token by token."""
    plain = _take(StatefulLoader(dataset, sampler_of()), steps)
    live_loader = StatefulLoader(dataset, sampler_of())
    live = _take(live_loader, steps, remove_at=at, documents=removed)
    first = StatefulLoader(dataset, sampler_of())
    head = _take(first, at)
    resumed_loader = StatefulLoader(dataset, sampler_of())
    resumed_loader.load_state_dict(tp.takedown(first.state_dict(), removed))
    resumed = head + _take(resumed_loader, steps - at)
    state = live_loader.state_dict()
    sampler = sampler_of()
    rank = sampler.data_parallel_rank
    gbs = sampler.micro_batch_size * sampler.data_parallel_size
    gone = set(removed)
    hits = 0
    for step, (a, b, c) in enumerate(zip(plain, live, resumed, strict=True)):
        expected = {name: value.copy() for name, value in a.items()}
        if step >= at:
            state["sampler"]["consumed_samples"] = max(state["sampler"]["consumed_samples"], (step + 1) * gbs)
            ids = step_sample_ids(state["sampler"], step, rank, dataset)[rank]
            for row, sample in enumerate(ids):
                leaf, hidden = _hidden(dataset, sample, gone)
                if len(hidden):
                    hits += 1
                    expected = _expected(expected, row, leaf, hidden)
        for name in a:
            assert np.array_equal(b[name], expected[name]), (step, name)
            assert np.array_equal(c[name], expected[name]), (step, name, "resumed")
    assert hits, "the removed documents were in no batch after the removal: pick others"


@pytest.mark.parametrize("kind", ["pretraining", "random", "feistel"])
def test_a_gpt_run_hides_removed_documents_token_by_token(tmp_path, kind):
    prefix = _write(tmp_path / "g", 1)
    store = tp.IndexedDataset(prefix)
    gpt = tp.GPTDataset(store, np.arange(len(store)), 90, tp.GPTSampleConfig(16), seed=1)  # several epochs

    def sampler_of():
        if kind == "pretraining":
            return PretrainingSampler(len(gpt), 0, 2, 1, 2, auto_advance=False)
        if kind == "random":
            return RandomSampler(len(gpt), 0, 2, 1, 2, seed=3)
        return StreamSampler(len(gpt), 0, 2, 1, 2, seed=4, order="feistel")

    rng = np.random.default_rng(7)
    documents = rng.choice(len(store), 4, replace=False).tolist()
    _check_run(gpt, sampler_of, 40, 6, [(prefix, int(d)) for d in documents])
