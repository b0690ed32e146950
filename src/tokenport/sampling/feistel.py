"""A keyed pseudo-random permutation of ``[0, n)`` evaluated at any position, without building the order.

``StreamSampler(order="feistel")`` draws each epoch's order with it: the id at epoch offset ``i``
is ``feistel_ids([i], n, seed, epoch)``, so a batch costs O(its size) and a resume O(1) in ``n``
and in the position, where ``order="random"`` builds the whole ``n``-id permutation first.

The order, exactly: ``b`` is the smallest even bit width with ``2**b >= n`` (at least 2) and
``h = b // 2``. A value ``x < 2**b`` is split into ``L = x >> h`` and ``R = x & (2**h - 1)``; each
of ``ROUNDS`` rounds maps ``(L, R)`` to ``(R, L ^ F_k(R))`` with
``F_k(R) = splitmix64_finalizer(R ^ k) >> (64 - h)`` (the top ``h`` bits of the well-mixed
64-bit word), and the result is ``(L << h) | R``: a bijection of ``[0, 2**b)``. Round ``r``'s key
is ``k_r = splitmix64(splitmix64(splitmix64(seed) ^ epoch) ^ r)``. Values ``>= n`` are enciphered
again (cycle walking) until they fall below ``n``, which keeps a bijection of ``[0, n)``; since
``2**b < 4n``, that takes fewer than 4 encipherings per id on average.
"""

from __future__ import annotations

import numpy as np

__all__ = ["feistel_ids", "feistel_offsets"]

ROUNDS = 6  # Luby-Rackoff needs 4 with ideal round functions; 2 more for statistical margin at small h
_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB


def splitmix64(value: int) -> int:
    """Return splitmix64's output for state ``value`` (Python ints, 64-bit wrap-around): a key mixer."""
    z = (value + _GOLDEN) & _MASK64
    z = ((z ^ (z >> 30)) * _MIX1) & _MASK64
    z = ((z ^ (z >> 27)) * _MIX2) & _MASK64
    return z ^ (z >> 31)


def round_keys(seed: int, epoch: int, rounds: int = ROUNDS) -> list[int]:
    """Return the 64-bit round keys of (``seed``, ``epoch``): one splitmix64 chain per round."""
    base = splitmix64(splitmix64(seed & _MASK64) ^ (epoch & _MASK64))
    return [splitmix64(base ^ r) for r in range(rounds)]


def half_width(n: int) -> int:
    """Return ``h``: half of the smallest even bit width (at least 2) whose range covers ``n`` values."""
    bits = max(2, (n - 1).bit_length())
    return (bits + 1) // 2


def feistel_ids(offsets: np.ndarray, n: int, seed: int, epoch: int) -> np.ndarray:
    """Map epoch offsets in ``[0, n)`` (any shape, int64) to the ids at those places of the epoch's order."""
    half = half_width(n)
    keys = [np.uint64(k) for k in round_keys(seed, epoch)]
    out = _encipher(offsets.astype(np.uint64), keys, half)
    walking = np.flatnonzero(out >= n)
    flat = out.reshape(-1)
    while walking.size:  # every cycle through an offset < n meets a value < n again: this ends
        values = _encipher(flat[walking], keys, half)
        flat[walking] = values
        walking = walking[values >= n]
    return out.astype(np.int64)


def feistel_offsets(ids: np.ndarray, n: int, seed: int, epoch: int) -> np.ndarray:
    """Map ids in ``[0, n)`` (any shape) to their offsets in the epoch's order: the inverse of ``feistel_ids``.

    Each round is undone in reverse key order, and cycle walking runs backwards (a value ``>= n``
    is deciphered again), so the cost is O(ids) and no order is built.
    """
    half = half_width(n)
    keys = [np.uint64(k) for k in round_keys(seed, epoch)]
    out = _decipher(np.asarray(ids).astype(np.uint64), keys, half)
    walking = np.flatnonzero(out >= n)
    flat = out.reshape(-1)
    while walking.size:
        values = _decipher(flat[walking], keys, half)
        flat[walking] = values
        walking = walking[values >= n]
    return out.astype(np.int64)


def _round(right: np.ndarray, key: np.uint64, top: np.uint64) -> np.ndarray:
    """The round function ``F_k(R)``: the top ``h`` bits of splitmix64's finalizer of ``R ^ k``."""
    f: np.ndarray = np.bitwise_xor(right, key)
    f ^= f >> np.uint64(30)
    f *= np.uint64(_MIX1)
    f ^= f >> np.uint64(27)
    f *= np.uint64(_MIX2)
    f ^= f >> np.uint64(31)
    f >>= top
    return f


def _decipher(values: np.ndarray, keys: list[np.uint64], half: int) -> np.ndarray:
    """Undo ``_encipher``: each round ``(L, R) -> (R, L ^ F(R))`` reversed as ``(L, R) -> (R ^ F(L), L)``."""
    h = np.uint64(half)
    top = np.uint64(64 - half)
    left = values >> h
    right = values & np.uint64((1 << half) - 1)
    for key in reversed(keys):
        left, right = right ^ _round(left, key, top), left
    return (left << h) | right


def _encipher(values: np.ndarray, keys: list[np.uint64], half: int) -> np.ndarray:
    """Apply the balanced Feistel network of ``2 * half`` bits to uint64 ``values`` (a new array)."""
    h = np.uint64(half)
    top = np.uint64(64 - half)
    left = values >> h
    right = values & np.uint64((1 << half) - 1)
    mix1, mix2 = np.uint64(_MIX1), np.uint64(_MIX2)
    s30, s27, s31 = np.uint64(30), np.uint64(27), np.uint64(31)
    for key in keys:
        f = right ^ key
        f ^= f >> s30
        f *= mix1
        f ^= f >> s27
        f *= mix2
        f ^= f >> s31
        f >>= top
        f ^= left
        left, right = right, f
    left <<= h
    left |= right
    return left
