"""Blends of many stores: one cache entry per blend mapped once, stores opened on first read, few descriptors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests._support.stores import build_store
from tokenport.builder.cache import IndexCache
from tokenport.builder.datasets import build_datasets
from tokenport.errors import CorruptStoreError
from tokenport.indexed import IndexedDataset
from tokenport.samples.gpt import GPTSampleConfig

EOD = 2
SEQ = 16
CONFIG = GPTSampleConfig(seq_length=SEQ, eod_id=EOD)


def _write(prefix: str, documents: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, 12, documents)
    tokens = rng.integers(3, 1000, int(lengths.sum())).astype(np.uint16)
    tokens[np.cumsum(lengths) - 1] = EOD
    return build_store(prefix, tokens, lengths=lengths, dtype=np.uint16, tokenizer={"eod_id": EOD, "vocab_size": 1000})


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> list[str]:
    """Forty small stores with manifests."""
    directory = tmp_path_factory.mktemp("many")
    return [_write(str(directory / f"s{i:03d}"), 60, i) for i in range(40)]


def _spec(prefixes: list[str]) -> list[str]:
    return [x for i, p in enumerate(prefixes) for x in (str(1 + i % 3), p)]


def _build(prefixes: list[str], cache, algorithm: str = "tijdeman"):
    train, _, _ = build_datasets(
        _spec(prefixes), sizes=(400, 0, 0), config=CONFIG, seed=7, split="1,0,0", cache=cache, algorithm=algorithm
    )
    return train


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _entries(directory) -> list[str]:
    return sorted(name for name in os.listdir(directory) if not name.startswith(".") and "." not in name)


@pytest.mark.parametrize("algorithm", ["tijdeman", "megatron"])
def test_a_blend_is_one_cache_entry_with_the_samples_of_the_uncached_path(stores, tmp_path, algorithm):
    expected = _build(stores, None, algorithm)
    built = _build(stores, tmp_path, algorithm)
    entries = _entries(tmp_path)
    assert len(entries) == 1  # the blend's indices and all forty children's
    assert sorted(os.listdir(tmp_path / entries[0])) == ["arrays.bin", "description.json"]
    reopened = _build(stores, tmp_path, algorithm)
    assert _entries(tmp_path) == entries
    ids = np.arange(len(expected))
    for dataset in (built, reopened):
        assert np.array_equal(dataset.dataset_index, expected.dataset_index)
        got, want = dataset.get_batch(ids), expected.get_batch(ids)
        assert sorted(got) == sorted(want)
        for name in want:
            assert np.array_equal(got[name], want[name]), name


def test_reopening_opens_no_store_until_a_sample_of_it_is_read(stores, tmp_path):
    _build(stores, tmp_path)
    before = _open_fds()
    train = _build(stores, tmp_path)
    assert _open_fds() - before <= 1  # the cache entry's one mapping
    children = [d for d in train.datasets if len(d)]
    assert len(children) == len(stores) and not any(child.dataset.is_open for child in children)
    first = int(train.dataset_index[0])
    train.get_batch([0])
    assert [child.dataset.is_open for child in children].count(True) == 1 and children[first].dataset.is_open


def test_a_truncated_entry_is_refused_naming_it(stores, tmp_path):
    _build(stores[:5], tmp_path)
    (entry,) = _entries(tmp_path)
    data = tmp_path / entry / "arrays.bin"
    data.write_bytes(data.read_bytes()[:-8])
    with pytest.raises(CorruptStoreError, match="delete the entry directory"):
        _build(stores[:5], tmp_path)


def test_an_interrupted_entry_is_cleaned_and_rebuilt(stores, tmp_path):
    _build(stores[:5], tmp_path)
    (entry,) = _entries(tmp_path)
    os.rename(tmp_path / entry, tmp_path / f".{entry}.4242.x.tmp")  # a builder died before its rename
    again = _build(stores[:5], tmp_path)
    assert _entries(tmp_path) == [entry] and not any(name.endswith(".tmp") for name in os.listdir(tmp_path))
    assert np.array_equal(again.dataset_index, _build(stores[:5], None).dataset_index)


def test_entries_of_the_earlier_layout_are_still_read(stores, tmp_path):
    store = IndexedDataset(stores[0])
    arrays = {"a": np.arange(10, dtype=np.int32), "b": np.ones((3, 2))}
    cache = IndexCache(tmp_path)
    cache.get_or_build(store, {"k": 1}, lambda: arrays)
    (entry,) = _entries(tmp_path)
    directory = tmp_path / entry
    description = json.loads((directory / "description.json").read_text())
    layouts = {}
    for name, array in arrays.items():  # rewrite it as the per-array .npy layout
        np.save(directory / f"{name}.npy", array)
        layouts[name] = {
            "dtype": str(array.dtype),
            "shape": list(array.shape),
            "offset": os.path.getsize(directory / f"{name}.npy") - array.nbytes,
        }
    os.unlink(directory / "arrays.bin")
    del description["file"], description["size"], description["digest"]  # the earlier layout had none of them
    description["arrays"] = layouts
    (directory / "description.json").write_text(json.dumps(description))
    loaded = cache.get_or_build(store, {"k": 1}, lambda: pytest.fail("rebuilt"))
    for name, array in arrays.items():
        assert np.array_equal(loaded[name], array)


def test_a_lazy_store_whose_index_disagrees_with_its_manifest_is_refused_when_read(tmp_path):
    prefix = _write(str(tmp_path / "a"), 30, 1)
    _write(str(tmp_path / "b"), 31, 2)
    for suffix in (".idx", ".bin"):  # b's files under a's manifest
        os.replace(tmp_path / f"b{suffix}", tmp_path / f"a{suffix}")
    store = IndexedDataset(prefix, lazy=True)
    assert len(store) == 30 and not store.is_open
    with pytest.raises(CorruptStoreError, match="do not belong together"):
        store[0]


def test_two_thousand_stores_under_a_low_open_file_limit(tmp_path):
    first = _write(str(tmp_path / "s0000"), 12, 0)
    prefixes = [first] + [str(tmp_path / f"s{i:04d}") for i in range(1, 2000)]
    for prefix in prefixes[1:]:  # copies: writing 2,000 stores would pay 2,000 publications' fsyncs
        for suffix in (".idx", ".bin", ".json"):
            shutil.copyfile(first + suffix, prefix + suffix)
    (tmp_path / "prefixes.json").write_text(json.dumps(prefixes))
    script = textwrap.dedent(
        f"""
        import json, resource, sys
        resource.setrlimit(resource.RLIMIT_NOFILE, (128, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        import numpy as np
        import tokenport as tp
        prefixes = json.load(open({str(tmp_path / "prefixes.json")!r}))
        spec = [x for p in prefixes for x in ("1", p)]
        config = tp.GPTSampleConfig(seq_length=8, eod_id={EOD})
        for _ in range(2):  # build, then reopen from the cache
            train, _, _ = tp.build_datasets(
                spec, sizes=(4000, 0, 0), config=config, seed=3, split="1,0,0", cache={str(tmp_path / "cache")!r}
            )
            seen = set()
            for start in range(0, len(train), 256):
                batch = train.get_batch(np.arange(start, min(start + 256, len(train))))
                assert (batch["tokens"] >= 0).all()
                seen.update(np.unique(batch["dataset_id"]).tolist())
            assert seen == set(range(len(prefixes))), len(seen)
        print("ok", len(seen))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["ok", "2000"]


def test_building_opens_no_store_and_a_read_still_checks_the_bin(stores, tmp_path):
    """Index building reads each .idx's lengths by one pread; the .bin's checks wait for the first read."""
    train = _build(stores[:6], tmp_path)
    children = [d for d in train.datasets if len(d)]
    assert not any(child.dataset.is_open for child in children)
    copy = str(tmp_path / "copy")
    for suffix in (".idx", ".bin", ".json"):
        shutil.copyfile(stores[0] + suffix, copy + suffix)
    with open(copy + ".bin", "r+b") as f:
        f.truncate(os.path.getsize(copy + ".bin") - 2)
    blend = _build([copy, *stores[1:3]], None)
    with pytest.raises(CorruptStoreError, match="truncated"):
        blend.get_batch(np.flatnonzero(blend.dataset_index == 0)[:1])
    lazy = IndexedDataset(copy, lazy=True)
    assert np.array_equal(lazy.read_sequence_lengths(), IndexedDataset(stores[0]).sequence_lengths)
    assert not lazy.is_open
