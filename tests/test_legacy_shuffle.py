"""legacy_shuffle.shuffle equals numpy's RandomState.shuffle and leaves the generator where numpy would."""

from __future__ import annotations

import numpy as np
import pytest

from tokenport.legacy_shuffle import shuffle


@pytest.mark.parametrize("seed", [0, 1, 1234, 2**32 - 1])
@pytest.mark.parametrize("size", [0, 1, 2, 3, 623, 624, 625, 4095, 4096, 4097, 100_003])
@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int64])
def test_same_permutation_and_state_as_numpy(seed: int, size: int, dtype) -> None:
    theirs, ours = np.arange(size, dtype=dtype), np.arange(size, dtype=dtype)
    numpy_state, our_state = np.random.RandomState(seed), np.random.RandomState(seed)
    for _ in range(2):  # the second shuffle starts from the state the first one left
        numpy_state.shuffle(theirs)
        shuffle(our_state, ours)
        np.testing.assert_array_equal(ours, theirs)
    assert our_state.randint(0, 2**31, 5).tolist() == numpy_state.randint(0, 2**31, 5).tolist()


def test_state_mid_block_and_after_other_draws() -> None:
    numpy_state, our_state = np.random.RandomState(7), np.random.RandomState(7)
    numpy_state.random_sample(1000)  # leaves the generator part-way through its 624 words
    our_state.random_sample(1000)
    theirs, ours = np.arange(50_000, dtype=np.int64), np.arange(50_000, dtype=np.int64)
    numpy_state.shuffle(theirs)
    shuffle(our_state, ours)
    np.testing.assert_array_equal(ours, theirs)


def test_non_1d_arrays_fall_back_to_numpy() -> None:
    theirs, ours = np.arange(60).reshape(20, 3), np.arange(60).reshape(20, 3)
    np.random.RandomState(3).shuffle(theirs)
    shuffle(np.random.RandomState(3), ours)
    np.testing.assert_array_equal(ours, theirs)
