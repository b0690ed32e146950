"""numpy's legacy ``RandomState.shuffle``, bit for bit, two to three times faster.

Megatron-exact indices mean sharing Megatron's shuffles, and those dominate an index build.
``RandomState.shuffle`` is a Fisher-Yates pass whose swap ``j`` for position ``i`` is drawn by
``random_interval(i)``: MT19937 32-bit outputs (64-bit above 2**32 - 1) masked to the smallest
all-ones mask covering ``i``, redrawn while above ``i``. Here the same generator runs in numba,
twisting and tempering 624 outputs at a time; the draws are made a block ahead of the swaps
and each swap's target is prefetched a few dozen swaps ahead, so the random memory accesses
overlap instead of waiting on memory one by one. Seeding is MT19937's init_genrand, as
``RandomState(int)`` does, so a sequence of shuffles matches numpy's.
"""

from __future__ import annotations

import numba
import numpy as np

from .mt19937 import STATE_WORDS as _STATE_WORDS
from .mt19937 import refill as _refill
from .mt19937 import seed as _seed
from .prefetch import swap_block

_BLOCK = 4096  # swaps whose targets are drawn ahead at once


class LegacyShuffler:
    """``numpy.random.RandomState(seed)``, seeded the same way, for its ``shuffle`` calls only.

    Consecutive ``shuffle`` calls permute exactly as consecutive ``RandomState(seed).shuffle``
    calls do. Seeding and state live here, not in a RandomState, because reading and writing a
    RandomState's state costs ~0.2 ms a call, more than shuffling a small split.
    """

    def __init__(self, seed: int) -> None:
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed <= 0xFFFFFFFF:
            raise ValueError(f"seed={seed!r}: expected an integer in [0, 2**32 - 1], as RandomState does")
        self._key = np.empty(_STATE_WORDS, dtype=np.uint32)
        self._outputs = np.empty(_STATE_WORDS, dtype=np.uint32)
        _seed(self._key, int(seed))
        self._position = _STATE_WORDS

    def shuffle(self, array: np.ndarray) -> None:
        """Shuffle the 1-D ``array`` in place, as the RandomState's next ``shuffle(array)`` would."""
        if array.ndim != 1:
            raise ValueError(f"shuffle takes a 1-D array, got shape {array.shape}")
        # Swapping moves bits, whatever they mean: integers of one width share one compiled kernel (a
        # fresh process loads one machine-code object fewer for Megatron's int32 and uint32 indices).
        same = _SHUFFLED_AS.get((array.dtype.kind, array.dtype.itemsize))
        target = array.view(same) if same is not None else array
        self._position = _shuffle(target, self._key, self._outputs, self._position)


_SHUFFLED_AS = {("u", 4): np.int32, ("u", 8): np.int64}


@numba.njit(cache=True, inline="always")
def _mask(bound: np.uint64) -> np.uint64:
    """The smallest all-ones bit mask covering ``bound``."""
    mask = bound
    mask |= mask >> np.uint64(1)
    mask |= mask >> np.uint64(2)
    mask |= mask >> np.uint64(4)
    mask |= mask >> np.uint64(8)
    mask |= mask >> np.uint64(16)
    mask |= mask >> np.uint64(32)
    return mask


@numba.njit(cache=True)
def _random_interval_64(bound: int, key: np.ndarray, outputs: np.ndarray, position: int) -> tuple[int, int]:
    """numpy's random_interval above 2**32 - 1: 64-bit draws, the first output the high word."""
    limit = np.uint64(bound)
    mask = _mask(limit)
    while True:
        if position == _STATE_WORDS:
            _refill(key, outputs)
            position = 0
        high = np.uint64(outputs[position])
        position += 1
        if position == _STATE_WORDS:
            _refill(key, outputs)
            position = 0
        value = ((high << np.uint64(32)) | np.uint64(outputs[position])) & mask
        position += 1
        if value <= limit:
            return int(value), position


@numba.njit(cache=True)
def _shuffle(array: np.ndarray, key: np.ndarray, outputs: np.ndarray, position: int) -> int:
    """Fisher-Yates from the top, swap targets drawn ``_BLOCK`` at a time; returns the block position.

    Each target is numpy's random_interval(i): 32-bit outputs masked to cover ``i``, redrawn
    while above it. The refill check is written out here: behind a helper (inlined or not)
    numba's code ran about twice as slow.
    """
    targets = np.empty(_BLOCK, dtype=np.int64)
    i = array.shape[0] - 1
    while i > 0:
        drawn = 0
        while drawn < _BLOCK and i - drawn > 0:
            bound = i - drawn
            if bound > 0xFFFFFFFF:
                targets[drawn], position = _random_interval_64(bound, key, outputs, position)
            else:
                limit = np.uint64(bound)
                mask = _mask(limit)
                while True:
                    if position == _STATE_WORDS:
                        _refill(key, outputs)
                        position = 0
                    value = np.uint64(outputs[position]) & mask
                    position += 1
                    if value <= limit:
                        break
                targets[drawn] = np.int64(value)
            drawn += 1
        i = swap_block(array, i, -1, targets, drawn)
    return position
