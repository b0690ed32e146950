"""PackedDataset: documents of a real token store packed into fixed-capacity samples."""

from __future__ import annotations

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store
from tokenport.errors import ConfigError
from tokenport.samples.packed import PackedDataset

CAPACITY = 64


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> tp.IndexedDataset:
    """A uint16 store of 120 random documents of 0..150 tokens (some longer than CAPACITY)."""
    rng = np.random.default_rng(11)
    prefix = str(tmp_path_factory.mktemp("packed") / "store")
    lengths = (0 if k == 5 else int(rng.integers(1, 150 if k % 4 == 0 else 40)) for k in range(120))
    return tp.IndexedDataset(build_store(prefix, (rng.integers(1, 60000, n) for n in lengths), dtype=np.uint16))


def _documents(store):
    return [np.asarray(store[k], dtype=np.int64) for k in range(len(store))]


def _check_samples(ds: PackedDataset, store, selected) -> None:
    """Every token of every selected document appears exactly once, in order; fields agree."""
    docs = _documents(store)
    seen = {k: np.zeros(len(docs[k]), dtype=np.int64) for k in selected}
    batch = ds.get_batch(np.arange(len(ds)))
    assert batch["tokens"].shape == (len(ds), ds.capacity)
    assert batch["cu_seqlens"].shape == (len(ds), ds.cu_seqlens_length)
    for s in range(len(ds)):
        bin_ = ds.order[s]
        a, b = ds.bin_starts[bin_], ds.bin_starts[bin_ + 1]
        cu = batch["cu_seqlens"][s]
        assert batch["num_documents"][s] == b - a
        col = 0
        for k, p in enumerate(range(a, b)):
            doc, off, n = int(ds.piece_document[p]), int(ds.piece_offset[p]), int(ds.piece_length[p])
            assert cu[k] == col and cu[k + 1] == col + n
            np.testing.assert_array_equal(batch["tokens"][s, col : col + n], docs[doc][off : off + n])
            # pre-shifted labels within the document; the document's last token gets -100
            expected = np.append(docs[doc][off + 1 : off + n + 1], [-100] * (off + n == len(docs[doc])))
            np.testing.assert_array_equal(batch["labels"][s, col : col + n], expected)
            np.testing.assert_array_equal(batch["position_ids"][s, col : col + n], np.arange(n))
            seen[doc][off : off + n] += 1
            col += n
        assert (cu[b - a + 1 :] == col).all()
        assert (batch["tokens"][s, col:] == ds.pad_id).all()
        assert (batch["labels"][s, col:] == -100).all()
        assert (batch["position_ids"][s, col:] == 0).all()
        assert batch["max_seqlen"][s] == np.diff(cu).max()
        # position ids restart exactly at the cu_seqlens boundaries
        restarts = np.flatnonzero(batch["position_ids"][s, :col] == 0)
        np.testing.assert_array_equal(restarts, cu[: b - a])
    for k in selected:
        assert (seen[k] == 1).all(), f"document {k}"
    assert set(ds.piece_document.tolist()) <= set(selected)
    assert ds.efficiency == pytest.approx(sum(len(docs[k]) for k in selected) / (len(ds) * ds.capacity))


def test_whole_dataset_split(store):
    ds = PackedDataset(store, CAPACITY, split_long=True, seed=1)
    assert ds.piece_length.max() <= CAPACITY
    assert (ds.piece_offset > 0).any()  # some documents were cut
    _check_samples(ds, store, range(len(store)))
    assert ds.efficiency > 0.9


def test_subset_without_split(store):
    lengths = store.sequence_lengths
    subset = np.flatnonzero(lengths <= CAPACITY)[::2]
    ds = PackedDataset(store, CAPACITY, ids=subset, seed=2)
    assert (ds.piece_offset == 0).all()
    _check_samples(ds, store, subset.tolist())


def test_windows(store):
    ds = PackedDataset(store, CAPACITY, split_long=True, window=16, shuffle=True, seed=3)
    _check_samples(ds, store, range(len(store)))
    # bins never mix windows: the documents of one bin all lie in one window of the shuffled ids
    ids = np.arange(len(store))
    ids = ids[store.sequence_lengths[ids] > 0]
    shuffled = ids[np.random.default_rng(3).permutation(len(ids))]
    window_of = np.empty(len(store), dtype=np.int64)
    window_of[shuffled] = np.arange(len(shuffled)) // 16
    for b in range(len(ds)):
        docs = ds.piece_document[ds.bin_starts[b] : ds.bin_starts[b + 1]]
        assert len(set(window_of[docs].tolist())) == 1
    whole = PackedDataset(store, CAPACITY, split_long=True, seed=3)
    assert len(ds) >= len(whole)


def test_unshuffled_keeps_bin_order(store):
    ds = PackedDataset(store, CAPACITY, split_long=True, shuffle=False)
    np.testing.assert_array_equal(ds.order, np.arange(len(ds)))
    _check_samples(ds, store, range(len(store)))


def test_deterministic_for_seed(store):
    a = PackedDataset(store, CAPACITY, split_long=True, window=20, seed=5)
    b = PackedDataset(store, CAPACITY, split_long=True, window=20, seed=5)
    c = PackedDataset(store, CAPACITY, split_long=True, window=20, seed=6)
    ba, bb = a.get_batch(np.arange(len(a))), b.get_batch(np.arange(len(b)))
    for name in ba:
        np.testing.assert_array_equal(ba[name], bb[name])
    assert len(a) != len(c) or not np.array_equal(ba["tokens"], c.get_batch(np.arange(len(c)))["tokens"])


def test_getitem_equals_batch_row_and_dtypes(store):
    ds = PackedDataset(store, CAPACITY, split_long=True, seed=0, pad_id=9)
    batch = ds.get_batch([3, 0, 3])
    sample = ds[3]
    for name, value in sample.items():
        np.testing.assert_array_equal(value, batch[name][0])
        np.testing.assert_array_equal(value, batch[name][2])
    assert batch["cu_seqlens"].dtype == np.int32 and batch["tokens"].dtype == np.int64
    assert set(sample) == {"tokens", "labels", "position_ids", "cu_seqlens", "max_seqlen", "num_documents"}
    with pytest.raises(IndexError):
        ds[len(ds)]
    with pytest.raises(IndexError):
        ds.get_batch([-1])


def test_cu_seqlens_length_cap(store):
    ds = PackedDataset(store, CAPACITY, split_long=True)
    needed = int(np.diff(ds.bin_starts).max()) + 1
    assert ds.cu_seqlens_length == needed
    wide = PackedDataset(store, CAPACITY, split_long=True, cu_seqlens_length=needed + 5)
    assert wide[0]["cu_seqlens"].shape == (needed + 5,)
    with pytest.raises(ConfigError, match="cu_seqlens_length"):
        PackedDataset(store, CAPACITY, split_long=True, cu_seqlens_length=needed - 1)


def test_errors(store):
    for capacity in (0, -3, 2.5, True):
        with pytest.raises(ConfigError, match="capacity"):
            PackedDataset(store, capacity)
    first_long = int(np.flatnonzero(store.sequence_lengths > CAPACITY)[0])
    with pytest.raises(ConfigError, match=rf"document \(sequence\) {first_long} has"):
        PackedDataset(store, CAPACITY, shuffle=False)
    with pytest.raises(ConfigError, match="split_long=True"):
        PackedDataset(store, CAPACITY, seed=4)
    with pytest.raises(ConfigError, match="window"):
        PackedDataset(store, CAPACITY, split_long=True, window=0)
    with pytest.raises(TypeError, match="split"):
        PackedDataset(store, CAPACITY, split=True)  # the old name of split_long
    with pytest.raises(ConfigError, match="ids"):
        PackedDataset(store, CAPACITY, ids=[len(store)])


def test_empty_selection(store):
    ds = PackedDataset(store, CAPACITY, ids=[5])  # document 5 is empty
    assert len(ds) == 0 and ds.efficiency == 1.0
    assert ds.get_batch([])["tokens"].shape == (0, CAPACITY)
