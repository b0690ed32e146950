"""10^4 data-parallel ranks in one process: every sample exactly once per epoch, O(1) memory per rank.

Every rank's sampler is built and walked for one epoch; a counting array checks that each id is served
once, and the ranks' micro-batches put side by side in rank order equal the global stream a one-rank
sampler defines. Memory: tracemalloc's growth from 10^3 to 10^4 ranks, per rank added. The loader's
read plan (``SampleDataset.read_plan``, what ``_readahead`` hands the stores) of every rank's share
of an epoch, put together, equals the plan of the whole epoch. Full size: benchmarks/bench_scale_ranks.py.
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import tokenport as tp
from tests._support.stores import build_store
from tokenport.samples.gpt import GPTDataset, GPTSampleConfig
from tokenport.sampling import stream

RANKS = 10_000
PER_SLOT = 20  # global batches per epoch
TOTAL = RANKS * PER_SLOT

Make = Callable[[int, int], Any]  # (rank, data_parallel_size) -> a rank's sampler (micro batch 1)

KINDS: dict[str, Make] = {
    "stream-random": lambda r, dp: tp.StreamSampler(TOTAL, 0, 1, r, dp, seed=5, order="random"),
    "stream-feistel": lambda r, dp: tp.StreamSampler(TOTAL, 0, 1, r, dp, seed=5, order="feistel"),
    "random-sharded": lambda r, dp: tp.RandomSampler(TOTAL, 0, 1, r, dp, seed=5),
    "pretraining": lambda r, dp: tp.PretrainingSampler(TOTAL, 0, 1, r, dp),
}


def _epoch_by_rank(make: Make, ranks: int) -> np.ndarray:
    """(batches, ranks): rank r's micro-batch of each global batch of one epoch, each rank's sampler walked."""
    samplers = [make(rank, ranks) for rank in range(ranks)]  # all alive at once, as in the simulated job
    columns = [np.fromiter((i for batch in sampler for i in batch), dtype=np.int64) for sampler in samplers]
    return np.stack(columns, axis=1)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_sample_once_per_epoch_on_10k_ranks(kind: str) -> None:
    """The 10^4 ranks serve each id once per epoch, and side by side they are the one-rank stream."""
    grid = _epoch_by_rank(KINDS[kind], RANKS)
    assert grid.shape == (PER_SLOT, RANKS)
    assert np.array_equal(np.bincount(grid.ravel(), minlength=TOTAL), np.ones(TOTAL, dtype=np.int64))
    one = KINDS[kind](0, RANKS)
    reference = one.global_batches(0).ravel() if kind == "random-sharded" else one.global_stream(0, TOTAL)
    assert np.array_equal(grid.ravel(), reference)


def _traced_bytes(make: Make, ranks: int) -> int:
    """Bytes held by ``ranks`` samplers (dp size RANKS), each having handed out its first batch."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        held = []
        for rank in range(ranks):
            sampler = make(rank, RANKS)
            next(iter(sampler))
            held.append(sampler)
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("kind", ["stream-random", "stream-feistel", "pretraining"])
def test_memory_per_rank_does_not_grow_with_the_epoch(kind: str) -> None:
    """From 10^3 to 4 * 10^3 ranks (of 10^4) each added rank holds a few KB, not its own copy of the epoch's order.

    Before the ranks of a process shared a "random" order, each added rank held 4 bytes a sample
    (800 KB here); the bound is a tenth of that, whatever the sampler's object overhead."""
    small, large = _traced_bytes(KINDS[kind], 1_000), _traced_bytes(KINDS[kind], 4_000)
    per_rank = (large - small) / 3_000
    assert per_rank < 0.4 * TOTAL, per_rank


def test_ranks_share_one_random_order_and_it_is_the_unshared_one() -> None:
    """Samplers of one (total, seed, epoch) share a read-only order equal to numpy's permutation; it is
    freed with the last of them, and another seed or epoch gets its own."""
    a, b = (tp.StreamSampler(TOTAL, 0, 1, r, 2, seed=9) for r in (0, 1))
    assert a.epoch_order(0) is b.epoch_order(0)
    assert not a.epoch_order(0).flags.writeable
    assert np.array_equal(a.epoch_order(0), np.random.default_rng([9, 0]).permutation(TOTAL))
    assert not np.array_equal(tp.StreamSampler(TOTAL, 0, 1, 0, 1, seed=8).epoch_order(0), a.epoch_order(0))
    assert not np.array_equal(a.epoch_order(1), b.epoch_order(0))  # a moved on; b keeps epoch 0
    del a, b
    gc.collect()
    assert (TOTAL, 9, 0) not in stream._SHARED_ORDERS


def test_read_plans_of_10k_ranks_make_the_epochs_plan(tmp_path) -> None:
    """Every rank's read plan for its share of an epoch, put together, reads what the whole epoch reads."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 12, 60_000)
    prefix = build_store(tmp_path / "s", rng.integers(3, 900, int(lengths.sum())), lengths=lengths, dtype=np.uint16)
    dataset = GPTDataset(tp.IndexedDataset(prefix), np.arange(len(lengths)), 1, GPTSampleConfig(4, eod_id=2), 1)
    samples = len(dataset) - len(dataset) % RANKS
    samplers = [tp.StreamSampler(samples, 0, 1, rank, RANKS, seed=3) for rank in range(RANKS)]
    pieces = []
    for sampler in samplers:
        ids = [i for batch in sampler for i in batch]
        [(_, documents, offsets, counts)] = dataset.read_plan(ids)
        pieces.append(np.stack([documents, offsets, counts], axis=1))
    ours = np.concatenate(pieces)
    [(_, documents, offsets, counts)] = dataset.read_plan(np.arange(samples))
    whole = np.stack([documents, offsets, counts], axis=1)
    assert np.array_equal(_sorted_rows(ours), _sorted_rows(whole))
    assert int(ours[:, 2].sum()) == samples * 5  # seq_length + 1 tokens a sample


def _sorted_rows(rows: np.ndarray) -> np.ndarray:
    return rows[np.lexsort(rows.T[::-1])]
