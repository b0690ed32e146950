"""build_datasets with an SFTConfig: chat stores split Megatron's way, blended by weight, served in epochs."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import Doc, build_store
from tokenport.blend import BlendedDataset
from tokenport.builder import split_document_ranges
from tokenport.errors import ConfigError
from tokenport.samples.sft import SFTConfig, SFTDataset

SEQ = 64
CONFIG = SFTConfig(seq_length=SEQ, packing="bfd", too_long="split")


def _write_chat(prefix: str, count: int, seed: int, longest: int) -> str:
    """A chat store of ``count`` conversations (prompt tokens mask 0, answer tokens mask 1)."""
    rng = np.random.default_rng(seed)

    def conversation() -> Doc:
        prompt, answer = int(rng.integers(1, 10)), int(rng.integers(1, longest))
        tokens = rng.integers(3, 30_000, prompt + answer)
        return Doc(tokens, mask=np.r_[np.zeros(prompt, np.uint8), np.ones(answer, np.uint8)])

    return build_store(prefix, (conversation() for _ in range(count)), dtype=np.uint16, masks=True)


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict[str, str]:
    """Two chat stores of different sizes and lengths, a tiny one, and a GPT (not chat) store."""
    directory = tmp_path_factory.mktemp("sft_build")
    gpt = build_store(directory / "gpt", [np.array([5, 6, 7, 2])] * 20, dtype=np.uint16)
    return {
        "a": _write_chat(str(directory / "a"), 400, 1, 90),
        "b": _write_chat(str(directory / "b"), 300, 2, 20),
        "tiny": _write_chat(str(directory / "tiny"), 12, 3, 30),
        "gpt": gpt,
    }


def _pieces(dataset: SFTDataset) -> dict[int, int]:
    """Tokens served of each conversation over one epoch of ``dataset``'s rows."""
    served: dict[int, int] = {}
    for bin_ in range(dataset.rows):
        for p in range(int(dataset.bin_starts[bin_]), int(dataset.bin_starts[bin_ + 1])):
            document = int(dataset.piece_document[p])
            served[document] = served.get(document, 0) + int(dataset.piece_length[p])
    return served


def test_split_three_ways_covers_every_conversation_once(stores):
    store = tp.IndexedDataset(stores["a"])
    splits = tp.build_datasets([stores["a"]], sizes=(None, None, None), config=CONFIG, seed=5, split="80,15,5")
    ranges = split_document_ranges("80,15,5", len(store))
    seen: dict[int, int] = {}
    for dataset, bounds in zip(splits, ranges):
        assert isinstance(dataset, SFTDataset) and len(dataset) == dataset.rows  # sizes=None: one epoch
        assert bounds is not None
        served = _pieces(dataset)
        assert set(served) == set(range(*bounds))  # the split's conversations and no other
        assert not set(served) & set(seen)
        seen.update(served)
    assert sorted(seen) == list(range(len(store)))  # every conversation exactly once, every token served
    assert [seen[d] for d in range(len(store))] == store.sequence_lengths.tolist()


def test_blend_takes_rows_by_weight_from_the_right_store(stores):
    train, valid, test = tp.build_datasets(
        ["0.3", stores["a"], "0.7", stores["b"]], sizes=(1000, 50, 0), config=CONFIG, seed=9, split="90,10,0"
    )
    assert test is None and isinstance(train, BlendedDataset) and isinstance(valid, BlendedDataset)
    taken = train.samples_per_dataset()
    assert taken.tolist() == [300, 700]
    assert [len(child) for child in train.datasets] == [300, 700]  # each child sized to what the blend takes
    stores_of = [tp.IndexedDataset(stores[name]) for name in ("a", "b")]
    for idx in (0, 1, 2, 500, 999):
        sample = train[idx]
        dataset, k = train.locate(idx)
        child = train.datasets[dataset]
        assert sample["dataset_id"] == dataset
        np.testing.assert_array_equal(sample["tokens"], child[k]["tokens"])
        bin_ = int(child.order[k])
        first = int(child.bin_starts[bin_])
        document, offset = int(child.piece_document[first]), int(child.piece_offset[first])
        expected = stores_of[dataset].get(document, offset, int(child.piece_length[first]))
        np.testing.assert_array_equal(sample["tokens"][: len(expected)], expected)
    # the valid blend draws on the valid conversations only
    for child in valid.datasets:
        assert int(child.piece_document.min()) >= split_document_ranges("90,10,0", len(child.store))[1][0]


def test_small_child_serves_epochs_in_new_orders(stores, caplog):
    with caplog.at_level(logging.WARNING):
        train, _, _ = tp.build_datasets(
            ["0.5", stores["a"], "0.5", stores["tiny"]], sizes=(400, 0, 0), config=CONFIG, seed=3, split="1"
        )
    assert not [r for r in caplog.records if "read modulo" in r.getMessage()]
    tiny = train.datasets[1]
    rows, served = tiny.rows, len(tiny)
    assert served == 200 and rows < 10  # far more samples than one epoch holds
    epochs = [tiny.order[start : start + rows] for start in range(0, served - served % rows, rows)]
    assert len(epochs) >= 20
    for epoch in epochs:
        assert sorted(epoch.tolist()) == list(range(rows))  # every row once an epoch, none re-packed
    assert len({tuple(epoch.tolist()) for epoch in epochs}) > 1  # orders change from epoch to epoch
    np.testing.assert_array_equal(epochs[1], np.random.default_rng((3, 1)).permutation(rows))
    again, _, _ = tp.build_datasets(
        ["0.5", stores["a"], "0.5", stores["tiny"]], sizes=(400, 0, 0), config=CONFIG, seed=3, split="1"
    )
    np.testing.assert_array_equal(again.datasets[1].order, tiny.order)  # a pure function of (seed, epoch)
    row = tiny[rows]  # the first sample of epoch 1 is the row epoch 1 puts first
    np.testing.assert_array_equal(
        row["tokens"], tiny[int(np.flatnonzero(tiny.order[:rows] == epochs[1][0])[0])]["tokens"]
    )


def test_stateful_loader_resumes_exactly_over_the_blend(stores):
    import torch

    torch.set_num_threads(1)
    train, _, _ = tp.build_datasets(
        ["0.3", stores["a"], "0.7", stores["b"]], sizes=(200, 0, 0), config=CONFIG, seed=4, split="1"
    )
    widths = {child.cu_seqlens_length for child in train.datasets}
    assert len(widths) == 1  # children widened to one cu_seqlens length: their batches stack
    fields = ["tokens", "labels", "loss_mask", "cu_seqlens"]

    def loader() -> tp.StatefulLoader:
        return tp.StatefulLoader(train, tp.StreamSampler(len(train), 0, 8, 0, 1, seed=6), fields=fields)

    first = loader()
    stream = iter(first)
    next(stream), next(stream)
    state = first.state_dict()
    expected = [next(stream) for _ in range(3)]
    resumed = loader()
    resumed.load_state_dict(state)
    got = iter(resumed)
    for batch in expected:
        again = next(got)
        for name in fields:
            assert torch.equal(again[name], batch[name])


def test_refuses_a_gpt_store_and_bad_configs(stores):
    with pytest.raises(ConfigError, match=r"gpt.*not a chat store.*masks=True"):
        tp.build_datasets(
            ["0.5", stores["a"], "0.5", stores["gpt"]], sizes=(100, 0, 0), config=CONFIG, seed=1, split="1"
        )
    with pytest.raises(ConfigError, match="config"):
        tp.build_datasets([stores["a"]], sizes=(None, None, None), config={"seq_length": SEQ}, seed=1)
    with pytest.raises(ConfigError, match="packing"):
        SFTConfig(seq_length=SEQ, packing="greedy")
    with pytest.raises(ConfigError, match="label_pad"):
        SFTConfig(seq_length=SEQ, label_pad=0)
    store = tp.IndexedDataset(stores["tiny"])
    with pytest.raises(ConfigError, match="pass a seed"):
        SFTDataset(store, SEQ, num_samples=1000)
    with pytest.raises(ConfigError, match="num_samples"):
        SFTDataset(store, SEQ, seed=0, num_samples=-1)
    assert len(SFTDataset(store, SEQ, seed=0, num_samples=2)) == 2  # fewer samples: the first rows of epoch 0


def test_unweighted_blend_takes_one_epoch_of_every_store(stores):
    train, _, _ = tp.build_datasets([stores["a"], stores["b"]], sizes=(None, 0, 0), config=CONFIG, seed=2, split="1")
    rows = [child.rows for child in train.datasets]
    assert [len(child) for child in train.datasets] == rows  # one epoch each, no repeat
    assert train.samples_per_dataset().tolist() == rows and len(train) == sum(rows)
    batch = train.get_batch(np.arange(len(train)))
    assert batch["tokens"].shape == (sum(rows), SEQ)


def test_unpacked_blend_batches_pad_every_child_to_one_width(stores):
    """packing="none" children pad to their own longest sample; the blend pads them all to the widest."""
    config = SFTConfig(seq_length=SEQ, packing="none", too_long="truncate", shape="hf")
    train, _, _ = tp.build_datasets(["0.5", stores["a"], "0.5", stores["b"]], sizes=(200, 0, 0), config=config, seed=3)
    assert isinstance(train, BlendedDataset)
    ids = np.arange(0, 200, 7)
    batch = train.get_batch(ids)
    width = max(len(train[int(i)]["input_ids"]) for i in ids)
    assert batch["input_ids"].shape == (len(ids), width) and batch["dataset_id"].tolist() == [
        train.locate(int(i))[0] for i in ids
    ]
    assert set(batch["dataset_id"].tolist()) == {0, 1}
    for row, idx in enumerate(ids.tolist()):
        sample = train[idx]
        n = len(sample["input_ids"])
        for name in ("input_ids", "labels", "position_ids"):
            np.testing.assert_array_equal(batch[name][row, :n], sample[name])
        assert (batch["labels"][row, n:] == -100).all() and (batch["position_ids"][row, n:] == 0).all()
        assert list(sample) == ["input_ids", "labels", "position_ids", "dataset_id"]
    child = train.datasets[0]
    with pytest.raises(ConfigError, match="narrower"):
        child.get_batch([0, 1], width=child.batch_width([0, 1]) - 1)
