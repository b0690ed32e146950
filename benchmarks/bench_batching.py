"""tokenport.sampling batching: padding of length grouping, BFD packing, KK balance, sampler overhead.

Two sets of lengths: the demo corpus (the Python stdlib's source files and docstrings, built with
tokenport.demo.corpus.build_demo_corpus and prepared into token stores with the byte-level tokenizer;
the lengths are the stores' sequence_lengths) and synthetic lognormal lengths (mean 600 tokens,
log-space sigma 1.0; 10^6 of them, 10^5 with --quick). Figures come from
tokenport.sampling.report.batching_report, so they are what `tokenport pack-report` prints.

    python benchmarks/bench_batching.py            # whole stdlib, 10^6 lengths (about a minute)
    python benchmarks/bench_batching.py --quick    # 300 stdlib files, 10^5 lengths (seconds)

Rows (batch sizes 8 and 32):
  padding       % of padded slots holding no token, batches padded to their longest: tokenport's
                numpy-seeded length grouping against random batching and against transformers'
                grouping (torch generator, same seed); no goal.
  grouping time length_grouped_order(seed=) against transformers' get_length_grouped_indices on
                the synthetic lengths; no goal.
  packing       pack_best_fit_arrays(split_long=True) efficiency at capacity 4096: goal >= 99%.
  balance       Karmarkar-Karp across 8 ranks of each global batch of 8 x batch-size items of a
                random order: max relative deviation of a rank's tokens from the mean, averaged
                over all global batches: goal <= 1%; round robin shown against it, and the lower
                bound (mean over batches of max(0, longest item / mean rank load - 1)).
  sampler       time per micro-batch of iterating PretrainingSampler / RandomSampler (rank 0 of
                8) over the synthetic set: goal <= 10 us.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from _harness import Row, best_of, best_of_each, lognormal_lengths, print_goals, print_table, scratch_directory
from tokenport.corpus import PrepareConfig, prepare
from tokenport.demo.corpus import build_demo_corpus
from tokenport.indexed.inspect import lengths_of
from tokenport.sampling import PretrainingSampler, RandomSampler, length_grouped_order
from tokenport.sampling.report import batching_report

CAPACITY = 4096
MEAN_LENGTH = 600
SIGMA = 1.0
RANKS = 8
BATCH_SIZES = (8, 32)


def demo_lengths(directory: str, limit: int | None) -> np.ndarray:
    """The sequence lengths of the demo corpus (code, then prose) prepared with the byte tokenizer."""
    corpus = build_demo_corpus(os.path.join(directory, "corpus"), limit=limit)
    config = PrepareConfig(inputs=(corpus.code_path, corpus.prose_path), output=os.path.join(directory, "stores"))
    result = prepare(config)
    return lengths_of(result.parts)


def bench_report(rows: list[Row], name: str, lengths: np.ndarray, seed: int) -> None:
    """Padding, packing and balance rows of one set of lengths."""
    case = f"{name}, {lengths.size:,} seqs"
    for batch_size in BATCH_SIZES:
        t0 = time.perf_counter()
        report = batching_report(lengths, batch_size, capacity=CAPACITY, data_parallel_size=RANKS, seed=seed)
        print(f"  report {name} bs {batch_size}: {time.perf_counter() - t0:.2f} s", flush=True)
        section = f"padding, bs {batch_size}"
        grouped = 100 * report["grouped_padding_ratio"]
        rows.append(
            Row(
                section,
                case,
                "pad %",
                grouped,
                100 * report["random_padding_ratio"],
                "random batching",
                lower_is_better=True,
            )
        )
        if report["hf_grouped_padding_ratio"] is not None:
            rows.append(
                Row(
                    section,
                    case,
                    "pad %",
                    grouped,
                    100 * report["hf_grouped_padding_ratio"],
                    "transformers grouping",
                    lower_is_better=True,
                )
            )
        section = f"balance, bs {batch_size}"
        kk = 100 * report["balance_mean"]
        rows.append(
            Row(
                section,
                f"{case}, {report['balance_global_batches']:,} x {RANKS}x{batch_size}",
                "dev %",
                kk,
                1.0,
                "the 1% goal",
                1.0,
                "<=1%",
                lower_is_better=True,
            )
        )
        rows.append(
            Row(
                section,
                f"{case}, worst batch {100 * report['balance_worst']:.1f}%",
                "dev %",
                kk,
                100 * report["round_robin_mean"],
                "round robin",
                lower_is_better=True,
            )
        )
        rows.append(
            Row(
                section,
                f"{case}, bound: longest item alone",
                "dev %",
                kk,
                100 * report["balance_bound_mean"],
                "lower bound (no whole-item split beats it)",
                lower_is_better=True,
            )
        )
    efficiency = 100 * report["packing_efficiency"]
    rows.append(
        Row(
            "packing, BFD 4096",
            f"{case}, {report['packing_num_bins']:,} bins, {efficiency:.3f}%",
            "eff %",
            100 * report["packing_efficiency"],
            99.0,
            "the 99% goal",
            1.0,
            ">=99%",
        )
    )


def bench_grouping_time(rows: list[Row], lengths: np.ndarray, seed: int) -> None:
    """length_grouped_order(seed=) against transformers' get_length_grouped_indices, if installed."""
    try:
        import torch
        from transformers.trainer_pt_utils import get_length_grouped_indices
    except ImportError:
        print("  transformers or torch missing: no grouping time row", flush=True)
        return
    as_list = lengths.tolist()
    for batch_size in BATCH_SIZES:

        def ours():
            length_grouped_order(lengths, batch_size, seed=seed)

        def theirs():
            generator = torch.Generator()
            generator.manual_seed(seed)
            get_length_grouped_indices(as_list, batch_size, generator=generator)

        t_ours, t_theirs = best_of_each([ours, theirs], 3)
        rows.append(
            Row(
                f"grouping time, bs {batch_size}",
                f"lognormal, {lengths.size:,} seqs",
                "s",
                t_ours,
                t_theirs,
                "transformers get_length_grouped_indices",
                lower_is_better=True,
            )
        )


def bench_samplers(rows: list[Row], total: int, seed: int) -> None:
    """Time per micro-batch of iterating the pretraining samplers (rank 0 of RANKS)."""
    for batch_size in BATCH_SIZES:
        for cls in (PretrainingSampler, RandomSampler):
            extra = {"seed": seed} if cls is RandomSampler else {}

            def run():
                sampler = cls(total, 0, batch_size, 0, RANKS, **extra)
                for _ in sampler:
                    pass

            run()
            steps = len(cls(total, 0, batch_size, 0, RANKS, **extra))
            per_batch = best_of(run, 3) / steps
            rows.append(
                Row(
                    f"sampler, bs {batch_size}",
                    f"{cls.__name__}, {steps:,} micro-batches",
                    "s",
                    per_batch,
                    10e-6,
                    "the 10 us budget",
                    1.0,
                    "<=10 us",
                    lower_is_better=True,
                )
            )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="300 stdlib files and 10^5 synthetic lengths")
    parser.add_argument("--dir", default=None, help="scratch directory (default: a new temporary one)")
    parser.add_argument("--count", type=int, default=None, help="synthetic lengths (default 10^6, quick 10^5)")
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args(argv)
    count = args.count or (10**5 if args.quick else 10**6)
    rows: list[Row] = []
    with scratch_directory(args.dir, "bench_batching_", args.quick) as directory:
        t0 = time.perf_counter()
        demo = demo_lengths(directory, 300 if args.quick else None)
        print(
            f"  demo corpus: {demo.size:,} sequences, {int(demo.sum()):,} tokens, mean {demo.mean():.1f}, "
            f"max {int(demo.max()):,}; built and prepared in {time.perf_counter() - t0:.1f} s",
            flush=True,
        )
    synthetic = lognormal_lengths(np.random.default_rng(args.seed), count, MEAN_LENGTH, SIGMA)
    bench_report(rows, "demo corpus", demo, args.seed)
    bench_report(rows, "lognormal", synthetic, args.seed)
    bench_grouping_time(rows, synthetic, args.seed)
    bench_samplers(rows, count, args.seed)
    print()
    print_table(rows)
    print()
    print("ratio: baseline / tokenport (lower-is-better rows: padding %, deviation %, time; higher is better).")
    print_goals(rows)


if __name__ == "__main__":
    main()
