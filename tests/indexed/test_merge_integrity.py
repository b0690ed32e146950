"""merge checks every input's checksums as it streams: a corrupt input is refused by name, nothing published."""

from __future__ import annotations

import os

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import Doc, build_store
from tokenport.indexed.commit import store_paths

TOKENIZER = {"eod_id": 999, "vocab_size": 1000}


def _write(prefix, seed: int, *, documents: int = 300, masks: bool = False, block: int = 4096) -> None:
    rng = np.random.default_rng(seed)
    chat = {"format": "messages", "policy": "assistant_only", "template": "sha256:0"} if masks else None
    written = []
    for _ in range(documents):
        n = int(rng.integers(1, 40))
        mask = (rng.random(n) < 0.5).astype(np.uint8) if masks else None
        written.append(Doc(rng.integers(0, 999, n), mask=mask))
    build_store(
        prefix, written, dtype=np.uint16, tokenizer=TOKENIZER, masks=masks, chat=chat, checksum_block_size=block
    )


def _patch(path, offset: int, value: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(value)


def _published(prefix) -> list[str]:
    return [p for p in store_paths(os.fspath(prefix)) if os.path.exists(p)]


@pytest.mark.parametrize("where", ["first block", "last block"])
def test_merge_refuses_an_input_whose_tokens_fail_their_checksums(tmp_path, where):
    _write(tmp_path / "a", 1)
    _write(tmp_path / "b", 2)
    size = os.path.getsize(tmp_path / "b.bin")
    offset = 10 if where == "first block" else size - 3
    with open(tmp_path / "b.bin", "rb") as f:
        f.seek(offset)
        old = f.read(1)[0]
    _patch(tmp_path / "b.bin", offset, bytes([old ^ 0x01]))  # another id still in the vocabulary's range
    refused = rf"merge: the input {tmp_path / 'b'} is corrupt .*fails its checksum"
    with pytest.raises(tp.CorruptStoreError, match=refused):
        tp.merge(tmp_path / "out", [tmp_path / "a", tmp_path / "b"])
    assert _published(tmp_path / "out") == []
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".out")]


def test_merge_names_an_input_whose_damaged_token_the_writer_refuses_first(tmp_path):
    _write(tmp_path / "a", 3, block=1 << 20)  # one block: its checksum completes only at the end
    _patch(tmp_path / "a.bin", 4, b"\xff\xff")  # id 65535, past the tokenizer's vocabulary
    with pytest.raises(tp.CorruptStoreError, match=rf"the input {tmp_path / 'a'} is corrupt"):
        tp.merge(tmp_path / "out", [tmp_path / "a"])
    assert _published(tmp_path / "out") == []


@pytest.mark.parametrize("value", [b"\x01\x00", b"\x02"])
def test_merge_refuses_a_chat_input_whose_masks_fail_their_checksums(tmp_path, value):
    _write(tmp_path / "a", 4, masks=True)
    _write(tmp_path / "b", 5, masks=True)
    masks = tp.IndexedDataset(tmp_path / "a").masks
    flip = 1 - int(masks[0][0])
    _patch(tmp_path / "a.mask.bin", 0, bytes([flip]) if value == b"\x01\x00" else value)
    with pytest.raises(tp.CorruptStoreError, match=rf"the input {tmp_path / 'a'} is corrupt"):
        tp.merge(tmp_path / "out", [tmp_path / "b", tmp_path / "a"])
    assert _published(tmp_path / "out") == []


def test_merge_refuses_an_input_whose_index_fails_its_checksum_before_writing(tmp_path):
    _write(tmp_path / "a", 6)
    _write(tmp_path / "b", 7)
    store = tp.IndexedDataset(tmp_path / "b")
    lengths, pointers = store.sequence_lengths.copy(), store.sequence_pointers.copy()
    store.close()
    header = os.path.getsize(tmp_path / "b.idx") - (len(lengths) * 12 + (len(lengths) + 1) * 8)
    # swap the first two lengths and move the second pointer with them: the index stays well-formed
    k = 1 + int(np.argmax(lengths[1:] != lengths[0]))
    lengths[[0, k]] = lengths[[k, 0]]
    pointers[1 : k + 1] = pointers[0] + np.cumsum(lengths[:k]) * 2
    _patch(tmp_path / "b.idx", header, lengths.astype(np.int32).tobytes() + pointers.astype(np.int64).tobytes())
    assert tp.IndexedDataset(tmp_path / "b").document_indices.tolist()  # still a well-formed index
    with pytest.raises(tp.CorruptStoreError, match=rf"the input {tmp_path / 'b'} is corrupt .*\.idx: checksum"):
        tp.merge(tmp_path / "out", [tmp_path / "a", tmp_path / "b"])
    assert _published(tmp_path / "out") == []


def test_merge_still_copies_intact_inputs_and_stores_without_a_manifest(tmp_path):
    _write(tmp_path / "a", 8)
    _write(tmp_path / "b", 9, block=1 << 20)
    _write(tmp_path / "plain", 10)
    os.unlink(tmp_path / "plain.json")  # a Megatron store: nothing to check its bytes against
    tp.merge(tmp_path / "out", [tmp_path / "a", tmp_path / "b", tmp_path / "plain"])
    merged = tp.IndexedDataset(tmp_path / "out")
    parts = [tp.IndexedDataset(tmp_path / name) for name in ("a", "b", "plain")]
    assert len(merged) == sum(len(p) for p in parts)
    expected = [s.tolist() for p in parts for s in p[0 : len(p)]]
    assert [merged[i].tolist() for i in range(len(merged))] == expected
    assert tp.verify(tmp_path / "out").checksums.startswith("verified")


def test_merge_without_checksums_skips_the_check(tmp_path):
    _write(tmp_path / "a", 11)
    _patch(tmp_path / "a.bin", 10, b"\x05")
    tp.merge(tmp_path / "out", [tmp_path / "a"], checksums=False)
    assert tp.verify(tmp_path / "out").checksums.startswith("verified")
    with pytest.raises(tp.ConfigError, match="checksums="):
        tp.merge(tmp_path / "again", [tmp_path / "a"], checksums="no")
