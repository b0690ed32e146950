"""A blend of 10^3 tiny stores, built and reopened from the index cache, equals its stores built one by one.

The stores come from benchmarks/_tiny_stores.py (the writer's bytes without its fsyncs, checked
here against ``IndexedDatasetWriter``), as in benchmarks/bench_scale_blend.py, which builds and
reopens a blend of 10^5 of them.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import tokenport as tp
from tokenport.samples.gpt import GPTDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from _tiny_stores import EOD, VOCAB, tiny_documents, write_tiny_store, write_tiny_stores  # noqa: E402

STORES = 1_000
SEQ_LENGTH = 16
SEED = 7


def test_tiny_stores_are_the_writers_bytes(tmp_path: Path) -> None:
    """.bin and .idx byte for byte, and the manifest but its creation time, as IndexedDatasetWriter writes them."""
    for k in range(3):
        tokens, lengths = tiny_documents(k, 20 + k)
        ours = write_tiny_store(str(tmp_path / f"fast{k}"), tokens, lengths)
        theirs = str(tmp_path / f"writer{k}")
        with tp.IndexedDatasetWriter(theirs, dtype=np.uint16, tokenizer={"eod_id": EOD, "vocab_size": VOCAB}) as w:
            w.add_documents(tokens, lengths)
        for suffix in (".bin", ".idx"):
            assert Path(ours + suffix).read_bytes() == Path(theirs + suffix).read_bytes()
        mine, writers = (json.loads(Path(p + ".json").read_text()) for p in (ours, theirs))
        mine.pop("created"), writers.pop("created")
        assert mine == writers
        store = tp.IndexedDataset(ours)
        assert len(store) == len(lengths) and np.array_equal(store[len(lengths) - 1], tokens[-lengths[-1] :])


def _build(prefixes: list[str], cache: Path) -> tp.BlendedDataset:
    spec = [x for prefix in prefixes for x in ("1", prefix)]
    config = tp.GPTSampleConfig(seq_length=SEQ_LENGTH, eod_id=EOD)
    train, _, _ = tp.build_datasets(
        spec, sizes=[10 * len(prefixes), 0, 0], config=config, seed=SEED, split="1,0,0", cache=str(cache)
    )
    return train


@pytest.fixture
def fast_dir(tmp_path: Path) -> Iterator[Path]:
    """A scratch directory on tmpfs when the machine has one (3,000 small files in a second), else tmp_path."""
    if not os.path.isdir("/dev/shm"):
        yield tmp_path
        return
    directory = tempfile.mkdtemp(prefix="tokenport-scale-blend-", dir="/dev/shm")
    try:
        yield Path(directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_blend_of_1000_stores_equals_its_stores_one_by_one(fast_dir: Path) -> None:
    """Every sample of the blend (built, then reopened from the cache) is the sample of its store's own dataset."""
    tmp_path = fast_dir
    prefixes = write_tiny_stores(str(tmp_path / "stores"), STORES)
    built = _build(prefixes, tmp_path / "cache")
    reopened = _build(prefixes, tmp_path / "cache")
    assert np.array_equal(built.dataset_index, reopened.dataset_index)
    assert np.array_equal(built.dataset_sample_index, reopened.dataset_sample_index)
    tokens = built.get_batch(np.arange(len(built)))["tokens"]
    some = np.random.default_rng(0).choice(len(built), 500, replace=False)
    assert np.array_equal(reopened.get_batch(some)["tokens"], tokens[some])
    dataset_index = np.asarray(built.dataset_index, dtype=np.int64)
    counts = np.bincount(dataset_index, minlength=STORES)
    assert counts.min() >= 1 and counts.sum() == len(built)
    config = tp.GPTSampleConfig(seq_length=SEQ_LENGTH, eod_id=EOD)
    for k, prefix in enumerate(prefixes):
        store = tp.IndexedDataset(prefix)
        alone = GPTDataset(store, np.arange(len(store)), int(counts[k]), config, SEED)
        mine = np.flatnonzero(dataset_index == k)
        expected = alone.get_batch(np.asarray(built.dataset_sample_index)[mine])["tokens"]
        assert np.array_equal(tokens[mine], expected), prefix
