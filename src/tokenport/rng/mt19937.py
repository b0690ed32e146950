"""MT19937 in numba: the generator behind numpy's legacy ``RandomState`` and torch's CPU generator.

The state is 624 untempered 32-bit words (``key``). ``refill`` twists them and tempers the
whole block into ``outputs``, so callers draw by indexing ``outputs`` and refill every 624
draws; ``temper`` makes the outputs of a key that was handed over mid-block (torch's state).
"""

from __future__ import annotations

import numba
import numpy as np

STATE_WORDS = 624  # MT19937 state length (N)
_SHIFT_WORDS = 397  # MT19937 middle word offset (M)


@numba.njit(cache=True)
def seed(key: np.ndarray, value: int) -> None:
    """MT19937's init_genrand, which ``RandomState(int)`` and ``torch.Generator.manual_seed`` use."""
    word = np.uint64(value)  # uint64 with explicit masks: numba widens uint32 products
    key[0] = word
    for i in range(1, STATE_WORDS):
        word = (np.uint64(1812433253) * (word ^ (word >> np.uint64(30))) + np.uint64(i)) & np.uint64(0xFFFFFFFF)
        key[i] = word


@numba.njit(cache=True, inline="always")
def _twist(key: np.ndarray, i: int, following: int, shifted: int) -> None:
    """One word of MT19937's twist: mix word i with its follower and the word M ahead."""
    y = (key[i] & np.uint32(0x80000000)) | (key[following] & np.uint32(0x7FFFFFFF))
    key[i] = key[shifted] ^ (y >> np.uint32(1)) ^ (np.uint32(0x9908B0DF) * (y & np.uint32(1)))


@numba.njit(cache=True)
def temper(key: np.ndarray, outputs: np.ndarray) -> None:
    """Temper all 624 words of ``key`` into ``outputs`` (branch-free, so LLVM vectorizes)."""
    for i in range(STATE_WORDS):
        y = key[i]
        y ^= y >> np.uint32(11)
        y ^= (y << np.uint32(7)) & np.uint32(0x9D2C5680)
        y ^= (y << np.uint32(15)) & np.uint32(0xEFC60000)
        y ^= y >> np.uint32(18)
        outputs[i] = y


@numba.njit(cache=True)
def refill(key: np.ndarray, outputs: np.ndarray) -> None:
    """Twist the 624 state words and temper them into the next 624 outputs."""
    for i in range(STATE_WORDS - _SHIFT_WORDS):  # three runs, so no index needs a modulo
        _twist(key, i, i + 1, i + _SHIFT_WORDS)
    for i in range(STATE_WORDS - _SHIFT_WORDS, STATE_WORDS - 1):
        _twist(key, i, i + 1, i + _SHIFT_WORDS - STATE_WORDS)
    _twist(key, STATE_WORDS - 1, 0, _SHIFT_WORDS - 1)
    temper(key, outputs)
