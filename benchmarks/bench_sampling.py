"""tokenport vs transformers: length-grouped sample orders.

Both sides group the same lognormal lengths (mean ~1000 tokens) with a torch.Generator seeded
alike, in the same process; the outputs are checked equal before timing. transformers gets its
lengths as a list of Python ints (what its samplers convert to). Every figure is the best of N
runs timed with time.perf_counter, the sides timed in turns (A B A B ...).

    python benchmarks/bench_sampling.py --count 2000000   # the goal's size
    python benchmarks/bench_sampling.py                   # 10^7 lengths (a few minutes)
    python benchmarks/bench_sampling.py --quick           # 10^6 lengths (well under a minute)

Rows, for batch sizes 8 and 32:
  list in, list out  tokenport.sampling.get_length_grouped_indices (torch generator) given the same
                     list of ints as transformers' get_length_grouped_indices: goal >= 10x.
  array in, list out the same, given the numpy array (what a token store's sequence_lengths is).
  array              tokenport.sampling.length_grouped_order (the same order as an int64 array).
  numpy seed         the numpy-seeded path (seed=, no torch; a different order).
The floor of the list form is printed too: reading the list into an int64 array (array.array,
the fastest route) and turning the int64 order into a list of Python ints, which any
implementation that takes and returns lists pays.
"""

from __future__ import annotations

import argparse
import array
import time

import numpy as np
import torch
from transformers.trainer_pt_utils import get_length_grouped_indices as hf_grouped

from _harness import Row, best_of_each, lognormal_lengths, print_goals, print_table, scratch_directory
from tokenport.sampling import get_length_grouped_indices, length_grouped_order

MEAN_LENGTH = 1000
SIGMA = 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10^6 lengths instead of 10^7")
    parser.add_argument("--count", type=int, default=None, help="number of lengths (overrides --quick)")
    parser.add_argument("--repeat", type=int, default=None, help="timed runs per side (default 3, quick 2)")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--dir", default=None, help="scratch directory (unused; kept for a uniform CLI)")
    args = parser.parse_args()
    count = args.count or (10**6 if args.quick else 10**7)
    repeat = args.repeat or (2 if args.quick else 3)

    with scratch_directory(args.dir, "tp_bench_sampling_", args.quick):
        lengths = lognormal_lengths(np.random.default_rng(args.seed), count, MEAN_LENGTH, SIGMA)
        as_list = lengths.tolist()

        def gen() -> torch.Generator:
            return torch.Generator().manual_seed(args.seed)

        t0 = time.perf_counter()
        torch.randperm(count, generator=gen())
        print(f"{count:,} lengths; torch.randperm alone (paid by both sides): {time.perf_counter() - t0:.3f} s")

        rows: list[Row] = []
        for batch_size in (8, 32):
            ours = get_length_grouped_indices(as_list, batch_size, generator=gen())
            if ours != hf_grouped(as_list, batch_size, generator=gen()):
                raise SystemExit(f"batch {batch_size}: tokenport's order differs from transformers'")
            if get_length_grouped_indices(lengths, batch_size, generator=gen()) != ours:
                raise SystemExit(f"batch {batch_size}: an array input gives another order than the list")
            if length_grouped_order(lengths, batch_size, generator=gen()).tolist() != ours:
                raise SystemExit(f"batch {batch_size}: length_grouped_order differs from the list form")
            order = np.asarray(ours, dtype=np.int64)
            del ours
            t_list_in, t_list, t_array, t_numpy, t_theirs, t_read, t_write = best_of_each(
                [
                    lambda: get_length_grouped_indices(as_list, batch_size, generator=gen()),
                    lambda: get_length_grouped_indices(lengths, batch_size, generator=gen()),
                    lambda: length_grouped_order(lengths, batch_size, generator=gen()),
                    lambda: length_grouped_order(lengths, batch_size, seed=args.seed),
                    lambda: hf_grouped(as_list, batch_size, generator=gen()),
                    lambda: np.frombuffer(array.array("q", as_list), dtype=np.int64),
                    lambda: order.tolist(),
                ],
                repeat,
            )
            case = f"{count:,} lengths, batch {batch_size}"
            name = "transformers get_length_grouped_indices"
            rows.append(
                Row("length grouping, list in + out", case, "s", t_list_in, t_theirs, name, 10.0, lower_is_better=True)
            )
            rows.append(
                Row("length grouping, array in, list out", case, "s", t_list, t_theirs, name, lower_is_better=True)
            )
            rows.append(Row("length grouping, array", case, "s", t_array, t_theirs, name, lower_is_better=True))
            rows.append(Row("length grouping, numpy seed", case, "s", t_numpy, t_theirs, name, lower_is_better=True))
            floor = t_read + t_write
            print(
                f"batch {batch_size}: list floor {floor * 1e3:.1f} ms (list -> int64 array {t_read * 1e3:.1f} ms, "
                f"order -> list {t_write * 1e3:.1f} ms); tokenport list in + out {t_list_in * 1e3:.1f} ms, "
                f"so {(t_list_in - floor) * 1e3:.1f} ms above the floor; transformers {t_theirs * 1e3:.0f} ms, "
                f"{t_theirs / floor:.1f}x the floor alone",
                flush=True,
            )
        print_table(rows)
        print_goals(rows)


if __name__ == "__main__":
    main()
