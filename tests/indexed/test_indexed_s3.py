"""IndexedDataset over S3 (moto on loopback, real s3fs): same sequences as local, few GETs, clear faults."""

from __future__ import annotations

import os

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import Doc, build_store
from tokenport.storage.remote import RemoteOptions

pytest.importorskip("s3fs")


@pytest.fixture
def local_store(tmp_path):
    rng = np.random.default_rng(21)

    def documents():
        for _ in range(400):
            lengths = rng.integers(1, 300, int(rng.integers(1, 3)))
            yield Doc(rng.integers(0, 257, int(lengths.sum())), lengths=lengths)

    build_store(tmp_path / "s", documents(), tokenizer=tp.load_tokenizer("byte"))
    return tmp_path / "s"


def _upload(s3, prefix, key):
    for suffix in (".bin", ".idx", ".json"):
        with open(f"{prefix}{suffix}", "rb") as f:
            s3.put(f.read(), key=f"{key}{suffix}")
    return f"s3://{s3.bucket}/{key}"


def _options(s3, endpoint=None, **overrides):
    return RemoteOptions(storage_options=s3.storage_options(endpoint), **overrides)


def test_remote_reads_equal_local(s3, local_store, tmp_path):
    url = _upload(s3, local_store, "stores/equal")
    local = tp.IndexedDataset(local_store)
    remote = tp.IndexedDataset(url, remote_options=_options(s3, block_size=4096), cache_dir=tmp_path / "cache")
    assert len(remote) == len(local) and remote.dtype == local.dtype
    assert np.array_equal(remote.document_indices, local.document_indices)
    assert remote.manifest == local.manifest
    for i in np.random.default_rng(0).permutation(len(local))[:200]:
        assert np.array_equal(remote[i], local[i])
    longest = int(np.argmax(local.sequence_lengths))
    assert np.array_equal(remote.get(longest, 1, 30), local.get(longest, 1, 30))
    ids = np.arange(0, len(local), 3)
    tokens, offsets = remote.get_many(ids)
    expected, expected_offsets = local.get_many(ids)
    assert np.array_equal(tokens, expected) and np.array_equal(offsets, expected_offsets)


def test_prefetch_plans_few_gets(s3, local_store, tmp_path):
    url = _upload(s3, local_store, "stores/prefetch")
    remote = tp.IndexedDataset(url, remote_options=_options(s3, block_size=4096), cache_dir=tmp_path / "cache")
    order = np.random.default_rng(1).permutation(len(remote))
    remote.prefetch([(int(i), 0, None) for i in order])
    before = remote._bin.stats.requests
    local = tp.IndexedDataset(local_store)
    for i in order:
        assert np.array_equal(remote[i], local[i])
    assert remote._bin.stats.requests == before  # every read was served from the prefetched blocks
    assert before <= 3


def test_index_is_fetched_once_into_the_cache(s3, local_store, tmp_path):
    url = _upload(s3, local_store, "stores/cached")
    tp.IndexedDataset(url, remote_options=_options(s3), cache_dir=tmp_path / "cache")
    cached = os.listdir(tmp_path / "cache")
    tp.IndexedDataset(url, remote_options=_options(s3), cache_dir=tmp_path / "cache")
    assert os.listdir(tmp_path / "cache") == cached and len(cached) == 1


def test_store_without_manifest(s3, local_store, tmp_path):
    url = _upload(s3, local_store, "stores/bare")
    s3.client.delete_object(Bucket=s3.bucket, Key="stores/bare.json")
    remote = tp.IndexedDataset(url, remote_options=_options(s3), cache_dir=tmp_path / "cache")
    assert remote.manifest is None
    assert remote.num_documents == 400


def test_corrupt_and_missing_remote_stores_are_rejected(s3, local_store, tmp_path):
    url = _upload(s3, local_store, "stores/short")
    data = open(f"{local_store}.bin", "rb").read()
    s3.put(data[:-2], key="stores/short.bin")
    with pytest.raises(tp.CorruptStoreError, match=r"short\.bin: has .* truncated"):
        tp.IndexedDataset(url, remote_options=_options(s3), cache_dir=tmp_path / "cache")
    with pytest.raises(tp.StorageError, match=r"s3://tokenport-test/stores/none\.idx: not found"):
        tp.IndexedDataset(f"s3://{s3.bucket}/stores/none", remote_options=_options(s3), cache_dir=tmp_path / "c")


def test_transient_faults_are_retried_through_a_real_proxy(s3, fault_proxy, local_store, tmp_path):
    url = _upload(s3, local_store, "stores/flaky")
    options = _options(s3, fault_proxy.endpoint_url, block_size=4096, backoff_initial=0.001, backoff_max=0.01)
    fault_proxy.inject("503", every=3)
    remote = tp.IndexedDataset(url, remote_options=options, cache_dir=tmp_path / "cache")
    local = tp.IndexedDataset(local_store)
    for i in range(0, len(local), 7):
        assert np.array_equal(remote[i], local[i])
    assert remote._bin.stats.retries > 0


def test_cached_index_follows_the_umask(s3, local_store, tmp_path):
    """The downloaded .idx is staged privately but published with the umask, like any file."""
    url = _upload(s3, local_store, "stores/umask")
    previous = os.umask(0o022)
    try:
        tp.IndexedDataset(url, remote_options=_options(s3), cache_dir=tmp_path / "cache")
    finally:
        os.umask(previous)
    cached = os.listdir(tmp_path / "cache")
    assert len(cached) == 1 and cached[0].endswith("umask.idx")
    assert os.stat(tmp_path / "cache" / cached[0]).st_mode & 0o777 == 0o644


def test_remote_chat_store_reads_its_masks(s3, tmp_path):
    """A chat store on S3: `.masks` opens PREFIX.mask remotely, with the token store's options."""
    documents = [Doc(np.arange(n), mask=np.arange(n) % 2) for n in (3, 7, 1)]
    build_store(tmp_path / "c", documents, dtype=np.uint16, masks=True, chat={"policy": "all"})
    url = _upload(s3, tmp_path / "c", "stores/chat")
    for suffix in (".mask.bin", ".mask.idx"):
        s3.put((tmp_path / f"c{suffix}").read_bytes(), key=f"stores/chat{suffix}")
    remote = tp.IndexedDataset(url, remote_options=_options(s3), cache_dir=tmp_path / "cache")
    assert remote.manifest.chat == {"policy": "all"}
    assert [remote.masks[i].tolist() for i in range(3)] == [[0, 1, 0], [0, 1, 0, 1, 0, 1, 0], [0]]
