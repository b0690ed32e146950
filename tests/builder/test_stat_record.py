"""Reopening a blend from its stat record: no manifest read while no store changed, never stale data when one did."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store
from tokenport.builder import stat_record
from tokenport.builder.datasets import build_datasets
from tokenport.errors import CorruptStoreError
from tokenport.indexed import IndexedDataset, StoreFacts, manifest
from tokenport.samples.gpt import GPTSampleConfig

EOD = 2
CONFIG = GPTSampleConfig(seq_length=16, eod_id=EOD)
LENGTHS = np.tile([5, 9, 3, 11, 7], 8)


def _write(prefix: str, seed: int) -> str:
    """A store of LENGTHS documents whose tokens depend on ``seed`` (so its files' sizes do not)."""
    tokens = np.random.default_rng(seed).integers(3, 1000, int(LENGTHS.sum())).astype(np.uint16)
    tokens[np.cumsum(LENGTHS) - 1] = EOD
    return build_store(prefix, tokens, lengths=LENGTHS, dtype=np.uint16, tokenizer={"eod_id": EOD, "vocab_size": 1000})


def _build(prefixes, cache):
    spec = [x for p in prefixes for x in ("1", p)]
    train, _, _ = build_datasets(
        spec, sizes=(60, 0, 0), config=CONFIG, seed=3, split="1,0,0", cache=cache, algorithm="megatron"
    )
    return train


def _tokens(dataset) -> np.ndarray:
    return dataset.get_batch(np.arange(len(dataset)))["tokens"]


def _entries(directory) -> list[str]:
    return sorted(name for name in os.listdir(directory) if "." not in name)


@pytest.fixture
def counted(monkeypatch):
    """Trust files however recent (a test's stores are seconds old) and count manifest reads."""
    monkeypatch.setattr(stat_record, "RACY_NS", 0)
    reads: list[str] = []
    original = manifest.read_manifest

    def reading(prefix: str):
        reads.append(prefix)
        return original(prefix)

    monkeypatch.setattr("tokenport.indexed.reader.read_manifest", reading)
    return reads


def test_a_reopen_of_unchanged_stores_reads_no_manifest_and_gives_the_same_samples(tmp_path, counted):
    prefixes = [_write(str(tmp_path / f"s{i}"), i) for i in range(4)]
    built = _build(prefixes, tmp_path / "cache")
    assert len(counted) == 4
    counted.clear()
    reopened = _build(prefixes, tmp_path / "cache")
    assert counted == []
    assert np.array_equal(_tokens(reopened), _tokens(built))
    assert np.array_equal(_tokens(reopened), _tokens(_build(prefixes, None)))


def test_a_store_rewritten_with_other_tokens_of_the_same_size_gets_a_new_entry(tmp_path, counted):
    prefixes = [_write(str(tmp_path / f"s{i}"), i) for i in range(3)]
    cache = tmp_path / "cache"
    before = _tokens(_build(prefixes, cache))
    sizes = [os.path.getsize(prefixes[1] + suffix) for suffix in (".bin", ".idx")]
    _write(prefixes[1], 99)  # the same lengths, other tokens: files of the same sizes
    assert [os.path.getsize(prefixes[1] + suffix) for suffix in (".bin", ".idx")] == sizes
    counted.clear()
    after = _build(prefixes, cache)
    assert len(counted) == 3 and len(_entries(cache)) == 2  # the manifests read again: a new key
    assert np.array_equal(_tokens(after), _tokens(_build(prefixes, None)))
    assert not np.array_equal(_tokens(after), before)


def test_files_rewritten_in_place_are_read_again(tmp_path, counted):
    """Same inodes and sizes: another store's bytes copied into the files; the new times tell."""
    prefixes = [_write(str(tmp_path / f"s{i}"), i) for i in range(2)]
    other = _write(str(tmp_path / "other"), 42)
    cache = tmp_path / "cache"
    _build(prefixes, cache)
    inode = os.stat(prefixes[0] + ".bin").st_ino
    for suffix in (".bin", ".idx", ".json"):
        with open(other + suffix, "rb") as source, open(prefixes[0] + suffix, "r+b") as target:
            target.write(source.read())
        stat = os.stat(prefixes[0] + suffix)  # a later write, even within the clock tick of the build
        os.utime(prefixes[0] + suffix, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert os.stat(prefixes[0] + ".bin").st_ino == inode
    counted.clear()
    after = _build(prefixes, cache)
    assert len(counted) == 2 and len(_entries(cache)) == 2
    assert np.array_equal(_tokens(after), _tokens(_build(prefixes, None)))


def test_files_changed_just_before_the_record_are_not_trusted(tmp_path, monkeypatch):
    """Without the test's override, stores written seconds ago are read again (a write in the same clock tick
    as the record would keep the times it recorded)."""
    prefixes = [_write(str(tmp_path / f"s{i}"), i) for i in range(2)]
    _build(prefixes, tmp_path / "cache")
    assert [name for name in os.listdir(tmp_path / "cache") if name.startswith("stat-")]
    reads: list[str] = []
    original = manifest.read_manifest
    monkeypatch.setattr("tokenport.indexed.reader.read_manifest", lambda p: reads.append(p) or original(p))
    _build(prefixes, tmp_path / "cache")
    assert len(reads) == 2


def test_a_removed_entry_or_a_damaged_record_is_rebuilt_the_long_way(tmp_path, counted):
    prefixes = [_write(str(tmp_path / f"s{i}"), i) for i in range(2)]
    cache = tmp_path / "cache"
    want = _tokens(_build(prefixes, cache))
    (entry,) = _entries(cache)
    shutil.rmtree(cache / entry)
    assert np.array_equal(_tokens(_build(prefixes, cache)), want)
    (record,) = [name for name in os.listdir(cache) if name.startswith("stat-")]
    (cache / record).write_text("{not json")
    counted.clear()
    assert np.array_equal(_tokens(_build(prefixes, cache)), want)
    assert len(counted) == 2


def test_a_store_made_from_facts_checks_its_header_when_opened(tmp_path):
    prefix = _write(str(tmp_path / "a"), 1)
    store = IndexedDataset(prefix, lazy=True, facts=StoreFacts(len(LENGTHS) + 1, EOD))
    assert len(store) == len(LENGTHS) + 1 and not store.is_open and store.facts.eod_id == EOD
    with pytest.raises(CorruptStoreError, match="do not belong together"):
        store[0]
    with pytest.raises(tp.ConfigError, match="only with lazy=True"):
        IndexedDataset(prefix, facts=StoreFacts(3, EOD))
    with pytest.raises(ValueError, match="sequences"):
        StoreFacts(-1, EOD)
    assert IndexedDataset(prefix).facts == StoreFacts(len(LENGTHS), EOD, '{"eod_id":2,"vocab_size":1000}')


def test_an_unchanged_record_is_not_rewritten(tmp_path):
    prefixes = [_write(str(tmp_path / f"s{i}"), i) for i in range(2)]
    cache = tmp_path / "cache"
    _build(prefixes, cache)  # the stores are too recent to trust: their rows stay empty, the record the same
    (record,) = [cache / name for name in os.listdir(cache) if name.startswith("stat-")]
    before = os.stat(record)
    _build(prefixes, cache)
    after = os.stat(record)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
