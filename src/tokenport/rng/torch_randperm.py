"""``torch.randperm`` on a CPU generator, bit for bit, in numba and several times faster.

Transformers' length grouping starts from ``torch.randperm(n, generator=g)``; matching its
order means drawing the same permutation. For ``n < 2**32 // 20`` torch fills ``0..n-1`` and
swaps position ``i`` with ``i + random() % (n - i)`` for ``i < n - 1``, ``random()`` being the
next 32-bit MT19937 output of the generator. Here the generator's state is read from
``get_state()``, the same draws run in numba (swap targets drawn a block ahead and
prefetched, as in ``legacy_shuffle``), and the advanced state is written back, so the generator
ends exactly where ``torch.randperm`` would have left it. The permutation is int32 (half the
memory the random swaps touch; ``n`` is below 2**31 on this path), int64 when torch draws it.

The state layout and the algorithm are torch internals, so before the first use in a process
the twin is checked against ``torch.randperm`` itself on a few sizes; if they ever differ,
or for larger ``n`` (64-bit draws), ``torch.randperm`` is called instead.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from .mt19937 import STATE_WORDS, refill, temper
from .mt19937 import seed as mt_seed
from .prefetch import swap_block

__all__ = ["randperm", "seeded_randperm"]

# CPUGeneratorImpl.get_state(): uint64 initial seed, int32 left, int32 seeded, uint64 next,
# then the 624 state words as uint64, then the normal-sampling cache we leave alone.
_LEFT = slice(8, 12)
_NEXT = slice(16, 24)
_WORDS = slice(24, 24 + 8 * STATE_WORDS)
_STATE_BYTES = 5056
_LARGE = 0xFFFFFFFF // 20  # from here torch draws 64-bit numbers with another algorithm
_BLOCK = 4096  # swap targets drawn ahead at once
_CHECK_SIZES = (2, 3, 624, 625, 1000, 5003)

_twin_checked: bool | None = None  # None: not yet checked in this process


def randperm(n: int, generator: Any = None) -> np.ndarray:
    """The values of ``torch.randperm(n, generator=generator)``, advancing the generator the same way.

    ``generator=None`` is torch's default CPU generator, as for ``torch.randperm``.
    """
    import torch

    if generator is None:
        generator = torch.default_generator
    if n < 2 or n >= _LARGE or not _twin_matches_torch(torch):
        return torch.randperm(n, generator=generator).numpy()
    permutation = _draw(n, generator, torch)
    if permutation is None:
        return torch.randperm(n, generator=generator).numpy()
    return permutation


def seeded_randperm(n: int, seed: int) -> np.ndarray | None:
    """``torch.randperm(n, generator=torch.Generator().manual_seed(seed))`` without importing torch (a
    report's figure: the generator's state is MT19937 seeded as ``manual_seed`` seeds it); None for
    ``n`` past the 32-bit draws, where only torch itself can say."""
    if n >= _LARGE:
        return None
    if n < 2:
        return np.arange(n, dtype=np.int32)
    key = np.empty(STATE_WORDS, dtype=np.uint32)
    mt_seed(key, int(seed) & 0xFFFFFFFF)  # manual_seed keeps the low 32 bits
    outputs = np.empty(STATE_WORDS, dtype=np.uint32)
    return _permute(n, key, outputs, STATE_WORDS)[0]  # a fresh generator refills before its first draw


def _draw(n: int, generator: Any, torch: Any) -> np.ndarray | None:
    """The twin's permutation, the generator advanced; None for a state this module cannot read."""
    state = generator.get_state().numpy().copy()
    if state.size != _STATE_BYTES:
        return None
    left = int(state[_LEFT].view(np.int32)[0])
    if not 1 <= left <= STATE_WORDS:
        return None
    key = state[_WORDS].view(np.uint64).astype(np.uint32)
    outputs = np.empty(STATE_WORDS, dtype=np.uint32)
    position = STATE_WORDS + 1 - left  # outputs already drawn from the current block
    if position < STATE_WORDS:
        temper(key, outputs)
    permutation, position = _permute(n, key, outputs, position)
    state[_LEFT] = np.array([STATE_WORDS + 1 - position], dtype=np.int32).view(np.uint8)
    state[_NEXT] = np.array([position], dtype=np.uint64).view(np.uint8)
    state[_WORDS] = key.astype(np.uint64).view(np.uint8)
    generator.set_state(torch.from_numpy(state))
    return permutation


@numba.njit(cache=True)
def _permute(n: int, key: np.ndarray, outputs: np.ndarray, position: int) -> tuple[np.ndarray, int]:
    """torch's forward Fisher-Yates over ``0..n-1``; returns the permutation and the block position."""
    permutation = np.arange(n, dtype=np.int32)
    targets = np.empty(_BLOCK, dtype=np.int64)
    i = 0
    while i < n - 1:
        drawn = 0
        while drawn < _BLOCK and i + drawn < n - 1:
            if position == STATE_WORDS:
                refill(key, outputs)
                position = 0
            remaining = np.uint32(n - i - drawn)
            targets[drawn] = i + drawn + np.int64(outputs[position] % remaining)
            position += 1
            drawn += 1
        i = swap_block(permutation, i, 1, targets, drawn)
    return permutation, position


def _twin_matches_torch(torch: Any) -> bool:
    """Whether the twin equals the installed torch's randperm (permutation and final state); checked once."""
    global _twin_checked
    if _twin_checked is None:
        _twin_checked = all(_agrees(torch, n, seed=1000 + n) for n in _CHECK_SIZES)
    return _twin_checked


def _agrees(torch: Any, n: int, seed: int) -> bool:
    """One comparison of the twin against torch from the same mid-block generator state."""
    ours, theirs = torch.Generator(), torch.Generator()
    for generator in (ours, theirs):
        generator.manual_seed(seed)
        torch.randperm(7, generator=generator)  # start mid-block, as a used generator would
    expected = torch.randperm(n, generator=theirs).numpy()
    permutation = _draw(n, ours, torch)
    return (
        permutation is not None
        and np.array_equal(permutation, expected)
        and torch.equal(ours.get_state(), theirs.get_state())
    )
