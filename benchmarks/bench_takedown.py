"""What a takedown costs a loader: the removal call, and each batch handed over while removals are active.

A store of 20,000 documents (2,000 with --quick), 400 tokens each on average (lognormal), cut into
GPT samples of 1,024 tokens and read by ``StatefulLoader.for_dataset`` (StreamSampler, feistel order,
micro-batch 8, one rank, no workers). The loop is timed over ``--steps`` batches without a removal and
with 100 documents removed (``loader.remove_documents`` before the loop: the affected samples found
once through ``dataset.occurrences``, each handed batch's affected rows copied and masked). The
baseline is the same loop without the removal: the ratio is what the masking adds to the loader.

    python benchmarks/bench_takedown.py
    python benchmarks/bench_takedown.py --quick
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import tokenport as tp
from _harness import Row, lognormal_lengths, print_table, scratch_directory

REMOVED = 100


def write_store(prefix: str, documents: int) -> str:
    rng = np.random.default_rng(7)
    lengths = lognormal_lengths(rng, documents, 400.0, 0.6)
    tokens = rng.integers(0, 255, int(lengths.sum()), dtype=np.int64)
    with tp.IndexedDatasetWriter(prefix, tokenizer=tp.load_tokenizer("byte")) as writer:
        writer.add_documents(tokens, lengths)
    return prefix


def loop(dataset, steps: int, removed: list[tuple[str, int]]) -> tuple[float, float]:
    """(seconds of the remove_documents call, seconds per batch over ``steps`` batches)."""
    loader = tp.StatefulLoader.for_dataset(dataset, micro_batch_size=8, seed=1)
    started = time.perf_counter()
    if removed:
        loader.remove_documents(removed)
    call = time.perf_counter() - started
    batches = iter(loader)
    next(batches)  # the DataLoader's start, timed in neither run
    started = time.perf_counter()
    for _ in range(steps):
        next(batches)
    return call, (time.perf_counter() - started) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 documents, 100 steps")
    parser.add_argument("--steps", type=int, default=None, help="batches timed per run")
    parser.add_argument("--repeat", type=int, default=3, help="runs per case; the best is kept")
    parser.add_argument("--dir", default=None, help="scratch directory (kept)")
    args = parser.parse_args()
    documents = 2_000 if args.quick else 20_000
    steps = args.steps or (100 if args.quick else 400)
    with scratch_directory(args.dir, "bench-takedown-", args.quick) as directory:
        prefix = write_store(os.path.join(directory, "store"), documents)
        store = tp.IndexedDataset(prefix)
        config = tp.GPTSampleConfig(seq_length=1024)
        dataset = tp.GPTDataset(store, np.arange(len(store)), steps * 8 + 8, config, seed=3)
        rng = np.random.default_rng(11)
        removed = [(prefix, int(d)) for d in rng.choice(len(store), REMOVED, replace=False)]
        plain = min(loop(dataset, steps, [])[1] for _ in range(args.repeat))
        timed = [loop(dataset, steps, removed) for _ in range(args.repeat)]
        call, masked = min(t[0] for t in timed), min(t[1] for t in timed)
        rows = [
            Row(
                "takedown",
                f"{REMOVED} of {documents:,} documents removed, 8 x 1,024 tokens a batch",
                "ms/batch",
                masked * 1e3,
                plain * 1e3,
                "no removal",
                lower_is_better=True,
            ),
        ]
        print_table(rows)
        print(f"remove_documents({REMOVED} documents): {call * 1e3:.2f} ms (the affected samples found once)")


if __name__ == "__main__":
    main()
