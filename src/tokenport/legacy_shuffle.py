"""numpy's legacy ``RandomState.shuffle``, bit for bit, about 2.5x faster.

Megatron-exact indices mean sharing Megatron's shuffles, and those dominate an index build.
``RandomState.shuffle`` is a Fisher-Yates pass whose swap ``j`` for position ``i`` is drawn by
``random_interval(i)``: MT19937 32-bit outputs (64-bit above 2**32 - 1) masked to the smallest
all-ones mask covering ``i``, redrawn while above ``i``. Here the same generator runs in numba,
and the draws are made a block ahead of the swaps, so the random memory accesses of the swaps
overlap instead of waiting on the generator one by one. The generator state is read from and
written back to the ``RandomState``, so later draws from it continue exactly as numpy's would.
"""

from __future__ import annotations

import numba
import numpy as np

_STATE_WORDS = 624  # MT19937 state length (N)
_SHIFT_WORDS = 397  # MT19937 middle word offset (M)
_BLOCK = 4096  # swaps whose targets are drawn ahead at once


def shuffle(random_state: np.random.RandomState, array: np.ndarray) -> None:
    """Shuffle the 1-D ``array`` in place exactly as ``random_state.shuffle(array)`` would."""
    if array.ndim != 1 or random_state.get_state()[0] != "MT19937":
        random_state.shuffle(array)  # not a case the kernel handles: let numpy do it
        return
    name, key, position, has_gauss, cached_gaussian = random_state.get_state()
    key = np.array(key, dtype=np.uint32)
    position = _shuffle(array, key, int(position))
    random_state.set_state((name, key, position, has_gauss, cached_gaussian))


@numba.njit(cache=True, inline="always")
def _regenerate(key: np.ndarray) -> None:
    """Refill the 624 state words (MT19937's twist)."""
    for i in range(_STATE_WORDS):
        y = (key[i] & np.uint32(0x80000000)) | (key[(i + 1) % _STATE_WORDS] & np.uint32(0x7FFFFFFF))
        value = key[(i + _SHIFT_WORDS) % _STATE_WORDS] ^ (y >> np.uint32(1))
        if y & np.uint32(1):
            value ^= np.uint32(0x9908B0DF)
        key[i] = value


@numba.njit(cache=True, inline="always")
def _next_uint32(key: np.ndarray, position: int) -> tuple[np.uint32, int]:
    """The next tempered 32-bit output and the new state position."""
    if position == _STATE_WORDS:
        _regenerate(key)
        position = 0
    y = key[position]
    y ^= y >> np.uint32(11)
    y ^= (y << np.uint32(7)) & np.uint32(0x9D2C5680)
    y ^= (y << np.uint32(15)) & np.uint32(0xEFC60000)
    y ^= y >> np.uint32(18)
    return y, position + 1


@numba.njit(cache=True, inline="always")
def _random_interval(bound: int, key: np.ndarray, position: int) -> tuple[int, int]:
    """A uniform integer in [0, bound] by masked rejection, as numpy's random_interval draws it."""
    limit = np.uint64(bound)
    mask = limit
    mask |= mask >> np.uint64(1)
    mask |= mask >> np.uint64(2)
    mask |= mask >> np.uint64(4)
    mask |= mask >> np.uint64(8)
    mask |= mask >> np.uint64(16)
    mask |= mask >> np.uint64(32)
    while True:
        high, position = _next_uint32(key, position)
        if bound > 0xFFFFFFFF:  # numpy's next_uint64: the first draw is the high word
            low, position = _next_uint32(key, position)
            value = ((np.uint64(high) << np.uint64(32)) | np.uint64(low)) & mask
        else:
            value = np.uint64(high) & mask
        if value <= limit:
            return int(value), position


@numba.njit(cache=True)
def _shuffle(array: np.ndarray, key: np.ndarray, position: int) -> int:
    """Fisher-Yates from the top, swap targets drawn ``_BLOCK`` at a time; returns the state position."""
    targets = np.empty(_BLOCK, dtype=np.int64)
    i = array.shape[0] - 1
    while i > 0:
        drawn = 0
        while drawn < _BLOCK and i - drawn > 0:
            targets[drawn], position = _random_interval(i - drawn, key, position)
            drawn += 1
        for k in range(drawn):
            j = targets[k]
            swap = array[i]
            array[i] = array[j]
            array[j] = swap
            i -= 1
    return position
