"""Mutation fuzz of the index cache's documents: an entry's description.json and a blend's stat record.
A mutated description is refused (CorruptStoreError naming it) or loads the very arrays written; a
mutated stat record is no shortcut (the manifests are read again) or gives the very key and facts."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import tokenport as tp
from tests._support.mutate import mutations
from tests._support.stores import build_store
from tokenport.builder import stat_record
from tokenport.builder.cache import DESCRIPTION, IndexCache
from tokenport.builder.datasets import build_datasets
from tokenport.errors import TokenportError
from tokenport.samples.gpt import GPTSampleConfig

EOD = 2
LENGTHS = np.tile([5, 9, 3, 11, 7], 8)


def _write(prefix, seed: int) -> str:
    tokens = np.random.default_rng(seed).integers(3, 1000, int(LENGTHS.sum())).astype(np.uint16)
    tokens[np.cumsum(LENGTHS) - 1] = EOD
    tokenizer = {"eod_id": EOD, "vocab_size": 1000, "fingerprint": "sha256:aa", "kind": "hf"}
    return build_store(prefix, tokens, lengths=LENGTHS, dtype=np.uint16, tokenizer=tokenizer)


def test_mutated_cache_descriptions_are_refused_or_load_the_arrays_written(tmp_path):
    store = tp.IndexedDataset(_write(tmp_path / "s", 1))
    arrays = {"a": np.arange(10, dtype=np.int32), "b": np.ones((3, 2)), "c": np.arange(5, dtype=np.uint8)}
    cache = IndexCache(tmp_path / "cache")
    cache.get_or_build(store, {"k": 1}, lambda: arrays)
    (key,) = [name for name in os.listdir(cache.directory) if "." not in name]
    path = os.path.join(cache.entry_path(key), DESCRIPTION)
    text = open(path, "rb").read()
    refused = 0
    for label, data in mutations(text):
        with open(path, "wb") as f:
            f.write(data)
        try:
            loaded = cache.load(key)
        except TokenportError:
            refused += 1
            continue
        assert loaded is not None and sorted(loaded) == sorted(arrays), label
        for name, array in arrays.items():
            assert loaded[name].dtype == array.dtype and np.array_equal(loaded[name], array), label
    assert refused


def test_a_layout_changed_consistently_is_refused_by_its_digest(tmp_path):
    store = tp.IndexedDataset(_write(tmp_path / "s", 1))
    cache = IndexCache(tmp_path / "cache")
    cache.get_or_build(store, {"k": 1}, lambda: {"a": np.arange(10, dtype=np.int32), "b": np.arange(3)})
    (key,) = [name for name in os.listdir(cache.directory) if "." not in name]
    path = os.path.join(cache.entry_path(key), DESCRIPTION)
    description = json.loads(open(path).read())
    description["arrays"]["a"]["shape"] = [1]  # still inside the file, padding hides it: only the digest tells
    open(path, "w").write(json.dumps(description))
    with pytest.raises(tp.CorruptStoreError, match=r"description.json: .*digest"):
        cache.load(key)


def test_mutated_stat_records_are_no_shortcut_or_give_the_same_key_and_facts(tmp_path, monkeypatch):
    monkeypatch.setattr(stat_record, "RACY_NS", 0)
    prefixes = [_write(tmp_path / f"s{k}", k) for k in range(3)]
    config = GPTSampleConfig(seq_length=16)
    spec = [x for p in prefixes for x in ("1", p)]

    def build():
        return build_datasets(
            spec, sizes=(40, 0, 0), config=config, seed=3, split="1,0,0", cache=tmp_path / "cache", algorithm="megatron"
        )[0]

    expected = build().get_batch(np.arange(40))["tokens"]
    (name,) = [n for n in os.listdir(tmp_path / "cache") if n.startswith("stat-")]
    path = tmp_path / "cache" / name
    text = path.read_bytes()
    params = json.loads(text)
    record = stat_record.StatRecord(str(tmp_path / "cache"), prefixes, {})
    record.path = str(path)
    found = record.lookup()
    assert found is not None and len(found[1]) == 3 and params["format"] == stat_record.RECORD_FORMAT
    shortcuts = 0
    for label, data in mutations(text):
        path.write_bytes(data)
        try:
            got = record.lookup()
        except Exception as exc:  # the record is a shortcut: a damaged one is never an error
            pytest.fail(f"{label}: {type(exc).__name__}: {exc}")
        if got is not None:
            shortcuts += 1
            assert got == found, label
    assert shortcuts <= 2  # only mutations that leave the document as written (e.g. the same value again)
    path.write_bytes(text[: len(text) // 2])
    assert np.array_equal(build().get_batch(np.arange(40))["tokens"], expected)  # read again, rewritten
