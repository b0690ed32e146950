"""LegacyShuffler permutes exactly as numpy's RandomState(seed).shuffle, call after call."""

from __future__ import annotations

import numpy as np
import pytest

from tokenport.rng.legacy_shuffle import LegacyShuffler


@pytest.mark.parametrize("seed", [0, 1, 1234, 2**32 - 1])
@pytest.mark.parametrize("size", [0, 1, 2, 3, 623, 624, 625, 4095, 4096, 4097, 100_003])
@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int64])
def test_same_permutations_as_numpy(seed: int, size: int, dtype) -> None:
    theirs, ours = np.arange(size, dtype=dtype), np.arange(size, dtype=dtype)
    numpy_state, shuffler = np.random.RandomState(seed), LegacyShuffler(seed)
    for _ in range(3):  # each shuffle starts from the state the one before left
        numpy_state.shuffle(theirs)
        shuffler.shuffle(ours)
        np.testing.assert_array_equal(ours, theirs)


def test_sizes_in_turn_as_an_index_build_draws_them() -> None:
    numpy_state, shuffler = np.random.RandomState(99), LegacyShuffler(99)
    for size in (5, 100_000, 1, 7_777, 0, 50_000):
        theirs, ours = np.arange(size, dtype=np.int64), np.arange(size, dtype=np.int64)
        numpy_state.shuffle(theirs)
        shuffler.shuffle(ours)
        np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("seed", [-1, 2**32, 1.5, True, "3"])
def test_seeds_numpy_refuses_are_refused(seed) -> None:
    with pytest.raises(ValueError, match="seed"):
        LegacyShuffler(seed)


def test_only_1d_arrays() -> None:
    with pytest.raises(ValueError, match="1-D"):
        LegacyShuffler(0).shuffle(np.arange(6).reshape(2, 3))


def test_draws_above_32_bits_follow_numpy() -> None:
    """Arrays past 2**32 elements draw 64-bit targets (high word first); numpy's masked randint draws the same."""
    from tokenport.rng.legacy_shuffle import _STATE_WORDS, _random_interval_64, _seed

    numpy_state = np.random.RandomState(5)
    key, outputs = np.empty(_STATE_WORDS, np.uint32), np.empty(_STATE_WORDS, np.uint32)
    _seed(key, 5)
    position = _STATE_WORDS
    for bound in (2**32, 2**32 + 12_345, 3 * 2**33 + 1, 2**40 - 1) * 50:
        ours, position = _random_interval_64(bound, key, outputs, position)
        assert ours == int(numpy_state.randint(0, bound + 1, dtype=np.int64))


def test_unsigned_and_signed_integers_of_one_width_share_one_compiled_kernel() -> None:
    from tokenport.rng.legacy_shuffle import _shuffle

    shuffler = LegacyShuffler(5)
    for dtype in (np.int32, np.uint32):
        shuffler.shuffle(np.arange(50, dtype=dtype))
    assert not any("uint32" in str(signature[0]) for signature in _shuffle.signatures)
