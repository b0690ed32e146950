"""SFTDataset: conversations of a real chat store (tokens + loss masks), exact with TRL's bfd packing."""

from __future__ import annotations

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import Doc, build_store
from tokenport.errors import ConfigError
from tokenport.samples.sft import SFTDataset

SEQ = 96


def _conversations(n: int, seed: int, long_prompt_every: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """Random multi-turn conversations: (tokens, mask) with prompt turns 0 and answer turns 1."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        if k % 97 == 5:
            out.append((np.zeros(0, np.int64), np.zeros(0, np.uint8)))  # an empty conversation
            continue
        tokens, mask = [], []
        for turn in range(int(rng.integers(1, 4))):
            prompt = int(rng.integers(1, 12))
            if long_prompt_every and k % long_prompt_every == 0 and turn == 0:
                prompt = SEQ + 10  # no trained token fits in SEQ
            answer = int(rng.integers(1, 70 if k % 7 == 0 else 30))
            tokens.append(rng.integers(1, 30000, prompt + answer))
            mask.append(np.r_[np.zeros(prompt, np.uint8), np.ones(answer, np.uint8)])
        out.append((np.concatenate(tokens), np.concatenate(mask)))
    return out


def _write(prefix: str, conversations) -> tp.IndexedDataset:
    """A chat store: PREFIX (uint16 tokens) and its PREFIX.mask (uint8 masks), one sequence each."""
    documents = (Doc(t, mask=m) for t, m in conversations)
    return tp.IndexedDataset(build_store(prefix, documents, dtype=np.uint16, masks=True))


@pytest.fixture(scope="module")
def chats(tmp_path_factory):
    """1300 conversations (some longer than SEQ, a few empty) and their chat store."""
    conversations = _conversations(1300, 7)
    return conversations, _write(str(tmp_path_factory.mktemp("sft") / "chat"), conversations)


def _trl_packed(conversations, strategy: str, batch_size: int = 1000):
    import datasets
    from trl.data_utils import pack_dataset

    rows = {
        "input_ids": [t.tolist() for t, _ in conversations],
        "assistant_masks": [m.tolist() for _, m in conversations],
    }
    packed = pack_dataset(
        datasets.Dataset.from_dict(rows), SEQ, strategy=strategy, map_kwargs={"batch_size": batch_size}
    )
    return packed[:]


@pytest.mark.parametrize(("too_long", "strategy"), [("truncate", "bfd"), ("split", "bfd_split")])
@pytest.mark.parametrize("window", [1000, 300])
def test_rows_equal_trl_pack_dataset(chats, too_long, strategy, window):
    conversations, store = chats
    trl = _trl_packed(conversations, strategy, batch_size=window)
    ds = SFTDataset(store, SEQ, too_long=too_long, window=window)
    assert ds.counts.dropped == 0 and len(ds) == len(trl["input_ids"])
    batch = ds.get_batch(np.arange(len(ds)))
    for r in range(len(ds)):
        total = len(trl["input_ids"][r])
        assert batch["tokens"][r, :total].tolist() == trl["input_ids"][r]
        assert (batch["tokens"][r, total:] == 0).all()
        seq_lengths = np.diff(batch["cu_seqlens"][r][: batch["num_documents"][r] + 1])
        assert seq_lengths.tolist() == trl["seq_lengths"][r]
        mask = np.asarray(trl["assistant_masks"][r])
        starts = np.cumsum(seq_lengths) - seq_lengths
        mask[starts] = 0  # a conversation's first token is never a target
        assert batch["loss_mask"][r, : total - 1].tolist() == mask[1:].tolist()
        positions = np.concatenate([np.arange(n) for n in seq_lengths])
        assert batch["position_ids"][r, :total].tolist() == positions.tolist()


def test_hf_labels_equal_trl_padding_free_collator(chats):
    import torch
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    torch.set_num_threads(1)
    conversations, store = chats
    trl = _trl_packed(conversations, "bfd")
    ds = SFTDataset(store, SEQ, window=1000, shape="hf")
    collate = DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True)
    for r in range(0, len(ds), 37):
        ids, mask = trl["input_ids"][r], trl["assistant_masks"][r]
        labels = [t if m else -100 for t, m in zip(ids, mask)]
        ref = collate([{"input_ids": ids, "labels": labels, "seq_lengths": trl["seq_lengths"][r]}])
        sample = ds[r]
        total = len(ids)
        assert sample["input_ids"][:total].tolist() == ref["input_ids"][0].tolist()
        assert sample["labels"][:total].tolist() == ref["labels"][0].tolist()
        assert sample["position_ids"][:total].tolist() == ref["position_ids"][0].tolist()
        assert (sample["labels"][total:] == -100).all()


def test_megatron_labels_are_hf_labels_shifted_and_never_cross(chats):
    _, store = chats
    hf = SFTDataset(store, SEQ, shape="hf", seed=3).get_batch(np.arange(40))
    mg = SFTDataset(store, SEQ, seed=3).get_batch(np.arange(40))
    assert set(mg) == set(SFTDataset(store, SEQ).fields) and set(hf) == {"input_ids", "labels", "position_ids"}
    assert (mg["tokens"] == hf["input_ids"]).all() and (mg["position_ids"] == hf["position_ids"]).all()
    assert (mg["labels"][:, :-1] == hf["labels"][:, 1:]).all() and (mg["labels"][:, -1] == -100).all()
    assert ((mg["labels"] != -100) == (mg["loss_mask"] == 1)).all()
    targets = mg["loss_mask"] == 1
    next_pos = np.pad(mg["position_ids"][:, 1:], ((0, 0), (0, 1)))
    assert (next_pos[targets] == mg["position_ids"][targets] + 1).all()  # a target is in the same conversation
    assert (mg["labels"][:, :-1][targets[:, :-1]] == mg["tokens"][:, 1:][targets[:, :-1]]).all()


def test_truncate_keeps_the_prompt_and_drops_untrainable(tmp_path):
    conversations = _conversations(200, 9, long_prompt_every=10)
    store = _write(str(tmp_path / "c"), conversations)
    lengths = np.array([len(t) for t, _ in conversations])
    firsts = np.array([int(np.argmax(m)) if m.any() else len(m) for _, m in conversations])
    ds = SFTDataset(store, SEQ, too_long="truncate")
    over = lengths > SEQ
    c = ds.counts
    assert c.conversations == 200 and c.empty == int((lengths == 0).sum())
    assert c.dropped == int((over & (firsts >= SEQ)).sum()) > 0
    assert c.truncated == int((over & (firsts < SEQ)).sum()) > 0
    assert c.kept == int(((lengths > 0) & ~over).sum())
    assert c.tokens == int(ds.piece_length.sum()) and c.tokens + c.tokens_lost == lengths.sum()
    kept = set(ds.piece_document.tolist())
    assert all((k in kept) == (lengths[k] > 0 and (lengths[k] <= SEQ or firsts[k] < SEQ)) for k in range(200))
    truncated = ds.piece_document[ds.piece_length == SEQ]
    assert all(ds.piece_offset[ds.piece_document == k][0] == 0 for k in truncated)  # kept from the start
    drop = SFTDataset(store, SEQ, too_long="drop").counts
    assert drop.dropped == int(over.sum()) and drop.truncated == 0


@pytest.mark.parametrize("shape", ["megatron", "hf"])
@pytest.mark.parametrize("packing", ["bfd", "none"])
def test_stores_read_without_mmap_give_the_same_batches(chats, shape, packing):
    _, store = chats
    mapped = SFTDataset(store, SEQ, packing=packing, too_long="split", shape=shape, seed=4)
    pread = SFTDataset(
        tp.IndexedDataset(store.prefix, "pread"), SEQ, packing=packing, too_long="split", shape=shape, seed=4
    )
    ids = np.random.default_rng(0).permutation(len(mapped))[:50]
    a, b = mapped.get_batch(ids), pread.get_batch(ids)
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) and a[k].dtype == b[k].dtype for k in a)
    if packing == "bfd":
        assert all(np.array_equal(mapped[int(ids[0])][k], a[k][0]) for k in a)


def test_split_keeps_every_token(chats):
    conversations, store = chats
    ds = SFTDataset(store, SEQ, too_long="split", seed=1)
    assert ds.counts.tokens_lost == 0 and ds.counts.split == sum(len(t) > SEQ for t, _ in conversations) > 0
    batch = ds.get_batch(np.arange(len(ds)))
    real = batch["tokens"][np.arange(SEQ)[None, :] < batch["cu_seqlens"][:, -1:]]
    assert np.sort(real).tolist() == np.sort(np.concatenate([t for t, _ in conversations])).tolist()
    assert (ds.piece_length <= SEQ).all() and batch["max_seqlen"].max() == SEQ


def test_unpacked_pads_to_the_batch_and_length_grouped_loader(chats):
    conversations, store = chats
    ds = SFTDataset(store, SEQ, packing="none", too_long="drop")
    lengths = np.array([len(t) for t, _ in conversations])
    expected = lengths[(lengths > 0) & (lengths <= SEQ)]
    assert ds.lengths.tolist() == expected.tolist()
    batch = ds.get_batch([0, 1, 2])
    assert batch["tokens"].shape == (3, int(expected[:3].max()))
    assert batch["cu_seqlens"][:, 1].tolist() == expected[:3].tolist()
    assert len(ds[4]["tokens"]) == expected[4]

    import torch

    torch.set_num_threads(1)
    sampler = tp.StreamSampler(len(ds), 0, 8, 0, 1, seed=2, order="length_grouped", lengths=ds.lengths, group_size=8)
    loader = tp.StatefulLoader(ds, sampler, fields=["tokens", "labels", "loss_mask"])
    first = next(iter(loader))
    in_worker = tp.StatefulLoader(
        ds,
        tp.StreamSampler(len(ds), 0, 8, 0, 1, seed=2, order="length_grouped", lengths=ds.lengths, group_size=8),
        num_workers=1,
    )
    assert torch.equal(next(iter(in_worker))["tokens"], first["tokens"])
    assert set(first) == {"tokens", "labels", "loss_mask"} and isinstance(first["tokens"], torch.Tensor)
    assert first["tokens"].shape == (8, int(ds.lengths.max()))  # the longest sample leads, padded to it
    state = loader.state_dict()
    second = next(iter(loader))
    resumed = tp.StatefulLoader(
        ds,
        tp.StreamSampler(len(ds), 0, 8, 0, 1, seed=2, order="length_grouped", lengths=ds.lengths, group_size=8),
        fields=["tokens", "labels", "loss_mask"],
    )
    resumed.load_state_dict(state)
    again = next(iter(resumed))
    assert torch.equal(again["tokens"], second["tokens"])


def test_refuses_bad_options_and_mismatched_masks(chats, tmp_path):
    _, store = chats
    with pytest.raises(ConfigError, match="packing"):
        SFTDataset(store, SEQ, packing="greedy")
    with pytest.raises(ConfigError, match="too_long"):
        SFTDataset(store, SEQ, too_long="wrap")
    with pytest.raises(ConfigError, match="label_pad"):
        SFTDataset(store, SEQ, label_pad=5)
    with pytest.raises(ConfigError, match="cu_seqlens_length"):
        SFTDataset(store, SEQ, cu_seqlens_length=1)
    with pytest.raises(IndexError):
        SFTDataset(store, SEQ)[10**6]
    prefix = str(tmp_path / "bad")
    with (
        tp.IndexedDatasetWriter(prefix, dtype=np.uint16) as t,
        tp.IndexedDatasetWriter(prefix + ".mask", dtype=np.uint8) as m,
    ):
        t.add_document([1, 2, 3])
        m.add_document([0, 1])
    with pytest.raises(ConfigError, match="not a chat store"):  # two plain stores: no masks in the manifest
        SFTDataset(tp.IndexedDataset(prefix), SEQ)
