"""order="feistel": a keyed permutation of each epoch computed per position (no O(N) order, O(1) resume)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenport.sampling import StreamSampler
from tokenport.sampling.feistel import ROUNDS, feistel_ids, half_width

M64 = (1 << 64) - 1


def finalizer(z):
    """splitmix64's output function of a 64-bit word."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def splitmix64(x):
    return finalizer((x + 0x9E3779B97F4A7C15) & M64)


def reference_id(offset, n, seed, epoch):
    """The order as feistel.py's docstring defines it, one offset at a time in plain Python ints."""
    bits = max(2, (n - 1).bit_length())
    bits += bits % 2
    h = bits // 2
    base = splitmix64(splitmix64(seed) ^ epoch)
    keys = [splitmix64(base ^ r) for r in range(ROUNDS)]
    x = offset
    while True:
        left, right = x >> h, x & ((1 << h) - 1)
        for k in keys:
            left, right = right, left ^ (finalizer(right ^ k) >> (64 - h))
        x = (left << h) | right
        if x < n:
            return x


def is_permutation(ids, n):
    return ids.dtype == np.int64 and np.array_equal(np.sort(ids), np.arange(n))


SIZES = [1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17, 31, 32, 33, 97, 127, 128, 129, 1000, 4096, 4097, 65521, 65537]


@pytest.mark.parametrize("n", SIZES)
def test_each_epoch_is_a_permutation_of_all_ids(n):
    for seed, epoch in ((0, 0), (7, 3), (2**32 - 1, 10**6)):
        assert is_permutation(feistel_ids(np.arange(n, dtype=np.int64), n, seed, epoch), n), (n, seed, epoch)


@settings(max_examples=80, deadline=None)
@given(
    n=st.one_of(
        st.integers(1, 5000),
        st.integers(1, 13).map(lambda k: 2**k),
        st.integers(0, 13).map(lambda k: 2**k + 1),
        st.sampled_from([3, 5, 7, 11, 13, 251, 257, 1021, 2039, 4093]),
    ),
    seed=st.integers(0, 2**32 - 1),
    epoch=st.integers(0, 10**9),
)
def test_any_size_seed_and_epoch_give_a_permutation(n, seed, epoch):
    ids = feistel_ids(np.arange(n, dtype=np.int64), n, seed, epoch)
    assert is_permutation(ids, n)
    picked = np.array([0, n // 3, n - 1], dtype=np.int64)  # any shape, any subset: the same ids
    assert np.array_equal(feistel_ids(picked.reshape(3, 1), n, seed, epoch).ravel(), ids[picked])


@pytest.mark.parametrize("n", [1, 2, 3, 17, 1000, 2**20 + 1, 10**9, 10**15])
def test_the_vectorized_order_is_the_documented_one(n):
    offsets = np.unique(np.linspace(0, n - 1, 25, dtype=np.int64))
    got = feistel_ids(offsets, n, 1234, 5).tolist()
    assert got == [reference_id(int(i), n, 1234, 5) for i in offsets]
    assert half_width(n) == (max(2, (n - 1).bit_length()) + 1) // 2


def test_seeds_and_epochs_give_different_orders():
    n = 1000
    orders = {
        (seed, epoch): feistel_ids(np.arange(n, dtype=np.int64), n, seed, epoch).tobytes()
        for seed in range(4)
        for epoch in range(4)
    }
    assert len(set(orders.values())) == 16
    # both orders of 2 ids occur (no seed-independent order at tiny sizes)
    assert {tuple(feistel_ids(np.arange(2), 2, seed, 0).tolist()) for seed in range(20)} == {(0, 1), (1, 0)}


def test_small_ids_spread_across_the_epoch():
    n = 100_003
    ids = feistel_ids(np.arange(n, dtype=np.int64), n, 99, 0)
    position = np.empty(n, np.int64)
    position[ids] = np.arange(n)
    deciles = np.bincount(position[:2000] * 10 // n, minlength=10)  # where ids 0..1999 land
    assert deciles.min() > 140 and deciles.max() < 260, deciles  # 200 expected in each tenth
    # no trace of the identity: neighbouring offsets map to unrelated ids
    steps = np.abs(np.diff(ids[:5000]))
    assert np.median(steps) > n / 5
    # across seeds, where id 0 lands is spread over the whole epoch
    firsts = [int(np.flatnonzero(feistel_ids(np.arange(1000), 1000, seed, 0) == 0)[0]) for seed in range(400)]
    assert np.bincount(np.array(firsts) // 100, minlength=10).min() > 20  # 40 expected in each tenth


def test_resume_at_any_position_of_a_huge_epoch_needs_no_order():
    total = 10**15  # the "random" order would need 8 PB per rank
    start = 6 * 10**14 + 12_345
    sampler = StreamSampler(total, start, 4, 1, 2, seed=3, order="feistel")
    tracemalloc.start()
    batch = next(iter(sampler))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 16 << 20, peak  # a chunk of batches (4096 rows here), nothing the size of an epoch
    assert batch == feistel_ids(np.arange(start + 4, start + 8), total, 3, 0).tolist()
    state = sampler.state_dict()
    resumed = StreamSampler(total, 0, 8, 0, 1, seed=3, order="feistel")
    resumed.load_state_dict(state)
    assert next(iter(resumed)) == sampler.global_stream(start + 8, start + 16).tolist()
