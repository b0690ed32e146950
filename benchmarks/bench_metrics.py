"""What live metrics cost the loader: StatefulLoader throughput with tokenport.metrics off vs on.

One GPTDataset over a store of random documents (seq_length 2048, micro batch 8, shuffled), the
same loader options on both sides, in the same process, the file in the page cache. The training
loop does nothing with a batch but take it, so the figure is the loader's own rate (samples per
second into the loop) and the metrics' cost is as large a share of it as it can be. The clock starts
after the first batch (worker start-up left out). Best of N runs, the sides timed in turns (A B A B).
The "on" side records what ``metrics.serve`` would export (samples, tokens, wait histogram, queue
depth per batch) into its registry; no scrape happens while it is timed.

Section "mixture update": one ``StatefulLoader.set_mixture`` with metrics on (target and realized
shares recorded) over an AdaptiveBlend that already holds many updates (one every 2 samples, all
realized): 10 datasets after 10^6 updates and 1,000 datasets after 10^4 (quick: 10^5 and 10^3; 10^6
updates of 1,000 weights would hold 16 GB of weights), beside the same after 10 updates. Goal < 50 us
per update, whatever the updates so far.

    python benchmarks/bench_metrics.py            # 2000 batches per run
    python benchmarks/bench_metrics.py --quick    # 400 batches per run
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import numpy as np
import torch

import tokenport as tp
from _harness import Row, best_of, best_of_each, lognormal_lengths, print_table, scratch_directory
from tokenport import metrics
from tokenport.blend import AdaptiveBlend
from tokenport.integrations import StatefulLoader
from tokenport.sampling import PretrainingSampler, RandomSampler

EOD = 2
SEQ_LENGTH = 2048
MICRO_BATCH = 8
DOCUMENTS = 20_000
SAMPLES = 50_000


def gpt_dataset(directory: str, seed: int) -> tp.GPTDataset:
    """A GPTDataset of SAMPLES samples over a uint16 store of random documents (lognormal lengths)."""
    rng = np.random.default_rng(seed)
    lengths = lognormal_lengths(rng, DOCUMENTS, 1000, 1.0)
    tokens = rng.integers(EOD + 1, 50_000, int(lengths.sum())).astype(np.uint16)
    tokens[np.cumsum(lengths) - 1] = EOD
    prefix = os.path.join(directory, "store")
    with tp.IndexedDatasetWriter(prefix, dtype=np.uint16) as writer:
        writer.add_documents(tokens, lengths)
    store = tp.IndexedDataset(prefix)
    return tp.GPTDataset(store, np.arange(len(store)), SAMPLES, tp.GPTSampleConfig(SEQ_LENGTH, EOD), seed)


class Side:
    """One loader with metrics on or off: `setup` switches metrics and starts it, `run` takes `count` batches."""

    def __init__(self, dataset: Any, workers: int, on: bool, count: int, seed: int) -> None:
        self.dataset, self.workers, self.on, self.count, self.seed = dataset, workers, on, count, seed
        self.iterator: Any = None

    def setup(self) -> None:
        if self.on:
            metrics.enable()
        else:
            metrics.disable()
        options = {"num_workers": self.workers, "prefetch_factor": 4} if self.workers else {}
        sampler = RandomSampler(len(self.dataset), 0, MICRO_BATCH, 0, 1, seed=self.seed)
        self.iterator = iter(StatefulLoader(self.dataset, sampler, **options))
        next(self.iterator)  # worker start-up and the first batch, untimed

    def run(self) -> None:
        for _ in range(self.count):
            next(self.iterator)
        self.iterator = None
        assert metrics.enabled() == self.on  # the side ran as named


def recording_cost(dataset: Any, calls: int, batch_seconds: float) -> Row:
    """The recorder's own time per batch (what the loader adds when on, besides two clock reads),
    against the time per batch of the loader with metrics off and num_workers=0."""
    metrics.enable()
    recorder = metrics.live.recorder
    assert recorder is not None
    batch = dataset.get_batch(np.arange(MICRO_BATCH))
    batch = {name: torch.from_numpy(np.asarray(value)) for name, value in batch.items()}
    seconds = best_of(lambda: [recorder.loader_batch(batch, 1e-4, 3) for _ in range(calls)], 3) / calls
    metrics.disable()
    return Row("recorder", "loader_batch", "s", seconds, batch_seconds, "a batch, 0 workers", lower_is_better=True)


class _Child:
    """A child of the blend: samples are one token (only the mixture's own cost is timed)."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, k: int) -> dict[str, np.ndarray]:
        return {"tokens": np.array([k], np.int64)}


def update_seconds(n: int, updates: int, calls: int, repeat: int) -> float:
    """Seconds per ``set_mixture`` (metrics on) over a blend of ``n`` datasets holding ``updates`` updates."""
    rng = np.random.default_rng(n)
    weights = rng.dirichlet(np.ones(n), size=min(updates, 1000))
    size = 2 * updates + 10_000
    blend = AdaptiveBlend(
        [_Child(size)] * n,
        np.ones(n),
        num_samples=size,
        updates=[(2 * k + 2, weights[k % len(weights)]) for k in range(updates)],
    )
    blend.realize(2 * updates + 2)
    loader = StatefulLoader(blend, PretrainingSampler(size, 2 * updates + 2, 8, 0, 1))
    metrics.enable()
    try:
        seconds = best_of(lambda: [loader.set_mixture(weights[k % len(weights)]) for k in range(calls)], repeat)
        assert metrics.registry().get_sample_value("tokenport_mixture_weight_updates_total") == calls * repeat
    finally:
        metrics.disable()
    return seconds / calls


def update_rows(quick: bool) -> list[Row]:
    """The cost of one update with metrics on after many updates, beside the same after 10 updates."""
    rows = []
    for n, many in ((10, 10**5 if quick else 10**6), (1000, 10**3 if quick else 10**4)):
        few = update_seconds(n, 10, 100, 15)
        after = update_seconds(n, many, 100, 15)
        print(f"mixture update n={n}: {after * 1e6:.1f} us after {many:,} updates, {few * 1e6:.1f} us after 10")
        rows.append(
            Row(
                "mixture update",
                f"n={n}, after many updates",
                "s/update",
                after,
                few,
                "after 10 updates",
                50e-6,
                "<50 us",
                lower_is_better=True,
                absolute=True,
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="400 batches per run instead of 2000")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per side")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--dir", default=None, help="scratch directory (default: a new temporary one)")
    args = parser.parse_args()
    count = 400 if args.quick else 2000
    torch.set_num_threads(1)
    rows = []
    with scratch_directory(args.dir, "bench_metrics_", args.quick) as directory:
        dataset = gpt_dataset(directory, args.seed)
        batch_seconds = {}
        for workers in (0, 2):
            off = Side(dataset, workers, False, count, args.seed)
            again = Side(dataset, workers, False, count, args.seed)  # the noise floor: off against off
            on = Side(dataset, workers, True, count, args.seed)
            times = best_of_each([off.run, on.run, again.run], args.repeat, [off.setup, on.setup, again.setup])
            metrics.disable()
            rate_off, rate_on, rate_again = (count * MICRO_BATCH / t for t in times)
            case = f"num_workers={workers}"
            batch_seconds[workers] = times[0] / count
            rows.append(Row("loader", case, "samples/s", rate_on, rate_off, "metrics off", 0.99, ">=0.99x (cost < 1%)"))
            rows.append(Row("loader", case + " (A/A)", "samples/s", rate_again, rate_off, "metrics off"))
        rows.append(recording_cost(dataset, count * 100, batch_seconds[0]))
    rows += update_rows(args.quick)
    print_table(rows)


if __name__ == "__main__":
    main()
