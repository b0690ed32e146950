"""Loader throughput into the training loop: tokenport's StatefulLoader vs DataLoader over megatron-core's GPTDataset.

Both sides read the very same token stores (written by tokenport; the formats are
byte-compatible), in the same process, with the files in the page cache; seq_length 2048,
micro batch 8, shuffled both, no dense attention mask on either side. The figure is the samples
per second the training loop receives: each batch is consumed (every tensor summed), the clock
starts after the first batch (worker start-up is left out) and stops after the last. Best of N
runs, the sides timed in turns (A B A B ...).

    python benchmarks/bench_loader.py            # 400 batches per run (about 2 minutes)
    python benchmarks/bench_loader.py --quick    # the same on stores a quarter the size, 60 batches, best of 2

The headline (goal >= 3x): "local, 2 workers", StatefulLoader over one store against megatron's, 2 workers.

Sides:
  tokenport  StatefulLoader(dataset, RandomSampler(len(dataset), 0, 8, 0, 1, seed)), dataset a
             tokenport GPTDataset (one store) or the train split of build_datasets (two stores
             blended 0.3/0.7): each micro-batch is one get_batch call, as tensors sharing its
             arrays; the batch holds tokens, labels, loss_mask, position_ids, cu_seqlens and
             max_seqlen (the blend's dataset_id besides).
  tokenport, 4 fields  the same with fields=("tokens", "labels", "loss_mask", "position_ids"):
             megatron's four tensors.
  tokenport, per sample  the same with collate_fn=default_collate: the loader then fetches sample
             by sample (its path for a user collate_fn, and its only path before the batch path).
  megatron   torch.utils.data.DataLoader(dataset, batch_size=8, shuffle=True), dataset megatron-core's
             GPTDataset / BlendedDataset built with BlendedMegatronDatasetBuilder on the same stores
             and arguments (split "1,0,0", create_attention_mask=False): tokens, labels, loss_mask,
             position_ids (the blend's dataset_id besides). The two datasets are checked to hold the
             same tokens first.
Each with num_workers 0 and 2. With one store and 2 workers, also the CPU time a batch costs the
loop and its workers together (getrusage; barely moved by other jobs on the machine). Last, the
hand-off ceiling: a DataLoader with 2 workers over a dataset that does no work, handing 4 or 6
tensors of (8, 2048) int64 per batch (megatron's batch holds 4 tensors, tokenport's 6: cu_seqlens
and max_seqlen besides; blends one more each).
"""

from __future__ import annotations

import argparse
import functools
import gc
import logging
import os
import resource
import types
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

import tokenport as tp
from _harness import Row, best_of_each, lognormal_lengths, print_table, scratch_directory

EOD = 2
SEQ_LENGTH = 2048
MICRO_BATCH = 8
MEAN_LENGTH = 1000
VOCAB = 50_000
DOCUMENTS = (20_000, 12_000)  # ~2*10^7 and ~1.2*10^7 tokens
SAMPLES = 50_000  # samples of each dataset: several epochs of the store
QUICK = 4  # --quick: stores and samples this many times smaller
GOAL = 3.0  # StatefulLoader over one local store, 2 workers: samples/s against megatron's DataLoader
CPU_BATCHES = 200  # batches of the loops whose CPU time is measured (worker start-up must not swamp them)
WEIGHTS = (0.3, 0.7)
FOUR_FIELDS = ("tokens", "labels", "loss_mask", "position_ids")  # what megatron's batch holds


def write_store(prefix: str, documents: int, seed: int) -> str:
    """A uint16 store of random documents (lognormal lengths), each ending in EOD; returns the prefix."""
    rng = np.random.default_rng(seed)
    lengths = lognormal_lengths(rng, documents, MEAN_LENGTH, 1.0)
    tokens = rng.integers(EOD + 1, VOCAB, int(lengths.sum())).astype(np.uint16)
    tokens[np.cumsum(lengths) - 1] = EOD
    with tp.IndexedDatasetWriter(prefix, dtype=np.uint16) as writer:
        writer.add_documents(tokens, lengths)
    return prefix


def megatron_dataset(prefixes: list[str], weights: list[float] | None, seed: int, samples: int) -> Any:
    """megatron-core's train dataset for the stores, built by its BlendedMegatronDatasetBuilder."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.getLogger("megatron").setLevel(logging.ERROR)
        from megatron.core.datasets import gpt_dataset
        from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder

        tokenizer = types.SimpleNamespace(eod=EOD, vocab_size=None, unique_identifiers={"bench_loader": "x"})
        config = gpt_dataset.GPTDatasetConfig(
            random_seed=seed,
            sequence_length=SEQ_LENGTH,
            blend=(prefixes, weights),
            split="1,0,0",
            path_to_cache=None,  # its GPTDatasets then cache under <prefix>/cache, in the scratch directory
            tokenizer=tokenizer,
            reset_position_ids=False,
            reset_attention_mask=False,
            eod_mask_loss=False,
            create_attention_mask=False,
        )
        train, _, _ = BlendedMegatronDatasetBuilder(
            gpt_dataset.GPTDataset, [samples, 0, 0], lambda: True, config
        ).build()
    return train


def tokenport_dataset(prefixes: list[str], weights: list[float] | None, seed: int, samples: int) -> Any:
    """tokenport's train dataset for the same stores and arguments (Megatron's sample order)."""
    config = tp.GPTSampleConfig(seq_length=SEQ_LENGTH, eod_id=EOD)
    if weights is None:
        spec: list[str] = prefixes
    else:
        spec = [x for w, p in zip(weights, prefixes) for x in (str(w), p)]
    train, _, _ = tp.build_datasets(
        spec, sizes=[samples, 0, 0], config=config, seed=seed, split="1,0,0", algorithm="megatron"
    )
    return train


def check_same(ours: Any, theirs: Any) -> None:
    """Raise SystemExit unless both datasets have the same length and tokens at a spread of ids."""
    if len(ours) != len(theirs):
        raise SystemExit(f"the datasets differ in length: tokenport {len(ours):,}, megatron {len(theirs):,}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in np.linspace(0, len(ours) - 1, 50).astype(int).tolist():
            if not np.array_equal(np.asarray(ours[i]["tokens"]), theirs[i]["tokens"].numpy()):
                raise SystemExit(f"sample {i}: tokenport's tokens differ from megatron's")


def consume(iterator: Iterator[Any], count: int) -> None:
    """Take `count` batches from the training loop's side, touching every tensor (summed)."""
    total = 0.0
    for _ in range(count):
        batch = next(iterator)
        for value in batch.values():
            total += float(value.sum())
    if total != total:  # NaN: some tensor was garbage
        raise SystemExit("a batch summed to NaN")


class Side:
    """One loader under test: `setup` builds it (and starts its iterator, with workers), `run` times it."""

    def __init__(self, make: Any, count: int) -> None:
        self.make, self.count = make, count
        self.iterator: Any = None

    def setup(self) -> None:
        self.iterator = iter(self.make())
        next(self.iterator)  # worker start-up and the first batch, untimed

    def run(self) -> None:
        consume(self.iterator, self.count)
        self.iterator = None


class Blank(torch.utils.data.Dataset):
    """A dataset doing no work: each sample is `fields` zero tensors of seq_length int64."""

    def __init__(self, fields: int) -> None:
        self.fields = fields

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, idx: int) -> dict[str, torch.Tensor]:
        return {f"field{k}": torch.zeros(SEQ_LENGTH, dtype=torch.int64) for k in range(self.fields)}


def handoff_ceiling(count: int, repeat: int) -> None:
    """Print the samples/s a DataLoader with 2 workers hands over when its dataset does no work: the
    cost of moving each batch's tensors from a worker to the loop, per number of tensors."""
    sides = [
        Side(lambda k=k: torch.utils.data.DataLoader(Blank(k), batch_size=MICRO_BATCH, num_workers=2), count)
        for k in (4, 6)
    ]
    times = best_of_each([s.run for s in sides], repeat, [s.setup for s in sides])
    rates = ", ".join(f"{k} tensors {count * MICRO_BATCH / t:,.0f}" for k, t in zip((4, 6), times))
    print(f"hand-off ceiling, 2 workers, a dataset doing no work, samples/s: {rates}")


def cpu_seconds() -> float:
    """CPU seconds of this process and of its children that have exited (the loaders' workers)."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def cpu_per_batch(make: Any, count: int, repeat: int) -> float:
    """CPU seconds per batch of the loop and its workers together (best of ``repeat``): a loop of
    ``count + 10`` batches less one of 10, so worker start-up cancels out. Unlike samples/s, this
    hardly moves when other jobs load the machine."""

    def loop(batches: int) -> float:
        began = cpu_seconds()
        iterator = iter(make())
        consume(iterator, batches)
        del iterator
        gc.collect()  # the workers exit and are joined: their CPU time is counted
        return cpu_seconds() - began

    return min(loop(count + 10) - loop(10) for _ in range(repeat)) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller stores, 60 batches per run, best of 2")
    parser.add_argument("--batches", type=int, default=None, help="batches per timed run (overrides --quick)")
    parser.add_argument("--repeat", type=int, default=None, help="timed runs per side (default 3; --quick 2)")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--dir", default=None, help="scratch directory (default: a new temporary one)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message=".*set_vital")
    count = args.batches or (60 if args.quick else 400)
    repeat = args.repeat or (2 if args.quick else 3)
    scale = QUICK if args.quick else 1
    samples = SAMPLES // scale

    with scratch_directory(args.dir, "tp_bench_loader_", args.quick) as directory:
        prefixes = [
            write_store(os.path.join(directory, f"store{k}"), n // scale, args.seed + k)
            for k, n in enumerate(DOCUMENTS)
        ]
        rows: list[Row] = []
        for label, stores, weights in (("one store", prefixes[:1], None), ("blend of 2", prefixes, list(WEIGHTS))):
            ours = tokenport_dataset(stores, weights, args.seed, samples)
            theirs = megatron_dataset(stores, weights, args.seed, samples)
            check_same(ours, theirs)
            print(f"{label}: {len(ours):,} samples, checked equal to megatron's")
            for workers in (0, 2):

                def tokenport_loader(workers: int = workers, ours: Any = ours, **options: Any) -> Any:
                    sampler = tp.RandomSampler(len(ours), 0, MICRO_BATCH, 0, 1, seed=args.seed)
                    return tp.StatefulLoader(ours, sampler, num_workers=workers, **options)

                def megatron_loader(workers: int = workers, theirs: Any = theirs) -> Any:
                    generator = torch.Generator().manual_seed(args.seed)
                    return torch.utils.data.DataLoader(
                        theirs, batch_size=MICRO_BATCH, shuffle=True, num_workers=workers, generator=generator
                    )

                ours_sides = {
                    "StatefulLoader": tokenport_loader,
                    "StatefulLoader, 4 fields": functools.partial(tokenport_loader, fields=FOUR_FIELDS),
                    "StatefulLoader, per sample": functools.partial(
                        tokenport_loader, collate_fn=torch.utils.data.default_collate
                    ),
                }
                sides = [Side(make, count) for make in (*ours_sides.values(), megatron_loader)]
                *t_ours, t_theirs = best_of_each([s.run for s in sides], repeat, [s.setup for s in sides])
                done = count * MICRO_BATCH
                case = f"workers {workers}, {done:,} samples"
                peer = "DataLoader(megatron's)"
                for section, t in zip(ours_sides, t_ours):
                    rows.append(Row(f"{section}, {label}", case, "samples/s", done / t, done / t_theirs, peer))
                if label == "one store" and workers == 2:  # the headline, and the CPU each batch costs
                    rate, peer_rate = done / t_ours[0], done / t_theirs
                    rows.append(Row("StatefulLoader", "local, 2 workers", "samples/s", rate, peer_rate, peer, GOAL))
                    cpu = [1e3 * cpu_per_batch(m, CPU_BATCHES, repeat) for m in (tokenport_loader, megatron_loader)]
                    rows.append(
                        Row("StatefulLoader", "local, 2 workers", "ms CPU/batch", *cpu, peer, lower_is_better=True)
                    )
                rates = ", ".join(
                    f"{name} {done / t:,.0f}" for name, t in zip((*ours_sides, "megatron"), (*t_ours, t_theirs))
                )
                print(f"  workers {workers}: {rates} samples/s")
        print_table(rows)
        handoff_ceiling(count, repeat)


if __name__ == "__main__":
    main()
