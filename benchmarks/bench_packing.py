"""tokenport.packing: best/first/next fit decreasing on 10^6 sequences, Karmarkar-Karp balancing.

Lengths are lognormal (mean ~600 tokens, log-space sigma 1.0, so ~0.8% are longer than a bin and
are cut with split_long=True, as bfd_split does). Every figure is the best of N runs timed with
time.perf_counter, the packers timed in turns (A B C A B C ...), after a warm-up call (numba).
No peer is timed: the baselines are tokenport's own first/next fit and a greedy (LPT) balancer.

    python benchmarks/bench_packing.py            # 10^6 lengths (well under a minute)
    python benchmarks/bench_packing.py --quick    # 10^5 lengths (seconds)

Rows:
  pack time     pack_best_fit_arrays on all lengths, capacity 4096: goal <= 5 s (full run);
                against first fit and next fit decreasing (no goal).
  padding       padding % (100 - efficiency %, efficiency = tokens / (bins * capacity)) of best
                fit: goal <= 1% (efficiency >= 99%); first and next fit shown against it.
  balance       karmarkar_karp of 10^4 sequences over 8 ranks, workload = L (linear) and
                L + L^2/1024 (attention-like), with and without equal_size: the max relative
                deviation of a rank's workload from the mean, goal <= 1%, against greedy LPT.
"""

from __future__ import annotations

import argparse
import heapq

import numpy as np

from _harness import Row, best_of_each, lognormal_lengths, print_goals, print_table, scratch_directory
from tokenport.packing import (
    balance_metrics,
    karmarkar_karp,
    pack_best_fit_arrays,
    pack_first_fit_arrays,
    pack_next_fit_arrays,
    packing_metrics,
    workload,
)

CAPACITY = 4096
MEAN_LENGTH = 600
SIGMA = 1.0
RANKS = 8
SEQUENCES = 10_000


def check_packing(arrays, lengths: np.ndarray) -> None:
    """Exit unless every token is placed once and no bin is over capacity."""
    bin_of, item, offset, length = arrays
    if np.bincount(bin_of, weights=length).max() > CAPACITY:
        raise SystemExit("a bin is over capacity")
    if not np.array_equal(np.bincount(item, weights=length, minlength=lengths.size), lengths):
        raise SystemExit("tokens placed do not add up to the lengths")
    if np.unique(item * (lengths.max() + 1) + offset).size != item.size:
        raise SystemExit("two pieces of an item start at the same offset")


def lpt(workloads: np.ndarray, k: int) -> list[list[int]]:
    """Greedy longest-processing-time: each item, largest first, to the lightest rank."""
    heap = [(0.0, g) for g in range(k)]
    groups: list[list[int]] = [[] for _ in range(k)]
    for i in np.argsort(-workloads, kind="stable").tolist():
        total, g = heapq.heappop(heap)
        groups[g].append(i)
        heapq.heappush(heap, (total + float(workloads[i]), g))
    return groups


def bench_pack(rows: list[Row], lengths: np.ndarray, args) -> None:
    packers = (
        ("best fit", pack_best_fit_arrays),
        ("first fit", pack_first_fit_arrays),
        ("next fit", pack_next_fit_arrays),
    )
    metrics = {}
    for name, packer in packers:
        packer(lengths[:1000], CAPACITY, split_long=True)  # warm (load numba's cache)
        arrays = packer(lengths, CAPACITY, split_long=True)
        check_packing(arrays, lengths)
        metrics[name] = packing_metrics(arrays, CAPACITY)
        m = metrics[name]
        print(
            f"  {name}: {m['num_bins']:,} bins, {m['tokens']:,} tokens, efficiency {100 * m['efficiency']:.4f}%, "
            f"padding {m['padding_tokens']:,} tokens",
            flush=True,
        )
    times = best_of_each([lambda p=p: p(lengths, CAPACITY, split_long=True) for _, p in packers], args.repeat)
    case = f"{lengths.size:,} lengths, cap {CAPACITY}"
    budget = 5.0 if lengths.size >= 10**6 else 0.5
    rows.append(
        Row(
            "pack time",
            case,
            "s",
            times[0],
            budget,
            f"the {budget:g} s budget",
            1.0,
            f"<={budget:g} s",
            lower_is_better=True,
        )
    )
    for (name, _), t in zip(packers[1:], times[1:]):
        rows.append(Row("pack time", case, "s", times[0], t, f"{name} decreasing", lower_is_better=True))
    padding = {name: 100 * m["padding_ratio"] for name, m in metrics.items()}
    rows.append(
        Row("padding %", case, "%", padding["best fit"], 1.0, "the 1% budget", 1.0, "<=1%", lower_is_better=True)
    )
    for name in ("first fit", "next fit"):
        rows.append(
            Row("padding %", case, "%", padding["best fit"], padding[name], f"{name} decreasing", lower_is_better=True)
        )


def bench_balance(rows: list[Row], lengths: np.ndarray, args) -> None:
    for label, weights in (("linear", workload(lengths)), ("L+L^2/1024", workload(lengths, 1.0, 1 / 1024))):
        for equal_size in (False, True):
            groups = karmarkar_karp(weights, RANKS, equal_size=equal_size)
            ours = 100 * balance_metrics(groups, weights)["max_relative_deviation"]
            greedy = 100 * balance_metrics(lpt(weights, RANKS), weights)["max_relative_deviation"]
            t_kk, t_lpt = best_of_each(
                [lambda: karmarkar_karp(weights, RANKS, equal_size=equal_size), lambda: lpt(weights, RANKS)],
                args.repeat,
            )
            case = f"{lengths.size:,} seqs, {RANKS} ranks, {label}{', equal_size' if equal_size else ''}"
            rows.append(
                Row("balance max dev %", case, "%", ours, 1.0, "the 1% budget", 1.0, "<=1%", lower_is_better=True)
            )
            rows.append(Row("balance max dev %", case, "%", ours, greedy, "greedy LPT", lower_is_better=True))
            rows.append(Row("balance time", case, "s", t_kk, t_lpt, "greedy LPT (Python heapq)", lower_is_better=True))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="10^5 lengths instead of 10^6, fewer repeats")
    parser.add_argument("--count", type=int, default=None, help="number of lengths to pack (overrides --quick)")
    parser.add_argument("--dir", default=None, help="scratch directory (unused: all in memory)")
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args(argv)
    args.count = args.count or (10**5 if args.quick else 10**6)
    args.repeat = 2 if args.quick else 3
    rows: list[Row] = []
    with scratch_directory(args.dir, "bench_packing_", args.quick):
        rng = np.random.default_rng(args.seed)
        lengths = lognormal_lengths(rng, args.count, MEAN_LENGTH, SIGMA)
        print(
            f"  {lengths.size:,} lengths, mean {lengths.mean():.1f}, max {lengths.max():,}, "
            f"{int((lengths > CAPACITY).sum()):,} longer than {CAPACITY}",
            flush=True,
        )
        bench_pack(rows, lengths, args)
        bench_balance(rows, lengths[:SEQUENCES], args)
    print()
    print_table(rows)
    print()
    print("ratio: baseline / tokenport (time or padding; higher is better).")
    print_goals(rows)


if __name__ == "__main__":
    main()
