"""The samplers' inverse order (tokenport where's order part): places of sample ids in a 10^9-sample run.

What is timed: ``sampling.inverse.stream_positions(sampler, ids, stop)`` over one pass of a run of
10^9 samples (global batch 8 x 128 ranks), for 10 and 10^5 distinct random sample ids, best of 3
with time.perf_counter. The dataset side (``dataset.occurrences``: a document's samples) is not in it.

    python benchmarks/bench_where_order.py
"""

from __future__ import annotations

import numpy as np

from _harness import best_of
from tokenport.sampling import PretrainingSampler, RandomSampler, StreamSampler
from tokenport.sampling.inverse import stream_positions

TOTAL = 10**9


def main() -> None:
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
            seconds = best_of(lambda s=sampler, i=ids: stream_positions(s, i, TOTAL), 3)
            print(f"{name:42s} {len(ids):>7d} ids: {seconds * 1e3:9.1f} ms")


if __name__ == "__main__":
    main()
