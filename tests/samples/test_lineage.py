"""Lineage: the store tokens over a sample's traced pieces are exactly the sample's tokens, for every kind."""

from __future__ import annotations

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import Doc, build_store, random_documents
from tokenport.blend import BlendedDataset
from tokenport.samples.lineage import SampleLineage


def _store(prefix, seed: int, documents: int = 50, masks: bool = False):
    """A byte-tokenizer store of random documents (with loss masks for a chat store)."""
    drawn = random_documents(np.random.default_rng(seed), documents, tokens=(0, 256), length=(1, 120), append=256)
    if masks:
        drawn = (Doc(tokens, mask=(np.arange(len(tokens)) >= len(tokens) // 3).astype(np.uint8)) for tokens in drawn)
    return tp.IndexedDataset(build_store(prefix, drawn, tokenizer=tp.load_tokenizer("byte"), masks=masks))


def _traced(store, lineage: SampleLineage) -> np.ndarray:
    """The store's tokens over the lineage's pieces, concatenated."""
    return np.concatenate([store.get(doc, start, end - start) for doc, start, end in lineage.pieces])


def _window(sample) -> np.ndarray:
    """A GPT sample's window: its tokens and its last label."""
    return np.append(sample["tokens"], sample["labels"][-1])


@pytest.mark.parametrize("extra", [True, False])
def test_gpt_samples_are_their_traced_pieces(tmp_path, extra):
    store = _store(tmp_path / "s", 0)
    config = tp.GPTSampleConfig(64, add_extra_token=extra)
    dataset = tp.GPTDataset(store, np.arange(5, 45), 200, config, seed=3)
    rng = np.random.default_rng(1)
    spans = 0
    for idx in rng.choice(len(dataset), 40, replace=False).tolist():
        lineage = dataset.lineage(idx)
        sample = dataset[idx]
        expected = _window(sample) if extra else sample["tokens"]
        assert lineage.sample == idx and lineage.kind == "GPTDataset" and lineage.store == str(store.prefix)
        assert lineage.num_tokens == 64 + extra
        assert all(5 <= doc < 45 for doc, _, _ in lineage.pieces)
        np.testing.assert_array_equal(_traced(store, lineage), expected)
        spans += len(lineage.pieces) > 1
    assert spans > 10  # most samples cross documents: the walk over them is exercised
    with pytest.raises(IndexError):
        dataset.lineage(len(dataset))


def test_packed_and_sft_samples_are_their_traced_non_pad_tokens(tmp_path):
    store = _store(tmp_path / "p", 1)
    packed = tp.PackedDataset(store, 100, split_long=True, seed=2, window=16)
    chat = _store(tmp_path / "c", 2, masks=True)
    sft = tp.SFTDataset(chat, 96, seed=4, too_long="split", num_samples=60)
    for dataset, source, name in ((packed, store, "tokens"), (sft, chat, "tokens")):
        for idx in range(len(dataset)):
            lineage = dataset.lineage(idx)
            sample = dataset[idx]
            real = int(sample["cu_seqlens"][-1])
            assert lineage.num_tokens == real and len(lineage.pieces) == int(sample["num_documents"])
            np.testing.assert_array_equal(_traced(source, lineage), sample[name][:real])
    assert any(offset > 0 for idx in range(len(packed)) for _, offset, _ in packed.lineage(idx).pieces)


def test_a_blend_traces_through_its_children(tmp_path):
    stores = [_store(tmp_path / f"b{k}", 10 + k) for k in range(2)]
    children = [
        tp.GPTDataset(stores[0], np.arange(50), 100, tp.GPTSampleConfig(32), seed=0),
        tp.PackedDataset(stores[1], 80, split_long=True, seed=1),
    ]
    inner = BlendedDataset(children, [0.5, 0.5], 60)
    outer = BlendedDataset([inner, children[0]], [0.7, 0.3], 50)
    for idx in range(len(outer)):
        lineage = outer.lineage(idx)
        child, sample = outer.locate(idx)
        assert lineage.path[0] == (child, sample)
        if child == 0:
            assert lineage.path[1] == inner.locate(sample)
        store = stores[0] if lineage.kind == "GPTDataset" else stores[1]
        item = outer[idx]
        expected = _window(item) if lineage.kind == "GPTDataset" else item["tokens"][: int(item["cu_seqlens"][-1])]
        np.testing.assert_array_equal(_traced(store, lineage), expected)
    assert lineage.to_dict()["path"] == [list(step) for step in lineage.path]
