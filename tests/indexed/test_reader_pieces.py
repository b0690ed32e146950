"""get_pieces: many (sequence, offset, length) pieces in one batched read, equal to a get each."""

from __future__ import annotations

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store, random_documents


@pytest.mark.parametrize("mode", ["mmap", "pread"])
def test_get_pieces_equals_one_get_per_piece_and_refuses_pieces_outside_a_sequence(tmp_path, mode):
    rng = np.random.default_rng(3)
    build_store(tmp_path / "s", random_documents(rng, 40, tokens=(0, 60_000), length=(1, 50)), dtype=np.uint16)
    store = tp.IndexedDataset(tmp_path / "s", mode=mode)
    lengths = store.sequence_lengths
    ids = rng.integers(0, 40, 100)
    ids[10:14] = [5, 6, 7, 7]  # neighbours, and one sequence twice
    offsets = np.array([int(rng.integers(0, lengths[i] + 1)) for i in ids])
    sizes = np.array([int(rng.integers(0, lengths[i] - o + 1)) for i, o in zip(ids, offsets)])
    offsets[10:13], sizes[10:13] = 0, lengths[[5, 6, 7]]  # whole 5, 6 and 7: one run in the file
    want = np.concatenate([store.get(int(i), int(o), int(n)) for i, o, n in zip(ids, offsets, sizes)])
    assert np.array_equal(store.get_pieces(ids, offsets, sizes), want)
    assert len(store.get_pieces([], [], [])) == 0
    with pytest.raises(IndexError, match="sequence 3 has"):
        store.get_pieces([3], [int(lengths[3])], [1])
    with pytest.raises(IndexError, match="ids must lie"):
        store.get_pieces([40], [0], [1])
    with pytest.raises(tp.ConfigError, match="2 ids, 1 offsets and 2 lengths; give one offset"):
        store.get_pieces([1, 2], [0], [1, 1])
