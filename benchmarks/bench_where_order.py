"""The samplers' inverse order (tokenport where's order part): places of sample ids in a 10^9-sample run.

What is timed: ``sampling.inverse.stream_positions(sampler, ids, stop)`` over one pass (``epoch_length``) of a run of
10^9 samples (global batch 8 x 128 ranks), for 10 and 10^5 distinct random sample ids, best of 3
with time.perf_counter. The orders with no closed-form inverse (StreamSampler order="random",
RandomSampler without data sharding or in Megatron's mode) replay each epoch's order and search it:
O(total) time and the order's own memory; they are timed once at 10^8 samples (``--replayed``, a
machine with ~16 GB free for 10^9) with the process's peak RSS growth. The dataset side
(``dataset.occurrences``: a document's samples) is not in it: see bench_where.py.

    python benchmarks/bench_where_order.py
    python benchmarks/bench_where_order.py --replayed 1e9
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from _harness import best_of
from tokenport.sampling import PretrainingSampler, RandomSampler, StreamSampler
from tokenport.sampling.inverse import epoch_length, stream_positions

TOTAL = 10**9


def _peak() -> int:
    """The process's peak RSS in bytes (VmHWM)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--replayed", type=float, default=1e8, help="samples of the replayed orders' run")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    samplers = {
        "StreamSampler feistel (inverted)": StreamSampler(TOTAL, 0, 8, 0, 128, seed=1, order="feistel"),
        "PretrainingSampler (inverted)": PretrainingSampler(TOTAL, 0, 8, 0, 128),
        "RandomSampler sharded (buckets replayed)": RandomSampler(TOTAL, 0, 8, 0, 128, seed=1),
    }
    for name, sampler in samplers.items():
        for count in (10, 10**5):
            if count > 10 and isinstance(sampler, RandomSampler):
                continue  # one bucket order drawn per slot asked: 10^5 ids draw every slot's
            ids = np.unique(rng.integers(0, TOTAL, count))
            seconds = best_of(lambda s=sampler, i=ids: stream_positions(s, i, epoch_length(s)), 3)
            print(f"{name:42s} {len(ids):>7d} ids of 10^9: {seconds * 1e3:9.1f} ms")
    total = int(args.replayed)
    replayed = {
        "StreamSampler random (replayed)": StreamSampler(total, 0, 8, 0, 128, seed=1, order="random"),
        "RandomSampler unsharded (replayed)": RandomSampler(total, 0, 8, 0, 128, seed=1, data_sharding=False),
        "RandomSampler Megatron's (replayed)": RandomSampler(total, 0, 8, 0, 128, megatron_compat=True),
    }
    for name, sampler in replayed.items():
        ids = np.unique(rng.integers(0, total, 10))
        stream_positions(sampler, ids[:0], 1)  # what it imports (torch), before the clock
        _reset_peak()
        before = _peak()
        start = time.perf_counter()
        stream_positions(sampler, ids, epoch_length(sampler))  # one pass, as where plans the run
        seconds = time.perf_counter() - start
        grown = (_peak() - before) / 1e6
        print(f"{name:42s} {len(ids):>7d} ids of {total:.0e}: {seconds * 1e3:9.1f} ms, peak RSS +{grown:,.0f} MB")


if __name__ == "__main__":
    main()
