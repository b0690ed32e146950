"""The token store format: round trips, dtype rules, readers' modes, merge, verify."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import Doc, build_store
from tokenport.indexed import dtype_for_vocab
from tokenport.storage import handles


def _random_store(path, rng, dtype=np.uint16, documents=200, max_sequences=3, max_length=80):
    """Write a store of random multi-sequence documents; return the documents as written."""
    written = []
    high = min(np.iinfo(dtype).max, 2**31 - 1)
    for _ in range(documents):
        lengths = rng.integers(0, max_length, int(rng.integers(1, max_sequences + 1)))
        written.append((rng.integers(0, high, int(lengths.sum()), dtype=np.int64), lengths))
    build_store(path, [Doc(tokens, lengths=lengths) for tokens, lengths in written], dtype=dtype)
    return written


def _sequences(written):
    for tokens, lengths in written:
        yield from np.split(tokens, np.cumsum(lengths)[:-1])


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.int32, np.int64])
@pytest.mark.parametrize("mode", ["mmap", "pread"])
def test_round_trip(tmp_path, dtype, mode):
    written = _random_store(tmp_path / "s", np.random.default_rng(1), dtype)
    expected = list(_sequences(written))
    ds = tp.IndexedDataset(tmp_path / "s", mode=mode)
    assert len(ds) == len(expected)
    assert ds.dtype == np.dtype(dtype)
    assert ds.num_documents == len(written)
    for i, sequence in enumerate(expected):
        assert np.array_equal(ds[i], sequence)
    assert ds.num_tokens == sum(len(s) for s in expected)
    assert ds.document_indices[0] == 0 and ds.document_indices[-1] == len(ds)
    boundaries = np.cumsum([0] + [len(lengths) for _, lengths in written])
    assert np.array_equal(ds.document_indices, boundaries)


def test_views_slices_get_and_get_many(tmp_path):
    written = _random_store(tmp_path / "s", np.random.default_rng(2))
    expected = list(_sequences(written))
    ds = tp.IndexedDataset(str(tmp_path / "s") + ".bin")
    view = ds[3]
    assert not view.flags.owndata and not view.flags.writeable  # zero-copy and read-only
    assert [a.tolist() for a in ds[2:7]] == [s.tolist() for s in expected[2:7]]
    longest = int(np.argmax(ds.sequence_lengths))
    assert np.array_equal(ds.get(longest, 5, 10), expected[longest][5:15])
    assert np.array_equal(ds.get(longest, 7), expected[longest][7:])
    with pytest.raises(IndexError):
        ds.get(longest, 0, len(expected[longest]) + 1)
    ids = np.random.default_rng(3).integers(0, len(ds), 500)
    tokens, offsets = ds.get_many(ids)
    for k, i in enumerate(ids):
        assert np.array_equal(tokens[offsets[k] : offsets[k + 1]], expected[i])
    long_ids = np.argsort(ds.sequence_lengths)[-20:]
    tokens, offsets = ds.get_many(long_ids)
    assert np.array_equal(tokens, np.concatenate([expected[i] for i in long_ids]))
    assert ds.get_many([])[0].size == 0


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.int32, np.int64])
def test_get_many_mapped_and_pread_agree(tmp_path, dtype):
    """The numba gather (mmap) returns what the per-call loop and the pread path return: random,
    repeated, negative, sequential and empty sequences; an id out of range raises IndexError."""
    written = _random_store(tmp_path / "s", np.random.default_rng(4), dtype, documents=300)
    expected = list(_sequences(written))
    mapped, pread = tp.IndexedDataset(tmp_path / "s"), tp.IndexedDataset(tmp_path / "s", mode="pread")
    n = len(mapped)
    empty = [i for i, s in enumerate(expected) if len(s) == 0]
    rng = np.random.default_rng(5)
    for ids in (rng.integers(-n, n, 700), np.arange(n), np.array([3, 3, n - 1, -1, *empty[:3]]), [5]):
        tokens, offsets = mapped.get_many(ids)
        ids = np.asarray(ids)
        assert tokens.dtype == np.dtype(dtype) and offsets.dtype == np.int64 and len(offsets) == len(ids) + 1
        assert np.array_equal(tokens, np.concatenate([expected[i] for i in ids]))
        assert np.array_equal(offsets, np.cumsum([0] + [len(expected[i]) for i in ids]))
        other_tokens, other_offsets = pread.get_many(ids)
        assert np.array_equal(tokens, other_tokens) and np.array_equal(offsets, other_offsets)
    for bad in ([0, n], [-n - 1]):
        with pytest.raises(IndexError, match=f"id {bad[-1]} is out of range for {n} sequences"):
            mapped.get_many(bad)
    tokens, offsets = mapped.get_many(np.zeros(0, dtype=np.int64))
    assert tokens.size == 0 and offsets.tolist() == [0]


def test_dtype_rules_and_range_checks(tmp_path):
    assert dtype_for_vocab(257) == np.uint16
    assert dtype_for_vocab(65536) == np.uint16
    assert dtype_for_vocab(65537) == np.int32
    with tp.IndexedDatasetWriter(tmp_path / "w", vocab_size=50_000) as writer:
        assert writer.dtype == np.uint16
        with pytest.raises(tp.TokenizerError, match="token id 70000"):
            writer.add_document(np.array([1, 70000]))
        with pytest.raises(tp.TokenizerError, match="token id -1"):
            writer.add_documents(np.array([1, -1, 3]), [2, 1])
        with pytest.raises(tp.TokenizerError, match="token id 50000"):
            writer.add_document(np.array([50000], dtype=np.uint16))
        writer.add_document(np.array([0, 49_999]))
    assert tp.IndexedDataset(tmp_path / "w")[0].tolist() == [0, 49_999]
    with pytest.raises(tp.ConfigError, match="float16"):
        tp.IndexedDatasetWriter(tmp_path / "x", dtype=np.float16)


def test_add_documents_matches_add_document(tmp_path):
    rng = np.random.default_rng(4)
    lengths = rng.integers(0, 40, 300)
    tokens = rng.integers(0, 60000, int(lengths.sum()))
    groups = np.array([1, 2, 3, 0, 294])
    with tp.IndexedDatasetWriter(tmp_path / "one", dtype=np.uint16) as one:
        bounds = np.cumsum(np.concatenate([[0], lengths]))
        seq = 0
        for group in groups:
            one.add_document(tokens[bounds[seq] : bounds[seq + group]], lengths=lengths[seq : seq + group])
            seq += group
    with tp.IndexedDatasetWriter(tmp_path / "many", dtype=np.uint16) as many:
        many.add_documents(tokens, lengths, groups)
    for suffix in (".bin", ".idx"):
        assert (tmp_path / f"one{suffix}").read_bytes() == (tmp_path / f"many{suffix}").read_bytes()


def test_manifest_records_tokenizer_and_provenance(tmp_path):
    identity = {"kind": "byte", "name": "byte", "vocab_size": 257, "eod_id": 256}
    with tp.IndexedDatasetWriter(tmp_path / "m", tokenizer=identity, provenance={"inputs": ["a.jsonl"]}) as w:
        w.add_document(np.array([72, 105, 256]))
    manifest = tp.IndexedDataset(tmp_path / "m").manifest
    assert manifest.tokenizer == identity
    assert manifest.dtype == "uint16" and manifest.tokens == 3 and manifest.documents == 1
    assert manifest.provenance["inputs"] == ["a.jsonl"]
    assert manifest.provenance["tokenport_version"] == tp.__version__
    assert manifest.checksums.idx and len(manifest.checksums.bin_blocks) == 1


def test_empty_store(tmp_path):
    with tp.IndexedDatasetWriter(tmp_path / "e", dtype=np.int32):
        pass
    ds = tp.IndexedDataset(tmp_path / "e")
    assert len(ds) == 0 and ds.num_tokens == 0 and ds.document_indices.tolist() == [0]
    assert tp.verify(tmp_path / "e").sequences == 0


def test_merge_streams_and_keeps_documents(tmp_path):
    rng = np.random.default_rng(5)
    parts = [_random_store(tmp_path / f"p{k}", rng, documents=50 + k) for k in range(3)]
    tp.merge(tmp_path / "all", [tmp_path / f"p{k}" for k in range(3)])
    merged = tp.IndexedDataset(tmp_path / "all")
    expected = [s for part in parts for s in _sequences(part)]
    assert len(merged) == len(expected)
    assert all(np.array_equal(merged[i], s) for i, s in enumerate(expected))
    assert merged.num_documents == sum(len(p) for p in parts)
    assert tp.verify(tmp_path / "all").checksums.startswith("verified")
    with tp.IndexedDatasetWriter(tmp_path / "wide", dtype=np.int32) as w:
        w.add_document([1])
    with pytest.raises(tp.ConfigError, match="different dtypes"):
        tp.merge(tmp_path / "bad", [tmp_path / "p0", tmp_path / "wide"])
    assert not (tmp_path / "bad.idx").exists()


def test_pickle_reopens(tmp_path):
    _random_store(tmp_path / "s", np.random.default_rng(6), documents=10)
    ds = tp.IndexedDataset(tmp_path / "s")
    clone = pickle.loads(pickle.dumps(ds))
    assert np.array_equal(clone[4], ds[4])


def test_many_open_stores_stay_within_the_handle_pool(tmp_path, monkeypatch):
    monkeypatch.setattr(handles.POOL, "capacity", 16)
    for k in range(40):
        with tp.IndexedDatasetWriter(tmp_path / f"d{k}", dtype=np.uint16) as w:
            w.add_document([k, k + 1])
    stores = [tp.IndexedDataset(tmp_path / f"d{k}") for k in range(40)]
    for _ in range(3):
        for k, ds in enumerate(stores):
            assert ds[0].tolist() == [k, k + 1]
            assert handles.POOL.open_count <= 16
    for ds in stores:
        ds.close()
