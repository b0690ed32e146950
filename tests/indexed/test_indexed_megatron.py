"""Byte compatibility with the real peer, megatron-core's IndexedDataset and IndexedDatasetBuilder."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tokenport as tp

torch = pytest.importorskip("torch")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    megatron = pytest.importorskip("megatron.core.datasets.indexed_dataset")


def _documents(rng, count, high):
    for _ in range(count):
        lengths = rng.integers(1, 60, int(rng.integers(1, 4)))
        yield rng.integers(0, high, int(lengths.sum())), lengths


@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
def test_tokenport_files_read_identically_through_megatron(tmp_path, dtype):
    rng = np.random.default_rng(11)
    high = int(min(np.iinfo(dtype).max, 2**31 - 1))
    with tp.IndexedDatasetWriter(tmp_path / "ours", dtype=dtype) as writer:
        for tokens, lengths in _documents(rng, 300, high):
            writer.add_document(tokens, lengths=lengths)
    ours = tp.IndexedDataset(tmp_path / "ours")
    theirs = megatron.IndexedDataset(str(tmp_path / "ours"))
    assert len(theirs) == len(ours)
    assert np.array_equal(theirs.sequence_lengths, ours.sequence_lengths)
    assert np.array_equal(theirs.document_indices, ours.document_indices)
    for i in range(len(ours)):
        assert theirs[i].dtype == ours[i].dtype
        assert np.array_equal(theirs[i], ours[i])
        length = max(0, min(3, len(ours[i]) - 1))
        assert np.array_equal(theirs.get(i, 1, length), ours.get(i, 1, length))


@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
def test_megatron_files_read_identically_through_tokenport(tmp_path, dtype):
    rng = np.random.default_rng(12)
    high = int(min(np.iinfo(dtype).max, 2**31 - 1))
    builder = megatron.IndexedDatasetBuilder(str(tmp_path / "theirs.bin"), dtype=dtype)
    for tokens, lengths in _documents(rng, 300, high):
        builder.add_document(torch.from_numpy(tokens), lengths.tolist())
    builder.finalize(str(tmp_path / "theirs.idx"))
    theirs = megatron.IndexedDataset(str(tmp_path / "theirs"))
    ours = tp.IndexedDataset(tmp_path / "theirs")
    assert ours.manifest is None
    assert ours.dtype == np.dtype(dtype)
    assert np.array_equal(theirs.document_indices, ours.document_indices)
    for i in range(len(theirs)):
        assert np.array_equal(theirs[i], ours[i])
    assert tp.verify(tmp_path / "theirs").sequences == len(theirs)


def test_identical_bytes_to_megatron_builder(tmp_path):
    """Same documents in, same .bin and .idx bytes out, as Megatron's own builder writes."""
    rng = np.random.default_rng(13)
    documents = list(_documents(rng, 200, 60000))
    builder = megatron.IndexedDatasetBuilder(str(tmp_path / "theirs.bin"), dtype=np.uint16)
    for tokens, lengths in documents:
        builder.add_document(torch.from_numpy(tokens), lengths.tolist())
    builder.finalize(str(tmp_path / "theirs.idx"))
    with tp.IndexedDatasetWriter(tmp_path / "ours", dtype=np.uint16) as writer:
        for tokens, lengths in documents:
            writer.add_document(tokens, lengths=lengths)
    for suffix in (".bin", ".idx"):
        assert (tmp_path / f"ours{suffix}").read_bytes() == (tmp_path / f"theirs{suffix}").read_bytes()


def test_merge_matches_megatron_add_index(tmp_path):
    rng = np.random.default_rng(14)
    for name in ("a", "b"):
        with tp.IndexedDatasetWriter(tmp_path / name, dtype=np.uint16) as writer:
            for tokens, lengths in _documents(rng, 40, 60000):
                writer.add_document(tokens, lengths=lengths)
    tp.merge(tmp_path / "ours", [tmp_path / "a", tmp_path / "b"])
    builder = megatron.IndexedDatasetBuilder(str(tmp_path / "theirs.bin"), dtype=np.uint16)
    builder.add_index(str(tmp_path / "a"))
    builder.add_index(str(tmp_path / "b"))
    builder.finalize(str(tmp_path / "theirs.idx"))
    for suffix in (".bin", ".idx"):
        assert (tmp_path / f"ours{suffix}").read_bytes() == (tmp_path / f"theirs{suffix}").read_bytes()
