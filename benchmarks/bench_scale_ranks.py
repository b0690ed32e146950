"""10^4 data-parallel ranks' samplers in one process: an epoch served exactly once, and memory per rank.

For each sampler kind, R ranks (micro batch 1, data_parallel_size R) of an epoch of N samples are
built in one process and all kept alive, as R trainer processes would hold them; each is walked
through its epoch (lists of Python ints, what a DataLoader's batch_sampler hands on). Checked, not
timed: a counting array (``np.bincount``) shows every id served exactly once, and the ranks'
micro-batches side by side in rank order equal the global stream the sampler defines.

Memory per rank: tracemalloc's growth (numpy's arrays are traced) from R/10 to R ranks, each
built and having handed out its first batch, divided by the ranks added; "held at R" is the total.

    python benchmarks/bench_scale_ranks.py                        # R = 10^4, N = 10^7
    python benchmarks/bench_scale_ranks.py --samples 100000000    # N = 10^8 (a few minutes)
    python benchmarks/bench_scale_ranks.py --quick                # R = 10^3, N = 10^6

Kinds: StreamSampler order="random" and "feistel", RandomSampler (numpy order, data sharding, its
default) and PretrainingSampler. No peer, no goal: the figures are the simulation's.
"""

from __future__ import annotations

import argparse
import gc
import math
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np

from _harness import Row, print_table
from tokenport.sampling import PretrainingSampler, RandomSampler, StreamSampler

Make = Callable[[int, int, int], Any]  # (total, rank, data_parallel_size) -> a rank's sampler

KINDS: dict[str, Make] = {
    "StreamSampler random": lambda n, r, dp: StreamSampler(n, 0, 1, r, dp, seed=5, order="random"),
    "StreamSampler feistel": lambda n, r, dp: StreamSampler(n, 0, 1, r, dp, seed=5, order="feistel"),
    "RandomSampler": lambda n, r, dp: RandomSampler(n, 0, 1, r, dp, seed=5),
    "PretrainingSampler": lambda n, r, dp: PretrainingSampler(n, 0, 1, r, dp),
}


def walk(make: Make, total: int, ranks: int) -> tuple[float, float]:
    """(seconds to build the ranks, seconds to walk their epoch); raises unless the epoch is exact."""
    started = time.perf_counter()
    samplers = [make(total, rank, ranks) for rank in range(ranks)]
    built = time.perf_counter() - started
    grid = np.empty((total // ranks, ranks), dtype=np.int64)
    started = time.perf_counter()
    for rank, sampler in enumerate(samplers):
        grid[:, rank] = np.fromiter((i for batch in sampler for i in batch), dtype=np.int64, count=len(grid))
    walked = time.perf_counter() - started
    counts = np.bincount(grid.ravel(), minlength=total)
    if counts.min() != 1 or counts.max() != 1:
        raise AssertionError(f"{type(samplers[0]).__name__}: an id served {counts.max()} or {counts.min()} times")
    first = samplers[0]
    reference = first.global_batches(0).ravel() if isinstance(first, RandomSampler) else first.global_stream(0, total)
    if not np.array_equal(grid.ravel(), reference):
        raise AssertionError(f"{type(first).__name__}: the ranks side by side are not the global stream")
    return built, walked


def held_bytes(make: Make, total: int, ranks: int, of: int) -> int:
    """Bytes held by ``ranks`` of ``of`` ranks' samplers, each having handed out its first batch."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        held = []
        for rank in range(ranks):
            sampler = make(total, rank, of)
            next(iter(sampler))
            held.append(sampler)
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=10_000, help="data-parallel ranks R")
    parser.add_argument("--samples", type=int, default=10**7, help="samples per epoch N (a multiple of R)")
    parser.add_argument("--quick", action="store_true", help="R = 10^3, N = 10^6")
    args = parser.parse_args()
    ranks, total = (1_000, 10**6) if args.quick else (args.ranks, args.samples)
    total -= total % ranks
    rows: list[Row] = []
    nan = math.nan
    for kind, make in KINDS.items():
        built, walked = walk(make, total, ranks)
        small, large = held_bytes(make, total, ranks // 10, ranks), held_bytes(make, total, ranks, ranks)
        per_rank = (large - small) / (ranks - ranks // 10)
        case = f"{kind}, {ranks:,} ranks, {total:,} samples"
        rows.append(Row("scale ranks", f"{case}, build all", "s", built, nan, "-"))
        rows.append(Row("scale ranks", f"{case}, walk epoch", "s", walked, nan, "-"))
        rows.append(Row("scale ranks", f"{case}, held at R", "MB", large / 1e6, nan, "-"))
        rows.append(Row("scale ranks", f"{case}, per rank added", "bytes", per_rank, nan, "-"))
        print(f"{kind}: exact (each id once, ranks = global stream)", flush=True)
    print_table(rows)


if __name__ == "__main__":
    main()
