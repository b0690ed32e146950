"""Chat stores: a token store plus its loss-mask store (PREFIX.mask.bin/.idx), written, read,
verified, inspected and merged together; Megatron still reads both as plain stores."""

from __future__ import annotations

import json
import os
import shutil
import warnings

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import Doc, build_store
from tokenport.cli import main
from tokenport.indexed import resolve_stores
from tokenport.indexed.inspect import summarize

CHAT = {"format": "messages", "policy": "assistant_only", "template": "sha256:0f1e"}


def _conversations(seed: int, count: int = 40):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        n = int(rng.integers(1, 50))
        yield rng.integers(0, 5000, n), (rng.random(n) < 0.4).astype(np.uint8)


def _write_chat(prefix, seed: int, chat=CHAT, count: int = 40):
    documents = list(_conversations(seed, count))
    build_store(prefix, [Doc(tokens, mask=mask) for tokens, mask in documents], dtype=np.uint16, masks=True, chat=chat)
    return documents


def _write_plain(prefix, seed: int):
    build_store(prefix, (tokens for tokens, _ in _conversations(seed)), dtype=np.uint16)


def test_chat_store_round_trip_manifest_and_verify(tmp_path):
    documents = _write_chat(tmp_path / "c", 1)
    assert sorted(os.listdir(tmp_path)) == ["c.bin", "c.idx", "c.json", "c.mask.bin", "c.mask.idx"]
    store = tp.IndexedDataset(tmp_path / "c")
    masks = store.masks
    assert masks is not None and masks.dtype == np.uint8 and len(masks) == len(store) == len(documents)
    for i, (tokens, mask) in enumerate(documents):
        assert store[i].tolist() == tokens.tolist()
        assert masks[i].tolist() == mask.tolist()
    manifest = json.loads((tmp_path / "c.json").read_text())
    assert manifest["chat"] == CHAT and manifest["masks"]["algorithm"] == manifest["checksums"]["algorithm"]
    report = tp.verify(tmp_path / "c")
    assert report.masks.startswith("verified") and "masks verified" in report.render()
    # a plain store's manifest has neither key, as before chat stores existed
    _write_plain(tmp_path / "p", 1)
    assert not {"chat", "masks"} & set(json.loads((tmp_path / "p.json").read_text()))
    assert tp.IndexedDataset(tmp_path / "p").masks is None and tp.verify(tmp_path / "p").masks == ""


def test_megatron_reads_the_tokens_and_the_masks_as_plain_stores(tmp_path):
    pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        megatron = pytest.importorskip("megatron.core.datasets.indexed_dataset")
    documents = _write_chat(tmp_path / "c", 2)
    tokens = megatron.IndexedDataset(str(tmp_path / "c"))
    masks = megatron.IndexedDataset(str(tmp_path / "c.mask"))
    assert len(tokens) == len(masks) == len(documents)
    assert np.array_equal(tokens.sequence_lengths, masks.sequence_lengths)
    for i, (ids, mask) in enumerate(documents):
        assert tokens[i].tolist() == ids.tolist() and masks[i].tolist() == mask.tolist()
        assert masks[i].dtype == np.uint8


def test_add_documents_with_flat_masks_and_a_list_of_masks(tmp_path):
    documents = list(_conversations(3, 10))
    flat_tokens = np.concatenate([t for t, _ in documents])
    flat_masks = np.concatenate([m for _, m in documents]).astype(bool)
    with tp.IndexedDatasetWriter(tmp_path / "flat", dtype=np.uint16, masks=True) as writer:
        writer.add_documents(flat_tokens, [len(t) for t, _ in documents], masks=flat_masks)
    with tp.IndexedDatasetWriter(tmp_path / "listed", dtype=np.uint16, masks=True) as writer:
        writer.add_documents([t for t, _ in documents], masks=[m for _, m in documents])
    for name in ("flat", "listed"):
        masks = tp.IndexedDataset(tmp_path / name).masks
        assert [masks[i].tolist() for i in range(len(masks))] == [m.tolist() for _, m in documents]


@pytest.mark.parametrize(
    ("mask", "message"),
    [
        ([1, 0], r"document 1: the mask has 2 values but the document has 3 tokens"),
        ([0, 2, 1], r"document 1: mask value 2 at token 1 is not 0 or 1"),
        ([0, -1, 1], r"document 1: mask value -1 at token 1 is not 0 or 1"),
        ([0.0, 1.0, 1.0], r"document 1: mask values must be 0/1 integers or booleans, got dtype float64"),
        (None, r"document 1: a chat store \(masks=True\) needs a loss mask with every document"),
    ],
)
def test_bad_masks_are_refused_naming_the_document_and_nothing_is_half_added(tmp_path, mask, message):
    writer = tp.IndexedDatasetWriter(tmp_path / "c", dtype=np.uint16, masks=True)
    writer.add_document([1, 2], mask=[0, 1])
    with pytest.raises(tp.ConfigError, match=message):
        writer.add_document([3, 4, 5], mask=mask)
    writer.add_document([6], mask=[1])
    writer.finalize()
    store = tp.IndexedDataset(tmp_path / "c")
    assert [store[i].tolist() for i in range(len(store))] == [[1, 2], [6]]
    assert [store.masks[i].tolist() for i in range(2)] == [[0, 1], [1]]
    tp.verify(tmp_path / "c")


def test_writer_arguments_are_checked(tmp_path):
    with pytest.raises(tp.ConfigError, match="a mask was given but the writer has masks=False"):
        with tp.IndexedDatasetWriter(tmp_path / "p", dtype=np.uint16) as writer:
            writer.add_document([1], mask=[1])
    with pytest.raises(tp.ConfigError, match="chat=.* with masks=True"):
        tp.IndexedDatasetWriter(tmp_path / "p", dtype=np.uint16, chat=CHAT)
    with pytest.raises(tp.ConfigError, match="masks='yes' is invalid"):
        tp.IndexedDatasetWriter(tmp_path / "p", dtype=np.uint16, masks="yes")  # type: ignore[arg-type]
    assert not [name for name in os.listdir(tmp_path) if not name.startswith(".")]


def test_verify_catches_corrupt_foreign_and_missing_masks(tmp_path):
    _write_chat(tmp_path / "c", 4)
    _write_chat(tmp_path / "other", 5)
    pristine = tmp_path / "pristine"
    pristine.mkdir()
    for name in os.listdir(tmp_path):
        if name.startswith("c."):
            shutil.copy(tmp_path / name, pristine / name)

    def restore():
        for name in os.listdir(pristine):
            shutil.copy(pristine / name, tmp_path / name)

    data = bytearray((tmp_path / "c.mask.bin").read_bytes())
    data[7] ^= 1  # still 0 or 1: only the checksum can tell
    (tmp_path / "c.mask.bin").write_bytes(bytes(data))
    with pytest.raises(tp.CorruptStoreError, match=r"c\.mask\.bin: block 0 .* fails its checksum"):
        tp.verify(tmp_path / "c")
    data[7] = 2
    (tmp_path / "c.mask.bin").write_bytes(bytes(data))
    with pytest.raises(tp.CorruptStoreError, match=r"c\.mask\.bin: holds a byte above 1"):
        tp.verify(tmp_path / "c")
    restore()
    for suffix in (".mask.bin", ".mask.idx"):  # another chat store's masks: other lengths
        shutil.copy(tmp_path / f"other{suffix}", tmp_path / f"c{suffix}")
    with pytest.raises(tp.CorruptStoreError, match=r"c\.mask\.idx: its sequence lengths or documents differ"):
        tp.verify(tmp_path / "c")
    restore()
    os.unlink(tmp_path / "c.mask.idx")
    with pytest.raises(tp.CorruptStoreError, match=r"c\.json: lists a loss-mask store but .*c\.mask\.bin/\.idx cannot"):
        tp.IndexedDataset(tmp_path / "c").masks  # noqa: B018
    restore()
    assert main(["verify", str(tmp_path / "c")]) == 0


def test_plain_store_over_a_chat_store_removes_its_masks_and_back(tmp_path):
    _write_chat(tmp_path / "s", 6)
    _write_plain(tmp_path / "s", 6)
    assert sorted(os.listdir(tmp_path)) == ["s.bin", "s.idx", "s.json"]
    assert tp.IndexedDataset(tmp_path / "s").masks is None
    _write_chat(tmp_path / "s", 7)
    assert tp.IndexedDataset(tmp_path / "s").masks is not None
    tp.verify(tmp_path / "s")


def test_a_plain_store_leaves_an_unrelated_store_named_like_masks_alone(tmp_path):
    """PREFIX.mask may be a store of its own: only masks the old manifest lists are removed."""
    _write_plain(tmp_path / "s.mask", 1)
    _write_plain(tmp_path / "s", 2)
    _write_plain(tmp_path / "s", 3)
    assert {"s.mask.bin", "s.mask.idx", "s.mask.json"} <= set(os.listdir(tmp_path))
    tp.verify(tmp_path / "s.mask")


def test_a_glob_of_chat_stores_names_each_store_once(tmp_path):
    """`tokenport merge out stores/*` passes a chat store's mask files too: they belong to it."""
    _write_chat(tmp_path / "a", 13)
    _write_chat(tmp_path / "b", 14)
    files = sorted(str(tmp_path / name) for name in os.listdir(tmp_path))
    assert len(files) == 10
    assert resolve_stores(files) == [str(tmp_path / "a"), str(tmp_path / "b")]
    assert main(["merge", "-o", str(tmp_path / "out" / "ab"), *files]) == 0
    assert tp.verify(tmp_path / "out" / "ab").masks.startswith("verified")
    # a store named like masks, with no store beside it, is a store of its own
    assert resolve_stores([str(tmp_path / "a.mask.bin")]) == [str(tmp_path / "a.mask")]


def test_inspect_shows_mask_coverage(tmp_path, capsys):
    documents = _write_chat(tmp_path / "c", 8)
    expected = sum(int(m.sum()) for _, m in documents) / sum(len(m) for _, m in documents)
    summary = summarize(tmp_path / "c")
    assert summary.mask_coverage == pytest.approx(expected) and summary.chat == CHAT
    assert main(["inspect", str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out
    assert f"masks      {expected:.1%} of tokens trained" in out and "policy assistant_only" in out
    _write_plain(tmp_path / "p", 8)
    assert summarize(tmp_path / "p").mask_coverage is None
    assert "tokens trained" not in summarize(tmp_path / "p").render()


def test_merge_carries_masks_and_refuses_mixed_or_different_chat_stores(tmp_path):
    first = _write_chat(tmp_path / "a", 9)
    second = _write_chat(tmp_path / "b", 10)
    tp.merge(tmp_path / "ab", [tmp_path / "a", tmp_path / "b"])
    merged = tp.IndexedDataset(tmp_path / "ab")
    assert merged.manifest.chat == CHAT
    assert [merged.masks[i].tolist() for i in range(len(merged))] == [m.tolist() for _, m in first + second]
    assert tp.verify(tmp_path / "ab").masks.startswith("verified")
    _write_plain(tmp_path / "p", 11)
    with pytest.raises(tp.ConfigError, match=r"are chat stores \(with loss masks\) but .*p are not"):
        tp.merge(tmp_path / "mixed", [tmp_path / "a", tmp_path / "p"])
    _write_chat(tmp_path / "d", 12, chat={**CHAT, "policy": "last_assistant"})
    with pytest.raises(tp.ConfigError, match="different chat settings"):
        tp.merge(tmp_path / "different", [tmp_path / "a", tmp_path / "d"])
